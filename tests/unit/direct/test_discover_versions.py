"""The driver version in /proc/driver/nvidia/version and in a library's file name, parsed
without `re` (direct mode's discovery runs in every `create`): what the regular expressions
they replace accepted, and nothing else."""

from __future__ import annotations

import re

import pytest

from nvdocker2.direct.discover import file_version, kernel_module_version

# What discovery matched before (Python's `\d` also takes other scripts' digits: not these).
KERNEL_MODULE_RE = re.compile(r"Kernel Module(?: for \S+)?\s+([0-9]+(?:\.[0-9]+)+)")
FILE_VERSION_RE = re.compile(r"\.so\.([0-9]+\.[0-9]+(?:\.[0-9]+)*)$")


@pytest.mark.parametrize("text, version", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC"
     " 2023\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n", "535.104.05"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build\n",
     "550.54.14"),
    ("NVRM version: NVIDIA UNIX Kernel Module for aarch64  560.35.03.\n", "560.35.03"),
    ("Kernel Module\t575.51  (a tab)", "575.51"),
    ("Kernel Module 1..2 and later Kernel Module 3.4", "3.4"),  # the first that parses
    ("Kernel Module 535", None),  # one number is no driver version
    ("Kernel Module535.104.05", None),  # no space before it
    ("Kernel Module for  535.104.05", None),  # `for` and no architecture
    ("Kernel Module for x86_64 ", None),
    ("NVRM version: something else 535.104.05", None),
    ("", None),
])
def test_kernel_module_version(text, version):
    assert kernel_module_version(text) == version
    m = KERNEL_MODULE_RE.search(text)
    assert (m.group(1) if m else None) == version


@pytest.mark.parametrize("path, version", [
    ("/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05", "535.104.05"),
    ("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54", "550.54"),
    ("/usr/lib/x86_64-linux-gnu/libcuda.so.1", None),
    ("/usr/lib/x86_64-linux-gnu/libcuda.so", None),
    ("/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05~", None),
    ("/usr/lib/x86_64-linux-gnu/libcuda.so.535..05", None),
    ("/usr/lib/x86_64-linux-gnu/libcuda.so.\u0665\u0663\u0665.1", None),  # Arabic-Indic digits
    ("/opt/a.so.1.2/libcuda.so.535.104.05", "535.104.05"),
    ("/opt/a.so.1.2/libcuda.so", None),
])
def test_file_version(path, version):
    assert file_version(path) == version
    m = FILE_VERSION_RE.search(path)
    assert (m.group(1) if m else None) == version
