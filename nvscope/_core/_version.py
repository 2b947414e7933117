"""nvscope's version, from pyproject.toml's ``[project]`` table in a checkout (which may shadow an installed copy),
else from the installed metadata; a small parser, as Python 3.10 lacks ``tomllib``."""

from __future__ import annotations

import os

from nvscope._core import _state

__all__ = ["UNKNOWN", "from_pyproject", "version"]

UNKNOWN = "0+unknown"  # neither a source tree nor installed metadata

_cached: str | None = None
_state.keep(__name__, "_cached", "the installed nvscope's version: uninstall changes no installation")


def from_pyproject(text: str) -> str | None:
    """The ``version`` of ``[project]`` in pyproject.toml's text, if that table also says ``name = "nvscope"``."""
    name = found = None
    in_project = False
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("["):
            in_project = line == "[project]"
            continue
        if not in_project or "=" not in line:
            continue
        key, _, value = (part.strip() for part in line.partition("="))
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            if key == "name":
                name = value[1:-1]
            elif key == "version":
                found = value[1:-1]
    return found if name == "nvscope" else None


def _source_tree() -> str | None:
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "pyproject.toml")
    try:
        with open(path, encoding="utf-8") as file:
            return from_pyproject(file.read())
    except OSError:
        return None


def version() -> str:
    """nvscope's version, e.g. ``"0.1.0"``."""
    global _cached
    if _cached is None:
        found = _source_tree()
        if found is None:
            from importlib import metadata

            try:
                found = metadata.version("nvscope")
            except metadata.PackageNotFoundError:
                found = UNKNOWN
        _cached = found
    return _cached
