"""The launchers packages install (nvdocker2.runtime.launcher)."""

from __future__ import annotations

import ast
import os
import re
import subprocess

from nvdocker2.runtime.launcher import main, render

SYS_PATH_LINE = re.compile(r"sys\.path\[len\(sys\.path\):\] = (\[[^\]]*\])")


def test_both_launchers_name_the_interpreter_and_the_package_directory():
    texts = render("/usr/bin/python3", ["/usr/lib/python3/dist-packages"])
    runtime, hook = texts["nvidia-container-runtime"], texts["nvidia-container-runtime-hook"]
    assert runtime.startswith("#!/bin/sh\n")
    assert "\npy=/usr/bin/python3\n" in runtime
    assert runtime.endswith('\nexec "$py" -I -S -c "$code" "$0" "$@"\n')
    assert hook.startswith("#!/usr/bin/python3 -IS\n")
    for text in (runtime, hook):
        found = SYS_PATH_LINE.search(text)
        assert found and ast.literal_eval(found.group(1)) == ["/usr/lib/python3/dist-packages"]


def test_written_launchers_are_executable_and_run(tmp_path):
    assert main([str(tmp_path)]) == 0
    for name in ("nvidia-container-runtime", "nvidia-container-runtime-hook"):
        assert os.access(tmp_path / name, os.X_OK)
    proc = subprocess.run([str(tmp_path / "nvidia-container-runtime-hook"), "poststop"],
                          capture_output=True, text=True, env={})
    assert (proc.returncode, proc.stderr) == (0, "")
    proc = subprocess.run([str(tmp_path / "nvidia-container-runtime-hook")],
                          capture_output=True, text=True, env={})
    assert proc.returncode == 2 and "usage:" in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["nvidia-container-runtime",
                                            "nvidia-container-runtime-hook"]
