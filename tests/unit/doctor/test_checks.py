"""Each doctor check against a prepared fake host root (a tmp tree standing for /proc, /dev,
/sys, /etc, /usr), covering ok, warn and fail.

Test fixtures, clearly labelled: the GPU boundary (driver files under /proc, device nodes made
with os.mknod, nvidia-smi and nvidia-container-cli scripts) and the Engine API answer (a dict
shaped like dockerd 20.10's `GET /info`). The real dockerd is exercised in tests/e2e.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path, PurePosixPath

import pytest
from fixtures.fake_driver import WSL_STORE, build_fake_wsl

import nvdocker2
from nvdocker2.doctor.context import Context, EngineUnreachable
from nvdocker2.doctor.host import HostRoot
from nvdocker2.doctor.registry import FAIL, OK, SKIP, WARN, all_checks, run_checks

DRIVER = "535.104.05"
DOCKERD_PID = 4242
BTIME = int(time.time()) - 86400
CLK_TCK = os.sysconf("SC_CLK_TCK")


def sh(body: str) -> str:
    return "#!/bin/sh\n" + body + "\n"


class FakeHost:
    """A healthy GPU host in a tmp tree; tests then break one thing at a time."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = {"PATH": "/usr/bin:/bin", "HOME": "/root"}
        self.uid = 0
        self.info: dict | None = {
            "ServerVersion": "20.10.24",
            "Runtimes": {
                "runc": {"path": "runc"},
                "io.containerd.runc.v2": {"path": "runc"},
                "nvidia": {"path": "/usr/bin/nvidia-container-runtime"},
            },
            "DefaultRuntime": "runc",
            "CgroupDriver": "cgroupfs",
            "CgroupVersion": "2",
            "SecurityOptions": ["name=seccomp,profile=default"],
        }
        self.daemon_json({"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}})
        # The GPU boundary: driver, modules, device nodes, libraries, tools (test fixtures).
        self.file(
            "/proc/driver/nvidia/version",
            f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {DRIVER}  Sat Aug 19 "
            "01:15:15 UTC 2023\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
        )
        self.file(
            "/proc/modules",
            "nvidia_uvm 1531904 0 - Live 0x0\nnvidia_modeset 1290240 0 - "
            "Live 0x0\nnvidia 56381440 2 nvidia_uvm,nvidia_modeset, Live 0x0\n",
        )
        self.file("/proc/devices", "Character devices:\n  1 mem\n195 nvidia\n511 nvidia-uvm\n")
        self.file("/proc/stat", f"cpu  1 2 3 4\nbtime {BTIME}\n")
        for name, major, minor in (
            ("nvidia0", 195, 0),
            ("nvidiactl", 195, 255),
            ("nvidia-modeset", 195, 254),
            ("nvidia-uvm", 511, 0),
            ("nvidia-uvm-tools", 511, 1),
        ):
            self.chardev(f"/dev/{name}", major, minor)
        self.file(f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{DRIVER}", "")
        self.exe("/usr/bin/nvidia-smi", sh(f'echo "0, NVIDIA H200, {DRIVER}, GPU-0f00"'))
        self.exe(
            "/usr/bin/nvidia-container-cli",
            sh(
                'case "$1" in --version) echo "cli-version: 1.17.4";;\n'
                f'info) printf "NVRM version:   {DRIVER}\\nCUDA version:   12.2\\n\\n'
                'Device Index:   0\\nModel:          NVIDIA H200\\n";; esac'
            ),
        )
        self.exe("/usr/sbin/runc", sh('echo "runc version 1.1.5"'))
        # nvdocker2's own executables: the package's launchers, its package directory.
        from nvdocker2.runtime import launcher

        site = "/usr/lib/python3/dist-packages"
        self.file(f"{site}/nvdocker2/__init__.py", f'__version__ = "{nvdocker2.__version__}"\n')
        for name, text in launcher.render("/usr/bin/python3", [site]).items():
            self.exe(f"/usr/bin/{name}", text)
        # dockerd, started after everything above was installed, with the hook on its PATH.
        self.dockerd(
            ["dockerd", "-H", "unix:///var/run/docker.sock"],
            {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
            start=time.time() + 1,
        )

    def path(self, host_path: str) -> Path:
        return self.root / host_path.lstrip("/")

    def file(self, host_path: str, text: str | bytes) -> Path:
        p = self.path(host_path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(text.encode() if isinstance(text, str) else text)
        return p

    def exe(self, host_path: str, text: str) -> Path:
        p = self.file(host_path, text)
        p.chmod(0o755)
        return p

    def chardev(self, host_path: str, major: int, minor: int) -> None:
        p = self.path(host_path)
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.exists() or p.is_symlink():
            p.unlink()
        os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(major, minor))

    def remove(self, host_path: str) -> None:
        self.path(host_path).unlink()

    def daemon_json(self, doc: dict | str, host_path: str = "/etc/docker/daemon.json") -> None:
        self.file(host_path, doc if isinstance(doc, str) else json.dumps(doc, indent=4))

    def dockerd(self, argv: list[str], environ: dict[str, str], start: float) -> None:
        d = f"/proc/{DOCKERD_PID}"
        self.file(f"{d}/cmdline", "\0".join(argv) + "\0")
        self.file(f"{d}/environ", "".join(f"{k}={v}\0" for k, v in environ.items()))
        ticks = int((start - BTIME) * CLK_TCK)
        fields = ["S"] + ["0"] * 18 + [str(ticks)] + ["0"] * 10
        self.file(f"{d}/stat", f"{DOCKERD_PID} (dockerd) " + " ".join(fields) + "\n")
        self.file(f"{d}/status", "Name:\tdockerd\nUid:\t0\t0\t0\t0\n")
        self.file(f"{d}/cgroup", "0::/system.slice/docker.service\n")  # systemd runs it

    def engine(self, host: str, timeout: float) -> dict:
        if self.info is None:
            raise EngineUnreachable("connection refused")
        return self.info

    def context(self, **kw) -> Context:
        args = {
            "root": HostRoot(self.root),
            "env": self.env,
            "uid": self.uid,
            "engine_info": self.engine,
            "bin_dir": PurePosixPath("/usr/bin"),
            "peer_of": lambda sock: None,  # nothing answers on a socket of the fake tree
        }
        args.update(kw)
        return Context(**args)

    def run(self, **kw) -> dict:
        return {r.id: r for r in run_checks(self.context(**kw))}


def assert_status(results: dict, check_id: str, status: str, *words: str):
    r = results[check_id]
    assert r.status == status, f"{check_id}: {r.status}: {r.detail}"
    for w in words:
        assert w in r.detail + " " + (r.hint or ""), f"{w!r} not in {r.detail!r} / {r.hint!r}"
    if status in (WARN, FAIL):
        assert r.hint, f"{check_id} {status} without a hint"
    return r


# -- the whole run -------------------------------------------------------------------------


def test_healthy_host_has_no_warning_or_failure(host):
    results = host.run()
    bad = {i: (r.status, r.detail) for i, r in results.items() if r.status in (WARN, FAIL)}
    assert bad == {}
    assert results["dockerd.reachable"].status == OK
    assert results["driver.nvidia-smi"].detail == f"1 GPU(s): 0, NVIDIA H200, {DRIVER}, GPU-0f00"
    assert results["wsl"].status == SKIP
    assert [r for r in results] == [c.id for c in all_checks()]


def test_every_registered_check_has_an_id_and_title_and_smoke_is_off_by_default():
    checks = all_checks()
    assert len({c.id for c in checks}) == len(checks) >= 25
    assert all(c.title for c in checks)
    assert not any(c.id.startswith("smoke.") for c in checks)
    assert {"smoke.runtime", "smoke.gpus"} <= {c.id for c in all_checks(smoke=True)}


def test_dockerd_unreachable_fails_with_hint_and_dependents_say_why(host):
    host.info = None
    results = host.run()
    assert_status(results, "dockerd.reachable", FAIL, "connection refused", "systemctl start")
    for dep in ("dockerd.runtimes", "dockerd.cgroup", "dockerd.sync", "driver.dev-char"):
        assert_status(results, dep, SKIP, "dockerd.reachable", "failed")
    assert all(r.hint for r in results.values() if r.status in (WARN, FAIL))
    # everything that does not need dockerd still ran
    assert_status(results, "driver.kernel", OK, DRIVER)
    assert_status(results, "runtime.installed", OK)


def test_a_crashing_check_is_reported_and_the_rest_still_run(host, monkeypatch):
    from nvdocker2.doctor import checks_driver

    def boom(ctx):
        raise RuntimeError("unexpected layout")

    checks = [
        c if c.id != "driver.kernel" else c.__class__(c.id, c.title, boom) for c in all_checks()
    ]
    monkeypatch.setattr(checks_driver, "kernel_version", lambda ctx: DRIVER)
    results = {r.id: r for r in run_checks(host.context(), checks)}
    assert_status(
        results, "driver.kernel", FAIL, "RuntimeError: unexpected layout", "NVDOCKER2_DEBUG=1"
    )
    assert_status(results, "driver.modules", OK)


# -- daemon.json ---------------------------------------------------------------------------


def test_location_default_rootful_and_given(host):
    assert_status(
        host.run(), "config.location", OK, "/etc/docker/daemon.json", "rootful", "present"
    )
    host.daemon_json({}, "/srv/d.json")
    r = host.run(config_override=PurePosixPath("/srv/d.json"))
    assert_status(r, "config.location", OK, "/srv/d.json", "--config")


def test_location_rootless_user(host, tmp_path):
    runtime_dir = tmp_path / "run-user"  # the rootless socket is looked for on the real fs
    runtime_dir.mkdir()
    (runtime_dir / "docker.sock").write_text("")
    host.uid = 1000
    host.env.update(HOME="/home/u", XDG_RUNTIME_DIR=str(runtime_dir))
    host.daemon_json({}, "/home/u/.config/docker/daemon.json")
    ctx = host.context()
    assert ctx.config_location().kind == "rootless"
    assert ctx.docker_host().url == f"unix://{runtime_dir}/docker.sock"
    results = {r.id: r for r in run_checks(ctx)}
    assert_status(results, "config.location", OK, "/home/u/.config/docker/daemon.json", "rootless")


def test_location_snap(host):
    host.daemon_json({}, "/var/snap/docker/current/config/daemon.json")
    assert_status(
        host.run(), "config.location", OK, "/var/snap/docker/current/config/daemon.json", "snap"
    )


def test_docker_host_pointing_elsewhere_warns(host):
    host.env["DOCKER_HOST"] = "tcp://10.0.0.5:2375"
    host.info = None
    assert_status(
        host.run(), "config.target", WARN, "DOCKER_HOST", "tcp://10.0.0.5:2375", "--docker-host"
    )


def test_non_default_docker_context_warns(host):
    import hashlib

    host.file("/root/.docker/config.json", json.dumps({"currentContext": "remote"}))
    digest = hashlib.sha256(b"remote").hexdigest()
    host.file(
        f"/root/.docker/contexts/meta/{digest}/meta.json",
        json.dumps({"Name": "remote", "Endpoints": {"docker": {"Host": "ssh://gpu1"}}}),
    )
    host.info = None
    ctx = host.context()
    assert ctx.docker_host().url == "ssh://gpu1"
    results = {r.id: r for r in run_checks(ctx)}
    assert_status(
        results,
        "config.target",
        WARN,
        "docker context 'remote'",
        "ssh://gpu1",
        "docker context use default",
    )


def test_running_dockerd_reading_another_file_warns(host):
    host.dockerd(
        ["/usr/sbin/dockerd", "--config-file", "/srv/other.json"],
        {"PATH": "/usr/bin"},
        start=BTIME + 100,
    )
    assert_status(
        host.run(), "config.target", WARN, "reads /srv/other.json", "--config /srv/other.json"
    )


def test_missing_daemon_json_warns(host):
    host.remove("/etc/docker/daemon.json")
    results = host.run()
    assert_status(results, "config.parse", WARN, "does not exist", "nvdocker2 install")
    assert_status(results, "config.runtime", FAIL, "no runtimes.nvidia", "nvdocker2 install")


def test_syntax_error_fails_with_line_and_column(host):
    host.daemon_json('{\n    "debug": true,\n}\n')
    results = host.run()
    r = assert_status(
        results,
        "config.parse",
        FAIL,
        "/etc/docker/daemon.json line 2, column 18: trailing comma",
        "remove the comma",
    )
    assert str(host.root) not in r.detail
    assert_status(results, "config.validate", SKIP, "config.parse")


def test_duplicate_keys_warn(host):
    host.daemon_json('{"debug": true, "debug": false}')
    assert_status(host.run(), "config.parse", WARN, 'duplicate key(s) "debug"')


def test_runtimes_of_wrong_type_fail_validation(host):
    host.daemon_json({"runtimes": []})
    results = host.run()
    assert_status(results, "config.validate", FAIL, "runtimes: [] is not of type object")
    assert_status(results, "config.runtime", FAIL, "no runtimes.nvidia")


def test_unknown_key_warns_in_validation(host):
    host.daemon_json(
        {"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}, "gpus": "all"}
    )
    assert_status(host.run(), "config.validate", WARN, 'unknown key "gpus"')


@pytest.mark.parametrize("content", [b"", b"  \n", b"\xef\xbb\xbf{}"])
def test_empty_file_or_bom_fails_for_dockerd_20(host, content):
    host.daemon_json(content.decode("utf-8"))
    assert_status(host.run(), "config.parse", FAIL, "before 23.0", "nvdocker2 install")
    host.info["ServerVersion"] = "24.0.7"
    assert_status(host.run(), "config.parse", WARN, "nvdocker2 install")


def test_runtime_entry_without_path_fails(host):
    host.daemon_json({"runtimes": {"nvidia": {"args": ["x"]}}})
    results = host.run()
    assert_status(results, "config.runtime", FAIL, 'no "path"')
    assert_status(results, "config.runtime-path", SKIP, "config.runtime")


def test_runtime_path_not_executable_fails(host):
    host.path("/usr/bin/nvidia-container-runtime").chmod(0o644)
    assert_status(
        host.run(),
        "config.runtime-path",
        FAIL,
        "/usr/bin/nvidia-container-runtime",
        "not an executable",
    )


def test_runtime_path_bare_name_warns(host):
    host.daemon_json({"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}})
    assert_status(host.run(), "config.runtime-path", WARN, "bare name", "absolute path")


def test_default_runtime_naming_undefined_runtime_fails(host):
    host.daemon_json({"default-runtime": "nvidia"})
    assert_status(host.run(), "config.default-runtime", FAIL, "'nvidia'", "refuses to start")
    host.daemon_json(
        {
            "default-runtime": "nvidia",
            "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}},
        }
    )
    host.info["DefaultRuntime"] = "nvidia"
    assert_status(host.run(), "config.default-runtime", OK, "default-runtime = nvidia")


# -- dockerd -------------------------------------------------------------------------------


def test_runtime_not_loaded_fails_and_stale_file_warns_naming_it(host):
    del host.info["Runtimes"]["nvidia"]
    results = host.run()
    assert_status(results, "dockerd.runtimes", FAIL, "no nvidia runtime loaded")
    assert_status(
        results,
        "dockerd.sync",
        WARN,
        "runtime 'nvidia' is in",
        "not reloaded",
        "systemctl reload docker",
    )


def test_runtime_loaded_but_removed_from_file_warns(host):
    host.daemon_json({})
    assert_status(host.run(), "dockerd.sync", WARN, "'nvidia' loaded that", "reload")


def test_default_runtime_differs_from_file_warns(host):
    host.info["DefaultRuntime"] = "nvidia"
    assert_status(host.run(), "dockerd.sync", WARN, "'runc' in the file", "'nvidia'")


def test_cgroup_reported(host):
    assert_status(host.run(), "dockerd.cgroup", OK, "CgroupDriver: cgroupfs, CgroupVersion: 2")


def test_flag_and_file_conflict_from_running_dockerd_fails_naming_key(host):
    host.dockerd(
        ["dockerd", "--log-level", "debug", "-H", "unix:///var/run/docker.sock"],
        {"PATH": "/usr/bin"},
        start=BTIME + 100,
    )
    host.daemon_json(
        {"log-level": "info", "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}}
    )
    assert_status(
        host.run(), "dockerd.flags", FAIL, "'log-level'", "--log-level", f"pid {DOCKERD_PID}"
    )


def test_flag_and_file_conflict_from_systemd_drop_in_fails(host):
    host.file(
        "/lib/systemd/system/docker.service",
        "[Service]\nEnvironmentFile=-/etc/default/docker\n"
        "ExecStart=/usr/sbin/dockerd --containerd=/run/containerd/containerd.sock "
        "$DOCKER_OPTS\n",
    )
    host.file("/etc/default/docker", 'DOCKER_OPTS="--debug"\n')
    host.daemon_json({"debug": True, "hosts": ["unix:///var/run/docker.sock"]})
    host.dockerd(["dockerd"], {"PATH": "/usr/bin"}, start=time.time() + 60)
    results = host.run()
    assert_status(results, "dockerd.flags", FAIL, "'debug'", "/lib/systemd/system/docker.service")
    host.file(
        "/etc/systemd/system/docker.service.d/override.conf",
        "[Service]\nExecStart=\nExecStart=/usr/sbin/dockerd -H fd://\n",
    )
    r = assert_status(
        host.run(),
        "dockerd.flags",
        FAIL,
        "'hosts'",
        "as --host in ExecStart in /etc/systemd/system/docker.service.d/override.conf",
    )
    assert "'debug'" not in r.detail


def test_flag_conflict_inside_a_nested_object_is_found(host):
    host.dockerd(
        ["dockerd", "--http-proxy=http://p:3128"], {"PATH": "/usr/bin"}, start=time.time() + 60
    )
    host.daemon_json({"proxies": {"http-proxy": "http://q:3128"}})
    assert_status(host.run(), "dockerd.flags", FAIL, "'http-proxy'", "--http-proxy")


def test_flags_ok_when_no_key_repeated(host):
    host.dockerd(
        ["dockerd", "--iptables=false", "--add-runtime", "x=/bin/x"],
        {"PATH": "/usr/bin"},
        start=BTIME + 100,
    )
    host.daemon_json(
        {"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}, "iptables-x": 1}
    )
    assert_status(host.run(), "dockerd.flags", OK, f"pid {DOCKERD_PID}")


def test_hook_installed_after_dockerd_start_warns_restart(host):
    # the hook's change time (now) is later than dockerd's start (yesterday)
    host.dockerd(["dockerd"], {"PATH": "/usr/bin"}, start=BTIME + 100)
    assert_status(host.run(), "dockerd.gpus", WARN, "after dockerd", "systemctl restart docker")


def test_hook_older_than_dockerd_is_ok(host):
    host.dockerd(["dockerd"], {"PATH": "/usr/bin"}, start=time.time() + 60)
    assert_status(host.run(), "dockerd.gpus", OK, "/usr/bin/nvidia-container-runtime-hook")


def test_hook_not_on_dockerds_path_warns(host):
    host.dockerd(["dockerd"], {"PATH": "/opt/bin"}, start=time.time() + 60)
    assert_status(
        host.run(),
        "dockerd.gpus",
        WARN,
        "not on dockerd's PATH (/opt/bin)",
        "could not select device driver",
        "restart",
    )


def test_dockerd_found_by_the_hosts_key_of_its_config_file(host):
    host.dockerd(
        ["dockerd", "--config-file=/srv/d.json"], {"PATH": "/usr/bin"}, start=time.time() + 60
    )
    host.daemon_json({"hosts": ["unix:///srv/docker.sock"]}, "/srv/d.json")
    ctx = host.context(
        docker_host_override="unix:///srv/docker.sock", config_override=PurePosixPath("/srv/d.json")
    )
    proc, _ = ctx.dockerd_process()
    assert proc is not None and proc.pid == DOCKERD_PID
    assert host.context().dockerd_process()[0] is None  # not on the default socket


def test_a_dockerd_version_run_is_not_taken_for_the_daemon(host):
    host.dockerd(["dockerd", "--version"], {"PATH": "/usr/bin"}, start=time.time())
    assert host.context().dockerd_process()[0] is None
    host.dockerd(
        ["dockerd", "--validate", "--config-file", "/etc/docker/daemon.json"],
        {"PATH": "/usr/bin"},
        start=time.time(),
    )
    assert host.context().dockerd_process()[0] is None


def test_gpus_skipped_when_no_local_dockerd(host):
    host.remove(f"/proc/{DOCKERD_PID}/cmdline")
    assert_status(host.run(), "dockerd.gpus", SKIP, "no dockerd process")


# -- runtime, hook, config.toml, libnvidia-container, runc ---------------------------------


def test_console_scripts_report_their_interpreters_nvdocker2_version(host):
    for exe, module in (
        ("nvidia-container-runtime", "runtime"),
        ("nvidia-container-runtime-hook", "hook"),
    ):
        host.exe(
            f"/usr/bin/{exe}",
            f"#!{sys.executable}\nimport sys\n"
            f"from nvdocker2.{module} import main\nsys.exit(main())\n",
        )
    results = host.run()
    assert_status(
        results,
        "runtime.installed",
        OK,
        f"nvdocker2 {nvdocker2.__version__}",
        "read from the script",
    )
    assert_status(results, "hook.installed", OK, "read from the script")


def test_runtime_and_hook_report_the_nvdocker2_version(host):
    results = host.run()
    assert_status(results, "runtime.installed", OK, f"nvdocker2 {nvdocker2.__version__}")
    assert_status(results, "hook.installed", OK, "/usr/bin/nvidia-container-runtime-hook")


def test_runtime_of_another_version_warns(host):
    # test fixture: an interpreter whose nvdocker2 is an older release
    host.exe("/opt/oldpy/python", sh("echo 0.0.9"))
    host.exe(
        "/usr/bin/nvidia-container-runtime",
        f"#!{host.path('/opt/oldpy/python')}\nfrom nvdocker2.runtime import main\n",
    )
    assert_status(
        host.run(), "runtime.installed", WARN, "nvdocker2 0.0.9", nvdocker2.__version__, "reinstall"
    )


def test_foreign_hook_warns(host):
    host.exe(
        "/usr/bin/nvidia-container-runtime-hook",
        sh('echo "NVIDIA Container Runtime Hook version 1.14.3"'),
    )
    assert_status(host.run(), "hook.installed", WARN, "not nvdocker2's", "1.14.3")


def test_missing_hook_fails(host):
    host.remove("/usr/bin/nvidia-container-runtime-hook")
    assert_status(host.run(), "hook.installed", FAIL, "not found", "install the nvdocker2")


def test_toolkit_config_bad_toml_and_bad_types_fail(host):
    host.file("/etc/nvidia-container-runtime/config.toml", "[nvidia-container-cli\n")
    assert_status(host.run(), "toolkit.config", FAIL, "config.toml")
    host.file(
        "/etc/nvidia-container-runtime/config.toml", '[nvidia-container-cli]\nno-cgroups = "yes"\n'
    )
    assert_status(host.run(), "toolkit.config", FAIL, "'nvidia-container-cli.no-cgroups'", "'yes'")
    host.file(
        "/etc/nvidia-container-runtime/config.toml", '[nvidia-container-runtime]\nmode = 3\n'
    )
    assert_status(
        host.run(),
        "toolkit.config",
        FAIL,
        "'nvidia-container-runtime.mode' must be a string",
        "correct that key",
    )


def test_toolkit_config_from_env_is_used(host):
    host.file("/srv/tk.toml", '[nvidia-container-runtime]\nruntimes = ["crun"]\n')
    host.env["NVIDIA_CONTAINER_RUNTIME_CONFIG"] = "/srv/tk.toml"
    results = host.run()
    assert_status(results, "toolkit.config", OK, "/srv/tk.toml", "NVIDIA_CONTAINER_RUNTIME_CONFIG")
    assert_status(results, "runtime.low-level", FAIL, "none of crun", "install runc")


def test_rootless_needs_no_cgroups(host):
    host.info["SecurityOptions"].append("name=rootless")
    assert_status(host.run(), "toolkit.rootless", FAIL, "rootless", "no-cgroups = true")
    host.file(
        "/etc/nvidia-container-runtime/config.toml", "[nvidia-container-cli]\nno-cgroups = true\n"
    )
    assert_status(host.run(), "toolkit.rootless", OK, "rootless")


def test_rootless_reads_the_users_config_toml_over_the_global_one(host):
    host.info["SecurityOptions"].append("name=rootless")
    host.env["HOME"] = "/home/u"
    host.file("/etc/nvidia-container-runtime/config.toml", "[nvidia-container-cli]\n"
              "no-cgroups = false\n")
    results = host.run()
    assert_status(results, "toolkit.rootless", FAIL, "/home/u/.config/nvidia-container-runtime/"
                  "config.toml", "nvdocker2 install as this user")
    user = host.file("/home/u/.config/nvidia-container-runtime/config.toml",
                     "[nvidia-container-cli]\nno-cgroups = true\n")
    results = host.run()
    assert_status(results, "toolkit.rootless", OK, "rootless", "per-user /home/u/.config/"
                  "nvidia-container-runtime/config.toml read over /etc/nvidia-container-runtime")
    assert_status(results, "toolkit.config", OK, "per-user /home/u/.config/")
    user.chmod(0o646)  # anyone may change what the rootless runtime does
    assert_status(host.run(), "toolkit.config", FAIL, "refusing this per-user config.toml",
                  "writable by other users", "correct that key in /home/u/.config/")


def test_rootful_docker_ignores_a_users_config_toml(host):
    host.env["HOME"] = "/home/u"
    host.file("/home/u/.config/nvidia-container-runtime/config.toml",
              "[nvidia-container-cli]\nno-cgroups = true\n")
    results = host.run()
    assert_status(results, "toolkit.rootless", OK, "rootful Docker, no-cgroups = false")
    assert "per-user" not in results["toolkit.config"].detail


def test_no_cgroups_on_rootful_warns(host):
    host.file(
        "/etc/nvidia-container-runtime/config.toml", "[nvidia-container-cli]\nno-cgroups = true\n"
    )
    assert_status(host.run(), "toolkit.rootless", WARN, "rootful", "no-cgroups")


def test_debug_log_in_missing_directory_warns(host):
    host.path("/var/log").mkdir(parents=True)
    host.file(
        "/etc/nvidia-container-runtime/config.toml",
        '[nvidia-container-runtime]\ndebug = "/var/log/nvidia-container-runtime.log"\n'
        '[nvidia-container-cli]\ndebug = "/nope/cli.log"\n',
    )
    r = assert_status(host.run(), "toolkit.debug-logs", WARN, "/nope/cli.log", "writable")
    assert "nvidia-container-runtime.log" not in r.detail


def test_cli_missing_fails_unless_direct_mode(host):
    host.remove("/usr/bin/nvidia-container-cli")
    results = host.run()
    assert_status(results, "cli.installed", FAIL, "not found", "libnvidia-container-tools")
    assert_status(results, "cli.info", SKIP, "cli.installed")
    host.file(
        "/etc/nvidia-container-runtime/config.toml", '[nvidia-container-runtime]\nmode = "direct"\n'
    )
    assert_status(host.run(), "cli.installed", SKIP, "direct")


def test_cli_info_failure_fails_with_driver_hint(host):
    host.exe(
        "/usr/bin/nvidia-container-cli",
        sh(
            'case "$1" in --version) echo "cli-version: 1.17.5";;\n'
            'info) echo "nvidia-container-cli: initialization error: nvml error: '
            'driver not loaded" '
            ">&2; exit 1;; esac"
        ),
    )
    results = host.run()
    assert_status(results, "cli.installed", OK, "1.17.5")
    assert_status(results, "cli.info", FAIL, "driver not loaded", "modprobe nvidia")


@pytest.mark.parametrize(
    "version, status",
    [("1.14.3", WARN), ("1.16.2", WARN), ("1.17.3", WARN), ("1.17.4", OK), ("1.18.0~rc.1", OK),
     ("2", OK)],
)
def test_a_libnvidia_container_without_the_escape_fixes_warns(host, version, status):
    host.exe("/usr/bin/nvidia-container-cli", sh(f'echo "cli-version: {version}"'))
    r = assert_status(host.run(), "cli.installed", status, version)
    if status == WARN:
        assert "CVE-2025-23359" in r.detail and "1.17.4 or newer" in r.hint


def test_a_dockerd_served_by_another_user_is_not_trusted_nor_its_path_used(host):
    """reference §8: the process behind the socket decides, and a user's is never trusted: its
    PATH (with a planted docker-runc first) is not searched."""
    from nvdocker2.engines.docker.service.identity import Peer

    host.exe("/home/u/bin/docker-runc", sh("echo planted"))
    host.dockerd(
        ["dockerd", "-H", "unix:///var/run/docker.sock"],
        {"PATH": "/home/u/bin:/usr/bin"},
        start=time.time(),
    )
    host.file(f"/proc/{DOCKERD_PID}/status", "Uid:\t1000\t1000\t1000\t1000\n")
    results = host.run(peer_of=lambda sock: Peer(DOCKERD_PID, 1000, 1000))
    assert_status(results, "dockerd.trusted", FAIL, "uid 1000", "--docker-host")
    assert_status(results, "runtime.low-level", OK, "/usr/sbin/runc")
    assert_status(results, "dockerd.gpus", SKIP, "not trusted")
    # The same process owned by root and serving the socket is the dockerd.
    host.file(f"/proc/{DOCKERD_PID}/status", "Uid:\t0\t0\t0\t0\n")
    results = host.run(peer_of=lambda sock: Peer(DOCKERD_PID, 0, 0))
    assert_status(results, "dockerd.trusted", OK, f"pid {DOCKERD_PID} serves")


def test_with_nothing_answering_only_a_root_dockerd_is_taken_from_the_process_scan(host):
    """No peer to ask (the socket is gone): a process that says it listens there is taken
    only when root owns it, and a pidfile naming a user's process is ignored too."""
    host.file(f"/proc/{DOCKERD_PID}/status", "Uid:\t1000\t1000\t1000\t1000\n")
    host.file("/var/run/docker.pid", f"{DOCKERD_PID}\n")
    proc, why = host.context().dockerd_process()
    assert proc is None and "no dockerd process" in why
    host.file(f"/proc/{DOCKERD_PID}/status", "Uid:\t0\t0\t0\t0\n")
    assert host.context().dockerd_process()[0].pid == DOCKERD_PID


def test_under_socket_activation_the_root_dockerd_behind_init_is_taken(host):
    """systemd (pid 1) holds docker.socket and hands it to dockerd (`-H fd://`)."""
    from nvdocker2.engines.docker.service.identity import Peer

    host.dockerd(["/usr/bin/dockerd", "-H", "fd://"], {"PATH": "/usr/bin"}, start=time.time())
    proc, _ = host.context(peer_of=lambda sock: Peer(1, 0, 0)).dockerd_process()
    assert proc is not None and proc.pid == DOCKERD_PID


def test_only_the_process_serving_the_socket_is_the_dockerd(host):
    """A root dockerd that says it listens on the socket is not the one when another process
    serves it: the peer decides."""
    from nvdocker2.engines.docker.service.identity import Peer

    host.file("/proc/77/cmdline", "nginx\0")
    host.file("/proc/77/status", "Uid:\t0\t0\t0\t0\n")
    results = host.run(peer_of=lambda sock: Peer(77, 0, 0))
    assert_status(results, "dockerd.trusted", SKIP, "pid 77 serves", "not a dockerd")


def test_cli_that_hangs_is_cut_short(host):
    host.exe(
        "/usr/bin/nvidia-container-cli",
        sh('case "$1" in --version) echo "cli-version: 1";;\ninfo) exec sleep 30;; esac'),
    )
    start = time.monotonic()
    results = host.run()
    assert time.monotonic() - start < 5
    assert_status(results, "cli.info", FAIL, "timed out after 1.5 s", "persistence mode")


def test_low_level_runtime_found_and_missing(host):
    assert_status(host.run(), "runtime.low-level", OK, "/usr/sbin/runc", "runc version 1.1.5")
    host.remove("/usr/sbin/runc")
    assert_status(host.run(), "runtime.low-level", FAIL, "none of", "install runc")


# -- driver --------------------------------------------------------------------------------


def test_no_driver_fails_everything_driver_with_hints(host):
    import shutil

    shutil.rmtree(host.path("/proc/driver"))
    host.remove("/proc/modules")
    for n in ("nvidia0", "nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools"):
        host.remove(f"/dev/{n}")
    host.remove("/usr/bin/nvidia-smi")
    results = host.run()
    assert_status(results, "driver.kernel", FAIL, "/proc/driver/nvidia/version", "modprobe nvidia")
    assert_status(results, "driver.nvidia-smi", FAIL, "not found")
    assert_status(results, "driver.modules", FAIL, "nvidia, nvidia_uvm", "/sys/module")
    assert_status(results, "driver.devices", FAIL, "/dev/nvidiactl missing", "nvidia-modprobe")
    assert_status(results, "driver.libraries", SKIP, "no kernel module")


def test_no_driver_is_fixed_first_and_the_cli_check_waits_for_it(host):
    """On a host with dockerd but no driver and no nvidia-container-cli, the driver is what to
    fix first: the cli check is skipped as blocked by it, not reported as its own failure."""
    from nvdocker2.doctor.render import first_to_fix

    import shutil

    shutil.rmtree(host.path("/proc/driver"))
    host.remove("/usr/bin/nvidia-container-cli")
    results = host.run()
    assert_status(results, "driver.kernel", FAIL, "/proc/driver/nvidia/version")
    assert_status(results, "cli.installed", SKIP, "needs driver.kernel, which failed")
    assert_status(results, "cli.info", SKIP, "cli.installed")
    assert first_to_fix(list(results.values())).id == "driver.kernel"


def test_a_dockerd_no_systemd_unit_runs_is_restarted_as_it_was_started(host):
    """A dockerd started from a shell (its cgroup a login session's, not docker.service's) is
    not what `systemctl restart docker` restarts: the hints name its pid and its parent."""
    host.dockerd(["dockerd"], {"PATH": "/usr/bin"}, start=BTIME + 100)  # before the hook
    d = f"/proc/{DOCKERD_PID}"
    host.file(f"{d}/cgroup", "0::/user.slice/user-0.slice/session-3.scope\n")
    stat = host.path(f"{d}/stat").read_text().replace(") S 0 ", ") S 777 ")
    host.file(f"{d}/stat", stat)
    host.file("/proc/777/comm", "bash\n")
    host.daemon_json({})
    results = host.run()
    r = assert_status(results, "dockerd.gpus", WARN, f"pid {DOCKERD_PID}")
    assert "systemctl" not in r.hint
    assert f"restart dockerd the way it was started (pid {DOCKERD_PID}, started by bash " \
           "(pid 777)" in r.hint
    r = assert_status(results, "dockerd.sync", WARN, "does not define")
    assert r.hint == f"reload dockerd: sudo kill -HUP {DOCKERD_PID}"


def test_library_version_mismatch_fails(host):
    host.remove(f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{DRIVER}")
    host.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.129.03", "")
    assert_status(
        host.run(), "driver.libraries", FAIL, f"kernel module {DRIVER}", "535.129.03", "reboot"
    )


def test_leftover_libraries_warn(host):
    host.file("/usr/lib64/libnvidia-ml.so.470.1.1", "")
    assert_status(host.run(), "driver.libraries", WARN, "/usr/lib64/libnvidia-ml.so.470.1.1")


def test_nvidia_smi_version_mismatch_fails_with_reboot_hint(host):
    host.exe(
        "/usr/bin/nvidia-smi",
        sh('echo "Failed to initialize NVML: Driver/library version mismatch"; exit 18'),
    )
    assert_status(host.run(), "driver.nvidia-smi", FAIL, "version mismatch", "reboot")


def test_missing_uvm_module_fails_and_missing_modeset_warns(host):
    host.file("/proc/modules", "nvidia 56381440 0 - Live 0x0\n")
    assert_status(host.run(), "driver.modules", FAIL, "nvidia_uvm", "modprobe")
    host.file("/proc/modules", "nvidia 1 0 - Live 0x0\nnvidia_uvm 1 0 - Live 0x0\n")
    assert_status(host.run(), "driver.modules", WARN, "nvidia_modeset")


def test_device_node_with_wrong_major_or_type_fails(host):
    host.chardev("/dev/nvidia0", 10, 0)
    host.remove("/dev/nvidiactl")
    host.file("/dev/nvidiactl", "")
    r = assert_status(
        host.run(),
        "driver.devices",
        FAIL,
        "/dev/nvidia0 has major 10",
        "/dev/nvidiactl is not a character device",
    )
    assert "nvidia-uvm" not in r.detail


def test_dev_char_links_with_systemd_cgroup_driver(host):
    host.info["CgroupDriver"] = "systemd"
    assert_status(
        host.run(),
        "driver.dev-char",
        WARN,
        "/dev/char/195:0 → /dev/nvidia0",
        "create-dev-char-symlinks",
    )
    host.path("/dev/char").mkdir()
    for link, node in (
        ("195:0", "nvidia0"),
        ("195:255", "nvidiactl"),
        ("195:254", "nvidia-modeset"),
        ("511:0", "nvidia-uvm"),
        ("511:1", "nvidia-uvm-tools"),
    ):
        os.symlink(f"../{node}", host.path(f"/dev/char/{link}"))
    assert_status(host.run(), "driver.dev-char", OK)
    host.info["CgroupDriver"] = "cgroupfs"
    assert_status(host.run(), "driver.dev-char", SKIP, "cgroupfs")


def test_dev_char_warns_until_create_dev_char_symlinks_ran(host):
    from ..cli_run import cli

    host.info["CgroupDriver"] = "systemd"
    host.chardev("/dev/nvidia-caps/nvidia-cap1", 508, 1)
    r = host.run()["driver.dev-char"]
    assert r.status == WARN and "/dev/char/508:1 → /dev/nvidia-caps/nvidia-cap1" in r.detail
    assert "nvdocker2 system create-dev-char-symlinks" in r.hint
    code, _, err = cli("system", "create-dev-char-symlinks", "--dev-root", str(host.root))
    assert code == 0, err
    assert_status(host.run(), "driver.dev-char", OK, "(6)")


def test_control_nodes_warn_until_create_device_nodes_ran(host):
    from ..cli_run import cli

    host.path("/dev/nvidia-uvm-tools").unlink()
    host.path("/dev/nvidia-modeset").unlink()
    r = host.run()["driver.control-nodes"]
    assert r.status == WARN
    assert r.detail.startswith("missing: /dev/nvidia-modeset, /dev/nvidia-uvm-tools ")
    assert "nvdocker2 system create-device-nodes" in r.hint
    code, _, err = cli("system", "create-device-nodes", "--dev-root", str(host.root),
                       "--proc-root", str(host.root))
    assert code == 0, err
    assert_status(host.run(), "driver.control-nodes", OK, "4 control node(s)")
    assert_status(host.run(), "driver.devices", OK)
    host.file("/proc/devices", "Character devices:\n  1 mem\n")
    assert_status(host.run(), "driver.control-nodes", SKIP, "no NVIDIA driver")


def test_wsl2_skips_native_driver_checks(host):
    import shutil

    shutil.rmtree(host.path("/proc/driver"))
    host.chardev("/dev/dxg", 10, 63)
    results = host.run()
    assert_status(results, "wsl", WARN, "/usr/lib/wsl/lib/libdxcore.so is missing; no NVIDIA"
                  " driver store with libcuda.so.1.1 (no /usr/lib/wsl/drivers/nv*.inf_amd64_*")
    wsl = build_fake_wsl(host.path("/"), dxg=False, skip=(f"{WSL_STORE}/nvidia-smi",))
    assert_status(host.run(), "wsl", WARN, f"{WSL_STORE}/nvidia-smi is missing")
    (wsl.path(WSL_STORE) / "nvidia-smi").write_text("")
    results = host.run()
    assert_status(results, "wsl", OK, f"/dev/dxg, libdxcore.so in /usr/lib/wsl/lib, NVIDIA"
                  f" driver store {WSL_STORE}")
    for i in ("driver.kernel", "driver.modules", "driver.devices", "driver.libraries"):
        assert_status(results, i, SKIP, "WSL2")


def _package_dir(host: FakeHost, d: str, version: str) -> None:
    host.file(f"{d}/nvdocker2/__init__.py", f'"""nvdocker2."""\n\n__version__ = "{version}"\n')


def test_version_of_the_package_launchers_is_read_from_their_package_dir(host):
    from nvdocker2.runtime import launcher

    _package_dir(host, "/usr/lib/python3/dist-packages", nvdocker2.__version__)
    for name, text in launcher.render(
        "/usr/bin/python3", ["/usr/lib/python3/dist-packages"]
    ).items():
        host.exe(f"/usr/bin/{name}", text)
    results = host.run()
    assert_status(results, "runtime.installed", OK, f"nvdocker2 {nvdocker2.__version__}")
    assert_status(results, "hook.installed", OK, f"nvdocker2 {nvdocker2.__version__}")
    _package_dir(host, "/usr/lib/python3/dist-packages", "0.0.7")
    assert_status(host.run(), "hook.installed", WARN, "nvdocker2 0.0.7", "reinstall")
    host.remove("/usr/lib/python3/dist-packages/nvdocker2/__init__.py")
    assert_status(
        host.run(),
        "runtime.installed",
        FAIL,
        "cannot start",
        "/usr/lib/python3/dist-packages holds",
        "reinstall",
    )


def test_version_of_the_rpm_launcher_is_read_from_its_package_dir(host):
    _package_dir(host, "/usr/lib/nvdocker2", "9.9.9")
    host.exe(
        "/usr/bin/nvidia-container-runtime",
        '#!/usr/bin/python3 -s\nimport sys\nsys.path.insert(0, "/usr/lib/nvdocker2")\n'
        "from nvdocker2.runtime import main\nsys.exit(main())\n",
    )
    assert_status(host.run(), "runtime.installed", WARN, "nvdocker2 9.9.9", nvdocker2.__version__)


def test_direct_mode_finds_the_driver_under_driver_root(host):
    from fixtures.fake_driver import build_fake_driver

    assert_status(host.run(), "direct.driver", SKIP, "legacy")
    host.file(
        "/etc/nvidia-container-runtime/config.toml",
        '[nvidia-container-runtime]\nmode = "direct"\ndriver-root = "/drv"\n',
    )
    r = assert_status(
        host.run(), "direct.driver", FAIL, "/drv/proc/driver/nvidia/gpus", "driver-root"
    )
    assert str(host.root) not in r.detail
    build_fake_driver(host.path("/drv"))
    results = host.run()
    assert_status(results, "direct.driver", OK, "driver-root /drv", f"driver {DRIVER}", "2 GPU(s)")
    host.remove("/usr/bin/nvidia-container-cli")
    assert_status(host.run(), "cli.installed", SKIP, "direct")


def test_open_kernel_module_version_line_is_read(host):
    host.file(
        "/proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
        "(dvs-builder@U16-I3-B13-4-3)  Tue Mar  5 22:15:33 UTC 2024\n",
    )
    results = host.run()
    assert_status(results, "driver.kernel", OK, "kernel module 550.54.15")
    assert_status(results, "driver.libraries", FAIL, "kernel module 550.54.15", DRIVER)


# -- config.toml against NVIDIA's toolkit (docs/nvidia-toolkit.md) --------------------------

NVIDIA_MAIN = Path(__file__).parents[2] / "data" / "nvidia-config" / "main.toml"


def test_nvidias_own_file_is_valid_its_unused_keys_listed_and_auto_resolved(host):
    from fixtures.fake_driver import build_fake_driver

    text = NVIDIA_MAIN.read_text().replace('#root = "/run/nvidia/driver"', 'root = "/drv"')
    host.file("/etc/nvidia-container-runtime/config.toml", text)
    results = host.run()
    assert_status(results, "toolkit.config", OK, "valid")
    r = assert_status(results, "toolkit.keys", OK,
                      "nvidia-container-runtime-hook.skip-mode-detection: not used by nvdocker2",
                      "nvidia-ctk.path: not used")
    assert "modes.cdi" not in r.detail  # cdi mode reads its keys
    assert_status(results, "toolkit.mode", OK, "mode = 'auto' resolves to direct",
                  "no GPU in /drv/proc/driver/nvidia/gpus", "jit-cdi")
    build_fake_driver(host.path("/drv"))
    results = host.run()
    assert_status(results, "toolkit.mode", OK, "resolves to direct: GPUs in /drv/proc")
    assert_status(results, "direct.driver", OK, "driver-root /drv", "2 GPU(s)")
    host.file("/drv/etc/nv_tegra_release", "# R36\n")
    import shutil

    shutil.rmtree(host.path("/drv/proc/driver/nvidia/gpus"))
    assert_status(host.run(), "toolkit.mode", OK, "resolves to csv", "Tegra")


def test_unknown_keys_warn_and_every_nvidia_mode_is_served(host):
    path = "/etc/nvidia-container-runtime/config.toml"
    host.file(path, '[nvidia-container-runtime]\nmode = "fast"\nspeed = 3\n')
    results = host.run()
    assert_status(results, "toolkit.config", OK, "valid")
    assert_status(results, "toolkit.keys", WARN, "'fast' is a mode no NVIDIA release knows",
                  "key 'nvidia-container-runtime.speed' is not one any NVIDIA release knows")
    assert_status(results, "toolkit.mode", OK, "mode = 'fast' resolves to")
    host.file(path, '[nvidia-container-runtime]\nmode = "cdi"\n')
    assert_status(host.run(), "toolkit.mode", OK, "mode = 'cdi'")
    host.file(path, '[nvidia-container-runtime]\nmode = "csv"\n')
    assert_status(host.run(), "toolkit.mode", OK, "mode = 'csv'")


def test_every_hint_that_names_an_nvdocker2_command_carries_the_config_given(host):
    """doctor --config PATH: the commands its hints suggest change PATH, not the default
    file (a broken file, a missing runtime entry, a default naming no runtime)."""
    given = "/srv/docker conf/daemon.json"
    host.daemon_json({"default-runtime": "nvidia"}, given)
    results = host.run(config_override=PurePosixPath(given))
    assert_status(results, "config.runtime", FAIL,
                  "run: nvdocker2 install --config '/srv/docker conf/daemon.json'")
    assert_status(results, "config.default-runtime", FAIL,
                  "nvdocker2 uninstall --config '/srv/docker conf/daemon.json' repairs")
    for r in results.values():
        if r.hint and "nvdocker2 install" in r.hint:
            assert "--config '/srv/docker conf/daemon.json'" in r.hint, r
