"""The one door through which nvdocker2 loads code other than by an `import` statement: the
C library's own functions (`libc`), and a module of nvdocker2's own package read from its file
(`own_module`).

What a caller can rely on:

- libc is the one this process already runs on, its functions looked up among the process's
  own symbols (`dlopen(NULL)`). No library is searched for: `ctypes.util.find_library` runs
  `/sbin/ldconfig -p` and, where ldconfig does not name the library (NixOS, musl), gcc, cc,
  ld and objdump from PATH with the whole environment; a bare soname follows
  `LD_LIBRARY_PATH`. Neither happens here.
- A module read from its file is one of nvdocker2's own, at its place in the package, and the
  file passes the check a program run through `host/run.py` passes (`unsafe_to_run`).

Stdlib only and cheap to import: the hook binds libc through here on every container start in
direct mode, so only `_ctypes`, the C half of ctypes, is imported, and only when first bound
(the ctypes package costs a container start about 4 ms of CPU, its C half about 0.5 ms).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing

if TYPE_CHECKING:  # imported on the container start path: no typing at run time
    from collections.abc import Iterable
    from types import ModuleType
    from typing import Any

_TYPES: list[tuple[Any, Any, Any]] = []


def _types() -> tuple[Any, Any, Any]:
    """(C int, C unsigned long, a cdecl function returning int that keeps errno), made once."""
    if not _TYPES:
        import _ctypes

        class Int(_ctypes._SimpleCData):  # type: ignore[type-arg]  # not subscriptable at run time
            _type_ = "i"

        class ULong(_ctypes._SimpleCData):  # type: ignore[type-arg]  # not subscriptable at run time
            _type_ = "L"

        class Function(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
            _restype_ = Int

        _TYPES.append((Int, ULong, Function))
    return _TYPES[0]


class Libc:
    """The named functions of this process's own libc, each taking C ints, unsigned longs
    (`ulong(n)`), bytes and None, and returning a C int; `errno()` is the errno the last of
    them left. Raises ImportError (no ctypes), OSError or AttributeError (a name libc lacks)."""

    def __init__(self, names: Iterable[str]) -> None:
        import _ctypes

        _, ulong, function = _types()

        class Process:  # what CFuncPtr looks a symbol up in: an object with a _handle
            _handle = _ctypes.dlopen(None, os.RTLD_NOW)  # type: ignore[arg-type]  # None: this process

        self.errno = _ctypes.get_errno
        self.ulong = ulong
        self.call = {name: function((name, Process)) for name in names}


def own_module(name: str) -> ModuleType:
    """nvdocker2's module `name` (`nvdocker2.a.b`) executed from its file `nvdocker2/a/b.py`
    without importing the packages above it, and put in sys.modules. ImportError when `name` is
    not of nvdocker2's package or the file is not one root could trust."""
    import importlib.util

    parts = name.split(".")
    if parts[0] != __name__.split(".")[0] or len(parts) < 2 or not all(
            p.isidentifier() for p in parts):
        raise ImportError(f"{name!r} is not a module of nvdocker2")
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(top, *parts[1:]) + ".py"
    from nvdocker2.host.run import unsafe_to_run

    why = unsafe_to_run(path)
    if why is not None:
        raise ImportError(f"not loading {path}: {why}")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class DriverLibrary:
    """Functions of a driver's shared library (libnvidia-ml), loaded from its absolute path.

    The file must pass the check a program root runs passes (`unsafe_to_run`): loading a
    library runs its constructors as this process. Nothing is searched for: the path is
    given to dlopen as it is, so neither `LD_LIBRARY_PATH` nor the loader's cache picks it.

    `signatures` maps a function name to its arguments, one letter each: `u` an unsigned int
    given, `p` an opaque handle given (an int from an earlier call), `U` an unsigned int and
    `P` a handle the function writes, `sN` a buffer of N bytes it writes (a C string). Every
    function returns a C int. `call(name, *given)` returns (that int, *written values), the
    strings as str. Raises ImportError (no ctypes, or the file is refused), OSError
    (dlopen failed) or AttributeError (a name the library lacks).
    """

    def __init__(self, path: str, signatures: dict[str, str]) -> None:
        from nvdocker2.host.run import unsafe_to_run

        if not os.path.isabs(path) or not os.path.isfile(path):
            raise ImportError(f"not loading {path}: not an absolute path to a file")
        why = unsafe_to_run(path)
        if why is not None:
            raise ImportError(f"not loading {path}: {why}")
        import ctypes

        self._ctypes = ctypes
        lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self._functions = {}
        for name, letters in signatures.items():
            function = getattr(lib, name)
            function.restype = ctypes.c_int
            function.argtypes = [self._argtype(kind) for kind in _kinds(letters)]
            self._functions[name] = (function, _kinds(letters))

    def _argtype(self, kind: str) -> Any:
        c = self._ctypes
        return {"u": c.c_uint, "p": c.c_void_p, "U": c.POINTER(c.c_uint),
                "P": c.POINTER(c.c_void_p)}.get(kind, c.c_char_p)

    def call(self, name: str, *given: int) -> tuple[Any, ...]:
        c = self._ctypes
        function, kinds = self._functions[name]
        args: list[Any] = []
        written: list[Any] = []
        values = iter(given)
        for kind in kinds:
            if kind in ("u", "p"):
                args.append(next(values))
            elif kind == "U":
                written.append(c.c_uint(0))
                args.append(c.byref(written[-1]))
            elif kind == "P":
                written.append(c.c_void_p(None))
                args.append(c.byref(written[-1]))
            else:
                written.append(c.create_string_buffer(int(kind[1:])))
                args.append(written[-1])
        rc = function(*args)
        out = [w.value.decode("ascii", "replace") if isinstance(w, c.Array) else w.value
               for w in written]
        return (rc, *out)


def _kinds(letters: str) -> list[str]:
    """`"pUs96u"` → ["p", "U", "s96", "u"]."""
    kinds: list[str] = []
    for ch in letters:
        if ch.isdigit() and kinds and kinds[-1][0] == "s":
            kinds[-1] += ch
        else:
            kinds.append(ch)
    return kinds
