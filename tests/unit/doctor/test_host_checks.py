"""The host's doctor checks against the fake host root of test_doctor_checks.py: the runtime,
the hook, config.toml, libnvidia-container and the low-level runtime; the driver, its device
nodes and WSL; config.toml against NVIDIA's toolkit."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path, PurePosixPath

import pytest
from fixtures.fake_driver import WSL_STORE, build_fake_wsl
from .test_checks import BTIME, DOCKERD_PID, DRIVER, FakeHost, assert_status, sh

import nvdocker2
from nvdocker2.doctor.model import FAIL, OK, SKIP, WARN



# -- runtime, hook, config.toml, libnvidia-container, runc ---------------------------------


def test_console_scripts_report_their_interpreters_nvdocker2_version(host):
    for exe, module in (
        ("nvidia-container-runtime", "runtime"),
        ("nvidia-container-runtime-hook", "hook"),
    ):
        host.exe(
            f"/usr/bin/{exe}",
            f"#!{sys.executable}\nimport sys\n"
            f"from nvdocker2.{module} import main\nsys.exit(main())\n",
        )
    results = host.run()
    assert_status(
        results,
        "runtime.installed",
        OK,
        f"nvdocker2 {nvdocker2.__version__}",
        "read from the script",
    )
    assert_status(results, "hook.installed", OK, "read from the script")


def test_runtime_and_hook_report_the_nvdocker2_version(host):
    results = host.run()
    assert_status(results, "runtime.installed", OK, f"nvdocker2 {nvdocker2.__version__}")
    assert_status(results, "hook.installed", OK, "/usr/bin/nvidia-container-runtime-hook")


def test_runtime_of_another_version_warns(host):
    # test fixture: an interpreter whose nvdocker2 is an older release
    host.exe("/opt/oldpy/python", sh("echo 0.0.9"))
    host.exe(
        "/usr/bin/nvidia-container-runtime",
        f"#!{host.path('/opt/oldpy/python')}\nfrom nvdocker2.runtime import main\n",
    )
    assert_status(
        host.run(), "runtime.installed", WARN, "nvdocker2 0.0.9", nvdocker2.__version__, "reinstall"
    )


def test_foreign_hook_warns(host):
    host.exe(
        "/usr/bin/nvidia-container-runtime-hook",
        sh('echo "NVIDIA Container Runtime Hook version 1.14.3"'),
    )
    assert_status(host.run(), "hook.installed", WARN, "not nvdocker2's", "1.14.3")


def test_missing_hook_fails(host):
    host.remove("/usr/bin/nvidia-container-runtime-hook")
    assert_status(host.run(), "hook.installed", FAIL, "not found", "install the nvdocker2")


def test_toolkit_config_bad_toml_and_bad_types_fail(host):
    host.file("/etc/nvidia-container-runtime/config.toml", "[nvidia-container-cli\n")
    assert_status(host.run(), "toolkit.config", FAIL, "config.toml")
    host.file(
        "/etc/nvidia-container-runtime/config.toml", '[nvidia-container-cli]\nno-cgroups = "yes"\n'
    )
    assert_status(host.run(), "toolkit.config", FAIL, "'nvidia-container-cli.no-cgroups'", "'yes'")
    host.file(
        "/etc/nvidia-container-runtime/config.toml", '[nvidia-container-runtime]\nmode = 3\n'
    )
    assert_status(
        host.run(),
        "toolkit.config",
        FAIL,
        "'nvidia-container-runtime.mode' must be a string",
        "correct that key",
    )


def test_toolkit_config_from_env_is_used(host):
    host.file("/srv/tk.toml", '[nvidia-container-runtime]\nruntimes = ["crun"]\n')
    host.env["NVIDIA_CONTAINER_RUNTIME_CONFIG"] = "/srv/tk.toml"
    results = host.run()
    assert_status(results, "toolkit.config", OK, "/srv/tk.toml", "NVIDIA_CONTAINER_RUNTIME_CONFIG")
    assert_status(results, "runtime.low-level", FAIL, "none of crun", "install runc")


def test_rootless_needs_no_cgroups(host):
    host.info["SecurityOptions"].append("name=rootless")
    assert_status(host.run(), "toolkit.rootless", FAIL, "rootless", "no-cgroups = true")
    host.file(
        "/etc/nvidia-container-runtime/config.toml", "[nvidia-container-cli]\nno-cgroups = true\n"
    )
    assert_status(host.run(), "toolkit.rootless", OK, "rootless")


def test_rootless_reads_the_users_config_toml_over_the_global_one(host):
    host.info["SecurityOptions"].append("name=rootless")
    host.env["HOME"] = "/home/u"
    host.file("/etc/nvidia-container-runtime/config.toml", "[nvidia-container-cli]\n"
              "no-cgroups = false\n")
    results = host.run()
    assert_status(results, "toolkit.rootless", FAIL, "/home/u/.config/nvidia-container-runtime/"
                  "config.toml", "nvdocker2 install as this user")
    user = host.file("/home/u/.config/nvidia-container-runtime/config.toml",
                     "[nvidia-container-cli]\nno-cgroups = true\n")
    results = host.run()
    assert_status(results, "toolkit.rootless", OK, "rootless", "per-user /home/u/.config/"
                  "nvidia-container-runtime/config.toml read over /etc/nvidia-container-runtime")
    assert_status(results, "toolkit.config", OK, "per-user /home/u/.config/")
    user.chmod(0o646)  # anyone may change what the rootless runtime does
    assert_status(host.run(), "toolkit.config", FAIL, "refusing this per-user config.toml",
                  "writable by other users", "correct that key in /home/u/.config/")


def test_rootful_docker_ignores_a_users_config_toml(host):
    host.env["HOME"] = "/home/u"
    host.file("/home/u/.config/nvidia-container-runtime/config.toml",
              "[nvidia-container-cli]\nno-cgroups = true\n")
    results = host.run()
    assert_status(results, "toolkit.rootless", OK, "rootful Docker, no-cgroups = false")
    assert "per-user" not in results["toolkit.config"].detail


def test_no_cgroups_on_rootful_warns(host):
    host.file(
        "/etc/nvidia-container-runtime/config.toml", "[nvidia-container-cli]\nno-cgroups = true\n"
    )
    assert_status(host.run(), "toolkit.rootless", WARN, "rootful", "no-cgroups")


def test_debug_log_in_missing_directory_warns(host):
    host.path("/var/log").mkdir(parents=True)
    host.file(
        "/etc/nvidia-container-runtime/config.toml",
        '[nvidia-container-runtime]\ndebug = "/var/log/nvidia-container-runtime.log"\n'
        '[nvidia-container-cli]\ndebug = "/nope/cli.log"\n',
    )
    r = assert_status(host.run(), "toolkit.debug-logs", WARN, "/nope/cli.log", "writable")
    assert "nvidia-container-runtime.log" not in r.detail


def test_cli_missing_fails_unless_direct_mode(host):
    host.remove("/usr/bin/nvidia-container-cli")
    results = host.run()
    assert_status(results, "cli.installed", FAIL, "not found", "libnvidia-container-tools")
    assert_status(results, "cli.info", SKIP, "cli.installed")
    host.file(
        "/etc/nvidia-container-runtime/config.toml", '[nvidia-container-runtime]\nmode = "direct"\n'
    )
    assert_status(host.run(), "cli.installed", SKIP, "direct")


def test_cli_info_failure_fails_with_driver_hint(host):
    host.exe(
        "/usr/bin/nvidia-container-cli",
        sh(
            'case "$1" in --version) echo "cli-version: 1.17.5";;\n'
            'info) echo "nvidia-container-cli: initialization error: nvml error: '
            'driver not loaded" '
            ">&2; exit 1;; esac"
        ),
    )
    results = host.run()
    assert_status(results, "cli.installed", OK, "1.17.5")
    assert_status(results, "cli.info", FAIL, "driver not loaded", "modprobe nvidia")


@pytest.mark.parametrize(
    "version, status",
    [("1.14.3", WARN), ("1.16.2", WARN), ("1.17.3", WARN), ("1.17.4", OK), ("1.18.0~rc.1", OK),
     ("2", OK)],
)
def test_a_libnvidia_container_without_the_escape_fixes_warns(host, version, status):
    host.exe("/usr/bin/nvidia-container-cli", sh(f'echo "cli-version: {version}"'))
    r = assert_status(host.run(), "cli.installed", status, version)
    if status == WARN:
        assert "CVE-2025-23359" in r.detail and "1.17.4 or newer" in r.hint


def test_a_dockerd_served_by_another_user_is_not_trusted_nor_its_path_used(host):
    """reference §8: the process behind the socket decides, and a user's is never trusted: its
    PATH (with a planted docker-runc first) is not searched."""
    from nvdocker2.engines.peer import Peer

    host.exe("/home/u/bin/docker-runc", sh("echo planted"))
    host.dockerd(
        ["dockerd", "-H", "unix:///var/run/docker.sock"],
        {"PATH": "/home/u/bin:/usr/bin"},
        start=time.time(),
    )
    host.file(f"/proc/{DOCKERD_PID}/status", "Uid:\t1000\t1000\t1000\t1000\n")
    results = host.run(peer_of=lambda sock: Peer(DOCKERD_PID, 1000, 1000))
    assert_status(results, "dockerd.trusted", FAIL, "uid 1000", "--docker-host")
    assert_status(results, "runtime.low-level", OK, "/usr/sbin/runc")
    assert_status(results, "dockerd.gpus", SKIP, "not trusted")
    # The same process owned by root and serving the socket is the dockerd.
    host.file(f"/proc/{DOCKERD_PID}/status", "Uid:\t0\t0\t0\t0\n")
    results = host.run(peer_of=lambda sock: Peer(DOCKERD_PID, 0, 0))
    assert_status(results, "dockerd.trusted", OK, f"pid {DOCKERD_PID} serves")


def test_with_nothing_answering_only_a_root_dockerd_is_taken_from_the_process_scan(host):
    """No peer to ask (the socket is gone): a process that says it listens there is taken
    only when root owns it, and a pidfile naming a user's process is ignored too."""
    host.file(f"/proc/{DOCKERD_PID}/status", "Uid:\t1000\t1000\t1000\t1000\n")
    host.file("/var/run/docker.pid", f"{DOCKERD_PID}\n")
    proc, why = host.context().dockerd_process()
    assert proc is None and "no dockerd process" in why
    host.file(f"/proc/{DOCKERD_PID}/status", "Uid:\t0\t0\t0\t0\n")
    assert host.context().dockerd_process()[0].pid == DOCKERD_PID


def test_under_socket_activation_the_root_dockerd_behind_init_is_taken(host):
    """systemd (pid 1) holds docker.socket and hands it to dockerd (`-H fd://`)."""
    from nvdocker2.engines.peer import Peer

    host.dockerd(["/usr/bin/dockerd", "-H", "fd://"], {"PATH": "/usr/bin"}, start=time.time())
    proc, _ = host.context(peer_of=lambda sock: Peer(1, 0, 0)).dockerd_process()
    assert proc is not None and proc.pid == DOCKERD_PID


def test_only_the_process_serving_the_socket_is_the_dockerd(host):
    """A root dockerd that says it listens on the socket is not the one when another process
    serves it: the peer decides."""
    from nvdocker2.engines.peer import Peer

    host.file("/proc/77/cmdline", "nginx\0")
    host.file("/proc/77/status", "Uid:\t0\t0\t0\t0\n")
    results = host.run(peer_of=lambda sock: Peer(77, 0, 0))
    assert_status(results, "dockerd.trusted", SKIP, "pid 77 serves", "not a dockerd")


def test_cli_that_hangs_is_cut_short(host):
    host.exe(
        "/usr/bin/nvidia-container-cli",
        sh('case "$1" in --version) echo "cli-version: 1";;\ninfo) exec sleep 30;; esac'),
    )
    start = time.monotonic()
    results = host.run()
    assert time.monotonic() - start < 5
    assert_status(results, "cli.info", FAIL, "timed out after 1.5 s", "persistence mode")


def test_low_level_runtime_found_and_missing(host):
    assert_status(host.run(), "runtime.low-level", OK, "/usr/sbin/runc", "runc version 1.1.5")
    host.remove("/usr/sbin/runc")
    assert_status(host.run(), "runtime.low-level", FAIL, "none of", "install runc")


# -- driver --------------------------------------------------------------------------------


def test_no_driver_fails_everything_driver_with_hints(host):
    import shutil

    shutil.rmtree(host.path("/proc/driver"))
    host.remove("/proc/modules")
    for n in ("nvidia0", "nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools"):
        host.remove(f"/dev/{n}")
    host.remove("/usr/bin/nvidia-smi")
    results = host.run()
    assert_status(results, "driver.kernel", FAIL, "/proc/driver/nvidia/version", "modprobe nvidia")
    assert_status(results, "driver.nvidia-smi", FAIL, "not found")
    assert_status(results, "driver.modules", FAIL, "nvidia, nvidia_uvm", "/sys/module")
    assert_status(results, "driver.devices", FAIL, "/dev/nvidiactl missing", "nvidia-modprobe")
    assert_status(results, "driver.libraries", SKIP, "no kernel module")


def test_no_driver_is_fixed_first_and_the_cli_check_waits_for_it(host):
    """On a host with dockerd but no driver and no nvidia-container-cli, the driver is what to
    fix first: the cli check is skipped as blocked by it, not reported as its own failure."""
    from nvdocker2.doctor.render import first_to_fix

    import shutil

    shutil.rmtree(host.path("/proc/driver"))
    host.remove("/usr/bin/nvidia-container-cli")
    results = host.run()
    assert_status(results, "driver.kernel", FAIL, "/proc/driver/nvidia/version")
    assert_status(results, "cli.installed", SKIP, "needs driver.kernel, which failed")
    assert_status(results, "cli.info", SKIP, "cli.installed")
    assert first_to_fix(list(results.values())).id == "driver.kernel"


def test_a_dockerd_no_systemd_unit_runs_is_restarted_as_it_was_started(host):
    """A dockerd started from a shell (its cgroup a login session's, not docker.service's) is
    not what `systemctl restart docker` restarts: the hints name its pid and its parent."""
    host.dockerd(["dockerd"], {"PATH": "/usr/bin"}, start=BTIME + 100)  # before the hook
    d = f"/proc/{DOCKERD_PID}"
    host.file(f"{d}/cgroup", "0::/user.slice/user-0.slice/session-3.scope\n")
    stat = host.path(f"{d}/stat").read_text().replace(") S 0 ", ") S 777 ")
    host.file(f"{d}/stat", stat)
    host.file("/proc/777/comm", "bash\n")
    host.daemon_json({})
    results = host.run()
    r = assert_status(results, "dockerd.gpus", WARN, f"pid {DOCKERD_PID}")
    assert "systemctl" not in r.hint
    assert f"restart dockerd the way it was started (pid {DOCKERD_PID}, started by bash " \
           "(pid 777)" in r.hint
    r = assert_status(results, "dockerd.sync", WARN, "does not define")
    assert r.hint == f"reload dockerd: sudo kill -HUP {DOCKERD_PID}"


def test_library_version_mismatch_fails(host):
    host.remove(f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{DRIVER}")
    host.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.129.03", "")
    assert_status(
        host.run(), "driver.libraries", FAIL, f"kernel module {DRIVER}", "535.129.03", "reboot"
    )


def test_leftover_libraries_warn(host):
    host.file("/usr/lib64/libnvidia-ml.so.470.1.1", "")
    assert_status(host.run(), "driver.libraries", WARN, "/usr/lib64/libnvidia-ml.so.470.1.1")


def test_nvidia_smi_version_mismatch_fails_with_reboot_hint(host):
    host.exe(
        "/usr/bin/nvidia-smi",
        sh('echo "Failed to initialize NVML: Driver/library version mismatch"; exit 18'),
    )
    assert_status(host.run(), "driver.nvidia-smi", FAIL, "version mismatch", "reboot")


def test_missing_uvm_module_fails_and_missing_modeset_warns(host):
    host.file("/proc/modules", "nvidia 56381440 0 - Live 0x0\n")
    assert_status(host.run(), "driver.modules", FAIL, "nvidia_uvm", "modprobe")
    host.file("/proc/modules", "nvidia 1 0 - Live 0x0\nnvidia_uvm 1 0 - Live 0x0\n")
    assert_status(host.run(), "driver.modules", WARN, "nvidia_modeset")


def test_device_node_with_wrong_major_or_type_fails(host):
    host.chardev("/dev/nvidia0", 10, 0)
    host.remove("/dev/nvidiactl")
    host.file("/dev/nvidiactl", "")
    r = assert_status(
        host.run(),
        "driver.devices",
        FAIL,
        "/dev/nvidia0 has major 10",
        "/dev/nvidiactl is not a character device",
    )
    assert "nvidia-uvm" not in r.detail


def test_dev_char_links_with_systemd_cgroup_driver(host):
    host.info["CgroupDriver"] = "systemd"
    assert_status(
        host.run(),
        "driver.dev-char",
        WARN,
        "/dev/char/195:0 → /dev/nvidia0",
        "create-dev-char-symlinks",
    )
    host.path("/dev/char").mkdir()
    for link, node in (
        ("195:0", "nvidia0"),
        ("195:255", "nvidiactl"),
        ("195:254", "nvidia-modeset"),
        ("511:0", "nvidia-uvm"),
        ("511:1", "nvidia-uvm-tools"),
    ):
        os.symlink(f"../{node}", host.path(f"/dev/char/{link}"))
    assert_status(host.run(), "driver.dev-char", OK)
    host.info["CgroupDriver"] = "cgroupfs"
    assert_status(host.run(), "driver.dev-char", SKIP, "cgroupfs")


def test_dev_char_warns_until_create_dev_char_symlinks_ran(host):
    from ..cli_run import cli

    host.info["CgroupDriver"] = "systemd"
    host.chardev("/dev/nvidia-caps/nvidia-cap1", 508, 1)
    r = host.run()["driver.dev-char"]
    assert r.status == WARN and "/dev/char/508:1 → /dev/nvidia-caps/nvidia-cap1" in r.detail
    assert "nvdocker2 system create-dev-char-symlinks" in r.hint
    code, _, err = cli("system", "create-dev-char-symlinks", "--dev-root", str(host.root))
    assert code == 0, err
    assert_status(host.run(), "driver.dev-char", OK, "(6)")


def test_control_nodes_warn_until_create_device_nodes_ran(host):
    from ..cli_run import cli

    host.path("/dev/nvidia-uvm-tools").unlink()
    host.path("/dev/nvidia-modeset").unlink()
    r = host.run()["driver.control-nodes"]
    assert r.status == WARN
    assert r.detail.startswith("missing: /dev/nvidia-modeset, /dev/nvidia-uvm-tools ")
    assert "nvdocker2 system create-device-nodes" in r.hint
    code, _, err = cli("system", "create-device-nodes", "--dev-root", str(host.root),
                       "--proc-root", str(host.root))
    assert code == 0, err
    assert_status(host.run(), "driver.control-nodes", OK, "4 control node(s)")
    assert_status(host.run(), "driver.devices", OK)
    host.file("/proc/devices", "Character devices:\n  1 mem\n")
    assert_status(host.run(), "driver.control-nodes", SKIP, "no NVIDIA driver")


def test_wsl2_skips_native_driver_checks(host):
    import shutil

    shutil.rmtree(host.path("/proc/driver"))
    host.chardev("/dev/dxg", 10, 63)
    results = host.run()
    assert_status(results, "wsl", WARN, "/usr/lib/wsl/lib/libdxcore.so is missing; no NVIDIA"
                  " driver store with libcuda.so.1.1 (no /usr/lib/wsl/drivers/nv*.inf_amd64_*")
    wsl = build_fake_wsl(host.path("/"), dxg=False, skip=(f"{WSL_STORE}/nvidia-smi",))
    assert_status(host.run(), "wsl", WARN, f"{WSL_STORE}/nvidia-smi is missing")
    (wsl.path(WSL_STORE) / "nvidia-smi").write_text("")
    results = host.run()
    assert_status(results, "wsl", OK, f"/dev/dxg, libdxcore.so in /usr/lib/wsl/lib, NVIDIA"
                  f" driver store {WSL_STORE}")
    for i in ("driver.kernel", "driver.modules", "driver.devices", "driver.libraries"):
        assert_status(results, i, SKIP, "WSL2")


def _package_dir(host: FakeHost, d: str, version: str) -> None:
    host.file(f"{d}/nvdocker2/__init__.py", f'"""nvdocker2."""\n\n__version__ = "{version}"\n')


def test_version_of_the_package_launchers_is_read_from_their_package_dir(host):
    from nvdocker2.runtime import launcher

    _package_dir(host, "/usr/lib/python3/dist-packages", nvdocker2.__version__)
    for name, text in launcher.render(
        "/usr/bin/python3", ["/usr/lib/python3/dist-packages"]
    ).items():
        host.exe(f"/usr/bin/{name}", text)
    results = host.run()
    assert_status(results, "runtime.installed", OK, f"nvdocker2 {nvdocker2.__version__}")
    assert_status(results, "hook.installed", OK, f"nvdocker2 {nvdocker2.__version__}")
    _package_dir(host, "/usr/lib/python3/dist-packages", "0.0.7")
    assert_status(host.run(), "hook.installed", WARN, "nvdocker2 0.0.7", "reinstall")
    host.remove("/usr/lib/python3/dist-packages/nvdocker2/__init__.py")
    assert_status(
        host.run(),
        "runtime.installed",
        FAIL,
        "cannot start",
        "/usr/lib/python3/dist-packages holds",
        "reinstall",
    )


def test_version_of_the_rpm_launcher_is_read_from_its_package_dir(host):
    _package_dir(host, "/usr/lib/nvdocker2", "9.9.9")
    host.exe(
        "/usr/bin/nvidia-container-runtime",
        '#!/usr/bin/python3 -s\nimport sys\nsys.path.insert(0, "/usr/lib/nvdocker2")\n'
        "from nvdocker2.runtime import main\nsys.exit(main())\n",
    )
    assert_status(host.run(), "runtime.installed", WARN, "nvdocker2 9.9.9", nvdocker2.__version__)


def test_direct_mode_finds_the_driver_under_driver_root(host):
    from fixtures.fake_driver import build_fake_driver

    assert_status(host.run(), "direct.driver", SKIP, "legacy")
    host.file(
        "/etc/nvidia-container-runtime/config.toml",
        '[nvidia-container-runtime]\nmode = "direct"\ndriver-root = "/drv"\n',
    )
    r = assert_status(
        host.run(), "direct.driver", FAIL, "/drv/proc/driver/nvidia/gpus", "driver-root"
    )
    assert str(host.root) not in r.detail
    build_fake_driver(host.path("/drv"))
    results = host.run()
    assert_status(results, "direct.driver", OK, "driver-root /drv", f"driver {DRIVER}", "2 GPU(s)")
    host.remove("/usr/bin/nvidia-container-cli")
    assert_status(host.run(), "cli.installed", SKIP, "direct")


def test_open_kernel_module_version_line_is_read(host):
    host.file(
        "/proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
        "(dvs-builder@U16-I3-B13-4-3)  Tue Mar  5 22:15:33 UTC 2024\n",
    )
    results = host.run()
    assert_status(results, "driver.kernel", OK, "kernel module 550.54.15")
    assert_status(results, "driver.libraries", FAIL, "kernel module 550.54.15", DRIVER)


# -- config.toml against NVIDIA's toolkit (docs/nvidia-toolkit.md) --------------------------

NVIDIA_MAIN = Path(__file__).parents[2] / "data" / "nvidia-config" / "main.toml"


def test_nvidias_own_file_is_valid_its_unused_keys_listed_and_auto_resolved(host):
    from fixtures.fake_driver import build_fake_driver

    text = NVIDIA_MAIN.read_text().replace('#root = "/run/nvidia/driver"', 'root = "/drv"')
    host.file("/etc/nvidia-container-runtime/config.toml", text)
    results = host.run()
    assert_status(results, "toolkit.config", OK, "valid")
    r = assert_status(results, "toolkit.keys", OK,
                      "nvidia-container-runtime-hook.skip-mode-detection: not used by nvdocker2",
                      "nvidia-ctk.path: not used")
    assert "modes.cdi" not in r.detail  # cdi mode reads its keys
    assert_status(results, "toolkit.mode", OK, "mode = 'auto' resolves to direct",
                  "no GPU in /drv/proc/driver/nvidia/gpus", "jit-cdi")
    build_fake_driver(host.path("/drv"))
    results = host.run()
    assert_status(results, "toolkit.mode", OK, "resolves to direct: GPUs in /drv/proc")
    assert_status(results, "direct.driver", OK, "driver-root /drv", "2 GPU(s)")
    host.file("/drv/etc/nv_tegra_release", "# R36\n")
    import shutil

    shutil.rmtree(host.path("/drv/proc/driver/nvidia/gpus"))
    assert_status(host.run(), "toolkit.mode", OK, "resolves to csv", "Tegra")


def test_unknown_keys_warn_and_every_nvidia_mode_is_served(host):
    path = "/etc/nvidia-container-runtime/config.toml"
    host.file(path, '[nvidia-container-runtime]\nmode = "fast"\nspeed = 3\n')
    results = host.run()
    assert_status(results, "toolkit.config", OK, "valid")
    assert_status(results, "toolkit.keys", WARN, "'fast' is a mode no NVIDIA release knows",
                  "key 'nvidia-container-runtime.speed' is not one any NVIDIA release knows")
    assert_status(results, "toolkit.mode", OK, "mode = 'fast' resolves to")
    host.file(path, '[nvidia-container-runtime]\nmode = "cdi"\n')
    assert_status(host.run(), "toolkit.mode", OK, "mode = 'cdi'")
    host.file(path, '[nvidia-container-runtime]\nmode = "csv"\n')
    assert_status(host.run(), "toolkit.mode", OK, "mode = 'csv'")


def test_every_hint_that_names_an_nvdocker2_command_carries_the_config_given(host):
    """doctor --config PATH: the commands its hints suggest change PATH, not the default
    file (a broken file, a missing runtime entry, a default naming no runtime)."""
    given = "/srv/docker conf/daemon.json"
    host.daemon_json({"default-runtime": "nvidia"}, given)
    results = host.run(config_override=PurePosixPath(given))
    assert_status(results, "config.runtime", FAIL,
                  "run: nvdocker2 install --config '/srv/docker conf/daemon.json'")
    assert_status(results, "config.default-runtime", FAIL,
                  "nvdocker2 uninstall --config '/srv/docker conf/daemon.json' repairs")
    for r in results.values():
        if r.hint and "nvdocker2 install" in r.hint:
            assert "--config '/srv/docker conf/daemon.json'" in r.hint, r
