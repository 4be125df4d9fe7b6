#!/usr/bin/env python3
"""What the number of GPUs and devices on a node costs the start path, ours beside NVIDIA's
(a script, not a test).

Run as root (the TEST FIXTURE fake driver makes its nodes with mknod; a C compiler builds the
recorder and the stand-in NVML; the CDI hooks run in a private mount namespace):

    .venv/bin/python bench/bench_scale.py --anchor DIR [--rounds 20] [--repeat 3]
                                          [--cache /var/cache/nvdocker2-bench] [--json]

One fake driver tree per size (tests/fixtures/fake_driver.py): 1, 8 and 16 GPUs; 8 GPUs with
7 MIG devices each; 8 GPUs with the graphics libraries (NVIDIA's real user-space files from
Debian's non-free archive, fetched once with `apt-get download` through a private sources list
under --cache and unpacked into the tree; the fixture's add_graphics() where they cannot be
had) and their DRI nodes and JSON files, all capabilities. Every container asks for
`NVIDIA_VISIBLE_DEVICES=all`. At each size, on the SAME tree, three things are timed for ours
and for NVIDIA's binaries (`--anchor DIR`, built as docs/benchmarks.md says):

- `create`: our `nvidia-container-runtime create` in direct mode against NVIDIA's in
  `mode = "jit-cdi"` (which reads the tree through NVML: the fixture's stand-in libnvidia-ml,
  with the calls NVIDIA's jit-cdi makes beyond the fixture's added, EXTRA_NVML), both
  exec'ing the recorder (bench/recorder.c) in runc's place: the CPU used up to that exec;
- the prestart hook: our `nvidia-container-runtime-hook prestart` against NVIDIA's, each
  exec'ing the recorder as nvidia-container-cli, as bench_runtime.py sets them up;
- the CDI createContainer hooks: our `nvidia-container-runtime direct-hook update-ldcache`
  with the links and folders our CDI spec (`nvdocker2 cdi generate`) gives it, against
  NVIDIA's `nvidia-cdi-hook create-symlinks` and `update-ldcache` with the same links and
  folders (bench_cdi.nvidia_hooks), on a container rootfs with the spec's mounts bound
  read-only into it, the OCI state on stdin: CPU of the hook processes and their children
  (ldconfig) from wait4.

Each round runs every size, stage and toolkit once, the sizes and the toolkits in an order
that rotates each round. The recorder's own start (measured each round) is subtracted from
the create and prestart figures. Reported per size, stage and toolkit: the median CPU over the
rounds; per size and stage the median over rounds of ours / NVIDIA's in the same round; per
stage the growth 16 GPUs / 1 GPU (of the medians) and the least-squares slope over 1, 8 and
16 GPUs (ms per added GPU). With --repeat N each figure is the median of N runs, each run's
value kept for the spread.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from bench_cdi import nvidia_hooks  # noqa: E402
from bench_direct import build_recorder, config_toml, new_lines  # noqa: E402
from bench_runtime import nvidia_config, packaged_config, write_package_launchers  # noqa: E402
from fixtures import fake_driver as fd  # noqa: E402


# (name, GPUs, extra): the sizes; LINE are those the growth and the slope are taken over.
SIZES = (("1 GPU", 1, ""), ("8 GPUs", 8, ""), ("16 GPUs", 16, ""),
         ("8 GPUs x 7 MIG", 8, "mig"), ("8 GPUs, graphics", 8, "graphics"))
LINE = ("1 GPU", "8 GPUs", "16 GPUs")
STAGES = ("create", "prestart hook", "CDI hooks")
TOOLKITS = ("ours", "NVIDIA")
ANCHOR_BINARIES = ("nvidia-container-runtime", "nvidia-container-runtime-hook",
                   "nvidia-cdi-hook", "nvidia-ctk")
RATIO_TARGET, GROWTH_TARGET = 1.0, 1.3
# NVIDIA's user-space graphics files in Debian's non-free archive (whatever of them exists).
GRAPHICS_DEBS = ("libnvidia-glcore", "libnvidia-eglcore", "libgl1-nvidia-glvnd-glx",
                 "libglx-nvidia0", "libegl-nvidia0", "libgles-nvidia2", "nvidia-vulkan-icd",
                 "nvidia-egl-icd", "libnvidia-rtcore", "libnvidia-glvkspirv",
                 "libnvidia-gpucomp", "libnvidia-allocator1")
DEBIAN_SOURCE = ("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
                 "http://deb.debian.org/debian trixie non-free\n")
# The NVML calls NVIDIA's jit-cdi makes that the fixture's stand-in lacks (without them it
# stops at its first call: "symbol lookup error: ... undefined symbol: nvmlDeviceGetName").
# Compiled after the fixture's source, whose nvmlDeviceGetUUID (MIG handles only) is renamed
# so that GPU handles get theirs here; the values are the fixture's (default_gpus' UUIDs and
# PCI bus numbers, the tree's driver version).
EXTRA_NVML = r"""
static int is_gpu(void *h) { return h >= (void *)gpus && h < (void *)(gpus + NGPU); }
static unsigned gpu_of(void *h) { return is_gpu(h) ? ((gpu_t *)h)->minor : ((mig_t *)h)->minor; }
int nvmlDeviceGetUUID(void *h, char *buf, unsigned len) {
    if (!is_gpu(h)) return fixture_nvmlDeviceGetUUID(h, buf, len);
    unsigned i = ((gpu_t *)h)->minor;
    snprintf(buf, len, "GPU-%08x-1111-2222-3333-44444444%04x", i, i); return 0; }
int nvmlDeviceGetName(void *h, char *buf, unsigned len) {
    snprintf(buf, len, is_gpu(h) ? "NVIDIA Fake GPU (test fixture)" : "NVIDIA Fake GPU MIG 1g");
    return 0; }
int nvmlSystemGetDriverVersion(char *buf, unsigned len) {
    snprintf(buf, len, "%s", DRIVER_VERSION); return 0; }
int nvmlSystemGetCudaDriverVersion(int *v) { *v = 12040; return 0; }
int nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 12040; return 0; }
const char *nvmlErrorString(int r) { return r ? "fake NVML error" : "Success"; }
typedef struct { char busIdLegacy[16]; unsigned domain, bus, device, pciDeviceId,
                 pciSubSystemId; char busId[32]; } pci_t;
int nvmlDeviceGetPciInfo_v3(void *h, pci_t *p) {
    unsigned bus = 0x0a + gpu_of(h);
    memset(p, 0, sizeof *p); p->bus = bus; p->pciDeviceId = 0x233010de;
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:%02x:00.0", bus);
    snprintf(p->busId, sizeof p->busId, "00000000:%02x:00.0", bus); return 0; }
int nvmlDeviceGetCudaComputeCapability(void *h, int *major, int *minor) {
    *major = 9; *minor = 0; return 0; }
int nvmlDeviceGetArchitecture(void *h, unsigned *a) { *a = 9; return 0; }
int nvmlDeviceGetBrand(void *h, unsigned *b) { *b = 2; return 0; }
int nvmlDeviceGetMigMode(void *h, unsigned *cur, unsigned *pend) {
    for (unsigned k = 0; k < NMIG; k++)
        if (migs[k].minor == gpu_of(h)) { *cur = *pend = 1; return 0; }
    return 3; /* NVML_ERROR_NOT_SUPPORTED: not MIG capable */ }
int nvmlDeviceIsMigDeviceHandle(void *h, unsigned *is) { *is = !is_gpu(h); return 0; }
int nvmlDeviceGetHandleByUUID(const char *uuid, void **out) {
    char b[96];
    for (unsigned k = 0; k < NMIG; k++)
        if (!strcmp(migs[k].uuid, uuid)) { *out = &migs[k]; return 0; }
    for (unsigned i = 0; i < NGPU; i++) {
        nvmlDeviceGetUUID(&gpus[i], b, sizeof b);
        if (!strcmp(b, uuid)) { *out = &gpus[i]; return 0; } }
    return 6; }
int nvmlDeviceGetDeviceHandleFromMigDeviceHandle(void *h, void **out) {
    for (unsigned i = 0; i < NGPU; i++)
        if (gpus[i].minor == ((mig_t *)h)->minor) { *out = &gpus[i]; return 0; }
    return 6; }
"""


def fail(message: str, hint: str = "") -> SystemExit:
    return SystemExit(f"bench_scale.py: error: {message}" + (f"\nhint: {hint}" if hint else ""))


def build_nvml(fake, work: Path) -> None:
    """The fixture's stand-in libnvidia-ml (build_fake_nvml) with EXTRA_NVML, over the
    tree's libnvidia-ml."""
    work.mkdir(parents=True, exist_ok=True)
    target = fd.build_fake_nvml(fake, work)
    source = work / "fake-nvml.c"
    text = ("#include <string.h>\n#define nvmlDeviceGetUUID fixture_nvmlDeviceGetUUID\n"
            + source.read_text() + f'#undef nvmlDeviceGetUUID\n#define DRIVER_VERSION '
            f'"{fake.version}"\n' + EXTRA_NVML)
    source.write_text(text)
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libnvidia-ml.so.1", "-o",
                    str(target), str(source)], check=True, capture_output=True)


def apt_options(cache: Path) -> list[str]:
    """apt options that read and write only under `cache` (never the machine's /etc/apt)."""
    return ["-o", f"Dir::Etc::SourceList={cache / 'sources.list'}",
            "-o", f"Dir::Etc::SourceParts={cache / 'sources.list.d'}",
            "-o", f"Dir::Etc::PreferencesParts={cache / 'preferences.d'}",
            "-o", f"Dir::State::Lists={cache / 'lists'}",
            "-o", f"Dir::Cache={cache / 'apt'}", "-o", "APT::Architectures::=amd64",
            "-o", "APT::Sandbox::User=root"]


def graphics_debs(cache: Path) -> tuple[list[Path], str]:
    """The graphics packages in `cache`/debs (downloaded there the first time), and their
    driver version; ([], why) where they cannot be had."""
    debs_dir = cache / "debs"
    debs = sorted(debs_dir.glob("*.deb")) if debs_dir.is_dir() else []
    if not debs:
        for sub in ("sources.list.d", "preferences.d", "lists/partial", "apt/archives/partial",
                    "debs"):
            (cache / sub).mkdir(parents=True, exist_ok=True)
        (cache / "sources.list").write_text(DEBIAN_SOURCE)
        opts = apt_options(cache)
        try:
            r = subprocess.run(["apt-get", *opts, "-q", "update"], capture_output=True,
                               text=True, timeout=600)
            if r.returncode != 0:
                return [], f"apt-get update failed: {r.stderr.strip()[-200:]}"
            found = subprocess.run(["apt-cache", *opts, "show", "--no-all-versions",
                                    *GRAPHICS_DEBS], capture_output=True, text=True,
                                   timeout=120).stdout
            names = [n for n in GRAPHICS_DEBS if f"Package: {n}\n" in found]
            r = subprocess.run(["apt-get", *opts, "-q", "download", *names], cwd=debs_dir,
                               capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as err:
            return [], f"apt-get: {err}"
        if r.returncode != 0:
            return [], f"apt-get download failed: {r.stderr.strip()[-200:]}"
        debs = sorted(debs_dir.glob("*.deb"))
    versions = {re.sub(r"-[^-]*$", "", d.name.split("_")[1]) for d in debs
                if d.name.startswith("libnvidia-glcore_")}
    if not versions:
        return [], f"no libnvidia-glcore in {debs_dir}"
    return debs, versions.pop()


def graphics_tree(root: Path, cache: Path | None) -> tuple[object, str]:
    """Eight GPUs with their DRI nodes, the graphics JSON files and NVIDIA's real graphics
    libraries from Debian (soname links in the library folder, as Debian's alternatives make
    them), or the fixture's add_graphics(); (the tree, what was used)."""
    debs, version = graphics_debs(cache) if cache is not None else ([], "no --cache")
    if not debs:
        fake = fd.build_fake_driver(root, fd.default_gpus(8))
        fd.add_dri(fake)
        fd.add_graphics(fake)
        return fake, f"the fixture's add_graphics() (Debian's packages not used: {version})"
    fake = fd.build_fake_driver(root, fd.default_gpus(8), version=version)
    fd.add_dri(fake)
    for deb in debs:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    libdir = fake.path(fd.LIB64_DIR)
    for link in sorted((libdir / "nvidia" / "current").glob("*.so.*")):
        if link.is_symlink() and not os.path.lexists(libdir / link.name):
            os.symlink(f"nvidia/current/{link.name}", libdir / link.name)
    for path, text in fd.GRAPHICS_CONFIGS:
        if not fake.path(path).exists():
            fake.path(path).parent.mkdir(parents=True, exist_ok=True)
            fake.path(path).write_text(text)
    subprocess.run(["ldconfig", "-r", str(root)], check=True, capture_output=True)
    shutil.rmtree(root / "usr/share/doc", ignore_errors=True)
    return fake, (f"NVIDIA's {version} graphics files from Debian trixie non-free "
                  f"({', '.join(d.name.split('_')[0] for d in debs)})")


def build_tree(root: Path, gpus: int, extra: str, cache: Path | None) -> tuple[object, str]:
    if extra == "graphics":
        return graphics_tree(root, cache)
    fake = fd.build_fake_driver(root, fd.default_gpus(gpus))
    if extra == "mig":
        fd.add_mig(fake, [fd.FakeMig(g.minor, gi, 0, gi - 1,
                               f"MIG-{g.minor:08x}-0000-1111-2222-{gi:012x}")
                       for g in fake.gpus for gi in range(1, 8)])
    return fake, ""


MOUNTED: list[Path] = []  # the CDI mounts made, unmounted before the work folder goes


def unmount_all() -> None:
    while MOUNTED:
        subprocess.run(["umount", str(MOUNTED.pop())], check=False)


class Node:
    """One size: its tree, a bundle, and the argv and settings of every call made on it."""

    def __init__(self, work: Path, name: str, gpus: int, extra: str, bindir: Path,
                 recorder: Path, anchor: Path, cache: Path | None) -> None:
        self.name = name
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        self.fake, self.note = build_tree(work / f"driver-{slug}", gpus, extra, cache)
        build_nvml(self.fake, work / f"nvml-{slug}")
        root = self.fake.root
        env = ["PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=all"]
        if extra == "graphics":
            env.append("NVIDIA_DRIVER_CAPABILITIES=all")
        self.bundle, self.rootfs, spec = fd.make_bundle(work / slug, env=env)
        self.pristine = json.dumps(spec)
        self.state = json.dumps({"ociVersion": "1.0.2", "id": "bench", "status": "creating",
                                 "pid": os.getpid(), "bundle": str(self.bundle)})
        ours_cfg = config_toml(work / f"{slug}-direct.toml", root, recorder)
        nv_cfg = work / f"{slug}-jit-cdi.toml"
        nv_cfg.write_text(f'[nvidia-container-cli]\nroot = "{root}"\npath = "{recorder}"\n'
                          f'ldconfig = "@/sbin/ldconfig"\n\n[nvidia-container-runtime]\n'
                          f'mode = "jit-cdi"\nruntimes = ["{recorder}"]\n\n'
                          f'[nvidia-container-runtime-hook]\n'
                          f'path = "{anchor}/nvidia-container-runtime-hook"\n\n'
                          f'[nvidia-ctk]\npath = "{anchor}/nvidia-ctk"\n')
        root_line = '#root = "/run/nvidia/driver"'
        ours_hook_cfg = work / f"{slug}-hook.toml"
        ours_hook_cfg.write_text(packaged_config(recorder).replace(root_line,
                                                                   f'root = "{root}"'))
        nv_hook_cfg = work / f"{slug}-nvidia-hook.toml"
        nv_hook_cfg.write_text(nvidia_config(recorder, anchor).replace(
            "[nvidia-container-cli]\n", f'[nvidia-container-cli]\nroot = "{root}"\n'))
        base = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        self.calls = {
            ("create", "ours"): ([str(bindir / "nvidia-container-runtime"), "create",
                                  "--bundle", str(self.bundle), "bench"],
                                 {**base, "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(ours_cfg)}),
            ("create", "NVIDIA"): ([str(anchor / "nvidia-container-runtime"), "create",
                                    "--bundle", str(self.bundle), "bench"],
                                   {**base, "NVIDIA_CTK_CONFIG_FILE_PATH": str(nv_cfg)}),
            ("prestart hook", "ours"): ([str(bindir / "nvidia-container-runtime-hook"),
                                         "prestart"],
                                        {**base,
                                         "NVIDIA_CONTAINER_RUNTIME_CONFIG": str(ours_hook_cfg)}),
            ("prestart hook", "NVIDIA"): ([str(anchor / "nvidia-container-runtime-hook"),
                                           "prestart"],
                                          {**base,
                                           "NVIDIA_CTK_CONFIG_FILE_PATH": str(nv_hook_cfg)}),
        }
        self.cdi_hooks(work, slug, bindir, anchor)

    def cdi_hooks(self, work: Path, slug: str, bindir: Path, anchor: Path) -> None:
        """Our CDI spec of the tree; its hook and NVIDIA's two as argv lists, the spec's
        mounts bound read-only into the rootfs (in this process's private mount namespace),
        and the paths the hooks make, removed before each call."""
        out = work / f"{slug}-cdi.json"
        subprocess.run([sys.executable, "-m", "nvdocker2", "cdi", "generate", "--driver-root",
                        str(self.fake.root), "--runtime-path",
                        str(bindir / "nvidia-container-runtime"), "--output", str(out)],
                       check=True, capture_output=True)
        spec = json.loads(out.read_text())
        edits = spec["containerEdits"]
        hooks = edits.get("hooks", [])
        if len(hooks) != 1:
            raise fail(f"{self.name}: our CDI spec has {len(hooks)} hooks, not 1")
        ours = hooks[0]
        mounts = list(edits.get("mounts", []))
        for dev in spec["devices"]:
            if dev["name"] == "all":
                mounts += dev["containerEdits"].get("mounts", [])
        config = json.loads(self.pristine)
        # runc makes the rootfs a mount point (a bind onto itself) before the hooks run
        subprocess.run(["mount", "--bind", str(self.rootfs), str(self.rootfs)], check=True)
        MOUNTED.append(self.rootfs)
        for m in mounts:
            dest = self.rootfs / m["containerPath"].lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            if Path(m["hostPath"]).is_dir():
                dest.mkdir(exist_ok=True)
            else:
                dest.touch()
            subprocess.run(["mount", "--bind", m["hostPath"], str(dest)], check=True)
            MOUNTED.append(dest)
            subprocess.run(["mount", "-o", "remount,bind,ro", str(dest)], check=True)
            config["mounts"].append({"destination": m["containerPath"], "type": "bind",
                                     "source": m["hostPath"],
                                     "options": m.get("options", ["ro", "bind"])})
        self.pristine = json.dumps(config)
        self.mounts = len(mounts)
        self.links = [a.partition("::")[0] for f, a in zip(ours["args"], ours["args"][1:])
                      if f == "--link"]
        self.calls[("CDI hooks", "ours")] = [(ours["path"], ours["args"][1:], ours.get("env", []))]
        self.calls[("CDI hooks", "NVIDIA")] = [
            (str(anchor / "nvidia-cdi-hook"), h["args"][1:], h.get("env", []))
            for h in nvidia_hooks(ours)]

    def reset(self) -> None:
        """A fresh config.json, and the rootfs without what a CDI hook made."""
        (self.bundle / "config.json").write_text(self.pristine)
        for link in self.links:
            path = self.rootfs / link.lstrip("/")
            if path.is_symlink():
                path.unlink()
        for name in ("etc/ld.so.cache", "etc/ld.so.cache~"):
            (self.rootfs / name).unlink(missing_ok=True)
        shutil.rmtree(self.rootfs / "etc/ld.so.conf.d", ignore_errors=True)

    def run(self, stage: str, toolkit: str, log: Path, seen: int) -> tuple[float, int]:
        """(CPU seconds of one call, the recorder log's new count); SystemExit with the
        call's own error where it fails."""
        self.reset()
        if stage == "CDI hooks":
            total = 0.0
            for path, args, env in self.calls[(stage, toolkit)]:
                total += wait4_cpu([path, *args], dict(e.split("=", 1) for e in env),
                                   self.state, f"{self.name}: {toolkit}'s {stage}")
            return total, seen
        argv, env = self.calls[(stage, toolkit)]
        proc = subprocess.run(argv, env=env, cwd="/", input=self.state, capture_output=True,
                              text=True, timeout=60)
        lines, seen = new_lines(log, seen)
        if proc.returncode != 0 or len(lines) != 1:
            why = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["?"]
            raise fail(f"{self.name}: {toolkit}'s {stage} exited {proc.returncode} with "
                       f"{len(lines)} recorder calls: {why[0][:300]}")
        return lines[0][0], seen


def wait4_cpu(argv: list[str], env: dict, stdin: str, what: str) -> float:
    """CPU seconds (user + system) of argv and the children it waited for, from wait4."""
    r, w = os.pipe()
    proc = subprocess.Popen(argv, env=env, cwd="/", stdin=r, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    os.close(r)
    os.write(w, stdin.encode())
    os.close(w)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise fail(f"{what} exited {proc.returncode}: {' / '.join(err.strip().splitlines()[-3:])}")
    return usage.ru_utime + usage.ru_stime


def check_cdi(node: Node, toolkit: str) -> None:
    """One untimed run of the toolkit's CDI hooks must leave libcuda.so.1 linked and in the
    rootfs's ld cache."""
    node.run("CDI hooks", toolkit, Path("/nonexistent"), 0)
    cache = node.rootfs / "etc/ld.so.cache"
    if not cache.exists() or b"libcuda.so.1" not in cache.read_bytes():
        raise fail(f"{node.name}: {toolkit}'s CDI hooks left no libcuda.so.1 in the ld cache")


def recorder_start(recorder: Path, log: Path, seen: int) -> tuple[float, int]:
    subprocess.run([str(recorder), "--version"], check=True)
    lines, seen = new_lines(log, seen)
    return lines[0][0], seen


def measure(nodes: list[Node], plan: dict, recorder: Path, log: Path, rounds: int,
            seen: int) -> tuple[dict, int]:
    """One run: per (size, stage, toolkit) the CPU of each round (ms, net of the recorder's
    start where the recorder is exec'd), the toolkits and sizes rotating each round."""
    cpu: dict = {key: [] for key in plan}
    for n in range(rounds):
        base, seen = recorder_start(recorder, log, seen)
        order = nodes[n % len(nodes):] + nodes[:n % len(nodes)]
        for node in order:
            for stage in STAGES:
                toolkits = TOOLKITS if n % 2 == 0 else TOOLKITS[::-1]
                for toolkit in toolkits:
                    if (node.name, stage, toolkit) not in plan:
                        continue
                    used, seen = node.run(stage, toolkit, log, seen)
                    net = used if stage == "CDI hooks" else used - base
                    cpu[(node.name, stage, toolkit)].append(net * 1000)
    return cpu, seen


def figures(cpu: dict) -> dict:
    """A run's figures from its per-round CPU: medians, paired ratios, growth and slope."""
    out: dict = {}
    for (size, stage, toolkit), values in cpu.items():
        out[f"{stage} | {size} | {toolkit} cpu ms"] = statistics.median(values)
        other = cpu.get((size, stage, "NVIDIA"))
        if toolkit == "ours" and other:
            out[f"{stage} | {size} | ours / NVIDIA"] = statistics.median(
                a / b for a, b in zip(values, other))
    for stage in STAGES:
        for toolkit in TOOLKITS:
            ys = [out.get(f"{stage} | {size} | {toolkit} cpu ms") for size in LINE]
            if None in ys:
                continue
            xs = [int(size.split()[0]) for size in LINE]
            out[f"{stage} | growth 16/1 | {toolkit}"] = ys[2] / ys[0]
            mx, my = sum(xs) / 3, sum(ys) / 3
            out[f"{stage} | ms per added GPU | {toolkit}"] = (
                sum((x - mx) * (y - my) for x, y in zip(xs, ys))
                / sum((x - mx) ** 2 for x in xs))
    return out


def private_mount_namespace(argv: list[str]) -> None:
    """Run this script again in a mount namespace of its own (the CDI mounts vanish with it)."""
    if os.environ.get("NVD2_BENCH_SCALE_NS") == "1":
        return
    env = dict(os.environ, NVD2_BENCH_SCALE_NS="1")
    unshare = shutil.which("unshare")
    if unshare is None:
        raise fail("no unshare(1) for the private mount namespace", "apt-get install util-linux")
    proc = subprocess.run([unshare, "--mount", "--propagation", "private", sys.executable,
                           str(Path(__file__).resolve()), *argv], env=env)
    raise SystemExit(proc.returncode)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20, help="interleaved rounds per run "
                    "(default 20)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of all rounds (default 3)")
    ap.add_argument("--anchor", type=Path, metavar="DIR", required=True,
                    help="NVIDIA's nvidia-container-runtime, -runtime-hook, nvidia-cdi-hook "
                    "and nvidia-ctk")
    ap.add_argument("--cache", type=Path, default=Path("/var/cache/nvdocker2-bench"),
                    help="where Debian's graphics packages are kept between runs (default "
                    "/var/cache/nvdocker2-bench)")
    ap.add_argument("--no-download", action="store_true",
                    help="use the fixture's add_graphics() instead of Debian's packages")
    ap.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.repeat < 1:
        ap.error("--rounds and --repeat must be at least 1")
    if os.geteuid() != 0:
        raise fail("needs root (the fake driver's mknod, the CDI hooks' mounts)",
                   "run it with sudo, as the e2e tests run")
    anchor = args.anchor.resolve()
    missing = [n for n in ANCHOR_BINARIES if not os.access(anchor / n, os.X_OK)]
    if missing:
        raise fail(f"--anchor {anchor}: no executable {', '.join(missing)}",
                   "build NVIDIA's binaries as docs/benchmarks.md says")
    private_mount_namespace(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="nvd2-bench-scale-") as tmp:
        work = Path(tmp)
        cache = None if args.no_download else args.cache
        try:
            report = run_all(work, args, anchor, cache)
        finally:
            unmount_all()
    print_report(report)
    if args.json:
        print(json.dumps(report))
    return 0


def run_all(work: Path, args: argparse.Namespace, anchor: Path, cache: Path | None) -> dict:
    """Build every size, check each call once, measure; the report."""
    recorder, log = build_recorder(work)
    bindir = work / "bin"
    bindir.mkdir()
    write_package_launchers(bindir)
    nodes = [Node(work, name, gpus, extra, bindir, recorder, anchor, cache)
             for name, gpus, extra in SIZES]
    seen = 0
    plan, failed, work_done = {}, {}, {}
    for node in nodes:  # one untimed call each: it works, and what it gives
        for stage in STAGES:
            for toolkit in TOOLKITS:
                try:
                    if stage == "CDI hooks":
                        check_cdi(node, toolkit)
                    else:
                        _, seen = node.run(stage, toolkit, log, seen)
                except SystemExit as err:
                    if toolkit == "ours":
                        raise
                    failed[f"{stage} | {node.name}"] = str(err.code)
                    continue
                if stage == "create":
                    spec = json.loads((node.bundle / "config.json").read_text())
                    work_done[f"{node.name} | {toolkit}"] = (
                        len(spec["linux"].get("devices", [])), len(spec["mounts"]) - 1)
                plan[(node.name, stage, toolkit)] = True
    runs = []
    for _ in range(args.repeat):
        cpu, seen = measure(nodes, plan, recorder, log, args.rounds, seen)
        runs.append(figures(cpu))
    notes = {node.name: node.note for node in nodes if node.note}
    mounts = {node.name: node.mounts for node in nodes}
    result = {key: {"median": statistics.median(r[key] for r in runs),
                    "runs": [r[key] for r in runs]} for key in runs[0]}
    return {"rounds": args.rounds, "repeat": args.repeat, "anchor": str(anchor),
            "figures": result, "devices, mounts": work_done, "cdi mounts": mounts,
            "graphics": notes, "NVIDIA failed": failed}


def print_report(report: dict) -> None:
    fig = report["figures"]
    print(f"CPU per call, ms (median of {report['rounds']} interleaved rounds, "
          f"x{report['repeat']} runs; create and prestart net of the recorder's start):")
    for key, v in fig.items():
        runs = ", ".join(f"{x:.3f}" for x in v["runs"])
        target = ""
        if key.endswith("ours / NVIDIA"):
            target = f" (target <= {RATIO_TARGET}: {'met' if v['median'] <= 1.0 else 'MISSED'})"
        elif "growth" in key and key.endswith("ours"):
            ok = v["median"] <= GROWTH_TARGET
            target = f" (target <= {GROWTH_TARGET}: {'met' if ok else 'MISSED'})"
        print(f"  {key}: {v['median']:.3f}{target}; runs {runs}")
    for key, (devices, mounts) in report["devices, mounts"].items():
        print(f"  create on {key}: {devices} device nodes, {mounts} mounts")
    for key, why in report["NVIDIA failed"].items():
        print(f"  NVIDIA's {key}: not measured: {why}")
    for key, note in report["graphics"].items():
        print(f"  {key}: {note}")


if __name__ == "__main__":
    sys.exit(main())
