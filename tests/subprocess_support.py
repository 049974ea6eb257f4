"""Starting a command the way a terminal would, for tests that stop it with a signal.

A command started from a non-interactive shell's background job inherits SIGINT ignored (POSIX: such jobs must not
see the terminal's Ctrl-C), and Python then leaves it ignored, as fp8bench does: a test runner started that way
would make every Ctrl-C test hang. Such tests start their command with SIGINT at its default, as a foreground
command typed at a terminal has it."""

from __future__ import annotations

import signal


def sigint_at_its_default() -> None:
    """``preexec_fn`` for ``subprocess.Popen``: SIGINT back to its default action in the child, before it runs."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
