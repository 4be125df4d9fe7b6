"""The launchers packages install (nvdocker2.runtime.launcher)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nvdocker2.runtime.launcher import CLI_NAME, main, render, render_cli, render_pip

SYS_PATH_LINE = re.compile(r"sys\.path\[len\(sys\.path\):\] = (\[[^\]]*\])")


def test_both_launchers_name_the_interpreter_and_the_package_directory():
    texts = render("/usr/bin/python3", ["/usr/lib/python3/dist-packages"])
    runtime, hook = texts["nvidia-container-runtime"], texts["nvidia-container-runtime-hook"]
    assert runtime.startswith("#!/bin/sh\n")
    assert "\npy=/usr/bin/python3\n" in runtime
    assert runtime.endswith('\nexec "$py" -I -S -c "$code" "$self" "$@"\n')
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


def test_our_cli_launcher_runs_python_isolated_with_the_package_directory():
    text = render_cli("/usr/bin/python3", ["/usr/lib/python3/dist-packages"])
    assert text.startswith("#!/bin/sh\n")
    assert "\npy=/usr/bin/python3\n" in text
    assert text.endswith('\nexec "$py" -I -S -c "$code" "$self" "$@"\n')
    found = SYS_PATH_LINE.search(text)
    assert found and ast.literal_eval(found.group(1)) == ["/usr/lib/python3/dist-packages"]


def test_our_cli_launcher_goes_only_where_asked_and_ignores_pythonpath(tmp_path):
    """`--cli DIR` writes it there, never into DEST (the packages' /usr/bin, where NVIDIA's
    nvidia-container-cli lives); a PYTHONPATH that shadows nvdocker2 changes nothing."""
    bin_, libexec = tmp_path / "bin", tmp_path / "libexec"
    bin_.mkdir()
    libexec.mkdir()
    assert main([str(bin_), "--cli", str(libexec)]) == 0
    assert sorted(os.listdir(bin_)) == ["nvidia-container-runtime",
                                        "nvidia-container-runtime-hook"]
    assert os.listdir(libexec) == [CLI_NAME]
    shadow = tmp_path / "shadow" / "nvdocker2"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise SystemExit('shadow imported')\n")
    env = {"PYTHONPATH": str(shadow.parent), "PYTHONHOME": "/nonexistent"}
    proc = subprocess.run([str(libexec / CLI_NAME), "--version"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith("cli-version: ")
    proc = subprocess.run([str(libexec / CLI_NAME), "--root=/nonexistent", "info"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.startswith("nvidia-container-cli: initialization error: ")


def test_our_cli_launcher_is_never_written_into_dest(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main([str(tmp_path), "--cli", str(tmp_path)])
    assert exited.value.code == 2
    assert "--cli DIR must not be DEST" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


# --- the launchers a pip install ships --------------------------------------------------------

REPO = Path(__file__).resolve().parents[3]
NAMES = ("nvidia-container-runtime", "nvidia-container-runtime-hook")


def test_pip_launchers_in_the_tree_are_what_the_generator_writes():
    texts = render_pip()
    pyproject = (REPO / "pyproject.toml").read_text()
    for name in NAMES:
        path = REPO / "nvdocker2" / "runtime" / "bin" / name
        assert path.read_text() == texts[name], (
            f"rerun: python3 -m nvdocker2.runtime.launcher --pip {path.parent}")
        assert os.access(path, os.X_OK)
        assert f'"nvdocker2/runtime/bin/{name}"' in pyproject
        assert f"\n{name} = " not in pyproject  # not a (slow) console script
        assert texts[name].startswith("#!/bin/sh\n")


def pip_prefix(tmp_path: Path, version: str, sh_form: bool = False) -> Path:
    """A pip-like install: PREFIX/bin/{nvdocker2, launchers}, the package (a copy saying
    `version`) in PREFIX/lib/pythonX.Y/site-packages."""
    lib = tmp_path / "prefix" / "lib"
    site = lib / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    shutil.copytree(REPO / "nvdocker2", site / "nvdocker2",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (site / "nvdocker2" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    bin_ = tmp_path / "prefix" / "bin"
    bin_.mkdir()
    if sh_form:  # pip's form for an interpreter path that is long or has spaces
        head = f"#!/bin/sh\n'''exec' \"{sys.executable}\" \"$0\" \"$@\"\n' '''\n"
    else:
        head = f"#!{sys.executable}\n"
    (bin_ / "nvdocker2").write_text(
        head + "import sys\nfrom nvdocker2.cli import main\nsys.exit(main())\n")
    for name, text in render_pip().items():
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    return bin_


def stand_in_runc(tmp_path: Path) -> str:
    d = tmp_path / "runc-bin"
    d.mkdir()
    (d / "runc").write_text('#!/bin/sh\necho "runc version 1.9.9-stand-in $*"\n')
    (d / "runc").chmod(0o755)
    return f"{d}:/usr/bin:/bin"


def test_pip_launchers_run_the_package_installed_beside_them(tmp_path):
    bin_ = pip_prefix(tmp_path, "7.7.7-pip")
    env = {"PATH": stand_in_runc(tmp_path), "PYTHONPATH": str(REPO / "nonexistent"),
           "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(tmp_path / "none.toml")}
    r = subprocess.run([str(bin_ / "nvidia-container-runtime-hook"), "--version"],
                       capture_output=True, text=True, env=env)
    assert (r.returncode, r.stdout) == (
        0, "nvidia-container-runtime-hook version 7.7.7-pip (nvdocker2)\n")
    r = subprocess.run([str(bin_ / "nvidia-container-runtime"), "--version"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("nvidia-container-runtime version 7.7.7-pip (nvdocker2)\n\n"
                        "runc version 1.9.9-stand-in --version\n")
    # Not create: runc straight from sh, no Python (a broken interpreter does not matter).
    (bin_ / "nvdocker2").write_text("#!/nonexistent/python\n")
    r = subprocess.run([str(bin_ / "nvidia-container-runtime"), "state", "x"],
                       capture_output=True, text=True, env=env)
    assert (r.returncode, r.stdout) == (0, "runc version 1.9.9-stand-in state x\n")


def test_pip_launchers_read_pips_sh_form_and_follow_pipx_links(tmp_path):
    bin_ = pip_prefix(tmp_path, "8.8.8-pipx", sh_form=True)
    links = tmp_path / "local-bin"
    links.mkdir()
    for name in ("nvdocker2", *NAMES):
        (links / name).symlink_to(bin_ / name)
    r = subprocess.run([str(links / "nvidia-container-runtime-hook"), "--version"],
                       capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert (r.returncode, r.stdout) == (
        0, "nvidia-container-runtime-hook version 8.8.8-pipx (nvdocker2)\n")
    r = subprocess.run([str(links / "nvidia-container-runtime-hook"), "poststop"],
                       capture_output=True, text=True, env={})
    assert (r.returncode, r.stderr) == (0, "")


def test_the_runtime_launchers_entry_keeps_the_exit_status_and_the_buffered_output(tmp_path):
    """`launch` (what both runtime launchers run) ends the process without Python's teardown:
    what was printed to a pipe still comes out, the status is main's, and output that cannot
    be written is status 120, as with Python's own exit."""
    code = (f"import sys; sys.path.append({str(REPO)!r}); import nvdocker2.runtime as r\n"
            "def main(args, self_path):\n"
            "    print('out', self_path, *args)\n"
            "    print('err', file=sys.stderr)\n"
            "    return 3\n"
            "r.main = main\n"
            "r.launch(['a', 'b'], 'self')\n")
    argv = [sys.executable, "-I", "-S", "-c", code]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out self a b\n", "err\n")
    with open(os.devnull, "w") as null, open("/dev/full", "w") as full:
        proc = subprocess.run(argv, stdout=full, stderr=null, timeout=60)
    assert proc.returncode == 120


def test_runtime_launcher_on_a_path_without_links_runs_no_readlink_before_python(tmp_path):
    """`create` on every GPU container start: on a path without links, the door's walk has
    already found the file itself, so Python is told that path and no `readlink -f` runs (one
    program less each create); through a link, the path Python is told is still the real
    file's."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (Debian package strace)")
    real = tmp_path / "real"
    real.mkdir()
    py = real / "python"
    py.write_text('#!/bin/sh\nshift 4\nprintf "%s\\n" "$@"\n')  # -I -S -c CODE, then the rest
    py.chmod(0o755)
    for name, text in render(str(py), [str(REPO)]).items():
        (real / name).write_text(text)
        (real / name).chmod(0o755)
    (tmp_path / "link").symlink_to(real)
    launcher = real / "nvidia-container-runtime"
    for path in (launcher, tmp_path / "link" / "nvidia-container-runtime"):
        trace = tmp_path / "trace"
        r = subprocess.run([strace, "-f", "-qq", "-s", "4096", "-e", "trace=execve", "-o",
                            str(trace), str(path), "create", "ID"],
                           capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
        assert (r.returncode, r.stdout) == (0, f"{launcher}\ncreate\nID\n"), r.stderr
        runs = re.findall(r'execve\("([^"]*)"', trace.read_text())
        readlinks = [p for p in runs if os.path.basename(p) == "readlink"]
        assert bool(readlinks) == (path != launcher), runs
