"""Engine name -> engine: the one place the command line learns which engines exist.

Built in: docker, containerd and crio, each a folder `nvdocker2/engines/<name>/` with
`options.py` (its `OPTIONS`, a list of `CliOption`) and `front.py` (its `Frontend`, made by
`make()`). Another engine joins with `register()`:

    from nvdocker2.engines import registry
    registry.register("podman", OPTIONS, make_frontend)

after which `nvdocker2 install --engine podman` (and every other command) shows and accepts
its options and runs it; no module of the CLI changes. Every command line is parsed against
the engines registered at that moment.

An engine's options are imported as any module is (`importlib.import_module`), so its
package's `__init__.py` runs first: `--help` and every command need the options, so that file
imports nothing of the engine (it re-exports lazily, see engines/containerd/__init__.py). The
format and the service come in only with `frontend()`: docker's, containerd's and CRI-O's
together take longer than the rest of the start.
"""

from __future__ import annotations

import importlib
from typing import Callable, Sequence

from nvdocker2.engines.front import CliOption, EngineEntry, Frontend

BUILTIN = ("docker", "containerd", "crio")

_entries: dict[str, EngineEntry] = {}


def register(name: str, options: Sequence[CliOption], frontend: Callable[[], Frontend]) -> None:
    """Add (or replace) engine `name`. An option another engine also declares for the same
    command must be declared the same way (one flag, one meaning in `--help`)."""
    for opt in options:
        for other in _all_options():
            if other.param == opt.param and set(other.commands) & set(opt.commands) \
                    and other != opt and _owner(other) != name:
                raise ValueError(f"engine {name}: option {opt.flag} differs from the one "
                                 f"engine {_owner(other)} declares")
    _entries[name] = EngineEntry(name, tuple(options), frontend)


def unregister(name: str) -> None:
    """Take engine `name` out again (a test's engine, when the test ends)."""
    _entries.pop(name, None)


def names() -> list[str]:
    """The engines, built-in first, in the order they were registered."""
    _load_builtin()
    return list(_entries)


def get(name: str) -> EngineEntry:
    _load_builtin()
    return _entries[name]


def frontend(name: str) -> Frontend:
    """Engine `name`'s Frontend (imports the engine)."""
    return get(name).frontend()


def options(command: str) -> list[tuple[CliOption, list[str]]]:
    """The options the engines declare for `command`, each with the engines that declare
    it, in the order of their rank."""
    _load_builtin()
    found: dict[str, tuple[CliOption, list[str]]] = {}
    for entry in _entries.values():
        for opt in entry.options:
            if command in opt.commands:
                found.setdefault(opt.param, (opt, []))[1].append(entry.name)
    return sorted(found.values(), key=lambda pair: pair[0].rank)


def _all_options() -> list[CliOption]:
    return [opt for entry in _entries.values() for opt in entry.options]


def _owner(opt: CliOption) -> str:
    return next(e.name for e in _entries.values() if opt in e.options)


def _load_builtin() -> None:
    if all(name in _entries for name in BUILTIN) or _loading:
        return
    _loading.append(True)
    try:
        rest = dict(_entries)
        _entries.clear()
        for name in BUILTIN:
            register(name, _read_options(name), _front_maker(name))
        _entries.update({k: v for k, v in rest.items() if k not in BUILTIN})
    finally:
        _loading.clear()


_loading: list[bool] = []


def _read_options(name: str) -> list[CliOption]:
    """`nvdocker2/engines/<name>/options.py`'s OPTIONS."""
    return list(importlib.import_module(f"nvdocker2.engines.{name}.options").OPTIONS)


def _front_maker(name: str) -> Callable[[], Frontend]:
    def make() -> Frontend:
        front: Frontend = importlib.import_module(f"nvdocker2.engines.{name}.front").make()
        return front
    return make
