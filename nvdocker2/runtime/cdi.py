"""The runtime's CDI mode (docs/cdi.md, "The runtime's CDI mode"): CDI device names resolved
against the spec directories and applied to config.json at `create`, as CDI itself does.

Imported only when a container is served in cdi mode; the spec directories are read only when
the container asks for a CDI device. Standard library only (a minimal reader for the YAML that
CDI specs are written in, JSON through the runtime's own decoder).

What the container asks for, in NVIDIA's order: the names in its annotations under
`annotation-prefixes` (comma separated, fully qualified); without them, the devices of
NVIDIA_VISIBLE_DEVICES (or its volume mounts), under the same rules as every other mode
(`nvdocker2.hook.request.visible_devices`), where a bare id or `all` is a device of
`default-kind`.

Which spec defines a device, as CDI's cache decides (tags.cncf.io/container-device-interface,
`Cache.refresh`): the `.json` and `.yaml` files directly in each spec directory, in name order;
a later directory overrides an earlier one for the same device; two specs in one directory
defining the same device are a conflict, and the device is then no one's.
"""

from __future__ import annotations

import os

from nvdocker2.device_ids import (
    CDI_DEVICE_CHARS,
    MAX_CDI_NAME,
    MAX_DEVICE_IDS,
    RequestError,
    is_cdi_word,
    is_kind,
    parse_cdi_name,
    validate_id,
)
from nvdocker2.runtime import jsonio

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable

MAX_SPEC_BYTES = 4 * 1024 * 1024
MOUNT_PREFIX = "cdi/"  # /var/run/nvidia-container-devices/cdi/VENDOR/CLASS/NAME
HOOK_NAMES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart",
              "poststop")
class CdiRefusal(Exception):
    """The container cannot be given what it asks for; one line and a hint."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def requested(spec: dict, config) -> tuple[list[str], str]:
    """(fully qualified names, where they came from) that the container of `spec` asks for;
    no names for a container that asks for none. Raises RequestError for a refused request."""
    cdi = config.cdi
    annotations = spec.get("annotations")
    names: list[str] = []
    sources = []
    if isinstance(annotations, dict):
        for key in sorted(k for k in annotations if isinstance(k, str)):
            if not key.startswith(tuple(cdi.annotation_prefixes)):
                continue
            value = annotations[key]
            source = f"annotation {key!r:.80}"
            if not isinstance(value, str):
                raise RequestError(f"{source}: must be a string of CDI device names")
            sources.append(source)
            _add(names, [parse_cdi_name(v.strip(), source) for v in value.split(",") if v.strip()],
                 source)
    if sources:
        return names, ", ".join(sources)
    from nvdocker2.hook.request import request_source

    raw, source = request_source(spec, config)
    if raw is None:
        return [], source
    items = [item.strip() for item in raw.split(",") if item.strip()]
    if any(item in ("void", "none") for item in items):
        return [], source
    for item in items:
        if item.startswith(MOUNT_PREFIX) and item.count("/") == 3:  # from a volume mount
            _, vendor, cls, name = item.split("/")
            item = f"{vendor}/{cls}={name}"
        if "=" in item or "/" in item:
            _add(names, [parse_cdi_name(item, source)], source)
        else:
            if item != "all":
                validate_id(item, source)
            _add(names, [f"{cdi.default_kind}={item}"], source)
    return names, source


def _add(names: list[str], more: list[str], source: str) -> None:
    for name in more:
        if name not in names:
            names.append(name)
    if len(names) > MAX_DEVICE_IDS:
        raise RequestError(f"{source}: too many CDI devices (at most {MAX_DEVICE_IDS})")


class Registry:
    """The devices of the spec directories, resolved by CDI's precedence."""

    def __init__(self, spec_dirs, warn: Callable[[str], None]) -> None:
        self.spec_dirs = tuple(spec_dirs)
        self.devices: dict[str, tuple[dict, dict, str, int]] = {}  # name: spec, device, path
        self.conflicts: dict[str, tuple[str, str]] = {}
        self.ignored: list[str] = []
        self._warn = warn
        for priority, directory in enumerate(self.spec_dirs):
            for path, spec in self._specs(directory):
                self._add(spec, path, priority)
        for name in self.conflicts:
            self.devices.pop(name, None)

    def _ignore(self, why: str) -> None:
        self.ignored.append(why)
        self._warn(f"CDI spec ignored: {why}")

    def _specs(self, directory: str):
        from nvdocker2.host.files import Untrusted, open_trusted_dir, read_entry

        try:
            fd = open_trusted_dir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return
        except Untrusted as e:
            self._ignore(f"{directory}: {e} (only a directory no other user can write is read)")
            return
        except OSError as e:
            self._ignore(f"{directory}: {e.strerror}")
            return
        try:
            names = sorted(os.listdir(fd))
            for name in names:
                if not name.endswith((".json", ".yaml")):
                    continue
                path = os.path.join(directory, name)
                try:
                    got = read_entry(fd, name, path)
                except Untrusted as e:
                    self._ignore(f"{e}")
                    continue
                except OSError as e:
                    self._ignore(f"{path}: {e.strerror}")
                    continue
                if got is None:
                    continue
                data, st = got
                why = _untrusted_file(path, st)
                if why is None and len(data) > MAX_SPEC_BYTES:
                    why = f"{path} is larger than {MAX_SPEC_BYTES} bytes"
                if why is None:
                    try:
                        spec = _checked(parse_spec(data, name))
                    except (ValueError, RecursionError, UnicodeDecodeError) as e:
                        why = f"{path}: {str(e)[:200]}"
                if why is not None:
                    self._ignore(why)
                    continue
                yield path, spec
        finally:
            os.close(fd)

    def _add(self, spec: dict, path: str, priority: int) -> None:
        for device in spec["devices"]:
            name = f"{spec['kind']}={device['name']}"
            old = self.devices.get(name)
            if old is not None and old[3] == priority:
                self.conflicts.setdefault(name, (old[2], path))
                continue
            self.devices[name] = (spec, device, path, priority)

    def resolve(self, names: list[str], source: str) -> list[tuple[dict, dict, str]]:
        """(spec, device, spec file) of each name, in order; CdiRefusal for one not found."""
        out = []
        for name in names:
            got = self.devices.get(name)
            if got is None:
                raise self._unresolvable(name, source)
            out.append(got[:3])
        return out

    def _unresolvable(self, name: str, source: str) -> CdiRefusal:
        if name in self.conflicts:
            a, b = self.conflicts[name]
            return CdiRefusal(
                f"CDI device {name!r} ({source}) is defined by two specs in one directory,"
                f" {a} and {b}: a conflict, so neither is used",
                "remove one of the two specs (or the device from one of them)")
        hint = ("write a spec with `nvdocker2 cdi generate --output DIR/nvidia.yaml` into one"
                " of these directories, or ask for a device a spec there defines")
        if self.ignored:
            hint += f"; {len(self.ignored)} spec(s) were ignored, the first: {self.ignored[0]}"
        return CdiRefusal(
            f"unresolvable CDI device {name!r} ({source}): no CDI spec in "
            f"{', '.join(self.spec_dirs)} defines it", hint)


def _untrusted_file(path: str, st: os.stat_result) -> str | None:
    """Why a spec root would read may not be trusted: it must belong to root (or this
    runtime's user) and be writable by no one else, as a program root runs must."""
    from nvdocker2.host.run import trusted_uids

    if st.st_uid not in trusted_uids():
        return f"{path} belongs to uid {st.st_uid}"
    if st.st_mode & 0o022:
        return f"{path} is writable by its group or others (mode {st.st_mode & 0o7777:04o})"
    return None


def _checked(spec: Any) -> dict:
    """The spec when it has the shape used here (kind, devices with names and edits)."""
    if not isinstance(spec, dict):
        raise ValueError("not a CDI spec (a mapping with cdiVersion, kind and devices)")
    kind = spec.get("kind")
    if not isinstance(kind, str) or not is_kind(kind):
        raise ValueError(f"kind {kind!r:.60} is not vendor/class")
    devices = spec.get("devices")
    if not isinstance(devices, list):
        raise ValueError("'devices' must be a list")
    for device in devices:
        name = device.get("name") if isinstance(device, dict) else None
        if not (isinstance(name, str) and len(name) <= MAX_CDI_NAME
                and is_cdi_word(name, CDI_DEVICE_CHARS)):
            raise ValueError(f"device name {name!r:.60} is not a CDI device name")
        if not isinstance(device.get("containerEdits"), dict):
            raise ValueError(f"device {name!r}: 'containerEdits' must be a mapping")
    if not isinstance(spec.get("containerEdits", {}), dict):
        raise ValueError("'containerEdits' must be a mapping")
    return spec


def inject(oci: dict, resolved: list[tuple[dict, dict, str]]) -> None:
    """Apply the edits of each device's spec (once per spec, before its first device) and of
    each device, in order, to the OCI spec `oci`, as CDI's `InjectDevices` does."""
    edits: list[tuple[dict, str]] = []
    seen: list[int] = []
    for spec, device, path in resolved:
        if id(spec) not in seen:
            seen.append(id(spec))
            if spec.get("containerEdits"):
                edits.append((spec["containerEdits"], path))
        edits.append((device["containerEdits"], path))
    for edit, path in edits:
        try:
            _apply(oci, edit)
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            raise CdiRefusal(f"{path}: cannot apply its containerEdits: {str(e)[:200]}",
                             "check the spec with `nvdocker2 cdi validate`") from None
    mounts = oci.get("mounts")
    if isinstance(mounts, list):  # CDI orders the mounts by depth, parents first (stable)
        mounts.sort(key=lambda m: len([p for p in os.path.normpath(
            m.get("destination", "") if isinstance(m, dict) else "").split("/") if p]))


def _list(value: Any, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"{what} must be a list")
    return value


def _apply(oci: dict, edit: dict) -> None:
    unknown = set(edit) - {"env", "deviceNodes", "mounts", "hooks", "additionalGids"}
    if unknown:
        raise ValueError(f"edits {sorted(unknown)} are not applied by nvdocker2")
    process = oci.setdefault("process", {})
    env = process.setdefault("env", [])
    for entry in _list(edit.get("env"), "env"):
        if not isinstance(entry, str) or "=" not in entry:
            raise ValueError(f"env entry {entry!r:.60} is not NAME=VALUE")
        name = entry.split("=", 1)[0] + "="
        at = [i for i, e in enumerate(env) if isinstance(e, str) and e.startswith(name)]
        if at:
            env[at[0]] = entry
        else:
            env.append(entry)
    user = process.get("user") if isinstance(process.get("user"), dict) else {}
    for node in _list(edit.get("deviceNodes"), "deviceNodes"):
        _device_node(oci, node, user)
    mounts = oci.setdefault("mounts", [])
    for m in _list(edit.get("mounts"), "mounts"):
        if not isinstance(m.get("hostPath"), str) or not isinstance(m.get("containerPath"), str):
            raise ValueError("a mount needs hostPath and containerPath")
        mounts[:] = [x for x in mounts if not (isinstance(x, dict)
                                               and x.get("destination") == m["containerPath"])]
        entry = {"destination": m["containerPath"], "source": m["hostPath"]}
        for key in ("type", "options"):
            if m.get(key):
                entry[key] = m[key]
        mounts.append(entry)
    for hook in _list(edit.get("hooks"), "hooks"):
        name = hook.get("hookName")
        if name not in HOOK_NAMES or not isinstance(hook.get("path"), str):
            raise ValueError(f"hook {name!r:.40} needs a known hookName and a path")
        entry = {k: hook[k] for k in ("path", "args", "env", "timeout") if k in hook}
        oci.setdefault("hooks", {}).setdefault(name, []).append(entry)
    gids = [g for g in _list(edit.get("additionalGids"), "additionalGids") if g]
    if gids:
        user = process.setdefault("user", {"uid": 0, "gid": 0})
        have = user.setdefault("additionalGids", [])
        have.extend(g for g in gids if g not in have)


def _device_node(oci: dict, node: dict, user: dict) -> None:
    path = node.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"device node path {path!r:.60} is not absolute")
    host = node.get("hostPath") or path
    kind, major, minor = node.get("type") or "", node.get("major") or 0, node.get("minor") or 0
    mode = node.get("fileMode")
    if not (kind and (major or kind == "p")):
        import stat

        try:
            st = os.lstat(host)
        except OSError as e:
            raise ValueError(f"device node {host}: {e.strerror}") from None
        found = ("c" if stat.S_ISCHR(st.st_mode) else "b" if stat.S_ISBLK(st.st_mode)
                 else "p" if stat.S_ISFIFO(st.st_mode) else None)
        if found is None:
            raise ValueError(f"{host} is not a device node")
        if kind and kind != found and not (kind == "u" and found == "c"):
            raise ValueError(f"{host} is of type {found}, the spec says {kind}")
        kind = kind or found
        if not major and kind != "p":
            major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
        if mode is None:
            mode = stat.S_IMODE(st.st_mode)
    device = {"path": path, "type": kind, "major": major, "minor": minor}
    if mode is not None:
        device["fileMode"] = mode
    for key, own in (("uid", "uid"), ("gid", "gid")):
        if node.get(key) is not None:
            device[key] = node[key]
        elif isinstance(user.get(own), int) and user[own] > 0:
            device[key] = user[own]
    linux = oci.setdefault("linux", {})
    devices = linux.setdefault("devices", [])
    devices[:] = [d for d in devices if not (isinstance(d, dict) and d.get("path") == path)]
    devices.append(device)
    if kind in ("b", "c"):
        allowed = linux.setdefault("resources", {}).setdefault("devices", [])
        allowed.append({"allow": True, "type": kind, "major": major, "minor": minor,
                        "access": node.get("permissions") or "rwm"})


def parse_spec(data: bytes, name: str) -> Any:
    """A spec file's document: JSON, or the block YAML that specs are written in."""
    text = data.decode("utf-8")
    if name.endswith(".json") or text.lstrip().startswith("{"):
        return jsonio.loads(text)
    return read_yaml(text)


def read_yaml(text: str) -> Any:
    """Block-style YAML: mappings, sequences, plain, single- and double-quoted scalars,
    integers, booleans, null and the empty flow collections; comments and one `---`. What it
    does not read (anchors, tags, block scalars, flow collections with content) is a
    ValueError, and the spec is then ignored."""
    toks: list[list] = []
    for number, line in enumerate(text.splitlines(), 1):
        body = line.rstrip()
        stripped = body.lstrip(" ")
        if not stripped or stripped.startswith("#") or (not toks and stripped == "---"):
            continue
        if "\t" in body[:len(body) - len(stripped) + 1]:
            raise ValueError(f"line {number}: a tab in the indentation")
        toks.append([number, len(body) - len(stripped), stripped])
    if not toks:
        return None
    value, i = _block(toks, 0)
    if i != len(toks):
        raise ValueError(f"line {toks[i][0]}: unexpected indentation")
    return value


def _dash(text: str) -> bool:
    return text == "-" or text.startswith("- ")


def _block(toks: list, i: int) -> tuple[Any, int]:
    return (_sequence if _dash(toks[i][2]) else _mapping)(toks, i, toks[i][1])


def _sequence(toks: list, i: int, indent: int) -> tuple[list, int]:
    out = []
    while i < len(toks) and toks[i][1] == indent and _dash(toks[i][2]):
        number, _, text = toks[i]
        rest = text[1:].lstrip(" ")
        if not rest:
            if i + 1 < len(toks) and toks[i + 1][1] > indent:
                value, i = _block(toks, i + 1)
            else:
                value, i = None, i + 1
        elif _dash(rest) or _key(rest, number) is not None:
            toks[i] = [number, indent + len(text) - len(rest), rest]
            value, i = _block(toks, i)
        else:
            value, i = _scalar(rest, number), i + 1
        out.append(value)
    return out, i


def _mapping(toks: list, i: int, indent: int) -> tuple[dict, int]:
    out: dict = {}
    while i < len(toks) and toks[i][1] == indent and not _dash(toks[i][2]):
        number, _, text = toks[i]
        got = _key(text, number)
        if got is None:
            raise ValueError(f"line {number}: expected 'key: value'")
        key, rest = got
        if key in out:
            raise ValueError(f"line {number}: duplicate key {key!r:.40}")
        i += 1
        if rest:
            out[key] = _scalar(rest, number)
        elif i < len(toks) and (toks[i][1] > indent or (
                toks[i][1] == indent and _dash(toks[i][2]))):
            out[key], i = _block(toks, i)
        else:
            out[key] = None
    return out, i


def _key(text: str, number: int) -> tuple[str, str] | None:
    """(key, rest) of a `key: value` line, or None when the line is no mapping entry."""
    if text[0] in "\"'":
        key, end = _quoted(text, number)
        rest = text[end:].lstrip(" ")
        if not rest.startswith(":"):
            return None
        return key, rest[1:].strip(" ")
    at = text.find(": ")
    if at < 0:
        if not text.endswith(":"):
            return None
        at = len(text) - 1
    key = text[:at]
    if not key or key[0] in "[{&*!|>%@`#" or " #" in key:
        return None
    return key, text[at + 1:].strip(" ")


def _quoted(text: str, number: int) -> tuple[str, int]:
    """The value of the quoted scalar at the start of `text`, and where it ends."""
    quote = text[0]
    i = 1
    while i < len(text):
        c = text[i]
        if quote == '"' and c == "\\":
            i += 2
            continue
        if c == quote:
            if quote == "'" and text[i + 1:i + 2] == "'":
                i += 2
                continue
            raw = text[:i + 1]
            if quote == '"':
                value = jsonio.loads(raw)
            else:
                value = raw[1:-1].replace("''", "'")
            return value, i + 1
        i += 1
    raise ValueError(f"line {number}: unterminated quoted string")


_NULLS = ("", "~", "null", "Null", "NULL")
_BOOLS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False,
          "FALSE": False}


def _scalar(text: str, number: int) -> Any:
    if text[0] in "\"'":
        value, end = _quoted(text, number)
        rest = text[end:].strip(" ")
        if rest and not rest.startswith("#"):
            raise ValueError(f"line {number}: text after a quoted string")
        return value
    if " #" in text:
        text = text[:text.index(" #")].rstrip(" ")
    if text in ("{}", "[]"):
        return {} if text == "{}" else []
    if text[0] in "[{&*!|>%@`":
        raise ValueError(f"line {number}: {text[:20]!r} is YAML this reader does not read")
    if text in _NULLS:
        return None
    if text in _BOOLS:
        return _BOOLS[text]
    digits = text[1:] if text[0] in "+-" else text
    if digits.isascii() and digits.isdigit():
        return int(text, 8) if len(digits) > 1 and digits[0] == "0" else int(text)
    return text
