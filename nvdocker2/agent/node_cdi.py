"""The node's CDI spec for `nvdocker2 agent --install-toolkit DIR`.

After the toolkit is in DIR, the agent has the node write its own spec: the node's python3
runs the toolkit's copy of nvdocker2 in the node's root (`chroot HOST_ROOT`), with the
toolkit's config.toml, so the spec names the node's paths (its driver, its ldconfig, the hook
at DIR/nvidia-container-runtime), never the agent's /host. The agent then writes the bytes to
SPEC (a node path; /var/run/cdi, CDI's directory for specs made at boot, as NVIDIA's operator
uses) under the same rules as DIR: every directory on the way root's and writable by no one
else, symlinks followed inside the host root.

What the agent wrote is remembered in DIR/RECORD: the spec's path, the sha256 of the bytes it
wrote (the one before as well, so a write cut short is still known), and the directories it
made. A spec at SPEC that the record does not know (a hand-made one, another tool's) is left
alone and said; at removal, a spec someone has changed since is left too. A node without a
driver yet gets no spec: the agent says why and tries again later.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Optional

from nvdocker2.agent.toolkit import (CDI_RECORD, CONFIG, Refused, Toolkit, read_json,
                                     remove_made, resolve)
from nvdocker2.host import files
from nvdocker2.host import run as door
from nvdocker2.store.atomic import atomic_write

SPEC = "/var/run/cdi/nvidia.yaml"
MAX_SPEC = 16 << 20

# Run by the node's python3 -I -S -B (it writes no bytecode) in the node's root, argv LIB
# RUNTIME: the spec on stdout, else one line on stderr and exit 3.
GENERATE = """\
import sys
sys.path.insert(0, sys.argv[1])
from nvdocker2.errors import NvDockerError
from nvdocker2.direct import cdi
from nvdocker2.direct.commands import cdi_document
try:
    spec, _ = cdi_document(driver_root=None, runtime_path=sys.argv[2], ldconfig=None)
except NvDockerError as e:
    sys.stderr.write(str(e) + "\\n")
    sys.exit(3)
sys.stdout.write(cdi.render(spec, "nvidia.yaml"))
"""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def generate(t: Toolkit, timeout: float = 30.0) -> bytes:
    """The node's spec, made on the node by the toolkit in DIR; Refused when it cannot be."""
    argv = [t.python, "-I", "-S", "-B", "-c", GENERATE, f"{t.dir}/lib", t.runtime]
    if t.host_root != "/":
        argv = ["chroot", t.host_root, *argv]
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
           "NVIDIA_CONTAINER_RUNTIME_CONFIG": f"{t.dir}/{CONFIG}"}
    try:
        p = door.run(argv, timeout=timeout, env=env)
    except OSError as e:
        raise Refused(f"cannot run {t.python} on the node: {e}",
                      "see that the node's python3 runs") from None
    if p.returncode != 0 or not p.stdout:
        last = (p.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise Refused(last[:300], "the spec is written once the node's driver is there; "
                                  "`nvdocker2 cdi generate` on the node writes one by hand")
    return bytes(p.stdout)


def _record(t: Toolkit) -> Optional[dict[str, Any]]:
    """DIR's record of the spec, or None (no DIR, no record, or one that is not ours)."""
    found, rest = resolve(t.host_root, t.dir)
    if rest:
        return None
    doc = read_json(found, CDI_RECORD, t.dir)
    ok = isinstance(doc, dict) and doc.get("spec") == SPEC \
        and isinstance(doc.get("sha256"), list) and isinstance(doc.get("made"), list)
    return doc if ok else None


def _save_record(t: Toolkit, doc: dict[str, Any]) -> None:
    found, _ = resolve(t.host_root, t.dir)
    data = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    atomic_write(os.path.join(found, CDI_RECORD), data, 0o644, follow=False)


def _spec_here(t: Toolkit) -> tuple[str, str, str]:
    """(SPEC's directory as found, what is missing of it, SPEC as this process sees it)."""
    found, rest = resolve(t.host_root, os.path.dirname(SPEC))
    real = os.path.join(found, rest) if rest else found
    return found, rest, os.path.join(real, os.path.basename(SPEC))


def _read(path: str) -> Optional[bytes]:
    if not os.path.lexists(path):
        return None
    if os.path.islink(path) or not os.path.isfile(path):
        raise Refused(f"{SPEC} on the node is not a plain file", f"remove {SPEC} on the node")
    with open(path, "rb") as f:
        return f.read(MAX_SPEC + 1)


def write(t: Toolkit, data: bytes) -> str:
    """Put `data` at SPEC unless a spec the agent did not write is there; what was done."""
    found, rest, path = _spec_here(t)
    record = _record(t)
    ours = record["sha256"] if record else []
    now = _read(path)
    if now is not None and _sha(now) not in ours:
        return f"{SPEC} on the node was not written by the agent: left as it is"
    if now == data:
        return f"CDI spec {SPEC} unchanged"
    root = os.path.realpath(t.host_root)
    made = list(record["made"]) if record else []
    if rest:
        made += ["/" + os.path.relpath(m, root) for m in files.make_dirs(
            os.path.join(found, rest), 0o755)]
    before = [_sha(now)] if now is not None else []
    _save_record(t, {"spec": SPEC, "sha256": before + [_sha(data)], "made": made})
    atomic_write(path, data, 0o644, follow=False)
    _save_record(t, {"spec": SPEC, "sha256": [_sha(data)], "made": made})
    return f"CDI spec {SPEC} written ({len(data)} bytes)"


def remove(t: Toolkit) -> Optional[str]:
    """Remove the spec the agent wrote and the directories made for it; what was done, or None
    when there was nothing of the agent's."""
    record = _record(t)
    if record is None:
        return None
    _, rest, path = _spec_here(t)
    said = None
    if not rest:
        now = _read(path)
        if now is not None and _sha(now) in record["sha256"]:
            os.unlink(path)
            said = f"CDI spec {SPEC} removed"
        elif now is not None:
            said = f"{SPEC} on the node was changed since the agent wrote it: left as it is"
    remove_made(t.host_root, record["made"])
    return said
