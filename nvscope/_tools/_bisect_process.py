"""Bisect a program, one fresh process per probe: for failures that kill the process (a CUDA abort, a segfault).

    result = bisect_program(["train.py", "--steps", "1"], enable=["fuse_matmul"], disable=["matmul_expr_eval"])

The program is judged by its exit code: 0 is good; anything else (or one of ``bad_exit``), a signal or a timeout is
bad. First it runs once without options, audited (a child Python running it as ``nvscope run`` does), which gives
the fusion ids (in first-execution order; each id names where its fusion sits in the program, so it selects the same
fusion in every probe, whatever order that run meets them in) and shows that it succeeds without options. Then each
probe is

    python -m nvscope run --enable=A,B --disable=C --fusions=ID1 --fusions=ID2 -- train.py --steps 1

in a fresh process, so nothing survives from one probe to the next but nvFuser's kernel database: with
``kernel_db=True`` (the default) every run gets ``NVFUSER_ENABLE=...,kernel_db`` and a temporary directory of the
bisect's own as ``TMPDIR`` (nvFuser keeps the database in ``<temp directory>/nvfuser_kernel_db``, its
``KernelDb::get()`` with ``std::filesystem::temp_directory_path()``, which reads ``TMPDIR``), removed afterwards. The
database is keyed on each kernel's code and compile arguments, so a probe reuses the kernels an earlier run compiled
for the same code (above all the defaults of the fusions it does not select) and compiles what differs. Repro scripts
still go to ``NVSCOPE_REPRO_DIR``, or to a directory the bisect makes (not removed). The stages are those of the
in-process bisect (`nvscope._tools._bisect_drive.drive`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence

from nvscope._core import OptionSet, cut, note_ids, nv_options, shown
from nvscope._exec import scripts_named_in
from nvscope._measure import number, progress_printer, run_command
from nvscope._tools._bisect_drive import Outcome, drive
from nvscope._tools._bisect_report import BisectResult

__all__ = ["bisect_program"]

# The child that lists the fusions: the program run as the probes run it (`run_command`, here without options) by
# the public `nvscope` command's entry point, inside an audit. The public command, as for the probes, not a module of
# the command-line layer above this one.
_LIST = """\
import json, sys
import nvscope
from nvscope.cli import main
out, *command = sys.argv[1:]
with nvscope.audit() as log:
    code = main(command)
with open(out, "w", encoding="utf-8") as file:
    json.dump({"code": code, "fusions": list(dict.fromkeys(r.fusion for r in log.records))}, file)
sys.exit(code)
"""


# The longest wait a run may be given: subprocess's waits convert seconds to integer nanoseconds or milliseconds, and
# overflow (OverflowError) for inf or 1e300; a million seconds (11.6 days) is far inside every such limit.
MAX_TIMEOUT = 1e6


def timeout_seconds(name: str, value: object) -> float:
    """A run's timeout: seconds, a finite number > 0 and at most `MAX_TIMEOUT` (ValueError otherwise)."""
    seconds = number(name, value, above=True)
    if seconds > MAX_TIMEOUT:
        raise ValueError(f"{name} must be at most {MAX_TIMEOUT:.0f} seconds ({MAX_TIMEOUT / 86400:.1f} days), got "
                         f"{shown(seconds)}")  # as given: `:g` printed 1000001 as 1e+06
    return float(seconds)


def _environment(kernel_db: str | None = None, repro_dir: str | None = None) -> dict[str, str]:
    """The probes' environment: this one without ``NVSCOPE_RUN`` (a bisect started under ``nvscope run`` must not
    hand that run's scope to its probes, which each get their own from their ``nvscope run`` line); with
    ``kernel_db`` (a directory), nvFuser's kernel database there (module docstring)."""
    from nvscope._core import _env

    env = {k: v for k, v in os.environ.items() if k != _env.RUN}
    if kernel_db is not None:
        enabled = [name for name in env.get("NVFUSER_ENABLE", "").split(",") if name.strip()]
        env["NVFUSER_ENABLE"] = ",".join([*enabled, *([] if "kernel_db" in enabled else ["kernel_db"])])
        env["TMPDIR"] = kernel_db
        if repro_dir is not None:
            env["NVSCOPE_REPRO_DIR"] = repro_dir
    return env


def _detail(done: subprocess.CompletedProcess[str] | None, timeout: float) -> str:
    if done is None:
        return f"timed out after {timeout:g} s"
    code = done.returncode
    if code < 0:
        try:
            how = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"killed by signal {-code}"
    else:
        how = f"exit {code}"
    lines = [line.strip() for line in (done.stderr or "").splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line.partition(":")[0] or "error" in line.partition(":")[0]]
    last = errors[-1] if errors else lines[-1] if lines else ""
    return f"{how}: {cut(last, 300)}" if last else how


def _repro(stderr: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(scripts_named_in(stderr)))


def bisect_program(program: Sequence[str], *, module: bool = False, enable: Iterable[str] | str = (),
                   disable: Iterable[str] | str = (), timeout: float = 600.0, bad_exit: Iterable[int] | None = None,
                   python: str = sys.executable, progress: bool = True, kernel_db: bool = True) -> BisectResult:
    """Find the options and fusions under which ``program`` (a script and its arguments, or with ``module=True`` a
    module and its arguments) fails. See the module docstring (``kernel_db``: nvFuser's kernel database, shared by
    the runs of this bisect only)."""
    program = list(program)
    if not program:
        raise ValueError("bisect_program() needs the program: a script (or, with module=True, a module) and its "
                         "arguments")
    given = nv_options(enable, disable).options
    if not given:
        raise ValueError("bisect needs the options under which the program fails: --enable and/or --disable")
    timeout = timeout_seconds("timeout", timeout)
    bad_codes = None if bad_exit is None else set(bad_exit)
    if not module and not os.path.exists(program[0]):
        raise FileNotFoundError(f"can't open file {cut(os.path.abspath(program[0]), 200, repr)}: no such file")

    say = progress_printer("bisect", progress)

    database = tempfile.mkdtemp(prefix="nvscope-kernel-db-") if kernel_db else None
    try:
        repro_dir = None
        if database is not None and not os.environ.get("NVSCOPE_REPRO_DIR"):  # not under TMPDIR: it is removed
            repro_dir = tempfile.mkdtemp(prefix="nvscope-repro-")
        env = _environment(database, repro_dir)
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
    fusions = _list_fusions(program, module, timeout, python, env)
    say(f"the program ran {len(fusions)} fusions without options")
    # Ids name where each fusion sits, so the probes' runs, which see them in their own order, give the same ones;
    # a fusion without a site whose short form another shares is selected as "x#1" in the lines (`exact_glob`).
    note_ids(fusions)

    def run(options: OptionSet, selected: tuple[str, ...] | None) -> Outcome:
        try:
            done: subprocess.CompletedProcess[str] | None = subprocess.run(
                run_command(options, selected, [*(["-m"] if module else []), *program], python=python,
                            audit=False), capture_output=True, text=True,
                timeout=timeout, check=False, env=env)
        except subprocess.TimeoutExpired:
            done = None
        if done is None:
            return Outcome(True, _detail(None, timeout))
        bad = done.returncode != 0 if bad_codes is None else done.returncode in bad_codes or done.returncode < 0
        return Outcome(bad, _detail(done, timeout) if bad else "", _repro(done.stderr or ""))

    check = ("exit code in " + ",".join(map(str, sorted(bad_codes))) if bad_codes is not None else
             "exit code not 0") + f", a signal, or no exit within {timeout:g} s"
    return drive(given, fusions, run, say, check, "subprocess", tuple((["-m"] if module else []) + program))


def _list_fusions(program: list[str], module: bool, timeout: float, python: str,
                  env: dict[str, str]) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="nvscope-bisect-") as directory:
        out = os.path.join(directory, "fusions.json")
        words = run_command(OptionSet(), None, [*(["-m"] if module else []), *program], python=python, audit=False)
        command = [python, "-c", _LIST, out, *words[3:]]  # the probe's words after its `python -m nvscope`
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, env=env)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the program did not finish without options within {timeout:g} s: raise the "
                               "timeout") from None
        if done.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"the program fails without options ({_detail(done, timeout)}), so there is nothing "
                               f"to bisect: it must succeed without options and fail with them\n{done.stderr[-2000:]}")
        with open(out, encoding="utf-8") as file:
            fusions = list(json.load(file)["fusions"])
    if not fusions:
        raise RuntimeError("no nvFuser fusion ran through nvscope in the program without options, so no option can "
                           "reach one: does it use thunder.jit or nvFuser's FusionDefinition?")
    return fusions
