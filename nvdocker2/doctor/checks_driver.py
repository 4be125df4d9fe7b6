"""Checks of the NVIDIA driver: kernel module version, nvidia-smi, user-space libraries of the
same version, loaded modules, device nodes, /dev/char links, and WSL2."""

from __future__ import annotations

import os
import re

from nvdocker2.doctor.context import Context
from nvdocker2.doctor.model import Checks, Outcome, fail, ok, skip, warn

CHECKS = Checks()
check = CHECKS.check

NVIDIA_MAJOR = 195
DRIVER_HINT = (
    "install the NVIDIA driver for this GPU (e.g. apt-get install nvidia-driver) "
    "and load it: modprobe nvidia"
)
RELOAD_DRIVER_HINT = (
    "reboot, or unload and reload the modules: rmmod nvidia_uvm nvidia_drm "
    "nvidia_modeset nvidia && modprobe nvidia nvidia_uvm"
)
PERSISTENCE_HINT = (
    "NVML is slow to start without persistence mode: enable it "
    "(systemctl enable --now nvidia-persistenced, or nvidia-smi -pm 1)"
)
LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib/x86_64-linux-gnu",
    "/lib64",
)
WSL_LIB_DIR = "/usr/lib/wsl/lib"


def kernel_version(ctx: Context) -> str | None:
    """The kernel module's version from /proc/driver/nvidia/version, or None."""
    text = ctx.root.read_text("/proc/driver/nvidia/version")
    if text is None:
        return None
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    return m.group(1) if m else "?"


@check("wsl", "WSL2 (/dev/dxg)")
def wsl(ctx: Context) -> Outcome:
    if not ctx.is_wsl():
        return skip("not WSL2 (no /dev/dxg)")
    from nvdocker2.direct.wsl import WSL_HINT, missing, nvidia_driver_store

    root = str(ctx.root.path("/"))
    gaps = missing(root)
    if gaps:
        return warn(f"WSL2, but direct and CDI mode would miss: {'; '.join(gaps)}", WSL_HINT)
    return ok(f"WSL2: GPU through /dev/dxg, libdxcore.so in {WSL_LIB_DIR}, NVIDIA driver store"
              f" {nvidia_driver_store(root)}")


@check("driver.kernel", "NVIDIA kernel driver (/proc/driver/nvidia/version)")
def driver_kernel(ctx: Context) -> Outcome:
    if ctx.is_wsl():
        return skip("WSL2 has no /proc/driver/nvidia; the Windows driver serves /dev/dxg")
    version = kernel_version(ctx)
    if version is None:
        return fail(
            "no /proc/driver/nvidia/version: the NVIDIA kernel module is not loaded "
            "(or no driver is installed)",
            DRIVER_HINT,
        )
    return ok(f"kernel module {version}")


@check("driver.nvidia-smi", "nvidia-smi")
def driver_nvidia_smi(ctx: Context) -> Outcome:
    res = ctx.nvidia_smi()
    if res is None:
        return fail(
            "nvidia-smi not found on the system PATH",
            "install the driver's utilities (e.g. apt-get install nvidia-smi)",
        )
    if not res.ok:
        msg = res.first_line()
        if "version mismatch" in msg.lower():
            return fail(f"nvidia-smi: {msg}", RELOAD_DRIVER_HINT)
        if "timed out" in msg:
            return fail(f"nvidia-smi: {msg}", PERSISTENCE_HINT)
        return fail(f"nvidia-smi failed: {msg}", DRIVER_HINT)
    gpus = [line.strip() for line in res.stdout.splitlines() if line.strip()]
    if not gpus:
        return warn(
            "nvidia-smi lists no GPU", "check that the GPU is visible: lspci | grep -i nvidia"
        )
    return ok(f"{len(gpus)} GPU(s): " + "; ".join(gpus))


def _library_versions(ctx: Context) -> dict[str, list[str]]:
    versions: dict[str, list[str]] = {}
    for d in LIB_DIRS:
        try:
            names = os.listdir(ctx.root.path(d))
        except OSError:
            continue
        for name in names:
            m = re.fullmatch(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)", name)
            if m:
                versions.setdefault(m.group(1), []).append(f"{d}/{name}")
    return versions


@check("driver.libraries", "driver libraries match the kernel module")
def driver_libraries(ctx: Context) -> Outcome:
    if ctx.is_wsl():
        return skip("WSL2: libraries come from /usr/lib/wsl/lib")
    versions = _library_versions(ctx)
    kernel = kernel_version(ctx)
    if not versions:
        return fail(
            "no libnvidia-ml.so.<version> in " + ", ".join(LIB_DIRS),
            "install the driver's user-space libraries (e.g. apt-get install "
            "libnvidia-ml1 / the driver package)",
        )
    found = ", ".join(sorted(versions))
    if kernel is None:
        return skip(f"user-space libraries {found}; no kernel module to compare with")
    if kernel not in versions:
        return fail(
            f"kernel module {kernel} but user-space libraries {found}: the driver was "
            "upgraded without reloading the module",
            RELOAD_DRIVER_HINT,
        )
    if len(versions) > 1:
        others = ", ".join(p for v, ps in sorted(versions.items()) if v != kernel for p in ps)
        return warn(
            f"kernel module {kernel}; libraries of other versions remain: {others}",
            "remove the leftover libraries of the old driver",
        )
    return ok(f"kernel module and libnvidia-ml both {kernel}")


@check("driver.modules", "kernel modules nvidia, nvidia_uvm, nvidia_modeset")
def driver_modules(ctx: Context) -> Outcome:
    if ctx.is_wsl():
        return skip("WSL2 loads no nvidia kernel modules")
    text = ctx.root.read_text("/proc/modules")
    if text is not None:
        loaded = {line.split()[0] for line in text.splitlines() if line.strip()}
        source = "/proc/modules"
    else:
        loaded = {
            m
            for m in ("nvidia", "nvidia_uvm", "nvidia_modeset")
            if ctx.root.path(f"/sys/module/{m}").is_dir()
        }
        source = "/sys/module (no /proc/modules)"
    missing = [m for m in ("nvidia", "nvidia_uvm") if m not in loaded]
    if missing:
        return fail(
            f"not loaded ({source}): {', '.join(missing)}",
            "load them: modprobe nvidia && modprobe nvidia_uvm (or nvidia-modprobe -u -c=0)",
        )
    if "nvidia_modeset" not in loaded:
        return warn(
            "nvidia and nvidia_uvm loaded; nvidia_modeset is not (display capability unavailable)",
            "modprobe nvidia_modeset if containers need it",
        )
    return ok("nvidia, nvidia_uvm, nvidia_modeset loaded")


def _nvidia_nodes(ctx: Context) -> list[str]:
    try:
        names = sorted(os.listdir(ctx.root.path("/dev")))
    except OSError:
        return []
    return [n for n in names if n.startswith("nvidia")]


def _uvm_major(ctx: Context) -> int | None:
    for line in (ctx.root.read_text("/proc/devices") or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == "nvidia-uvm" and parts[0].isdigit():
            return int(parts[0])
    return None


@check("driver.devices", "device nodes /dev/nvidia*")
def driver_devices(ctx: Context) -> Outcome:
    if ctx.is_wsl():
        return skip("WSL2 uses /dev/dxg instead of /dev/nvidia*")
    names = _nvidia_nodes(ctx)
    gpus = [n for n in names if re.fullmatch(r"nvidia\d+", n)]
    problems = []
    for n in ["nvidiactl"] + gpus:
        st = ctx.root.is_char_device(f"/dev/{n}")
        if st is None:
            problems.append(
                f"/dev/{n} " + ("missing" if n not in names else "is not a character device")
            )
        elif os.major(st.st_rdev) != NVIDIA_MAJOR:
            problems.append(f"/dev/{n} has major {os.major(st.st_rdev)}, not {NVIDIA_MAJOR}")
    for n in ("nvidia-uvm", "nvidia-uvm-tools"):
        st = ctx.root.is_char_device(f"/dev/{n}")
        if st is None:
            problems.append(
                f"/dev/{n} " + ("missing" if n not in names else "is not a character device")
            )
        else:
            major = _uvm_major(ctx)
            if major is not None and os.major(st.st_rdev) != major:
                problems.append(
                    f"/dev/{n} has major {os.major(st.st_rdev)}, but /proc/devices "
                    f"gives nvidia-uvm {major}"
                )
    if not gpus:
        problems.insert(0, "no /dev/nvidia0, /dev/nvidia1, ...")
    if problems:
        return fail(
            "; ".join(problems),
            "create the nodes: nvidia-modprobe -u -c=0 (or run nvidia-smi once as root)",
        )
    return ok(f"{len(gpus)} GPU node(s) and nvidiactl (major {NVIDIA_MAJOR}), nvidia-uvm")


@check("driver.control-nodes", "NVIDIA control nodes the loaded drivers call for")
def driver_control_nodes(ctx: Context) -> Outcome:
    """nvidia-uvm-tools, nvidia-modeset and the MIG caps nodes appear only once something
    runs nvidia-modprobe; a CDI spec generated before that lacks them for good."""
    if ctx.is_wsl():
        return skip("WSL2 uses /dev/dxg instead of /dev/nvidia*")
    from nvdocker2.devnodes import wanted_nodes

    wanted = wanted_nodes(str(ctx.root.path("/")))
    if not wanted:
        return skip("/proc/devices lists no NVIDIA driver")
    missing = [f"/dev/{p}" for p, *_ in wanted if ctx.root.is_char_device(f"/dev/{p}") is None]
    if missing:
        return warn("missing: " + ", ".join(missing) + " (a CDI spec generated now lacks them)",
                    "create them: nvdocker2 system create-device-nodes (the "
                    "nvdocker2-devices service runs it at boot and on a driver load)")
    return ok(f"{len(wanted)} control node(s) there: " + ", ".join(
        f"/dev/{p}" for p, *_ in wanted))


@check(
    "driver.dev-char", "/dev/char links for the systemd cgroup driver", needs=("dockerd.reachable",)
)
def driver_dev_char(ctx: Context) -> Outcome:
    """With the systemd cgroup driver, `systemctl daemon-reload` rewrites device rules from
    /dev/char/MAJOR:MINOR; without those links running GPU containers lose their devices."""
    driver = ctx.cgroup_driver()
    if driver != "systemd":
        return skip(f"cgroup driver {driver}: the links are not needed")
    from nvdocker2.devnodes import missing_char_links

    missing, count = missing_char_links(str(ctx.root.path("/")))
    if not count:
        return skip("cgroup driver systemd, but there are no /dev/nvidia* nodes to link")
    if missing:
        return warn(
            "missing: " + ", ".join(missing) + " (a systemd daemon-reload then takes "
            "GPU access from running containers)",
            "create them: nvdocker2 system create-dev-char-symlinks (the nvdocker2-devices "
            "service runs it at boot and on a driver load: systemctl enable --now "
            "nvdocker2-devices.service)",
        )
    return ok(f"every /dev/nvidia* node has its /dev/char link ({count})")
