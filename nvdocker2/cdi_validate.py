"""`nvdocker2 cdi validate`: read a CDI spec as each reader's CDI library does.

A reader (Podman, Docker, containerd) loads every spec in /etc/cdi and /var/run/cdi with the
CDI library it was built with; a spec one library refuses gives no device to any container of
that reader. What each library version does on load (tags.cncf.io/container-device-interface,
`ReadSpec`):

- the file is parsed as YAML (JSON is YAML) into its Go types, strictly: an unknown field, a
  duplicate key or a value of the wrong type refuses the file; field names match without case;
- `cdiVersion` must be one the library knows; from 0.6 on it must also be at least what the
  content needs (`cdi_versions.requirements`);
- vendor and class (`kind: vendor/class`), device names, environment entries, device node
  types and permissions, hook names and mounts follow the rules in `_check_*` below;
- device names are unique; a device has at least one edit; 1.0 refuses a spec with no device.

Files not ending in .json or .yaml are skipped by every reader: that is reported too.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from nvdocker2.direct.cdi_versions import FIELDS, SPEC_VERSIONS, key, requirements


@dataclass(frozen=True)
class Library:
    """What one release of the CDI library accepts."""

    version: str
    newest_spec: str  # the newest cdiVersion it knows (its struct fields are those up to it)
    checks_minimum: bool  # refuses a cdiVersion lower than the content needs (>= 0.6)
    dots_in_class: bool  # a class may hold "." (>= 0.6)
    needs_devices: bool  # refuses a spec without devices (>= 1.0)

    def knows(self, since: str) -> bool:
        return key(since) <= key(self.newest_spec)


LIBRARIES = {
    "0.5.2": Library("0.5.2", "0.5.0", False, False, False),
    "0.6.2": Library("0.6.2", "0.6.0", True, True, False),
    "0.7.1": Library("0.7.1", "0.7.0", True, True, False),
    "0.8.0": Library("0.8.0", "0.8.0", True, True, False),
    "1.0.1": Library("1.0.1", "1.0.0", True, True, True),
}


@dataclass(frozen=True)
class Reader:
    name: str
    description: str
    library: Library


READERS = {
    r.name: r for r in (
        Reader("podman-4.3", "Podman 4.3 (Debian 12)", LIBRARIES["0.5.2"]),
        Reader("docker-25", "Docker 25.0 to 26.0", LIBRARIES["0.6.2"]),
        Reader("docker-26.1", "Docker 26.1", LIBRARIES["0.7.1"]),
        Reader("docker-28.0", "Docker 28.0", LIBRARIES["0.8.0"]),
        Reader("docker-28.1", "Docker 28.1 and later", LIBRARIES["1.0.1"]),
    )
}

HOOK_NAMES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart",
              "poststop")
NODE_TYPES = ("", "b", "c", "u", "p")


class SpecError(Exception):
    """Why a reader refuses the spec: `where` is the field's path in the file."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where
        self.message = message


# --- parsing: the file as the library's YAML and JSON decoders see it -------------------------


def parse(data: bytes, name: str) -> Any:
    """The document of a spec file; duplicate keys and anything YAML cannot read raise."""
    import yaml

    class Strict(yaml.SafeLoader):
        pass

    def mapping(loader: Any, node: Any, deep: bool = False) -> dict:
        seen: dict = {}
        for k, v in node.value:
            k = loader.construct_object(k, deep=True)
            if k in seen:
                mark = v.start_mark
                raise SpecError(f"line {mark.line + 1}", f"key {k!r} is given twice")
            seen[k] = loader.construct_object(v, deep=True)
        return seen

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError("", f"not UTF-8 text ({err.reason} at byte {err.start})") from None
    try:
        return yaml.load(text, Loader=Strict)  # noqa: S506 (a SafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(where, f"not YAML or JSON: {err.problem}") from None
    except yaml.YAMLError as err:
        raise SpecError("", f"not YAML or JSON: {err}") from None


# --- decoding into the library's types --------------------------------------------------------

_INT64 = (-(2**63), 2**63 - 1)
# The Go type of each scalar field (specs-go/config.go); objects and lists of objects are
# decoded by `_Decoder.edits`.
TYPES: dict[str, dict[str, str]] = {
    "containerEdits": {"env": "[]string", "additionalGids": "[]uint32"},
    "deviceNode": {"path": "string", "hostPath": "string", "type": "string",
                   "permissions": "string", "major": "int64", "minor": "int64",
                   "fileMode": "*uint32", "uid": "*uint32", "gid": "*uint32"},
    "hook": {"hookName": "string", "path": "string", "args": "[]string", "env": "[]string",
             "timeout": "*int"},
    "mount": {"hostPath": "string", "containerPath": "string", "type": "string",
              "options": "[]string"},
    "intelRdt": {"closID": "string", "l3CacheSchema": "string", "memBwSchema": "string",
                 "enableCMT": "bool", "enableMBM": "bool"},
}
_UINT32 = (0, 2**32 - 1)


def _string(v: Any, where: str) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    # The library reads JSON as YAML too (sigs.k8s.io/yaml), which turns a number or a
    # boolean into the string a string field wants.
    if isinstance(v, (bool, int, float)):
        return str(v).lower() if isinstance(v, bool) else str(v)
    raise SpecError(where, f"{_what(v)} where a string belongs")


def _integer(v: Any, where: str, bounds: tuple[int, int], type_name: str) -> int:
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int):
        raise SpecError(where, f"{_what(v)} where an integer ({type_name}) belongs")
    if not bounds[0] <= v <= bounds[1]:
        raise SpecError(where, f"{v} does not fit in {type_name}")
    return v


def _what(v: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number"}
    return names.get(type(v), type(v).__name__)


@dataclass
class _Decoder:
    library: Library

    def obj(self, v: Any, where: str, kind: str) -> dict[str, Any]:
        """An object of `kind` with its fields under their canonical names."""
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise SpecError(where, f"{_what(v)} where an object belongs")
        known = {n: since for n, since in FIELDS[kind].items() if self.library.knows(since)}
        folded = {n.lower(): n for n in known}
        out: dict[str, Any] = {}
        for k, item in v.items():
            name = k if isinstance(k, str) else str(k)
            canonical = name if name in known else folded.get(name.lower())
            if canonical is None:
                since = FIELDS[kind].get(name) or next(
                    (s for n, s in FIELDS[kind].items() if n.lower() == name.lower()), None)
                why = (f"added in CDI spec {since}, which CDI {self.library.version} predates"
                       if since else "not a field of the CDI spec")
                raise SpecError(_join(where, name), f"unknown field ({why})")
            out[canonical] = item
        return out

    def list(self, v: Any, where: str) -> list[Any]:
        if v is None:
            return []
        if not isinstance(v, list):
            raise SpecError(where, f"{_what(v)} where a list belongs")
        return v

    def spec(self, doc: Any) -> dict[str, Any]:
        if doc is None:
            raise SpecError("", "the file holds no spec (empty or null)")
        s = self.obj(doc, "", "spec")
        for f in ("cdiVersion", "kind"):
            s[f] = _string(s.get(f), f)
        s["annotations"] = self.annotations(s.get("annotations"), "annotations")
        s["containerEdits"] = self.edits(s.get("containerEdits"), "containerEdits")
        devices = []
        for i, d in enumerate(self.list(s.get("devices"), "devices")):
            where = f"devices[{i}]"
            dev = self.obj(d, where, "device")
            dev["name"] = _string(dev.get("name"), f"{where}.name")
            dev["annotations"] = self.annotations(dev.get("annotations"), f"{where}.annotations")
            dev["containerEdits"] = self.edits(dev.get("containerEdits"),
                                               f"{where}.containerEdits")
            devices.append(dev)
        s["devices"] = devices
        return s

    def annotations(self, v: Any, where: str) -> dict[str, str]:
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise SpecError(where, f"{_what(v)} where an object of strings belongs")
        return {str(k): _string(x, _join(where, str(k))) for k, x in v.items()}

    def typed(self, v: Any, where: str, kind: str) -> dict[str, Any]:
        """An object of `kind` whose scalar fields have their Go types (`TYPES`)."""
        o = self.obj(v, where, kind)
        for f, t in TYPES[kind].items():
            w = _join(where, f)
            if t == "string":
                o[f] = _string(o.get(f), w)
            elif t == "[]string":
                o[f] = [_string(x, f"{w}[{i}]") for i, x in enumerate(self.list(o.get(f), w))]
            elif t == "[]uint32":
                o[f] = [_integer(x, f"{w}[{i}]", _UINT32, "uint32")
                        for i, x in enumerate(self.list(o.get(f), w))]
            elif o.get(f) is None:
                o[f] = 0 if t == "int64" else None  # the rest are pointers in Go: nil
            elif t == "bool":
                if not isinstance(o[f], bool):
                    raise SpecError(w, f"{_what(o[f])} where a boolean belongs")
            else:
                o[f] = _integer(o[f], w, _INT64 if t in ("int64", "*int") else _UINT32,
                                "int" if t == "*int" else t.lstrip("*"))
        return o

    def edits(self, v: Any, where: str) -> dict[str, Any]:
        e = self.typed(v, where, "containerEdits")
        for f, kind in (("deviceNodes", "deviceNode"), ("hooks", "hook"), ("mounts", "mount")):
            w = _join(where, f)
            e[f] = [self.typed(x, f"{w}[{i}]", kind) for i, x in enumerate(self.list(e.get(f), w))]
        if e.get("intelRdt") is not None:
            e["intelRdt"] = self.typed(e["intelRdt"], _join(where, "intelRdt"), "intelRdt")
        return e


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


# --- the library's checks ---------------------------------------------------------------------

_ALNUM = re.compile(r"[A-Za-z0-9]")


def _check_name(name: str, what: str, middle: str, first: Callable[[str], bool],
                first_rule: str) -> None:
    if name == "":
        raise SpecError("", f"empty {what}")
    if not first(name[0]):
        raise SpecError("", f"{what} {name!r} must start with {first_rule}")
    if len(name) == 1:
        if what == "device name":
            return
        # The library reads name[1:len-1], out of range for one character: it panics.
        raise SpecError("", f"{what} {name!r} has one character, which makes the CDI library "
                            "crash (index out of range) instead of loading the file")
    for c in name[1:-1]:
        if not (_ALNUM.match(c) or c in middle):
            raise SpecError("", f"{what} {name!r} holds {c!r} (allowed: letters, digits and "
                                f"{', '.join(repr(m) for m in middle)})")
    if not _ALNUM.match(name[-1]):
        raise SpecError("", f"{what} {name!r} must end with a letter or digit")


def _is_letter(c: str) -> bool:
    return ("A" <= c <= "Z") or ("a" <= c <= "z")


def _is_alnum(c: str) -> bool:
    return _is_letter(c) or "0" <= c <= "9"


def _located(where: str, fn: Callable[[], None]) -> None:
    try:
        fn()
    except SpecError as err:
        raise SpecError(where, err.message) from None


def _check_env(env: list[str], where: str) -> None:
    for i, v in enumerate(env):
        if v.find("=") <= 0:
            raise SpecError(f"{where}[{i}]", f"{v!r} is not NAME=VALUE")


def _check_edits(e: dict[str, Any], where: str, library: Library) -> None:
    _check_env(e["env"], _join(where, "env"))
    for i, n in enumerate(e["deviceNodes"]):
        w = f"{_join(where, 'deviceNodes')}[{i}]"
        if n["path"] == "":
            raise SpecError(_join(w, "path"), "empty device path")
        if n["type"] not in NODE_TYPES:
            raise SpecError(_join(w, "type"), f"{n['type']!r} is not a device type "
                                              "(b, c, u or p, or none)")
        bad = [c for c in n["permissions"] if c not in "rwm"]
        if bad:
            raise SpecError(_join(w, "permissions"), f"{n['permissions']!r} holds {bad[0]!r} "
                                                     "(allowed: r, w, m)")
    for i, h in enumerate(e["hooks"]):
        w = f"{_join(where, 'hooks')}[{i}]"
        if h["hookName"] not in HOOK_NAMES:
            raise SpecError(_join(w, "hookName"), f"{h['hookName']!r} is not a hook name "
                                                  f"({', '.join(HOOK_NAMES)})")
        if h["path"] == "":
            raise SpecError(_join(w, "path"), "empty hook path")
        _check_env(h["env"], _join(w, "env"))
    for i, m in enumerate(e["mounts"]):
        w = f"{_join(where, 'mounts')}[{i}]"
        for f in ("hostPath", "containerPath"):
            if m[f] == "":
                raise SpecError(_join(w, f), "empty mount path")
    rdt = e.get("intelRdt")
    if rdt is not None:
        clos = rdt["closID"]
        if len(clos) >= 4096 or clos in (".", "..") or "/" in clos or "\n" in clos:
            raise SpecError(_join(where, "intelRdt.closID"), f"{clos!r} is not a file name")


def _empty(e: dict[str, Any], library: Library) -> bool:
    parts = ["env", "deviceNodes", "hooks", "mounts"]
    if library.knows("0.7.0"):
        parts.append("additionalGids")
        if e.get("intelRdt") is not None:
            return False
    return not any(e.get(p) for p in parts)


def check(doc: Any, library: Library) -> dict[str, Any]:
    """The spec as `library` loads it, or the `SpecError` it refuses it with."""
    s = _Decoder(library).spec(doc)
    version = s["cdiVersion"]
    known = SPEC_VERSIONS[: SPEC_VERSIONS.index(library.newest_spec) + 1]
    given = version[1:] if library.checks_minimum and version.startswith("v") else version
    if given not in known:
        raise SpecError("cdiVersion", f"{version!r} is not a version CDI {library.version} "
                                      f"knows ({', '.join(known)})")
    if library.checks_minimum:
        needs = [(v, why) for v, why in requirements(s) if key(v) > key(given)]
        if needs:
            v, why = max(needs, key=lambda n: key(n[0]))
            raise SpecError("cdiVersion", f"{version} is too low: {why} needs {v}")
    kind = s["kind"]
    vendor, cls = kind.split("/", 1) if "/" in kind else ("", kind)
    if not vendor or not cls:
        vendor, cls = "", kind
    _located("kind", lambda: _check_name(vendor, "vendor", "_-.", _is_letter, "a letter"))
    _located("kind", lambda: _check_name(cls, "class", "_-." if library.dots_in_class else "_-",
                                         _is_letter, "a letter"))
    _check_edits(s["containerEdits"], "containerEdits", library)
    names: dict[str, int] = {}
    for i, d in enumerate(s["devices"]):
        where = f"devices[{i}]"
        _located(_join(where, "name"), lambda: _check_name(
            d["name"], "device name", "_-.:", _is_alnum, "a letter or digit"))  # noqa: B023 - run now
        if _empty(d["containerEdits"], library):
            raise SpecError(_join(where, "containerEdits"), "a device needs at least one edit")
        _check_edits(d["containerEdits"], _join(where, "containerEdits"), library)
        if d["name"] in names:
            raise SpecError(_join(where, "name"), f"device {d['name']!r} is also "
                                                  f"devices[{names[d['name']]}]")
        names[d["name"]] = i
    if library.needs_devices and not s["devices"]:
        raise SpecError("devices", "a spec needs at least one device")
    return s


# --- a file against the readers ---------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    reader: Reader
    error: SpecError | None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Report:
    path: str
    version: str | None
    kind: str | None
    devices: tuple[str, ...]
    minimum: str | None  # the lowest cdiVersion the content needs
    verdicts: tuple[Verdict, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.verdicts)

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": self.path, "ok": self.ok, "cdiVersion": self.version, "kind": self.kind,
            "devices": list(self.devices), "minimum_version": self.minimum,
            "readers": {v.reader.name: {"cdi_library": v.reader.library.version, "ok": v.ok,
                                        "error": str(v.error) if v.error else None}
                        for v in self.verdicts},
            "notes": list(self.notes),
        }


def validate(path: str, data: bytes, readers: list[Reader], mode: int | None = None) -> Report:
    """Each reader's verdict on the file `path` holding `data` (`mode`: its permission bits)."""
    notes = []
    if os.path.splitext(path)[1] not in (".json", ".yaml"):
        skipped = SpecError("", "readers load only files ending in .json or .yaml from "
                                "/etc/cdi and /var/run/cdi; this one would be skipped")
        return Report(path, None, None, (), None, tuple(Verdict(r, skipped) for r in readers))
    if mode is not None and not mode & 0o004:
        notes.append(f"{path} is not readable by other users (mode {mode & 0o7777:04o}): "
                     "rootless Podman cannot read it; chmod 0644 it")
    try:
        doc = parse(data, path)
    except SpecError as err:
        return Report(path, None, None, (), None, tuple(Verdict(r, err) for r in readers),
                      tuple(notes))
    verdicts, loaded = [], None
    for r in readers:
        try:
            spec = check(doc, r.library)
        except SpecError as err:
            verdicts.append(Verdict(r, err))
        else:
            loaded = loaded or spec
            verdicts.append(Verdict(r, None))
    raw = doc if isinstance(doc, dict) else {}
    version = raw.get("cdiVersion") if isinstance(raw.get("cdiVersion"), str) else None
    kind = raw.get("kind") if isinstance(raw.get("kind"), str) else None
    devices: tuple[str, ...] = ()
    minimum = None
    if loaded is not None:
        devices = tuple(f"{kind}={d['name']}" for d in loaded["devices"])
        from nvdocker2.direct.cdi_versions import minimum_version

        minimum = minimum_version(loaded)
    return Report(path, version, kind, devices, minimum, tuple(verdicts), tuple(notes))
