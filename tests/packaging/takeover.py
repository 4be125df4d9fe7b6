"""Taking a host over from NVIDIA's packages, as a check any Debian root can run (the packaging
tests' bookworm chroot, tests/packaging/test_takeover.py; the platform matrix's Debian 13 and
sid trees, tests/platforms/test_takeover_platform.py): stand-ins with NVIDIA's names and files
(TEST FIXTURES, built here with `dpkg-deb --build`, never NVIDIA's real packages) are
installed first, the admin edits config.toml (a conffile of NVIDIA's older packages, a file
their postinst writes in newer ones), then `apt-get install` of our .deb with no terminal: no
conffile prompt, the stand-ins go, config.toml keeps the admin's bytes and mode, and
/usr/bin/nvidia-container-runtime is ours.

`take_over(root, deb, deb_upgrade, work, generated)` needs of `root` what both the chroot
(pkgtest.Chroot) and a tree (trees.Tree) give: `path(inside)`, `put(file)` (into its /tmp),
`sh(command, env)` and `ok(command, env=)` (exit 0 asserted, its stdout returned)."""

from __future__ import annotations

from pathlib import Path

from pkgtest import APT, RUNTIME, UPGRADE_VERSION, run

from nvdocker2 import __version__

CONFIG = "/etc/nvidia-container-runtime/config.toml"
# NVIDIA's `nvidia-ctk config default` (v1.17), which its packages install as the conffile
NVIDIA_CONFIG = b"""#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"

[nvidia-container-cli]
environment = []
ldconfig = "@/sbin/ldconfig"
load-kmods = true

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
runtimes = ["docker-runc", "runc", "crun"]

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"
"""
ADMIN_EDIT = (b'\n[nvidia-container-runtime-hook]\nskip-mode-detection = true\n'
              b'# edited by the admin\n')
# NVIDIA's newer nvidia-container-toolkit-base ships no config.toml: its postinst writes it.
GENERATE = f"#!/bin/sh\nset -e\n[ -e {CONFIG} ] || nvidia-ctk config default > {CONFIG}\n"
STANDINS = {  # name: (version, depends, {path: bytes}, conffiles)
    "nvidia-container-toolkit-base": ("1.17.8-1", "", {
        "/usr/bin/nvidia-container-runtime": b"#!/bin/sh\necho NVIDIA stand-in runtime\n",
        "/usr/bin/nvidia-ctk": b"#!/bin/sh\necho NVIDIA stand-in nvidia-ctk\n",
        CONFIG: NVIDIA_CONFIG}, [CONFIG]),
    "nvidia-container-toolkit": ("1.17.8-1", "nvidia-container-toolkit-base (= 1.17.8-1)", {
        "/usr/bin/nvidia-container-runtime-hook": b"#!/bin/sh\necho NVIDIA stand-in hook\n"},
        []),
    "nvidia-container-runtime": ("3.14.0-1", "nvidia-container-toolkit (>= 1.17.8)", {}, []),
    "nvidia-docker2": ("2.14.0-1", "nvidia-container-toolkit (>= 1.17.8)", {
        "/usr/bin/nvidia-docker": b"#!/bin/sh\necho NVIDIA stand-in nvidia-docker\n"}, []),
}


def build_standin(where: Path, name: str, generated: bool) -> Path:
    """TEST FIXTURE: a .deb named like NVIDIA's package `name`, with stand-in files; with
    `generated`, its config.toml is written by its postinst instead of shipped."""
    version, depends, files, conffiles = STANDINS[name]
    if generated and CONFIG in files:
        files = {**files, "/usr/bin/nvidia-ctk": b"#!/bin/sh\ncat <<'EOF'\n"
                 + NVIDIA_CONFIG + b"EOF\n"}
        del files[CONFIG]
        conffiles = []
    tree = where / name
    (tree / "DEBIAN").mkdir(parents=True)
    control = (f"Package: {name}\nVersion: {version}\nArchitecture: all\n"
               "Maintainer: test fixture <fixture@packages.invalid>\n"
               + (f"Depends: {depends}\n" if depends else "")
               + "Description: TEST FIXTURE standing in for NVIDIA's package of this name\n")
    (tree / "DEBIAN/control").write_text(control)
    if generated and "/usr/bin/nvidia-ctk" in files:
        (tree / "DEBIAN/postinst").write_text(GENERATE)
        (tree / "DEBIAN/postinst").chmod(0o755)
        (tree / CONFIG.lstrip("/")).parent.mkdir(parents=True)
    if conffiles:
        (tree / "DEBIAN/conffiles").write_text("".join(c + "\n" for c in conffiles))
    for path, data in files.items():
        f = tree / path.lstrip("/")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
        f.chmod(0o755 if path.startswith("/usr/bin/") else 0o644)
    deb = where / f"{name}_{version}_all.deb"
    run(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(deb)])
    return deb


def take_over(root, deb: Path, deb_upgrade: Path, work: Path, generated: bool) -> None:
    """Our `deb` over the stand-ins in `root`, then `deb_upgrade` (version UPGRADE_VERSION)
    over ours; `work` is a fresh directory of this machine for the stand-ins' builds."""
    debs = [root.put(build_standin(work, name, generated)) for name in STANDINS]
    root.ok(f"dpkg -i {' '.join(debs)}")
    config = root.path(CONFIG)
    assert config.read_bytes() == NVIDIA_CONFIG
    with open(config, "ab") as f:
        f.write(ADMIN_EDIT)
    config.chmod(0o640)
    edited = config.read_bytes()

    out = root.ok(f"{APT} install {root.put(deb)} </dev/null 2>&1",
                  env={"NVDOCKER2_SKIP_DOCKER_CONFIG": "1"})
    assert "Configuration file" not in out, out  # no conffile prompt
    states = root.ok("dpkg-query -W -f='${Package} ${db:Status-Abbrev}\\n' "
                     + " ".join(STANDINS) + " nvdocker2 2>/dev/null || true")
    status = dict(line.split(" ", 1) for line in states.splitlines())
    assert status.pop("nvdocker2").strip() == "ii"
    assert all(not s.startswith("ii") for s in status.values()), states
    assert config.read_bytes() == edited, "the admin's config.toml changed"
    assert config.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in config.parent.iterdir()) == ["config.toml"]
    assert f"nvdocker2: kept the existing {CONFIG} as it was" in out, out
    assert root.ok(f"dpkg -S {CONFIG}").split(":")[0] == "nvdocker2"
    assert b"stand-in" not in root.path(RUNTIME).read_bytes()
    # Ours runs on the admin's file: its `runtimes` list sends even `state` through Python
    # (the launcher's shell path serves only a file that sets neither `runtimes` nor `debug`),
    # which finds runc on PATH as NVIDIA's list says.
    root.path("/tmp/fakebin").mkdir()
    runc = root.path("/tmp/fakebin/runc")
    runc.write_text('#!/bin/sh\necho "$0 $*" > /tmp/runc-argv\nexit 7\n')
    runc.chmod(0o755)
    state = root.sh(f"PATH=/tmp/fakebin:$PATH {RUNTIME} state x")
    assert state.returncode == 7, state.stdout + state.stderr
    assert root.path("/tmp/runc-argv").read_text() == "/tmp/fakebin/runc state x\n"
    assert root.ok("nvdocker2 --version").strip().endswith(__version__)
    assert not root.path("/usr/bin/nvidia-ctk").exists()
    # Purging NVIDIA's removed package later leaves the file, now ours, alone.
    root.ok("dpkg --purge " + " ".join(STANDINS))
    assert config.read_bytes() == edited, "purging NVIDIA's package took config.toml"
    # dpkg knows the admin changed it: an upgrade of ours keeps it (our default is the same)
    # and would ask, never overwrite, were it not.
    assert root.ok("dpkg --verify nvdocker2 || true").count(CONFIG) == 1
    out = root.ok(f"{APT} install {root.put(deb_upgrade)} </dev/null 2>&1",
                  env={"NVDOCKER2_SKIP_DOCKER_CONFIG": "1"})
    assert "Configuration file" not in out, out
    assert root.ok("nvdocker2 --version").strip().endswith(UPGRADE_VERSION)
    assert config.read_bytes() == edited, "our upgrade changed the admin's config.toml"
    assert sorted(p.name for p in config.parent.iterdir()) == ["config.toml"]
