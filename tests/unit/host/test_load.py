"""The door through which code other than an `import` is loaded (nvdocker2.host.load): this
process's own libc, a module of nvdocker2 read from its file, and a driver library by its
absolute path; each refuses what root could not trust. Real libc, real files."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import nvdocker2
from nvdocker2.host.load import DriverLibrary, Libc, _kinds, own_module

LIBC = next((p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6",
                         "/lib64/libc.so.6", "/usr/lib64/libc.so.6") if os.path.isfile(p)), None)


def test_libc_calls_this_processs_own_functions_and_keeps_errno():
    libc = Libc(["getpid", "close", "ffsl"])
    assert libc.call["getpid"]() == os.getpid()
    assert libc.call["close"](-1) == -1 and libc.errno() == errno.EBADF
    assert libc.call["ffsl"](libc.ulong(1 << 40)) == 41
    assert Libc(["getpid"]).ulong is libc.ulong  # the C types are made once
    with pytest.raises(AttributeError):
        Libc(["no_such_function_in_libc"])


@pytest.mark.parametrize("name", ["json", "nvdocker2", "nvdocker2.a-b", "nvdocker2..x",
                                  "nvdocker2x.device_ids"])
def test_own_module_refuses_what_is_not_a_module_of_nvdocker2(name):
    with pytest.raises(ImportError) as e:
        own_module(name)
    assert str(e.value) == f"{name!r} is not a module of nvdocker2"


def test_own_module_runs_the_packages_file_without_its_parents(monkeypatch):
    name = "nvdocker2.engines.crio.options"
    for held in (name, "nvdocker2.engines.crio"):
        monkeypatch.setitem(sys.modules, held, None)
        del sys.modules[held]
    module = own_module(name)
    assert module.__file__ == os.path.join(os.path.dirname(nvdocker2.__file__),
                                           "engines", "crio", "options.py")
    assert sys.modules[name] is module and module.OPTIONS
    assert "nvdocker2.engines.crio" not in sys.modules


@pytest.mark.parametrize("mode, why", [(0o666, "writable by"), (None, "")])
def test_own_module_refuses_a_file_root_could_not_trust(tmp_path, mode, why):
    copy = tmp_path / "tree"
    shutil.copytree(os.path.dirname(nvdocker2.__file__), copy / "nvdocker2",
                    ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "nvdocker2" / "device_ids.py"
    if mode is None:
        target.unlink()
    else:
        os.chmod(target, mode)
    proc = subprocess.run(
        [sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]);"
         " from nvdocker2.host.load import own_module\n"
         "try: own_module('nvdocker2.device_ids')\n"
         "except ImportError as e: print(e)", str(copy)],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"not loading {target}: ") and why in proc.stdout


def test_a_driver_library_is_loaded_only_from_an_absolute_path_to_a_file(tmp_path):
    for path in ("libc.so.6", str(tmp_path), str(tmp_path / "none.so")):
        with pytest.raises(ImportError) as e:
            DriverLibrary(path, {})
        assert str(e.value) == f"not loading {path}: not an absolute path to a file"


@pytest.mark.skipif(LIBC is None, reason="no libc.so.6 at a known path")
def test_a_driver_library_others_may_write_is_refused(tmp_path):
    copy = tmp_path / "libc.so.6"
    shutil.copy(LIBC, copy)
    os.chmod(copy, 0o666)
    with pytest.raises(ImportError) as e:
        DriverLibrary(str(copy), {"getpid": ""})
    assert str(e.value).startswith(f"not loading {copy}: ") and "writable" in str(e.value)


@pytest.mark.skipif(LIBC is None, reason="no libc.so.6 at a known path")
def test_a_driver_librarys_functions_take_and_write_what_their_letters_say():
    lib = DriverLibrary(LIBC, {"getpid": "", "gethostname": "s256u", "rand_r": "U",
                               "posix_memalign": "Puu", "labs": "u"})
    assert lib.call("getpid") == (os.getpid(),)
    assert lib.call("gethostname", 256) == (0, socket.gethostname())
    seed = ctypes.c_uint(0)
    want = ctypes.CDLL(LIBC).rand_r(ctypes.byref(seed))
    assert lib.call("rand_r") == (want, seed.value) and seed.value != 0
    rc, address = lib.call("posix_memalign", 4096, 64)
    assert rc == 0 and address and address % 4096 == 0
    assert lib.call("labs", 7) == (7,)
    with pytest.raises(AttributeError):
        DriverLibrary(LIBC, {"no_such_function_in_libc": ""})


@pytest.mark.parametrize("letters, kinds", [
    ("pUs96u", ["p", "U", "s96", "u"]), ("s12s3", ["s12", "s3"]), ("", []), ("uP", ["u", "P"]),
])
def test_signature_letters(letters, kinds):
    assert _kinds(letters) == kinds


def test_libc_is_bound_with_the_c_half_of_ctypes_only():
    proc = subprocess.run(
        [sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]);"
         " from nvdocker2.host.load import Libc; Libc(['getpid']);"
         " print('ctypes' in sys.modules)", str(Path(nvdocker2.__file__).parent.parent)],
        capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "False", proc.stderr


@pytest.mark.skipif(LIBC is None, reason="no libc.so.6 at a known path")
def test_handles_given_and_buffers_written_of_any_size_decoded_as_ascii():
    lib = DriverLibrary(LIBC, {"posix_memalign": "Puu", "malloc_usable_size": "p",
                               "confstr": "us8u", "strncpy": "s8pu"})
    rc, address = lib.call("posix_memalign", 64, 64)
    assert rc == 0 and lib.call("malloc_usable_size", address)[0] >= 64
    full = os.confstr("CS_PATH")
    assert lib.call("confstr", os.confstr_names["CS_PATH"], 8) == (len(full) + 1, full[:7])
    source = ctypes.create_string_buffer(b"\xff\xfeab", 8)
    assert lib.call("strncpy", ctypes.addressof(source), 8)[1:] == ("\ufffd\ufffdab",)
