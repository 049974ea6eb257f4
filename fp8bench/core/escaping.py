"""Text that somebody else wrote, shown where it could act: Markdown reports, spreadsheets, terminals and links.

Every string in a run file (a device name, a failure reason, a precision, a git remote) comes from whatever was
ingested, so each place that shows one passes it through the function for its medium:

* **Markdown** (gate reports, pull-request comments, job summaries, the dashboard): :func:`md_text` makes a value
  render as exactly its text. It backslash-escapes every ASCII punctuation character (CommonMark allows the escape
  for each, and an escaped character is always literal), so no link, image, emphasis, heading, table pipe or HTML
  can start; joins lines, so a value cannot open a heading or list of its own; and puts an invisible WORD JOINER
  (U+2060) after the ``:`` of ``://``, between ``www`` and its dot, and after ``@``, because GitHub and remark-gfm
  find autolinks and ``@mentions`` in the text left *after* parsing, where escapes are gone.
  :func:`md_code` is a code span for identifiers such as case keys: a fence longer than any run of backticks in
  the value, and ``|`` escaped, which GFM tables need even inside code. :func:`md_code_block` fences a command
  to paste the same way, with a fence longer than any backtick run inside (CommonMark: a fence closes only on a run
  at least as long), so the command is shown exactly as quoted, never rewritten.
* **Spreadsheets** (CSV files): a cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is a
  formula to Excel, LibreOffice and Google Sheets (an ``=HYPERLINK(...)`` that leaks data when clicked).
  OWASP's rule (https://owasp.org/www-community/attacks/CSV_Injection) is to prefix such a text cell with a
  single quote, which the spreadsheet shows as text; :func:`spreadsheet_safe` does that to text cells only
  (numbers stay numbers: ``-1.5`` is a value, not a formula).
* **Terminals**: :func:`term_text` removes control characters (an ``ESC [2J`` in a device name clears the screen;
  other escape sequences rewrite the title or fake output) and escapes Rich markup, so a precision named ``[/]fp8``
  prints as itself instead of crashing Rich's markup parser.
* **Links**: :func:`web_url` keeps an ``http``/``https`` address and drops anything else (``javascript:``,
  ``data:``, ``file:``), so a stored git remote cannot become a script link.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import TYPE_CHECKING, Any

from fp8bench.core.redact import redact

if TYPE_CHECKING:
    import pandas as pd

# Every ASCII punctuation character (CommonMark, "backslash escapes"): !"#$%&'()*+,-./ :;<=>?@ [\]^_` {|}~
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
_WORD_JOINER = "\u2060"
# Where autolink literals and mentions start: a scheme's "://", "www.", an e-mail's or a mention's "@".
_AUTOLINK_STARTS = re.compile(r"(:)(?=//)|(www)(?=\.)|(@)", re.IGNORECASE)
# C0 controls, DEL and C1 controls: terminal escape sequences start with ESC (0x1b) or CSI (0x9b).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# OWASP's formula triggers.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def one_line(value: object) -> str:
    """``value`` as one line of printable text: passwords in URLs masked, line breaks and tabs as spaces, other
    control characters removed."""
    text = redact(value)
    return _CONTROL.sub(lambda m: " " if m.group(0) in "\n\r\t" else "", text)


def md_text(value: object) -> str:
    """``value`` as Markdown that renders as exactly its text, on one line (see the module docstring)."""
    text = _AUTOLINK_STARTS.sub(lambda m: m.group(0) + _WORD_JOINER, one_line(value))
    return _PUNCTUATION.sub(r"\\\1", text)


def md_code(value: object) -> str:
    """``value`` as a Markdown code span that stays one table cell: fenced by more backticks than it holds in a
    row, ``|`` escaped (GFM splits cells on it even inside code), one line."""
    text = one_line(value)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text.replace('|', chr(92) + '|')}{pad}{fence}"


def md_code_block(text: str, info: str = "bash", indent: str = "") -> list[str]:
    """``text`` (one line, no control characters: a shell-quoted command) as the lines of a fenced code block."""
    if _CONTROL.search(text):
        raise ValueError("a code block to paste must be one line without control characters")
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return [f"{indent}{fence}{info}", f"{indent}{text}", f"{indent}{fence}"]


def term_text(value: object) -> str:
    """``value`` for a Rich console: one line, no control characters, markup escaped."""
    from rich.markup import escape

    return escape(one_line(value))


def spreadsheet_safe(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula, prefixed with ``'``; any other value unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def neutralize_formulas(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` whose text cells (and column names) cannot run as spreadsheet formulas."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object or str(out[column].dtype) in ("string", "str"):
            out[column] = out[column].map(spreadsheet_safe)
    out.columns = [spreadsheet_safe(str(c)) for c in out.columns]
    return out


def web_url(url: object) -> str | None:
    """``url`` when it is an ``http`` or ``https`` address with a host, else ``None``."""
    if not isinstance(url, str):
        return None
    parts = urllib.parse.urlsplit(url.strip())
    return url.strip() if parts.scheme.lower() in ("http", "https") and parts.netloc else None
