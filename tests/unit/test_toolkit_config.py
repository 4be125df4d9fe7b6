"""config.toml (reference §3): defaults, every key read, one clear line for a broken file."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdocker2 import toolkit_config
from nvdocker2.toolkit_config import ConfigError, ToolkitConfig, config_path, load, parse

PACKAGED = Path(toolkit_config.__file__).parent / "data" / "config.toml"


def test_missing_file_means_defaults(tmp_path):
    cfg = load(str(tmp_path / "absent.toml"))
    assert cfg.source is None
    assert cfg.runtime.runtimes == ("docker-runc", "runc", "crun")
    assert cfg.cli.ldconfig == "@/sbin/ldconfig" and cfg.cli.load_kmods is True
    assert cfg.accept_envvar_unprivileged is True and cfg.accept_volume_mounts is False
    assert cfg.supported_driver_capabilities == (
        "compat32", "compute", "display", "graphics", "ngx", "utility", "video")


def test_packaged_default_file_equals_the_defaults():
    cfg = parse(PACKAGED.read_bytes(), path=str(PACKAGED))
    assert cfg == ToolkitConfig(path=str(PACKAGED), source=str(PACKAGED))
    text = PACKAGED.read_text()
    for key in ("disable-require", "supported-driver-capabilities",
                "accept-nvidia-visible-devices-envvar-when-unprivileged",
                "accept-nvidia-visible-devices-as-volume-mounts", "swarm-resource", "runtimes",
                "debug", "log-level", "path", "root", "ldconfig", "load-kmods", "no-cgroups",
                "user", "environment", "[nvidia-container-runtime]",
                "[nvidia-container-runtime-hook]", "[nvidia-container-cli]"):
        assert key in text


def test_every_key_is_read(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text(
        'disable-require = true\n'
        'supported-driver-capabilities = "compute, utility"\n'
        'accept-nvidia-visible-devices-envvar-when-unprivileged = false\n'
        'accept-nvidia-visible-devices-as-volume-mounts = true\n'
        'swarm-resource = "DOCKER_RESOURCE_GPU"\n'
        '[nvidia-container-runtime]\n'
        'runtimes = ["/opt/runc", "crun"]\ndebug = "/tmp/rt.log"\nlog-level = "debug"\n'
        '[nvidia-container-runtime-hook]\npath = "/opt/hook"\n'
        '[nvidia-container-cli]\npath = "/opt/cli"\nroot = "/drv"\nldconfig = "/sbin/ldconfig"\n'
        'load-kmods = false\nno-cgroups = true\nuser = "root:video"\ndebug = "/tmp/cli.log"\n'
        'environment = ["A=1"]\n'
        '[nvidia-ctk]\npath = "unknown sections are ignored"\n'
    )
    cfg = load(str(f))
    assert cfg.disable_require and not cfg.accept_envvar_unprivileged and cfg.accept_volume_mounts
    assert cfg.supported_driver_capabilities == ("compute", "utility")
    assert cfg.swarm_resource == "DOCKER_RESOURCE_GPU"
    assert cfg.runtime.runtimes == ("/opt/runc", "crun")
    assert (cfg.runtime.debug, cfg.runtime.log_level) == ("/tmp/rt.log", "debug")
    assert cfg.hook.path == "/opt/hook"
    assert cfg.cli == toolkit_config.CliSettings(
        path="/opt/cli", root="/drv", ldconfig="/sbin/ldconfig", load_kmods=False,
        no_cgroups=True, user="root:video", debug="/tmp/cli.log", environment=("A=1",))
    assert cfg.source == str(f)


@pytest.mark.parametrize("text,message", [
    ("disable-require = \"yes\"\n",
     "key 'disable-require' must be true or false, got str 'yes'"),
    ("[nvidia-container-runtime]\nruntimes = \"runc\"\n",
     "key 'nvidia-container-runtime.runtimes' must be a list of strings, got str 'runc'"),
    ("[nvidia-container-runtime]\nruntimes = []\n",
     "key 'nvidia-container-runtime.runtimes' must list at least one runtime"),
    ("[nvidia-container-cli]\nload-kmods = 1\n",
     "key 'nvidia-container-cli.load-kmods' must be true or false, got int 1"),
    ("[nvidia-container-cli]\npath = \"bin/cli\"\n",
     "key 'nvidia-container-cli.path' must be an absolute path, got 'bin/cli'"),
    ("[nvidia-container-cli]\nenvironment = [\"NOEQUALS\"]\n",
     "key 'nvidia-container-cli.environment' entries must be NAME=VALUE, got 'NOEQUALS'"),
    ("nvidia-container-cli = 3\n", "key 'nvidia-container-cli' must be a table, got int 3"),
    ("supported-driver-capabilities = \"compute,gpu\"\n",
     "key 'supported-driver-capabilities' names unknown capability 'gpu'"),
    ("[nvidia-container-runtime]\nlog-level = \"loud\"\n",
     "key 'nvidia-container-runtime.log-level' must be one of debug, info, warning, error"),
    ("[nvidia-container-runtime]\nmode = 1\n",
     "key 'nvidia-container-runtime.mode' must be a string, got int 1"),
    ("[nvidia-container-runtime\n", "invalid TOML: "),
    ("a = 1\na = 2\n", "invalid TOML: "),
])
def test_broken_config_is_one_line_naming_file_and_key(tmp_path, text, message):
    f = tmp_path / "config.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load(str(f))
    assert str(raised.value).startswith(f"{f}: ")
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_not_utf8_and_huge_and_directory(tmp_path):
    f = tmp_path / "config.toml"
    f.write_bytes(b"a = \"\xff\"\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load(str(f))
    f.write_bytes(b"#" * (2 * 1024 * 1024))
    with pytest.raises(ConfigError, match="larger than"):
        load(str(f))
    with pytest.raises(ConfigError, match="is a directory"):
        load(str(tmp_path))


def test_config_path_order(monkeypatch, tmp_path):
    assert config_path() == ("/etc/nvidia-container-runtime/config.toml", False)
    monkeypatch.setenv("NVIDIA_CONTAINER_RUNTIME_CONFIG", "rel/c.toml")
    monkeypatch.chdir(tmp_path)
    assert config_path() == (str(tmp_path / "rel/c.toml"), True)
    assert config_path("/x/explicit.toml") == ("/x/explicit.toml", False)
    assert load().from_env is True


# -- the plain-TOML fast reader must read exactly what tomllib reads, or step aside ---------

try:  # noqa: E402
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nvdocker2.toolkit_config import Record, read_plain_toml  # noqa: E402

FRAGMENTS = [
    "", "# comment", "  # indented comment with ü and 'quotes' and \"more\"",
    "[nvidia-container-cli]",
    "[ nvidia-container-runtime ]", "[a.b]", "[[a]]", "[a] # c", "[a] x", "[]",
    'path = "/usr/bin/x"', "path='/lit/\\no-escape'", 'p = "with # hash"  # and comment',
    'p = "esc\\"aped"', 'p = "tab\there"', 'p = """multi"""', "p = ''", 'p = ""',
    "flag = true", "flag = false", "flag = True", "flag = truex", "n = 0", "n = -12",
    "n = +7", "n = 007", "n = 1_000", "n = 1.5", "n = 0x1f",
    'runtimes = ["runc", "crun"]', "runtimes = []", "runtimes = [ 'a' , \"b\", ]",
    'runtimes = ["a" "b"]', "runtimes = [1, 2]", "runtimes = [", 'env = ["A=1"] # c',
    "dotted.key = 1", '"quoted" = 1', "key", "= 1", "k = ", "k = 1 2", "k = {a = 1}",
    "k = 1979-05-27", "k\t=\t'v'", "k = 'v'\r", "k = 'a\x01b'", "k = 'v' \x7f",
    "ü = 1", "123 = 'digits are a bare key'", "k = 'dup'",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=8), st.sampled_from(["\n", "\r\n"]))
def test_plain_reader_agrees_with_tomllib(lines, newline):
    text = newline.join(lines)
    plain = read_plain_toml(text)
    try:
        expected = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        assert plain is None
        return
    if plain is not None:
        assert plain == expected


def test_plain_reader_reads_the_packaged_file_and_test_configs():
    assert read_plain_toml(PACKAGED.read_text()) == {
        "nvidia-container-runtime": {}, "nvidia-container-runtime-hook": {},
        "nvidia-container-cli": {}}
    text = '[nvidia-container-cli]\npath = "/x/cli"\nenvironment = ["A=1", \'B=2\']\n'
    assert read_plain_toml(text) == tomllib.loads(text)


def test_record_behaves_like_a_frozen_dataclass():
    class Point(Record):
        x: int
        y: int = 2

    p = Point(1)
    assert p == Point(x=1, y=2) and p != Point(1, 3) and hash(p) == hash(Point(1, 2))
    assert repr(p) == "Point(x=1, y=2)"
    assert p.replace(y=5) == Point(1, 5)
    with pytest.raises(AttributeError):
        p.x = 3
    with pytest.raises(TypeError):
        Point()
    with pytest.raises(TypeError):
        Point(1, z=2)
