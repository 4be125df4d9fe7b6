"""WSL2's CDI spec through rootful Podman 4.3 (CDI library 0.5.2).

`nvdocker2 cdi generate` reads the TEST FIXTURE fake WSL2 guest tree (tests/fixtures/fake_driver.py
`build_fake_wsl`: a real /dev/dxg node made with mknod, 10:63, tiny ELF libraries in
/usr/lib/wsl/lib and a fake driver store; no /proc/driver/nvidia) as its driver root; `cdi
validate` is asked about every reader it knows; the spec goes into the /etc/cdi of a private
Podman (privatepodman.py), and `podman run --device nvidia.com/gpu=all` shows from inside what
NVIDIA's WSL spec gives: /dev/dxg and no other node, the driver store read-only, libcuda.so.1
in the ld cache the createContainer hook wrote, /usr/bin/nvidia-smi linking into the store.
The Docker direct-mode twin is tests/e2e/test_direct_wsl_e2e.py.
"""

from __future__ import annotations

import base64
import hashlib
import os

import pytest
from fixtures.fake_driver import DXG_MAJOR, DXG_MINOR, WSL_STORE, WSL_STORE_FILES, build_fake_wsl
from cdispec import nvdocker2
from privatepodman import PrivatePodman, runtime_launcher

from nvdocker2.cdi_validate import READERS
from nvdocker2.direct.ldcache import parse_ld_cache

DXCORE = "/usr/lib/wsl/lib/libdxcore.so"
# What NVIDIA's WSL spec mounts: libdxcore.so and the driver store's files (WSL's own copies
# in /usr/lib/wsl/lib other than libdxcore.so are not among them).
MOUNTED = (DXCORE, *(f"{WSL_STORE}/{name}" for name, _ in WSL_STORE_FILES),
           f"{WSL_STORE}/nvidia-smi")
# Every character device in the container, with its major:minor in hex, one a line.
LIST = "find /dev -type c | sort | while read n; do echo \"$n $(stat -c '%t:%T' $n)\"; done"


@pytest.fixture(scope="module")
def setup(tmp_path_factory, podman_prerequisites):
    root = tmp_path_factory.mktemp("podman-wsl")
    runtime = runtime_launcher(root)
    fake = build_fake_wsl(root / "driver")
    out = root / "nvidia.yaml"
    env = dict(os.environ, NVIDIA_CONTAINER_RUNTIME_CONFIG=str(root / "none.toml"))
    generated = nvdocker2("cdi", "generate", "--output", str(out), "--driver-root",
                          str(fake.root), "--runtime-path", runtime, env=env)
    assert generated.returncode == 0, generated.stderr
    pod = PrivatePodman()  # its own short root in /tmp: under pytest's a run takes 20 s
    pod.start()
    try:
        pod.write_cdi_spec("nvidia.yaml", out.read_text())
        image = pod.import_image("localhost/nvd2-wsl:1")
        yield pod, fake, out, image, generated
    finally:
        pod.cleanup()


def run(pod, image, script, *devices, check=True):
    args = [a for d in devices for a in ("--device", d)]
    r = pod.podman("run", "--rm", "--network=none", *args, image, "sh", "-c", script,
                   check=False)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_generate_writes_the_wsl2_spec_of_one_device_all(setup):
    _, _, out, _, generated = setup
    assert generated.stdout.startswith(f"wrote {out}: WSL2, every GPU through /dev/dxg, "
                                       f"{len(MOUNTED)} driver files"), generated.stdout
    text = out.read_text()
    assert 'cdiVersion: "0.5.0"' in text
    assert text.count("- name: ") == 1 and '- name: "all"' in text


def test_validate_with_no_reader_named_accepts_it_for_every_reader(setup):
    _, _, out, _, _ = setup
    r = nvdocker2("cdi", "validate", str(out))
    assert r.returncode == 0, r.stderr
    for reader in READERS:
        assert f" {reader} (CDI {READERS[reader].library.version})" in r.stdout, r.stdout


@pytest.mark.parametrize("reader", sorted(READERS))
def test_validate_for_each_reader_accepts_it(setup, reader):
    _, _, out, _, _ = setup
    r = nvdocker2("cdi", "validate", str(out), "--for", reader)
    assert r.returncode == 0, (reader, r.stderr)
    assert f"accepted by {reader} " in r.stdout, r.stdout


def test_all_gives_dev_dxg_as_the_fixture_made_it_and_no_other_node(setup):
    pod, fake, _, image, _ = setup
    st = os.stat(fake.path("/dev/dxg"))
    assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (DXG_MAJOR, DXG_MINOR)
    base = set(run(pod, image, LIST).stdout.splitlines())
    assert not [n for n in base if "dxg" in n or "nvidia" in n]
    got = set(run(pod, image, LIST, "nvidia.com/gpu=all").stdout.splitlines())
    assert got - base == {f"/dev/dxg {DXG_MAJOR:x}:{DXG_MINOR:x}"}
    assert base <= got


def test_a_container_without_the_device_gets_nothing_of_wsl(setup):
    pod, _, _, image, _ = setup
    r = run(pod, image, "ls /dev; ls -R /usr/lib; ls /usr/bin 2>&1; true")
    assert "dxg" not in r.stdout and "wsl" not in r.stdout and "nvidia" not in r.stdout


def test_libcuda_so_1_is_in_the_ld_cache_from_the_driver_store(setup):
    pod, _, _, image, _ = setup
    r = run(pod, image, f"readlink {WSL_STORE}/libcuda.so.1; base64 /etc/ld.so.cache",
            "nvidia.com/gpu=all")
    link, cache = r.stdout.split("\n", 1)
    assert link == "libcuda.so.1.1"
    found = {e.name: e.path for e in parse_ld_cache(base64.b64decode(cache))}
    assert found.get("libcuda.so.1") == f"{WSL_STORE}/libcuda.so.1", sorted(found)
    assert found.get("libnvidia-ml.so.1") == f"{WSL_STORE}/libnvidia-ml.so.1", sorted(found)
    assert found.get("libdxcore.so") == DXCORE, sorted(found)


def test_the_driver_files_are_the_hosts_and_read_only(setup):
    pod, fake, _, image, _ = setup
    script = "".join(f"grep -c ' {f} [^ ]* ro,' /proc/mounts; md5sum {f}; " for f in MOUNTED)
    script += (f"ls /usr/lib/wsl/lib; (echo x >> {WSL_STORE}/libcuda.so.1.1 && echo WROTE);"
               " true")
    r = run(pod, image, script, "nvidia.com/gpu=all")
    lines = r.stdout.splitlines()
    for i, f in enumerate(MOUNTED):
        digest = hashlib.md5(fake.path(f).read_bytes()).hexdigest()
        assert lines[2 * i:2 * i + 2] == ["1", f"{digest}  {f}"], (f, r.stdout)
    assert lines[2 * len(MOUNTED):] == ["libdxcore.so"], r.stdout
    assert "WROTE" not in r.stdout and "Read-only file system" in r.stderr, r.stderr


def test_usr_bin_nvidia_smi_links_into_the_driver_store_and_runs(setup):
    pod, _, _, image, _ = setup
    # The image has no /usr/bin: the hook makes it, as NVIDIA's create-symlinks hook does.
    r = run(pod, image, "readlink /usr/bin/nvidia-smi; nvidia-smi", "nvidia.com/gpu=all")
    assert r.stdout.splitlines() == [f"{WSL_STORE}/nvidia-smi",
                                     "GPU 0: NVIDIA Fake WSL2 GPU (test fixture)"], r.stdout


def test_a_gpu_index_is_refused_by_podman_before_the_container_starts(setup):
    pod, _, _, image, _ = setup
    r = run(pod, image, "echo started", "nvidia.com/gpu=0", check=False)
    assert r.returncode != 0 and "started" not in r.stdout
    assert "unresolvable CDI devices nvidia.com/gpu=0" in r.stderr, r.stderr
    assert pod.podman("ps", "-aq").stdout == ""
