"""Optional kernel libraries: which one a backend needs, how old it may be, and whether this machine has it.

A backend that wraps an optional library (Triton, torchao, Transformer Engine) declares a :class:`Library` in its
own module; its availability (:meth:`fp8bench.core.plugins.Backend.availability`) then says "not installed" or
"too old" with the install command, and ``fp8bench doctor`` lists every declared library. Versions are read from
package metadata, never by importing the library: Transformer Engine's import needs CUDA libraries, and a broken
install must still be reported, not crash the listing.
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class LibraryStatus:
    """An optional library: its installed version (``None``: not installed) and why it is unusable, if it is."""

    name: str
    version: str | None
    reason: str | None


@dataclass(frozen=True)
class Library:
    """An optional library a backend needs.

    ``name`` is the import name (and the key of ``fp8bench doctor``'s library table); ``distributions`` are the
    package names it may be installed under (the first found wins); ``min_version`` is the oldest release whose API
    the backend is written against; ``extra`` is the ``pip install 'fp8bench[EXTRA]'`` that installs it (``None``:
    no extra of fp8bench does; the refusal then names the package itself).
    """

    name: str
    min_version: tuple[int, ...]
    extra: str | None = None
    distributions: tuple[str, ...] = ()

    @property
    def install_command(self) -> str:
        if self.extra:
            return f"pip install 'fp8bench[{self.extra}]'"
        return f"pip install {(*self.distributions, self.name)[0]}"

    def installed_version(self) -> str | None:
        """The installed version, from package metadata (no import); ``None`` when it is not installed."""
        for dist in self.distributions or (self.name,):
            try:
                return importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
        return None

    def status(self, version: str | None = None) -> LibraryStatus:
        """Whether the library is installed and new enough; ``version`` stands for the installed one (tests)."""
        version = version if version is not None else self.installed_version()
        if version is None:
            return LibraryStatus(self.name, None, f"{self.name} is not installed ({self.install_command})")
        if parse_version(version) < self.min_version:
            minimum = ".".join(map(str, self.min_version))
            return LibraryStatus(self.name, version, f"{self.name} {version} is too old; fp8bench needs {minimum}+")
        return LibraryStatus(self.name, version, None)


def parse_version(text: str) -> tuple[int, ...]:
    """Leading numeric release of a version string: ``"2.20.2+cu128"`` -> ``(2, 20, 2)``."""
    parts: list[int] = []
    for piece in text.split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
        if m.end() != len(piece):
            break
    return tuple(parts)
