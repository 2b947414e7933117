"""nvscope's version, from pyproject.toml's ``[project]`` table in a checkout (which may shadow an installed copy),
else from the installed metadata; a small parser, as Python 3.10 lacks ``tomllib``."""

from __future__ import annotations

import functools
import os

from nvscope._core import _state

__all__ = ["UNKNOWN", "from_pyproject", "version"]

UNKNOWN = "0+unknown"  # neither a source tree nor installed metadata

_state.keep(__name__, "version", "the installed nvscope's version: uninstall changes no installation")


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


@functools.cache
def version() -> str:
    """nvscope's version, e.g. ``"0.1.0"``."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as file:
            found = from_pyproject(file.read())
    except OSError:
        found = None
    if found is not None:
        return found
    from importlib import metadata

    try:
        return metadata.version("nvscope")
    except metadata.PackageNotFoundError:
        return UNKNOWN
