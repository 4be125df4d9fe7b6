"""The packaged daemon.json schema (nvdocker2/engines/docker/daemonjson/schema.json) against each
real dockerd of the matrix: every key the schema marks with the release that added it
("x-since") or dropped it ("x-removed-in") must be accepted by a dockerd of a release in that
range and refused by the others; a wrongly typed value the schema refuses, dockerd refuses too;
a well typed one the schema lets through without an error.

dockerd's verdict: `dockerd --validate --config-file F` on Docker >= 23; on 20.10, which has no
--validate, a real start of a second dockerd of the tree on F (refused: it exits saying it cannot
use the file; accepted: its socket answers, or it got past the file and failed on something
else, like Debian's build, which has no cluster store backend).
"""

from __future__ import annotations

import json
import time

import trees

# A well typed value per key (companions: other keys that value needs), and a wrongly typed one.
SAMPLES = {
    "allow-direct-routing": (True, "yes"),
    "api-cors-header": ("*", 1),
    "bip6": ("fd00:1::1/64", 64),
    "bridge-accept-fwmark": ("0x1", 1),
    "cdi-spec-dirs": (["/etc/cdi"], "/etc/cdi"),
    "cluster-advertise": ("127.0.0.1:2376", 2376),
    "cluster-store": ("consul://127.0.0.1:1", 1),
    "cluster-store-opts": ({"kv.path": "nvd2"}, "kv.path"),
    "default-network-opts": ({"bridge": {"com.docker.network.driver.mtu": "1400"}},
                             {"bridge": "mtu"}),
    "firewall-backend": ("iptables", 1),
    "graph": ("/tmp/nvd2-probe/graph", 1),
    "host-gateway-ips": (["192.0.2.1"], "192.0.2.1"),
    "http-proxy": ("http://proxy.example:3128", 3128),
    "https-proxy": ("http://proxy.example:3128", 3128),
    "ip-forward-no-drop": (True, "yes"),
    "log-format": ("json", 1),
    "no-proxy": ("localhost", 1),
    "oom-score-adjust": (-500, "-500"),
    "proxies": ({"http-proxy": "http://proxy.example:3128"}, "http://proxy.example:3128"),
}
# Top-level keys dockerd checks by name only: it accepts them with a value of any type (seen on
# 26.1 and 28.5; the typed proxy settings are the ones inside "proxies").
UNTYPED_BY_DOCKERD = {"http-proxy", "https-proxy", "no-proxy"}
COMPANIONS = {"cluster-advertise": {"cluster-store": "consul://127.0.0.1:1"}}
PROBE = "/tmp/nvd2-probe"
# How dockerd 20.10 starts saying that it refuses its configuration file.
CONFIG_REFUSED = "unable to configure the Docker daemon with file"


def release(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def release_keys(schema: dict) -> dict[str, tuple[str | None, str | None]]:
    return {key: (spec.get("x-since"), spec.get("x-removed-in"))
            for key, spec in schema["properties"].items()
            if "x-since" in spec or "x-removed-in" in spec}


def schema_verdicts(tree: trees.Tree, docs: list[dict]) -> list[tuple[list, list]]:
    """(errors, warnings) of the tree's installed nvdocker2 for each document."""
    script = ("import json, sys\nfrom nvdocker2.engines.docker.daemonjson import validate\n"
              "print(json.dumps([validate.validate(d) for d in json.load(sys.stdin)]))")
    out = tree.ok(f"python3 -c '{script}'", input=json.dumps(docs))
    return json.loads(out)


def dockerd_accepts(tree: trees.Tree, doc: dict, major: int) -> tuple[bool, str]:
    tree.path(PROBE).mkdir(exist_ok=True)
    tree.path(f"{PROBE}/daemon.json").write_text(json.dumps(doc))
    if major >= 23:
        proc = tree.sh(f"dockerd --validate --config-file {PROBE}/daemon.json", timeout=60)
        return proc.returncode == 0, (proc.stdout + proc.stderr).strip()[-300:]
    return _starts(tree, doc)


def _starts(tree: trees.Tree, doc: dict) -> tuple[bool, str]:
    """Docker 20.10: start a second dockerd of the tree on the file, on paths of its own."""
    data = [] if "graph" in doc else [f"--data-root={PROBE}/data"]
    argv = ["/usr/sbin/dockerd", f"--config-file={PROBE}/daemon.json", *data,
            f"--exec-root={PROBE}/exec", f"--pidfile={PROBE}/docker.pid",
            f"--host=unix://{PROBE}/docker.sock", "--storage-driver=vfs", "--iptables=false",
            "--bridge=none"]
    log = tree.base / "probe-dockerd.log"
    with open(log, "wb") as out:
        proc = tree.popen(argv, stdout=out, stderr=out, stdin=trees.subprocess.DEVNULL,
                          start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                said = log.read_text(errors="replace")
                if CONFIG_REFUSED in said:
                    return False, said[said.index(CONFIG_REFUSED):][:300]
                # The file passed; something later failed (Debian's 20.10 has no cluster
                # store backends): the release accepts the key.
                return True, "file accepted, then: " + said.strip().splitlines()[-1][-200:]
            if tree.path(f"{PROBE}/docker.sock").exists() and tree.sh(
                    f"docker -H unix://{PROBE}/docker.sock version", timeout=20).returncode == 0:
                return True, "started"
            time.sleep(0.2)
        return False, "neither started nor exited in 90 s"
    finally:
        trees._stop_pid(proc.pid, proc, 30)
        trees.subprocess.run(["rm", "-rf", str(tree.path(PROBE))], check=False)


def test_release_keys_are_accepted_exactly_by_their_releases(tree_with_deb, platform):
    tree, suite = tree_with_deb, trees.SUITES[platform]
    version = release(tree.ok("dockerd --version").split("version ", 1)[1])
    schema = json.loads(tree.ok(
        "python3 -c 'from nvdocker2.engines.docker.daemonjson import validate; import json;"
        " print(json.dumps(validate.schema()))'"))
    keys = release_keys(schema)
    assert set(keys) <= set(SAMPLES), f"no sample value for {sorted(set(keys) - set(SAMPLES))}"
    good = [{**COMPANIONS.get(k, {}), k: SAMPLES[k][0]} for k in keys]
    bad = [{k: SAMPLES[k][1]} for k in keys]
    verdicts = schema_verdicts(tree, good + bad)
    wrong = []
    for i, (key, (since, removed)) in enumerate(keys.items()):
        errors, warnings = verdicts[i]
        if errors or any(key in w for w in warnings):
            wrong.append(f"schema refuses or does not know well typed {key}: {errors + warnings}")
        if not verdicts[len(keys) + i][0]:
            wrong.append(f"schema lets wrongly typed {key}={SAMPLES[key][1]!r} through")
        expected = ((since is None or version >= release(since))
                    and (removed is None or version < release(removed)))
        accepted, said = dockerd_accepts(tree, good[i], version[0])
        if accepted != expected:
            wrong.append(f"{key} (since {since}, removed in {removed}): dockerd "
                         f"{'accepts' if accepted else 'refuses'} it: {said}")
        print(f"{suite.platform} dockerd {version[0]}.{version[1]}: {key}: "
              f"{'accepted' if accepted else 'refused'}: {said[:160]}")
        if expected:
            accepted_bad, said = dockerd_accepts(tree, bad[i], version[0])
            if accepted_bad != (key in UNTYPED_BY_DOCKERD):
                wrong.append(f"dockerd {'accepts' if accepted_bad else 'refuses'} wrongly "
                             f"typed {key}={SAMPLES[key][1]!r}: {said}")
    assert not wrong, f"{suite.platform}: " + "\n".join(wrong)
