"""Pure edits of containerd's config.toml, table-driven over real-world files (reference §11)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nvdocker2.engines.base import Request
from nvdocker2.engines.containerd import document as D
from nvdocker2.engines.containerd import edit as E
from nvdocker2.errors import BadInput

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path("/etc/containerd/config.toml")
RT = "/usr/bin/nvidia-container-runtime"

DEBIAN_V2 = b"""version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"""

KUBEADM_V2 = b"""# managed by hand, do not let tools rewrite this
version = 2
root = "/var/lib/containerd"   # data
oom_score = -999

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
        NoNewKeyring = false
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
"""

V1_NO_VERSION = b"""# containerd 1.x, config version 1 (no version line)
[plugins.cri]
  stream_server_address = "127.0.0.1"
[plugins.cri.containerd]
\tsnapshotter = "overlayfs"
[plugins.cri.containerd.runtimes.runc]
\truntime_type = "io.containerd.runc.v2"
[plugins.cri.containerd.runtimes.runc.options]
\tSystemdCgroup = true"""  # tabs, no final newline

ODD_CRLF = (
    b"version=2\r\n#comment\r\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\r\n"
    b"        runtime_type   =   \"io.containerd.runc.v2\"\r\n"
    b"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\r\n"
    b"   SystemdCgroup=true   # keep\r\n   BinaryName = \"/usr/sbin/runc\"\r\n"
)

V3 = b"""version = 3
root = "/var/lib/containerd"

[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'runc'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = true
"""

V3_IMPORTS = b"""version = 3
imports = ["/etc/containerd/other.toml"]  # site policy
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = false
"""

V2_IMPORTS_DIR = b"""version = 2
imports = ["/etc/containerd/conf.d/*.toml"]

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true
"""


def _plan(raw, req, journal=None, major=1, imported=(), dropin=None, path=ROOT):
    root = D.parse(path, raw)
    return E.plan_install(root, list(imported), dropin, major, req, journal or {})


def _files(plan):
    return {f.path: f for f in plan.files}


def _effective(root_bytes, dropin_bytes, major):
    root = D.parse(ROOT, root_bytes)
    imported = [D.parse(Path("/x/99-nvidia.toml"), dropin_bytes)] if dropin_bytes else []
    return D.merged(root, imported, (major or 0) >= 2 or root.version == 3)


CASES = [
    # name, bytes, containerd major, layout ("in place" or the drop-in path)
    ("debian-12-default", DEBIAN_V2, 1, None),
    ("kubeadm-v2", KUBEADM_V2, 1, None),
    ("v1-tabs-no-final-newline", V1_NO_VERSION, 1, None),
    ("odd-indent-crlf", ODD_CRLF, 1, None),
    ("v3-containerd-2", V3, 2, Path("/etc/containerd/conf.d/99-nvidia.toml")),
    ("v3-imports-file", V3_IMPORTS, 2, Path("/etc/containerd/conf.d/99-nvidia.toml")),
    ("v2-on-containerd-2", KUBEADM_V2, 2, Path("/etc/containerd/conf.d/99-nvidia.toml")),
    # containerd 1.x would take an imported CRI section instead of config.toml's: in place.
    ("v2-imports-dir", V2_IMPORTS_DIR, 1, None),
    ("v2-imports-dir-on-containerd-2", V2_IMPORTS_DIR, 2,
     Path("/etc/containerd/conf.d/99-nvidia.toml")),
]


@pytest.mark.parametrize("name,raw,major,dropin", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("set_default", [False, True])
def test_install_then_uninstall_gives_the_original_bytes(name, raw, major, dropin, set_default):
    req = Request("nvidia", RT, set_default, (RT,))
    plan = _plan(raw, req, major=major)
    files = _files(plan)
    root_new = files[ROOT].new
    if dropin is None:
        assert set(files) == {ROOT}
        # Everything that was there stays byte for byte; the runtime is appended.
        assert root_new.startswith(raw) or set_default
        dropin_new = None
    else:
        assert files[dropin].old is None and files[dropin].new.startswith(E.MARK.encode())
        dropin_new = files[dropin].new
    eff = _effective(root_new, dropin_new, major)
    cri = D.parse(ROOT, root_new).cri()
    rt = E._get_in(eff, cri + ("runtimes", "nvidia"))
    assert rt["runtime_type"] == "io.containerd.runc.v2"
    assert rt["options"]["BinaryName"] == RT
    runc = E._get_in(eff, cri + ("runtimes", "runc", "options"))
    if isinstance(runc, dict) and "SystemdCgroup" in runc:
        assert rt["options"]["SystemdCgroup"] == runc["SystemdCgroup"]
    before = _effective(raw, None, major)
    for k in ("runtimes",):
        assert {n: v for n, v in E._get_in(eff, cri + (k,)).items() if n != "nvidia"} == (
            E._get_in(before, cri + (k,)) or {})
    if set_default:
        assert E.default_name(eff, cri) == "nvidia"

    # A second install changes nothing.
    own = D.parse(dropin, dropin_new) if dropin_new else None
    again = _plan(root_new, req, plan.journal, major, dropin=own)
    assert not again.changed

    # Uninstall from the journal gives back the original bytes and removes the drop-in.
    back = E.plan_uninstall(D.parse(ROOT, root_new), own, req, plan.journal)
    bf = _files(back)
    assert bf[ROOT].new == raw
    if dropin is not None:
        assert bf[dropin].new is None
    assert back.journal == {"config": str(ROOT), "runtimes": {}}


def test_containerd_2_dropin_holds_only_the_runtime_and_the_import_is_added_once():
    req = Request("nvidia", RT)
    plan = _plan(V3, req, major=2)
    f = _files(plan)
    drop = tomllib.loads(f[Path("/etc/containerd/conf.d/99-nvidia.toml")].new.decode())
    assert list(drop["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]) == ["runtimes"]
    new_root = f[ROOT].new.decode()
    assert new_root == V3.decode().replace(
        "version = 3\n", 'version = 3\nimports = ["/etc/containerd/conf.d/*.toml"]\n', 1)
    assert tomllib.loads(new_root)["imports"] == ["/etc/containerd/conf.d/*.toml"]


def test_existing_runtime_is_updated_in_place_and_uninstall_puts_it_back():
    raw = KUBEADM_V2 + (b'    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
                        b'      runtime_type = "io.containerd.runc.v2"  # old toolkit\n'
                        b'      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia'
                        b'.options]\n        BinaryName = "/usr/local/nvidia/runtime"\n')
    req = Request("nvidia", RT, False, (RT,))
    plan = _plan(raw, req)
    new = _files(plan)[ROOT].new
    data = tomllib.loads(new.decode())
    rt = data["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"]
    assert rt["options"]["BinaryName"] == RT and rt["options"]["SystemdCgroup"] is True
    assert b"# old toolkit" in new and new.startswith(KUBEADM_V2)
    back = E.plan_uninstall(D.parse(ROOT, new), None, req, plan.journal)
    old = tomllib.loads(raw.decode())
    assert tomllib.loads(_files(back)[ROOT].new.decode()) == old


def test_a_runtime_type_that_is_already_ours_keeps_its_line_to_the_byte():
    # Only the BinaryName differs: the runtime_type line, in single quotes, is not rewritten
    # (tomlkit would give it double quotes, and uninstall, seeing the same value, would not
    # put them back).
    line = b"  runtime_type = 'io.containerd.runc.v2'\n"
    raw = (b'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
           + line + b'  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
           b'    BinaryName = "/usr/local/nvidia/runtime"\n')
    req = Request("nvidia", RT, False, (RT,))
    plan = _plan(raw, req)
    new = _files(plan)[ROOT].new
    assert line in new and new.count(b"runtime_type") == 1
    assert tomllib.loads(new.decode())["plugins"]["io.containerd.grpc.v1.cri"]["containerd"][
        "runtimes"]["nvidia"]["options"]["BinaryName"] == RT
    back = _files(E.plan_uninstall(D.parse(ROOT, new), None, req, plan.journal))[ROOT].new
    assert line in back and tomllib.loads(back.decode()) == tomllib.loads(raw.decode())


def test_uninstall_without_journal_removes_only_our_runtime():
    req = Request("nvidia", RT, False, (RT,))
    plan = _plan(KUBEADM_V2, req)
    new = _files(plan)[ROOT].new
    back = E.plan_uninstall(D.parse(ROOT, new), None, req, {})
    assert _files(back)[ROOT].new == KUBEADM_V2
    other = Request("nvidia", RT, False, ("/elsewhere",))
    kept = E.plan_uninstall(D.parse(ROOT, new), None, other, {})
    assert not kept.changed and "left in place" in kept.warnings[0]


def test_missing_file_is_created_and_uninstall_removes_it():
    req = Request("nvidia", RT)
    plan = _plan(None, req)
    new = _files(plan)[ROOT].new
    rt = tomllib.loads(new.decode())["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert rt["runtimes"]["nvidia"]["options"] == {"BinaryName": RT}
    back = E.plan_uninstall(D.parse(ROOT, new), None, req, plan.journal)
    assert _files(back)[ROOT].new is None


@pytest.mark.parametrize("path,raw", [
    (Path("/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl"),
     b'{{ template "base" . }}\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'),
    (ROOT, b'version = 2\n{{- if .NodeConfig.AgentConfig.Snapshotter }}\nx = 1\n{{ end }}\n'),
])
def test_templated_configs_are_refused_with_a_hint(path, raw):
    with pytest.raises(BadInput) as e:
        D.parse(path, raw)
    assert "template" in e.value.message and "k3s" in e.value.hint


def test_config_next_to_a_k3s_template_is_refused(tmp_path):
    (tmp_path / "config.toml.tmpl").write_text("{{ template \"base\" . }}\n")
    with pytest.raises(BadInput) as e:
        D.parse(tmp_path / "config.toml", DEBIAN_V2)
    assert "generated from" in e.value.message


RUNC = "io.containerd.runc.v2"


@pytest.mark.parametrize("implicit", [{"runtime_type": RUNC},  # containerd 1.6
                                      {"runtime_type": RUNC, "sandbox_mode": "podsandbox"}])
def test_builtin_runc_is_spelled_out_where_a_runtimes_table_would_drop_it(implicit):
    """Debian 12's config.toml names no runtime; on containerd ≤ 1.7 a runtimes table in the
    file replaces the built-in one, so install writes runc (as containerd showed it) beside
    nvidia, and uninstall takes both off again."""
    root = D.parse(ROOT, DEBIAN_V2)
    assert E.implicit_default(root, [], 1) and not E.implicit_default(root, [], 2)
    req = Request("nvidia", RT)
    plan = E.plan_install(root, [], None, 1, req, {}, implicit)
    new = _files(plan)[ROOT].new
    assert new.startswith(DEBIAN_V2)
    rts = tomllib.loads(new.decode())["plugins"]["io.containerd.grpc.v1.cri"]["containerd"][
        "runtimes"]
    assert list(rts) == ["runc", "nvidia"] and rts["runc"] == implicit
    # what a person reads says so: the runc table is a change of its own, with a note why
    assert [(c.key.rsplit(".", 1)[-1], c.action, c.after) for c in plan.changes][0] == (
        "runc", "added", implicit)
    assert any("built-in runc" in n for n in plan.notes)
    back = E.plan_uninstall(D.parse(ROOT, new), None, req, plan.journal)
    assert _files(back)[ROOT].new == DEBIAN_V2
    again = E.plan_install(D.parse(ROOT, new), [], None, 1, req, plan.journal, None)
    assert not again.changed and not again.notes


def test_containerd_1_with_an_imported_directory_gets_the_runtime_in_config_toml():
    """containerd 1.x takes an imported CRI section whole: a drop-in would have to copy
    config.toml's (its registry passwords too) and would hide every later edit of it. The
    runtime, and the built-in runc beside it, go into config.toml; the bytes before stay."""
    raw = (b'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
           b'[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.9"\n'
           b'[plugins."io.containerd.grpc.v1.cri".registry.configs."x".auth]\n'
           b'  password = "s3cret"\n')
    root = D.parse(ROOT, raw)
    assert E.implicit_default(root, [], 1)
    plan = E.plan_install(root, [], None, 1, Request("nvidia", RT), {}, {"runtime_type": RUNC})
    assert list(_files(plan)) == [ROOT]
    new = _files(plan)[ROOT].new
    assert new.startswith(raw)
    rts = tomllib.loads(new.decode())["plugins"]["io.containerd.grpc.v1.cri"]["containerd"][
        "runtimes"]
    assert rts == {"runc": {"runtime_type": RUNC},
                   "nvidia": {"runtime_type": RUNC, "options": {"BinaryName": RT}}}


def test_an_older_nvdocker2s_containerd_1_dropin_is_removed_by_install_and_uninstall():
    raw = b'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    legacy_path = Path("/etc/containerd/conf.d/99-nvidia.toml")
    legacy = D.parse(legacy_path, (E.MARK + 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n'
                                   '  sandbox_image = "old"\n').encode())
    journal = {"config": str(ROOT), "runtimes": {"nvidia": {
        "dropin": str(legacy_path), "dropin_existed": False, "file_existed": True,
        "previous": {"present": False}, "installed": RT, "set_default": False}}}
    plan = E.plan_install(D.parse(ROOT, raw), [], legacy, 1, Request("nvidia", RT), journal,
                          {"runtime_type": RUNC})
    f = _files(plan)
    assert f[legacy_path].new is None and f[ROOT].new.startswith(raw)
    assert [(c.key, c.action) for c in plan.changes][-1] == (str(legacy_path), "removed")
    assert "dropin" not in plan.journal["runtimes"]["nvidia"]
    back = E.plan_uninstall(D.parse(ROOT, f[ROOT].new), None, Request("nvidia", RT),
                            plan.journal)
    assert _files(back)[ROOT].new == raw
    # Uninstall of what the older nvdocker2 installed removes its drop-in as journaled.
    old = E.plan_uninstall(D.parse(ROOT, raw), legacy, Request("nvidia", RT), journal)
    assert _files(old)[legacy_path].new is None and _files(old)[ROOT].new == raw


def test_containerd_1_refuses_where_another_import_holds_the_cri_section():
    """containerd 1.x runs the last imported CRI section: a runtime in config.toml would not
    run there, and copying that section (its secrets, frozen) is what a drop-in did."""
    raw = b'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    other = D.parse(Path("/etc/containerd/conf.d/10-cri.toml"),
                    b'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "p"\n')
    with pytest.raises(BadInput) as e:
        E.plan_install(D.parse(ROOT, raw), [other], None, 1, Request("nvidia", RT), {})
    assert "10-cri.toml replaces" in e.value.message
    assert e.value.hint.startswith("add the runtime to /etc/containerd/conf.d/10-cri.toml")
    # Where that file already runs our runtime, there is nothing to do.
    done = D.parse(other.path, other.raw + (
        b'[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        b'  runtime_type = "io.containerd.runc.v2"\n'
        b'[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        b'  BinaryName = "' + RT.encode() + b'"\n'))
    plan = E.plan_install(D.parse(ROOT, raw), [done], None, 1, Request("nvidia", RT), {})
    assert not plan.changed and plan.journal is None


def test_a_config_that_names_runc_itself_gets_nothing_more():
    root = D.parse(ROOT, KUBEADM_V2)
    assert not E.implicit_default(root, [], 1)


def test_zero_values_and_missing_keys_are_the_same_to_containerd():
    """The effective-config comparison takes Go's zero values as what they are to containerd:
    an options key at "" / 0 / false is the same as no key; a runtime that is gone is not."""
    from nvdocker2.engines.containerd import service

    cri = ("plugins", "io.containerd.grpc.v1.cri", "containerd")

    def dump(runtimes):
        return {"version": 2, "plugins": {cri[1]: {"containerd": {"runtimes": runtimes}}}}

    nv = {"runtime_type": RUNC, "options": {"BinaryName": RT}}
    before = dump({"runc": {"runtime_type": RUNC, "sandbox_mode": "podsandbox",
                            "options": {"BinaryName": "", "IoUid": 0, "SystemdCgroup": False}}})
    same = dump({"runc": {"runtime_type": RUNC, "sandbox_mode": "podsandbox", "options": {}},
                 "nvidia": nv})
    assert service.compare_dumps(before, same, "nvidia", RT, False) == []
    gone = dump({"nvidia": nv})
    assert service.compare_dumps(before, gone, "nvidia", RT, False) == [
        "plugins.io.containerd.grpc.v1.cri.containerd.runtimes.runc.runtime_type would change",
        "plugins.io.containerd.grpc.v1.cri.containerd.runtimes.runc.sandbox_mode would change"]
    cgroup = dump({"runc": {"runtime_type": RUNC, "sandbox_mode": "podsandbox",
                            "options": {"SystemdCgroup": True}}, "nvidia": nv})
    assert service.compare_dumps(before, cgroup, "nvidia", RT, False) == [
        "plugins.io.containerd.grpc.v1.cri.containerd.runtimes.runc.options.SystemdCgroup "
        "would change"]


def test_builtin_runc_goes_with_ours_after_the_file_was_edited_below_it():
    """The appended bytes are no longer at the end (a table was added after them): uninstall
    drops our table and the runc table install spelled out, and keeps the added table; a runc
    table someone changed since stays."""
    root = D.parse(ROOT, DEBIAN_V2)
    req = Request("nvidia", RT)
    implicit = {"runtime_type": RUNC}
    plan = E.plan_install(root, [], None, 1, req, {}, implicit)
    later = b'\n  [plugins."io.containerd.monitor.v1.cgroups"]\n    no_prometheus = true\n'
    edited = _files(plan)[ROOT].new + later
    back = _files(E.plan_uninstall(D.parse(ROOT, edited), None, req, plan.journal))[ROOT].new
    assert back.startswith(DEBIAN_V2) and back.endswith(later)
    assert tomllib.loads(back.decode()) == tomllib.loads((DEBIAN_V2 + later).decode())
    changed = edited.replace(b'runtime_type = "io.containerd.runc.v2"\n',
                             b'runtime_type = "io.containerd.runc.v2"\nx = 1\n', 1)
    back = _files(E.plan_uninstall(D.parse(ROOT, changed), None, req, plan.journal))[ROOT].new
    cri = tomllib.loads(back.decode())["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert cri["runtimes"] == {"runc": {"runtime_type": RUNC, "x": 1}}


@pytest.mark.parametrize("later", [
    b"# a note at the end of the file\n",
    b'\n# the site\'s monitoring, below ours\n[plugins."io.containerd.monitor.v1.cgroups"]\n'
    b"  no_prometheus = true\n",
])
def test_comments_written_below_our_table_stay_when_it_is_taken_off(later):
    """Lines someone wrote after install, below the table it appended: uninstall removes the
    table and keeps their comment (and what follows) byte for byte."""
    req = Request("nvidia", RT)
    plan = _plan(KUBEADM_V2, req)
    edited = _files(plan)[ROOT].new + later
    back = _files(E.plan_uninstall(D.parse(ROOT, edited), None, req, plan.journal))[ROOT].new
    assert back.startswith(KUBEADM_V2) and back.endswith(later)
    assert b"nvidia" not in back
