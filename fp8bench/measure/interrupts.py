"""Ending a command cleanly however it is asked to stop.

Ctrl-C raises ``KeyboardInterrupt``, which every long verb handles: a run keeps every finished record, marks
itself ``interrupted`` and prints its summary line. A batch scheduler, ``timeout(1)``, systemd or a CI runner
sends SIGTERM instead, and a closed terminal sends SIGHUP; by default either one kills Python on the spot, so the
run file would keep the status ``running`` and no summary would be printed. :func:`signals_interrupt` makes both
raise :class:`Terminated`, a ``KeyboardInterrupt`` that names its signal, so they take the same path as Ctrl-C.

A command that makes things outside its output folder (``ab`` and ``bisect`` check commits out into temporary git
worktrees and start one worker process per side) must undo them however it is stopped, including when it is
stopped twice in a row: ``timeout`` signals it and a person presses Ctrl-C again when nothing seems to happen. A
second signal raising in the middle of the clean-up would leave worktrees registered in the user's repository.
:func:`cleanup_on_stop` lets the first stop signal raise as usual and only notes the later ones, and runs the
clean-up steps registered with it once, to the end, when its block ends in any way.

A child process must not outlive the command that started it (``fp8bench dashboard`` runs Streamlit as one):
:func:`die_with_parent` asks Linux to send the child SIGTERM when its parent dies, even by SIGKILL.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType

HANDLED = (signal.SIGTERM, signal.SIGHUP)
STOP_SIGNALS = (signal.SIGINT, *HANDLED)
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C's ``KeyboardInterrupt`` would be."""

    def __init__(self, signum: int) -> None:
        self.signal_name = signal.Signals(signum).name
        super().__init__(self.signal_name)


def _raise_terminated(signum: int, _frame: FrameType | None) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated`; the previous handlers come back after.
    Signal handlers belong to the main thread: elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise_terminated) for s in HANDLED}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


class Teardown:
    """The clean-up steps of one command, run last registered first, each once (see :func:`cleanup_on_stop`)."""

    def __init__(self) -> None:
        self._steps: list[Callable[[], object]] = []
        self.signals: list[str] = []  # every stop signal received in the block, the first included

    def add(self, step: Callable[[], object]) -> None:
        """Run ``step`` when the block ends; register it before it has anything to undo, and make it safe to run
        twice (the code that made a thing may undo it itself on its normal path)."""
        self._steps.append(step)

    def run(self) -> None:
        """Every step, even when one fails (the first failure is raised after the others ran)."""
        failed: BaseException | None = None
        while self._steps:
            try:
                self._steps.pop()()
            except Exception as exc:  # noqa: BLE001 - the other steps must still run
                failed = failed or exc
        if failed is not None:
            raise failed


@contextlib.contextmanager
def cleanup_on_stop() -> Iterator[Teardown]:
    """Within the block, the first SIGINT, SIGTERM or SIGHUP raises as usual (``KeyboardInterrupt``,
    :class:`Terminated`); every later one is only noted in ``Teardown.signals``, so the ``finally`` clauses on the
    way out and the registered steps run to the end. The steps run when the block ends in any way, with stop
    signals still only noted; the previous handlers come back after. Outside the main thread signals cannot be
    handled: the steps still run at the end."""
    teardown = Teardown()
    if threading.current_thread() is not threading.main_thread():
        try:
            yield teardown
        finally:
            teardown.run()
        return

    def noted(signum: int, _frame: FrameType | None) -> None:
        teardown.signals.append(signal.Signals(signum).name)

    def first(signum: int, frame: FrameType | None) -> None:
        for s in STOP_SIGNALS:
            signal.signal(s, noted)
        noted(signum, frame)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signum)

    previous = {s: signal.signal(s, first) for s in STOP_SIGNALS}
    try:
        yield teardown
    finally:
        for s in STOP_SIGNALS:
            signal.signal(s, noted)
        try:
            teardown.run()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


def die_with_parent(parent_pid: int, signum: int = signal.SIGTERM) -> None:
    """In a child process before ``exec`` (``Popen(preexec_fn=functools.partial(die_with_parent, os.getpid()))``),
    or first thing in a worker process: receive ``signum`` (SIGTERM by default; SIGKILL for a worker that ignores
    SIGTERM) when the parent dies. Linux only; elsewhere the parent's own handler is the only guard."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the request was made: nobody would signal us
        os._exit(1)
