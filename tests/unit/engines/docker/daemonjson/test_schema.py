"""The packaged daemon.json schema: accepts real files, names the key of every wrong type,
knows both runtime entry forms and their mixing rules, warns on unknown keys."""

from __future__ import annotations

import jsonschema
import pytest

from nvdocker2.engines.docker.daemonjson import document, validate
from nvdocker2.engines.docker.daemonjson.validate import schema

# Keys of Docker 20.10 and later releases (docs/reference.md §2: types of all documented keys).
KEYS_20_10 = """api-cors-header bip bridge cgroup-parent cluster-advertise cluster-store containerd
containerd-namespace data-root default-cgroupns-mode default-gateway default-gateway-v6
default-ipc-mode default-runtime default-shm-size exec-root fixed-cidr fixed-cidr-v6 group
host-gateway-ip init-path ip log-driver log-level metrics-addr pidfile seccomp-profile
storage-driver swarm-default-advertise-addr tlscacert tlscert tlskey userland-proxy-path
userns-remap graph debug experimental icc init ip-forward ip-masq iptables ip6tables ipv6
live-restore no-new-privileges raw-logs rootless selinux-enabled tls tlsverify userland-proxy
cri-containerd max-concurrent-downloads max-concurrent-uploads max-download-attempts mtu
network-control-plane-mtu oom-score-adjust shutdown-timeout cpu-rt-period cpu-rt-runtime
network-diagnostic-port allow-nondistributable-artifacts authorization-plugins dns dns-opts
dns-search exec-opts hosts insecure-registries labels node-generic-resources registry-mirrors
storage-opts runtimes log-opts cluster-store-opts default-ulimits features builder
default-address-pools""".split()
KEYS_LATER = """http-proxy https-proxy no-proxy proxies default-network-opts cdi-spec-dirs
log-format bip6 host-gateway-ips ip-forward-no-drop allow-direct-routing firewall-backend
bridge-accept-fwmark""".split()


def test_schema_is_a_valid_draft7_schema_with_every_documented_key():
    jsonschema.Draft7Validator.check_schema(schema())
    missing = [k for k in KEYS_20_10 + KEYS_LATER if k not in schema()["properties"]]
    assert missing == []


REAL_FILES = [
    {},
    {
        "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}},
        "default-runtime": "nvidia",
    },
    {
        "log-driver": "json-file",
        "log-opts": {"max-size": "10m", "max-file": "3"},
        "live-restore": True,
        "exec-opts": ["native.cgroupdriver=systemd"],
        "storage-driver": "overlay2",
        "mtu": 1450,
        "default-shm-size": "64M",
        "shutdown-timeout": 30,
        "dns": ["1.1.1.1"],
        "debug": False,
    },
    {
        "default-address-pools": [{"base": "172.17.0.0/12", "size": 20}],
        "default-ulimits": {"nofile": {"Name": "nofile", "Hard": 64000, "Soft": 64000}},
        "builder": {
            "gc": {
                "enabled": True,
                "defaultKeepStorage": "20GB",
                "policy": [
                    {"keepStorage": "10GB", "filter": ["unused-for=2200h"]},
                    {"keepStorage": "50GB", "all": True},
                ],
            },
            "entitlements": {"network-host": True},
        },
        "features": {"buildkit": True, "containerd-snapshotter": False},
    },
    {
        "proxies": {"http-proxy": "http://p:3128", "no-proxy": "localhost"},
        "cdi-spec-dirs": ["/etc/cdi"],
        "runtimes": {
            "gvisor": {"runtimeType": "io.containerd.runsc.v1", "options": {"TypeUrl": "x"}}
        },
        "default-network-opts": {"bridge": {"com.docker.network.driver.mtu": "1400"}},
        "firewall-backend": "nftables",
        "default-shm-size": 67108864,
    },
]


@pytest.mark.parametrize("doc", REAL_FILES, ids=range(len(REAL_FILES)))
def test_real_files_validate(doc):
    errors, warnings = validate.validate(doc)
    assert errors == [] and warnings == []


@pytest.mark.parametrize(
    "doc, fragment",
    [
        ({"debug": "true"}, 'debug: "true" is not of type boolean'),
        ({"mtu": "1500"}, 'mtu: "1500" is not of type integer'),
        ({"mtu": 1.5}, "mtu: 1.5 is not of type integer"),
        ({"max-concurrent-downloads": 12345678901234567890}, "greater than the maximum"),
        ({"shutdown-timeout": -9223372036854775809}, "less than the minimum"),
        ({"dns": "8.8.8.8"}, 'dns: "8.8.8.8" is not of type array'),
        ({"dns": [8]}, "dns[0]: 8 is not of type string"),
        ({"log-opts": {"max-size": 10}}, "log-opts.max-size: 10 is not of type string"),
        ({"features": {"buildkit": "yes"}}, "features.buildkit"),
        ({"default-address-pools": [{"base": "10.0.0.0/8"}]}, "'size' is a required property"),
        ({"default-ulimits": {"nofile": {"Hard": "x"}}}, "default-ulimits.nofile.Hard"),
        ({"builder": {"gc": {"enabled": "yes"}}}, "builder.gc.enabled"),
        ({"runtimes": {"x": {}}}, 'runtimes.x: needs "path"'),
        ({"runtimes": {"x": {"path": 5}}}, "runtimes.x.path: 5 is not of type string"),
        (
            {"runtimes": {"x": {"path": "/x", "runtimeType": "io.x.v1"}}},
            'both "path" and "runtimeType"',
        ),
        (
            {"runtimes": {"x": {"path": "/x", "options": {}}}},
            '"options" only works with "runtimeType"',
        ),
        (
            {"runtimes": {"x": {"runtimeType": "io.x.v1", "runtimeArgs": []}}},
            '"runtimeArgs" only works with "path"',
        ),
        ({"runtimes": {"x": {"path": "/x", "runtimeArgs": "-v"}}}, "runtimes.x.runtimeArgs"),
        ({"host-gateway-ip": "1.2.3.4", "host-gateway-ips": ["1.2.3.4"]}, "cannot both be set"),
        ({"firewall-backend": "ipfw"}, "is not one of"),
        ({"proxies": {"ftp-proxy": "x"}}, "proxies"),
    ],
)
def test_wrong_types_are_errors_naming_the_key(doc, fragment):
    errors, _ = validate.validate(doc)
    assert errors, doc
    assert any(fragment in e for e in errors), errors


def test_unknown_and_ignored_singular_keys_are_warnings():
    errors, warnings = validate.validate({"foo": 1, "label": ["a"], "runtimes": {}})
    assert errors == []
    assert any('unknown key "foo"' in w for w in warnings)
    assert any('"label" is ignored' in w and '"labels"' in w for w in warnings)


def test_dangling_default_runtime_is_a_warning():
    _, warnings = validate.validate({"default-runtime": "nvidia"})
    assert any("not defined" in w for w in warnings)


def test_integers_must_be_written_as_integers_as_dockerd_requires():
    doc = document.parse(
        b'{"mtu": 1500, "shutdown-timeout": 1.0e1, "max-concurrent-downloads": 3}'
    ).data
    errors, _ = validate.validate(doc)
    assert errors == ["shutdown-timeout: 1.0e1 is not of type integer"]


def test_dockerd_validate_is_reported_unavailable_on_dockerd_20_10(tmp_path):
    cand = tmp_path / "daemon.json"
    cand.write_text("{}")
    check = validate.dockerd_validate(cand)
    if check.dockerd is None:
        pytest.skip("no dockerd on this host")
    # Debian 12's dockerd 20.10 has no --validate: "not available", not a refusal.
    assert check.ok


def test_numbers_dockerd_cannot_decode_are_a_warning_naming_them():
    doc = document.parse(b'{"labels": [], "x": {"y": [1.0e400]}, "n": 1' + b"0" * 400 + b"}").data
    errors, warnings = validate.validate(doc)
    assert errors == []
    assert any(w.startswith("x.y[0]: 1.0e400 is outside the range") for w in warnings)
    assert any(w.startswith("n: 1000") for w in warnings)
