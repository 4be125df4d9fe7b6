"""README.md is the front door and docs/ holds the reference; these keep both true to the code:
the two commands at the top, every command with an example that the real CLI accepts, every
link resolving, every doctor check documented, and the duplicate-key behaviour quoted as the
code states it."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from nvdocker2.engines.docker.daemonjson.document import parse
from nvdocker2.engines.docker.doctor import all_checks

REPO = Path(__file__).resolve().parents[3]
README = (REPO / "README.md").read_text()
NVDOCKER2 = Path(sys.executable).parent / "nvdocker2"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# Pages that other work adds beside these ones; until they exist, the README may name them
# under "Read more" only.
PENDING: set[str] = set()


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_readme_is_a_short_front_door_that_starts_with_the_two_commands():
    assert len(README.splitlines()) <= 250
    first_block = README.split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in first_block.splitlines()] == [
        "bash scripts/demo.sh", "bash scripts/test.sh"]
    assert "bash scripts/test.sh" in (REPO / ".ci/run").read_text()
    for title in ("What it is", "Install on a real host", "Commands", "Exit codes", "Read more"):
        assert f"\n## {title}\n" in README, title


def test_readme_says_what_the_test_command_downloads_and_what_pipx_needs():
    first_block = README.split("```bash\n", 1)[1].split("```", 1)[0]
    test_line = next(line for line in first_block.splitlines() if "scripts/test.sh" in line)
    # scripts/test.sh builds pip venvs and ansible-core's venv, from PyPI unless cached
    script = (REPO / "scripts/test.sh").read_text()
    assert "scripts/test-venvs.sh" in script and "scripts/ansible-test.sh" in script
    assert "pip install" in (REPO / "scripts/test-venvs.sh").read_text()
    assert "pinned-venv.sh .venv-ansible ansible-core" in (
        REPO / "scripts/ansible-test.sh").read_text()
    assert "pip install" in (REPO / "scripts/pinned-venv.sh").read_text()
    assert "PyPI" in test_line and "ansible-core" in test_line and "pip test venvs" in test_line
    pipx = README[:README.index("pipx install .")].rsplit("\n#", 1)[1]
    assert "pipx must be installed first" in pipx


def commands_table() -> list[tuple[str, str]]:
    rows = []
    for line in section(README, "Commands").splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and cells[2].startswith("`") and "nvdocker2" in cells[2]:
            rows.append((cells[0].strip("`"), cells[2].strip("`")))
    return rows


def test_every_command_has_a_one_line_example():
    named = {name for name, _ in commands_table()}
    for command in ("install", "uninstall", "rollback", "backups", "status", "doctor",
                    "cdi generate", "install --mode", "install --dry-run", "--version"):
        assert command in named, command
    from nvdocker2.cli import app

    for c in app.registered_commands:
        assert (c.name or c.callback.__name__) in named


@pytest.mark.parametrize("name, example", commands_table())
def test_each_example_is_accepted_by_the_real_cli(name, example):
    argv = shlex.split(example)
    if argv[0] == "sudo":
        argv = argv[1:]
    assert argv[0] == "nvdocker2" and name.split()[0] in argv
    # --help after the example: click rejects an unknown flag or a missing value first.
    proc = subprocess.run([str(NVDOCKER2), *argv[1:], "--help"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_every_link_resolves():
    read_more = section(README, "Read more")
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if "://" in target:
                continue
            path = (page.parent / target).resolve()
            relative = str(path.relative_to(REPO))
            if relative in PENDING and not path.exists():
                assert page.name == "README.md" and f"]({target})" in read_more, target
                continue
            assert path.exists(), f"{page.name}: {target}"
    for doc in (REPO / "docs").glob("*.md"):
        assert f"(docs/{doc.name})" in read_more, f"README does not link {doc.name}"


def test_docs_doctor_lists_every_check():
    text = (REPO / "docs/doctor.md").read_text()
    table = {cell for row in re.findall(r"^\| (`[^|]+) \|", text, re.M)
             for cell in re.findall(r"`([^`]+)`", row)}
    assert {c.id for c in all_checks(smoke=True)} <= table


def test_docs_quote_the_duplicate_key_warning_as_the_code_gives_it():
    warning = parse(b'{"log-level": "warn", "log-level": "info"}').warnings[0]
    quoted = warning.split(": ", 1)[1]
    text = " ".join((REPO / "docs/daemon-json.md").read_text().split())
    assert f"`{quoted}`" in text


# What a citation of a file outside the repository looks like: the old working contract and
# its notes, or a path beside the checkout.
OUTSIDE = re.compile(r"\bSPEC\.md\b|\bSPEC §|[Tt]he spec §|DOCKERD-FACTS|\.\./shared\b"
                     r"|/work/shared")


def _tracked() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                             check=True, timeout=60).stdout.decode()
        return [REPO / p for p in out.split("\0") if p]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file
        return [p for p in REPO.rglob("*") if p.is_file() and ".git" not in p.parts
                and not any(part.startswith(".venv") for part in p.parts)]


def test_no_file_cites_a_file_outside_the_repository():
    cited = []
    for path in _tracked():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line) and path.name != "test_docs.py":
                cited.append(f"{path.relative_to(REPO)}:{n}: {line.strip()[:80]}")
    assert cited == []


def test_the_reference_names_every_command_and_flag_of_the_real_cli():
    reference = (REPO / "docs" / "reference.md").read_text()
    assert "[docs/reference.md](docs/reference.md)" in README
    for command in ("install", "uninstall", "rollback", "backups", "status", "doctor",
                    "cdi generate", "cdi refresh"):
        assert f"nvdocker2 {command}" in reference, command
        out = subprocess.run([str(NVDOCKER2), *command.split(), "--help"], capture_output=True,
                             text=True, timeout=60, check=True).stdout
        flags = set(re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z-]*)", out, re.M)) - {"--help"}
        missing = sorted(f for f in flags if f not in reference)
        assert missing == [], (command, missing)
    for code in range(6):
        assert f"\n| {code} | " in reference
