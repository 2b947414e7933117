"""``nvscope profile`` and ``nvscope bisect``: the per-fusion tools from the command line."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from nvscope._cli._args import (
    JSON_OUT,
    PLOT_OUT,
    SECONDS,
    TABLE_OUT,
    TOLERANCE,
    add_measuring,
    add_no_share,
    json_took_the_target,
    load_step,
    output_problem,
    program_output_to_stderr,
    said,
    split_target,
    take_target,
    text_stream,
    write_json,
)
from nvscope._cli._args import (
    error as _error,
)
from nvscope._core import cut, nv_options, split

__all__ = ["add_parser", "command"]

_FORMATTER = argparse.RawDescriptionHelpFormatter

_PROFILE = """\
Import a script (or a module, with -m) and profile one of its functions per nvFuser fusion: for every fusion it
runs (by id, e.g. backward/nvFusion3), its GPU time under the defaults and under the options (paired randomized
rounds, median ratio with a 95% interval), the schedulers nvFuser chose for its segments in each case, its compile
time, and whether its outputs under the options match the defaults'. A fusion that fails under the options is a row
that says so (it runs again with its defaults, so the profile goes on). With --torch, each fusion's region in PyTorch
too, timed and compared the same way: where nvFuser loses to eager. Prints a ranked table; --json, --plot and
--table save the result."""

_BISECT = """\
Find which of the options, on which fusions, make a step go wrong: it raises, its outputs or gradients leave the
tolerance against the default (--check numerics), or it is slower than the default (--check slower). Each probe
runs the step once under some of the options on some of the fusions (per-fusion scopes); the result is a 1-minimal
set of options and fusions, the nv_options(...) line that reproduces it, and the repro script of a failing fusion.

With --subprocess the target is a program (script.py args, or -m module args), run once per probe in a fresh process
under `nvscope run --fusions ...`; its exit code decides (not 0, a signal or a timeout is bad): for failures that
kill the process (a CUDA abort, a segfault)."""

_EPILOG = """\
nvscope's own options come before the target; the words after it are the script's (or module's) arguments.
exit codes: 0 when it ran (profile) or found a culprit (bisect); 1 when the script, the default call or the
outputs failed, or the bisect did not reproduce the problem; 2 for a bad command line."""


def _common(p: argparse.ArgumentParser, rounds: int, steps: int, warmup: bool) -> None:
    p.add_argument("-m", dest="module", metavar="MODULE[:FUNCTION]",
                   help="import a module instead of a script (the words after it are its arguments)")
    p.add_argument("target", nargs="?", metavar="script.py[:FUNCTION]",
                   help="the script and its function (a no-argument callable); the words after it are the "
                        "script's own arguments")
    p.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.add_argument("--enable", action="append", default=[], metavar="NAME[,NAME...]", help="an enable option")
    p.add_argument("--disable", action="append", default=[], metavar="NAME[,NAME...]", help="a disable option")
    add_measuring(p, rounds, steps, given=True, warmup=warmup)
    p.add_argument("--json", metavar="PATH|-", type=JSON_OUT,
                   help="write the result as JSON to PATH (an existing file only if it holds JSON), or with - to "
                        "standard output (the text and what the script prints then go to standard error)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    add_no_share(p)


def add_parser(subparsers: Any) -> None:
    """Add ``profile`` and ``bisect`` to an ``argparse`` subparsers object."""
    p = subparsers.add_parser("profile", help="per-fusion times, schedulers and outputs under options vs defaults",
                              description=_PROFILE, epilog=_EPILOG + """

examples:
  nvscope profile --enable fast_math bench.py:step
  nvscope profile --torch bench.py:step
  nvscope profile --enable fuse_matmul --disable matmul_expr_eval --backward --params model \\
      --json profile.json --plot profile.png --table profile.txt train.py:loss""",
                              formatter_class=_FORMATTER, allow_abbrev=False)
    _common(p, 20, 1, True)  # profile()'s defaults
    p.add_argument("--fusions", action="append", metavar="GLOB[,GLOB...]",
                   help="profile only the fusions whose id (phase/name, e.g. forward/nvFusion0) matches a glob; "
                        "repeat it or separate globs with commas, as for nvscope run")
    p.add_argument("--plot", metavar="PATH", type=PLOT_OUT,
                   help="write a PNG chart of the ratios (needs matplotlib; an existing file only if it is a PNG)")
    p.add_argument("--table", metavar="PATH", type=TABLE_OUT,
                   help="write the table to a file too (an existing file only if it holds an earlier table)")
    p.add_argument("--torch", action="store_true",
                   help="also run each fusion's region in PyTorch (nv_options(run='torch')) and time it against "
                        "nvFuser's defaults, with its outputs compared; alone, without --enable/--disable, it "
                        "profiles PyTorch against the defaults")
    p.add_argument("--schedulers", choices=("kernels", "nvfuser"), default="kernels",
                   help="read schedulers off kernel names (default) or ask nvFuser's PythonProfiler (fragile in "
                        "nvFuser 0.2.35: docs/profile.md)")

    b = subparsers.add_parser("bisect", help="find the options and fusions that make a step fail, minimally",
                              description=_BISECT, epilog=_EPILOG + """

examples:
  nvscope bisect --enable fuse_matmul --disable matmul_expr_eval --backward train.py:loss
  nvscope bisect --enable ws_normalization --check numerics --backward --params model train.py:loss
  nvscope bisect --subprocess --enable fuse_matmul --disable matmul_expr_eval train.py --steps 1""",
                              formatter_class=_FORMATTER, allow_abbrev=False)
    _common(b, 10, 3, False)  # bisect()'s defaults
    b.add_argument("--check", default=None, metavar="raises,numerics,slower",
                   help="what going wrong means (default raises,numerics); not with --subprocess")
    b.add_argument("--slower-by", type=TOLERANCE, default=0.05, help="with --check slower: the margin (default 0.05)")
    b.add_argument("--subprocess", action="store_true",
                   help="the target is a program; one fresh process per probe, judged by its exit code")
    b.add_argument("--timeout", type=SECONDS, default=None,
                   help="with --subprocess: seconds per run (default 600; at most 1e6)")
    b.add_argument("--bad-exit", type=int, action="append", metavar="CODE",
                   help="with --subprocess: only these exit codes are bad (default: any but 0)")
    b.add_argument("--no-kernel-db", action="store_true",
                   help="with --subprocess: the runs do not share nvFuser's kernel database (NVFUSER_ENABLE=kernel_db "
                        "in a temporary directory of the bisect's own, removed afterwards; on by default)")


def command(ns: argparse.Namespace) -> int:
    """Run ``nvscope profile`` or ``nvscope bisect`` for parsed arguments; returns the exit code."""
    name = ns.command
    target = take_target(ns)
    if target is None:
        return _error(name, json_took_the_target(ns.json) or f"give the target (`nvscope {name} --help`)")
    enable, disable = split(ns.enable), split(ns.disable)
    torch = getattr(ns, "torch", False)
    if not enable and not disable and not torch:
        return _error(name, "give the options: --enable NAME and/or --disable NAME" +
                      (" (or --torch: each fusion in PyTorch)" if name == "profile" else ""))
    if torch and not enable and not disable and getattr(ns, "plot", None):
        return _error(name, "--plot charts the options' ratios: give --enable/--disable too, or leave --plot out")
    fusions = getattr(ns, "fusions", None)
    if fusions is not None:
        ns.fusions = fusions = split(fusions)
        if not fusions:
            return _error(name, "--fusions needs a glob over fusion ids, e.g. --fusions 'forward/*' or --fusions "
                                "backward/nvFusion0")
    try:
        nv_options(enable, disable, fusions=fusions)  # names and globs checked before the script is imported
    except (ValueError, TypeError) as error:
        return _error(name, str(error))
    plot = getattr(ns, "plot", None)
    problem = output_problem((("--json", ns.json), ("--plot", plot), ("--table", getattr(ns, "table", None))), plot)
    if problem is not None:
        return _error(name, problem)
    if name == "bisect":
        only = "--check, --backward, --params, --tolerance, --rounds, --steps" if ns.subprocess else \
            "--timeout, --bad-exit, --no-kernel-db"
        given = [flag for flag, value in (("--check", ns.check), ("--backward", ns.backward), ("--params", ns.params),
                                          ("--tolerance", ns.tolerance), ("--rounds", ns.rounds),
                                          ("--steps", ns.steps))
                 if value not in (None, False)] if ns.subprocess else \
            [flag for flag, value in (("--timeout", ns.timeout), ("--bad-exit", ns.bad_exit),
                                      ("--no-kernel-db", ns.no_kernel_db or None)) if value is not None]
        if given:
            return _error(name, f"{', '.join(given)}: not with{'' if ns.subprocess else 'out'} --subprocess "
                                f"({only} {'judge a function in process' if ns.subprocess else 'judge a program'})")
        if ns.subprocess:
            where, colon, function = target.rpartition(":")
            if colon and where and function.isidentifier() and not os.path.exists(target):
                return _error(name, f"--subprocess takes a program (script.py [args] or -m module [args]), not "
                                    f"{said(target)}, a function: to bisect the function {cut(function, 80)}, leave "
                                    "out --subprocess (and its --timeout, --bad-exit, --no-kernel-db)")
            return _bisect_program(ns, enable, disable)
        from nvscope._bisect import check_arg

        try:  # before the script is imported, as every other flag
            ns.check = check_arg(split([ns.check or "raises,numerics"]), "--check")
        except ValueError as error:
            return _error(name, str(error))
    where, function, problem = split_target(target, ns.module is not None)
    if problem is not None:
        return _error(name, problem)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        return _load_and_run(ns, enable, disable, where, function)
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


def _load_and_run(ns: argparse.Namespace, enable: list[str], disable: list[str], where: str, function: str) -> int:
    name = ns.command
    with program_output_to_stderr(ns.json):  # what the script prints at import: stdout is the JSON's with --json -
        loaded = load_step(ns, where, function, lambda message, code: _error(name, message, code),
                           check_params=False)
    if isinstance(loaded, int):
        return loaded
    fn, params = loaded
    timing = {k: v for k, v in (("rounds", ns.rounds), ("steps_per_round", ns.steps)) if v is not None}
    common = {"enable": enable, "disable": disable, "tolerance": ns.tolerance, "backward": ns.backward,
              "module": params, "seed": ns.seed, "progress": not ns.quiet,
              "share_defaults": not ns.no_share_defaults, **timing}
    run: Callable[[], Any]
    if name == "profile":
        from nvscope._profile import profile

        def run() -> Any:
            return profile(fn, fusions=ns.fusions, warmup=ns.warmup, schedulers=ns.schedulers, torch=ns.torch,
                           **common)
    else:
        from nvscope._bisect import bisect

        def run() -> Any:
            return bisect(fn, check=ns.check, slower_by=ns.slower_by, **common)
    try:
        with program_output_to_stderr(ns.json):
            result = run()
    except (ValueError, TypeError) as error:
        return _error(name, str(error), 1)
    except Exception:
        traceback.print_exc()
        return _error(name, f"the {name} of {cut(f'{where}:{function}', 200)} stopped (traceback above)", 1)
    return _write(ns, result)


def _bisect_program(ns: argparse.Namespace, enable: list[str], disable: list[str]) -> int:
    from nvscope._bisect import bisect_program

    program = [ns.target if ns.module is None else ns.module, *ns.args]
    try:
        result = bisect_program(program, module=ns.module is not None, enable=enable, disable=disable,
                                timeout=600.0 if ns.timeout is None else ns.timeout, bad_exit=ns.bad_exit,
                                progress=not ns.quiet, kernel_db=not ns.no_kernel_db,
                                share_defaults=not ns.no_share_defaults)
    except (ValueError, FileNotFoundError) as error:
        return _error("bisect", str(error))
    except RuntimeError as error:
        return _error("bisect", str(error), 1)
    return _write(ns, result)


def _write(ns: argparse.Namespace, result: Any) -> int:
    text = result.table() if ns.command == "profile" else result.report()
    print(text, file=text_stream(ns.json))  # standard error when the JSON takes standard output (--json -)
    if ns.json and write_json(ns.command, ns.json, result.to_json()):
        return 1
    try:
        if getattr(ns, "table", None):
            with open(ns.table, "w", encoding="utf-8") as out:
                out.write(text + "\n")
        if getattr(ns, "plot", None):
            result.plot(ns.plot, title=f"nvscope profile {cut(ns.target or ns.module, 80)}")
    except OSError as error:
        return _error(ns.command, f"could not write the output: {error}", 1)
    return 0 if ns.command == "profile" or result.reproduced else 1
