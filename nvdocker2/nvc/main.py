"""`nvidia-container-cli` (installed as `nvdocker2-container-cli`): info, list, configure.

Exit status as NVIDIA's cli: 0 on success, 1 on any failure, a bad command line included.
A failure is one line `nvidia-container-cli: KIND error: MESSAGE` (NVIDIA's kinds: input,
initialization, detection, device, requirement, mount, ldcache, cgroup, container), then a
`hint:` line where there is a fix to name; never a traceback (NVDOCKER2_DEBUG=1 shows one).
"""

from __future__ import annotations

import os
import sys

from nvdocker2.direct.errors import DirectError
from nvdocker2.nvc.args import EXIT_FAILURE, PROG, InputError, Parsed, Shown, UsageError, parse
from nvdocker2.nvc.configure import NvcError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TextIO

    from nvdocker2.direct.discover import Discovery

CAPABILITIES = ("compute", "utility", "video", "graphics", "display", "ngx", "compat32")


def _discover(p: Parsed) -> Discovery:
    from nvdocker2.direct.discover import discover

    root = p.last("root", "globals") or "/"
    ldcache = p.last("ldcache", "globals") or "/etc/ld.so.cache"
    try:
        return discover(root, ldcache)
    except DirectError as err:
        raise NvcError("initialization", err.message, err.hint) from None
    except (OSError, ValueError) as err:
        raise NvcError("detection", str(err)) from None


def _bus(bus_id: str) -> str:
    """NVML's form of a PCI address: an 8-digit domain, upper case."""
    domain, sep, rest = bus_id.partition(":")
    return f"{domain.zfill(8)}{sep}{rest}".upper() if sep else bus_id.upper()


def info(p: Parsed, out: TextIO) -> None:
    d = _discover(p)
    version = d.driver_version or "N/A"
    if p.flag("csv"):
        out.write(f"NVRM version,CUDA version\n{version},N/A\n")
        out.write("\nDevice Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture\n")
        for g in d.gpus:
            out.write(f"{g.index},{g.minor},{g.model},N/A,{g.uuid},{_bus(g.bus_id)},N/A\n")
        return
    out.write(f"{'NVRM version:':<15} {version}\n{'CUDA version:':<15} N/A\n")
    for g in d.gpus:
        rows = (("Device Index:", g.index), ("Device Minor:", g.minor), ("Model:", g.model),
                ("Brand:", "N/A"), ("GPU UUID:", g.uuid), ("Bus Location:", _bus(g.bus_id)),
                ("Architecture:", "N/A"))
        out.write("\n" + "".join(f"{k:<15} {v}\n" for k, v in rows))


IPCS = ("/run/nvidia-persistenced/socket", "/run/nvidia-fabricmanager/socket", "/tmp/nvidia-mps")


def list_(p: Parsed, out: TextIO) -> None:
    from nvdocker2.direct.discover import CONTROL_NODES, host_path
    from nvdocker2.direct.spec import select_gpus

    d = _discover(p)
    everything = not p.options
    devices = "all" if everything else p.joined("device")
    if devices is not None:
        try:
            gpus = select_gpus(d, devices.split(","))
        except DirectError as err:
            raise NvcError("device", err.message.replace("NVIDIA_VISIBLE_DEVICES: ", ""),
                           err.hint) from None
        for name in CONTROL_NODES:
            node = d.node(f"/dev/{name}")
            if node is not None:
                out.write(f"{node.path}\n")
        for g in gpus:
            out.write(f"{g.node_path}\n")
    compat32 = everything or p.flag("compat32")
    if everything or p.flag("binaries"):
        out.writelines(f"{f.host_path}\n" for f in d.files if f.kind == "bin")
    if everything or p.flag("libraries"):
        libs = [f for f in d.files if f.kind == "lib"]
        out.writelines(f"{f.host_path}\n" for f in libs if not f.compat32)
        if compat32:
            out.writelines(f"{f.host_path}\n" for f in libs if f.compat32)
    if everything or p.flag("ipcs"):
        out.writelines(f"{host_path(d.driver_root, i)}\n" for i in IPCS
                       if os.path.exists(host_path(d.driver_root, i)))
    if everything or p.flag("firmwares"):
        fw = host_path(d.driver_root, f"/lib/firmware/nvidia/{d.driver_version}")
        if d.driver_version and os.path.isdir(fw):
            out.writelines(f"{fw}/{n}\n" for n in sorted(os.listdir(fw)) if n.endswith(".bin"))


def configure(p: Parsed, log: list[str]) -> None:
    from nvdocker2.direct.hook import update_ldcache
    from nvdocker2.direct.spec import host_ldconfig
    from nvdocker2.nvc import configure as c
    from nvdocker2.nvc.args import imex_channels, parse_pid
    from nvdocker2.nvc.require import RequirementError, check

    for name in ("mig-config", "mig-monitor"):
        if p.joined(name):
            raise NvcError(name.replace("-", " "), f"--{name}: MIG devices are not supported"
                           " by this nvidia-container-cli",
                           "install NVIDIA's libnvidia-container-tools for MIG")
    rootfs = os.path.normpath(p.args[0])
    pid_text = p.last("pid")
    # Without --pid (LXC's mount hook), the cli already runs in the container's mount
    # namespace and cgroup; its parent's pid would name another process wherever the cli runs
    # in a pid namespace of its own (LXC's: the parent is pid 1 there, /proc is the host's).
    pid = parse_pid(pid_text) if pid_text is not None else None
    caps = {cap for cap in CAPABILITIES if p.flag(cap)}
    d = _discover(p)
    for expression in p.options.get("require", ()):
        try:
            check(expression or "", {"driver": d.driver_version})
        except RequirementError as err:
            raise NvcError("requirement", str(err)) from None
    imex = tuple(i for v in p.options.get("imex-channel", ()) for i in imex_channels(v or ""))
    work = c.plan(d, p.joined("device"), caps, imex, devbind=not p.flag("no-devbind"))
    try:
        ldconfig = host_ldconfig(p.last("ldconfig"))
    except DirectError as err:
        raise NvcError("input", err.message, err.hint) from None
    if not p.flag("no-cgroups"):
        log.extend(c.allow_devices("self" if pid is None else pid, work.nodes))
    if pid is not None:
        c.enter_mount_namespace(pid)
    keep = c.bind_all(rootfs, work.binds, log)
    if work.folders:
        try:
            update_ldcache(rootfs, ldconfig, list(work.links), list(work.folders),
                           lambda _found: keep)
        except DirectError as err:
            raise NvcError("ldcache", err.message.replace("direct-hook: ", ""),
                           err.hint) from None
        log.append(f"updated the ld cache of {rootfs} for {', '.join(work.folders)}")


def _write_debug(path: str | None, lines: list[str]) -> None:
    if not path or not lines:
        return
    from nvdocker2.host.files import append_text

    try:
        append_text(path, "".join(f"I {PROG}: {line}\n" for line in lines), 0o644)
    except OSError:
        pass  # the log is an aid; NVIDIA's cli does not fail for it either


def main(argv: list[str] | None = None, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    """Run the cli; the exit status."""
    from nvdocker2.oneline import one_line

    argv = sys.argv[1:] if argv is None else argv
    out = out or sys.stdout
    err = err or sys.stderr
    log: list[str] = []
    parsed = None
    try:
        parsed = parse(argv)
        if isinstance(parsed, Shown):
            out.write(parsed.text + "\n")
            return 0
        log.append(f"running {' '.join(argv)}"[:2000])
        if parsed.command == "info":
            info(parsed, out)
        elif parsed.command == "list":
            list_(parsed, out)
        else:
            configure(parsed, log)
    except UsageError as e:
        err.write(f"{one_line(e.prog + ': ' + e.text) if not e.usage else one_line(e.text)}\n"
                  f"Try `{e.prog} --help' or `{e.prog} --usage' for more information.\n")
        return EXIT_FAILURE
    except InputError as e:
        err.write(one_line(f"{PROG}: input error: {e}") + "\n")
        return EXIT_FAILURE
    except NvcError as e:
        err.write(one_line(f"{PROG}: {e.kind} error: {e.message}") + "\n")
        if e.hint:
            err.write(one_line(f"hint: {e.hint}") + "\n")
        log.append(f"{e.kind} error: {e.message}")
        return EXIT_FAILURE
    except Exception as e:
        if os.environ.get("NVDOCKER2_DEBUG") == "1":
            raise
        err.write(one_line(f"{PROG}: internal error: {type(e).__name__}: {str(e)[:300]}")
                  + "\n")
        return EXIT_FAILURE
    finally:
        if isinstance(parsed, Parsed):
            _write_debug(parsed.last("debug", "globals"), log)
    return 0


def run() -> None:
    """The console script's entry: exit with main's status."""
    sys.exit(main())
