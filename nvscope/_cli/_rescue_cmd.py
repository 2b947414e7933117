"""``nvscope rescue``: when nvFuser fails under its defaults, find per fusion the options that make the step run.
Every flag is checked before anything runs (exit 2, one line)."""

from __future__ import annotations

import argparse
import os
import shutil
from typing import Any

from nvscope._cli._args import (
    COUNT,
    JSON_OUT,
    POSITIVE,
    SECONDS,
    STDOUT,
    TOLERANCE,
    error,
    json_took_the_target,
    output_problem,
    said,
    take_target,
    text_stream,
    write_json,
)
from nvscope._core import _state, cut
from nvscope._measure import arg, number

__all__ = ["add_parser", "command"]

_DESCRIPTION = """\
Run a step (a script's function, or a whole program) as it runs under nvFuser's defaults, name each fusion that goes
wrong (it raises, kills the process, hangs, computes outputs nvFuser's own validate finds wrong against ATen, or
with --sanitize writes out of bounds; with --reference the step's result must match), and search per failing fusion
the nvFuser options that cure it: the escape hatches nvFuser documents first, then the catalog's codegen options its
ops allow, smallest sets first. A fusion that raises runs in PyTorch meanwhile (on_error="torch"), so one run names
every fusion that raises; one without an option cure is routed there (a fusion that faults, hangs or computes wrong
numbers is not: no route catches that). Every probe runs in a child process (--jobs at a time, --timeout each): for a
function, the search's probes in --jobs long-lived workers that keep what they compiled (a probe compiles its fusion
under the candidate only), the first run, each cure's confirmation and the final proof in fresh processes. Prints per
fusion what went wrong and its cure, the nv_options(...) line for the whole step (fusions that pass keep their
defaults), a final proof, and a repro script per failing fusion."""

_EPILOG = """\
exit codes: 0 when every failing fusion is rescued (by options or the PyTorch route), or nothing failed (the output
says which); 1 when something is not rescued: a fusion has no cure (the partial map is still printed), the step or
its reference fails outside any fusion, the final proof fails, or no nvFuser fusion ran; 2 for a bad command line or
target (no such script, module or function, a syntax error, a --reference that is missing or not a function).

examples:
  nvscope rescue train.py:step
  nvscope rescue --reference eager_step --max-set-size 2 --budget 1800 --jobs 4 train.py:step
  nvscope rescue --sanitize --json rescue.json train.py -- --steps 1"""


def add_parser(subparsers: Any) -> None:
    """Add ``rescue`` to an ``argparse`` subparsers object."""
    p = subparsers.add_parser("rescue", help="find per fusion the options that make a step nvFuser fails on run",
                              description=_DESCRIPTION, epilog=_EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    p.add_argument("-m", dest="module", metavar="MODULE[:FUNCTION]", help="a module instead of a script")
    p.add_argument("target", nargs="?", metavar="script.py[:FUNCTION]",
                   help="a script's function (no arguments), or a script run as a program")
    p.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.add_argument("--reference", metavar="FUNCTION", help="a function beside the step whose result the step's must "
                                                           "match (tolerances by dtype), e.g. the eager model")
    p.add_argument("--tolerance", type=TOLERANCE, default=None,
                   help="one bound on max|diff|/max|reference| instead of the dtype's")
    p.add_argument("--max-set-size", type=POSITIVE, default=2,
                   help="the most options in one candidate set (default 2)")
    p.add_argument("--budget", type=SECONDS, default=1800.0,
                   help="seconds for the whole search (default 1800)")
    p.add_argument("--jobs", type=POSITIVE, default=1,
                   help="probes at once, each in a process of its own (default 1)")
    p.add_argument("--fresh-probes", action="store_true",
                   help="run every search probe in a fresh process, not in a worker (slower: each compiles every "
                        "fusion it runs again)")
    p.add_argument("--timeout", type=SECONDS, default=600.0, help="seconds per probe (default 600)")
    p.add_argument("--confirm", type=COUNT, default=1,
                   help="more runs a cure must pass before it is believed (default 1)")
    p.add_argument("--alpha", type=arg(_rate, float), default=0.05,
                   help="the false-cure rate a flaky failure's cure is proven at, over every candidate (default 0.05)")
    p.add_argument("--repeat", type=POSITIVE, default=5,
                   help="runs of the defaults that measure a flaky failure's rate, and with --sanitize the memcheck "
                        "runs of a clean first run (default 5)")
    p.add_argument("--candidates", action="append", metavar="SPEC",
                   help="try only these sets, in this order (--candidates=-resize_scheduler; repeat it)")
    p.add_argument("--no-validate", dest="validate", action="store_false",
                   help="skip nvFuser's FusionDefinition.validate (each fusion's outputs against ATen's)")
    p.add_argument("--sanitize", action="store_true",
                   help="run every probe under compute-sanitizer --tool memcheck, caching allocator off")
    p.add_argument("--sanitizer", default="compute-sanitizer", help=argparse.SUPPRESS)
    p.add_argument("--json", metavar="PATH|-", type=JSON_OUT,
                   help="write the result as JSON (- : standard output; an existing file only if it holds JSON)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    _OPTIONS.update(o for a in p._actions for o in a.option_strings if o.startswith("--"))


_OPTIONS: set[str] = set()  # rescue's own options: one after a function target was meant before it
_state.keep(__name__, "_OPTIONS", "the parser's option names, the same at every add_parser")


def _rate(name: str, value: object) -> float:
    rate: float = number(name, value, above=True)
    if rate >= 1:
        raise ValueError(f"{name} must be below 1 (a false-cure rate, e.g. 0.05), got {rate:g}")
    return rate


def _error(message: str, code: int = 2) -> int:
    return error("rescue", message, code)


def command(ns: argparse.Namespace) -> int:
    """Run ``nvscope rescue`` for parsed arguments; returns the exit code."""
    target = take_target(ns)
    if not target:
        return _error(json_took_the_target(ns.json) or
                      "give the target: script.py[:FUNCTION] or -m module[:FUNCTION] (`nvscope rescue --help`)")
    # A file of that name is the script, colon or not (as `nvscope run` takes it); else the last colon names a function.
    if ns.module is None and os.path.isfile(target):
        where, function = target, ""
    else:
        where, _, function = target.rpartition(":") if ":" in target else (target, "", "")
    if where != target and not where:
        return _error(f"{said(target)} names no {'module' if ns.module is not None else 'script'}: write "
                      f"{'-m module' if ns.module is not None else 'script.py'}:{cut(function, 200) or 'FUNCTION'}")
    if where != target and not function:
        return _error(f"{said(target)} names no function: write {cut(where, 200)}:FUNCTION, or leave out the colon "
                      "to run the script as a program")
    if ns.module is None and not os.path.isfile(where):
        return _error(f"can't open file {said(os.path.abspath(where))}: no such file")
    if ns.reference and not function:
        return _error("--reference needs a function target (script.py:FUNCTION): a program has no result")
    if function and ns.args[:1] and ns.args[0].partition("=")[0] in _OPTIONS:
        return _error(f"{said(ns.args[0])} after the target: put nvscope rescue's options before it (nvscope rescue "
                      f"{cut(ns.args[0], 100)} ... {cut(target, 200)}); a function target takes no arguments")
    if function and ns.args:
        return _error("arguments after a function target: a function takes none (leave out :FUNCTION to run the "
                      "script as a program with them)")
    if ns.sanitize and shutil.which(ns.sanitizer) is None:
        return _error(f"--sanitize: {cut(ns.sanitizer, 200)} is not on PATH (it comes with the CUDA toolkit)")
    problem = json_path_problem(ns.json)
    if problem:
        return _error(problem)
    candidates = None
    if ns.candidates is not None:
        from nvscope._measure import resolve

        try:
            candidates = resolve(ns.candidates)
        except (ValueError, TypeError) as error:
            return _error(f"--candidates: {error}")
        sizes = [len(c.enable) + len(c.disable) for c in candidates]
        if sizes and min(sizes) > ns.max_set_size:  # the search would try nothing
            return _error(f"--candidates: no set has at most --max-set-size {ns.max_set_size} options (the smallest "
                          f"has {min(sizes)}): raise --max-set-size or give smaller sets")
    from nvscope._rescue import rescue

    try:
        result = rescue(target, reference=ns.reference, max_set_size=ns.max_set_size, budget_s=ns.budget,
                        jobs=ns.jobs, timeout=ns.timeout, confirm=ns.confirm, sanitize=ns.sanitize,
                        sanitizer=ns.sanitizer, tolerance=ns.tolerance, module=ns.module is not None,
                        args=ns.args, candidates=candidates, validate=ns.validate, fresh_probes=ns.fresh_probes,
                        progress=not ns.quiet, alpha=ns.alpha, repeat=ns.repeat)
    except (ValueError, TypeError, FileNotFoundError) as error:
        return _error(str(error))
    except ImportError as error:  # the target's import raised in the first child: its code, or what it imports
        return _error(str(error), 1)
    except KeyboardInterrupt:  # its probes are killed and its scripts removed by now
        return _error("interrupted: no probe is left running", 130)
    print(result.report(_write_issues(result)), file=text_stream(ns.json))
    if ns.json and write_json("rescue", ns.json, result.to_json()):
        return 1
    return result.exit_code()


def json_path_problem(path: str | None) -> str | None:
    """Why ``--json PATH`` cannot take the result, checked before the rescue runs (its result would be lost after
    it), or None: an empty path, a folder, a folder that does not exist."""
    if path is None or path == STDOUT:
        return None
    if not path.strip():
        return "--json takes a file path or - (standard output), not an empty string"
    if os.path.isdir(path):
        return f"--json {cut(path, 200)} is a folder: give a file path in it (--json {cut(path, 200)}/rescue.json)"
    return output_problem((("--json", path),), None)


def _write_issues(result: Any) -> dict[str, str]:
    """Write each failing fusion's issue text beside its repro script (``rescue-<fusion>.issue.md``); per fusion,
    the path written."""
    written = {}
    for r in result.rescues:
        if not (r.issue and r.repro_scripts):
            continue
        path = os.path.splitext(r.repro_scripts[0])[0] + ".issue.md"
        try:
            with open(path, "w", encoding="utf-8") as file:
                file.write(r.issue + "\n")
        except OSError:  # the report still names the repro, and the JSON has the text
            continue
        written[r.fusion] = path
    return written
