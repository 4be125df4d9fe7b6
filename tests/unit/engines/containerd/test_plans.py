"""What containerd's install and uninstall plans say, to the byte: the files written, the change
list printed, the journal entry kept for uninstall, and what the CRI check then expects
containerd to report (reference §11)."""

from __future__ import annotations

from pathlib import Path

import pytest
from .test_edit import DEBIAN_V2, KUBEADM_V2, ODD_CRLF, ROOT, RT, V1_NO_VERSION, V3

from nvdocker2.engines.base import Request, runtime_mismatches
from nvdocker2.engines.containerd import document as D
from nvdocker2.engines.containerd import edit as E

CRI2 = 'plugins."io.containerd.grpc.v1.cri".containerd'
CRI3 = 'plugins."io.containerd.cri.v1.runtime".containerd'
RUNC = "io.containerd.runc.v2"
DROPIN = Path("/etc/containerd/conf.d/99-nvidia.toml")
PATTERN = "/etc/containerd/conf.d/*.toml"
OURS = {"runtime_type": RUNC, "options": {"BinaryName": RT}}
# KUBEADM_V2's runc options, copied into ours
KUBEADM_OURS = {"runtime_type": RUNC,
                "options": {"SystemdCgroup": True, "NoNewKeyring": False, "BinaryName": RT}}
KUBEADM_TABLE = (
    '\n    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
    '      runtime_type = "io.containerd.runc.v2"\n'
    '\n      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
    "        SystemdCgroup = true\n        NoNewKeyring = false\n"
    '        BinaryName = "/usr/bin/nvidia-container-runtime"\n')
DEFAULT_NVIDIA = ('\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
                  '  default_runtime_name = "nvidia"\n')


def req(set_default=False, name="nvidia", path=RT):
    return Request(name, path, set_default, (RT,))


def install(raw, request, journal=None, major=1, dropin=None, implicit=None):
    return E.plan_install(D.parse(ROOT, raw), [], dropin, major, request, journal or {},
                          implicit)


def uninstall(raw, request, journal, dropin=None):
    return E.plan_uninstall(D.parse(ROOT, raw), dropin, request, journal)


def new(plan, path=ROOT):
    return {f.path: f.new for f in plan.files}[path]


def printed(plan):
    """The change list as `--json` prints it."""
    return [c.to_json() for c in plan.changes]


def entry(plan, name="nvidia"):
    assert plan.journal["config"] == str(ROOT)
    return plan.journal["runtimes"][name]


def check(expect, runtimes, default="runc"):
    """What the CRI check says of containerd reporting `runtimes` (name -> binary)."""
    return runtime_mismatches(expect, runtimes, default)


# --- install in place (containerd 1.x) ------------------------------------------------------

def test_install_appends_our_table_indented_like_the_runtimes_and_records_the_bytes():
    plan = install(KUBEADM_V2, req())
    assert new(plan) == KUBEADM_V2 + KUBEADM_TABLE.encode()
    assert [f.path for f in plan.files] == [ROOT]
    assert printed(plan) == [{"key": f"{CRI2}.runtimes.nvidia", "action": "added",
                              "after": KUBEADM_OURS}]
    assert plan.journal == {"config": str(ROOT), "runtimes": {"nvidia": {
        "appended": KUBEADM_TABLE, "file_existed": True, "previous": {"present": False},
        "installed": RT, "set_default": False}}}
    assert plan.reason == "install runtime nvidia (containerd)" and plan.notes == ()
    # after the write containerd must run ours, whatever its default; put back, not run it
    assert check(plan.expect, {"runc": "", "nvidia": RT}, "anything") == []
    assert check(plan.expect, {"runc": "", "nvidia": "/other"}) == ['runtime "nvidia" is missing']
    assert check(plan.expect_old, {"runc": ""}, "anything") == []
    assert check(plan.expect_old, {"runc": "", "nvidia": RT}) == [
        'runtime "nvidia" is still there']


def test_install_as_default_changes_the_default_in_place_and_remembers_the_old_one():
    plan = install(KUBEADM_V2, req(set_default=True))
    assert new(plan) == KUBEADM_V2.replace(
        b'default_runtime_name = "runc"', b'default_runtime_name = "nvidia"') + \
        KUBEADM_TABLE.encode()
    assert printed(plan) == [
        {"key": f"{CRI2}.runtimes.nvidia", "action": "added", "after": KUBEADM_OURS},
        {"key": f"{CRI2}.default_runtime_name", "action": "replaced", "before": "runc",
         "after": "nvidia"}]
    assert entry(plan) == {"appended": KUBEADM_TABLE, "file_existed": True,
                           "previous": {"present": False},
                           "previous_default": {"present": True, "value": "runc"},
                           "installed": RT, "set_default": True}
    assert check(plan.expect, {"nvidia": RT}, "nvidia") == []
    assert check(plan.expect, {"nvidia": RT}, "runc") == ["the default runtime is runc"]
    assert check(plan.expect_old, {"runc": ""}, "runc") == []
    assert check(plan.expect_old, {"runc": ""}, "nvidia") == ["the default runtime is nvidia"]

    back = uninstall(new(plan), req(set_default=True), plan.journal)
    assert new(back) == KUBEADM_V2
    assert printed(back) == [
        {"key": f"{CRI2}.runtimes.nvidia", "action": "removed", "before": KUBEADM_OURS},
        {"key": f"{CRI2}.default_runtime_name", "action": "replaced", "before": "nvidia",
         "after": "runc"}]
    assert back.journal == {"config": str(ROOT), "runtimes": {}}
    assert back.reason == "uninstall runtime nvidia (containerd)"
    assert back.warnings == () and back.journal_before_write is False
    assert check(back.expect, {"runc": ""}, "anything") == []
    assert check(back.expect, {"nvidia": RT}) == ['runtime "nvidia" is still there']
    # put back after a failed uninstall: containerd need only come back
    assert check(back.expect_old, {}, "anything") == []
    assert check(back.expect_old, {"nvidia": RT}, "anything") == []


@pytest.mark.parametrize("raw,table", [
    # no final newline: one to end the last line, a blank line, then ours (no indent there)
    (V1_NO_VERSION,
     '\n\n[plugins.cri.containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n'
     '\n  [plugins.cri.containerd.runtimes.nvidia.options]\n    SystemdCgroup = true\n'
     '    BinaryName = "/usr/bin/nvidia-container-runtime"\n'),
    # an empty file: ours alone, no blank line before it
    (b"", '[plugins.cri.containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n'
     '\n  [plugins.cri.containerd.runtimes.nvidia.options]\n'
     '    BinaryName = "/usr/bin/nvidia-container-runtime"\n'),
    # CRLF stays CRLF
    (ODD_CRLF,
     '\r\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\r\n'
     '  runtime_type = "io.containerd.runc.v2"\r\n\r\n'
     '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\r\n'
     '    SystemdCgroup = true\r\n    BinaryName = "/usr/bin/nvidia-container-runtime"\r\n'),
], ids=["no-final-newline", "empty", "crlf"])
def test_the_appended_bytes_fit_the_files_end_and_newlines(raw, table):
    plan = install(raw, req())
    assert new(plan) == raw + table.encode()
    assert entry(plan)["appended"] == table
    assert uninstall(new(plan), req(), plan.journal).files[0].new == raw


def test_default_where_config_toml_has_no_containerd_table_is_a_table_of_its_own():
    """DEBIAN_V2 has the CRI plugin's header but not its `containerd` table's: the default
    goes into a new `[...containerd]` table after ours, unindented like ours."""
    table = ('\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
             '  runtime_type = "io.containerd.runc.v2"\n'
             '\n  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
             '    BinaryName = "/usr/bin/nvidia-container-runtime"\n')
    plan = install(DEBIAN_V2, req(set_default=True))
    assert new(plan) == DEBIAN_V2 + (table + DEFAULT_NVIDIA).encode()
    assert entry(plan)["appended"] == table + DEFAULT_NVIDIA
    assert entry(plan)["previous_default"] == {"present": False}
    assert printed(plan)[1] == {"key": f"{CRI2}.default_runtime_name", "action": "replaced",
                                "before": "runc", "after": "nvidia"}
    back = uninstall(new(plan), req(), plan.journal)
    assert new(back) == DEBIAN_V2
    assert printed(back) == [
        {"key": f"{CRI2}.runtimes.nvidia", "action": "removed", "before": OURS},
        {"key": f"{CRI2}.default_runtime_name", "action": "removed", "before": "nvidia"}]


def test_a_missing_config_toml_is_created_with_a_version_line_and_removed_again():
    plan = install(None, req(set_default=True))
    assert new(plan) == (
        'version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        '  runtime_type = "io.containerd.runc.v2"\n'
        '\n  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        '    BinaryName = "/usr/bin/nvidia-container-runtime"\n' + DEFAULT_NVIDIA).encode()
    assert [(f.path, f.old) for f in plan.files] == [(ROOT, None)]
    assert entry(plan)["file_existed"] is False
    back = uninstall(new(plan), req(), plan.journal)
    assert [(f.path, f.new) for f in back.files] == [(ROOT, None)]
    # a file that was there (empty) stays, empty
    plan = install(b"", req())
    assert entry(plan)["file_existed"] is True
    assert new(uninstall(new(plan), req(), plan.journal)) == b""


def test_the_default_goes_into_an_existing_containerd_table_without_a_default():
    raw = KUBEADM_V2.replace(b'    default_runtime_name = "runc"\n', b"")
    plan = install(raw, req(set_default=True))
    assert new(plan) == raw.replace(
        b'    snapshotter = "overlayfs"\n',
        b'    snapshotter = "overlayfs"\n    default_runtime_name = "nvidia"\n') + \
        KUBEADM_TABLE.encode()
    assert entry(plan)["previous_default"] == {"present": False}
    back = uninstall(new(plan), req(set_default=True), plan.journal)
    assert new(back) == raw
    assert printed(back)[-1] == {"key": f"{CRI2}.default_runtime_name", "action": "removed",
                                 "before": "nvidia"}


def test_a_second_install_prints_unchanged_and_keeps_what_the_first_recorded():
    first = install(KUBEADM_V2, req(set_default=True))
    again = install(new(first), req(), first.journal)
    assert printed(again) == [{"key": f"{CRI2}.runtimes.nvidia", "action": "unchanged",
                               "before": KUBEADM_OURS, "after": KUBEADM_OURS}]
    assert not again.changed and again.journal is None
    # a new runtime path: the journal keeps the first install's record of what was there
    moved = install(new(first), req(path="/opt/nvidia/runtime"), first.journal)
    rec = entry(moved)
    assert rec == dict(entry(first), installed="/opt/nvidia/runtime")
    assert printed(moved) == [{"key": f"{CRI2}.runtimes.nvidia", "action": "replaced",
                               "before": KUBEADM_OURS,
                               "after": dict(KUBEADM_OURS, options=dict(
                                   KUBEADM_OURS["options"], BinaryName="/opt/nvidia/runtime"))}]
    # the default set by the first install is still put back by the uninstall after both
    back = uninstall(new(moved), req(), moved.journal)
    assert new(back) == KUBEADM_V2


EXISTING = KUBEADM_V2 + (
    b'    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
    b'      runtime_type = "io.containerd.runc.v1"  # old toolkit\n'
    b'      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
    b'        BinaryName = "/usr/local/nvidia/runtime"\n')
OLD_NVIDIA = {"runtime_type": "io.containerd.runc.v1",
              "options": {"BinaryName": "/usr/local/nvidia/runtime"}}


def test_an_existing_runtime_is_changed_key_by_key_and_its_old_values_recorded():
    plan = install(EXISTING, req())
    # line by line (tomlkit re-indents the edited table's header): the comment stays, the
    # options runc has are added after the binary
    assert [ln.strip() for ln in new(plan).splitlines()] == [ln.strip() for ln in EXISTING.replace(
        b'runtime_type = "io.containerd.runc.v1"  # old toolkit\n',
        b'runtime_type = "io.containerd.runc.v2"  # old toolkit\n').replace(
        b'"/usr/local/nvidia/runtime"\n',
        b'"/usr/bin/nvidia-container-runtime"\n'
        b"        SystemdCgroup = true\n        NoNewKeyring = false\n").splitlines()]
    assert printed(plan) == [{"key": f"{CRI2}.runtimes.nvidia", "action": "replaced",
                              "before": OLD_NVIDIA, "after": KUBEADM_OURS}]
    assert entry(plan) == {"file_existed": True,
                           "previous": {"present": True, "value": OLD_NVIDIA},
                           "installed": RT, "set_default": False}
    # containerd had the runtime before: putting the file back does not demand it gone
    assert check(plan.expect_old, {"nvidia": "/usr/local/nvidia/runtime"}) == []

    back = uninstall(new(plan), req(), plan.journal)
    assert D.tomllib.loads(new(back).decode()) == D.tomllib.loads(EXISTING.decode())
    assert b"# old toolkit" in new(back)
    assert printed(back) == [{"key": f"{CRI2}.runtimes.nvidia", "action": "replaced",
                              "before": KUBEADM_OURS, "after": OLD_NVIDIA}]
    # the old runtime is back: containerd reporting it is what uninstall expects
    assert check(back.expect, {"nvidia": "/usr/local/nvidia/runtime"}) == []


def test_a_key_install_added_to_an_existing_runtime_goes_again():
    raw = KUBEADM_V2 + (
        b'    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        b'      BinaryName = "/usr/local/nvidia/runtime"\n')
    plan = install(raw, req())
    after = D.tomllib.loads(new(plan).decode())["plugins"]["io.containerd.grpc.v1.cri"][
        "containerd"]["runtimes"]["nvidia"]
    assert after["runtime_type"] == RUNC
    back = uninstall(new(plan), req(), plan.journal)
    assert D.tomllib.loads(new(back).decode()) == D.tomllib.loads(raw.decode())
    assert printed(back)[0]["after"] == {"options": {"BinaryName": "/usr/local/nvidia/runtime"}}


def test_an_existing_runtime_that_is_already_ours_only_gets_the_default():
    """The runtime is there as install would write it; only the default is new: a
    `[...containerd]` table of its own after the file's last line."""
    raw = (b'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
           b'  runtime_type = "io.containerd.runc.v2"\n'
           b'[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
           b'  BinaryName = "/usr/bin/nvidia-container-runtime"')
    plan = install(raw, req(set_default=True))
    assert new(plan) == raw + ("\n" + DEFAULT_NVIDIA).encode()
    assert printed(plan) == [
        {"key": f"{CRI2}.runtimes.nvidia", "action": "unchanged", "before": OURS,
         "after": OURS},
        {"key": f"{CRI2}.default_runtime_name", "action": "replaced", "before": "runc",
         "after": "nvidia"}]
    assert entry(plan)["appended"] == "\n" + DEFAULT_NVIDIA
    assert entry(plan)["previous"] == {"present": True, "value": OURS}
    back = uninstall(new(plan), req(), plan.journal)
    assert new(back) == raw
    # the runtime was there before: it stays, only the default goes, and containerd is
    # expected to run it still
    assert printed(back) == [{"key": f"{CRI2}.default_runtime_name", "action": "removed",
                              "before": "nvidia"}]
    assert check(back.expect, {"nvidia": RT}) == []


# --- drop-in (containerd 2.x) ---------------------------------------------------------------

V3_OURS = {"runtime_type": RUNC, "options": {"SystemdCgroup": True, "BinaryName": RT}}
V3_DROPIN = (E.MARK + 'version = 3\n\n[plugins."io.containerd.cri.v1.runtime".containerd]\n'
             'default_runtime_name = "nvidia"\n\n'
             '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]\n'
             'runtime_type = "io.containerd.runc.v2"\n\n'
             '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]\n'
             'SystemdCgroup = true\nBinaryName = "/usr/bin/nvidia-container-runtime"\n').encode()
IMPORT_LINE = f'imports = ["{PATTERN}"]\n'


def test_containerd_2_gets_a_dropin_and_the_import_line_and_uninstall_takes_both_off():
    plan = install(V3, req(set_default=True), major=2)
    assert [(f.path, f.old) for f in plan.files] == [(ROOT, V3), (DROPIN, None)]
    assert new(plan, DROPIN) == V3_DROPIN
    assert new(plan) == V3.replace(b"version = 3\n", b"version = 3\n" + IMPORT_LINE.encode())
    assert printed(plan) == [
        {"key": f"{CRI3}.runtimes.nvidia", "action": "added", "after": V3_OURS},
        {"key": f"{CRI3}.default_runtime_name", "action": "replaced", "before": "runc",
         "after": "nvidia"}]
    assert entry(plan) == {"import_line": IMPORT_LINE, "import_added": PATTERN,
                           "dropin": str(DROPIN), "dropin_existed": False, "file_existed": True,
                           "previous": {"present": False},
                           "previous_default": {"present": True, "value": "runc"},
                           "installed": RT, "set_default": True}
    own = D.parse(DROPIN, V3_DROPIN)
    again = install(new(plan), req(set_default=True), plan.journal, major=2, dropin=own)
    assert not again.changed and again.journal is None
    assert [c["action"] for c in printed(again)] == ["unchanged", "unchanged"]
    # a new runtime path: our drop-in's runtime is what it replaces, and what containerd is
    # to run again if the new file is put back
    moved = install(new(plan), req(path="/opt/rt"), plan.journal, major=2, dropin=own)
    assert printed(moved)[0] == {"key": f"{CRI3}.runtimes.nvidia", "action": "replaced",
                                 "before": V3_OURS, "after": dict(V3_OURS, options=dict(
                                     V3_OURS["options"], BinaryName="/opt/rt"))}
    assert check(moved.expect_old, {"nvidia": RT}) == []
    assert entry(moved)["previous"] == {"present": False}

    back = uninstall(new(plan), req(set_default=True), plan.journal, dropin=own)
    assert [(f.path, f.new) for f in back.files] == [(ROOT, V3), (DROPIN, None)]
    assert printed(back) == [
        {"key": str(DROPIN), "action": "removed", "before": "drop-in"},
        {"key": "imports", "action": "removed", "before": PATTERN}]
    assert back.journal == {"config": str(ROOT), "runtimes": {}}


def test_a_dropin_already_imported_is_rewritten_and_the_imports_stay():
    raw = b'version = 3\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    old = D.parse(DROPIN, E.MARK.encode() + b"version = 3\n")
    plan = install(raw, req(), major=2, dropin=old)
    assert [(f.path, f.old, f.new) for f in plan.files][0] == (ROOT, raw, raw)
    assert plan.files[1].old == old.raw
    assert entry(plan) == {"dropin": str(DROPIN), "dropin_existed": True, "file_existed": True,
                           "previous": {"present": False}, "installed": RT,
                           "set_default": False}
    back = uninstall(raw, req(), plan.journal, dropin=D.parse(DROPIN, new(plan, DROPIN)))
    assert [(f.path, f.new) for f in back.files] == [(ROOT, raw), (DROPIN, None)]
    assert printed(back) == [{"key": str(DROPIN), "action": "removed", "before": "drop-in"}]


def test_the_import_is_appended_to_a_list_and_taken_out_of_it_again():
    raw = b'version = 3\nimports = ["/etc/containerd/x.toml"]  # site\n'
    plan = install(raw, req(), major=2)
    assert new(plan) == (b'version = 3\nimports = ["/etc/containerd/x.toml", "'
                         + PATTERN.encode() + b'"]  # site\n')
    assert entry(plan)["import_line"] is None and entry(plan)["import_added"] == PATTERN
    back = uninstall(new(plan), req(), plan.journal, dropin=D.parse(DROPIN, new(plan, DROPIN)))
    assert new(back) == raw
    assert printed(back)[-1] == {"key": "imports", "action": "removed", "before": PATTERN}


def test_the_import_stays_while_another_runtime_uses_the_dropin():
    first = install(V3, req(), major=2)
    both = dict(first.journal, runtimes=dict(first.journal["runtimes"], other={
        "dropin": str(DROPIN), "installed": "/x"}))
    back = uninstall(new(first), req(), both, dropin=D.parse(DROPIN, new(first, DROPIN)))
    assert new(back) == new(first)
    assert back.journal == {"config": str(ROOT), "runtimes": {"other": both["runtimes"]["other"]}}
    # one that records no drop-in does not keep it
    alone = dict(both, runtimes=dict(both["runtimes"], other={"installed": "/x"}))
    assert new(uninstall(new(first), req(), alone, dropin=None)) == V3


def test_an_import_line_someone_moved_is_still_taken_out():
    first = install(V3, req(), major=2)
    moved = V3.replace(b"version = 3\n", b"version = 3\n" + IMPORT_LINE.replace(
        "imports = ", "imports=").encode())
    back = uninstall(moved, req(), first.journal)
    assert new(back) == b"version = 3\nimports=[]\n" + V3[len(b"version = 3\n"):]
    # an import someone took out already is left as it is
    assert not uninstall(V3, req(), first.journal).files[0].changed


@pytest.mark.parametrize("own,journaled,removed", [
    (True, False, True), (False, True, True), (False, False, False)])
def test_uninstall_removes_a_dropin_that_is_ours_or_recorded_and_warns_of_another(
        own, journaled, removed):
    body = b'version = 3\n'
    dropin = D.parse(DROPIN, (E.MARK.encode() if own else b"# the site's\n") + body)
    journal = {"config": str(ROOT), "runtimes": {"nvidia": {"dropin": str(DROPIN)}}} \
        if journaled else {}
    back = uninstall(b"version = 3\n", req(), journal, dropin=dropin)
    if removed:
        assert [(f.path, f.new) for f in back.files][1] == (DROPIN, None)
        assert printed(back) == [{"key": str(DROPIN), "action": "removed", "before": "drop-in"}]
        assert back.warnings == ()
    else:
        assert [f.path for f in back.files] == [ROOT] and back.changes == ()
        assert back.warnings == (f"{DROPIN} was not written by nvdocker2: left in place",)
        assert back.journal is None


# --- what install reads from the file ---------------------------------------------------------

def test_an_empty_default_is_containerds_runc():
    raw = KUBEADM_V2.replace(b'default_runtime_name = "runc"', b'default_runtime_name = ""')
    plan = install(raw, req(set_default=True))
    assert printed(plan)[1] == {"key": f"{CRI2}.default_runtime_name", "action": "replaced",
                                "before": "runc", "after": "nvidia"}
    assert check(plan.expect_old, {"runc": ""}, "runc") == []


def test_a_runtime_named_runc_is_written_once_without_the_builtin_beside_it():
    plan = install(DEBIAN_V2, req(name="runc"), implicit={"runtime_type": RUNC})
    assert new(plan) == DEBIAN_V2 + (
        b'\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
        b'  runtime_type = "io.containerd.runc.v2"\n'
        b'\n  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
        b'    BinaryName = "/usr/bin/nvidia-container-runtime"\n')
    assert plan.notes == () and [c["key"] for c in printed(plan)] == [f"{CRI2}.runtimes.runc"]
    assert "implicit_default" not in entry(plan, "runc")


def test_a_second_install_as_default_prints_both_unchanged():
    first = install(KUBEADM_V2, req(set_default=True))
    again = install(new(first), req(set_default=True), first.journal)
    assert [(c["key"], c["action"]) for c in printed(again)] == [
        (f"{CRI2}.runtimes.nvidia", "unchanged"), (f"{CRI2}.default_runtime_name", "unchanged")]


def test_options_of_an_existing_runtime_that_install_does_not_set_stay():
    raw = EXISTING.replace(b'        BinaryName = "/usr/local/nvidia/runtime"\n',
                           b'        BinaryName = "/usr/local/nvidia/runtime"\n'
                           b'        Root = "/run/nvidia-runc"\n')
    plan = install(raw, req())
    rt = D.tomllib.loads(new(plan).decode())["plugins"]["io.containerd.grpc.v1.cri"][
        "containerd"]["runtimes"]["nvidia"]
    assert rt["options"] == dict(KUBEADM_OURS["options"], Root="/run/nvidia-runc")
    # installed once, the runtime has all it needs: a second install writes nothing
    again = install(new(plan), req(), plan.journal)
    assert not again.changed and again.journal is None


def test_a_default_written_as_a_dotted_key_is_changed_where_it_is():
    raw = (b'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n'
           b'  containerd.default_runtime_name = "runc"\n')
    plan = install(raw, req(set_default=True))
    text = new(plan)
    assert text.count(b"default_runtime_name") == 1
    assert D.tomllib.loads(text.decode())["plugins"]["io.containerd.grpc.v1.cri"][
        "containerd"]["default_runtime_name"] == "nvidia"
    assert new(uninstall(text, req(), plan.journal)) == raw


def test_a_new_default_table_is_indented_one_step_less_than_the_runtimes():
    raw = (b'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n'
           b'    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
           b'      runtime_type = "io.containerd.runc.v2"\n')
    plan = install(raw, req(set_default=True))
    assert new(plan) == raw + (
        b'\n    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        b'      runtime_type = "io.containerd.runc.v2"\n'
        b'\n      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        b'        BinaryName = "/usr/bin/nvidia-container-runtime"\n'
        b'\n  [plugins."io.containerd.grpc.v1.cri".containerd]\n'
        b'    default_runtime_name = "nvidia"\n')


@pytest.mark.parametrize("end", [b"", b"\n"])
def test_a_default_alone_is_appended_after_the_files_last_line(end):
    raw = (b'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
           b'  runtime_type = "io.containerd.runc.v2"\n'
           b'[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
           b'  BinaryName = "/usr/bin/nvidia-container-runtime"') + end
    plan = install(raw, req(set_default=True))
    assert new(plan) == raw + (b"" if end else b"\n") + DEFAULT_NVIDIA.encode()
    assert new(uninstall(new(plan), req(), plan.journal)) == raw


def test_install_then_install_as_default_then_uninstall_gives_the_original_bytes():
    first = install(DEBIAN_V2, req())
    second = install(new(first), req(set_default=True), first.journal)
    assert new(second) == new(first) + DEFAULT_NVIDIA.encode()
    assert entry(second)["appended"] == entry(first)["appended"] + DEFAULT_NVIDIA
    back = uninstall(new(second), req(), second.journal)
    assert new(back) == DEBIAN_V2
    # a table someone added after the first install's: the second's default is a block of
    # its own, and uninstall still finds and removes the first's
    later = b'\n[plugins."io.containerd.monitor.v1.cgroups"]\n  no_prometheus = true\n'
    second = install(new(first) + later, req(set_default=True), first.journal)
    assert entry(second)["appended"] == entry(first)["appended"]
    back = uninstall(new(second), req(), second.journal)
    assert b"nvidia" not in new(back)


# --- uninstall without install's record, or after hand edits ---------------------------------

def test_uninstall_without_a_record_removes_a_runtime_that_runs_this_package():
    installed = KUBEADM_V2 + KUBEADM_TABLE.encode()
    back = uninstall(installed, req(), {})
    assert new(back) == KUBEADM_V2
    assert printed(back) == [{"key": f"{CRI2}.runtimes.nvidia", "action": "removed",
                              "before": KUBEADM_OURS}]
    assert back.journal is not None and back.journal["runtimes"] == {}
    assert check(back.expect, {"nvidia": RT}) == ['runtime "nvidia" is still there']


def test_uninstall_leaves_another_packages_runtime_and_its_default():
    raw = EXISTING.replace(b'default_runtime_name = "runc"', b'default_runtime_name = "nvidia"')
    back = uninstall(raw, req(), {})
    assert not back.changed and back.changes == () and back.journal is None
    assert back.warnings == (
        f'{ROOT}: runtime "nvidia" points at \'/usr/local/nvidia/runtime\', not at this '
        "package's runtime, and no install was recorded: left in place",)
    assert check(back.expect, {"nvidia": "/usr/local/nvidia/runtime"}, "nvidia") == []


def test_a_default_that_named_the_old_runtime_stays_with_it():
    """The site ran another package's `nvidia` as its default; install replaced it, uninstall
    puts the old runtime back and the default with it."""
    raw = EXISTING.replace(b'default_runtime_name = "runc"', b'default_runtime_name = "nvidia"')
    plan = install(raw, req(set_default=True))
    assert entry(plan)["previous_default"] == {"present": True, "value": "nvidia"}
    assert printed(plan)[1]["action"] == "unchanged"
    back = uninstall(new(plan), req(set_default=True), plan.journal)
    assert D.tomllib.loads(new(back).decode()) == D.tomllib.loads(raw.decode())
    assert [c["key"] for c in printed(back)] == [f"{CRI2}.runtimes.nvidia"]


def test_a_default_naming_our_runtime_goes_with_it_when_install_recorded_none():
    raw = KUBEADM_V2.replace(b'default_runtime_name = "runc"', b'default_runtime_name = "nvidia"')
    back = uninstall(raw + KUBEADM_TABLE.encode(), req(), {})
    assert new(back) == raw.replace(b'    default_runtime_name = "nvidia"\n', b"")
    assert printed(back)[-1] == {"key": f"{CRI2}.default_runtime_name", "action": "removed",
                                 "before": "nvidia"}
    # recorded as nvidia (it named a runtime install then replaced): it goes too
    journal = {"config": str(ROOT), "runtimes": {"nvidia": {
        "previous": {"present": False}, "set_default": True,
        "previous_default": {"present": True, "value": "nvidia"}}}}
    back = uninstall(raw + KUBEADM_TABLE.encode(), req(), journal)
    assert new(back) == raw.replace(b'    default_runtime_name = "nvidia"\n', b"")


def test_a_damaged_record_of_the_previous_runtime_removes_ours():
    journal = {"config": str(ROOT), "runtimes": {"nvidia": {
        "previous": {"present": True, "value": "not a table"}}}}
    edited = KUBEADM_V2 + KUBEADM_TABLE.encode() + b"# edited\n"
    back = uninstall(edited, req(), journal)
    assert new(back) == KUBEADM_V2 + b"# edited\n"
    assert printed(back)[0]["action"] == "removed"


def test_uninstall_with_nothing_to_do_keeps_the_journal_unless_it_holds_an_entry():
    assert uninstall(KUBEADM_V2, req(), {}).journal is None
    stale = {"config": str(ROOT), "runtimes": {"nvidia": {"installed": RT}, "x": {}}}
    back = uninstall(KUBEADM_V2, req(), stale)
    assert not back.changed and back.journal == {"config": str(ROOT), "runtimes": {"x": {}}}


def test_install_keeps_the_other_runtimes_entries_in_the_journal():
    journal = {"config": str(ROOT), "runtimes": {"other": {"installed": "/x"}}}
    plan = install(KUBEADM_V2, req(), journal)
    assert set(plan.journal["runtimes"]) == {"other", "nvidia"}
    assert plan.journal["runtimes"]["other"] == {"installed": "/x"}


def test_an_older_nvdocker2s_containerd_1_dropin_goes_with_a_note_and_its_record():
    raw = b'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    legacy = D.parse(DROPIN, (E.MARK + 'version = 2\n').encode())
    journal = {"config": str(ROOT), "runtimes": {"nvidia": {
        "dropin": str(DROPIN), "dropin_existed": False, "dropin_dir": "/etc/containerd/conf.d",
        "file_existed": True, "previous": {"present": False}, "installed": RT,
        "set_default": False}}}
    plan = install(raw, req(), journal, dropin=legacy)
    assert [(f.path, f.new is None) for f in plan.files] == [(ROOT, False), (DROPIN, True)]
    assert printed(plan)[-1] == {"key": str(DROPIN), "action": "removed", "before": "drop-in"}
    assert plan.notes == (
        f"removed {DROPIN}, written by an older nvdocker2: containerd 1.x took its copy of the "
        f"CRI section instead of {ROOT}'s; the runtime is now in {ROOT}",)
    rec = entry(plan)
    assert not {"dropin", "dropin_existed", "dropin_dir"} & set(rec)
    assert rec["previous"] == {"present": False} and rec["appended"]


def test_uninstall_lists_the_builtin_runc_it_takes_off_with_ours():
    implicit = {"runtime_type": RUNC}
    plan = install(DEBIAN_V2, req(), implicit=implicit)
    assert entry(plan)["implicit_default"] == implicit
    runc = {"key": f"{CRI2}.runtimes.runc", "action": "removed", "before": implicit}
    ours = {"key": f"{CRI2}.runtimes.nvidia", "action": "removed", "before": OURS}
    back = uninstall(new(plan), req(), plan.journal)
    assert new(back) == DEBIAN_V2 and printed(back) == [ours, runc]
    # below a table added since: both tables are found and dropped one by one
    later = b'\n[plugins."io.containerd.monitor.v1.cgroups"]\n  no_prometheus = true\n'
    back = uninstall(new(plan) + later, req(), plan.journal)
    assert new(back) == DEBIAN_V2 + later and printed(back) == [ours, runc]
    # a runtime someone added since keeps runc
    other = (b'\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]\n'
             b'  runtime_type = "io.containerd.kata.v2"\n')
    back = uninstall(new(plan) + other, req(), plan.journal)
    assert printed(back) == [ours]
    assert D.tomllib.loads(new(back).decode())["plugins"]["io.containerd.grpc.v1.cri"][
        "containerd"]["runtimes"] == {"runc": implicit, "kata": {"runtime_type":
                                                                   "io.containerd.kata.v2"}}


def test_only_the_import_line_install_added_goes():
    first = install(V3, req(), major=2)
    # another plugin's table with a key spelled like that line, below it
    other = ('[plugins."example.plugin"]\n  ' + IMPORT_LINE).encode()
    back = uninstall(new(first) + other, req(), first.journal)
    assert new(back) == V3 + other


def test_a_created_config_toml_that_holds_only_our_runtime_is_removed():
    """Created by install, rewritten by hand in the version 1 layout with our runtime alone:
    nothing is left once it goes, and the file was not there before."""
    plan = install(None, req())
    alone = (b'[plugins.cri.containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n'
             b'[plugins.cri.containerd.runtimes.nvidia.options]\n  BinaryName = "' + RT.encode()
             + b'"\n')
    back = uninstall(alone, req(), plan.journal)
    assert [(f.path, f.new) for f in back.files] == [(ROOT, None)]


def test_containerd_2_uninstall_leaves_config_tomls_own_runtime_byte_for_byte():
    """On containerd 2 install writes only the drop-in, which overrides the runtime
    config.toml has; uninstall removes the drop-in and the import, and config.toml's runtime
    is what containerd runs again."""
    plan = install(EXISTING, req(), major=2)
    assert printed(plan)[0]["before"] == OLD_NVIDIA
    back = uninstall(new(plan), req(), plan.journal, dropin=D.parse(DROPIN, new(plan, DROPIN)))
    assert [(f.path, f.new) for f in back.files] == [(ROOT, EXISTING), (DROPIN, None)]
    assert [c["key"] for c in printed(back)] == [str(DROPIN), "imports"]
    assert check(back.expect, {"nvidia": "/usr/local/nvidia/runtime"}) == []


def test_the_candidate_check_of_an_uninstall_that_puts_a_runtime_back():
    """containerd's verdict on the files an uninstall writes: where the runtime goes, it must
    be gone; where uninstall puts another package's back (or leaves it), it may stay with
    its own binary and the default may change, but nothing else may."""
    from nvdocker2.engines.containerd import service

    def dump(nvidia, default="nvidia", snapshotter="overlayfs"):
        ctd = {"snapshotter": snapshotter, "default_runtime_name": default,
               "runtimes": {"runc": {"runtime_type": RUNC}, "nvidia": nvidia}}
        return {"version": 2, "plugins": {"io.containerd.grpc.v1.cri": {"containerd": ctd}}}

    ours, old = dump(KUBEADM_OURS), dump(OLD_NVIDIA, default="runc")
    assert service.compare_dumps(ours, old, "nvidia", RT, False, None) == []
    assert service.compare_dumps(ours, old, "nvidia", RT, False, True) == [
        'the runtime "nvidia" would still be configured']
    assert service.compare_dumps(ours, dump(OLD_NVIDIA, snapshotter="native"), "nvidia", RT,
                                 False, None) == [
        "plugins.io.containerd.grpc.v1.cri.containerd.snapshotter would change"]
    # the engine asks for that where the plan keeps the runtime
    from nvdocker2.engines.containerd import ContainerdEngine

    class Quiet(ContainerdEngine):
        def __init__(self, config):
            super().__init__(config, exe="", check=False)

    plan = install(EXISTING, req())
    kept = Quiet(ROOT).plan_uninstall({ROOT: new(plan)}.get, req(), plan.journal)
    assert kept.check == (req(), None)
    gone = Quiet(ROOT).plan_uninstall({ROOT: KUBEADM_V2 + KUBEADM_TABLE.encode()}.get, req(), {})
    assert gone.check == (req(), True)
