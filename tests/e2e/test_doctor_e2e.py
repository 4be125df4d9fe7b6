"""`nvdocker2 doctor` against real dockerd processes (private daemons, see conftest.py), and
the full run on this machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

RUNTIME = str(Path(sys.executable).parent / "nvidia-container-runtime")


def doctor(*args: str, env: dict | None = None) -> tuple[int, str, str, float]:
    """Run `nvdocker2 doctor ARGS` as a user would; exit code, stdout, stderr, seconds."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "nvdocker2", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start


def doctor_json(daemon, *extra: str, env: dict | None = None) -> tuple[int, dict]:
    """`doctor --json` for `daemon` and its file: exit code, results by id."""
    code, out, _, _ = doctor(
        "--config",
        str(daemon.config_file),
        "--docker-host",
        daemon.host,
        "--json",
        *extra,
        env=env,
    )
    results = json.loads(out)["checks"]
    return code, {r["id"]: r for r in results}


def write_runtime(daemon) -> None:
    daemon.config_file.write_text(
        json.dumps({"runtimes": {"nvidia": {"path": RUNTIME}}}, indent=4) + "\n"
    )


def test_installed_and_loaded_runtime_is_ok(dockerd):
    write_runtime(dockerd)
    dockerd.sighup()
    dockerd.wait_info(lambda i: "nvidia" in i["Runtimes"])
    _, r = doctor_json(dockerd)
    for check_id in (
        "config.target",
        "config.parse",
        "config.validate",
        "config.runtime",
        "config.runtime-path",
        "config.default-runtime",
        "dockerd.reachable",
        "dockerd.runtimes",
        "dockerd.sync",
        "dockerd.flags",
        "runtime.installed",
    ):
        assert r[check_id]["status"] == "ok", r[check_id]
    assert f"nvidia → {RUNTIME}" in r["dockerd.runtimes"]["detail"]
    assert f"pid {dockerd.pid}" in r["config.target"]["detail"]
    assert (
        r["dockerd.reachable"]["detail"].startswith("Docker 20.10")
        or "Docker " in r["dockerd.reachable"]["detail"]
    )


def test_file_changed_but_not_reloaded_warns_stale_naming_the_runtime(dockerd):
    write_runtime(dockerd)
    code, r = doctor_json(dockerd)
    assert code == 1
    assert r["dockerd.sync"]["status"] == "warn"
    assert "runtime 'nvidia'" in r["dockerd.sync"]["detail"]
    assert "not reloaded" in r["dockerd.sync"]["detail"]
    assert f"kill -HUP {dockerd.pid}" in r["dockerd.sync"]["hint"]
    assert r["dockerd.runtimes"]["status"] == "fail"
    assert r["config.runtime"]["status"] == "ok"


def test_flag_and_file_conflict_fails_naming_the_key(make_dockerd):
    daemon = make_dockerd(extra_args=["--log-level=warn"])
    daemon.config_file.write_text('{"log-level": "debug"}\n')
    code, r = doctor_json(daemon)
    assert code == 1
    flags = r["dockerd.flags"]
    assert flags["status"] == "fail"
    assert "'log-level'" in flags["detail"] and "--log-level" in flags["detail"]
    assert f"pid {daemon.pid}" in flags["detail"]
    assert "remove 'log-level'" in flags["hint"]


def test_stopped_dockerd_fails_with_hint_and_the_rest_still_runs(make_dockerd):
    daemon = make_dockerd()
    daemon.stop()
    code, out, err, _ = doctor(
        "--config", str(daemon.config_file), "--docker-host", daemon.host, "--json"
    )
    results = json.loads(out)["checks"]
    r = {x["id"]: x for x in results}
    assert code == 1
    assert r["dockerd.reachable"]["status"] == "fail"
    assert daemon.host in r["dockerd.reachable"]["detail"]
    assert "systemctl start docker" in r["dockerd.reachable"]["hint"]
    assert r["dockerd.sync"]["status"] == "skip"
    assert "dockerd.reachable" in r["dockerd.sync"]["detail"]
    assert r["config.parse"]["status"] == "ok"
    assert r["runtime.low-level"]["status"] == "ok"
    assert {"driver.kernel", "cli.installed", "toolkit.config"} <= set(r)
    assert err == ""


@pytest.mark.skipif(
    os.path.exists("/proc/driver/nvidia/version"),
    reason="this test describes a host without an NVIDIA driver",
)
def test_full_run_on_this_host_exits_1_with_hints_within_2_seconds():
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS")}
    code, out, err, seconds = doctor("--json", env=env)
    assert code == 1, out + err
    obj = json.loads(out)
    results = obj["checks"]
    assert obj["summary"]["total"] == len(results) and obj["summary"]["fail"] >= 3
    assert {r["status"] for r in results} <= {"ok", "warn", "fail", "skip"}
    for r in results:
        assert set(r) == {"id", "status", "detail", "hint"}
        if r["status"] in ("warn", "fail"):
            assert r["hint"], r
    failed = {r["id"] for r in results if r["status"] == "fail"}
    assert {"driver.kernel", "driver.devices"} <= failed
    # no driver here: the cli check waits for it rather than failing on its own
    skipped = {r["id"]: r["detail"] for r in results if r["status"] == "skip"}
    assert skipped["cli.installed"] == "skipped: needs driver.kernel, which failed"
    assert seconds <= 2.0, f"doctor took {seconds:.2f} s"
    # piped without --json or COLUMNS: plain text, the summary first, then one unwrapped line
    # per failure, warning and skip (with its hint below), then the oks as one line of ids
    code, out, err, seconds = doctor(env=env)
    assert code == 1 and err == "" and "\x1b[" not in out
    counts = {s: sum(1 for r in results if r["status"] == s)
              for s in ("fail", "warn", "skip", "ok")}
    lines = out.splitlines()
    assert lines[0].startswith(", ".join(f"{n} {s}" for s, n in counts.items()))
    rows = [line.split()[:2] for line in lines[2:] if not line.startswith(" ")]
    assert [row for row in rows if row[0] == "fail"] == [
        ["fail", r["id"]] for r in results if r["status"] == "fail"]
    assert rows[-1] == ["ok", f"{counts['ok']}"] and lines[-1].count(" ") > counts["ok"]
    assert seconds <= 2.0


@pytest.mark.skipif(
    os.path.exists("/proc/driver/nvidia/version"),
    reason="this test describes a host without an NVIDIA driver",
)
def test_smoke_runs_a_gpu_container_and_reports_what_happened(dockerd):
    write_runtime(dockerd)
    dockerd.sighup()
    dockerd.wait_info(lambda i: "nvidia" in i["Runtimes"])
    _, r = doctor_json(dockerd)
    assert not any(i.startswith("smoke.") for i in r), "smoke runs only with --smoke"
    env = dict(os.environ, NVDOCKER2_SMOKE_IMAGE=dockerd.image)
    code, r = doctor_json(dockerd, "--smoke", env=env)
    assert code == 1
    smoke = r["smoke.runtime"]
    assert smoke["status"] == "fail"
    assert "--runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=all" in smoke["detail"]
    assert dockerd.image in smoke["detail"] and smoke["hint"]
    gpus = r["smoke.gpus"]
    assert gpus["status"] == "fail"
    assert "could not select device driver" in gpus["detail"]
    assert "restart dockerd" in gpus["hint"]
    assert dockerd.docker("ps", "-aq").stdout.strip() == "", "the smoke container is removed"


def test_smoke_with_an_image_not_present_says_to_pull_it(dockerd):
    env = dict(os.environ, NVDOCKER2_SMOKE_IMAGE="nvd2-absent:1")
    _, r = doctor_json(dockerd, "--smoke", env=env)
    assert r["smoke.gpus"]["status"] == "fail"
    assert "nvd2-absent:1 is not present locally" in r["smoke.gpus"]["detail"]
    assert "docker pull nvd2-absent:1" in r["smoke.gpus"]["hint"]
    # no nvidia runtime loaded in this daemon: the runtime smoke test is skipped, saying why
    assert r["smoke.runtime"]["status"] == "skip"
    assert "dockerd.runtimes" in r["smoke.runtime"]["detail"]


def test_gpus_support_follows_the_hook_on_dockerds_own_path(make_dockerd, tmp_path):
    hook = Path(sys.executable).parent / "nvidia-container-runtime-hook"
    early = tmp_path / "early"
    early.mkdir()
    shutil.copy2(hook, early / hook.name)
    daemon = make_dockerd(path_prepend=[early])
    _, r = doctor_json(daemon)
    assert r["dockerd.gpus"]["status"] == "ok", r["dockerd.gpus"]
    assert str(early / hook.name) in r["dockerd.gpus"]["detail"]

    late = tmp_path / "late"
    late.mkdir()
    other = make_dockerd(path_prepend=[late])
    time.sleep(0.6)
    shutil.copy2(hook, late / hook.name)  # installed while dockerd runs
    _, r = doctor_json(other)
    gpus = r["dockerd.gpus"]
    assert gpus["status"] == "warn"
    assert f"after dockerd (pid {other.pid}) started" in gpus["detail"]
    assert "restart" in gpus["hint"]


def test_checking_a_daemon_without_its_file_warns_which_file_it_reads(dockerd):
    code, out, _, _ = doctor("--docker-host", dockerd.host, "--json")
    r = {x["id"]: x for x in json.loads(out)["checks"]}
    target = r["config.target"]
    assert target["status"] == "warn"
    assert f"reads {dockerd.config_file}, not /etc/docker/daemon.json" in target["detail"]
    assert f"--config {dockerd.config_file}" in target["hint"]
    assert r["dockerd.sync"]["status"] == "skip"
    assert str(dockerd.config_file) in r["dockerd.sync"]["detail"]
