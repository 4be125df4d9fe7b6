"""The harness itself: a private dockerd serves, runs a container, reloads, restarts."""

from __future__ import annotations

import json


def test_private_dockerd_runs_a_container_from_the_busybox_image(dockerd):
    out = dockerd.docker("run", "--rm", "--network=none", dockerd.image, "sh", "-c", "echo ok")
    assert out.stdout == "ok\n"
    assert dockerd.info()["DefaultRuntime"] == "runc"


def test_reset_clears_a_runtime_added_by_reload(dockerd, tmp_path):
    dockerd.config_file.write_text(json.dumps({"runtimes": {"extra": {"path": "/bin/true"}}}))
    dockerd.sighup()
    dockerd.wait_info(lambda i: "extra" in i["Runtimes"])
    dockerd.reset()
    assert "extra" not in dockerd.info()["Runtimes"]
    assert dockerd.config_file.read_bytes() == b"{}\n"


def test_restart_gives_a_new_pid_and_keeps_serving(make_dockerd):
    daemon = make_dockerd(extra_args=["--log-level=warn"])
    first = daemon.pid
    daemon.restart()
    assert daemon.pid != first
    assert daemon.info()["ServerVersion"]
