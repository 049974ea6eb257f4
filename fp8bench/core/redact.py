"""Keeping secrets out of messages: every store URL or database error fp8bench prints, logs, stores or shows
passes through :func:`redact` first.

A database URL may carry a password (``postgresql://user:PASSWORD@host/db``), and so may text derived from it: an
error that quotes the URL back, a libpq connection string (``host=db password=PASSWORD``). :func:`redact`
replaces the password part of both forms with ``***`` wherever it occurs in a text, so a mistyped scheme
(``postgresq://user:PASSWORD@host``) is masked as well as a valid one. The recommended way is to keep the password
out of the URL altogether: libpq reads it from ``$PGPASSWORD`` or ``~/.pgpass`` (see docs/security.md).

A page served to other machines (the dashboard) must not show where things are on the server either: the store's
absolute path, a run file's or a trace's, a suite file's. :func:`hide_paths` replaces each absolute path in a text
by :func:`shown_path`: relative to the server's working directory when it lies below it, else only its last
component (``…/fp8bench.sqlite``), enough to recognise it and nothing about the machine's folders.

Database drivers also put the failing SQL statement and all of its parameters into their exception text
(SQLAlchemy's ``[SQL: ...] [parameters: ...]``): a whole record's JSON for one failed insert.
:func:`error_line` reduces such an exception to the driver's own first line, redacted.
"""

from __future__ import annotations

import os
import re

MASK = "***"

# scheme://user:password@  (the user part may be empty). The secret runs greedily to the line's last @: a password
# typed unencoded may itself hold an @, a / or a space, none of which a URL parser would accept there. Masking too
# much of a rare line that has an @ after a port (``scheme://host:5432/db ... a@b``) is the safe error.
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/?#@\s]*:)(?P<secret>[^\n]*)(?=@)")
# libpq keyword/value connection strings: password=secret or password='a secret'
_KEYWORD_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<secret>'(?:[^'\\]|\\.)*'|[^\s'&]+)", re.IGNORECASE)


def redact(text: object) -> str:
    """``text`` (a URL, a path, an error message) with every password in it replaced by ``***``."""
    masked = _URL_PASSWORD.sub(lambda m: m["head"] + MASK, str(text))
    return _KEYWORD_PASSWORD.sub(lambda m: m["head"] + MASK, masked)


# An absolute POSIX path in a text: a "/" at the start, after a blank, a quote, a bracket, "=", "," or ";", or the
# path of a ``sqlite:///`` URL (so not "a/b", "http://h/p", "./x", "1/2" or "</b>"); it runs to a blank, a quote or
# a closing bracket.
_ABS_PATH = re.compile(r"(?:(?<=sqlite:///)|(?<![^\s'\"`(\[{=,;]))/[^\s/'\"`<>|)\]}][^\s'\"`<>|)\]}]*")


def shown_path(path: str, cwd: str | None = None) -> str:
    """An absolute path of this machine as shown to someone on another: relative to ``cwd`` (default the working
    directory) when it lies below it, else ``…/`` and its last component."""
    normal = os.path.normpath(path)
    rel = os.path.relpath(normal, cwd or os.getcwd())
    if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
        return rel
    name = os.path.basename(normal)
    return f"…/{name}" if name else "…"


def hide_paths(text: object, cwd: str | None = None) -> str:
    """``text`` with passwords masked (:func:`redact`) and every absolute path replaced by :func:`shown_path`."""
    return _ABS_PATH.sub(lambda m: shown_path(m[0], cwd), redact(text))


def has_password(url: str) -> bool:
    """Whether ``url`` carries a password (which would show in shell history and process lists)."""
    return redact(url) != url


def error_line(exc: BaseException) -> str:
    """One redacted line for an exception: a database driver's own message (not SQLAlchemy's statement and
    parameter dump), else the exception's first line, prefixed with its type."""
    orig = getattr(exc, "orig", None)
    source = orig if isinstance(orig, BaseException) else exc
    lines = str(source).strip().splitlines()
    first = lines[0].strip() if lines else ""
    return redact(f"{type(source).__name__}: {first}" if first else type(source).__name__)
