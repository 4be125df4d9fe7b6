"""docs/layout.md names every module of nvdocker2/ (every .py file, and every other file in
the package's folders: the schema, the packaged config.toml, the units and udev rules, the sh
launchers) and nothing that is gone: its tree is where a reader looks for each module's home.

The tree is the code block that starts with `nvdocker2/`: one entry a line, two spaces of
indentation per level, a folder's name ending in `/`; a line indented deeper than an entry
there could be continues the description above it."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
LAYOUT = REPO / "docs" / "layout.md"
PACKAGE = REPO / "nvdocker2"
ENTRY = re.compile(r"( *)(\S+)")


def package_entries() -> set[str]:
    """Every file of the package and every folder holding one, as `nvdocker2/...`."""
    entries = set()
    for path in PACKAGE.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            relative = path.relative_to(REPO)
            entries.add(relative.as_posix())
            entries.update(f"{parent.as_posix()}/" for parent in relative.parents[:-1])
    return entries


def named(text: str) -> dict[str, list[int]]:
    """What the tree names: each entry (a folder with its `/`) -> the lines naming it."""
    lines = text.splitlines()
    start = lines.index("nvdocker2/")
    folders: list[str] = []
    names: dict[str, list[int]] = {}
    for number, line in enumerate(lines[start:], start + 1):
        if line.startswith("```"):
            break
        match = ENTRY.match(line)
        if match is None:
            continue
        indent, name = len(match.group(1)), match.group(2)
        if indent % 2 or indent // 2 > len(folders):
            continue  # the description above, continued
        del folders[indent // 2:]
        path = "".join(folders) + name
        names.setdefault(path, []).append(number)
        if name.endswith("/"):
            folders.append(name)
    return names


def differences(text: str, entries: set[str]) -> list[str]:
    """One line per mend the tree needs, saying what to write where."""
    tree = named(text)
    problems = []
    for entry in sorted(entries - set(tree)):
        parts = entry.rstrip("/").split("/")
        name = parts[-1] + ("/" if entry.endswith("/") else "")
        parent = "/".join(parts[:-1]) + "/"
        problems.append(
            f"{entry} is not in docs/layout.md's tree: add the line "
            f"\"{'  ' * (len(parts) - 1)}{name}  <what it holds>\" in the block of "
            f"\"{'  ' * (len(parts) - 2)}{parts[-2]}/\" ({parent})")
    for entry in sorted(set(tree) - entries):
        problems.append(f"{entry} is named on line {tree[entry][0]} of docs/layout.md but is "
                        "not in the package: remove that line, or name it where it went")
    for entry, numbers in sorted(tree.items()):
        if len(numbers) > 1:
            problems.append(f"{entry} is named on lines {numbers} of docs/layout.md: keep one")
    return problems


def test_the_layout_names_every_module_and_nothing_that_is_gone():
    problems = differences(LAYOUT.read_text(), package_entries())
    assert not problems, "\n".join(problems)


SAMPLE = """\
# Where the code lives

```
nvdocker2/
  cli/                 the command
    __init__.py        main()
    app.py             typer, and a description that goes on
                       over a second line that starts with a word
  gone.py              removed since
  host/
    run.py             every program
    run.py             named twice
```
"""


def test_the_tree_is_read_by_indentation_with_continued_descriptions():
    assert named(SAMPLE) == {
        "nvdocker2/": [4], "nvdocker2/cli/": [5], "nvdocker2/cli/__init__.py": [6],
        "nvdocker2/cli/app.py": [7], "nvdocker2/gone.py": [9], "nvdocker2/host/": [10],
        "nvdocker2/host/run.py": [11, 12]}


def test_each_difference_says_what_to_write_and_where():
    entries = {"nvdocker2/", "nvdocker2/cli/", "nvdocker2/cli/__init__.py",
               "nvdocker2/cli/app.py", "nvdocker2/host/", "nvdocker2/host/run.py",
               "nvdocker2/host/files.py", "nvdocker2/new/", "nvdocker2/new/engine.py"}
    assert differences(SAMPLE, entries) == [
        'nvdocker2/host/files.py is not in docs/layout.md\'s tree: add the line '
        '"    files.py  <what it holds>" in the block of "  host/" (nvdocker2/host/)',
        'nvdocker2/new/ is not in docs/layout.md\'s tree: add the line '
        '"  new/  <what it holds>" in the block of "nvdocker2/" (nvdocker2/)',
        'nvdocker2/new/engine.py is not in docs/layout.md\'s tree: add the line '
        '"    engine.py  <what it holds>" in the block of "  new/" (nvdocker2/new/)',
        "nvdocker2/gone.py is named on line 9 of docs/layout.md but is not in the package: "
        "remove that line, or name it where it went",
        "nvdocker2/host/run.py is named on lines [11, 12] of docs/layout.md: keep one"]


def test_the_package_entries_are_its_files_and_folders():
    entries = package_entries()
    assert {"nvdocker2/", "nvdocker2/host/", "nvdocker2/host/run.py",
            "nvdocker2/engines/docker/daemonjson/schema.json",
            "nvdocker2/runtime/bin/nvidia-container-runtime"} <= entries
    assert not [e for e in entries if "__pycache__" in e or e.endswith(".pyc")]
