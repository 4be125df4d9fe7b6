"""One key of the runtime's config.toml set by install and put back by uninstall
(nvdocker2.engines.docker.toolkit_toml), seen in the bytes: the rest of the file kept, the old
value's own text (quotes, comment) given back, a value changed since left alone."""

from __future__ import annotations

import pytest

from nvdocker2.changes import ABSENT
from nvdocker2.engines.docker.toolkit_toml import current, put_back, set_key
from nvdocker2.errors import BadInput

TABLE, KEY = "nvidia-container-runtime", "mode"
BEFORE = (b"# site settings\n[nvidia-container-cli]\nno-cgroups = false\n\n"
          b"[nvidia-container-runtime]\nmode = 'legacy'  # kept for the old images\n"
          b'runtimes = ["runc"]\n')


def test_set_then_put_back_gives_the_same_bytes(tmp_path):
    path = tmp_path / "config.toml"
    new, change, record = set_key(BEFORE, path, TABLE, KEY, "direct")
    assert new == BEFORE.replace(b"mode = 'legacy'", b'mode = "direct"')
    assert (change.action, change.before, change.after) == ("replaced", "legacy", "direct")
    assert current(new, path, TABLE, KEY) == "direct"
    back, undone, warning = put_back(new, record, path, TABLE, KEY, "direct")
    assert (back, warning) == (BEFORE, None)
    assert (undone.action, undone.before, undone.after) == ("replaced", "direct", "legacy")


def test_a_key_install_added_goes_and_so_does_the_file_it_made(tmp_path):
    path = tmp_path / "config.toml"
    new, change, record = set_key(None, path, TABLE, KEY, "direct")
    assert new == b'[nvidia-container-runtime]\nmode = "direct"\n'
    assert change.action == "added" and change.before is ABSENT
    back, undone, warning = put_back(new, record, path, TABLE, KEY, "direct")
    assert (back, undone.action, warning) == (None, "removed", None)


def test_the_same_value_again_is_no_change_and_no_record(tmp_path):
    raw = b'[nvidia-container-runtime]\nmode = "direct"\n'
    new, change, record = set_key(raw, tmp_path / "config.toml", TABLE, KEY, "direct")
    assert (new, change.action, record) == (raw, "unchanged", None)


def test_a_value_changed_since_install_is_left_alone_with_a_warning(tmp_path):
    path = tmp_path / "config.toml"
    _new, _change, record = set_key(BEFORE, path, TABLE, KEY, "direct")
    since = BEFORE.replace(b"mode = 'legacy'", b'mode = "cdi"')
    back, undone, warning = put_back(since, record, path, TABLE, KEY, "direct")
    assert (back, undone) == (since, None)
    assert warning == (f'{path}: [nvidia-container-runtime] mode is "cdi" now, not the "direct" '
                       "install wrote: left as it is")


@pytest.mark.parametrize("raw, words", [
    (b"[nvidia-container-runtime\n", "invalid TOML"),
    (b"nvidia-container-runtime = 1\n", "key 'nvidia-container-runtime' must be a table"),
    (b"\xff\xfe", "not UTF-8 text"),
])
def test_a_file_it_cannot_edit_is_refused_with_a_hint(tmp_path, raw, words):
    path = tmp_path / "config.toml"
    with pytest.raises(BadInput) as e:
        set_key(raw, path, TABLE, KEY, "direct")
    assert words in str(e.value) and str(path) in str(e.value)
    assert e.value.hint == f"fix {path} by hand, then run again; nothing was changed"
