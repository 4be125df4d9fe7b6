"""Check a candidate daemon.json before it is put in place.

`validate()` runs the packaged JSON Schema (types of every documented key, both runtime entry
forms) and turns what dockerd would refuse into plain errors naming the key; unknown top-level
keys are warnings (dockerd refuses them, but a newer dockerd may know them). jsonschema is
imported only for a document that conforms.py cannot pass: one with an error, whose messages
jsonschema words.
`dockerd_validate()` runs `dockerd --validate --config-file FILE` where that flag exists
(Docker >= 23); on older dockerd it reports "not available" instead of failing.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvdocker2 import locations
from nvdocker2.engines.docker.daemonjson.conforms import conforms
from nvdocker2.engines.docker.daemonjson.edit import dangling_default
from nvdocker2.host import run
from nvdocker2.store.probes import Identity, Probes, identity

# Singular flag names dockerd accepts in the file but ignores: the plural is what works.
IGNORED_SINGULAR = {
    "label": "labels",
    "add-runtime": "runtimes",
    "registry-mirror": "registry-mirrors",
    "host": "hosts",
    "insecure-registry": "insecure-registries",
    "storage-opt": "storage-opts",
    "exec-opt": "exec-opts",
    "dns-opt": "dns-opts",
    "log-opt": "log-opts",
    "default-ulimit": "default-ulimits",
    "authorization-plugin": "authorization-plugins",
    "node-generic-resource": "node-generic-resources",
    "default-address-pool": "default-address-pools",
}


@functools.lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The packaged schema (engines/docker/daemonjson/schema.json)."""
    loaded: dict[str, Any] = json.loads(Path(__file__).with_name("schema.json").read_text("utf-8"))
    return loaded


@functools.lru_cache(maxsize=1)
def _validator_class() -> Any:
    """Draft 7, except that "integer" means a JSON number written without fraction or
    exponent: dockerd (Go) refuses `1.0` or `1e3` for an int field."""
    import jsonschema  # type: ignore[import-untyped]  # Debian's python3-jsonschema has no types

    base = jsonschema.Draft7Validator

    def is_integer(checker: Any, instance: Any) -> bool:
        return isinstance(instance, int) and not isinstance(instance, bool)

    checker = base.TYPE_CHECKER.redefine("integer", is_integer)
    return jsonschema.validators.extend(base, type_checker=checker)


def preload() -> None:
    """Read the schema now, so it is not done while the lock is held. jsonschema is imported
    only for a document the quick check does not pass (`validate`)."""
    schema()


def known_keys() -> frozenset[str]:
    return frozenset(schema()["properties"])


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (("." if out else "") + str(p))
    return out or "(top level)"


def _json_text(v: Any) -> str:
    from nvdocker2.engines.docker.daemonjson.document import Style, dumps

    try:
        s = dumps(v, Style(indent=None, suffix=""))
    except (TypeError, ValueError):
        s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _message(err: Any) -> str:
    where = _path(err.absolute_path)
    v = err.validator
    if v == "type":
        want = err.validator_value
        want = " or ".join(want) if isinstance(want, list) else want
        return f"{where}: {_json_text(err.instance)} is not of type {want}"
    if v == "oneOf" and where.startswith("runtimes."):
        inst = err.instance if isinstance(err.instance, dict) else {}
        keys = set(inst)
        if "path" in keys and "runtimeType" in keys:
            return f'{where}: has both "path" and "runtimeType" (use one)'
        if "path" in keys and "options" in keys:
            return f'{where}: "options" only works with "runtimeType", not with "path"'
        if "runtimeType" in keys and "runtimeArgs" in keys:
            return f'{where}: "runtimeArgs" only works with "path", not with "runtimeType"'
        if not keys & {"path", "runtimeType"}:
            return f'{where}: needs "path" (or, Docker 24+, "runtimeType")'
        sub = (
            min(err.context, key=lambda e: len(list(e.absolute_path)), default=None)
            if err.context
            else None
        )
        if sub is not None and sub.validator == "type":
            return _message(sub)
        return f"{where}: not a valid runtime entry"
    if v == "required":
        return f"{where}: {err.message}"
    if v == "not" and where == "(top level)":
        return "host-gateway-ip and host-gateway-ips cannot both be set"
    if v == "enum":
        allowed = ", ".join(json.dumps(x) for x in err.validator_value)
        return f"{where}: {_json_text(err.instance)} is not one of {allowed}"
    if v == "additionalProperties":
        return f"{where}: {err.message}"
    return f"{where}: {err.message}"


def validate(doc: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(errors, warnings) for a whole daemon.json object. Errors mean dockerd would refuse it."""
    errors = [] if conforms(schema(), doc) else _schema_errors(doc)
    warnings: list[str] = []
    if isinstance(doc, dict):
        known = known_keys()
        for k in doc:
            if k in known:
                continue
            if k in IGNORED_SINGULAR:
                warnings.append(
                    f'key "{k}" is ignored by dockerd; the setting is "{IGNORED_SINGULAR[k]}"'
                )
            else:
                warnings.append(
                    f'unknown key "{k}": dockerd refuses to start on a key it does not know '
                    "(fine only if your dockerd is newer than the schema)"
                )
        warnings.extend(_out_of_range_numbers(doc))
        d = dangling_default(doc)
        if d is not None:
            warnings.append(
                f'default-runtime: "{d}" is not defined in "runtimes" (dockerd refuses to start '
                "unless a --add-runtime flag defines it)"
            )
    return errors, warnings


def _schema_errors(doc: Any) -> list[str]:
    """jsonschema's errors for `doc`, as plain messages naming the key, each once."""
    validator = _validator_class()(schema())
    errors: list[str] = []
    seen: set[str] = set()
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        msg = _message(err)
        if msg not in seen:
            seen.add(msg)
            errors.append(msg)
    return errors


def _out_of_range_numbers(doc: dict[str, Any]) -> list[str]:
    """Numbers Go's float64 cannot hold (1.0e400): dockerd fails to decode the whole file.

    A warning, not an error: the value was the operator's before nvdocker2 touched the file,
    and its text is kept exactly."""
    out: list[str] = []
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, dict):
            stack.extend((f"{path}.{k}" if path else str(k), x) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((f"{path}[{i}]", x) for i, x in enumerate(v))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            try:
                finite = abs(float(v)) != float("inf")
            except OverflowError:
                finite = False
            if not finite:
                out.append(
                    f"{path}: {_json_text(v)} is outside the range dockerd can read (a Go "
                    "float64); dockerd refuses to start with this file"
                )
    return sorted(out)


@dataclass(frozen=True)
class DockerdCheck:
    """Outcome of `dockerd --validate`: `available` False on dockerd < 23 or no dockerd."""

    available: bool
    ok: bool
    output: str
    dockerd: str | None = None


# The dockerd binaries (resolved path, identity) this process found without --validate.
_LACKING: set[tuple[str, Identity]] = set()


def find_dockerd() -> str | None:
    """The dockerd binary to run `--validate` with: on PATH or in the usual places, and only
    one no other user could have placed or replaced (docs/reference.md §8)."""
    return run.find("dockerd", locations.DOCKERD_PLACES)


def dockerd_validate(
    candidate: Path, dockerd: str | None = None, timeout: float = 20.0,
    server_version: str | None = None, probes: Probes | None = None, remember: bool = True,
) -> DockerdCheck:
    """Run `dockerd --validate --config-file CANDIDATE`; "unknown flag" means not available.

    `server_version`: the running dockerd's version (GET /info); below 23.0, which added
    --validate, nothing is run. `probes`: where a dockerd found to lack the flag is recorded
    (with `remember`) and looked up, by its resolved path and identity, so that binary is not
    run again until it changes (store/probes.py); this process remembers it in any case."""
    exe = dockerd or find_dockerd()
    if not exe:
        return DockerdCheck(False, True, "dockerd not found", None)
    major = re.match(r"\s*(\d+)\.", server_version or "")
    if major and int(major.group(1)) < 23:
        return DockerdCheck(
            False, True, f"dockerd {server_version} has no --validate (23.0 added it)", exe
        )
    before = identity(exe)
    if before is None:
        return DockerdCheck(False, True, f"{exe} not found", None)
    if before in _LACKING or (probes is not None and probes.lacks(*before, "--validate")):
        return DockerdCheck(False, True, f"dockerd has no --validate (found before: {exe})", exe)
    try:
        proc = run.run([exe, "--validate", "--config-file", str(candidate)],
                       timeout=timeout, merge_stderr=True)
    except OSError as e:
        return DockerdCheck(False, True, f"could not run {exe}: {e}", exe)
    out = proc.stdout.decode("utf-8", "replace").strip()
    if "unknown flag" in out and "validate" in out:
        # Only a binary that stayed the same while it answered is recorded.
        if identity(exe) == before:
            _LACKING.add(before)
            if probes is not None and remember:
                probes.remember_lack(*before, "--validate")
        return DockerdCheck(False, True, out, exe)
    return DockerdCheck(True, proc.returncode == 0, out, exe)
