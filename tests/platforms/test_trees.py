"""The harness of the matrix itself (trees.py): a platform that cannot be had is one line naming
it and the reason, failed under CI=true; the tree's containerd runs alone; nothing is left
running or mounted after a tree is closed."""

from __future__ import annotations

import os

import pytest
import trees


def test_a_tree_whose_download_fails_is_one_line_naming_the_platform(platform, tmp_path,
                                                                     monkeypatch):
    suite = trees.SUITES[platform]
    monkeypatch.setattr(trees, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(trees, "MIRROR", "http://127.0.0.1:9/debian")
    with pytest.raises(trees.TreeUnavailable) as caught:
        trees.ensure_tarball(suite)
    message = str(caught.value)
    assert message.startswith(
        f"{suite.platform}: debootstrap {platform} from http://127.0.0.1:9/debian failed: ")
    assert "\n" not in message
    assert not list((tmp_path / "cache").glob("*.tar"))
    assert not [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]


def test_a_dockerd_that_cannot_start_is_one_line_naming_the_platform(tree, platform):
    with pytest.raises(trees.TreeUnavailable) as caught:
        tree.start_dockerd(extra_args=["--no-such-flag"], timeout=60)
    message = str(caught.value)
    assert message.startswith(f"{trees.SUITES[platform].platform}: dockerd exited ")
    assert "unknown flag: --no-such-flag" in message
    assert "\n" not in message


def test_unavailable_fails_under_ci_and_skips_otherwise(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="^Debian 13 .trixie.: no network$"):
        trees.unavailable("Debian 13 (trixie): no network")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        trees.unavailable("Debian 13 (trixie): no network")


def test_containerd_runs_alone_and_close_leaves_nothing(platform):
    tree = trees.Tree.create(platform)
    try:
        containerd = tree.start_containerd()
        version = containerd.ctr("version").stdout
        assert f"Version:  {trees.SUITES[platform].containerd}." in version.split("Server:")[1]
        assert containerd.socket.is_socket()
        pids = tree.namespace_pids()
        assert containerd.pid in pids
    finally:
        tree.close()
    assert not [p for p in pids if os.path.exists(f"/proc/{p}")]
    assert not tree.base.exists()
    with open("/proc/self/mountinfo") as f:
        assert str(tree.base) not in f.read()
