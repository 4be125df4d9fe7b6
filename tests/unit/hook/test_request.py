"""The hook's decision table (reference §4 rules 2–6): container env, privilege, mounts and config
→ the exact nvidia-container-cli argv, nothing (not a GPU container), or the exact refusal."""

from __future__ import annotations

import pytest

from nvdocker2.hook.cli_argv import build_argv, cli_environment
from nvdocker2.hook.request import (
    Request,
    RequestError,
    container_request,
    is_privileged,
    parse_device_list,
    request_from_spec,
)
from nvdocker2.toolkit_config import ToolkitConfig

BASE = ["/usr/bin/nvidia-container-cli", "--load-kmods", "configure", "--ldconfig=@/sbin/ldconfig"]
TAIL = ["--pid=42", "/run/bundle/rootfs"]
CU = ["--compute", "--utility"]
ALL_CAPS = ["--compute", "--utility", "--video", "--graphics", "--display", "--compat32", "--ngx"]
UUID = "GPU-b8ea3855-276c-c9cb-b366-c6fa655957c5"
MIG_UUID = "MIG-0f6d3ba8-5e97-5d3c-a9e5-6fa3a5c4c0b2"


def config(**changes) -> ToolkitConfig:
    cli = changes.pop("cli", {})
    base = ToolkitConfig()
    return base.replace(cli=base.cli.replace(**cli), **changes)


def argv_for(env, privileged=False, mounts=(), cfg=None):
    cfg = cfg or config()
    request = container_request(env, privileged, list(mounts), cfg)
    if request is None:
        return None
    return build_argv("/usr/bin/nvidia-container-cli", request, cfg, 42, "/run/bundle/rootfs")


def devnull(dest):
    return {"destination": dest, "source": "/dev/null", "type": "bind", "options": ["bind"]}


# (id, env, privileged, mounts, config changes, expected argv middle or None)
DECISIONS = [
    ("no env", [], False, [], {}, None),
    ("unrelated env", ["PATH=/bin", "HOME=/root"], False, [], {}, None),
    ("all", ["NVIDIA_VISIBLE_DEVICES=all"], False, [], {}, ["--device=all", *CU]),
    ("indices", ["NVIDIA_VISIBLE_DEVICES=0,1"], False, [], {}, ["--device=0,1", *CU]),
    ("trimmed", ["NVIDIA_VISIBLE_DEVICES= 0 , 1 "], False, [], {}, ["--device=0,1", *CU]),
    ("duplicates dropped", ["NVIDIA_VISIBLE_DEVICES=1,0,1"], False, [], {},
     ["--device=1,0", *CU]),
    ("last duplicate env wins", ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=3"],
     False, [], {}, ["--device=3", *CU]),
    ("gpu uuid", [f"NVIDIA_VISIBLE_DEVICES={UUID}"], False, [], {},
     [f"--device={UUID}", *CU]),
    ("mig uuid and index", [f"NVIDIA_VISIBLE_DEVICES={MIG_UUID},0:1"], False, [], {},
     [f"--device={MIG_UUID},0:1", *CU]),
    ("none: driver but no device", ["NVIDIA_VISIBLE_DEVICES=none"], False, [], {}, CU),
    ("void", ["NVIDIA_VISIBLE_DEVICES=void"], False, [], {}, None),
    ("void anywhere", ["NVIDIA_VISIBLE_DEVICES=0,void"], False, [], {}, None),
    ("empty", ["NVIDIA_VISIBLE_DEVICES="], False, [], {}, None),
    ("blank", ["NVIDIA_VISIBLE_DEVICES=  "], False, [], {}, None),
    ("legacy image means all",
     ["CUDA_VERSION=11.8.0"], False, [], {},
     ["--device=all", *ALL_CAPS, "--require=cuda>=11.8"]),
    ("legacy image, caps given", ["CUDA_VERSION=10.2", "NVIDIA_DRIVER_CAPABILITIES=utility"],
     False, [], {}, ["--device=all", "--utility", "--require=cuda>=10.2"]),
    ("legacy image, empty devices still means no gpu",
     ["CUDA_VERSION=11.8.0", "NVIDIA_VISIBLE_DEVICES="], False, [], {}, None),
    ("new image with require is not legacy",
     ["CUDA_VERSION=12.2.0", "NVIDIA_REQUIRE_CUDA=cuda>=12.2"], False, [], {}, None),
    ("new image with devices",
     ["CUDA_VERSION=12.2.0", "NVIDIA_REQUIRE_CUDA=cuda>=12.2 brand=tesla,driver>=470",
      "NVIDIA_VISIBLE_DEVICES=0"], False, [], {},
     ["--device=0", *CU, "--require=cuda>=12.2 brand=tesla,driver>=470"]),
    ("caps all", ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"], False, [], {},
     ["--device=0", *ALL_CAPS]),
    ("caps ordered as the cli flags",
     ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=ngx, video,compute"],
     False, [], {}, ["--device=0", "--compute", "--video", "--ngx"]),
    ("caps empty means default", ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES="],
     False, [], {}, ["--device=0", *CU]),
    ("caps all within a restricted supported set",
     ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"], False, [],
     {"supported_driver_capabilities": ("utility", "graphics")},
     ["--device=0", "--utility", "--graphics"]),
    ("default caps within a restricted supported set", ["NVIDIA_VISIBLE_DEVICES=0"], False, [],
     {"supported_driver_capabilities": ("utility",)}, ["--device=0", "--utility"]),
    ("requirements sorted by variable name",
     ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_ZZZ=driver>=500", "NVIDIA_REQUIRE_ARCH=arch=x86",
      "NVIDIA_REQUIRE_EMPTY="], False, [], {},
     ["--device=0", *CU, "--require=arch=x86", "--require=driver>=500"]),
    ("disable require by env", ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_A=driver>=500",
                                "NVIDIA_DISABLE_REQUIRE=true"], False, [], {}, ["--device=0", *CU]),
    ("disable require by env 1", ["CUDA_VERSION=11.0", "NVIDIA_DISABLE_REQUIRE=1"], False, [], {},
     ["--device=all", *ALL_CAPS]),
    ("disable require false keeps them", ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_A=x>1",
                                          "NVIDIA_DISABLE_REQUIRE=false"], False, [], {},
     ["--device=0", *CU, "--require=x>1"]),
    ("disable require by config", ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_A=x>1"], False,
     [], {"disable_require": True}, ["--device=0", *CU]),
    ("mig config privileged", ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=0",
                               "NVIDIA_MIG_MONITOR_DEVICES=all"], True, [], {},
     ["--device=0", "--mig-config=0", "--mig-monitor=all", *CU]),
    ("unprivileged env refused by config", ["NVIDIA_VISIBLE_DEVICES=0"], False, [],
     {"accept_envvar_unprivileged": False}, None),
    ("privileged env accepted whatever the config", ["NVIDIA_VISIBLE_DEVICES=0"], True, [],
     {"accept_envvar_unprivileged": False}, ["--device=0", *CU]),
    ("legacy unprivileged refused by config", ["CUDA_VERSION=11.0"], False, [],
     {"accept_envvar_unprivileged": False}, None),
    ("volume mounts give the list", ["NVIDIA_VISIBLE_DEVICES=all"], False,
     [devnull("/var/run/nvidia-container-devices/1"),
      devnull("/var/run/nvidia-container-devices/0")],
     {"accept_volume_mounts": True}, ["--device=1,0", *CU]),
    ("volume mounts count for unprivileged when env does not", [], False,
     [devnull("/var/run/nvidia-container-devices/all")],
     {"accept_volume_mounts": True, "accept_envvar_unprivileged": False}, ["--device=all", *CU]),
    ("volume mounts off: mounts ignored", ["NVIDIA_VISIBLE_DEVICES=2"], False,
     [devnull("/var/run/nvidia-container-devices/0")], {}, ["--device=2", *CU]),
    ("volume mounts on but none: env used", ["NVIDIA_VISIBLE_DEVICES=2"], False,
     [{"destination": "/var/run/nvidia-container-devices/0", "source": "/etc/passwd"}],
     {"accept_volume_mounts": True}, ["--device=2", *CU]),
    ("swarm resource first", ["NVIDIA_VISIBLE_DEVICES=0", "DOCKER_RESOURCE_GPU=3"], False, [],
     {"swarm_resource": "DOCKER_RESOURCE_GPU"}, ["--device=3", *CU]),
    ("swarm resource absent falls back", ["NVIDIA_VISIBLE_DEVICES=0"], False, [],
     {"swarm_resource": "DOCKER_RESOURCE_GPU"}, ["--device=0", *CU]),
    ("cli settings", ["NVIDIA_VISIBLE_DEVICES=0"], False, [],
     {"cli": {"root": "/run/nvidia/driver", "debug": "/var/log/cli.log", "user": "root:video",
              "no_cgroups": True, "ldconfig": "@/usr/sbin/ldconfig.real", "load_kmods": False}},
     None),  # replaced below: global flags go before `configure`
]


def _expected(middle):
    return None if middle is None else [*BASE, *middle, *TAIL]


@pytest.mark.parametrize(
    "env,privileged,mounts,changes,middle",
    [pytest.param(*case[1:], id=case[0]) for case in DECISIONS if case[0] != "cli settings"],
)
def test_decision_gives_exact_cli_argv(env, privileged, mounts, changes, middle):
    assert argv_for(env, privileged, mounts, config(**changes)) == _expected(middle)


def test_cli_settings_place_global_flags_before_configure():
    cfg = config(cli={"root": "/run/nvidia/driver", "debug": "/var/log/cli.log",
                      "user": "root:video", "no_cgroups": True,
                      "ldconfig": "@/usr/sbin/ldconfig.real", "load_kmods": False})
    assert argv_for(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_X=a>1"], cfg=cfg) == [
        "/usr/bin/nvidia-container-cli", "--root=/run/nvidia/driver", "--debug=/var/log/cli.log",
        "--user=root:video", "configure", "--ldconfig=@/usr/sbin/ldconfig.real", "--no-cgroups",
        "--device=0", "--compute", "--utility", "--require=a>1", "--pid=42", "/run/bundle/rootfs",
    ]


def test_no_ldconfig_no_flag():
    cfg = config(cli={"ldconfig": None})
    assert argv_for(["NVIDIA_VISIBLE_DEVICES=0"], cfg=cfg) == [
        "/usr/bin/nvidia-container-cli", "--load-kmods", "configure", "--device=0", *CU, *TAIL]


BAD_IDS = "invalid device id"
# (id, env, privileged, mounts, config changes, exact message)
REFUSALS = [
    ("option smuggled in a list", ["NVIDIA_VISIBLE_DEVICES=0,--root=/tmp"], False, [], {},
     "NVIDIA_VISIBLE_DEVICES: invalid device id '--root=/tmp' (expected all, none, a GPU index"
     " like 0, a MIG index like 0:1, or a GPU-/MIG- UUID)"),
    ("negative index", ["NVIDIA_VISIBLE_DEVICES=-1"], False, [], {}, "'-1'"),
    ("path", ["NVIDIA_VISIBLE_DEVICES=../x"], False, [], {}, "'../x'"),
    ("space inside", ["NVIDIA_VISIBLE_DEVICES=0 1"], False, [], {}, "'0 1'"),
    ("newline inside", ["NVIDIA_VISIBLE_DEVICES=0\n1"], False, [], {}, "'0\\n1'"),
    ("unicode digit", ["NVIDIA_VISIBLE_DEVICES=\uff11"], False, [], {}, BAD_IDS),
    ("bad uuid", ["NVIDIA_VISIBLE_DEVICES=GPU-xyz"], False, [], {}, "'GPU-xyz'"),
    ("bare prefix", ["NVIDIA_VISIBLE_DEVICES=GPU-"], False, [], {}, "'GPU-'"),
    ("dash after prefix", ["NVIDIA_VISIBLE_DEVICES=GPU--1"], False, [], {}, "'GPU--1'"),
    ("old mig form with slashes", ["NVIDIA_VISIBLE_DEVICES=MIG-GPU-b8ea/1/0"], False, [], {},
     "'MIG-GPU-b8ea/1/0'"),
    ("mig index half", ["NVIDIA_VISIBLE_DEVICES=0:"], False, [], {}, "'0:'"),
    ("name", ["NVIDIA_VISIBLE_DEVICES=gpu0"], False, [], {}, "'gpu0'"),
    ("empty id", ["NVIDIA_VISIBLE_DEVICES=0,,1"], False, [], {},
     "NVIDIA_VISIBLE_DEVICES: empty device id in '0,,1'"),
    ("all mixed", ["NVIDIA_VISIBLE_DEVICES=all,0"], False, [], {},
     "NVIDIA_VISIBLE_DEVICES: 'all' cannot be combined with other device ids in 'all,0'"),
    ("10 000 ids", ["NVIDIA_VISIBLE_DEVICES=" + ",".join(str(i) for i in range(10000))], False,
     [], {}, "NVIDIA_VISIBLE_DEVICES: too many device ids (10000, at most 1024)"),
    ("huge id", ["NVIDIA_VISIBLE_DEVICES=GPU-" + "a" * 500], False, [], {}, BAD_IDS),
    ("unknown capability", ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,gpu"],
     False, [], {},
     "NVIDIA_DRIVER_CAPABILITIES: unknown capability 'gpu' is not supported here (supported:"
     " compat32,compute,display,graphics,ngx,utility,video)"),
    ("capability not supported here",
     ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=display"], False, [],
     {"supported_driver_capabilities": ("compute", "utility")},
     "NVIDIA_DRIVER_CAPABILITIES: known capability 'display' is not supported here (supported:"
     " compute,utility)"),
    ("mig config unprivileged", ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"],
     False, [], {},
     "NVIDIA_MIG_CONFIG_DEVICES is only allowed in privileged containers (CAP_SYS_ADMIN)"),
    ("mig monitor unprivileged", ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_MONITOR_DEVICES=0"],
     False, [], {},
     "NVIDIA_MIG_MONITOR_DEVICES is only allowed in privileged containers (CAP_SYS_ADMIN)"),
    ("mig config bad id privileged",
     ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=--x"], True, [], {},
     "NVIDIA_MIG_CONFIG_DEVICES: invalid device id '--x'"),
    ("volume mount path escape", [], False,
     [devnull("/var/run/nvidia-container-devices/../../etc")], {"accept_volume_mounts": True},
     "mounts under /var/run/nvidia-container-devices/: invalid device id '../../etc'"),
    ("swarm resource bad id", ["DOCKER_RESOURCE_GPU=-x"], False, [],
     {"swarm_resource": "DOCKER_RESOURCE_GPU"}, "DOCKER_RESOURCE_GPU: invalid device id '-x'"),
    ("legacy bad cuda version", ["CUDA_VERSION=abc"], False, [], {},
     "CUDA_VERSION: 'abc' is not a CUDA version like 11.8 or 11.8.0"),
    ("requirement with control characters",
     ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_X=cuda>=1\n--root=/"], False, [], {},
     "NVIDIA_REQUIRE_X: requirement too long or has control characters"),
]


@pytest.mark.parametrize(
    "env,privileged,mounts,changes,message",
    [pytest.param(*case[1:], id=case[0]) for case in REFUSALS],
)
def test_refused_request_names_the_problem(env, privileged, mounts, changes, message):
    with pytest.raises(RequestError) as raised:
        container_request(env, privileged, list(mounts), config(**changes))
    assert message in raised.value.message
    assert "\n" not in raised.value.message.replace("\\n", "")


@pytest.mark.parametrize("privileged", [False, True])
@pytest.mark.parametrize("accept_unprivileged", [False, True])
@pytest.mark.parametrize("value", [None, "", "void", "none", "all", "0,1"])
@pytest.mark.parametrize("legacy", [False, True])
def test_privilege_matrix(privileged, accept_unprivileged, value, legacy):
    env = ["CUDA_VERSION=11.2.1"] if legacy else []
    if value is not None:
        env.append(f"NVIDIA_VISIBLE_DEVICES={value}")
    cfg = config(accept_envvar_unprivileged=accept_unprivileged)
    request = container_request(env, privileged, [], cfg)
    wanted = value if value is not None else ("all" if legacy else None)
    if wanted in (None, "", "void") or not (privileged or accept_unprivileged):
        assert request is None
        return
    assert request.devices == (("0", "1") if wanted == "0,1" else wanted)
    assert request.privileged is privileged
    assert request.requirements == (("cuda>=11.2",) if legacy else ())


def test_request_is_frozen_and_says_device_list():
    request = container_request(["NVIDIA_VISIBLE_DEVICES=0,1"], False, [], config())
    assert request == Request(devices=("0", "1"), capabilities=("compute", "utility"))
    assert request.device_list == "0,1"
    with pytest.raises(AttributeError):
        request.devices = "all"  # noqa


def test_parse_device_list_forms():
    assert parse_device_list("all", "X") == "all"
    assert parse_device_list(" none ", "X") == "none"
    assert parse_device_list("0,0:1,GPU-ab-cd", "X") == ("0", "0:1", "GPU-ab-cd")


def test_privileged_is_cap_sys_admin_in_bounding_set():
    assert is_privileged({"process": {"capabilities": {"bounding": ["CAP_SYS_ADMIN"]}}})
    assert not is_privileged({"process": {"capabilities": {"effective": ["CAP_SYS_ADMIN"]}}})
    assert not is_privileged({"process": {}})
    assert not is_privileged({"process": {"capabilities": {"bounding": "CAP_SYS_ADMIN"}}})


def test_request_from_spec_reads_env_privilege_and_mounts():
    spec = {
        "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=0"],
                    "capabilities": {"bounding": ["CAP_CHOWN", "CAP_SYS_ADMIN"]}},
        "mounts": [devnull("/var/run/nvidia-container-devices/1")],
    }
    request = request_from_spec(spec, config(accept_volume_mounts=True))
    assert request.devices == ("1",) and request.mig_config == ("0",) and request.privileged


@pytest.mark.parametrize("spec,message", [
    ({"process": "x"}, "'process' must be an object"),
    ({"process": {"env": "NVIDIA_VISIBLE_DEVICES=0"}}, "'process.env' must be a list"),
    ({"process": {"env": [1]}}, "non-string entry"),
    ({"process": {"env": []}, "mounts": {}}, "'mounts' must be a list"),
])
def test_request_from_malformed_spec_is_refused(spec, message):
    with pytest.raises(RequestError) as raised:
        request_from_spec(spec, config())
    assert message in raised.value.message


def test_cli_environment_is_built_from_scratch():
    cfg = config(cli={"environment": ("NVIDIA_CTK_DEBUG=1", "PATH=/opt/nvidia/bin")})
    assert cli_environment(config()) == {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    assert cli_environment(cfg) == {"PATH": "/opt/nvidia/bin", "NVIDIA_CTK_DEBUG": "1"}


def test_image_env_never_reaches_the_cli_env():
    env = ["NVIDIA_VISIBLE_DEVICES=0", "LD_PRELOAD=/evil.so", "PATH=/evil", "LD_LIBRARY_PATH=/x"]
    cfg = config()
    request = container_request(env, False, [], cfg)
    argv = build_argv("/cli", request, cfg, 42, "/rootfs")
    assert not any("evil" in a for a in argv)
    assert cli_environment(cfg) == {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


@pytest.mark.parametrize("pid,rootfs", [(0, "/r"), (-3, "/r"), (True, "/r"), ("42", "/r"),
                                        (42, "rootfs"), (42, "-r")])
def test_build_argv_refuses_bad_pid_or_relative_rootfs(pid, rootfs):
    request = Request(devices="all", capabilities=("utility",))
    with pytest.raises(ValueError):
        build_argv("/cli", request, config(), pid, rootfs)
