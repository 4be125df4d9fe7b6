"""`dockerd --validate` is only run where the running dockerd is 23.0 or newer (the release
that added the flag); older ones, as /info reports them, are not probed at all."""

from __future__ import annotations

from nvdocker2.engines.docker.daemonjson import validate


def recording_dockerd(tmp_path, refuses: bool):
    calls = tmp_path / "calls"
    exe = tmp_path / "dockerd"
    exe.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n'
                   + ('echo "unable to configure the Docker daemon: bad key"\nexit 1\n' if refuses
                      else 'echo "configuration OK"\n'))
    exe.chmod(0o755)
    return str(exe), calls


def test_dockerd_older_than_23_is_not_probed(tmp_path):
    exe, calls = recording_dockerd(tmp_path, refuses=True)
    cand = tmp_path / "daemon.json"
    cand.write_text("{}")
    for version in ("20.10.24+dfsg1", "22.06.0-beta.0"):
        check = validate.dockerd_validate(cand, dockerd=exe, server_version=version)
        assert (check.available, check.ok) == (False, True)
        assert "has no --validate" in check.output
    assert not calls.exists()


def test_dockerd_23_and_newer_and_unknown_versions_are_asked(tmp_path):
    exe, calls = recording_dockerd(tmp_path, refuses=True)
    cand = tmp_path / "daemon.json"
    cand.write_text("{}")
    for version in ("23.0.0", "28.5.1", None):
        check = validate.dockerd_validate(cand, dockerd=exe, server_version=version)
        assert (check.available, check.ok) == (True, False)
    assert calls.read_text().splitlines() == [f"--validate --config-file {cand}"] * 3
