"""Keeping secrets out of messages: every store URL or database error fp8bench prints, logs, stores or shows
passes through :func:`redact` first.

A database URL may carry a password (``postgresql://user:PASSWORD@host/db``), and so may text derived from it: an
error that quotes the URL back, a libpq connection string (``host=db password=PASSWORD``). :func:`redact`
replaces the password part of both forms with ``***`` wherever it occurs in a text, so a mistyped scheme
(``postgresq://user:PASSWORD@host``) is masked as well as a valid one. The recommended way is to keep the password
out of the URL altogether: libpq reads it from ``$PGPASSWORD`` or ``~/.pgpass`` (see docs/security.md).

Database drivers also put the failing SQL statement and all of its parameters into their exception text
(SQLAlchemy's ``[SQL: ...] [parameters: ...]``): a whole record's JSON for one failed insert.
:func:`error_line` reduces such an exception to the driver's own first line, redacted.
"""

from __future__ import annotations

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
