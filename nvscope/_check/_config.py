"""`nvscope check`'s configuration: the ``[tool.nvscope.check]`` table of the checked tree's ``pyproject.toml``.

Read with ``tomllib`` (or ``tomli``), else on Python 3.10 by a small reader of this one table, so that the check
works in pre-commit's bare environment too. Globs are relative to the ``pyproject.toml``'s folder (docs/check.md)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from nvscope._core import cut

__all__ = ["Config", "ConfigError", "find", "glob_matcher", "load", "read_table"]

_KEYS = ("nvfuser", "allow", "allow-names", "exclude")
_HEADER = re.compile(r"^\s*\[\s*tool\s*\.\s*nvscope\s*\.\s*check\s*\]\s*(#.*)?$")


class ConfigError(ValueError):
    """A ``[tool.nvscope.check]`` table that cannot be used: the message names the file and the fix."""


@dataclass(frozen=True)
class Config:
    path: Path | None  # the pyproject.toml read, or None
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
        return Config(None, root)
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
    return Config(path, path.parent, nvfuser, lists["allow"], lists["allow-names"], lists["exclude"])


def read_table(text: str, where: str) -> dict[str, object] | None:
    """The ``[tool.nvscope.check]`` table of a ``pyproject.toml``'s text (None when it has none)."""
    toml = _toml_module()
    if toml is None:
        return _read_minimal(text, where)
    try:
        document = toml.loads(text)
    except ValueError as error:  # tomllib.TOMLDecodeError is a ValueError
        raise ConfigError(f"{where}: not valid TOML ({error})") from None
    table = document.get("tool", {}).get("nvscope", {}).get("check")
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{where}: tool.nvscope.check must be a table")
    return table


def _toml_module() -> Any:
    """``tomllib`` (3.11+), else ``tomli`` if installed, else None."""
    import importlib

    for name in ("tomllib", "tomli"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


# --- the reader for Python 3.10 without tomli: this one table, strings and arrays of strings --------------------

_TOKEN = re.compile(r"""\s*(?:(?P<basic>"(?:[^"\\\n]|\\.)*")|(?P<literal>'[^'\n]*')|(?P<punct>[\[\],=])"""
                    r"""|(?P<comment>#[^\n]*)|(?P<key>[A-Za-z0-9_-]+))""")
_ESCAPES: Mapping[str, str] = MappingProxyType(
    {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "/": "/", "b": "\b", "f": "\f", "r": "\r"})


def _unescape(body: str, where: str) -> str:
    def one(match: re.Match[str]) -> str:
        code = match[1]
        if code in _ESCAPES:
            return _ESCAPES[code]
        if code[0] in "uU":
            return chr(int(code[1:], 16))
        raise ConfigError(f"{where}: [tool.nvscope.check]: unknown escape \\{code} in a string")

    return re.sub(r"\\(u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)", one, body)


def _read_minimal(text: str, where: str) -> dict[str, object] | None:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _HEADER.match(line)), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"\s*\[", lines[i])
                and not _inside_array(lines[start + 1:i])), len(lines))
    body = "\n".join(lines[start + 1:end])
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(body):
        match = _TOKEN.match(body, position)
        if match is None or match.end() == position:
            if body[position:].strip() == "":
                break
            raise ConfigError(f"{where}: [tool.nvscope.check] cannot be read without tomllib/tomli near "
                              f"{body[position:position + 30].strip()!r}: it takes strings and arrays of strings "
                              "(install tomli, or use Python 3.11+, for the rest of TOML)")
        position = match.end()
        kind = match.lastgroup or ""
        if kind != "comment":
            tokens.append((kind, match[kind]))
    table: dict[str, object] = {}
    i = 0

    def value_at(i: int) -> tuple[object, int]:
        kind, text = tokens[i]
        if kind == "basic":
            return _unescape(text[1:-1], where), i + 1
        if kind == "literal":
            return text[1:-1], i + 1
        if text == "[":
            items: list[object] = []
            i += 1
            while tokens[i][1] != "]":
                item, i = value_at(i)
                items.append(item)
                if tokens[i][1] == ",":
                    i += 1
            return items, i + 1
        raise ConfigError(f"{where}: [tool.nvscope.check]: unexpected {text!r}")

    try:
        while i < len(tokens):
            kind, key = tokens[i]
            if kind == "basic":
                key = _unescape(key[1:-1], where)
            elif kind == "literal":
                key = key[1:-1]
            if tokens[i + 1][1] != "=":
                raise ConfigError(f"{where}: [tool.nvscope.check]: expected `=` after {key!r}")
            table[key], i = value_at(i + 2)
    except IndexError:
        raise ConfigError(f"{where}: [tool.nvscope.check]: a value is cut short (an unclosed `[`?)") from None
    return table


def _inside_array(lines: list[str]) -> bool:
    """Whether these lines leave a `[` open (so a line starting with `[` is inside an array, not a table header)."""
    depth = 0
    for line in lines:
        for match in _TOKEN.finditer(line):
            if match.lastgroup == "punct":
                depth += {"[": 1, "]": -1}.get(match["punct"], 0)
    return depth > 0


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
