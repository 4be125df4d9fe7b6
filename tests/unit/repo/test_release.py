"""One version everywhere a release names it: the package, `nvdocker2 --version`, the
CHANGELOG's newest release, debian/changelog, the rpm %changelog, the Ansible collection and
the agent's Helm chart and manifest. A release that bumps one and forgets another fails here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nvdocker2

ROOT = Path(__file__).resolve().parents[3]
VERSION = nvdocker2.__version__


def test_the_version_is_a_plain_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)


def test_nvdocker2_version_prints_it():
    out = subprocess.run([sys.executable, "-I", "-m", "nvdocker2", "--version"],
                         capture_output=True, text=True, check=True).stdout
    assert VERSION in out.split()


def test_changelog_newest_release_is_it_and_nothing_released_is_left_unreleased():
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## (.+)$", text, re.M)
    released = [h for h in headings if h != "Unreleased"]
    assert released[0] == f"{VERSION} (" + released[0].split("(", 1)[1]
    assert all(re.fullmatch(r"\d+\.\d+\.\d+ \(\d{4}-\d\d-\d\d\)", h) for h in released), released


def test_debian_changelog_newest_entry_is_it():
    first = (ROOT / "debian" / "changelog").read_text().splitlines()[0]
    assert first.startswith(f"nvdocker2 ({VERSION}) ")


def test_rpm_changelog_newest_entry_is_it():
    spec = (ROOT / "rpm" / "nvdocker2.spec").read_text()
    entries = re.findall(r"^\* .+ - (\S+)$", spec.split("%changelog", 1)[1], re.M)
    assert entries and entries[0] == f"{VERSION}-1"


def test_ansible_collection_is_it():
    galaxy = (ROOT / "ansible/ansible_collections/nvdocker2/gpu/galaxy.yml").read_text()
    assert re.search(rf"^version: {re.escape(VERSION)}$", galaxy, re.M)


def test_agent_chart_and_manifest_are_it():
    chart = (ROOT / "deploy/helm/nvdocker2-agent/Chart.yaml").read_text()
    assert re.search(rf'^appVersion: "{re.escape(VERSION)}"$', chart, re.M)
    values = (ROOT / "deploy/helm/nvdocker2-agent/values.yaml").read_text()
    assert re.search(rf'tag: "{re.escape(VERSION)}"', values)
    manifest = (ROOT / "deploy/kubernetes/nvdocker2-agent.yaml").read_text()
    assert f'image: "nvdocker2-agent:{VERSION}"' in manifest


def test_readme_install_lines_name_its_packages():
    readme = (ROOT / "README.md").read_text()
    assert f"nvdocker2_{VERSION}_all.deb" in readme
    assert f"nvdocker2-{VERSION}-1.noarch.rpm" in readme
