"""Which daemon.json a host's Docker reads (rootful, rootless, snap), and why."""

from __future__ import annotations

from pathlib import Path

from nvdocker2 import locations


def test_rootful_is_the_default(tmp_path):
    path, why = locations.default_config(env={}, euid=0, root=str(tmp_path))
    assert path == Path("/etc/docker/daemon.json") and "rootful" in why


def test_rootless_when_not_root_and_the_user_socket_exists(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "docker.sock").touch()
    env = {"XDG_RUNTIME_DIR": str(run), "HOME": "/home/u"}
    path, why = locations.default_config(env=env, euid=1000, root=str(tmp_path))
    assert path == Path("/home/u/.config/docker/daemon.json")
    assert "rootless" in why and str(run / "docker.sock") in why
    env["XDG_CONFIG_HOME"] = "/cfg"
    assert locations.default_config(env=env, euid=1000, root=str(tmp_path))[0] == Path(
        "/cfg/docker/daemon.json"
    )
    # Root with the same environment is rootful; a user without the socket too.
    assert locations.default_config(env=env, euid=0, root=str(tmp_path))[0] == Path(
        "/etc/docker/daemon.json"
    )
    (run / "docker.sock").unlink()
    assert locations.default_config(env=env, euid=1000, root=str(tmp_path))[0] == Path(
        "/etc/docker/daemon.json"
    )


def test_snap_when_only_the_snap_is_installed(tmp_path):
    (tmp_path / "var/snap/docker/current/config").mkdir(parents=True)
    path, why = locations.default_config(env={}, euid=0, root=str(tmp_path))
    assert path == Path("/var/snap/docker/current/config/daemon.json") and "snap" in why
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/dockerd").touch()
    path, why = locations.default_config(env={}, euid=0, root=str(tmp_path))
    assert path == Path("/etc/docker/daemon.json")
    assert "--config /var/snap/docker/current/config/daemon.json" in why


def test_reload_hints_name_the_right_command():
    assert "systemctl reload docker" in locations.reload_hint(Path("/etc/docker/daemon.json"))
    assert locations.reload_hint(Path(locations.SNAP_CONFIG)) == "sudo snap restart docker"
    hint = locations.reload_hint(
        Path("/home/u/.config/docker/daemon.json"), env={"HOME": "/home/u"}
    )
    assert hint == "systemctl --user reload docker"
