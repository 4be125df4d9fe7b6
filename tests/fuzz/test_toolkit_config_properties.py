"""config.toml's loader over any mode string and any value type of every key NVIDIA's toolkit
knows: it never crashes; it gives a config or one ConfigError line naming the key, and `mode`
gives a served mode (docs/nvidia-toolkit.md)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nvdocker2.runtime.mode import container_mode
from nvdocker2.toolkit_config import NVIDIA_KEYS, SERVED_MODES, TABLE, ConfigError, parse

LEAVES = sorted(k for k, kind in NVIDIA_KEYS.items() if kind != TABLE)
VALUES = st.one_of(
    st.booleans(), st.integers(-5, 5), st.text(max_size=12),
    st.lists(st.text(max_size=6), max_size=3), st.lists(st.integers(), min_size=1, max_size=2),
)


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, int):
        return str(value)
    return toml_string(value)


def toml_string(text: str) -> str:
    """A TOML basic string of any text (escapes as TOML has them, not as JSON does)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch < " " or ch == "\x7f":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def document(pairs: dict) -> str:
    tables: dict[str, list[str]] = {}
    for key, value in pairs.items():
        table, _, name = key.rpartition(".")
        tables.setdefault(table, []).append(f"{name} = {toml_value(value)}")
    lines = tables.pop("", [])
    for table, body in sorted(tables.items()):
        lines += [f"[{table}]", *body]
    return "\n".join(lines) + "\n"


@given(st.dictionaries(st.sampled_from(LEAVES), VALUES, max_size=6))
def test_any_value_of_any_known_key_is_a_config_or_one_line_naming_it(pairs):
    try:
        cfg = parse(document(pairs).encode(), path="/c.toml")
    except ConfigError as e:
        message = str(e)
        assert "\n" not in message and message.startswith("/c.toml: ")
        assert any(f"'{k}'" in message for k in pairs) or "invalid TOML" in message
        return
    assert cfg.runtime.mode in SERVED_MODES + ("auto", "cdi", "csv")


@given(st.text(max_size=20), st.text(max_size=30))
def test_any_mode_string_resolves_to_a_served_mode_or_one_line_naming_the_key(mode, devices):
    text = f'[nvidia-container-runtime]\nmode = {toml_string(mode)}\n'
    cfg = parse(text.encode(), path="/c.toml")
    spec = {"process": {"env": [f"NVIDIA_VISIBLE_DEVICES={devices}"]}}
    served, why = container_mode(spec, cfg)
    assert served in SERVED_MODES and why
