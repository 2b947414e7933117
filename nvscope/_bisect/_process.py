"""Bisect a program, one fresh process per probe: for failures that kill the process (a CUDA abort, a segfault).

Judged by its exit code: an audited run lists the fusion ids, then each probe runs ``nvscope run --enable=...
--fusions=ID ...``, the runs sharing a kernel database of their own (docs/bisect.md). The stages are `drive`'s."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from nvscope._bisect._drive import Outcome, drive
from nvscope._bisect._report import BisectResult
from nvscope._core import OptionSet, _env, cut, exact_glob, note_ids, nv_options, shown, split
from nvscope._exec import scripts_named_in
from nvscope._measure import Compiles, Measure, measure_of, number, only_own, progress_printer
from nvscope._tools import exit_detail, no_fusion

PROGRAM = ("timeout", "progress", "share_defaults")  # bisect_program's Measure keywords

__all__ = ["bisect_program"]

# Every run: the program as a probe's line runs it, inside an audit that writes the exit code, the fusion ids and
# what the run compiled (nothing when it dies). Arguments: output file, scope (JSON), `-m` or `--`, the program.
_CHILD = """\
import json, sys
from nvscope._exec import audit
from nvscope._measure import compile_clock, compiles_of
from nvscope._tools import Settings, run_program
out, scope, how, where, *args = sys.argv[1:]
scope = json.loads(scope)
settings = Settings(scope["enable"], scope["disable"], scope["fusions"], audit=False)
began = compile_clock()
with audit() as log:
    code, _ = run_program(None if how == "-m" else where, where if how == "-m" else None, args, settings)
with open(out, "w", encoding="utf-8") as file:
    json.dump({"code": code, "fusions": list(dict.fromkeys(r.fusion for r in log.records)),
               "compiles": compiles_of(log.records, began).as_dict()}, file)
sys.exit(code)
"""


# The longest wait a run may be given: subprocess overflows converting inf or 1e300 seconds to nanoseconds.
MAX_TIMEOUT = 1e6


def timeout_seconds(name: str, value: object) -> float:
    """A run's timeout: seconds, a finite number > 0 and at most `MAX_TIMEOUT` (ValueError otherwise)."""
    seconds = number(name, value, above=True)
    if seconds > MAX_TIMEOUT:
        raise ValueError(f"{name} must be at most {MAX_TIMEOUT:.0f} seconds ({MAX_TIMEOUT / 86400:.1f} days), got "
                         f"{shown(seconds)}")  # as given: `:g` printed 1000001 as 1e+06
    return float(seconds)


def _environment(kernel_db: str | None = None, repro_dir: str | None = None, share: bool = True) -> dict[str, str]:
    """The probes' environment: this one without ``NVSCOPE_RUN`` (each probe gets its scope from its own line); with
    ``kernel_db`` (a directory), nvFuser's kernel database there; ``share``: ``NVSCOPE_SHARE=all`` unless this
    environment turns sharing off."""
    env = {k: v for k, v in os.environ.items() if k != _env.RUN}
    if share and _env.flag("NVSCOPE_SHARE"):
        env["NVSCOPE_SHARE"] = "all"
    elif _env.share_all():  # share_defaults=False: not even the program-wide sharing this process was started with
        env["NVSCOPE_SHARE"] = "1"
    if kernel_db is not None:
        enabled = [name for name in env.get("NVFUSER_ENABLE", "").split(",") if name.strip()]
        env["NVFUSER_ENABLE"] = ",".join([*enabled, *([] if "kernel_db" in enabled else ["kernel_db"])])
        env["TMPDIR"] = kernel_db
        if repro_dir is not None:
            env["NVSCOPE_REPRO_DIR"] = repro_dir
    return env


def bisect_program(program: Sequence[str], *, module: bool = False, enable: Iterable[str] | str = (),
                   disable: Iterable[str] | str = (), bad_exit: Iterable[int] | None = None,
                   python: str = sys.executable, kernel_db: bool = True, measure: Measure | None = None,
                   **keywords: Any) -> BisectResult:
    """Find the options and fusions under which ``program`` (a script and its arguments, or with ``module=True`` a
    module) fails. ``kernel_db``: nvFuser's kernel database for these runs. ``measure`` (or ``timeout=``,
    ``progress=``, ``share_defaults=``): seconds per run (600), progress, every run under ``NVSCOPE_SHARE=all``."""
    m = measure_of("bisect_program", measure, keywords, Measure(), PROGRAM)
    only_own(bisect_program, keywords, PROGRAM)
    program = list(program)
    if not program:
        raise ValueError("bisect_program() needs the program: a script (or, with module=True, a module) and its "
                         "arguments")
    given = nv_options(enable, disable).options
    if not given:
        raise ValueError("bisect needs the options under which the program fails: --enable and/or --disable")
    timeout = timeout_seconds("timeout", m.timeout)
    bad_codes = None if bad_exit is None else set(bad_exit)
    if not module and not os.path.exists(program[0]):
        raise FileNotFoundError(f"can't open file {cut(os.path.abspath(program[0]), 200, repr)}: no such file")

    say = progress_printer("bisect", m.progress)

    database = tempfile.mkdtemp(prefix="nvscope-kernel-db-") if kernel_db else None
    try:
        repro_dir = None
        if database is not None and not os.environ.get("NVSCOPE_REPRO_DIR"):  # not under TMPDIR: it is removed
            repro_dir = tempfile.mkdtemp(prefix="nvscope-repro-")
        env = _environment(database, repro_dir, m.share)
        result = _bisect(program, module, given, timeout, bad_codes, python, say, env)
    finally:
        if database is not None:
            shutil.rmtree(database, ignore_errors=True)
    if database is not None:
        result = dataclasses.replace(result, notes=(*result.notes, "the runs shared nvFuser's kernel database "
                                                    "(NVFUSER_ENABLE=kernel_db) in a temporary directory, removed "
                                                    "afterwards"))
    say(f"done: {result.command() if result.reproduced else 'not reproduced'} ({result.probes} probes)")
    return result


def _bisect(program: list[str], module: bool, given: OptionSet, timeout: float, bad_codes: set[int] | None,
            python: str, say: Callable[[str], None], env: dict[str, str]) -> BisectResult:
    say(f"listing the fusions: {cut(shlex.join(program), 200)} without options")
    try:
        done, report = _child(OptionSet(), None, program, module, timeout, python, env)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the program did not finish without options within {timeout:g} s: raise the "
                           "timeout") from None
    if done.returncode != 0 or report is None:
        raise RuntimeError(f"the program fails without options ({exit_detail(done, timeout)}), so there is nothing "
                           f"to bisect: it must succeed without options and fail with them\n{done.stderr[-2000:]}")
    fusions, default = list(report["fusions"]), Compiles.from_dict(report["compiles"])
    if not fusions:
        raise RuntimeError(no_fusion("no nvFuser fusion ran through nvscope in the program without options, so no "
                                     "option can reach one: does it use thunder.jit or nvFuser's FusionDefinition?"))
    say(f"the program ran {len(fusions)} fusions without options ({default})")
    note_ids(fusions)  # ids that share a short form are selected as "x#1" in the lines (`exact_glob`)

    def run(options: OptionSet, selected: tuple[str, ...] | None) -> Outcome:
        try:
            done, report = _child(options, selected, program, module, timeout, python, env)
        except subprocess.TimeoutExpired:
            return Outcome(True, exit_detail(None, timeout))
        bad = done.returncode != 0 if bad_codes is None else done.returncode in bad_codes or done.returncode < 0
        repro = tuple(dict.fromkeys(scripts_named_in(done.stderr or "")))
        return Outcome(bad, exit_detail(done, timeout) if bad else "", repro,
                       None if report is None else Compiles.from_dict(report["compiles"]))

    check = ("exit code in " + ",".join(map(str, sorted(bad_codes))) if bad_codes is not None else
             "exit code not 0") + f", a signal, or no exit within {timeout:g} s"
    return drive(given, fusions, run, say, check, "subprocess", tuple((["-m"] if module else []) + program),
                 default=default)


def _child(options: OptionSet, selected: tuple[str, ...] | None, program: list[str], module: bool, timeout: float,
           python: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """One run of the program as ``run_command(options, selected, program)`` says, in `_CHILD`: the finished process
    and what the child wrote (None: it died first). Raises `subprocess.TimeoutExpired`."""
    # The fusions as that line's --fusions words select them: each id's exact glob, split as the command splits it.
    globs = split([exact_glob(fusion) for fusion in selected]) if selected else None
    scope = json.dumps({"enable": options.enable_list(), "disable": options.disable_list(), "fusions": globs})
    with tempfile.TemporaryDirectory(prefix="nvscope-bisect-") as directory:
        out = os.path.join(directory, "run.json")
        command = [python, "-c", _CHILD, out, scope, "-m" if module else "--", *program]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, env=env)
        if not os.path.exists(out):
            return done, None
        with open(out, encoding="utf-8") as file:
            return done, json.load(file)
