"""A dockerd that keeps a default runtime no file names, and one that dies on a reload: the
install keeps the running default valid, and a death is noticed at once, quoted from dockerd's
log, and leaves daemon.json with the bytes it had (docs/reference.md §2, reload.md)."""

from __future__ import annotations

import json
import time

from dockerd_cli import RUNTIME, nvdocker2

NVIDIA = {"runtimes": {"nvidia": {"path": RUNTIME}}, "default-runtime": "nvidia"}
BY_HAND = b'{"log-level": "info"}\n'
TIMEOUT = 20


def _default_nobody_names(daemon) -> None:
    """dockerd running default runtime "nvidia" from a file that no longer names it: the keys
    were removed by hand and dockerd reloaded, which keeps both (absent keys are kept)."""
    daemon.config_file.write_text(json.dumps(NVIDIA) + "\n")
    daemon.sighup()
    daemon.wait_info(lambda i: i.get("DefaultRuntime") == "nvidia")
    daemon.config_file.write_bytes(BY_HAND)
    count = daemon.log_file.read_text(errors="replace").count("Reloaded configuration")
    daemon.sighup()
    deadline = time.monotonic() + 15
    while daemon.log_file.read_text(errors="replace").count("Reloaded configuration") == count:
        assert time.monotonic() < deadline, daemon.log_tail()
        time.sleep(0.05)
    assert daemon.info()["DefaultRuntime"] == "nvidia"


def _install(daemon, *extra: str, env: dict | None = None):
    return nvdocker2(daemon, "install", "--runtime-path", RUNTIME, "--allow-missing-runtime",
                     "--runtime-name", "nvc",
                     "--reload", "signal", "--dockerd-log", str(daemon.log_file),
                     "--timeout", str(TIMEOUT), *extra, env=env)


def test_install_keeps_the_running_default_runtime_valid(make_dockerd):
    daemon = make_dockerd()
    _default_nobody_names(daemon)
    out = _install(daemon, "--json")
    assert out.returncode == 0, out.stderr
    assert daemon.running(), daemon.log_tail()
    info = daemon.info()
    assert info["DefaultRuntime"] == "runc" and info["Runtimes"]["nvc"] == {"path": RUNTIME}
    assert "nvidia" not in info["Runtimes"]
    assert daemon.config_file.read_bytes() == (
        b'{"log-level": "info", "runtimes": {"nvc": {"path": "%s"}}}\n' % RUNTIME.encode())
    result = json.loads(out.stdout)
    assert result["verified"] is True
    assert any('dockerd runs the default runtime "nvidia"' in n for n in result["notes"])


def test_a_dockerd_that_panics_on_the_reload_is_noticed_at_once_and_the_bytes_come_back(
        make_dockerd):
    daemon = make_dockerd()
    _default_nobody_names(daemon)
    pid = daemon.pid
    # Another program's write right before the reload: a file that drops the runtime dockerd
    # runs as its default, on which dockerd 20.10 dies (nil pointer dereference).
    clobber = f"printf '%s' '{{\"runtimes\": {{}}}}' > {daemon.config_file}"
    start = time.monotonic()
    out = _install(daemon, env={"NVDOCKER2_TEST_RUN_BEFORE_RELOAD": clobber})
    took = time.monotonic() - start
    assert not daemon.running()
    assert daemon.config_file.read_bytes() == BY_HAND
    assert out.returncode == 4, out.stderr
    error, hint = out.stderr.splitlines()[-2:]
    assert error.startswith(f"error: dockerd (pid {pid}) exited after the reload: panic: "
                            "runtime error: invalid memory address or nil pointer dereference")
    assert "the previous file was restored from backup" in error
    assert hint.startswith("hint: dockerd is not running; start it again: ")
    assert f"--pidfile={daemon.pidfile}" in hint and "kill -HUP" not in hint
    assert took < TIMEOUT, out.stderr


def test_a_dockerd_killed_during_the_reload_leaves_the_previous_bytes(make_dockerd):
    daemon = make_dockerd()
    before = b'{"debug": false}\n'
    daemon.config_file.write_bytes(before)
    pid = daemon.pid
    out = _install(daemon, "--json", env={"NVDOCKER2_TEST_RUN_BEFORE_RELOAD": f"kill -KILL {pid}"})
    assert not daemon.running()
    assert daemon.config_file.read_bytes() == before
    assert out.returncode == 4, out.stderr
    error, hint = out.stderr.splitlines()[-2:]
    assert error.startswith(f"error: dockerd (pid {pid}) exited")
    assert hint.startswith("hint: dockerd is not running; start it again: ")
    result = json.loads(out.stdout)  # --json names the file and the backup it restored from
    assert (result["changed"], result["config"], result["exit_code"]) == (
        False, str(daemon.config_file), 4)
    assert f"restored from backup {result['backup']}" in result["error"]
