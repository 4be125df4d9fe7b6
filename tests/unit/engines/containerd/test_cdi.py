"""`install --engine containerd --cdi`, to the byte, on each release's config shapes: containerd
1.7 gets enable_cdi and cdi_spec_dirs in its CRI plugin's table, 2.x (CDI on by default) only
the runtime entry's container annotations, and uninstall gives back the bytes before."""

from __future__ import annotations

from pathlib import Path

import pytest
from .test_edit import DEBIAN_V2, KUBEADM_V2, ROOT, RT, V3

from nvdocker2.engines.base import Request
from nvdocker2.engines.containerd import ContainerdEngine, service
from nvdocker2.engines.containerd import document as D
from nvdocker2.engines.containerd import edit as E
from nvdocker2.errors import BadInput

PLUGIN = 'plugins."io.containerd.grpc.v1.cri"'
DROPIN = Path("/etc/containerd/conf.d/99-nvidia.toml")
REQ = Request("nvidia", RT, False, (RT,), {"cdi": True})
CDI_TABLE = (f"\n[{PLUGIN}]\n  enable_cdi = true\n"
             '  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]\n')
ANNOTATED = (f"\n[{PLUGIN}.containerd.runtimes.nvidia]\n"
             '  runtime_type = "io.containerd.runc.v2"\n'
             '  container_annotations = ["cdi.k8s.io/*"]\n'
             f"\n  [{PLUGIN}.containerd.runtimes.nvidia.options]\n"
             f'    BinaryName = "{RT}"\n')
ONLY_CONTAINERD = (b'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
                   b'  snapshotter = "overlayfs"\n')


def install(raw, major=1, cdi=E.ENABLE_CDI, journal=None, req=REQ):
    return E.plan_install(D.parse(ROOT, raw), [], None, major, req, journal or {}, None, cdi)


def files(plan):
    return {f.path: f.new for f in plan.files}


def uninstall(raw, journal, dropin=None):
    return E.plan_uninstall(D.parse(ROOT, raw), dropin, REQ, journal)


def keys(plan):
    return [(c.key, c.action) for c in plan.changes]


def test_1_7_sets_both_keys_under_the_cri_plugins_own_header_and_uninstall_takes_them_off():
    plan = install(KUBEADM_V2)
    text = files(plan)[ROOT].decode()
    header = f'[{PLUGIN}]\n  sandbox_image = "registry.k8s.io/pause:3.9"\n'
    assert header + '  enable_cdi = true\n  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]\n' \
        in text
    assert D.tomllib.loads(text)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"][
        "runtimes"]["nvidia"]["container_annotations"] == ["cdi.k8s.io/*"]
    assert keys(plan)[1:] == [(f"{PLUGIN}.enable_cdi", "added"),
                              (f"{PLUGIN}.cdi_spec_dirs", "added")]
    assert plan.expect["cdi"] is True
    assert plan.journal["runtimes"]["nvidia"]["previous_cdi"] == {
        "enable_cdi": {"present": False}, "cdi_spec_dirs": {"present": False}}
    back = uninstall(files(plan)[ROOT], plan.journal)
    assert files(back)[ROOT] == KUBEADM_V2
    assert (f"{PLUGIN}.enable_cdi", "removed") in keys(back)


def test_1_7_an_empty_indented_cri_header_gets_the_keys_one_step_in():
    plan = install(DEBIAN_V2)
    assert (f'  [{PLUGIN}]\n    enable_cdi = true\n'
            '    cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]\n'
            f"    [{PLUGIN}.cni]\n").encode() in files(plan)[ROOT]
    assert files(uninstall(files(plan)[ROOT], plan.journal))[ROOT] == DEBIAN_V2


@pytest.mark.parametrize("raw", [ONLY_CONTAINERD, None])
def test_1_7_without_the_cri_plugins_header_appends_it_after_the_runtime(raw):
    plan = install(raw)
    before = raw.decode() if raw else "version = 2\n"
    assert files(plan)[ROOT] == (before + ANNOTATED + CDI_TABLE).encode()
    assert plan.journal["runtimes"]["nvidia"]["appended"] == ANNOTATED + CDI_TABLE
    assert files(uninstall(files(plan)[ROOT], plan.journal))[ROOT] == raw


def test_1_7_uninstall_of_the_appended_cri_table_lists_both_keys_as_removed():
    plan = install(ONLY_CONTAINERD)
    back = uninstall(files(plan)[ROOT], plan.journal)
    assert files(back)[ROOT] == ONLY_CONTAINERD
    assert keys(back) == [(f"{PLUGIN}.containerd.runtimes.nvidia", "removed"),
                          (f"{PLUGIN}.enable_cdi", "removed"),
                          (f"{PLUGIN}.cdi_spec_dirs", "removed")]


def test_1_7_a_value_someone_set_is_recorded_and_put_back():
    raw = KUBEADM_V2.replace(b'pause:3.9"\n', b'pause:3.9"\n  enable_cdi = false\n')
    plan = install(raw)
    assert b"  enable_cdi = true\n" in files(plan)[ROOT]
    assert (f"{PLUGIN}.enable_cdi", "replaced") in keys(plan)
    back = uninstall(files(plan)[ROOT], plan.journal)
    assert files(back)[ROOT] == raw


def test_1_7_keys_already_on_are_left_alone_and_recorded_as_they_were():
    raw = KUBEADM_V2.replace(b'pause:3.9"\n', b'pause:3.9"\n  enable_cdi = true\n')
    plan = install(raw)
    assert (f"{PLUGIN}.enable_cdi", "added") not in keys(plan)
    assert [k for k, _ in keys(plan)][1:] == [f"{PLUGIN}.cdi_spec_dirs"]
    back = uninstall(files(plan)[ROOT], plan.journal)
    assert files(back)[ROOT] == raw  # enable_cdi = true was there before: it stays


@pytest.mark.parametrize("dirs", [b'["/srv/cdi"]', b"[]"])
def test_1_7_spec_dirs_someone_chose_are_kept_and_only_cdi_is_turned_on(dirs):
    raw = KUBEADM_V2.replace(b'pause:3.9"\n', b'pause:3.9"\n  cdi_spec_dirs = ' + dirs + b"\n")
    plan = install(raw)
    text = files(plan)[ROOT]
    assert b"  cdi_spec_dirs = " + dirs + b"\n  enable_cdi = true\n" in text
    assert text.count(b"cdi_spec_dirs") == 1
    assert keys(plan)[1:] == [(f"{PLUGIN}.enable_cdi", "added")]
    assert files(uninstall(text, plan.journal))[ROOT] == raw


def test_1_7_a_value_changed_after_install_stays_the_users():
    plan = install(KUBEADM_V2)
    edited = files(plan)[ROOT].replace(b"enable_cdi = true", b"enable_cdi = false")
    back = uninstall(edited, plan.journal)
    assert b"enable_cdi = false" in files(back)[ROOT]
    assert b"cdi_spec_dirs" not in files(back)[ROOT]


def test_install_without_cdi_writes_no_annotations_and_no_keys():
    plan = install(KUBEADM_V2, cdi=None, req=Request("nvidia", RT, False, (RT,)))
    assert b"cdi" not in files(plan)[ROOT]
    assert "cdi" not in plan.expect


def test_2_x_changes_only_the_runtime_entry_in_the_dropin():
    plan = install(V3, major=2, cdi=E.CDI_ON)
    got = files(plan)
    assert b"enable_cdi" not in got[ROOT] and b"enable_cdi" not in got[DROPIN]
    data = D.tomllib.loads(got[DROPIN].decode())
    assert data["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"][
        "nvidia"]["container_annotations"] == ["cdi.k8s.io/*"]
    own = D.parse(DROPIN, got[DROPIN])
    back = uninstall(got[ROOT], plan.journal, dropin=own)
    assert files(back) == {ROOT: V3, DROPIN: None}


def test_an_existing_runtime_gets_the_annotations_and_loses_them_again():
    raw = ONLY_CONTAINERD + (f"\n[{PLUGIN}.containerd.runtimes.nvidia]\n"
                             '  runtime_type = "io.containerd.runc.v2"\n'
                             f"  [{PLUGIN}.containerd.runtimes.nvidia.options]\n"
                             f'    BinaryName = "{RT}"\n').encode()
    plan = install(raw)
    data = D.tomllib.loads(files(plan)[ROOT].decode())
    assert data["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"][
        "container_annotations"] == ["cdi.k8s.io/*"]
    assert files(uninstall(files(plan)[ROOT], plan.journal))[ROOT] == raw


@pytest.mark.parametrize("release,refused", [((1, 6), "containerd 1.6 has no CDI"),
                                             (None, "containerd's version is unknown")])
def test_a_release_without_cdi_is_refused_with_its_version(tmp_path, release, refused):
    cfg = tmp_path / "config.toml"
    cfg.write_bytes(KUBEADM_V2)
    eng = ContainerdEngine(cfg, exe="", check=False)
    eng.release = release
    with pytest.raises(BadInput) as e:
        eng.plan_install(lambda p: p.read_bytes() if p.exists() else None, REQ, {})
    assert refused in e.value.message and e.value.exit_code == 2
    assert cfg.read_bytes() == KUBEADM_V2


def test_the_candidate_check_lets_the_cdi_keys_change_and_wants_cdi_on():
    def dump(cdi):
        return {"version": 2, "plugins": {"io.containerd.grpc.v1.cri": {
            "enable_cdi": cdi, "cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"],
            "containerd": {"runtimes": {"nvidia": {"options": {"BinaryName": RT}}}}}}}

    before = dump(False)
    before["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"] = {}
    keys_ = tuple(E.CDI_KEYS)
    assert service.compare_dumps(before, dump(True), "nvidia", RT, False, cdi=True,
                                 cdi_keys=keys_) == []
    assert service.compare_dumps(before, dump(False), "nvidia", RT, False, cdi=True,
                                 cdi_keys=keys_) == ["enable_cdi would not be on in the CRI plugin"]
    assert "plugins.io.containerd.grpc.v1.cri.enable_cdi would change" in service.compare_dumps(
        before, dump(True), "nvidia", RT, False)


@pytest.mark.parametrize("line,on", [
    ('msg="Start cri plugin with config {PluginConfig:{ContainerdConfig:{Snapshotter:overlayfs '
     "Runtimes:map[runc:{Type:io.containerd.runc.v2}] NoPivot:false} EnableCDI:true "
     'CDISpecDirs:[/etc/cdi /var/run/cdi]}"', True),
    ('msg="Start cri plugin with config {PluginConfig:{EnableCDI:false CDISpecDirs:[]}"', False),
    ('msg="starting cri plugin" config="{\\"containerd\\":{},\\"enableCDI\\":true}"', True),
    ('msg="Start cri plugin with config {PluginConfig:{ContainerdConfig:{}}}"', None),
])
def test_cdi_is_read_from_the_cri_plugins_start_line(line, on):
    assert service.cdi_from_log("level=info " + line) is on
    assert service.cdi_problem({"cdi": True}, on) == ([] if on else [
        "CDI is off" if on is False else "it does not say that CDI is on"])
