"""One probe of the rescue: the step once, some fusions under options and the rest on Thunder's own path.

`observe` runs it, marking each fusion's start so that a fault is blamed on the fusion running; `Children` runs
probes in child processes (workers or fresh), each in its own process group with a time limit, and reads what a dead
one left: its events file (`read_events`) and the start markers that compute-sanitizer's lines are attributed by."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TextIO

from nvscope._core import OptionSet, _env, dev_mode, first_line, nv_options, program_sharing_suspended
from nvscope._exec import FusionRecord, audit, listening, repro_paths, scripts_named_in, watch_imports
from nvscope._measure import compare_leaves, flatten_outputs, options_dict, options_from
from nvscope._rescue._target import Plan, check_target
from nvscope._rescue._watch import (
    NO_VALIDATE,
    Watch,
    detached,
    failure_of,
    loaded_versions,
    routes_forgotten,
    script_path,
)
from nvscope._rescue._workers import Workers, kill
from nvscope._tools import ScopeMap, exit_detail

__all__ = ["CHILD", "LOAD", "MARK", "WORKER", "Children", "Plan", "check_target", "observe", "read_events",
           "sanitizer_errors"]

MARK = "nvscope-rescue: start "
# A probe's events file: one line per fusion event, ``<event> <fusion id>``, in the order they happened.
STARTED, ENDED, FAILED = "start", "end", "raise"
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")

# A child: load the target as the command line would (`LOAD`), then `observe` it and exit.
LOAD = """\
import json, sys
with open(sys.argv[1], encoding="utf-8") as file:
    spec = json.load(file)
from nvscope._rescue._probe import observe
from nvscope._rescue._target import load
step, reference = load(spec)
"""
CHILD = LOAD + 'observe(step, reference, spec, spec.get("tolerance"))\n'
# A worker (`nvscope._rescue._workers`): loaded once, then one probe per request.
WORKER = LOAD + "from nvscope._rescue._workers import serve\nserve(observe, step, reference, spec)\n"


def observe(step: Callable[[], Any], reference: Callable[[], Any] | None, spec: dict[str, Any],
            tolerance: float | None = None) -> dict[str, Any]:
    """Run ``step`` once under the plan in ``spec`` (``groups``: [[options, [ids]], ...]) and say what happened (a
    JSON-able dict, also written to ``spec["out"]``). ``spec`` also names the ``events`` file (`read_events`), stdout
    ``markers`` (for the sanitizer), the fusions to ``validate`` and the repro ``scripts`` folder (``prewrite``: before
    each first run). ``failure``: the first failure in time; ``failed``: every fusion that failed."""
    groups = [(options_from(o), list(ids)) for o, ids in spec.get("groups", ())]
    events: TextIO | None = open(spec["events"], "a", encoding="utf-8") if spec.get("events") else None
    lock = threading.Lock()  # fusions of several threads log to one file
    caught: list[tuple[str, BaseException]] = []  # each fusion's first exception, in the order they came
    torch_s: dict[str, float] = {}  # per fusion that escaped, the seconds its region ran in PyTorch
    fusions: dict[str, dict[str, Any]] = {}
    watch = Watch(spec.get("validate") or (), spec.get("scripts"), bool(spec.get("prewrite")),
                   {f for _, ids in groups for f in ids})

    running = threading.local()  # the fusion this thread runs: an execution inside it is part of it

    def seen(record: FusionRecord) -> None:
        # A definition a fusion executes (Thunder's, met again by the direct adapter installed beside it; validate's
        # own execute) is that fusion, not another.
        if getattr(running, "fusion", None) is None and record.fusion not in fusions:
            ops = record.info.ops
            fusions[record.fusion] = {"id": record.fusion, "ops": None if ops is None else sorted(ops),
                                      "own": options_dict(record.options if record.route == "default"
                                                          else OptionSet())}

    versions: dict[str, str] = {}

    @contextmanager
    def timer(record: FusionRecord) -> Iterator[None]:
        if getattr(running, "fusion", None) is not None:
            yield None
            return
        if not versions:  # as this process loaded them, before a fault can take the process
            versions.update(loaded_versions())
            if spec.get("versions"):
                with open(spec["versions"], "w", encoding="utf-8") as file:
                    json.dump(versions, file)
        log(STARTED, record.fusion)
        if spec.get("markers"):
            print(MARK + record.fusion, flush=True)
        running.fusion = record.fusion
        watch.enter(record.fusion, record.info.ops)
        began = time.perf_counter()
        try:
            yield None
        except BaseException as error:
            if all(f != record.fusion for f, _ in caught):
                caught.append((record.fusion, error))
            log(FAILED, record.fusion)
            raise
        else:
            log(ENDED, record.fusion)
            if record.route == "torch":  # nvFuser raised and the region ran in PyTorch (on_error="torch")
                torch_s[record.fusion] = torch_s.get(record.fusion, 0.0) + time.perf_counter() - began
        finally:
            watch.leave()
            running.fusion = None

    def log(event: str, fusion: str) -> None:
        if events is not None:
            with lock:
                events.write(f"{event} {fusion}\n")
                events.flush()

    result: dict[str, Any] = {"failure": None, "failed": [], "matched": None, "numerics": "", "repro": [],
                              "escaped": []}
    out: Any = None
    failures: list[dict[str, Any]] = []
    step_s = 0.0
    outside: dict[str, Any] | None = None  # the step's failure outside every fusion
    try:
        # share=False: the diagnosis sees Thunder's own path, as the user's program runs it; watch_imports: the
        # adapter installs when the step imports Thunder, as under `nvscope run`.
        with dev_mode(True), warnings.catch_warnings(), audit(), watch_imports(), \
                listening(seen, timer), program_sharing_suspended(), routes_forgotten(), detached(), \
                nv_options(share=False, inherit=False, on_error="torch"), \
                ScopeMap(groups):
            warnings.simplefilter("ignore")
            began = time.perf_counter()
            try:
                out = step()
            except BaseException as error:  # a SystemExit of a program is its failure too
                if isinstance(error, KeyboardInterrupt):
                    raise
                if not any(f not in torch_s for f, _ in caught) and not (
                        isinstance(error, SystemExit) and not error.code):
                    outside = failure_of(None, "step", first_line(error, 400))
            finally:
                step_s = time.perf_counter() - began
                watch.close()
            # Every fusion that raised (those that escaped to PyTorch, and the one that ended the step), in order.
            for fusion, inner in caught:
                failures.append({**failure_of(fusion, "raise", first_line(inner, 400), str(inner)[:2000]),
                                 "repro": [*([watch.written[fusion]] if fusion in watch.written else []),
                                           *repro_paths(inner)]})
                result["repro"] += list(repro_paths(inner))
            result["escaped"] = [f for f, _ in caught if f in torch_s]
        failures[:0] = watch.wrong  # a fusion's wrong numbers come before the raise that ended the step
        result["failed"] = list(dict.fromkeys(f["fusion"] for f in failures))
        if outside is not None:
            failures.append(outside)
        if failures:
            result["failure"], result["failures"] = failures[0], failures
            result["repro"] = [*(watch.written[f] for f in result["failed"] if f in watch.written), *result["repro"]]
        if reference is not None:
            try:
                expected = reference()
            except BaseException as error:
                if isinstance(error, KeyboardInterrupt):
                    raise
                # The reference's own failure, before any fusion's: no probe can be judged without it (nothing to
                # search), and no fusion is blamed for it.
                result["failure"] = failure_of(None, "reference", first_line(error, 400))
                result["failures"] = [result["failure"]]
                expected = None
            # The step ran to its end (fusions that raised ran in PyTorch): its result is judged.
            if outside is None and all(f in result["escaped"] for f in result["failed"]) and (
                    result["failure"] is None or result["failure"]["kind"] == "raise"):
                numerics = compare_leaves(flatten_outputs(expected, "out"), flatten_outputs(out, "out"), tolerance)
                result["matched"], result["numerics"] = numerics.ok, numerics.detail
                if not numerics.ok:
                    differs = failure_of(None, "numbers", f"the step's result differs from its reference: "
                                                          f"{numerics.detail}")
                    result["failure"] = result["failure"] or differs
                    result["failures"] = [*result.get("failures", ()), differs]
    finally:
        if events is not None:
            events.close()
    result["fusions"] = list(fusions.values())
    result["torch_ms"] = {f: s * 1e3 for f, s in torch_s.items()}
    result["step_ms"] = step_s * 1e3
    result["versions"] = versions or loaded_versions()
    result["validated"] = sorted(watch.checked)
    result["unvalidated"] = dict(watch.skipped)
    if watch.validate and watch.frontends and not watch.found_validate:
        result["validate"] = NO_VALIDATE
    if spec.get("out"):
        with open(spec["out"], "w", encoding="utf-8") as file:
            json.dump(result, file)
    return result


class Children:
    """Probes in child processes (module docstring). ``target``: {"where", "function", "module", "args",
    "reference"}; ``jobs``: how many workers at most; ``fresh``: no workers (every probe a fresh process)."""

    def __init__(self, target: dict[str, Any], *, timeout: float, sanitizer: str | None, scripts: str, jobs: int,
                 tolerance: float | None, fresh: bool) -> None:
        self.target, self.timeout, self.sanitizer, self.tolerance = target, timeout, sanitizer, tolerance
        # One directory for every child's repro scripts, kept after the rescue when a child wrote one (`close`).
        self.own_repro = not os.environ.get("NVSCOPE_REPRO_DIR")
        self.repro_dir = os.environ.get("NVSCOPE_REPRO_DIR") or tempfile.mkdtemp(prefix="nvscope-repro-")
        self.scripts = scripts  # the fusions' repro scripts, written before each runs (`tidy` keeps the failing ones')
        # A program jits anew at each run, and a sanitizer's run is one process: those stay fresh processes.
        reuse = not fresh and sanitizer is None and target["function"] is not None
        self.workers = Workers(jobs, [sys.executable, "-c", WORKER], {"target": target}, self.environment(()),
                               timeout, self.verdict) if reuse else None

    def close(self) -> None:
        """Kill the workers (a later `run` starts new ones); remove the repro directories that no child wrote to."""
        if self.workers is not None:
            self.workers.close()
        for directory in ([self.repro_dir] if self.own_repro else []) + [self.scripts]:
            with suppress(OSError):
                os.rmdir(directory)  # only an empty one

    def run(self, plans: Sequence[Plan]) -> list[dict[str, Any]]:
        """The plans' observations, in order: each run at once (the caller bounds how many) in a child or a worker."""
        with tempfile.TemporaryDirectory(prefix="nvscope-rescue-") as directory:
            specs = [self.spec(plan, os.path.join(directory, str(i))) for i, plan in enumerate(plans)]
            pooled = [i for i, plan in enumerate(plans) if self.workers is not None and not plan.fresh
                      and not plan.drop_env]
            started: dict[int, tuple[subprocess.Popen[str], TextIO, TextIO]] = {}
            try:
                for i, plan in enumerate(plans):
                    if i not in pooled:
                        started[i] = self._start(plan, specs[i])
                results = self.workers.run([(i, specs[i]) for i in pooled]) if self.workers and pooled else {}
                for i, (child, out, err) in started.items():
                    results[i] = self._finish(child, specs[i], out, err)
                return [results[i] for i in range(len(plans))]
            finally:  # Ctrl-C or an error: no child outlives the rescue (`Workers.run` kills its own)
                for child, out, err in started.values():
                    if child.poll() is None:
                        kill(child)
                    out.close()
                    err.close()

    def spec(self, plan: Plan, stem: str) -> dict[str, Any]:
        """What `observe` reads for ``plan``, its files named from ``stem``."""
        return {"target": self.target, **plan.spec(), "events": stem + ".events", "out": stem + ".json",
                "versions": stem + ".versions",
                "markers": self.sanitizer is not None, "scripts": self.scripts, "prewrite": True,
                "tolerance": self.tolerance}

    def environment(self, drop: Sequence[str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in drop and k != "NVSCOPE_RUN"}
        if _env.share_all():
            # The diagnosis and the probes see Thunder's own path in every thread, which a share=False scope
            # (`observe`) gives the calling thread only: the program-wide sharing does not reach the children.
            env["NVSCOPE_SHARE"] = "1"
        env["NVSCOPE_REPRO_DIR"] = self.repro_dir
        env["CUDA_LAUNCH_BLOCKING"] = "1"  # a fault surfaces in the fusion that caused it, not in a later one
        return env

    def _start(self, plan: Plan, spec: dict[str, Any]) -> tuple[subprocess.Popen[str], TextIO, TextIO]:
        stem = spec["out"][:-len(".json")]
        with open(stem + ".spec", "w", encoding="utf-8") as file:
            json.dump(spec, file)
        env = self.environment(plan.drop_env)
        command = [sys.executable, "-c", CHILD, stem + ".spec"]
        if self.sanitizer is not None:
            env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"  # a write past a tensor lands outside any allocation
            command = [self.sanitizer, "--tool", "memcheck", *command]
        out = open(stem + ".stdout", "w+", encoding="utf-8")  # closed in `run`
        err = open(stem + ".stderr", "w+", encoding="utf-8")
        child = subprocess.Popen(command, stdout=out, stderr=err, text=True, env=env, start_new_session=True)
        return child, out, err

    def _finish(self, child: subprocess.Popen[str], spec: dict[str, Any], out: TextIO,
                err: TextIO) -> dict[str, Any]:
        try:
            code: int | None = child.wait(self.timeout)
        except subprocess.TimeoutExpired:
            kill(child)
            code = None
        out.seek(0)
        err.seek(0)
        return self.verdict(spec, code, out.read(), err.read(), child.args)

    def verdict(self, spec: dict[str, Any], code: int | None, stdout: str, stderr: str, args: Any) -> dict[str, Any]:
        """What one probe saw: its observation, or for a process that died (``code``: its exit status) or hung
        (None) before it could say, what it left."""
        started, running = read_events(spec["events"])
        if os.path.exists(spec["out"]) and code is not None:
            with open(spec["out"], encoding="utf-8") as file:
                result: dict[str, Any] = json.load(file)
            if "usage" in result:  # the target cannot run as given (`unusable`): the caller's error
                raise {"TypeError": TypeError, "ImportError": ImportError}.get(result["error"], ValueError)(
                    result["usage"])
        else:  # it died (or hung) before it could say: the fusion it was in (none: it was outside every fusion)
            done = None if code is None else subprocess.CompletedProcess(args, code, stdout, stderr)
            how = "timeout" if code is None else "fault"
            last = running[-1] if running else None
            # Its repro script was written before it ran (``prewrite``): the fault left no time after.
            script = None if last is None else script_path(self.scripts, last)
            versions: Any = {}  # as the child wrote them at its first fusion
            with suppress(OSError, ValueError), open(spec["versions"], encoding="utf-8") as file:
                versions = json.load(file)
            result = {"fusions": [{"id": f, "ops": None, "own": options_dict(OptionSet())}
                                  for f in started], "matched": None, "numerics": "",
                      "failure": failure_of(last, how, exit_detail(done, self.timeout)
                                            + ("" if last or not started else " (after every fusion had finished)"),
                                            stderr[-2000:]),
                      "failed": [last] if last else [],
                      "repro": [script] if script and os.path.isfile(script) else [],
                      "versions": versions}
        result["repro"] = list(dict.fromkeys([*result["repro"], *scripts_named_in(stderr)]))
        if self.sanitizer is not None:
            total, per = sanitizer_errors(stdout)
            result["memory_errors"] = total
            if total is None:
                result["failure"] = result["failure"] or failure_of(None, "step", "compute-sanitizer printed no "
                                                                  "ERROR SUMMARY", stdout[-1000:])
            elif total and all(f["fusion"] in result.get("escaped", ()) for f in result.get("failures", ())):
                fusion = next(iter(per), None)  # (a run where fusions escaped to PyTorch: after their raises)
                result["failure"] = failure_of(None if fusion == "?" else fusion, "memory",
                                             f"compute-sanitizer memcheck: {total} errors", stdout[-2000:])
                result["failures"] = [result["failure"], *result.get("failures", ())]
                result["failed"] = [f for f in per if f != "?"]
                script = script_path(self.scripts, fusion) if fusion and fusion != "?" else ""
                if os.path.isfile(script):
                    result["repro"] = [script, *result["repro"]]
        return result


def read_events(path: str) -> tuple[list[str], list[str]]:
    """A probe's events file, read after the process is gone: the fusions started (in first-start order), and those
    started and not finished (the latest started last), where a dead or hung process was."""
    lines: list[str] = []
    with suppress(OSError), open(path, encoding="utf-8") as file:
        lines = file.read().splitlines()
    unfinished: dict[str, int] = {}  # per fusion started, its executions not finished
    latest: list[str] = []  # the fusions in the order of their latest start
    for line in lines:
        event, _, fusion = line.partition(" ")
        if event == STARTED:
            unfinished[fusion] = unfinished.get(fusion, 0) + 1
            latest = [f for f in latest if f != fusion] + [fusion]
        elif event in (ENDED, FAILED) and fusion in unfinished:
            unfinished[fusion] -= 1
    return list(unfinished), [f for f in latest if unfinished[f] > 0]


def sanitizer_errors(stdout: str) -> tuple[int | None, dict[str, int]]:
    """compute-sanitizer's error count (None: no summary line) and the errors per fusion, each counted for the
    fusion whose start marker (`MARK`) came last before it."""
    current: str | None = None
    per: dict[str, int] = {}
    for line in stdout.splitlines():
        if line.startswith(MARK):
            current = line[len(MARK):].strip()
        elif line.startswith("=========") and re.search(r"Invalid|out of bounds|Out-of-range", line):
            per[current or "?"] = per.get(current or "?", 0) + 1
    found = _SUMMARY.findall(stdout)
    return (int(found[-1]) if found else None), per
