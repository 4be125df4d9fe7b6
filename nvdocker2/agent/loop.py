"""The agent's life: take the node's lock, install, report ready, re-apply drift (backing off
when the same drift keeps coming back), and on SIGTERM/SIGINT uninstall and exit.

Every decision is one log line on stderr. Installing and uninstalling are `nvdocker2 install`
and `nvdocker2 uninstall` (see `apply`), so what is kept, backed up, restarted and restored is
what those commands promise.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from nvdocker2.agent import apply, node_cdi, toolkit
from nvdocker2.host import files
from nvdocker2.agent.serve import Readiness, serve_healthz
from nvdocker2.agent.watch import Watcher, fingerprint

RECUR_WINDOW = 600.0  # the same drift seen again within this many seconds counts as recurring
MAX_BACKOFF_FACTOR = 32  # back-off doubles up to this many times its first value
SETTLE = 0.2  # seconds a changed file must stay unchanged before it is acted on


class CannotStart(Exception):
    """The agent cannot start here (the lock's directory, the /healthz port); str() says what,
    `hint` what to do. Nothing was changed."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class Options:
    target: apply.Target
    config: Path  # the file as this process sees it
    lock: Path
    ready_file: Optional[Path] = None
    healthz_port: Optional[int] = None
    keep_on_exit: bool = False
    poll: float = 5.0
    backoff: float = 10.0
    toolkit: Optional[toolkit.Toolkit] = None  # --install-toolkit: copied before the engine


def log(message: str) -> None:
    """One event, one line: a UTC time stamp, then the message with no line breaks."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    text = " ".join(message.replace("\r", " ").replace("\n", " ").split())
    sys.stderr.write(f"{stamp} nvdocker2 agent: {text}\n")
    sys.stderr.flush()


class Agent:
    def __init__(self, opts: Options, say: Callable[[str], None] = log) -> None:
        self.o = opts
        self.say = say
        self.stopping: Optional[str] = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self.readiness = Readiness(opts.ready_file)
        self._seen: dict[str, list[float]] = {}  # drifted fingerprint -> when it was re-applied
        self._spec_due: Optional[float] = None  # when to try the node's CDI spec again
        self._spec_said = ""

    # --- signals ---------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopping = signal.Signals(signum).name
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _sleep(self, seconds: float, watcher: Optional[Watcher] = None) -> None:
        if watcher is not None:
            watcher.wait(seconds, self._wake_r)
        else:
            import select

            select.select([self._wake_r], [], [], max(0.0, seconds))

    # --- the node's lock -------------------------------------------------------------------

    def _lock(self) -> Optional[int]:
        """The agent lock's fd once held; None when told to stop while waiting for it."""
        files.make_dirs(self.o.lock.parent, 0o700)
        files.open_lock_file(self.o.lock, 0o600)
        fd = os.open(self.o.lock, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        told = False
        while self.stopping is None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if not told:
                    holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                    self.say(f"another nvdocker2 agent (pid {holder}) holds {self.o.lock}: only "
                             "one agent edits a node's engine config; waiting until it exits")
                    self.readiness.set(False, "waiting for another agent to exit")
                    told = True
                self._sleep(1.0)
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            if told:
                self.say(f"the other agent exited; {self.o.lock} is ours now")
            return fd
        os.close(fd)
        return None

    # --- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        if self.o.healthz_port is not None:
            try:
                server = serve_healthz(self.o.healthz_port, self.readiness)
            except OSError as e:
                raise CannotStart(f"cannot serve /healthz on 127.0.0.1:{self.o.healthz_port}: "
                                  f"{e.strerror or e}", "pick a free port for --healthz") from None
            self.say(f"/healthz on http://127.0.0.1:{server.server_address[1]}")
        self.readiness.set(False, "starting")
        if self.o.toolkit is not None:
            try:
                toolkit.check(self.o.toolkit)
            except toolkit.Refused as e:
                raise CannotStart(f"--install-toolkit {self.o.toolkit.dir}: {e}", e.hint
                                  ) from None
        try:
            fd = self._lock()
        except OSError as e:
            raise CannotStart(f"cannot take the agent lock {self.o.lock}: {e.strerror or e}",
                              "run the agent as root, with the node's root at --host-root"
                              ) from None
        if fd is None:
            self.say(f"stopping on {self.stopping} before taking the lock; nothing was changed")
            return 0
        try:
            watcher = Watcher(self.o.config, self.o.poll)
            self.say(f"engine {self.o.target.engine}, config {self.o.config}; watching by "
                     f"{watcher.how}")
            self._watch(watcher)
            watcher.close()
            return self._finish()
        finally:
            os.close(fd)

    def _watch(self, watcher: Watcher) -> None:
        known: Optional[str] = None  # the files' fingerprint after our last good install
        next_try = 0.0
        fail_wait = 0.0
        first = True
        waiting_said = ""
        while self.stopping is None:
            fp = self._settled(known)
            now = time.monotonic()
            if fp != known and now >= next_try:
                out = self._install()
                if self.stopping is not None and not out.ok:
                    return  # a signal may have cut it short: the exit path decides
                if out.ok:
                    fail_wait = 0.0
                    next_try = self._installed(out, fp, first)
                    known = fingerprint(self.o.config)
                    waiting_said = ""
                    first = False
                else:
                    fail_wait = min(max(fail_wait * 2, self.o.backoff),
                                    self.o.backoff * MAX_BACKOFF_FACTOR)
                    next_try = time.monotonic() + fail_wait
                    why = out.summary()
                    self.readiness.set(False, "install failed: " + why)
                    self.say(f"install failed: {why}; trying again in {fail_wait:g} s")
            elif fp != known and known is not None and not fail_wait and waiting_said != fp:
                left = max(0.0, next_try - now)
                self.readiness.set(False, f"drift in {self.o.config}, re-applied in {left:.0f} s")
                self.say(f"{self.o.config} changed again; backing off: re-applying in "
                         f"{left:.0f} s")
                waiting_said = fp
            if self._spec_due is not None and time.monotonic() >= self._spec_due:
                self._node_spec()
            watcher.rearm()
            self._sleep(max(0.0, next_try - time.monotonic()) if fp != known else
                        self.o.poll, watcher)

    def _install(self) -> apply.Outcome:
        """The toolkit into its directory (when asked), verified, then the engine's install;
        a toolkit this call copied is removed again when the engine's install fails."""
        kit = self.o.toolkit
        placed = None
        if kit is not None:
            try:
                placed = toolkit.install(kit)
                if placed.changed:
                    self.say(placed.summary)
                if self.o.target.verify:
                    toolkit.verify(kit, self.o.target.timeout)
            except (toolkit.Refused, OSError) as e:
                hint = getattr(e, "hint", "see that the node's directory is root's and has room")
                if placed is not None and placed.new:
                    self._remove_toolkit()
                return apply.Outcome(2, {"error": f"--install-toolkit {kit.dir}: {e}",
                                         "hint": hint})
        out = apply.run("install", self.o.target)
        if not out.ok and placed is not None and placed.new:
            self._remove_toolkit()
        elif out.ok and kit is not None:
            self._node_spec()
        return out

    def _node_spec(self) -> None:
        """The node's CDI spec, made by the toolkit (node_cdi): said, never fatal; a node
        whose driver is not there yet is tried again every --backoff seconds."""
        kit = self.o.toolkit
        assert kit is not None
        try:
            said = node_cdi.write(kit, node_cdi.generate(kit, self.o.target.timeout))
        except (toolkit.Refused, OSError) as e:
            self._spec_due = time.monotonic() + self.o.backoff
            if str(e) != self._spec_said:
                self.say(f"no CDI spec for the node yet: {e}; trying again every "
                         f"{self.o.backoff:g} s")
                self._spec_said = str(e)
            return
        self._spec_due, self._spec_said = None, ""
        if not said.endswith("unchanged"):
            self.say(said)

    def _remove_toolkit(self) -> bool:
        """Remove the toolkit's directory (False, said, when that fails)."""
        kit = self.o.toolkit
        assert kit is not None
        try:
            said = node_cdi.remove(kit)
            if said:
                self.say(said)
            if toolkit.remove(kit):
                self.say(f"toolkit removed from {kit.dir}")
            return True
        except (toolkit.Refused, OSError) as e:
            self.say(f"cannot remove the toolkit from {kit.dir}: {e}")
            return False

    def _settled(self, known: Optional[str]) -> str:
        """The files' fingerprint once another writer is done: a change is read again after
        SETTLE seconds until two reads agree (a plain `>` rewrite is seen half written)."""
        fp = fingerprint(self.o.config)
        for _ in range(20):
            if fp == known or self.stopping is not None:
                break
            self._sleep(SETTLE)
            again = fingerprint(self.o.config)
            if again == fp:
                break
            fp = again
        return fp

    def _installed(self, out: apply.Outcome, before: str, first: bool) -> float:
        """Log a good install, update readiness, and return the time before which no
        re-apply may run (now, unless the same drift keeps coming back)."""
        now = time.monotonic()
        where = f"{self.o.config}"
        if first:
            self.say(f"install: {out.summary()}")
            self.readiness.set(True, f"nvidia runtime in {where}")
            self.say(f"ready: the nvidia runtime is in {where}")
            return now
        self.readiness.set(True, f"nvidia runtime in {where}")
        if not out.changed:
            self.say(f"{where} changed; the nvidia runtime is still in place (install: unchanged)")
            return now
        seen = [t for t in self._seen.get(before, []) if now - t < RECUR_WINDOW] + [now]
        self._seen[before] = seen
        self.say(f"drift in {where}: re-applied: {out.summary()}")
        if len(seen) < 2:
            return now
        wait = min(self.o.backoff * 2 ** (len(seen) - 2), self.o.backoff * MAX_BACKOFF_FACTOR)
        self.say(f"the same drift came back {len(seen) - 1} time(s) within "
                 f"{now - seen[0]:.0f} s: another controller seems to rewrite {where}; backing "
                 f"off: the next re-apply waits {wait:g} s")
        return now + wait

    def _finish(self) -> int:
        self.readiness.set(False, f"stopping on {self.stopping}")
        if self.o.keep_on_exit:
            self.say(f"stopping on {self.stopping}: --keep-on-exit, {self.o.config} stays "
                     "installed")
            return 0
        out = apply.run("uninstall", self.o.target)
        if out.ok:
            self.say(f"stopping on {self.stopping}: uninstall: {out.summary()}")
            if self.o.toolkit is not None and not self._remove_toolkit():
                return 1
            return 0
        self.say(f"stopping on {self.stopping}: uninstall failed: {out.summary()}")
        return out.code or 1
