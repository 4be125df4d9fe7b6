"""The .deb, installed for real with apt in a bookworm chroot: what an operator sees in
/etc/docker/daemon.json and on the terminal through install, reinstall, upgrade and purge."""

from __future__ import annotations

import json
import subprocess

from pkgtest import (
    ALREADY_LINE,
    APT,
    NOT_RELOADED_LINE,
    REMOVED_LINE,
    REMOVED_NOT_RELOADED_LINE,
    PROGRAMS,
    REPO,
    RUNTIME,
    UPGRADE_VERSION,
    USER_DAEMON_JSON,
    USER_SNIPPETS,
    backups,
    check_launchers,
    installed_line,
    run,
    runtimes,
    script_lines,
)

from nvdocker2 import __version__


def test_build_leaves_the_checkout_clean_and_lintian_finds_no_errors(packages):
    assert packages.checkout_after == packages.checkout_before, "the build wrote into the checkout"
    proc = run(
        [
            "lintian",
            "--fail-on",
            "error",
            "--tag-display-limit",
            "0",
            "-I",
            "--pedantic",
            str(packages.deb),
        ]
    )
    print(f"lintian ({packages.build_seconds:.0f} s to build the three packages):\n{proc.stdout}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not [line for line in proc.stdout.splitlines() if line.startswith("E:")]


def test_package_contents_and_relationships(packages):
    contents = subprocess.run(
        ["dpkg-deb", "-c", str(packages.deb)], capture_output=True, text=True, check=True
    ).stdout
    paths = [line.split()[-1] for line in contents.splitlines()]
    for program in PROGRAMS:
        assert f"./usr/bin/{program}" in paths
        assert f"./usr/share/man/man1/{program}.1.gz" in paths
    assert "./usr/libexec/nvdocker2/nvidia-container-cli" in paths
    assert "./usr/bin/nvidia-container-cli" not in paths  # libnvidia-container-tools'
    assert "./etc/nvidia-container-runtime/config.toml" in paths
    assert "./lib/systemd/system/nvdocker2-cdi-refresh.service" in paths
    assert "./lib/systemd/system/nvdocker2-cdi-refresh.path" in paths
    assert "./lib/udev/rules.d/70-nvdocker2-cdi-refresh.rules" in paths
    assert "./lib/systemd/system/nvdocker2-devices.service" in paths
    assert "./lib/udev/rules.d/70-nvdocker2-devices.rules" in paths
    postinst = run(["dpkg-deb", "-I", str(packages.deb), "postinst"]).stdout
    assert "nvdocker2-cdi-refresh.service" in postinst  # enabled at install, runs at boot
    assert "deb-systemd-helper enable 'nvdocker2-cdi-refresh.path'" in postinst  # watching
    assert "deb-systemd-helper enable 'nvdocker2-devices.service'" in postinst  # at boot
    # The preinst that keeps a host's config.toml on a takeover carries our default's bytes.
    preinst = run(["dpkg-deb", "-I", str(packages.deb), "preinst"]).stdout
    default = (REPO / "nvdocker2/data/config.toml").read_text()
    assert f"<<'NVDOCKER2_DEFAULT_CONFIG'\n{default}NVDOCKER2_DEFAULT_CONFIG\n" in preinst
    prerm = run(["dpkg-deb", "-I", str(packages.deb), "prerm"]).stdout
    assert "nvdocker2 uninstall --mode cdi --json --no-verify --reload none" in prerm
    assert not [p for p in paths if p.startswith("./etc/docker")]
    conffiles = run(["dpkg-deb", "-I", str(packages.deb), "conffiles"]).stdout
    assert conffiles.split() == ["/etc/nvidia-container-runtime/config.toml"]

    def field(name):
        return subprocess.run(
            ["dpkg-deb", "-f", str(packages.deb), name], capture_output=True, text=True, check=True
        ).stdout.strip()

    assert field("Version") == __version__
    replaced = (
        "nvidia-container-runtime, nvidia-container-toolkit, nvidia-container-toolkit-base, "
        "nvidia-docker2"
    )
    for name in ("Conflicts", "Replaces", "Provides"):
        assert field(name) == replaced
    # 1.17.4 fixes CVE-2024-0132 (1.16.2) and its bypass CVE-2025-23359.
    assert field("Recommends") == "libnvidia-container-tools (>= 1.17.4)"
    assert field("Suggests") == "docker.io | docker-ce"
    depends = field("Depends")
    for dep in (
        "python3-typer",
        "python3-rich",
        "python3-jsonschema",
        "python3-filelock",
        "python3-packaging",
        "python3-tomlkit",
    ):
        assert dep in depends


def test_install_reinstall_upgrade_purge_keep_the_users_daemon_json(packages, chroot):
    chroot.path("/etc/docker").mkdir()
    config = chroot.path("/etc/docker/daemon.json")
    config.write_bytes(USER_DAEMON_JSON)
    deb = chroot.put(packages.deb)
    upgrade = chroot.put(packages.deb_upgrade)

    out = chroot.ok(f"{APT} install {deb}")
    merged = config.read_bytes()
    for snippet in USER_SNIPPETS:
        assert snippet.encode() in merged, f"{snippet!r} changed by install:\n{merged.decode()}"
    before, after = json.loads(USER_DAEMON_JSON), json.loads(merged)
    assert list(after)[: len(before)] == list(before)
    assert {k: v for k, v in after.items() if k != "runtimes"} == before
    assert after["runtimes"] == {"nvidia": {"path": RUNTIME}}
    (backup,) = backups(chroot)
    # One line per outcome, never the JSON result (dash's echo mangled its backslashes).
    assert script_lines(out) == [installed_line(backup), NOT_RELOADED_LINE], out
    assert '"changed"' not in out

    # The programs run on Debian's python3 and Debian's libraries, nothing else; the runtime
    # and the hook are nvdocker2.runtime.launcher's launchers.
    for program in ("nvdocker2", "nvidia-docker", "nvdocker2-container-cli"):
        shebang = chroot.path(f"/usr/bin/{program}").read_text().splitlines()[0]
        assert shebang == "#!/usr/bin/python3 -I"
    check_launchers(chroot)
    assert chroot.ok("nvdocker2 --version").strip().endswith(__version__)
    where = chroot.ok(
        "python3 -c 'import nvdocker2, typer, rich, jsonschema, filelock, packaging as p; "
        "print(*(m.__file__ for m in (nvdocker2, typer, rich, jsonschema, filelock, p)))'"
    ).split()
    assert all(f.startswith("/usr/lib/python3/dist-packages/") for f in where), where
    # The hook runs on the chroot's python3 alone (poststart is a no-op that must exit 0).
    assert chroot.sh("nvidia-container-runtime-hook poststart </dev/null").returncode == 0
    assert chroot.ok("NV_DOCKER=echo nvidia-docker -H unix:///s run img").strip() == (
        "-H unix:///s run --runtime=nvidia img"
    )
    assert chroot.ok("dpkg-query -W -f='${Conffiles}' nvdocker2").split()[0] == (
        "/etc/nvidia-container-runtime/config.toml"
    )
    assert "/etc/docker" not in chroot.ok("dpkg -L nvdocker2")

    out = chroot.ok(f"{APT} install --reinstall {deb}")
    assert config.read_bytes() == merged, "reinstall changed daemon.json"
    assert len(backups(chroot)) == 1, "reinstall made another backup"
    assert script_lines(out) == [ALREADY_LINE], out

    out = chroot.ok(f"{APT} install {upgrade}")
    assert config.read_bytes() == merged, "upgrade changed daemon.json"
    assert merged.count(b'"nvidia"') == 1
    assert len(backups(chroot)) == 1, "upgrade made another backup"
    assert script_lines(out) == [ALREADY_LINE], "upgrade ran the uninstaller:\n" + out
    assert chroot.ok("nvdocker2 --version").strip().endswith(UPGRADE_VERSION)

    out = chroot.ok(f"{APT} purge nvdocker2")
    said = script_lines(out)
    removed = REMOVED_LINE.fullmatch(said[0])
    assert removed is not None and removed.group(1) != backup, out
    assert said[1:] == [REMOVED_NOT_RELOADED_LINE], out
    assert config.read_bytes() == USER_DAEMON_JSON, "purge did not give the file back"
    assert not chroot.path("/var/lib/nvdocker2").exists()
    assert not chroot.path("/etc/nvidia-container-runtime/config.toml").exists()
    assert not chroot.path("/usr/bin/nvidia-container-runtime").exists()


def test_install_without_docker_succeeds_and_says_what_to_do(packages, chroot):
    assert not chroot.path("/etc/docker").exists()
    assert not chroot.path("/usr/bin/dockerd").exists()
    deb = chroot.put(packages.deb)
    out = chroot.ok(f"{APT} install {deb}")
    said = script_lines(out)
    assert said[0] == "nvdocker2: /etc/docker did not exist (Docker not installed?): created it"
    assert said[1].startswith(
        "nvdocker2: installed the nvidia runtime in /etc/docker/daemon.json (backup "), out
    assert said[1].endswith(": the file did not exist before)"), out
    assert said[2:] == [NOT_RELOADED_LINE], out
    assert runtimes(chroot.path("/etc/docker/daemon.json").read_bytes()) == {
        "nvidia": {"path": RUNTIME}
    }
    chroot.ok(f"{APT} remove nvdocker2")
    config = chroot.path("/etc/docker/daemon.json")
    assert not config.exists() or "nvidia" not in runtimes(config.read_bytes())


def test_broken_daemon_json_stops_configure_until_fixed_or_skipped(packages, chroot):
    chroot.path("/etc/docker").mkdir()
    config = chroot.path("/etc/docker/daemon.json")
    broken = b'{\n    "debug": true,\n}\n'
    config.write_bytes(broken)
    deb = chroot.put(packages.deb)
    proc = chroot.sh(f"{APT} install {deb}")
    assert proc.returncode != 0
    assert "error: " in proc.stderr and "line " in proc.stderr
    assert "dpkg --configure -a" in proc.stderr
    assert '"error"' not in proc.stdout + proc.stderr, "the JSON result reached apt's output"
    assert config.read_bytes() == broken
    assert "half-configured" in chroot.ok("dpkg-query -W -f='${Status}' nvdocker2")

    config.write_bytes(b'{\n    "debug": true\n}\n')
    chroot.ok("dpkg --configure -a")
    assert runtimes(config.read_bytes()) == {"nvidia": {"path": RUNTIME}}
    assert "install ok installed" in chroot.ok("dpkg-query -W -f='${Status}' nvdocker2")


def test_skip_variable_installs_without_touching_docker(packages, chroot):
    deb = chroot.put(packages.deb)
    out = chroot.ok(f"{APT} install {deb}", env={"NVDOCKER2_SKIP_DOCKER_CONFIG": "1"})
    assert "NVDOCKER2_SKIP_DOCKER_CONFIG is set" in out
    assert not chroot.path("/etc/docker").exists()
