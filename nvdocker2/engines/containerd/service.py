"""containerd as a service: its version, the candidate check, restart and CRI verification.

containerd has no config reload (a SIGHUP makes it exit), so applying means restarting the
systemd unit; running containers keep running because their shims stay. Verification asks
containerd on its socket (`ctr version`) that it is back, then reads what its CRI plugin runs:
`crictl info` when crictl is installed, else the config containerd logs when the CRI plugin
starts ("Start cri plugin with config {...}" up to 1.7, "starting cri plugin" config=JSON on 2.x)
from the unit's journal since the restart.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from nvdocker2.engines.base import (
    NoService,
    Service,
    VerifyFailed,
    poll,
    runtime_mismatches,
)
from nvdocker2.engines.containerd import document as D
from nvdocker2.engines.systemd import systemctl_failure, unit_active
from nvdocker2.engines.tomlread import tomllib
from nvdocker2.errors import BadInput, EnvironmentProblem
from nvdocker2.host import files as fs
from nvdocker2.host import run
from nvdocker2.host.run import safe_which

DEFAULT_ADDRESS = "/run/containerd/containerd.sock"
DEFAULT_UNIT = "containerd"


def binary() -> str | None:
    """containerd on PATH, where no other user could have planted it (docs/reference.md §8)."""
    return safe_which("containerd")


def release(exe: str | None) -> tuple[int, int] | None:
    """containerd's (major, minor) as `containerd --version` prints it, or None."""
    if not exe:
        return None
    try:
        out = run.run([exe, "--version"], timeout=30, text=True).stdout
    except OSError:
        return None
    m = re.search(r"\sv?(\d+)\.(\d+)\.\d+", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def major_version(exe: str | None) -> int | None:
    found = release(exe)
    return found[0] if found else None


def config_dump(exe: str, config: Path,
                what: str = "the candidate configuration") -> dict[str, Any]:
    """`containerd --config CONFIG config dump`, parsed; BadInput when containerd refuses."""
    try:
        p = run.run([exe, "--config", str(config), "config", "dump"], timeout=60, text=True)
    except OSError as e:
        raise EnvironmentProblem(f"could not run {exe} config dump: {e}") from None
    if p.returncode != 0:
        why = (p.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise BadInput(f"containerd refuses {what}: {why[:300]}",
                       "nothing was changed; fix the file containerd names, then run again")
    try:
        return tomllib.loads(p.stdout)
    except tomllib.TOMLDecodeError as e:
        raise EnvironmentProblem(f"containerd config dump printed no TOML: {e}") from None


def dump_cri(dump: dict[str, Any]) -> tuple[str, ...]:
    v = dump.get("version", 2)
    return ("plugins", D.CRI_PLUGIN[3 if v == 3 else 2], "containerd")


def lookup(d: Any, keys: tuple[str, ...]) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def compare_dumps(before: dict[str, Any], after: dict[str, Any], name: str, path: str,
                  set_default: bool, removing: bool | None = False, cdi: bool = False,
                  cdi_keys: tuple[str, ...] = ()) -> list[str]:
    """What differs between the effective configs besides our runtime (and default) and the
    CRI plugin's `cdi_keys`. `removing` None: an uninstall that puts back, or leaves, a runtime
    of that name; `cdi`: the change must leave CDI on."""
    cri = dump_cri(after)
    problems = []
    if cdi and lookup(after, cri[:2] + ("enable_cdi",)) is not True:
        problems.append("enable_cdi would not be on in the CRI plugin")
    rt = lookup(after, cri + ("runtimes", name))
    if removing:
        if rt is not None:
            problems.append(f'the runtime "{name}" would still be configured')
    elif removing is False:
        if not isinstance(rt, dict) or lookup(rt, ("options", "BinaryName")) != path:
            problems.append(f'the runtime "{name}" with BinaryName {path} would not be in '
                            "containerd's effective configuration (another import overrides it?)")
        if set_default and lookup(after, cri + ("default_runtime_name",)) != name:
            problems.append(f'default_runtime_name would not be "{name}"')
    problems += [f"{k} would change" for k in changed_keys(
        before, after, name, set_default or removing is not False, cdi_keys)]
    return problems


def changed_keys(before: dict[str, Any], after: dict[str, Any], name: str,
                 default_too: bool = True, plugin_keys: tuple[str, ...] = ()) -> list[str]:
    """The keys (the first five) whose values differ between two dumps, leaving out the
    runtime `name`, (`default_too`) default_runtime_name and the CRI plugin's `plugin_keys`."""
    b, a = json.loads(json.dumps(before)), json.loads(json.dumps(after))
    for d in (a, b):
        d.pop("imports", None)
        plugin = lookup(d, dump_cri(d)[:2])
        if isinstance(plugin, dict):
            for k in plugin_keys:
                plugin.pop(k, None)
        rts = lookup(d, dump_cri(d) + ("runtimes",))
        if isinstance(rts, dict):
            rts.pop(name, None)
        ctd = lookup(d, dump_cri(d))
        if default_too and isinstance(ctd, dict):
            ctd.pop("default_runtime_name", None)
    return _diff_keys(b, a)[:5]


def _zero(v: Any) -> bool:
    """Go's zero value, which containerd cannot tell from a key that is not there."""
    return v is None or (isinstance(v, (str, int, float, list, dict)) and not v)


def _diff_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) or isinstance(b, dict):
        if all(x is None or isinstance(x, dict) for x in (a, b)):
            a, b = a or {}, b or {}
            out = []
            for k in list(a) + [k for k in b if k not in a]:
                out += _diff_keys(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else k)
            return out
    return [] if a == b or (_zero(a) and _zero(b)) else [prefix]


def builtin_runtime(dump: dict[str, Any]) -> dict[str, Any]:
    """containerd's built-in `runc` runtime as the effective configuration `dump` shows it,
    the values it sets (not the zero ones): what a config that writes its own runtimes table
    must spell out to keep it on containerd ≤ 1.7 (1.6: runtime_type; 1.7: also sandbox_mode)."""
    rt = lookup(dump, dump_cri(dump) + ("runtimes", "runc"))
    out = {k: v for k, v in (rt or {}).items() if k != "options" and not _zero(v)}
    opts = {k: v for k, v in ((rt or {}).get("options") or {}).items() if not _zero(v)}
    if opts:
        out["options"] = opts
    out.setdefault("runtime_type", D.RUNC_V2)
    return out


def check_files(exe: str, root: Path, files: dict[Path, bytes | None],
                dropin_dirs: set[Path]) -> dict[str, Any]:
    """Dump the effective config as it would be with `files` in place (None: removed), without
    writing them where containerd looks: a private copy of the root and of each directory of
    `dropin_dirs` that it imports from."""
    with tempfile.TemporaryDirectory(prefix="nvdocker2-check-") as tmp:
        t = Path(tmp)
        root_bytes = files.get(root)
        if root_bytes is None and root not in files:
            try:
                root_bytes = root.read_bytes()
            except FileNotFoundError:
                root_bytes = b""
        text = (root_bytes or b"").decode("utf-8")
        import tomlkit

        doc = tomlkit.parse(text)
        if "imports" in doc:
            new_imports = []
            copies: dict[Path, Path] = {}
            imports: Any = doc["imports"]  # parsed TOML: any value a user wrote
            for pat in [str(x) for x in imports]:
                full = pat if os.path.isabs(pat) else str(root.parent / pat)
                d, base = os.path.split(full)
                src = Path(d)
                if src in dropin_dirs:
                    priv = copies.get(src)
                    if priv is None:
                        priv = copies[src] = t / f"dropins{len(copies)}"
                        fs.make_dirs(priv, 0o700)
                        if src.is_dir():
                            for f in sorted(src.iterdir()):
                                if f.is_file() and f not in files:
                                    fs.copy_new(f, priv / f.name)
                        for p, data in files.items():
                            if p.parent == src and data is not None:
                                fs.write_new(priv / p.name, data, 0o600)
                    full = str(priv / base)
                new_imports.append(full)
            doc["imports"] = new_imports
        cand = t / "config.toml"
        fs.write_new(cand, tomlkit.dumps(doc).encode(), 0o600)
        return config_dump(exe, cand)


def dump_current(exe: str, root: Path) -> dict[str, Any]:
    if root.exists():
        return config_dump(exe, root, f"its current configuration {root} (before any change)")
    with tempfile.NamedTemporaryFile(suffix=".toml") as f:
        return config_dump(exe, Path(f.name))


# --- the running containerd ----------------------------------------------------------------


def ctr_alive(address: str) -> bool:
    ctr = safe_which("ctr")
    if not ctr:
        return os.path.exists(address)
    try:
        p = run.run([ctr, "--address", address, "version"], timeout=10)
    except OSError:
        return False
    return p.returncode == 0 and b"Server:" in p.stdout


def runtimes_from_log(text: str) -> tuple[dict[str, str], str] | None:
    """(runtime name → BinaryName, default runtime) from the last CRI start line, or None."""
    found = None
    for line in text.splitlines():
        if "starting cri plugin" in line and "config=" in line:
            m = re.search(r'config="((?:[^"\\]|\\.)*)"', line)
            if m:
                try:
                    cfg = json.loads(json.loads('"' + m.group(1) + '"'))
                    ctd = cfg.get("containerd", {})
                    rts = {n: str((r.get("options") or {}).get("BinaryName", ""))
                           for n, r in (ctd.get("runtimes") or {}).items()}
                    found = (rts, ctd.get("defaultRuntimeName") or ctd.get(
                        "default_runtime_name") or "runc")
                except (ValueError, AttributeError):
                    pass
        elif "Start cri plugin with config" in line:
            m = re.search(r"Runtimes:map\[(.*?)\] NoPivot", line)
            body = m.group(1) if m else line
            rts = {}
            for rm in re.finditer(r"(?:^|\} )([^\s:{}]+):\{Type:", body):
                rest = body[rm.end():]
                nxt = re.search(r"\} [^\s:{}]+:\{Type:", rest)
                seg = rest[: nxt.start()] if nxt else rest
                b = re.search(r"BinaryName:([^\s\]]+)", seg)
                rts[rm.group(1)] = b.group(1) if b else ""
            d = re.search(r"DefaultRuntimeName:(\S+)", line)
            found = (rts, d.group(1) if d else "runc")
    return found


def cdi_from_log(text: str) -> bool | None:
    """Whether the last CRI start line says CDI is on (EnableCDI / enableCDI), or None."""
    found = None
    for line in text.splitlines():
        if "starting cri plugin" in line or "Start cri plugin with config" in line:
            m = re.search(r'EnableCDI:(true|false)|\\*"enableCDI\\*":(true|false)', line)
            found = None if m is None else "true" in (m.group(1), m.group(2))
    return found


def cdi_problem(expect: Any, cdi: bool | None) -> list[str]:
    """What the CRI's report of CDI (`cdi`: on, off, None unreported) lacks for `expect`."""
    if not (isinstance(expect, dict) and expect.get("cdi")) or cdi is True:
        return []
    return ["CDI is off" if cdi is False else "it does not say that CDI is on"]


class SystemdContainerd(Service):
    """Restart through systemd, verify on the socket and in the journal."""

    strategy = "systemd"
    verifies = True

    def __init__(self, unit: str = DEFAULT_UNIT, address: str = DEFAULT_ADDRESS,
                 verify: bool = True) -> None:
        self.unit = unit
        self.address = address
        self.verifies = verify
        self.log_description = f"journalctl -u {unit}"
        self._since = time.time()

    def apply(self) -> None:
        self._since = time.time()
        try:
            p = run.run(["systemctl", "restart", self.unit], timeout=120, text=True)
        except OSError as e:
            raise VerifyFailed(f"systemctl restart {self.unit} failed: {e}") from None
        if p.returncode != 0:
            raise VerifyFailed(systemctl_failure(self.unit, p.stderr))

    def cri_state(self, since: float | None = None
                  ) -> tuple[dict[str, str], str, bool | None] | None:
        """(runtimes, default runtime, CDI on) as the CRI reports them (crictl, else the unit's
        journal from `since`, by default the last restart)."""
        crictl = safe_which("crictl")
        if crictl:
            try:
                p = run.run([crictl, "--runtime-endpoint", f"unix://{self.address}",
                             "info", "-o", "json"], timeout=15)
                cfg = json.loads(p.stdout).get("config", {})
                ctd = cfg.get("containerd", {})
                rts = {n: str((r.get("options") or {}).get("BinaryName", ""))
                       for n, r in (ctd.get("runtimes") or {}).items()}
                return rts, ctd.get("defaultRuntimeName") or "runc", cfg.get("enableCDI")
            except (OSError, ValueError, AttributeError):
                pass
        try:
            start = self._since if since is None else since
            p = run.run(["journalctl", "-u", self.unit, "-o", "cat", "--no-pager",
                         "--since", f"@{int(start)}"], timeout=30, text=True)
        except OSError:
            return None
        found = runtimes_from_log(p.stdout)
        return None if found is None else found + (cdi_from_log(p.stdout),)

    def verify(self, expect: Any, timeout: float) -> None:
        def probe() -> str | None:
            if not ctr_alive(self.address):
                return ""
            if expect is None:
                return None
            state = self.cri_state()
            if state is None:
                return "containerd is back, but its CRI plugin's configuration was not seen"
            bad = runtime_mismatches(expect, *state[:2]) + cdi_problem(expect, state[2])
            return "containerd's CRI plugin reports: " + "; ".join(bad) if bad else None

        poll(probe, timeout, "containerd did not answer on " + self.address)


def auto_service(unit: str, address: str, verify: bool) -> tuple[Service, str]:
    """systemd when systemctl knows the unit as active, else none (with the reason)."""
    if unit_active(unit):
        return SystemdContainerd(unit, address, verify), f"systemd runs {unit}"
    return NoService(), f"systemd does not run the {unit} unit here"
