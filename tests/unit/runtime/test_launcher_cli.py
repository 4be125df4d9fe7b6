"""`python3 -m nvdocker2.runtime.launcher`, which the packages run to write the launchers, as
a process: the paths it wrote on stdout, each launcher mode 0755 and whole, a temporary file
an interrupted run left behind replaced and gone, and its --help saying what each option is."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import nvdocker2
from nvdocker2.runtime.launcher import render

REPO = os.path.dirname(os.path.dirname(os.path.abspath(nvdocker2.__file__)))


def launcher(*args, cwd="/"):
    return subprocess.run([sys.executable, "-m", "nvdocker2.runtime.launcher", *args],
                          capture_output=True, text=True, timeout=60, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": REPO})


def test_it_writes_both_launchers_and_prints_their_paths(tmp_path):
    dest, cli = tmp_path / "bin", tmp_path / "libexec"
    dest.mkdir()
    cli.mkdir()
    (dest / "nvidia-container-runtime.tmp").write_text("left by an interrupted run\n")
    done = launcher(str(dest), "--python", "/usr/bin/python3", "--path", REPO,
                    "--cli", str(cli))
    assert (done.returncode, done.stderr) == (0, "")
    written = [dest / "nvidia-container-runtime", dest / "nvidia-container-runtime-hook",
               cli / "nvidia-container-cli"]
    assert done.stdout.splitlines() == [str(p) for p in written]
    assert [stat.S_IMODE(os.stat(p).st_mode) for p in written] == [0o755] * 3
    texts = render("/usr/bin/python3", [REPO])
    assert (dest / "nvidia-container-runtime").read_text() == texts["nvidia-container-runtime"]
    assert sorted(os.listdir(dest)) == ["nvidia-container-runtime",
                                        "nvidia-container-runtime-hook"]


def test_its_help_says_what_each_option_is():
    done = launcher("--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for words in ("usage: python3 -m nvdocker2.runtime.launcher",
                  "dest directory for the two launchers (e.g. /usr/bin)",
                  "--python PYTHON interpreter to run",
                  "--path PATH sys.path entry (default: nvdocker2's)",
                  "--pip the launchers a pip install ships (nvdocker2/runtime/bin)",
                  "--cli DIR also write our nvidia-container-cli's launcher into DIR (not DEST:"
                  " /usr/bin/nvidia-container-cli is NVIDIA's)"):
        assert words in text, words
