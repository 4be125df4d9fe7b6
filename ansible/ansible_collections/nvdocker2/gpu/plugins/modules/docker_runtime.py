#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: nvdocker2 contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: docker_runtime
short_description: Add or remove the NVIDIA runtime in Docker's daemon.json with nvdocker2
description:
  - Runs C(nvdocker2 install --json) or C(nvdocker2 uninstall --json) on the managed host and
    reports what it did. nvdocker2 merges the runtime into daemon.json (every other key, value,
    order and the file's style stay), backs the old file up, writes it atomically, reloads
    dockerd, verifies through the Engine API that dockerd runs the change, and puts the old file
    back when dockerd refuses it.
  - Check mode is C(nvdocker2 --dry-run), which runs every check an apply runs before writing
    (schema, flags of the running dockerd that would clash with the file, C(dockerd --validate)),
    so C(changed) is exact and a host whose apply would fail fails in check mode too. Nothing is
    written and no state directory is created.
  - Diff mode returns the text of daemon.json before and after (in check mode, exactly what an
    apply would write), with credentials in URLs masked the way nvdocker2 masks them.
  - The module uses only the Python standard library, so the Python that runs it needs none of
    nvdocker2's libraries. It passes every location through as a flag and does not read
    E(DOCKER_HOST), E(NVDOCKER2_STATE_DIR) or E(NVDOCKER2_DEBUG) from the managed host's
    environment.
version_added: "0.1.0"
author:
  - nvdocker2 contributors (!UNKNOWN)
requirements:
  - nvdocker2 (the C(.deb) or C(.rpm) of this project) on the managed host
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
options:
  state:
    description:
      - V(present) adds (or updates) the runtime entry; V(absent) undoes what install did, from
        nvdocker2's journal (the previous entry and default runtime come back).
    type: str
    choices: [present, absent]
    default: present
  name:
    description: Name of the runtime entry in daemon.json.
    type: str
    default: nvidia
  path:
    description:
      - Absolute path of C(nvidia-container-runtime) on the managed host.
      - Default is the one installed beside nvdocker2.
    type: str
  runtime_args:
    description: The entry's C(runtimeArgs).
    type: list
    elements: str
    default: []
  set_default:
    description: Also make the runtime dockerd's C(default-runtime).
    type: bool
    default: false
  mode:
    description:
      - Also set C([nvidia-container-runtime] mode) in the runtime's config.toml
        (V(legacy) or V(direct)). V(cdi) is passed as C(--mode cdi) to nvdocker2 versions
        that support CDI mode.
      - Omitted, the mode is left as it is.
    type: str
    choices: [legacy, direct, cdi]
  config:
    description:
      - daemon.json to change.
      - Default is what nvdocker2 picks for the host (rootful C(/etc/docker/daemon.json),
        rootless, snap).
    type: path
  state_dir:
    description:
      - nvdocker2's state directory (backups, journal, lock); passed as E(NVDOCKER2_STATE_DIR).
      - Default is nvdocker2's (C(/var/lib/nvdocker2) for root).
    type: path
  reload:
    description: How dockerd is told about the change (nvdocker2 C(--reload)).
    type: str
    choices: [auto, systemd, sysv, signal, none]
    default: auto
  restart:
    description: Restart dockerd instead of reloading it (containers without live-restore stop).
    type: bool
    default: false
  verify:
    description: Ask dockerd (C(GET /info)) whether it runs the change; V(false) only writes.
    type: bool
    default: true
  docker_host:
    description:
      - Engine API URL to verify through, for example V(unix:///var/run/docker.sock).
      - Default is the host's Docker socket (never the managed host's E(DOCKER_HOST)).
    type: str
  pidfile:
    description: dockerd's pid file (checked to be a dockerd before it is signalled).
    type: path
  timeout:
    description: Seconds to wait for nvdocker2's lock and for dockerd to report the change.
    type: float
    default: 30
  executable:
    description:
      - The nvdocker2 command; a name is looked up on the managed host's PATH and in
        C(/usr/bin), C(/usr/local/bin), C(/usr/sbin), C(/usr/local/sbin).
    type: str
    default: nvdocker2
notes:
  - A failure has nvdocker2's C(error:) line as RV(msg), its exit code as RV(rc) (2 bad input,
    3 environment, 4 dockerd refused the change and it was rolled back, 5 the rollback failed)
    and RV(rolled_back) true exactly when RV(rc) is 4.
  - nvdocker2's warnings become Ansible warnings.
"""

EXAMPLES = r"""
- name: Add the nvidia runtime and make it the default
  nvdocker2.gpu.docker_runtime:
    set_default: true

- name: Preview the change on a host whose dockerd runs under systemd
  nvdocker2.gpu.docker_runtime:
    reload: systemd
  check_mode: true
  diff: true

- name: A dockerd with its own socket, pid file and daemon.json
  nvdocker2.gpu.docker_runtime:
    config: /srv/docker/daemon.json
    docker_host: unix:///srv/docker/docker.sock
    pidfile: /srv/docker/docker.pid
    reload: signal
    state_dir: /srv/nvdocker2

- name: Take the runtime out again (the previous entry and default come back)
  nvdocker2.gpu.docker_runtime:
    state: absent
"""

RETURN = r"""
verified:
  description: dockerd was seen running the change (after a reload, through the Engine API).
  returned: success
  type: bool
  sample: true
action:
  description: What nvdocker2 ran.
  returned: success
  type: str
  sample: install
config:
  description: The daemon.json that was (or would be) changed.
  returned: success
  type: str
  sample: /etc/docker/daemon.json
config_reason:
  description: Why nvdocker2 chose that file.
  returned: success
  type: str
  sample: given with --config
backup:
  description: Id of the backup taken before the write; null when nothing was written.
  returned: success
  type: str
  sample: 20261203T094501.123456Z-1a2b
backup_file:
  description: The backup's file; null when there was no file before or nothing was written.
  returned: success
  type: str
reload:
  description: How dockerd was told (V(none) when nothing was written).
  returned: success
  type: str
  sample: signal
notes:
  description: nvdocker2's notes (what it picked and why, what to run).
  returned: success
  type: list
  elements: str
changes:
  description: The keys that changed, as nvdocker2 reports them.
  returned: success
  type: list
  elements: dict
  sample: [{"key": "runtimes.nvidia", "action": "added"}]
dry_run:
  description: The module ran in check mode (nvdocker2 C(--dry-run)).
  returned: success
  type: bool
unified_diff:
  description: nvdocker2's unified diff of the change (check mode), credentials masked.
  returned: success, in check mode when changed
  type: str
msg:
  description: nvdocker2's C(error:) line (exit code 127 when nvdocker2 is not installed).
  returned: failure
  type: str
  sample: "error: dockerd does not answer on unix:///var/run/docker.sock (...); the change
    could not be verified"
rc:
  description: nvdocker2's exit code.
  returned: always
  type: int
  sample: 0
rolled_back:
  description: dockerd refused the change and the previous file was put back (RV(rc) 4).
  returned: always
  type: bool
  sample: false
hint:
  description: nvdocker2's C(hint:) line for a failure.
  returned: failure
  type: str
executable:
  description: The nvdocker2 that ran.
  returned: when found
  type: str
  sample: /usr/bin/nvdocker2
cmd:
  description: The command line that ran.
  returned: when nvdocker2 was found
  type: list
  elements: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

# Where a package puts nvdocker2 when the managed host's PATH is minimal (sudo, cron, ssh).
SEARCH_DIRS = ["/usr/bin", "/usr/local/bin", "/usr/sbin", "/usr/local/sbin"]
# The managed host's environment must not choose the daemon, the state or the output.
IGNORED_ENV = ("DOCKER_HOST", "DOCKER_CONTEXT", "NVDOCKER2_STATE_DIR", "NVDOCKER2_DEBUG")
INSTALL_HINT = (
    "install the nvdocker2 package on the host (the .deb or .rpm of nvdocker2; the role "
    "nvdocker2.gpu.gpu_host does it from gpu_host_package), or point executable at it"
)

BOTH = ("present", "absent")
# Each option that becomes a flag of `nvdocker2 install|uninstall`:
#   (option, flag, kind, the states whose command takes it)
# kind: "value" (flag VALUE), "each" (flag VALUE per list item), "switch" (flag when true),
# "unless" (flag when false). A new CLI option (an engine, a mode of uninstall) is one row.
FLAGS = (
    ("name", "--runtime-name", "value", BOTH),
    ("path", "--runtime-path", "value", ("present",)),
    ("runtime_args", "--runtime-arg", "each", ("present",)),
    ("set_default", "--set-default", "switch", ("present",)),
    ("mode", "--mode", "value", ("present",)),
    ("config", "--config", "value", BOTH),
    ("reload", "--reload", "value", BOTH),
    ("restart", "--restart", "switch", BOTH),
    ("verify", "--no-verify", "unless", BOTH),
    ("docker_host", "--docker-host", "value", BOTH),
    ("pidfile", "--pidfile", "value", BOTH),
    ("timeout", "--timeout", "value", BOTH),
)
COMMANDS = {"present": "install", "absent": "uninstall"}
# --json fields that do not go to the top level of the result as they are.
NOT_TOP_LEVEL = ("warnings", "diff", "before", "after", "error", "exit_code")


def command_line(executable, params, check_mode):
    """The argv of the nvdocker2 run for these module parameters."""
    state = params["state"]
    argv = [executable, COMMANDS[state], "--json"]
    for option, flag, kind, states in FLAGS:
        value = params.get(option)
        if state not in states or value is None:
            continue
        if kind == "value":
            argv += [flag, str(value)]
        elif kind == "each":
            for item in value:
                argv.append("%s=%s" % (flag, item))
        elif kind == "switch" and value:
            argv.append(flag)
        elif kind == "unless" and not value:
            argv.append(flag)
    if check_mode:
        argv.append("--dry-run")
    return argv


def _json_object(text):
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _error_line(rc, obj, stderr):
    """nvdocker2's `error:` line, else the best line it printed, else its exit code."""
    lines = [line.strip() for line in (stderr or "").splitlines() if line.strip()]
    for line in lines:
        if line.startswith("error:"):
            return line
    if obj and obj.get("error"):
        return "error: %s" % obj["error"]
    if lines:
        return lines[-1]
    return "nvdocker2 exited %d without a message" % rc


def _hint_line(obj, stderr):
    for line in (stderr or "").splitlines():
        if line.strip().startswith("hint:"):
            return line.strip()[len("hint:"):].strip()
    return (obj or {}).get("hint")


def map_result(rc, stdout, stderr, diff_mode):
    """How one nvdocker2 run becomes the module's outcome: (failed, result, warnings).

    The one place the CLI's exit code and --json fields are translated (SPEC §10): success
    puts the --json fields at the top level, the unified diff in `unified_diff` and the file's
    text in `diff`; a failure has the `error:` line as msg, the exit code as rc, and
    rolled_back exactly when the code is 4.
    """
    obj = _json_object(stdout)
    result = {"rc": rc, "rolled_back": rc == 4}
    warnings = [str(w) for w in (obj or {}).get("warnings") or []]
    if rc != 0 or obj is None or "changed" not in obj:
        result["changed"] = False
        result["msg"] = _error_line(rc, obj, stderr)
        hint = _hint_line(obj, stderr)
        if hint:
            result["hint"] = hint
        if rc == 0:
            printed = (stdout or stderr or "").strip()
            result["msg"] = "nvdocker2 printed no JSON result: %s" % printed
        result["stderr"] = stderr
        return True, result, warnings
    for key, value in obj.items():
        if key not in NOT_TOP_LEVEL:
            result[key] = value
    result["changed"] = bool(obj["changed"])
    if obj.get("diff"):
        result["unified_diff"] = obj["diff"]
    if diff_mode:
        result["diff"] = {
            "before": obj.get("before") or "",
            "after": obj.get("after") or "",
            "before_header": "%s (before)" % obj.get("config"),
            "after_header": "%s (after)" % obj.get("config"),
        }
    return False, result, warnings


def find_executable(module, name):
    if os.path.isabs(name):
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    return module.get_bin_path(name, required=False, opt_dirs=SEARCH_DIRS)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", default="present", choices=["present", "absent"]),
            name=dict(type="str", default="nvidia"),
            path=dict(type="str"),
            runtime_args=dict(type="list", elements="str", default=[]),
            set_default=dict(type="bool", default=False),
            mode=dict(type="str", choices=["legacy", "direct", "cdi"]),
            config=dict(type="path"),
            state_dir=dict(type="path"),
            reload=dict(type="str", default="auto",
                        choices=["auto", "systemd", "sysv", "signal", "none"]),
            restart=dict(type="bool", default=False),
            verify=dict(type="bool", default=True),
            docker_host=dict(type="str"),
            pidfile=dict(type="path"),
            timeout=dict(type="float", default=30),
            executable=dict(type="str", default="nvdocker2"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    executable = find_executable(module, params["executable"])
    if executable is None:
        module.fail_json(
            msg="error: %s not found on the managed host (looked on PATH and in %s)"
            % (params["executable"], ", ".join(SEARCH_DIRS)),
            hint=INSTALL_HINT, rc=127, rolled_back=False, changed=False,
        )
    for name in IGNORED_ENV:
        os.environ.pop(name, None)
    env = {"PYTHONIOENCODING": "utf-8"}
    if params["state_dir"]:
        env["NVDOCKER2_STATE_DIR"] = params["state_dir"]
    argv = command_line(executable, params, module.check_mode)
    rc, stdout, stderr = module.run_command(argv, environ_update=env)
    failed, result, warnings = map_result(rc, stdout, stderr, module._diff)
    for warning in warnings:
        module.warn(warning)
    result["executable"] = executable
    result["cmd"] = argv
    if failed:
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
