"""The .rpm: its scriptlets and file list, and the package installed, upgraded and erased for
real by rpm into a throwaway chroot (rpm --root, running the scriptlets inside it)."""

from __future__ import annotations

import json
import re

from pkgtest import (
    ALREADY_LINE,
    NOT_RELOADED_LINE,
    PROGRAMS,
    REMOVED_LINE,
    REMOVED_NOT_RELOADED_LINE,
    RUNTIME,
    USER_DAEMON_JSON,
    USER_SNIPPETS,
    backups,
    check_launchers,
    installed_line,
    run,
    script_lines,
)

from nvdocker2 import __version__


def scriptlets(rpm) -> dict[str, str]:
    """`rpm -qp --scripts` split into {"postinstall": body, "preuninstall": body, ...}."""
    out = run(["rpm", "-qp", "--scripts", str(rpm)]).stdout
    parts = re.split(r"^(\w+) scriptlet \(using /bin/sh\):\n", out, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def test_scriptlets_install_on_post_and_uninstall_only_on_erase(packages):
    scripts = scriptlets(packages.rpm)
    assert set(scripts) == {"postinstall", "preuninstall", "postuninstall"}
    assert "/usr/bin/nvdocker2 install --json --no-verify --reload auto" in scripts["postinstall"]
    preun = scripts["preuninstall"]
    assert "/usr/bin/nvdocker2 uninstall --json --no-verify --reload auto" in preun
    assert preun.index('if [ "$1" -eq 0 ]') < preun.index("nvdocker2 uninstall")
    assert "/usr/bin/nvdocker2 uninstall --mode cdi --json --no-verify --reload none" in preun
    assert "systemctl enable nvdocker2-cdi-refresh.service" in scripts["postinstall"]
    assert "nvdocker2-devices.service >/dev/null" in scripts["postinstall"]
    assert "systemctl start nvdocker2-cdi-refresh.path" in scripts["postinstall"]
    assert "rm -rf /var/lib/nvdocker2 /usr/share/nvdocker2" in scripts["postuninstall"]


def test_recommends_a_libnvidia_container_with_the_container_escape_fixes(packages):
    """1.17.4 fixes CVE-2024-0132 (fixed in 1.16.2) and its bypass CVE-2025-23359."""
    weak = run(["rpm", "-qp", "--recommends", str(packages.rpm)]).stdout.splitlines()
    assert "libnvidia-container-tools >= 1.17.4" in weak


def test_file_list_has_no_docker_file_and_a_noreplace_config(packages):
    files = run(["rpm", "-qlp", str(packages.rpm)]).stdout.split()
    assert not [f for f in files if f.startswith("/etc/docker")]
    assert "/usr/lib/systemd/system/nvdocker2-cdi-refresh.service" in files
    assert "/usr/lib/systemd/system/nvdocker2-cdi-refresh.path" in files
    assert "/usr/lib/udev/rules.d/70-nvdocker2-cdi-refresh.rules" in files
    assert "/usr/lib/systemd/system/nvdocker2-devices.service" in files
    assert "/usr/lib/udev/rules.d/70-nvdocker2-devices.rules" in files
    assert "/usr/libexec/nvdocker2/nvidia-container-cli" in files
    assert "/usr/bin/nvidia-container-cli" not in files  # libnvidia-container-tools'
    for program in PROGRAMS:
        assert f"/usr/bin/{program}" in files
        assert (
            f"/usr/share/man/man1/{program}.1" in files
            or f"/usr/share/man/man1/{program}.1.gz" in files
        )
    flags = run(
        ["rpm", "-qp", "--qf", "[%{FILENAMES} %{FILEFLAGS:fflags}\n]", str(packages.rpm)]
    ).stdout
    assert "/etc/nvidia-container-runtime/config.toml cn" in flags.splitlines()
    info = run(["rpm", "-qp", "--qf", "%{VERSION} %{ARCH}", str(packages.rpm)]).stdout
    assert info == f"{__version__} noarch"
    conflicts = run(["rpm", "-qp", "--conflicts", str(packages.rpm)]).stdout.split()
    assert sorted(conflicts) == [
        "nvidia-container-runtime",
        "nvidia-container-toolkit",
        "nvidia-container-toolkit-base",
        "nvidia-docker2",
    ]
    obsoletes = run(["rpm", "-qp", "--obsoletes", str(packages.rpm)]).stdout.splitlines()
    assert sorted(obsoletes) == [
        "nvidia-container-runtime < 4",
        "nvidia-container-toolkit < 2",
        "nvidia-container-toolkit-base < 2",
        "nvidia-docker2 < 3",
    ]


def test_rpm_install_upgrade_erase_in_a_chroot(packages, chroot):
    """The launchers and scriptlets for real, on the chroot's python3 and python3-* libraries."""
    chroot.path("/etc/docker").mkdir()
    config = chroot.path("/etc/docker/daemon.json")
    config.write_bytes(USER_DAEMON_JSON)
    rpm = ["rpm", "--root", str(chroot.root), "--nodeps", "--nosignature"]
    run = chroot.host

    proc = run([*rpm, "-i", str(packages.rpm)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    merged = config.read_bytes()
    for snippet in USER_SNIPPETS:
        assert snippet.encode() in merged
    assert json.loads(merged)["runtimes"] == {"nvidia": {"path": RUNTIME}}
    assert chroot.ok("nvdocker2 --version").strip().endswith(__version__)
    assert chroot.ok("NV_DOCKER=echo nvidia-docker create img").strip() == (
        "create --runtime=nvidia img"
    )
    (backup,) = backups(chroot)
    assert script_lines(proc.stdout) == [installed_line(backup), NOT_RELOADED_LINE], proc.stdout
    for program in ("nvdocker2", "nvidia-docker"):
        shebang = chroot.path(f"/usr/bin/{program}").read_text().splitlines()[0]
        assert shebang == "#!/usr/bin/python3 -I"
    check_launchers(chroot)

    proc = run([*rpm, "-U", str(packages.rpm_upgrade)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert script_lines(proc.stdout) == [ALREADY_LINE], "upgrade ran the uninstaller"
    assert config.read_bytes() == merged
    assert len(backups(chroot)) == 1

    proc = run([*rpm, "-e", "nvdocker2"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = script_lines(proc.stdout)
    removed = REMOVED_LINE.fullmatch(said[0])
    assert removed is not None and removed.group(1) != backup, proc.stdout
    assert said[1:] == [REMOVED_NOT_RELOADED_LINE], proc.stdout
    assert config.read_bytes() == USER_DAEMON_JSON
    assert not chroot.path("/var/lib/nvdocker2").exists()
    assert not chroot.path("/usr/share/nvdocker2").exists()
