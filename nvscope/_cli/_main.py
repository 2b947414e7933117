"""The ``nvscope`` command: list the option catalog, check an installation, run a program under options.

Heavy packages (torch, Thunder, nvFuser) are imported only inside the command that needs them, never at the top.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Sequence
from types import MappingProxyType
from typing import NoReturn

from nvscope._cli import _child_carry as _carry
from nvscope._cli._args import JSON_OUT, add_json_flag, hint_misplaced, json_flag_words, output_problem
from nvscope._core import _env, catalog, cut, split, version

__all__ = ["main"]

_DESCRIPTION = """\
nvscope: scoped nvFuser developer options for Lightning Thunder and nvFuser.

In Python you write `with nvscope.nv_options(enable=[...], disable=[...]): ...`; this command helps around that:
find the option names, check that your installation can use them, and run an unmodified program under them."""

_EPILOG = """\
examples:
  nvscope options                       every nvFuser option name, what it does, and in which versions
  nvscope options --enable --json       the enable options, as JSON
  nvscope options matmul                the options whose name or description says matmul
  nvscope doctor                        check Python, torch/CUDA, nvFuser, Thunder and the NVFUSER_* environment
  nvscope run --enable fuse_matmul --disable matmul_expr_eval train.py --steps 10
                                        run train.py (with its own arguments) under those options and print
                                        which nvFuser fusions ran with which options when it exits
  nvscope run --enable fuse_matmul,static_fusion_count -m mypkg.bench

`nvscope COMMAND --help` describes each command. With no command, nvscope prints this help and exits with 2.
In pytest: `pytest --nv-enable NAME` or `@pytest.mark.nv_options(enable=[...])` (the nvscope pytest plugin)."""

_RUN_DESCRIPTION = """\
Run a Python script (or a module, with -m) as `python script.py args...` would, with every nvFuser fusion it
executes on its main thread running under the given options. The options are validated before anything runs.

While the program runs: development mode is on (no DevelopmentModeWarning), the program is audited, and
nvscope's Thunder adapter installs itself as soon as the program imports Thunder (or, without Thunder, the
nvFuser adapter as soon as it imports nvFuser). At exit, a summary goes to stderr: the options, then one row per
fusion with its options and execution count. The program's exit code is nvscope's exit code (an uncaught
exception prints its traceback and exits with 1).

Threads the program starts begin with no options (Python's contextvars), except Thunder's backward passes,
which keep the options of their forward. Use nvscope.bind in the program to carry them into its own threads.
NVFUSER_ENABLE/NVFUSER_DISABLE in the environment still apply, to the whole process, on top of these.

Python processes the program starts (subprocess, multiprocessing, torchrun's workers) get the same options on
their main thread: nvscope run sets NVSCOPE_RUN and puts nvscope's start-up hook on PYTHONPATH while the program
runs. Each such process that imports Thunder or nvFuser prints its own summary at exit, tagged [pid N]. Not
reached: processes that are not Python, that are given an environment without those variables, or that ignore
them (python -E, -I, -S).

--share-defaults: fusions that run their own options (no option given, or not selected by --fusions) share one
compiled definition per (printed definition, inputs, options, device), as scoped fusions do; it changes no option.
On the program's main thread (and Thunder's backward passes) the run's scope shares; the Python processes the
program starts get NVSCOPE_SHARE=all, which shares in every thread. For every thread of the program itself too,
run `NVSCOPE_SHARE=all nvscope run ...` instead."""

_RUN_EPILOG = """\
examples:
  nvscope run --enable fuse_matmul --disable matmul_expr_eval bench.py --size 4096
  nvscope run --enable fuse_matmul,static_fusion_count -- train.py --enable-this-is-the-script-s-own-flag
  nvscope run --disable fma -m mypkg.train --epochs 1
  nvscope run --no-audit --enable static_fusion_count bench.py
  nvscope run --enable fuse_matmul --fusions 'forward/*' --on-error fallback train.py
  nvscope run --enable fuse_matmul -m torch.distributed.run --nproc-per-node 2 --standalone train.py
  nvscope run --share-defaults train.py   no options: the defaults compile once per distinct definition

exit codes: the program's own; 2 when an option name or a --fusions/--on-error value is refused (an empty
--enable "" too), or the script/module cannot be found (a directory without __main__.py, or an interpreter given
in place of the script: write `nvscope run ... x.py`, not `nvscope run ... -- python x.py`)."""

_DOCTOR_DESCRIPTION = """\
Check what nvscope needs and what it can drive: Python, the option catalog, torch and CUDA, nvFuser, Lightning
Thunder, nvscope's Thunder adapter, development mode, and NVFUSER_ENABLE/NVFUSER_DISABLE in the environment
(they apply to the whole process, on top of every scope, so a typo there affects everything).

One line per check: `ok`, `note` (missing but optional: the core works without it), `warn` (something that
will not work as you may expect), `FAIL` (broken); each problem is followed by a `fix:` line."""

_DOCTOR_EPILOG = """\
exit codes: 0 when nvscope's core works (torch, nvFuser and Thunder are optional: missing ones are notes);
1 when something it needs is broken, e.g. an unknown name in NVFUSER_ENABLE or a catalog that cannot load.
With --require-gpu-stack, a missing or broken torch, CUDA device, nvFuser or Thunder also exits with 1."""

_OPTIONS_DESCRIPTION = """\
List every nvFuser enable/disable option that nvscope knows, grouped by list: name, effect class, the nvFuser
versions that have it, and what it does. When nvFuser is installed, only the names of its version are listed
(the first line says which). Names marked (args) need arguments and so can be set only in the environment,
e.g. NVFUSER_ENABLE=name(args), not per scope. A QUERY lists only the options whose name or description holds it
(case ignored). The table fits the terminal's width (COLUMNS), wrapping descriptions."""

_OPTIONS_EPILOG = """\
examples:
  nvscope options --disable
  nvscope options matmul                the options whose name or description says matmul
  nvscope options --json | python -c "import json,sys; print(len(json.load(sys.stdin)['options']))"
  nvscope options --probe               compare the catalog with what the installed nvFuser accepts (needs CUDA)"""


class _Parser(argparse.ArgumentParser):
    """argparse's parser (and, as their class, its subcommands'), whose usage errors cut every long word they echo:
    argparse quotes a bad value whole (`invalid choice: '...'`), and a value may be 100,000 characters long."""

    def error(self, message: str) -> NoReturn:
        # 240: a word already cut to 200 (and its "...") is left as it is
        super().error(re.sub(r"\S{240,}", lambda word: cut(word.group(), 200), message))


def _parser(prog: str | None = None) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser and its subparsers by command name."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = _Parser(prog=prog or "nvscope", description=_DESCRIPTION, epilog=_EPILOG, formatter_class=formatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    options = commands.add_parser("options", help="list the nvFuser option names (the catalog)",
                                  description=_OPTIONS_DESCRIPTION, epilog=_OPTIONS_EPILOG, formatter_class=formatter)
    kind = options.add_mutually_exclusive_group()
    kind.add_argument("--enable", dest="kind", action="store_const", const="enable",
                      help="only the enable options (NVFUSER_ENABLE, nv_options(enable=...))")
    kind.add_argument("--disable", dest="kind", action="store_const", const="disable",
                      help="only the disable options (NVFUSER_DISABLE, nv_options(disable=...))")
    add_json_flag(options, "a JSON object instead of the table, on standard output; --json=PATH writes it to PATH "
                           "instead (an existing file only if it holds JSON)")
    options.add_argument("query", nargs="?", metavar="QUERY",
                         help="only the options whose name or description holds this text (case ignored)")
    options.add_argument("--probe", action="store_true",
                         help="ask the installed nvFuser which names it accepts (a child process runs a one-op "
                              "fusion; needs CUDA) and compare them with the catalog; exit 1 if it accepts a name "
                              "the catalog lacks")

    doctor = commands.add_parser("doctor", help="check the installation and the NVFUSER_* environment",
                                 description=_DOCTOR_DESCRIPTION, epilog=_DOCTOR_EPILOG, formatter_class=formatter)
    doctor.add_argument("--require-gpu-stack", action="store_true",
                        help="also fail (exit 1) unless torch with a CUDA device, nvFuser and Thunder all work")
    add_json_flag(doctor, "the checks as a JSON object on standard output instead of the lines; --json=PATH writes it "
                          "to PATH as well as the lines (an existing file only if it holds JSON)")

    for module in dict.fromkeys(_COMMAND_MODULES.values()):  # search, profile and bisect, rescue, check
        importlib.import_module(f"nvscope._cli.{module}").add_parser(commands)

    run = commands.add_parser("run", help="run a script or module under nvFuser options, with an audit summary",
                              description=_RUN_DESCRIPTION, epilog=_RUN_EPILOG, formatter_class=formatter,
                              usage="%(prog)s [--enable NAME]... [--disable NAME]... [--fusions GLOB]... "
                                    "[--on-error {raise,fallback,torch}] [--no-audit] [--share-defaults] "
                                    "([--] script.py | -m module) [args...]",
                              allow_abbrev=False)
    _run_arguments(run)
    listing = commands.add_parser(
        "fusions", help="run a script or module and list the nvFuser fusions it ran (ids, ops, calls)",
        description="Run the program as `nvscope run` does (options optional) and print, at exit, every nvFuser "
                    "fusion it ran: its id (what nv_options(fusions=...) selects by), phase, ops, jitted function "
                    "and number of executions.",
        usage="%(prog)s [--enable NAME]... [--disable NAME]... [--fusions GLOB]... [--on-error {raise,fallback,torch}] "
              "[--no-audit] [--share-defaults] [--json PATH|-] ([--] script.py | -m module) [args...]",
        allow_abbrev=False)
    _run_arguments(listing)
    listing.add_argument("--json", metavar="PATH|-", type=JSON_OUT,
                         help="also write the listing as JSON to PATH (an existing file only if it holds JSON), or "
                              "with - to standard output at exit")
    return parser, dict(commands.choices)


def _run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("--enable", action="append", default=[], metavar="NAME[,NAME...]",
                     help="an nvFuser enable option; repeat it or separate names with commas")
    run.add_argument("--disable", action="append", default=[], metavar="NAME[,NAME...]",
                     help="an nvFuser disable option; repeat it or separate names with commas")
    run.add_argument("--fusions", action="append", default=None, metavar="GLOB[,GLOB...]",
                     help="only fusions whose id (phase/name, e.g. forward/nvFusion0) matches a glob get the options "
                          "(nv_options(fusions=...)); repeat it or separate globs with commas; quote it for the shell")
    run.add_argument("--on-error", choices=_carry.ON_ERROR, default=None,
                     help="what a fusion that fails under the options does (nv_options(on_error=...)): raise its "
                          "error, run it again with its defaults, or run its Thunder region in PyTorch")
    run.add_argument("--no-audit", action="store_true",
                     help="do not record fusion executions, and print no summary at exit")
    run.add_argument("--share-defaults", action="store_true",
                     help="fusions left at their own options share compiled definitions too (nv_options(share=True) "
                          "around the program, NVSCOPE_SHARE=all in the Python processes it starts): a deep model's "
                          "defaults compile once per distinct definition, not once per fusion")
    run.add_argument("-m", dest="module", metavar="module",
                     help="run a library module as a script, like python -m (the rest are its arguments)")
    run.add_argument("script", nargs="?", help="the Python script to run (the rest are its arguments)")
    run.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


# the commands whose parsers and code are modules of their own
_COMMAND_MODULES = MappingProxyType({"search": "_search_cmd", "profile": "_profile_bisect_cmd",
                                     "bisect": "_profile_bisect_cmd", "rescue": "_rescue_cmd", "check": "_check_cmd"})

# the commands whose --json is a flag (--json=PATH writes a file)
_JSON_FLAG = ("options", "doctor", "check")

# run's (and fusions') options whose value is the next word
_TAKES_VALUE = ("--enable", "--disable", "--fusions", "--on-error", "--json")


def _split_run(argv: Sequence[str]) -> tuple[list[str], str | None, str | None, list[str]]:
    """Split ``run``'s arguments into (its own options, script, module, the program's arguments), like cProfile:
    the first `--`, `-m module` or non-option word ends nvscope's options (a lone trailing `-m` stays, for argparse)."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest = argv[i + 1:]
            return list(argv[:i]), (rest[0] if rest else None), None, list(rest[1:])
        if arg == "-m" and i + 1 < len(argv):
            return list(argv[:i]), None, argv[i + 1], list(argv[i + 2:])
        if arg.startswith("-m") and not arg.startswith("--") and len(arg) > 2:
            return list(argv[:i]), None, arg[2:], list(argv[i + 1:])
        if arg in _TAKES_VALUE:
            i += 2
            continue
        if arg.startswith("-") and arg != "-":
            i += 1
            continue
        return list(argv[:i]), arg, None, list(argv[i + 1:])
    return list(argv), None, None, []


def _invalid(enable: list[str], disable: list[str]) -> str | None:
    """Why the names of ``run --enable/--disable`` are refused, with hints in the flags' syntax; None when valid."""
    try:
        known = catalog()
        for name in enable:
            known.check("enable", name, spelling="--{kind} {name}")
        for name in disable:
            known.check("disable", name, spelling="--{kind} {name}")
    except ValueError as error:  # UnknownOptionError
        return str(error)
    return None


def _parse(parser: argparse.ArgumentParser, commands: dict[str, argparse.ArgumentParser],
           args: list[str]) -> argparse.Namespace:
    """``parser.parse_args(args)``, except that an unknown flag of a command is reported with that command's usage
    (and the flag it resembles), not the top-level one's (exit 2); an unknown command is reported with the command it
    resembles."""
    if args and not args[0].startswith("-") and args[0] not in commands:
        import difflib

        near = difflib.get_close_matches(args[0], list(commands), n=1, cutoff=0.6)
        parser.error(f"unknown command {cut(args[0], 80, repr)}"
                     + (f"; did you mean {near[0]}?" if near else f" (choose from {', '.join(commands)})"))
    ns, unknown = parser.parse_known_args(args)
    if unknown:
        import difflib

        sub = commands.get(ns.command, parser) if ns.command else parser
        flags = [flag for action in sub._actions for flag in action.option_strings if flag.startswith("--")]
        word = next((w.partition("=")[0] for w in unknown if w.startswith("-")), "")
        near = difflib.get_close_matches(word, flags, n=1, cutoff=0.6) if word else []
        hint = f"; did you mean {near[0]}?" if near else ""
        if not hint and ns.command in _JSON_FLAG and getattr(ns, "json", None) == "-" and \
                not unknown[0].startswith("-"):
            hint = f"; to write the JSON to a file: --json={cut(unknown[0], 200)}"
        sub.error(f"unrecognized arguments: {cut(' '.join(unknown), 200)}{hint}")
    return ns


# `python x.py`, `python3.11 -m mod`, a path to an interpreter: what `nvscope run` itself stands for.
_INTERPRETER = re.compile(r"(python|pypy)[0-9.]*(\.exe)?", re.IGNORECASE)


def _interpreter(script: str) -> bool:
    """Whether ``script`` names a Python interpreter rather than a script (a file of that name that is a script,
    not an executable, is run as one)."""
    if not _INTERPRETER.fullmatch(os.path.basename(script)):
        return False
    return not os.path.isfile(script) or os.access(script, os.X_OK)


def _empty_flag(ns: argparse.Namespace) -> str | None:
    """Why an --enable/--disable/--fusions value that names nothing (`--enable ""`, `--fusions ,`) is refused."""
    for flag, values, hint in (("--enable", ns.enable, "an option name, e.g. --enable fuse_matmul (`nvscope options "
                                                      "--enable` lists them)"),
                               ("--disable", ns.disable, "an option name, e.g. --disable fma (`nvscope options "
                                                        "--disable` lists them)"),
                               ("--fusions", ns.fusions or (), "a glob over fusion ids, e.g. --fusions 'forward/*' or "
                                                               "--fusions backward/nvFusion0")):
        if any(not split([value]) for value in values):
            return f"{flag} needs {hint}"
    return None


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """The ``nvscope`` console script. Returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser, commands = _parser(prog)
    if args and args[0] in ("run", "fusions"):
        own, script, module, program_args = _split_run(args[1:])
        ns = _parse(parser, commands, [args[0], *own])
        ns.script, ns.module, ns.args = script, module, program_args
        if script is not None and _interpreter(script):
            import shlex

            fixed = shlex.join(["nvscope", args[0], *own, *program_args]) if program_args else None
            print(f"nvscope {args[0]}: error: {cut(script, 80, repr)} is a Python interpreter, not a script: give "
                  f"the script itself{f', as in: {fixed}' if fixed else ''} (nvscope runs it with its own Python, "
                  f"{sys.executable})", file=sys.stderr)
            return 2
        if not (len(args) > len(own) + 1 and args[len(own) + 1] == "--"):  # `-- script.py`: the words are its own
            hint_misplaced(args[0], commands[args[0]], script or module or "", program_args)
    else:
        if args and args[0] in _JSON_FLAG:  # their --json is a flag: the next word is never its value
            args = [args[0], *json_flag_words(args[1:], commands[args[0]].allow_abbrev)]
        ns = _parse(parser, commands, args)
    if ns.command is None:
        parser.print_help(sys.stderr)
        return 2
    if ns.command in ("options", "doctor", "check"):
        try:
            if ns.command == "doctor":
                from nvscope._cli._doctor import doctor

                return doctor(ns.require_gpu_stack, ns.json)
            if ns.command == "check":
                from nvscope._cli._check_cmd import command

                return command(ns)
            from nvscope._cli import _options_cmd

            return _options_cmd.probe() if ns.probe else _options_cmd.options(ns.kind, ns.json, ns.query)
        except BrokenPipeError:  # `nvscope options | head`, `nvscope check --format json | head`: stop quietly,
            devnull = os.open(os.devnull, os.O_WRONLY)  # as Python's docs recommend
            os.dup2(devnull, sys.stdout.fileno())
            return 1
    if ns.command in _COMMAND_MODULES:
        return int(importlib.import_module(f"nvscope._cli.{_COMMAND_MODULES[ns.command]}").command(ns))
    if ns.script is None and ns.module is None:
        from nvscope._cli._args import json_took_the_target

        commands[ns.command].error(json_took_the_target(getattr(ns, "json", None)) or  # exit 2
                                   f"give the script to run (or -m module); `nvscope {ns.command} --help` explains")
    enable, disable = split(ns.enable), split(ns.disable)
    fusions = None if ns.fusions is None else split(ns.fusions)
    json_to = getattr(ns, "json", None)
    problem = _empty_flag(ns) or _invalid(enable, disable) or output_problem((("--json", json_to),), None)
    if problem is None and ns.share_defaults and not _env.flag("NVSCOPE_SHARE"):
        problem = ("--share-defaults needs compile sharing, which NVSCOPE_SHARE=0 in the environment turns off: unset "
                   "NVSCOPE_SHARE, or drop --share-defaults")
    if problem is not None:
        print(f"nvscope {ns.command}: error: {problem}", file=sys.stderr)
        return 2
    from nvscope._cli._child_carry import Settings
    from nvscope._cli._run import run

    listing = ns.command == "fusions"
    carried = Settings(enable, disable, fusions, ns.on_error, listing or not ns.no_audit, share=ns.share_defaults)
    return run(ns.script, ns.module, ns.args, carried, listing=listing, json_to=json_to, summary=not ns.no_audit)
