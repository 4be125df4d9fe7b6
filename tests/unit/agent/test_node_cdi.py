"""The node's CDI spec of `agent --install-toolkit` (nvdocker2.agent.node_cdi) on real files:
made by the toolkit's own copy of nvdocker2, written only where the agent may, never over a
spec it did not write, removed only while it is still what the agent wrote."""

from __future__ import annotations

import json
import os
import pwd
import sys
from pathlib import Path

import pytest

import nvdocker2
from nvdocker2.agent import node_cdi, toolkit

DIR = "/usr/local/nvidia/toolkit"
SPEC = b'cdiVersion: "0.5.0"\nkind: "nvidia.com/gpu"\ndevices: []\n'


@pytest.fixture
def host(tmp_path):
    """A host root with DIR (empty, as after toolkit.install) and /var/run -> ../run."""
    root = tmp_path / "host"
    (root / DIR.lstrip("/")).mkdir(parents=True)
    (root / "run").mkdir()
    (root / "var").mkdir()
    (root / "var" / "run").symlink_to("../run")
    for d in (root, *[p for p in root.rglob("*") if p.is_dir() and not p.is_symlink()]):
        d.chmod(0o755)
    return root


def kit(host: Path) -> toolkit.Toolkit:
    return toolkit.Toolkit(dir=DIR, host_root=str(host))


def test_written_through_the_nodes_symlink_and_removed_with_the_dirs_it_made(host):
    before = sorted(str(p.relative_to(host)) for p in host.rglob("*"))
    assert node_cdi.write(kit(host), SPEC).startswith("CDI spec /var/run/cdi/nvidia.yaml written")
    spec = host / "run" / "cdi" / "nvidia.yaml"  # /var/run is the node's /run
    assert spec.read_bytes() == SPEC and oct(spec.stat().st_mode & 0o777) == "0o644"
    record = json.loads((host / DIR.lstrip("/") / toolkit.CDI_RECORD).read_text())
    assert record["made"] == ["/run/cdi"]
    assert node_cdi.write(kit(host), SPEC) == "CDI spec /var/run/cdi/nvidia.yaml unchanged"
    assert node_cdi.write(kit(host), SPEC + b"# new\n").endswith("written (61 bytes)")
    assert spec.read_bytes() == SPEC + b"# new\n"
    assert node_cdi.remove(kit(host)) == "CDI spec /var/run/cdi/nvidia.yaml removed"
    (host / DIR.lstrip("/") / toolkit.CDI_RECORD).unlink()
    assert sorted(str(p.relative_to(host)) for p in host.rglob("*")) == before


def test_a_spec_the_agent_did_not_write_is_neither_replaced_nor_removed(host):
    (host / "run" / "cdi").mkdir()
    theirs = host / "run" / "cdi" / "nvidia.yaml"
    theirs.write_bytes(b"# hand made\n")
    said = node_cdi.write(kit(host), SPEC)
    assert said == ("/var/run/cdi/nvidia.yaml on the node was not written by the agent: left "
                    "as it is")
    assert theirs.read_bytes() == b"# hand made\n"
    assert node_cdi.remove(kit(host)) is None
    assert theirs.read_bytes() == b"# hand made\n"


def test_a_spec_changed_after_the_agent_wrote_it_stays_at_removal(host):
    node_cdi.write(kit(host), SPEC)
    spec = host / "run" / "cdi" / "nvidia.yaml"
    spec.write_bytes(SPEC + b"# an operator's edit\n")
    assert node_cdi.write(kit(host), SPEC).endswith("left as it is")
    assert node_cdi.remove(kit(host)).endswith("changed since the agent wrote it: left as it is")
    assert spec.read_bytes() == SPEC + b"# an operator's edit\n"
    assert (host / "run" / "cdi").is_dir()  # not empty: left with it


def test_a_write_cut_short_after_the_record_is_still_known_as_ours(host):
    node_cdi.write(kit(host), SPEC)
    record = host / DIR.lstrip("/") / toolkit.CDI_RECORD
    doc = json.loads(record.read_text())
    doc["sha256"] += [node_cdi._sha(SPEC + b"# next\n")]  # what write() records first
    record.write_text(json.dumps(doc))
    assert node_cdi.write(kit(host), SPEC + b"# next\n").endswith("written (62 bytes)")
    assert node_cdi.remove(kit(host)) == "CDI spec /var/run/cdi/nvidia.yaml removed"


@pytest.mark.parametrize("plant", ["group-writable", "nobody's", "link-out"])
def test_a_planted_way_to_the_spec_is_refused_and_nothing_is_written(host, tmp_path, plant):
    outside = tmp_path / "outside"
    outside.mkdir()
    if plant == "group-writable":
        (host / "run").chmod(0o775)
    elif plant == "nobody's":
        (host / "run" / "cdi").mkdir()
        os.chown(host / "run" / "cdi", pwd.getpwnam("nobody").pw_uid, -1)
    else:  # an absolute link means the node's /, never this machine's
        os.symlink(str(outside), host / "run" / "cdi")
    if plant == "link-out":
        node_cdi.write(kit(host), SPEC)
        assert list(outside.iterdir()) == []
        assert (host / str(outside).lstrip("/") / "nvidia.yaml").read_bytes() == SPEC
        return
    with pytest.raises(toolkit.Refused):
        node_cdi.write(kit(host), SPEC)
    assert not (host / "run" / "cdi" / "nvidia.yaml").exists()


def test_the_spec_is_made_by_the_toolkits_own_copy_with_its_config(tmp_path):
    """generate() runs the python named with DIR/lib on sys.path and DIR's config.toml: here
    this machine's python, DIR a folder of the test's, the TEST FIXTURE fake driver."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from fixtures.fake_driver import build_fake_driver

    driver = build_fake_driver(tmp_path / "driver")
    d = tmp_path / "toolkit"
    (d / "lib").mkdir(parents=True)
    (d / "lib" / "nvdocker2").symlink_to(Path(nvdocker2.__file__).parent)
    config = d / toolkit.CONFIG
    config.parent.mkdir(parents=True)
    config.write_text(f'[nvidia-container-runtime]\ndriver-root = "{driver.root}"\n')
    t = toolkit.Toolkit(dir=str(d), host_root="/", python=sys.executable)
    text = node_cdi.generate(t).decode()
    assert f'path: "{d}/nvidia-container-runtime"' in text
    assert '- name: "1"' in text and f'hostPath: "{driver.root}/dev/nvidia1"' in text

    config.write_text('[nvidia-container-runtime]\ndriver-root = "/nonexistent"\n')
    with pytest.raises(toolkit.Refused) as e:
        node_cdi.generate(t)
    assert "\n" not in str(e.value) and str(e.value), e.value
