"""What the readers of `nvscope check` report: one `Use`, a place where a program sets nvFuser developer options (or
turns development mode on), before the catalog and the allowances judge it (`nvscope._check._check`)."""

from __future__ import annotations

import ast
import bisect
import io
import re
import tokenize
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from nvscope._core import split

__all__ = ["DEV", "ENV_KINDS", "THUNDER", "Use", "command_options", "comments", "env_names", "split_env"]

# What an option name in `Use.options` belongs to: nvFuser's two lists, nvscope's development mode, or a Thunder
# compile option of its nvFuser executor (whose "name" is the option with its value, e.g. nv_enable_linear=True).
DEV = "dev"
THUNDER = "thunder"
# The environment variables that set options, and the list each sets (NVSCOPE_DEV: development mode).
ENV_KINDS: Mapping[str, str] = MappingProxyType(
    {"NVFUSER_ENABLE": "enable", "NVFUSER_DISABLE": "disable", "NVSCOPE_DEV": DEV})


@dataclass(frozen=True)
class Use:
    """One place that sets options.

    ``options``: (list, name) pairs as far as they are known, list being ``"enable"``, ``"disable"``, `DEV` or
    `THUNDER`; ``dynamic``: some of the value is not a literal the reader could resolve; ``plumbing``: the value is
    forwarded from the caller (a parameter, ``self.x``), so this line sets nothing by itself; ``per_call``: the names
    go to a per-call API (a scope, ``execute(_enable_options=)``, ``thunder.jit``), where names with arguments
    cannot go. ``end_line`` is the construct's last line (an allowance comment may sit there too).
    """

    line: int
    col: int
    end_line: int
    construct: str
    options: tuple[tuple[str, str], ...]
    dynamic: bool = False
    plumbing: bool = False
    per_call: bool = True
    detail: str = ""


_OFF = frozenset({"0", "false", "no", "off", ""})  # NVSCOPE_DEV's off values (nvscope/_core/_env.py)


def split_env(value: str) -> tuple[list[str], list[str]]:
    """Split an NVFUSER_ENABLE value on the commas outside parentheses: ``a,b(x,y)`` -> ``["a", "b(x,y)"]``; returns
    (the names, what is malformed: an empty name or unbalanced parentheses)."""
    items, problems, depth, current = [], [], 0, ""
    for char in value:
        if char == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        depth += (char == "(") - (char == ")")
        if depth < 0:
            problems.append(f"a ')' without its '(' in {value!r}")
            depth = 0
        current += char
    items.append(current)
    if depth > 0:
        problems.append(f"an unclosed '(' in {value!r}")
    if any(not item.strip() for item in items):
        problems.append(f"an empty name between commas in {value!r}")
    return [item.strip() for item in items if item.strip()], problems


def env_names(variable: str, value: str) -> tuple[tuple[str, str], ...]:
    """The options one environment assignment sets: ``NVFUSER_ENABLE=a,b(x)`` -> enable a, enable b(x);
    ``NVSCOPE_DEV=1`` -> development mode; ``NVSCOPE_DEV=0`` -> nothing. Quotes around the value are dropped."""
    kind = ENV_KINDS[variable]
    value = value.strip().strip("'\"").strip()
    if kind == DEV:
        return () if value.lower() in _OFF else ((DEV, f"{variable}={value}"),)
    return tuple((kind, name) for name in split_env(value)[0])


_RUN_VALUED = ("--fusions", "--on-error")  # `nvscope run` flags whose value is the next word


def command_options(words: Sequence[str | None]) -> tuple[str, tuple[tuple[str, str], ...], bool] | None:
    """The options a command line sets, as (construct, options, dynamic), or None when it sets none: ``nvscope run``
    (or ``fusions``) with ``--enable``/``--disable`` before its script, and pytest's ``--nv-enable``/``--nv-disable``.
    A None word is one the reader could not resolve (a variable): as a flag's value it makes the result dynamic."""
    options: list[tuple[str, str]] = []
    dynamic = False
    construct = ""
    for i, word in enumerate(words):
        if word is not None and word.rsplit("/", 1)[-1] == "nvscope" and i + 1 < len(words) \
                and words[i + 1] in ("run", "fusions"):
            construct = f"nvscope {words[i + 1]}"
            j = i + 2
            while j < len(words) and (flag := words[j]) is not None and flag.startswith("-") and flag != "--" \
                    and flag != "-m":
                name, equals, value = flag.partition("=")
                if name in ("--enable", "--disable"):
                    if not equals:
                        j += 1
                        value = words[j] if j < len(words) else ""  # type: ignore[assignment]
                    if value is None:
                        dynamic = True
                    else:
                        options += [(name[2:], n) for n in split([value])]
                elif name in _RUN_VALUED and not equals:
                    j += 1
                j += 1
            break
    for i, word in enumerate(words):
        if word is None:
            continue
        name, equals, value = word.partition("=")
        if name in ("--nv-enable", "--nv-disable"):
            construct = construct or f"pytest {name}"
            following = value if equals else (words[i + 1] if i + 1 < len(words) else "")
            if following is not None and following.startswith("-"):
                continue  # another flag, not a value: ("--nv-enable", "--nv-disable") names the flags
            if following is None:
                dynamic = True
            else:
                options += [(name[5:], n) for n in split([following])]
    if not options and not dynamic:
        return None
    return construct, tuple(options), dynamic


def comments(tree: ast.Module, text: str) -> dict[int, str]:
    """The comment (or ``""``) of each line of a module that holds ``nvscope:``, so that an allowance inside a string
    literal allows nothing. Only the top-level statements holding such lines are tokenized, each alone (a statement
    starts a line outside any string); a line between statements is a comment or blank, whole."""
    lines = io.StringIO(text).readlines()  # split at "\n" only, as line numbers count
    numbers = sorted({text.count("\n", 0, m.start()) + 1 for m in re.finditer("nvscope:", text)})
    starts = [min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))]) for node in tree.body]
    out: dict[int, str] = {}
    for number in numbers:
        if number in out:
            continue
        i = bisect.bisect_right(starts, number) - 1
        if i < 0 or number > (tree.body[i].end_lineno or starts[i]):
            out[number] = lines[number - 1] if number <= len(lines) else ""
            continue
        while i > 0 and (tree.body[i - 1].end_lineno or 0) >= starts[i]:
            i -= 1  # a statement after `;`, or after a string that ends on its line: tokenize from the first
        first, last = starts[i], tree.body[i].end_lineno or starts[i]
        out.update(dict.fromkeys(range(first, last + 1), ""))
        try:
            for token in tokenize.generate_tokens(io.StringIO("".join(lines[first - 1:last])).readline):
                if token.type == tokenize.COMMENT:
                    out[first - 1 + token.start[0]] = token.string
        except (tokenize.TokenError, SyntaxError):
            out.update({n: lines[n - 1] for n in range(first, min(last, len(lines)) + 1)})
    return out
