"""Ending a command cleanly however it is asked to stop.

Ctrl-C raises ``KeyboardInterrupt``, which every long verb handles: a run keeps every finished record, marks
itself ``interrupted`` and prints its summary line. A batch scheduler, ``timeout(1)``, systemd or a CI runner
sends SIGTERM instead, and a closed terminal sends SIGHUP; by default either one kills Python on the spot, so the
run file would keep the status ``running`` and no summary would be printed. :func:`signals_interrupt` makes both
raise :class:`Terminated`, a ``KeyboardInterrupt`` that names its signal, so they take the same path as Ctrl-C.

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
from collections.abc import Iterator
from types import FrameType

HANDLED = (signal.SIGTERM, signal.SIGHUP)
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
