"""Round trips and hostile input for containerd's config.toml edits (docs/reference.md §11)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvdocker2.engines.base import Request
from nvdocker2.engines.containerd import document as D
from nvdocker2.engines.containerd import edit as E
from nvdocker2.errors import BadInput

ROOT = Path("/etc/containerd/config.toml")
RT = "/usr/bin/nvidia-container-runtime"

keys = st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True).filter(
    lambda k: k not in ("containerd", "runtimes", "version", "imports", "plugins"))
scalars = st.one_of(st.booleans(), st.integers(-10**6, 10**6),
                    st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=12))
comments = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=20)


def _v(v) -> str:
    return E.toml_value(v)


@st.composite
def configs(draw) -> bytes:
    version = draw(st.sampled_from([1, 2]))
    nl = draw(st.sampled_from(["\n", "\r\n"]))
    ind = draw(st.sampled_from(["", "  ", "\t", "    "]))
    plugin = D.quote(D.CRI_PLUGIN[version])
    out = []
    for c in draw(st.lists(comments, max_size=2)):
        out.append("#" + c)
    if version == 2:
        out.append(draw(st.sampled_from(["version = 2", "version=2", "version  =  2  # v"])))
    for k, v in draw(st.dictionaries(keys, scalars, max_size=2)).items():
        out.append(f"{k} = {_v(v)}")
    out.append(f"[plugins.{plugin}]")
    for k, v in draw(st.dictionaries(keys, scalars, max_size=3)).items():
        tail = f"  # {draw(comments)}" if draw(st.booleans()) else ""
        out.append(f"{ind}{k} = {_v(v)}{tail}")
    if draw(st.booleans()):
        out.append(f"{ind}[plugins.{plugin}.containerd.runtimes.runc]")
        out.append(f'{ind}{ind}runtime_type = "io.containerd.runc.v2"')
        opts = draw(st.dictionaries(st.sampled_from(["SystemdCgroup", "NoNewKeyring", "Root",
                                                     "CriuPath"]), scalars, max_size=3))
        if opts or draw(st.booleans()):
            out.append(f"{ind}[plugins.{plugin}.containerd.runtimes.runc.options]")
            for k, v in opts.items():
                out.append(f"{ind}{ind}{k} = {_v(v)}")
    if draw(st.booleans()):
        out.append("[grpc]")
        out.append(f'{ind}address = "/run/containerd/containerd.sock"')
    text = nl.join(out) + (nl if draw(st.booleans()) else "")
    return text.encode()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=configs(), set_default=st.booleans(), major=st.sampled_from([1, 2]))
def test_install_then_uninstall_gives_the_original_bytes(raw, set_default, major):
    """In place (containerd 1.x) and through our drop-in plus an added import (2.x)."""
    req = Request("nvidia", RT, set_default, (RT,))
    plan = E.plan_install(D.parse(ROOT, raw), [], None, major, req, {})
    new = plan.files[0].new
    cfg = D.parse(ROOT, new)
    dropin = None
    if major == 1:
        eff = cfg.data
    else:
        f = plan.files[1]
        dropin = D.parse(f.path, f.new)
        eff = D.merged(cfg, [dropin], True)
    rt = E._get_in(eff, cfg.cri() + ("runtimes", "nvidia"))
    assert rt["options"]["BinaryName"] == RT
    again = E.plan_install(cfg, [], dropin, major, req, plan.journal)
    assert not again.changed
    back = E.plan_uninstall(cfg, dropin, req, plan.journal)
    assert back.files[0].new == raw
    assert all(f.new is None for f in back.files[1:])


HOSTILE = [
    (b"version = 2\n[plugins\n", "not valid TOML"),
    (b'version = 2\nx = "unterminated\n', "not valid TOML"),
    (b"version = 2\na = 1\na = 2\n", "not valid TOML"),
    (b'version = "2"\n', "version"),
    (b"version = 7\n", "version"),
    (b"version = true\n", "version"),
    (b'imports = "/etc/containerd/conf.d/*.toml"\n', "imports must be a list"),
    (b"imports = [1]\n", "imports must be a list"),
    (b"version = 2\nplugins = 1\n", "plugins must be a table"),
    (b'version = 2\n[plugins]\n"io.containerd.grpc.v1.cri" = "x"\n', "must be a table"),
    (b'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\nruntimes = []\n',
     "runtimes must be a table"),
    (b"\xff\xfe version = 2\n", "not UTF-8"),
    (b"a = " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested too deeply"),
    (b"# " + b"x" * (16 << 20) + b"\n", "limit"),
]


@pytest.mark.parametrize("raw,why", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_toml_is_one_clear_error(raw, why):
    with pytest.raises(BadInput) as e:
        D.parse(ROOT, raw)
    assert why in e.value.message and "\n" not in e.value.message
    assert e.value.hint


def test_syntax_error_names_line_and_column():
    with pytest.raises(BadInput) as e:
        D.parse(ROOT, b"version = 2\n\n[plugins.x\n")
    assert "line 3" in e.value.message
