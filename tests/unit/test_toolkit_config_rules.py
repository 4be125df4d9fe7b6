"""NVIDIA's config.toml (nvdocker2.toolkit_config) at its edges, as a user writing one sees
it: the CDI and CSV settings read from their tables and refused with one line naming the key
when they are no absolute paths, no CDI kind or an empty prefix; a wrong type's value shown
whole up to 60 characters and cut after; files at the size limit, folders and paths through
files; the global file's own errors found even where the per-user file covers the key; and the
records' refusals (too many arguments, a field deleted, a comparison with another type)."""

from __future__ import annotations

import pytest

from nvdocker2 import toolkit_config as tc
from nvdocker2.toolkit_config import ConfigError, ToolkitConfig, layered, parse, read_user_file

CDI = "nvidia-container-runtime.modes.cdi"


def refused(text, path="/etc/c.toml"):
    with pytest.raises(ConfigError) as raised:
        parse(text.encode(), path)
    return str(raised.value)


def test_the_cdi_and_csv_settings_are_read_from_their_tables():
    config = parse(b'[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["/x/cdi/", "/y"]\n'
                   b'default-kind = "example.com/dev"\nannotation-prefixes = ["a.io/"]\n'
                   b'[nvidia-container-runtime.modes.csv]\nmount-spec-path = "/z/csv"\n')
    assert (config.cdi.spec_dirs, config.cdi.default_kind, config.cdi.annotation_prefixes,
            config.runtime.csv_mount_spec_path) == (
        ("/x/cdi", "/y"), "example.com/dev", ("a.io/",), "/z/csv")


@pytest.mark.parametrize("line, message", [
    ('spec-dirs = ["/etc/cdi", "cdi"]',
     f"key '{CDI}.spec-dirs' must list absolute paths, got ['/etc/cdi', 'cdi']"),
    ('default-kind = "gpu"',
     f"key '{CDI}.default-kind' must be a CDI kind like nvidia.com/gpu, got 'gpu'"),
    ('annotation-prefixes = ["cdi.k8s.io/", ""]',
     f"key '{CDI}.annotation-prefixes' may not hold an empty prefix (it would take every"
     " annotation as a CDI request)"),
])
def test_cdi_settings_that_are_not_usable_are_refused_naming_the_key(line, message):
    assert refused(f"[{CDI}]\n{line}\n") == f"/etc/c.toml: {message}"


@pytest.mark.parametrize("size, shown", [
    (56, "['" + "x" * 56 + "']"),                     # its repr is 60 characters: whole
    (57, "['" + "x" * 55 + "..."),                    # 61: the first 57, then "..."
])
def test_a_wrong_value_is_shown_whole_up_to_60_characters(size, shown):
    text = f'[nvidia-container-runtime]\ndebug = ["{"x" * size}"]\n'
    assert refused(text) == ("/etc/c.toml: key 'nvidia-container-runtime.debug' must be a"
                             f" string, got list {shown}")


def test_a_file_at_the_size_limit_is_read_and_one_byte_more_refused(tmp_path):
    path = tmp_path / "config.toml"
    path.write_bytes(b"#" * tc.MAX_CONFIG_BYTES)
    assert tc.load(str(path), user=False).source == str(path)
    assert read_user_file(str(path)) == b"#" * tc.MAX_CONFIG_BYTES
    path.write_bytes(b"#" * (tc.MAX_CONFIG_BYTES + 1))
    message = f"{path}: larger than {tc.MAX_CONFIG_BYTES} bytes; not a config.toml"
    for read in (lambda: tc.load(str(path), user=False), lambda: read_user_file(str(path))):
        with pytest.raises(ConfigError) as raised:
            read()
        assert str(raised.value) == message


def test_a_folder_or_a_path_through_a_file_is_refused(tmp_path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("")
    folder, through = tmp_path / "dir", tmp_path / "file" / "config.toml"
    for read, path, why in (
            (tc.load, folder, "is a directory, not a config.toml file"),
            (tc.load, through, "cannot read: Not a directory"),
            (read_user_file, folder, f"refusing this per-user config.toml: {folder} is not a"
             " regular file (only a file of yours or root's, that no one else can write, is"
             " read; fix it with chown/chmod go-w, or remove it)")):
        with pytest.raises(ConfigError) as raised:
            read(str(path), **({"user": False} if read is tc.load else {}))
        assert str(raised.value) == f"{path}: {why}"
    assert read_user_file(str(through)) is None  # no per-user file there


def test_the_global_files_own_error_is_found_where_the_user_file_covers_the_key():
    with pytest.raises(ConfigError) as raised:
        layered(b"[nvidia-container-runtime]\ndebug = 1\n", "/etc/c.toml", False,
                b'[nvidia-container-runtime]\ndebug = "/tmp/log"\n', "/home/u/c.toml")
    assert str(raised.value) == ("/etc/c.toml: key 'nvidia-container-runtime.debug' must be"
                                 " a string, got int 1")


def test_records_refuse_what_a_frozen_dataclass_refuses():
    config = ToolkitConfig()
    with pytest.raises(TypeError) as raised:
        tc.HookSettings("/a", "/b", "/c", "/d")
    assert str(raised.value) == f"HookSettings takes {len(tc.HookSettings._fields)} arguments"
    with pytest.raises(AttributeError) as deleted:
        del config.path
    assert str(deleted.value) == "cannot delete field 'path': ToolkitConfig is frozen"
    assert (config == 1) is False and (config != "x") is True
    assert config == ToolkitConfig() and config.cdi != config.runtime
