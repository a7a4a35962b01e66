"""Ctrl-C (SIGINT) and SIGTERM: one line, exit 130 or 143, never a traceback, and never silence
after a release was published.

The first signal raises `Interrupted` in the main thread, a KeyboardInterrupt so that psycopg
cancels the query in flight; the run's transaction rolls back and the previous release stays.
Whatever escapes after that (a SystemError from numba's dispatcher, a psycopg error from the
cancelled query) is reported as the interrupt. A second signal is only noted: the cleanup that
records the run as failed finishes.

The commit that swaps a release in is never cut in half: a signal that arrives during it, or
after it, is held (`committing`) and reported when the command ends ("interrupted after
publishing 'NAME'"); a `refresh --due` stops at the next phase (`checkpoints`) instead.

Test hook (documented in docs/operations.md): DBANON_PHASES="verifying:5,committed:5" writes
`dbanon: phase verifying` on stderr when a progress message starts with that word (or when a
release has just been published: `committed`), then sleeps that many seconds, so that a test can
signal a subprocess at a known phase.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Interrupted(KeyboardInterrupt):
    """Raised by the handler: a KeyboardInterrupt, so psycopg cancels the running query."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


@dataclass
class _State:
    signum: int | None = None  # the first signal received
    raised: bool = False  # Interrupted has been raised for it (a callback may have lost it)
    holding: int = 0  # inside a commit that must not be cut
    published: list[str] = field(default_factory=list)
    releasing: bool = False  # a release run has begun (one that has checkpoints)
    first: list[str] = field(default_factory=list)  # releases published for the first time


state = _State()


def _on_signal(signum: int, _frame: object) -> None:
    if state.signum is not None:
        return  # a second signal: let the cleanup that records the run finish
    state.signum = signum
    if state.holding or state.published:
        return  # held: reported when the command ends, or at the next checkpoint
    state.raised = True
    raise Interrupted(signum)


@contextmanager
def handled() -> Iterator[None]:
    """Install the handlers for the duration of a command (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _on_signal) for s in EXIT_CODES}
    hook = sys.unraisablehook
    sys.unraisablehook = _unraisable(hook)
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for s, h in old.items():
            signal.signal(s, h)


def _unraisable(hook: Callable[..., None]) -> Callable[..., None]:
    """Keep quiet when `Interrupted` lands in a callback that cannot raise (numba's compiler
    calls back through ctypes): it is lost there, and the next checkpoint raises it again."""

    def quiet(unraisable: object) -> None:
        if not isinstance(getattr(unraisable, "exc_value", None), Interrupted):
            hook(unraisable)

    return quiet


def reset() -> None:
    """Forget a previous command's signal (an in-process caller runs several)."""
    state.signum, state.raised, state.holding, state.releasing = None, False, 0, False
    state.published.clear()
    state.first.clear()


def first_publish(release: str) -> None:
    """`release` had no release in place when this run began: an interrupt leaves nothing, and
    says so rather than that a previous release is kept."""
    if release not in state.first:
        state.first.append(release)


@contextmanager
def committing(release: str) -> Iterator[None]:
    """Around the commit that publishes `release`: a signal meanwhile is held, not raised."""
    state.holding += 1
    try:
        yield
        state.published.append(release)
    finally:
        state.holding -= 1
    phase("committed")


def checkpoint() -> None:
    """Raise the signal now (main thread), between phases of a run not yet committed (only such
    a run calls it): one held after an earlier release of the command was published, or one
    whose Interrupted a callback swallowed."""
    if (
        state.signum is not None
        and not state.holding
        and threading.current_thread() is threading.main_thread()
    ):
        state.raised = True
        raise Interrupted(state.signum)


def _phases() -> dict[str, float]:
    text = os.environ.get("DBANON_PHASES", "")
    out = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        name, _, seconds = item.partition(":")
        out[name.strip()] = float(seconds or 0)
    return out


def phase(name: str) -> None:
    """The test hook: announce a phase named in DBANON_PHASES on stderr and pause there."""
    pause = _phases().get(name)
    if pause is None:
        return
    print(f"dbanon: phase {name}", file=sys.stderr, flush=True)
    deadline = time.monotonic() + pause
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.05))  # short naps: a held signal does not wait for the whole pause


def checkpoints(progress: Callable[[str], None] | None) -> Callable[[str], None]:
    """A progress callback that is also a checkpoint and, for tests, a phase marker (a phase is
    named by the first word of a progress message: validating, streaming, clustering, ...)."""
    state.releasing = True

    def say(message: str) -> None:
        checkpoint()
        if threading.current_thread() is threading.main_thread():
            phase(message.split(" ", 1)[0].rstrip(":,"))
        if progress is not None:
            progress(message)

    return say


def message() -> tuple[str, int] | None:
    """The line to print and the exit code, if a signal arrived during the command."""
    if state.signum is None:
        return None
    code = EXIT_CODES.get(signal.Signals(state.signum), 128 + state.signum)
    if state.published:
        names = ", ".join(repr(n) for n in state.published)
        return f"interrupted after publishing {names}", code
    if state.releasing and state.first:
        names = ", ".join(repr(n) for n in state.first)
        return f"interrupted; nothing was published ({names} had no release before)", code
    if state.releasing:
        return "interrupted; the previous release is kept", code
    return "interrupted", code  # an audit, a report: no release was being made


def explain(error: BaseException, default: str) -> str:
    """What a run that ended with `error` records: the interrupt if there was one."""
    if state.signum is not None:
        return f"interrupted by {signal.Signals(state.signum).name}"
    return default
