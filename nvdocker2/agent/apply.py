"""The agent's one door to the rest of nvdocker2: `nvdocker2 install|uninstall ... --json`, run
as a separate program (the same interpreter, `-I`, cwd /, a clean environment).

The agent knows nothing of engines, files or journals; it asks the command every user runs and
reads its JSON. So the agent guarantees exactly what install and uninstall guarantee (one
transaction each: lock, backup, journal, atomic write, restart only on change, verify, roll
back), and a SIGKILL of the agent mid-apply is a SIGKILL of that command, which the next run
completes from its journal.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Optional

from nvdocker2.host import files, testing
from nvdocker2.host import run as door

# Where each engine's config lives on a host, for --host-root (install's own defaults when the
# host root is /).
ENGINE_CONFIG = {
    "docker": "/etc/docker/daemon.json",
    "containerd": "/etc/containerd/config.toml",
    "crio": "/etc/crio/crio.conf.d/99-nvidia.conf",
}
STATE_DIR = "/var/lib/nvdocker2"


@dataclass(frozen=True)
class Target:
    """What the agent installs, in install's words (each field is the install option)."""

    engine: str = "docker"
    config: Optional[str] = None  # the file as the node names it
    reload: str = "auto"
    verify: bool = True
    set_default: bool = False
    runtime_name: str = "nvidia"
    runtime_path: Optional[str] = None
    address: Optional[str] = None  # --containerd-address (containerd's or CRI-O's socket)
    timeout: float = 60.0
    state_dir: Optional[str] = None  # NVDOCKER2_STATE_DIR for the command, None: its default
    host_root: str = "/"


def resolve(engine: str, config: Optional[str], host_root: str) -> tuple[str, str, Optional[str]]:
    """(config as this process sees it, config as the node names it, state directory):
    --config (default: the engine's usual file) and the state directory are node paths, found
    under --host-root; with host root / the state directory is left to install
    ($NVDOCKER2_STATE_DIR, else its default)."""
    root = os.path.abspath(host_root)
    node = os.path.abspath(config or ENGINE_CONFIG[engine])
    if root == "/":
        return node, node, None
    if node_dir(node) == "/":
        raise ValueError(f"--config {node}: with --host-root the config must be in a "
                         "directory below / (that directory is shown to install at its node path)")
    return (os.path.join(root, node.lstrip("/")), node,
            os.path.join(root, STATE_DIR.lstrip("/")))


def node_dir(node_config: str) -> str:
    """The node directory install is shown at its own path: the config's directory, or the one
    above a drop-in directory (`*.d`: CRI-O's crio.conf.d sits in /etc/crio)."""
    d = os.path.dirname(node_config)
    return os.path.dirname(d) if d.endswith(".d") else d


@dataclass(frozen=True)
class Outcome:
    """What one install/uninstall said: its exit code and JSON object."""

    code: int
    report: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.code == 0

    @property
    def changed(self) -> bool:
        return bool(self.report.get("changed"))

    def summary(self) -> str:
        """One line: the changes made (or the error and its hint)."""
        if not self.ok:
            err = self.report.get("error") or f"exit {self.code}"
            hint = self.report.get("hint")
            return f"{err} (exit {self.code})" + (f"; hint: {hint}" if hint else "")
        if not self.changed:
            return "unchanged"
        keys = ", ".join(f"{c.get('key')} {c.get('action')}"
                         for c in self.report.get("changes", []))
        extra = [f"backup {self.report['backup']}"] if self.report.get("backup") else []
        reload = self.report.get("reload")
        if reload:
            extra.append(f"reload {reload}")
        if self.report.get("verified"):
            extra.append("verified")
        return (keys or "changed") + (f" ({', '.join(extra)})" if extra else "")


# Run in a private mount namespace: the node's directory bound over the same path here.
_SHOW_NODE_DIR = 'src=$1 dst=$2; shift 2; mount --bind "$src" "$dst"; exec "$@"'


def argv(action: str, t: Target) -> list[str]:
    """The command line. With a host root, install runs in a private mount namespace where the
    node's config directory is at its node path, so every path install writes into the config
    (containerd's imports of its drop-in) and every absolute path it reads there means on the
    node what it means to install."""
    cmd = [sys.executable, "-I", "-m", "nvdocker2", action, "--engine", t.engine,
           "--reload", t.reload, "--runtime-name", t.runtime_name, "--timeout", str(t.timeout),
           "--json"]
    if t.config:
        cmd += ["--config", t.config]
    if not t.verify:
        cmd.append("--no-verify")
    if t.address:
        cmd += ["--containerd-address", t.address]
    if action == "install":
        if t.set_default:
            cmd.append("--set-default")
        if t.runtime_path:
            cmd += ["--runtime-path", t.runtime_path]
            if t.host_root != "/":  # a node path: install, in the agent's image, cannot see it
                cmd.append("--allow-missing-runtime")
    if t.host_root == "/" or not t.config:
        return cmd
    d = node_dir(t.config)
    return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-euc", _SHOW_NODE_DIR,
            "nvdocker2-agent", os.path.join(t.host_root, d.lstrip("/")), d, *cmd]


def environment(t: Target) -> dict[str, str]:
    """What install gets beside the door's clean environment (nvdocker2.host.run, which also
    carries the test hooks under the test suite's switch): a fixed PATH, a UTF-8 locale and
    nvdocker2's documented variables (the state directory, debug); the fault-injection hooks
    only under the test suite's switch (nvdocker2.host.testing)."""
    env = {k: os.environ[k] for k in ("NVDOCKER2_STATE_DIR", "NVDOCKER2_DEBUG")
           if k in os.environ}
    if testing.hooks_on():  # the test suite's fault injection, under its switch only
        env.update((k, v) for k, v in os.environ.items() if k.startswith("NVDOCKER2_TEST_"))
    env.update(PATH=door.SYSTEM_PATH, LANG="C.UTF-8")
    if t.state_dir:
        env["NVDOCKER2_STATE_DIR"] = t.state_dir
    if t.host_root != "/":
        # The image's systemctl and journalctl run the node's own there (deploy/image).
        env["NVDOCKER2_AGENT_HOST_ROOT"] = t.host_root
    return env


def run(action: str, t: Target) -> Outcome:
    """Run `nvdocker2 ACTION` for the target and wait for it (in its own session, so a Ctrl-C
    meant for the agent does not cut the transaction short: the agent waits, then acts)."""
    if t.state_dir:
        files.make_dirs(t.state_dir, 0o700)
    if t.host_root != "/" and t.config and not os.path.isdir(node_dir(t.config)):
        d = node_dir(t.config)
        return Outcome(2, {"error": f"the node's {d} cannot be shown to install at {d}: there "
                                    f"is no directory {d} here to bind it on",
                           "hint": f"make {d} in the agent's image (deploy/image/build.sh "
                                   "makes /etc/docker, /etc/containerd and /etc/crio)"})
    try:
        p = door.run(argv(action, t), env=environment(t), text=True,
                     timeout=t.timeout * 4 + 60)
    except door.Timeout:
        return Outcome(124, {"error": f"nvdocker2 {action} did not finish",
                             "hint": "see what holds the engine or the lock"})
    except OSError as e:
        return Outcome(127, {"error": f"cannot run nvdocker2 {action}: {e}"})
    try:
        report = json.loads(p.stdout)
    except ValueError:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        report = {"error": f"nvdocker2 {action} gave no JSON: {last}"}
    return Outcome(p.returncode, report if isinstance(report, dict) else {})
