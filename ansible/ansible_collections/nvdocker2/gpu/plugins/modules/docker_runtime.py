#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: nvdocker2 contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: docker_runtime
short_description: Add or remove the NVIDIA runtime in Docker, containerd or CRI-O with nvdocker2
description:
  - Runs C(nvdocker2 install --json) or C(nvdocker2 uninstall --json) on the managed host and
    reports what it did. nvdocker2 merges the runtime into daemon.json (every other key, value,
    order and the file's style stay), backs the old file up, writes it atomically, reloads
    dockerd, verifies through the Engine API that dockerd runs the change, and puts the old file
    back when dockerd refuses it.
  - With O(engine=containerd) or O(engine=crio) it does the same to containerd's config.toml or
    CRI-O's configuration (C(nvdocker2 --engine containerd|crio)) - backup, atomic write, restart
    through systemd, a check that the engine runs the change, and the old file back when it
    does not.
  - Check mode is C(nvdocker2 --dry-run --require-daemon), which runs every check an apply runs
    before writing (schema, flags of the running dockerd that would clash with the file,
    C(dockerd --validate)), so C(changed) is exact and a host whose apply would fail fails in
    check mode too, a host whose engine is not running among them. Nothing is
    written and no state directory is created.
  - Diff mode returns the text of daemon.json before and after (in check mode, exactly what an
    apply would write), with credentials in URLs masked the way nvdocker2 masks them.
  - The module uses only the Python standard library, so the Python that runs it needs none of
    nvdocker2's libraries. It passes every location through as a flag.
  - nvdocker2 runs with an environment made of an allow-list, whatever the managed host or the
    task's C(environment) sets. Passed on when set, and nothing else, are E(PATH), E(HOME),
    E(USER), E(LOGNAME), E(LANG), E(LANGUAGE), E(LC_ALL), E(LC_CTYPE), E(LC_MESSAGES), E(TZ),
    E(XDG_RUNTIME_DIR), E(XDG_CONFIG_HOME) and E(XDG_STATE_HOME) (the last three used only
    when the module runs as a user other than root, for rootless Docker). The module sets
    E(PYTHONIOENCODING=utf-8) and, from its options, E(NVDOCKER2_STATE_DIR) (O(state_dir))
    and E(NVIDIA_CONTAINER_RUNTIME_CONFIG) (O(runtime_config)). So E(DOCKER_HOST),
    E(DOCKER_CONTEXT), E(NVDOCKER2_DEBUG), any E(NVDOCKER2_*) or
    E(NVIDIA_CONTAINER_RUNTIME_CONFIG) set on the host or the task, E(PYTHONPATH),
    E(LD_PRELOAD) and the like never reach it.
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
  engine:
    description:
      - The container engine to configure (nvdocker2 C(--engine)).
      - V(containerd) and V(crio) take O(name), O(path), O(set_default), O(config),
        O(state_dir), O(reload) (V(auto), V(systemd) or V(none)), O(verify), O(unit),
        O(containerd_address) and O(timeout); the options that are Docker's only
        (O(runtime_args), O(restart), O(docker_host), O(pidfile), O(mode)) fail the task with
        nvdocker2's exit code 2 there.
    type: str
    choices: [docker, containerd, crio]
    default: docker
    version_added: "0.2.0"
  name:
    description: Name of the runtime entry in daemon.json.
    type: str
    default: nvidia
  path:
    description:
      - Absolute path of C(nvidia-container-runtime) on the managed host.
      - Default is the one installed beside nvdocker2.
      - One that is not an executable file fails the task (exit 2) unless
        O(allow_missing_runtime=true).
    type: str
  allow_missing_runtime:
    description:
      - Accept a O(path) that is not an executable file yet (a package will put it there);
        nvdocker2 then warns instead of refusing it.
    type: bool
    default: false
    version_added: "0.3.0"
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
        (V(legacy) or V(direct)), or use CDI mode (V(cdi) - no runtime entry; the CDI spec of
        the host's GPUs, and CDI turned on in daemon.json where Docker needs it).
      - With O(state=absent), V(cdi) undoes CDI mode (C(nvdocker2 uninstall --mode cdi) - the
        spec it wrote goes, the C(features) it changed come back); V(legacy) and V(direct) are
        not passed, since uninstall removes the runtime entry and leaves the runtime's
        config.toml.
      - Omitted, the mode is left as it is.
    type: str
    choices: [legacy, direct, cdi]
  runtime_config:
    description:
      - The runtime's config.toml, passed as E(NVIDIA_CONTAINER_RUNTIME_CONFIG) - where
        O(mode=legacy) or O(mode=direct) sets the mode, and where O(mode=cdi) reads
        C(driver-root).
      - Default is C(/etc/nvidia-container-runtime/config.toml).
    type: path
    version_added: "0.2.0"
  cdi_spec_dir:
    description:
      - With O(mode=cdi), the directory of the CDI spec C(nvidia.yaml) (nvdocker2
        C(--cdi-spec-dir)).
      - Default is C(/etc/cdi).
    type: path
    version_added: "0.2.0"
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
  unit:
    description:
      - With O(engine=containerd) or O(engine=crio), the systemd unit the engine runs as
        (nvdocker2 C(--unit)).
      - Default is C(containerd) or C(crio).
    type: str
    version_added: "0.2.0"
  containerd_address:
    description:
      - With O(engine=containerd), containerd's socket to verify on; with O(engine=crio),
        CRI-O's socket (nvdocker2 C(--containerd-address)).
      - Default is the engine's (C(/run/containerd/containerd.sock)).
    type: path
    version_added: "0.2.0"
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

- name: The nvidia runtime in containerd, as its default
  nvdocker2.gpu.docker_runtime:
    engine: containerd
    set_default: true

- name: Undo CDI mode (the spec goes, daemon.json's features come back)
  nvdocker2.gpu.docker_runtime:
    state: absent
    mode: cdi
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
# The only variables of the module's environment nvdocker2 sees (DOCUMENTATION lists them): the
# managed host's environment and the task's must not choose the daemon, the state, the output or
# the code that runs.
ALLOWED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE",
               "LC_MESSAGES", "TZ", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_STATE_HOME")
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
    ("engine", "--engine", "value", BOTH),
    ("name", "--runtime-name", "value", BOTH),
    ("path", "--runtime-path", "value", ("present",)),
    ("allow_missing_runtime", "--allow-missing-runtime", "switch", ("present",)),
    ("runtime_args", "--runtime-arg", "each", ("present",)),
    ("set_default", "--set-default", "switch", ("present",)),
    ("mode", "--mode", "value", BOTH),
    ("cdi_spec_dir", "--cdi-spec-dir", "value", BOTH),
    ("config", "--config", "value", BOTH),
    ("reload", "--reload", "value", BOTH),
    ("restart", "--restart", "switch", BOTH),
    ("verify", "--no-verify", "unless", BOTH),
    ("docker_host", "--docker-host", "value", BOTH),
    ("pidfile", "--pidfile", "value", BOTH),
    ("unit", "--unit", "value", BOTH),
    ("containerd_address", "--containerd-address", "value", BOTH),
    ("timeout", "--timeout", "value", BOTH),
)
# Options a state's command takes only some values of: uninstall undoes CDI mode only
# (legacy|direct set the runtime's config.toml, which uninstall leaves as it is).
ONLY = {("mode", "absent"): ("cdi",)}
# Options passed as an environment variable (the CLI has no flag for them).
ENV_OPTIONS = (("state_dir", "NVDOCKER2_STATE_DIR"),
               ("runtime_config", "NVIDIA_CONTAINER_RUNTIME_CONFIG"))
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
        if value not in ONLY.get((option, state), (value,)):
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
    if check_mode:  # a host whose apply would fail (no daemon to ask) fails in check mode too
        argv += ["--dry-run", "--require-daemon"]
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

    The one place the CLI's exit code and --json fields are translated (reference §10): success
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
            engine=dict(type="str", default="docker", choices=["docker", "containerd", "crio"]),
            name=dict(type="str", default="nvidia"),
            path=dict(type="str"),
            runtime_args=dict(type="list", elements="str", default=[]),
            allow_missing_runtime=dict(type="bool", default=False),
            set_default=dict(type="bool", default=False),
            mode=dict(type="str", choices=["legacy", "direct", "cdi"]),
            cdi_spec_dir=dict(type="path"),
            runtime_config=dict(type="path"),
            config=dict(type="path"),
            state_dir=dict(type="path"),
            reload=dict(type="str", default="auto",
                        choices=["auto", "systemd", "sysv", "signal", "none"]),
            restart=dict(type="bool", default=False),
            verify=dict(type="bool", default=True),
            docker_host=dict(type="str"),
            pidfile=dict(type="path"),
            unit=dict(type="str"),
            containerd_address=dict(type="path"),
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
    # run_command starts from os.environ: leave only the allow-list in it.
    for name in list(os.environ):
        if name not in ALLOWED_ENV:
            del os.environ[name]
    env = {"PYTHONIOENCODING": "utf-8"}
    for option, name in ENV_OPTIONS:
        if params[option]:
            env[name] = params[option]
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
