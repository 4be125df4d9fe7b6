"""Each doctor check against a prepared fake host root (a tmp tree standing for /proc, /dev,
/sys, /etc, /usr), covering ok, warn and fail: the whole run, daemon.json and dockerd here;
the host's programs, config.toml and the driver in test_doctor_host_checks.py.

Test fixtures, clearly labelled: the GPU boundary (driver files under /proc, device nodes made
with os.mknod, nvidia-smi and nvidia-container-cli scripts) and the Engine API answer (a dict
shaped like dockerd 20.10's `GET /info`). The real dockerd is exercised in tests/e2e.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path, PurePosixPath

import pytest

import nvdocker2
from nvdocker2.engines.docker.doctor import all_checks, diagnose
from nvdocker2.engines.docker.doctor.facts import DockerContext as Context
from nvdocker2.engines.docker.doctor.facts import EngineUnreachable
from nvdocker2.doctor.host import HostRoot
from nvdocker2.doctor.model import FAIL, OK, SKIP, WARN, run_checks

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
        return {r.id: r for r in diagnose(ctx=self.context(**kw))}


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
    results = {r.id: r for r in diagnose(ctx=ctx)}
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
    results = {r.id: r for r in diagnose(ctx=ctx)}
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
