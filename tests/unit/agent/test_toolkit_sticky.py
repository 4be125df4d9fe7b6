"""--install-toolkit DIR below a sticky directory anyone can write (the node's /tmp): the
toolkit's rules allow it, as DIR is root's, but DIR.new, where the toolkit is staged, is a
name any node user can take there. `nobody` plants DIR.new and DIR.old (a big tree with a
manifest, so removing it takes a while), and makes DIR.new again the moment the agent has
removed it; the agent must never stage into, and rename into place, a directory of nobody's.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from nvdocker2.agent import toolkit

ATTACK = r"""
import json, os, sys
new, old = sys.argv[1], sys.argv[2]
os.mkdir(new); os.chmod(new, 0o777)
os.mkdir(old)
with open(os.path.join(old, ".nvdocker2-toolkit.json"), "w") as f:
    json.dump({"made": []}, f)
for i in range(20000):
    open(os.path.join(old, f"f{i}"), "w").close()
print("planted", flush=True)
while os.path.lexists(new):
    pass
try:
    os.mkdir(new); os.chmod(new, 0o777)
    print("made", flush=True)
except OSError as e:
    print("lost", e, flush=True)
"""


def _as_nobody(*argv: str) -> list[str]:
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root and the user nobody")
def test_dir_new_taken_by_nobody_in_a_sticky_parent_is_never_staged_into():
    top = Path(tempfile.mkdtemp(prefix="nvd2-sticky-", dir="/tmp"))  # nobody must reach it
    try:
        _attack(top)
    finally:
        shutil.rmtree(top)


def _attack(tmp_path: Path) -> None:
    host = tmp_path / "host"
    for d in ("tmp", "usr/bin", "usr/lib/python3.11"):
        (host / d).mkdir(parents=True)
    (host / "usr/lib/python3.11/os.py").write_bytes(b"# os\n")
    (host / "usr/bin/python3.11").write_bytes(b"\x7fELF stand-in\n")
    (host / "usr/bin/python3.11").chmod(0o755)
    os.symlink("python3.11", host / "usr/bin/python3")
    for d in (tmp_path, host, *[p for p in host.rglob("*") if p.is_dir()]):
        d.chmod(0o755)
    (host / "tmp").chmod(0o1777)
    nobody = pwd.getpwnam("nobody").pw_uid
    kit = host / "tmp" / "nvtk"
    attacker = subprocess.Popen(_as_nobody(sys.executable, "-I", "-c", ATTACK,
                                           f"{kit}.new", f"{kit}.old"),
                                stdout=subprocess.PIPE, text=True)
    try:
        assert attacker.stdout.readline().strip() == "planted"
        t = toolkit.Toolkit(dir="/tmp/nvtk", host_root=str(host))
        try:
            toolkit.install(t)
        except toolkit.Refused as e:
            assert f"belongs to uid {nobody}" in str(e), str(e)
    finally:
        try:
            attacker.wait(timeout=120)
        except subprocess.TimeoutExpired:
            attacker.kill()  # it spins until DIR.new goes: never leave it running
            attacker.wait()
            raise
    if os.path.lexists(kit):
        assert os.lstat(kit).st_uid == 0
        planted = subprocess.run(_as_nobody("sh", "-c", f"echo x > {kit}/planted"),
                                 capture_output=True)
        assert planted.returncode != 0, "nobody can write into the toolkit root runs"
        assert not (kit / "planted").exists()
