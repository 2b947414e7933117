"""``nvscope options``: the option catalog as a table that fits the terminal, filtered by a query, or as JSON; and
``--probe``, the installed nvFuser's own list of names against the catalog."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from shlex import quote as shlex_quote

from nvscope._cli._args import write_json
from nvscope._core import Catalog, OptionInfo, catalog, cut
from nvscope._core import _text as _texttable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvscope._core import Kind

__all__ = ["options", "probe"]

_EFFECTS = (
    "effect: codegen = can change the compiled kernels or which executor runs; runtime = runtime behaviour only; "
    "debug = output, profiling, validation"
)


_JSON_KEYS = ("kind", "name", "effect", "description", "since", "until", "since_day", "until_day", "requires_args",
              "ops", "source")  # an option's attributes in `nvscope options --json`, in this order


def _nightly_note(option: OptionInfo) -> str:
    days = [f"from {option.since_day}" if option.since_day else "", f"before {option.until_day}" if option.until_day
            else ""]
    return f" (nightlies {' and '.join(d for d in days if d)} only)" if any(days) else ""


def _fit(header: Sequence[str], rows: Sequence[Sequence[str]], width: int, indent: str = "  ") -> str:
    """``render``'s table, fitted to ``width`` columns (0: no limit): the last column wrapped under itself; when the
    other columns leave it too little room, each row on a line of its own and its last cell wrapped below it."""
    import textwrap

    text = _texttable.render(header, rows, indent=indent)
    if not width or max(len(line) for line in text.splitlines()) <= width:
        return text
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(header[:-1])]
    room = width - len(indent) - sum(w + 2 for w in widths)
    if room >= 30:
        wrapped: list[Sequence[str]] = []
        for row in rows:
            first, *more = textwrap.wrap(row[-1], room) or [""]
            wrapped.append((*row[:-1], first))
            wrapped.extend((*[""] * (len(row) - 1), chunk) for chunk in more)
        return _texttable.render(header, wrapped, indent=indent)
    deeper = indent + "    "
    lines = []
    for row in rows:
        lines += textwrap.wrap("  ".join(cell for cell in row[:-1] if cell), width, initial_indent=indent,
                               subsequent_indent=deeper)
        lines += textwrap.wrap(row[-1], width, initial_indent=deeper, subsequent_indent=deeper)
    return "\n".join(lines)


def _use_line(width: int) -> str:
    """How to set an option, three ways, on one line; on more where it would pass ``width`` (0: no limit), each
    further line beginning with the separator, so that it reads as the same list."""
    ways = ("nv_options(enable=[...], disable=[...])", "nvscope run --enable NAME", "NVFUSER_ENABLE=NAME,...")
    lines = [f"use:    {ways[0]}"]
    for way in ways[1:]:
        if width and len(lines[-1]) + len(way) + 5 > width:
            lines.append(f"        |  {way}")
        else:
            lines[-1] += f"  |  {way}"
    return "\n".join(lines)


def _as_name(query: str) -> str:
    """A QUERY spelt as an option name: ``fast math``, ``Fast-Math`` -> ``fast_math``."""
    return "_".join(query.replace("-", " ").split()).casefold()


def _matches(option: OptionInfo, query: str) -> bool:
    text = query.casefold()
    return text in option.name.casefold() or text in option.description.casefold() or \
        _as_name(query) in option.name.casefold()


def _no_match_hint(known: Catalog, kind: Kind | None, query: str) -> str:
    """What a QUERY that matched nothing was likely meant as: the other list (``--disable fuse_matmul``), or the
    names it resembles (the catalog's own did-you-mean, as nv_options says it); "" when nothing is close."""
    name = _as_name(query)
    if kind is None:
        close = known.near("enable", name)[0] + known.near("disable", name)[0]
        return f"; did you mean {' or '.join(close[:3])}?" if close else ""
    other: Kind = "disable" if kind == "enable" else "enable"
    article = "an" if other == "enable" else "a"
    if known.get(other, name) is not None:
        return f"; it is {article} {other} option: nvscope options --{other} {name}"
    if any(o.kind == other and _matches(o, query) for o in known.options):
        return f"; the {other} options have it: nvscope options --{other} {cut(query, 80, shlex_quote)}"
    close, close_other = known.near(kind, name)
    if close:
        return f"; did you mean {' or '.join(close)}?"
    return f"; did you mean the {other} option {close_other[0]}?" if close_other else ""


def options(kind: Kind | None, json_to: str | None, query: str | None = None) -> int:
    import shutil

    try:
        known = catalog()
    except Exception as error:  # a broken installation: say so instead of a traceback
        print(f"nvscope options: the option catalog cannot load: {error!r}", file=sys.stderr)
        return 1
    kinds: tuple[Kind, ...] = ("enable", "disable") if kind is None else (kind,)
    selected = sorted((o for o in known.options if o.kind in kinds and (query is None or _matches(o, query))),
                      key=lambda o: (kinds.index(o.kind), o.name))
    if query is not None and not selected:
        path = any(mark in query for mark in (".", os.sep, "/"))  # `--json out.json` meant as --json=out.json
        to_file = f"; to write the JSON to a file: --json={cut(query, 200)}" if json_to is not None and path else ""
        print(f"nvscope options: no {kind or 'enable or disable'} option has {cut(query, 80, repr)} in its name or "
              f"description{_no_match_hint(known, kind, query)} (`nvscope options` lists them all){to_file}",
              file=sys.stderr)
        return 1
    if json_to is not None:
        document = {
            "source": known.source,
            "nvfuser": None if known.nvfuser is None else str(known.nvfuser.version),
            "options": [{key: getattr(o, key) for key in _JSON_KEYS} for o in selected],
        }
        return write_json("options", json_to, json.dumps(document, indent=2))
    # COLUMNS, else the terminal's width; piped with neither, no limit (a line per option, for grep)
    width = shutil.get_terminal_size((0, 0)).columns
    print(f"source: {known.source}")
    print(_use_line(width))
    for k in kinds:
        group = [o for o in selected if o.kind == k]
        if query is not None and not group:
            continue
        print()
        print(f"{k} options ({len(group)}{f' of {len(known.names(k))}' if query is not None else ''}):")
        rows = [(o.name + (" (args)" if o.requires_args else "") + (" (ops)" if o.ops else ""), o.effect, o.versions,
                 o.description + _nightly_note(o)) for o in group]
        print(_fit(("name", "effect", "versions", "description"), rows, width))
    print()

    def note(text: str) -> None:
        import textwrap

        print(textwrap.fill(text, width, subsequent_indent="  ") if width else text)

    if any(o.requires_args for o in selected):
        note("(args): needs arguments, e.g. NVFUSER_ENABLE=name(args): set it in the environment before the process "
             "starts; scopes cannot pass arguments")
    gated = [o for o in selected if o.ops]
    if gated:
        note("(ops): can only affect a fusion holding one of these ops (fd.ops.<op> in its printed definition), as "
             "these nvFuser files show:")
        print(_fit(("option", "ops", "source"), [(f"{o.kind} {o.name}", ", ".join(o.ops), o.source or "")
                                                  for o in gated], width))
    note(_EFFECTS)
    return 0


def probe() -> int:
    """``nvscope options --probe``: nvFuser's own list of names against the catalog."""
    import importlib.util

    from nvscope._core import NVFUSER_MODULES, _catalog_probe

    known = catalog()
    print(f"catalog: {known.source}")
    try:
        accepted = _catalog_probe.probe_installed()  # looked up in its module at each call (tests replace it)
    except Exception as error:  # RuntimeError from the probe (with its child's last lines), or the child's timeout
        if not any(importlib.util.find_spec(name) is not None for name in NVFUSER_MODULES):
            why = (f"nvFuser is not installed here (no {' or '.join(NVFUSER_MODULES)} module), so it cannot be asked: "
                   "install it (`nvscope doctor` names the wheel) or leave out --probe")
        else:
            why = f"{cut(' '.join(str(error).split()), 300)} (the probe needs nvFuser and a CUDA device)"
        print(f"nvscope options --probe: {why}", file=sys.stderr)
        return 1
    unknown_to_catalog = 0
    for kind in ("enable", "disable"):
        have, got = known.names(kind), accepted[kind]
        print(f"{kind}: the installed nvFuser accepts {len(got)} names; the catalog lists {len(have)} for its version")
        if got - have:
            unknown_to_catalog += len(got - have)
            print(f"  accepted by nvFuser but missing from the catalog: {', '.join(sorted(got - have))}")
        if have - got:
            print(f"  in the catalog for this version but not accepted by this build: {', '.join(sorted(have - got))}")
    return 1 if unknown_to_catalog else 0
