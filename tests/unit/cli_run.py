"""Run the `nvdocker2` command in-process, through `nvdocker2.cli.main` (what the console
script runs), the same way on every typer version: click's CliRunner changed its arguments in
click 8.2, and typer >= 0.20 carries its own click."""

from __future__ import annotations

import contextlib
import io

from nvdocker2.cli import main


def cli(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `nvdocker2 ARGS...`."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        else:  # pragma: no cover - main always exits
            code = 0
    return code, out.getvalue(), err.getvalue()


def engine_env(tmp_path, monkeypatch, config: bytes | None = None):
    """A private state directory and a PATH with no containerd, crio or systemctl on it, for
    running `--engine` commands with nothing but their files; with `config`, a config.toml
    holding those bytes, whose path is returned."""
    monkeypatch.setenv("NVDOCKER2_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    if config is None:
        return None
    cfg = tmp_path / "config.toml"
    cfg.write_bytes(config)
    return cfg
