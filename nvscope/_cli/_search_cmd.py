"""``nvscope search``: find the nvFuser options that make one function of a script or module faster."""

from __future__ import annotations

import argparse
import sys
import traceback
from typing import Any

from nvscope._cli._args import (
    JSON_OUT,
    PLOT_OUT,
    STDOUT,
    add_measuring,
    add_no_share,
    error,
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
from nvscope._core import cut

__all__ = ["add_parser", "command"]


_DESCRIPTION = """\
Import a script (or a module, with -m), then time one of its functions under each candidate set of nvFuser
options against the default: interleaved randomized rounds, per-round paired time ratios, median with an
interval (all candidates' intervals hold together at 95%, so trying many does not make a chance winner likely), a
verdict (faster / slower / no difference detected), first-call (compile) time apart, and the outputs (and
gradients) of each candidate against the default's. Then the winners are combined greedily. Prints a ranked table
and the nv_options(...) line to paste; --json and --plot save the result. A function through which no nvFuser
fusion runs is refused (exit 1): no option could change it.

The script is imported under another name than __main__, so code under `if __name__ == "__main__":` does not run;
everything the function needs (model, inputs, thunder.jit) must be built at import. The function takes no arguments.
Each candidate compiles the function's fusions anew (seconds each): pass --candidates to search fewer."""

_EPILOG = """\
nvscope's own options come before the target; the words after it are the script's (or module's) arguments
(after -m MODULE:FUNCTION, write -- before arguments that start with a dash).
candidates: comma-separated option names form one set; a bare (or +) name is an enable option, -name a disable
option (write --candidates=-fma, or disable:fma, so that the shell word does not look like a flag).
default: every codegen option of the installed nvFuser that takes no arguments (`nvscope search --list`).

examples:
  nvscope search bench.py:step
  nvscope search --candidates fast_math --candidates fuse_matmul,-matmul_expr_eval --rounds 40 bench.py:step
  nvscope search --backward --params model --json search.json --plot search.png train.py:loss --size 4096
  nvscope search --candidates=-fma -m mypkg.bench:step

exit codes: 0 when the search ran (whatever it found); 1 when the script, the default call or writing the outputs
failed, or no fusion ran; 2 for a bad command line (unknown option name, no such script or function)."""


def add_parser(subparsers: Any) -> None:
    """Add the ``search`` command to an ``argparse`` subparsers object (``parser.add_subparsers(dest="command")``)."""
    p = subparsers.add_parser("search", help="find the nvFuser options that make a function faster (timed, with "
                                              "numerics checked)",
                              description=_DESCRIPTION, epilog=_EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    p.add_argument("-m", dest="module", metavar="MODULE:FUNCTION",
                   help="import a module instead of a script (the words after it are its arguments)")
    p.add_argument("target", nargs="?", metavar="script.py:FUNCTION",
                   help="the script and the function in it to search (a no-argument callable); the words after it "
                        "are the script's own arguments (its sys.argv[1:] while it is imported)")
    p.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.add_argument("--candidates", action="append", metavar="NAME[,NAME...]",
                   help="one candidate set (repeat for more); default: `nvscope search --list`")
    add_measuring(p, 30, 5)
    p.add_argument("--json", metavar="PATH|-", type=JSON_OUT,
                   help="write the result as JSON to PATH (an existing file only if it holds JSON), or with - to "
                        "standard output (the table and what the script prints then go to standard error)")
    p.add_argument("--plot", metavar="PATH", type=PLOT_OUT,
                   help="write a PNG chart of the ratios (needs matplotlib; an existing file only if it is a PNG)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    add_no_share(p)
    p.add_argument("--list", action="store_true", help="print the default candidates and exit")
    p.add_argument("--per-fusion", action="store_true",
                   help="recommend an option set per fusion instead: each candidate profiled fusion by fusion, the "
                        "winners combined into nested nv_options(..., fusions=[...]) scopes, timed against the "
                        "defaults and the best global set (docs/search.md)")


def _error(message: str, code: int = 2) -> int:
    return error("search", message, code)


def command(ns: argparse.Namespace) -> int:
    """Run ``nvscope search`` for parsed arguments; returns the exit code."""
    from nvscope._measure import default_candidates, resolve

    if ns.list:
        for spec in default_candidates():
            print(spec)
        return 0
    target = take_target(ns)
    if target is None:
        return _error(json_took_the_target(ns.json) or
                      "give the target: script.py:FUNCTION, or -m module:FUNCTION (`nvscope search --help`)")
    where, function, problem = split_target(target, ns.module is not None)
    if problem is not None:
        return _error(problem)
    try:  # before the script is imported, which may take long: a typo (or a repeated set) costs nothing
        if ns.candidates is not None:
            resolve(ns.candidates)
    except (ValueError, TypeError) as error:  # UnknownOptionError is a ValueError
        return _error(str(error))
    if ns.params is not None and not all(part.isidentifier() for part in ns.params.split(".")):
        return _error(f"--params {said(ns.params)} is not a Python name: give the name of the script's nn.Module "
                      "(or of an iterable of its tensors), e.g. --params model")
    problem = output_problem((("--json", ns.json), ("--plot", ns.plot)), ns.plot)
    if problem is not None:
        return _error(problem)

    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:  # the script's directory stays on sys.path while it runs: its functions may import its neighbours late
        return _load_and_search(ns, target, where, function)
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


def _load_and_search(ns: argparse.Namespace, target: str, where: str, function: str) -> int:
    from nvscope._search import search

    with program_output_to_stderr(ns.json):  # what the script prints at import: stdout is the JSON's with --json -
        loaded = load_step(ns, where, function, _error)
    if isinstance(loaded, int):
        return loaded
    fn, params = loaded
    try:
        if ns.per_fusion:
            from nvscope._search import search_fusions as search  # type: ignore[assignment]
        with program_output_to_stderr(ns.json):
            result = search(fn, candidates=ns.candidates, rounds=ns.rounds, steps_per_round=ns.steps,
                            warmup=ns.warmup, tolerance=ns.tolerance, backward=ns.backward, module=params,
                            seed=ns.seed, progress=not ns.quiet, share_defaults=not ns.no_share_defaults)
    except (ValueError, TypeError) as error:  # the tool's refusal (no fusion ran), as profile and bisect say it
        return _error(str(error), 1)
    except Exception:
        traceback.print_exc()
        return _error(f"the search of {cut(target, 200)} stopped (traceback above)", 1)
    print(result.table(), file=text_stream(ns.json))
    try:
        if ns.json:
            if write_json("search", ns.json, result.to_json()):
                return 1
            if ns.json != STDOUT:
                print(f"nvscope search: JSON written to {cut(ns.json, 200)}", file=sys.stderr)
        if ns.plot:
            result.plot(ns.plot, title=f"nvscope search {cut(target, 80)}")
            print(f"nvscope search: chart written to {cut(ns.plot, 200)}", file=sys.stderr)
    except OSError as error:
        return _error(f"could not write the output: {error}", 1)
    return 0
