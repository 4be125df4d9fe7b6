"""`nvdocker2 agent`: keep one node's container engine configured for the nvidia runtime for as
long as the agent runs, and put back what was there when it stops (docs/kubernetes.md).

`apply` is the one place it reaches the rest of nvdocker2 (the `install`/`uninstall` commands);
`watch` notices rewrites, `serve` reports readiness, `loop` decides.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from nvdocker2.agent import apply, toolkit
from nvdocker2.agent.loop import Agent, CannotStart, Options

__all__ = ["CannotStart", "Options", "options", "run"]

LOCK_NAME = "agent.lock"


def options(engine: str, config: Optional[str], host_root: str, reload: str, verify: bool,
            set_default: bool, runtime_name: str, runtime_path: Optional[str],
            address: Optional[str], timeout: float, ready_file: Optional[str],
            healthz: Optional[int], keep_on_exit: bool, poll: float, backoff: float,
            install_toolkit: Optional[str] = None) -> Options:
    """The agent's options from its flags: --config and the state directory are node paths,
    found under --host-root (ValueError: a --config that cannot be shown at its node path).
    With `install_toolkit` (a node directory) the engine's runtime is the launcher there."""
    seen, node, state = apply.resolve(engine, config, host_root)
    kit = toolkit.Toolkit(dir=install_toolkit, host_root=os.path.abspath(host_root)) \
        if install_toolkit else None
    if kit is not None:
        runtime_path = kit.runtime
    lock_dir = state or os.environ.get("NVDOCKER2_STATE_DIR") or apply.STATE_DIR
    target = apply.Target(engine=engine, config=node, reload=reload, verify=verify,
                          set_default=set_default, runtime_name=runtime_name,
                          runtime_path=runtime_path, address=address, timeout=timeout,
                          state_dir=state, host_root=os.path.abspath(host_root))
    return Options(target=target, config=Path(seen), lock=Path(lock_dir) / LOCK_NAME,
                   ready_file=Path(os.path.abspath(ready_file)) if ready_file else None,
                   healthz_port=healthz, keep_on_exit=keep_on_exit, poll=poll, backoff=backoff,
                   toolkit=kit)


def run(opts: Options) -> int:
    """Run the agent until SIGTERM or SIGINT; the exit code (0 once it restored, or kept).
    Raises CannotStart before changing anything when it cannot start here."""
    return Agent(opts).run()
