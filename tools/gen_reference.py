"""Regenerate the documentation's reference parts from the code, so that they cannot drift from it.

    python tools/gen_reference.py            # rewrite the generated parts of docs/*.md
    python tools/gen_reference.py --check    # exit 1, naming the stale pages, if a page differs

Each part sits in a page between ``<!-- begin generated: NAME ... -->`` and ``<!-- end generated: NAME -->``; the
text around it is hand-written and left alone. The parts: ``cli-options`` in docs/cli.md (from the command's argparse
parsers, built without running anything), ``environment`` in docs/environment.md (from
``nvscope._core._env.VARIABLES``) and ``modules`` in docs/modules.md (each module of nvscope and the first sentence
of its docstring). tests/test_reference.py runs ``--check``.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIX = "python tools/gen_reference.py"


def _cell(text: str) -> str:
    """Text as one Markdown table cell: on one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser], dict[str, str]]:
    """The ``nvscope`` parser, its subcommands' parsers and their one-line help, built as ``nvscope`` builds them."""
    sys.path.insert(0, str(ROOT))
    from nvscope._cli._main import _parser

    parser, commands = _parser("nvscope")
    summaries: dict[str, str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {choice.dest: choice.help or "" for choice in action._choices_actions}
    return parser, commands, summaries


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            name = ", ".join(f"`{flag}`" for flag in action.option_strings)
            value = formatter._format_args(action, action.dest.upper()) if action.nargs != 0 else ""
        else:
            name, value = f"`{action.metavar or action.dest}`", ""
        value = f"`{value}`" if value else ""
        rows.append(f"| {name} | {_cell(value)} | {_cell(formatter._expand_help(action) if action.help else '')} |")
    return rows


def cli_options() -> str:
    """Per command: what it does, its usage and a table of its flags, in the order ``nvscope --help`` lists them."""
    parser, commands, summaries = _parsers()
    out = [f"`{' '.join(parser.format_usage().split())}`", ""]
    out += ["| option | value | what it does |", "| --- | --- | --- |", *_option_rows(parser)]
    for name, command in commands.items():
        usage = " ".join(command.format_usage().split())
        out += ["", f"### nvscope {name} flags", "", f"{summaries.get(name, '')}.", "", f"`{usage}`", ""]
        out += ["| option | value | what it does |", "| --- | --- | --- |", *_option_rows(command)]
    return "\n".join(out)


def _default(kind: str, default: object) -> str:
    if kind in ("flag", "share"):
        return "on (`1`)" if default is True else "off"
    return f"`{default}`" if default not in ("", None) else "unset"


_ACCEPTS = {"flag": "flag", "count": "count", "text": "text", "share": "flag or `all`"}


def environment() -> str:
    """The ``NVSCOPE_*`` variables as `VARIABLES` declares them: name, accepted values, default, what it does."""
    sys.path.insert(0, str(ROOT))
    from nvscope._core._env import VARIABLES

    out = ["| variable | accepts | default | what it does |", "| --- | --- | --- | --- |"]
    for name, (kind, default, what) in VARIABLES.items():
        out.append(f"| `{name}` | {_ACCEPTS.get(kind, kind)} | {_default(kind, default)} | {_cell(what)} |")
    return "\n".join(out)


def _summary(path: Path) -> str:
    """The first sentence of a module's docstring, on one line; empty without a docstring."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(doc.split("\n\n")[0].split())
    return re.split(r"(?<!e\.g\.)(?<!i\.e\.)(?<=[.!?])\s+", paragraph, maxsplit=1)[0]


def modules() -> str:
    """One table per package of nvscope, from the tree: each module and the first sentence of its docstring."""
    package = ROOT / "nvscope"
    out: list[str] = []
    for folder in sorted({path.parent for path in package.rglob("*.py")}):
        files = sorted(folder.glob("*.py"), key=lambda path: (path.name != "__init__.py", path.name))
        title = folder.relative_to(ROOT).as_posix()
        out += [f"## `{title}/`", "", "| module | what it holds |", "| --- | --- |"]
        out += [f"| `{path.relative_to(ROOT).as_posix()}` | {_cell(_summary(path))} |" for path in files]
        out.append("")
    out += ["## Beside the package", "", "| module | what it holds |", "| --- | --- |"]
    out += [f"| `{path.name}` | {_cell(_summary(path))} |" for path in sorted(ROOT.glob("*.py"))]
    return "\n".join(out)


PARTS: dict[str, tuple[str, Callable[[], str]]] = {
    "cli-options": ("cli.md", cli_options),
    "environment": ("environment.md", environment),
    "modules": ("modules.md", modules),
}


def render(page: str, name: str, body: str) -> str:
    """``page`` with part ``name``'s text replaced by ``body``; ValueError when its markers are missing."""
    begin = re.compile(rf"^<!-- begin generated: {re.escape(name)}\b.*-->\n", re.MULTILINE)
    end = re.compile(rf"^<!-- end generated: {re.escape(name)} -->$", re.MULTILINE)
    start, stop = begin.search(page), end.search(page)
    if start is None or stop is None or stop.start() < start.end():
        raise ValueError(f"no `<!-- begin generated: {name} -->` ... `<!-- end generated: {name} -->` markers")
    return f"{page[:start.end()]}\n{body}\n\n{page[stop.start():]}"


def main(argv: Sequence[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description="Regenerate the generated parts of the documentation.")
    cli.add_argument("--check", action="store_true", help="change nothing; exit 1 if a page is out of date")
    cli.add_argument("--docs", type=Path, default=ROOT / "docs", help="the pages' folder (default: docs/)")
    args = cli.parse_args(argv)
    stale = []
    for name, (file, generate) in PARTS.items():
        path = args.docs / file
        try:
            old = path.read_text(encoding="utf-8")
            new = render(old, name, generate())
        except (OSError, ValueError) as error:
            print(f"gen_reference: {path}: {error}", file=sys.stderr)
            return 2
        if new != old:
            stale.append(f"{path} ({name})")
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if stale and args.check:
        print(f"out of date with the code: {', '.join(stale)}; run `{FIX}` and commit the result", file=sys.stderr)
        return 1
    for page in stale:
        print(f"regenerated {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
