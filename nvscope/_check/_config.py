"""`nvscope check`'s configuration: the ``[tool.nvscope.check]`` table of the checked tree's ``pyproject.toml``.

Read with ``tomllib`` (``tomli`` on Python 3.10). Globs are relative to the ``pyproject.toml``'s folder
(docs/check.md)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from nvscope._core import cut

__all__ = ["Config", "ConfigError", "find", "glob_matcher", "load", "read_table"]

_KEYS = ("nvfuser", "allow", "allow-names", "exclude")
_HEADER = re.compile(r"^\s*\[\s*tool\s*\.\s*nvscope\s*\.\s*check\s*\]\s*(#.*)?$")


class ConfigError(ValueError):
    """A ``[tool.nvscope.check]`` table that cannot be used: the message names the file and the fix."""


@dataclass(frozen=True)
class Config:
    root: Path  # globs are relative to this folder
    nvfuser: str | None = None
    allow: tuple[str, ...] = ()
    allow_names: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()


def find(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` at or above ``start`` that has a ``[tool.nvscope.check]`` table."""
    folder = start if start.is_dir() else start.parent
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if any(_HEADER.match(line) for line in text.splitlines()):
            return path
    return None


def load(path: Path | None, root: Path, named: bool = False) -> Config:
    """The configuration in ``path`` (None: the defaults, globs relative to ``root``). A file ``named`` by the user
    must have the table: else the configuration of the checked tree would be dropped without a word."""
    if path is None:
        return Config(root)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read it ({error})") from None
    table = read_table(text, str(path))
    if table is None:
        if named:
            raise ConfigError(f"{cut(str(path), 200)} has no [tool.nvscope.check] table: add one to it (it may be "
                              "empty), or give no config file (then the nearest pyproject.toml above the first path "
                              "that has the table applies)")
        table = {}
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise ConfigError(f"{path}: [tool.nvscope.check] has no key {unknown[0]!r}; it takes {', '.join(_KEYS)}")
    nvfuser = table.get("nvfuser")
    if nvfuser is not None and not isinstance(nvfuser, str):
        raise ConfigError(f'{path}: [tool.nvscope.check] nvfuser must be a version range string, e.g. ">=0.2.35"')
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("allow", "allow-names", "exclude"):
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f'{path}: [tool.nvscope.check] {key} must be a list of path globs, e.g. '
                              f'{key} = ["experiments/**"]')
        lists[key] = tuple(value)
    return Config(path.parent, nvfuser, lists["allow"], lists["allow-names"], lists["exclude"])


def read_table(text: str, where: str) -> dict[str, object] | None:
    """The ``[tool.nvscope.check]`` table of a ``pyproject.toml``'s text (None when it has none)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # a dependency there (pyproject.toml)
        import tomli as tomllib
    try:
        document = tomllib.loads(text)
    except ValueError as error:  # tomllib.TOMLDecodeError is a ValueError
        raise ConfigError(f"{where}: not valid TOML ({error})") from None
    table = document.get("tool", {}).get("nvscope", {}).get("check")
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{where}: tool.nvscope.check must be a table")
    return table


def glob_matcher(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """One regex that matches a ``/``-separated relative path under any of ``patterns`` (None for no patterns)."""
    if not patterns:
        return None
    parts = []
    for pattern in patterns:
        pattern = pattern.strip().removeprefix("./").rstrip("/")
        anywhere = "/" not in pattern
        body = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                body += "(?:.*/)?"
                i += 3
            elif pattern.startswith("**", i):
                body += ".*"
                i += 2
            elif pattern[i] == "*":
                body += "[^/]*"
                i += 1
            elif pattern[i] == "?":
                body += "[^/]"
                i += 1
            else:
                body += re.escape(pattern[i])
                i += 1
        # A match of a folder covers what is under it.
        parts.append(f"{'(?:.*/)?' if anywhere else ''}{body}(?:/.*)?")
    return re.compile("|".join(f"(?:{p})" for p in parts))
