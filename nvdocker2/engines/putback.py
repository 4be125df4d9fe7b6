"""Putting the previous state back when a transaction fails or is interrupted (reference §8):
the old bytes go back, the engine applies and verifies them again where it may have taken the
new ones, and what is left is said exactly (exit 4; exit 5 naming the backups)."""

from __future__ import annotations

import contextlib
import signal
from typing import Any, Callable, Sequence

from nvdocker2.engines.base import EngineDied, FileEdit, Plan
from nvdocker2.engines.context import Context
from nvdocker2.errors import Interrupted, NvDockerError, RollbackFailed
from nvdocker2.host import testing
from nvdocker2.store.atomic import AsRead, Ownership, atomic_remove, atomic_write
from nvdocker2.store.backups import Backup, Backups


def as_read(ctx: Context, f: FileEdit) -> AsRead:
    return AsRead(f.old, f.stat if f.stat is not None else ctx.stats.get(f.path))


def interrupted(ctx: Context, restored: Backup | None | bool) -> Interrupted:
    """What an interrupted change left, exactly: nothing written (`restored` None), or the
    previous bytes back (from backup `restored`; False: put back from memory, no backup kept)."""
    if restored is None:
        return Interrupted(f"{ctx.engine.config} is unchanged: interrupted before writing")
    kept = f" (backup {restored.id})" if isinstance(restored, Backup) else ""
    return Interrupted(f"{ctx.engine.config}: restored the previous bytes{kept}")


def discard(backups: Backups, made: Sequence[Backup]) -> None:
    for b in made:
        with contextlib.suppress(Exception):
            backups.discard(b)


@contextlib.contextmanager
def putting_back(ctx: Context, exc: BaseException, left: Callable[[], Interrupted]) -> Any:
    """While the previous bytes go back, SIGINT, SIGTERM and SIGHUP wait: a second Ctrl-C must
    not leave the files half restored. The signals that came are delivered after, as an
    interruption saying what `left()` says the files hold (unless one is under way already)."""
    came: list[int] = []
    saved: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            saved[sig] = signal.signal(sig, lambda signum, frame: came.append(signum))
        except (ValueError, OSError):  # not the main thread: nothing to defer
            pass
    try:
        testing.pause("restore")
        yield
    finally:
        for num, handler in saved.items():
            signal.signal(num, handler)
    if came and not isinstance(exc, KeyboardInterrupt):
        try:
            for num in dict.fromkeys(came):
                signal.raise_signal(num)  # the handler the process had: the CLI's, the agent's
        except KeyboardInterrupt:
            raise left() from None


def put_old(ctx: Context, files: Any) -> None:
    for f in files:
        if f.old is None:
            atomic_remove(f.path)
        else:
            atomic_write(f.path, f.old, owner=Ownership.of(as_read(ctx, f).stat))


def restore(ctx: Context, plan: Plan, written: list[FileEdit], made: list[Backup],
             exc: BaseException, reapply: bool) -> None:
    """Put the old bytes back and, when the engine may have taken the new ones (`reapply`),
    apply and verify the old state; RollbackFailed (exit 5) naming the backups if that fails."""
    engine, service = ctx.engine, ctx.service
    step = "write"
    try:
        if reapply and service.strategy != "none" and written:
            back = [f for f in written if f.path in plan.back_via]
            for f in back:
                atomic_write(f.path, plan.back_via[f.path])
            put_old(ctx, (f for f in reversed(written) if f.path not in plan.back_via))
            step = service.verb
            ctx.reporter.progress(
                f"{service.verb_ing} {engine.process} ({service.strategy}) with the previous file")
            service.apply()
            if service.verifies:
                step = "verify"
                with ctx.reporter.waiting(
                        f"waiting for {engine.process} to report the previous state"):
                    service.verify(plan.expect_old, ctx.timeout)
            step = "write"
            put_old(ctx, back)
        else:
            put_old(ctx, reversed(written))
    except BaseException as e2:
        why = e2.message if isinstance(e2, NvDockerError) else message(e2)
        try:  # whether or not the engine is there to take them, the previous bytes go back
            put_old(ctx, reversed(written))
            restored = True
        except BaseException:
            restored = False
        by_hand = "; ".join(f"cp {b.file} {b.config}" if b.existed else f"rm {b.config}"
                            for b in made) + f", then: {engine.restart_hint()}"
        if len(made) == 1:
            saved = str(made[0].file) if made[0].existed else "(there was no file)"
            where = f"the previous file is backup {saved}"
        else:
            where = "the previous files are backups " + ", ".join(
                str(b.file) if b.existed else f"(no {b.config})" for b in made)
            by_hand = "see nvdocker2 backups for " + ", ".join(b.config for b in made) + \
                f"; {by_hand}"
        hint = f"restore by hand: {by_hand}"
        if restored and (isinstance(e2, EngineDied) or any(f.path in plan.back_via
                                                           for f in written)):
            # The in-between bytes of the way back were on disk: say they are gone again.
            where += ", and the file has its previous bytes again"
            if isinstance(e2, EngineDied) and e2.hint:
                hint = e2.hint
        raise RollbackFailed(
            f"{engine.config}: the change failed ({message(exc)}) and putting the previous state "
            f"back failed at the {step} step too: {why}; {where}", hint,
        ) from None


def message(exc: BaseException) -> str:
    if isinstance(exc, NvDockerError):
        return exc.message
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return f"{type(exc).__name__}: {exc}"
