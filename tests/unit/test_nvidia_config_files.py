"""NVIDIA's own config.toml files (tests/data/nvidia-config, one a release) load unchanged,
every key with NVIDIA's meaning or listed as not used; `mode` is resolved as NVIDIA resolves
it with the modes nvdocker2 serves (docs/nvidia-toolkit.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from nvdocker2.hook.cli_argv import argv_before_pid
from nvdocker2.hook.request import Request
from nvdocker2.runtime.mode import container_mode
from nvdocker2.toolkit_config import (
    NOT_USED,
    NVIDIA_KEYS,
    ConfigError,
    read_plain_toml,
    parse,
    read_toml,
)

DATA = Path(__file__).parent.parent / "data" / "nvidia-config"
FILES = sorted(DATA.glob("*.toml"))


def leaf_keys(doc: dict, prefix: str = "") -> list[str]:
    keys = []
    for name, value in doc.items():
        keys.append(prefix + name)
        if isinstance(value, dict):
            keys.extend(leaf_keys(value, prefix + name + "."))
    return keys


def test_every_release_is_kept():
    names = {f.stem for f in FILES}
    assert {"v1.13.5-ubuntu", "v1.14.6", "v1.17.9", "main"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_nvidia_file_loads_unchanged_with_no_warning(path):
    cfg = parse(path.read_bytes(), path=str(path))
    assert cfg.warnings == ()
    assert cfg.runtime.mode_given == "auto" and cfg.runtime.mode == "auto"
    assert cfg.hook.path is None  # `path = "nvidia-container-runtime-hook"`: our own hook
    assert cfg.cli.load_kmods is True and cfg.cli.ldconfig.startswith("@/sbin/ldconfig")
    assert cfg.runtime.runtimes[-2:] in (("runc", "crun"), ("docker-runc", "runc"))
    doc = read_toml(path.read_text(), str(path))
    for key in leaf_keys(doc):
        assert key in NVIDIA_KEYS, key
    assert set(cfg.unused) == {k for k in leaf_keys(doc) if k in NOT_USED}


@pytest.mark.parametrize("path", [f for f in FILES if not f.stem.startswith("v1.13")],
                         ids=lambda p: p.stem)
def test_nvidia_config_default_output_is_read_without_tomllib(path):
    text = path.read_text()
    assert read_plain_toml(text) == read_toml(text, str(path))


@pytest.mark.parametrize("text", [
    "[a.b]\nx = 1\n[a]\ny = 2\n",     # a table named after one below it
    "[a]\nb = 1\n[a.b]\n",            # a table over a key
    "[a.b]\n[a.b]\n",                 # twice
    "a = 1\n[a.b]\n",
])
def test_plain_reader_leaves_dotted_tables_it_cannot_read_exactly_to_tomllib(text):
    assert read_plain_toml(text) is None


def spec(*env: str) -> dict:
    return {"process": {"env": ["PATH=/bin", *env]}}


def driver(tmp_path: Path, *files: str) -> str:
    for rel in files:
        f = tmp_path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("Tegra\n")
    return str(tmp_path)


def config(tmp_path: Path, mode: str, root: str) -> object:
    text = f'[nvidia-container-cli]\nroot = "{root}"\n[nvidia-container-runtime]\nmode = "{mode}"\n'
    return parse(text.encode(), path=str(tmp_path / "config.toml"))


GPU = "proc/driver/nvidia/gpus/0000:01:00.0/information"


@pytest.mark.parametrize("files, env, mode, why", [
    ((GPU,), ("NVIDIA_VISIBLE_DEVICES=0",), "direct", "jit-cdi"),
    ((GPU,), ("NVIDIA_VISIBLE_DEVICES=all",), "direct", "jit-cdi"),
    ((), ("NVIDIA_VISIBLE_DEVICES=all",), "direct", "no GPU"),
    ((GPU,), ("NVIDIA_VISIBLE_DEVICES=0:1",), "legacy", "MIG"),
    ((GPU,), ("NVIDIA_VISIBLE_DEVICES=MIG-4a2b",), "legacy", "MIG"),
    (("etc/nv_tegra_release",), ("NVIDIA_VISIBLE_DEVICES=all",), "csv", "Tegra"),
    (("sys/devices/soc0/family",), ("NVIDIA_VISIBLE_DEVICES=0",), "csv", "CSV files"),
    (("dev/dxg", GPU), ("NVIDIA_VISIBLE_DEVICES=all",), "legacy", "WSL"),
    ((GPU,), ("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0,0",), "direct", "jit-cdi"),
])
def test_auto_resolves_an_ordinary_request_to_a_served_mode(tmp_path, files, env, mode, why):
    cfg = config(tmp_path, "auto", driver(tmp_path / "driver", *files))
    got, reason = container_mode(spec(*env), cfg)
    assert got == mode and why in reason and reason.startswith(f"auto resolves to {mode}: ")


def test_auto_with_cdi_names_only_resolves_to_cdi(tmp_path):
    cfg = config(tmp_path, "auto", driver(tmp_path / "driver", GPU))
    mode, why = container_mode(spec("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"), cfg)
    assert (mode, why) == ("cdi", "auto resolves to cdi: the container asks only for CDI"
                                  " devices (nvidia.com/gpu=0)")
    annotated = {**spec("NVIDIA_VISIBLE_DEVICES=0"), "annotations": {"cdi.k8s.io/a": "x/y=z"}}
    assert container_mode(annotated, cfg) == (
        "cdi", "auto resolves to cdi: the container has CDI annotations (cdi.k8s.io/a)")


def test_explicit_cdi_and_csv_are_served(tmp_path):
    for mode in ("cdi", "csv"):
        assert container_mode(spec(), config(tmp_path, mode, "/"))[0] == mode


def test_jit_cdi_is_direct_mode(tmp_path):
    cfg = config(tmp_path, "jit-cdi", "/run/nvidia/driver")
    assert cfg.runtime.mode == "direct" and cfg.runtime.mode_given == "jit-cdi"
    assert container_mode(spec("NVIDIA_VISIBLE_DEVICES=0"), cfg)[0] == "direct"


def test_cli_root_is_the_driver_root_in_every_mode(tmp_path):
    cfg = config(tmp_path, "direct", "/run/nvidia/driver")
    assert cfg.runtime.driver_root == "/run/nvidia/driver"
    assert cfg.cli.root == "/run/nvidia/driver"
    both = ('[nvidia-container-cli]\nroot = "/a"\n'
            '[nvidia-container-runtime]\ndriver-root = "/b"\n')
    with pytest.raises(ConfigError) as raised:
        parse(both.encode(), path="/c.toml")
    assert "'nvidia-container-runtime.driver-root'" in str(raised.value)
    assert "'nvidia-container-cli.root'" in str(raised.value)


def test_unknown_key_and_unknown_mode_are_warnings_not_refusals():
    text = ('color = "blue"\n[nvidia-container-runtime]\nmode = "quantum"\nnew-knob = 1\n'
            '[nvidia-container-runtime.modes.future]\nx = true\n')
    cfg = parse(text.encode(), path="/c.toml")
    assert cfg.runtime.mode == "auto" and cfg.runtime.mode_given == "quantum"
    assert cfg.warnings == (
        "key 'color' is not one any NVIDIA release knows; ignored",
        "key 'nvidia-container-runtime.mode': 'quantum' is a mode no NVIDIA release knows;"
        ' read as "auto"',
        "key 'nvidia-container-runtime.modes.future' is not one any NVIDIA release knows;"
        " ignored",
        "key 'nvidia-container-runtime.new-knob' is not one any NVIDIA release knows; ignored",
    )


@pytest.mark.parametrize("text, key, want", [
    ("[nvidia-container-runtime-hook]\nskip-mode-detection = \"yes\"\n",
     "nvidia-container-runtime-hook.skip-mode-detection", "true or false"),
    ("[nvidia-container-runtime.modes.cdi]\nspec-dirs = \"/etc/cdi\"\n",
     "nvidia-container-runtime.modes.cdi.spec-dirs", "a list of strings"),
    ("[features]\ndisable-imex-channel-creation = 1\n",
     "features.disable-imex-channel-creation", "true or false"),
    ("[nvidia-ctk]\npath = false\n", "nvidia-ctk.path", "a string"),
    ("[nvidia-container-runtime]\nmodes = 3\n", "nvidia-container-runtime.modes", "a table"),
    ("[nvidia-container-cli]\nldcache = 7\n", "nvidia-container-cli.ldcache", "a string"),
])
def test_wrong_type_of_a_known_key_is_refused_in_one_line(text, key, want):
    with pytest.raises(ConfigError) as raised:
        parse(text.encode(), path="/c.toml")
    message = str(raised.value)
    assert message.startswith(f"/c.toml: key '{key}' must be {want}, got ")
    assert "\n" not in message


def test_a_hook_named_on_path_other_than_ours_is_refused():
    with pytest.raises(ConfigError) as raised:
        parse(b'[nvidia-container-runtime-hook]\npath = "my-hook"\n', path="/c.toml")
    assert "key 'nvidia-container-runtime-hook.path' must be an absolute path" \
        in str(raised.value)


def test_nvidia_log_levels_are_read_as_ours():
    assert parse(b'[nvidia-container-runtime]\nlog-level = "warn"\n').runtime.log_level \
        == "warning"
    assert parse(b'[nvidia-container-runtime]\nlog-level = "trace"\n').runtime.log_level \
        == "debug"


def test_ldcache_and_no_pivot_reach_the_cli_as_nvidia_passes_them():
    cfg = parse(b'[nvidia-container-cli]\nldcache = "/etc/ld.so.cache"\nno-pivot = true\n'
                b'root = "/run/nvidia/driver"\n')
    argv = argv_before_pid("/usr/bin/nvidia-container-cli",
                           Request(devices="all", capabilities=("utility",)), cfg)
    assert argv[:6] == ["/usr/bin/nvidia-container-cli", "--root=/run/nvidia/driver",
                        "--load-kmods", "--no-pivot", "--ldcache=/etc/ld.so.cache", "configure"]


def test_supported_capabilities_all_means_every_capability():
    cfg = parse(b'supported-driver-capabilities = "all"\n')
    assert set(cfg.supported_driver_capabilities) == {
        "compute", "utility", "video", "graphics", "display", "compat32", "ngx"}


def test_loading_nvidia_main_file_imports_no_tomllib():
    code = ("import sys; from nvdocker2 import toolkit_config as t;"
            f"t.load({str(DATA / 'main.toml')!r}, user=False);"
            "print('tomllib' in sys.modules, 'tomli' in sys.modules)")
    out = os.popen(f"{sys.executable} -I -c \"{code}\"").read()  # noqa: S605
    assert out.split() == ["False", "False"]
