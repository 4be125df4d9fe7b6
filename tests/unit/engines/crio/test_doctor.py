"""doctor --engine crio asks the CRI-O on --containerd-address, as install verifies on it: a
`crio` on PATH that answers only for the socket it is given (`crio status --socket S config`).
"""

from __future__ import annotations

import json

from ...cli_run import cli, engine_env

CRIO = """#!/bin/sh
echo "$@" >> {calls}
[ "$1 $2 $3 $4" = "status --socket {sock} config" ] || {{ echo "connection refused" >&2; exit 1; }}
printf '[crio.runtime]\\n  default_runtime = "runc"\\n  [crio.runtime.runtimes.nvidia]\\n'
"""


def _doctor(*args: str) -> dict:
    code, out, err = cli("doctor", "--engine", "crio", *args, "--json")
    assert err == ""
    return {c["id"]: (c["status"], c["detail"]) for c in json.loads(out)["checks"]}


def test_doctor_asks_the_crio_on_the_socket_it_is_given(tmp_path, monkeypatch):
    engine_env(tmp_path, monkeypatch)
    bindir = tmp_path / "empty"
    bindir.mkdir()
    sock, calls = tmp_path / "crio.sock", tmp_path / "calls"
    (bindir / "crio").write_text(CRIO.format(calls=calls, sock=sock))
    (bindir / "crio").chmod(0o755)
    drop = tmp_path / "99-nvidia.conf"
    checks = _doctor("--config", str(drop), "--containerd-address", str(sock))
    assert checks["crio-running"] == ("ok", "the running CRI-O reports runtime nvidia")
    checks = _doctor("--config", str(drop))
    assert checks["crio-running"] == ("fail", "CRI-O does not answer on /var/run/crio/crio.sock")
    assert calls.read_text().splitlines() == [f"status --socket {sock} config",
                                              "status --socket /var/run/crio/crio.sock config"]
