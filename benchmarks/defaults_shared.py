"""GPU: a first step whose defaults share compiled definitions (``nv_options(share=True)``, issue 38), measured.

    source .gpu/activate.sh && python benchmarks/defaults_shared.py --out "$NVSCOPE_RESULTS" [--layers 2,16,32]
        [--nanogpt] [--modes plain,shared] [--rounds 20]
    python benchmarks/defaults_shared.py --profile-row --out DIR [--before-root /path/to/earlier/checkout]
    python benchmarks/defaults_shared.py --summarize DIR/defaults_shared-*.json   # one table from several runs
    (``.gpu/activate.sh``: the team's device machine's set-up, which installs the GPU stack from a folder of
    wheels; on your own machine, set the stack up as in docs/install-gpu.md and leave the ``source`` out.)

Workloads (Thunder's own test models, fp32, forward + backward, ``thunder.jit(model)`` with no other option, from
tests/gpu/workloads.py): Llama-2 (``thunder/tests/llama2_model.py``, ``--layers`` x ``--dim``, default 8 x 256,
batch 4 x 256) and with ``--nanogpt`` nanoGPT 4 x 768. Each workload and mode runs in a fresh process (the compiles
are what is measured: nothing may be cached; ``NVSCOPE_SHARE`` is removed from the children's environment):

* ``plain``: the first step of a plain ``thunder.jit`` (nvscope not imported yet: Thunder's own path). Then, in the
  same process, Thunder's own warm steps; the first step inside ``nv_options(share=True)`` (the defaults, shared);
  shared warm steps; and ``--rounds`` paired rounds, Thunder's own warm steps against default-shared ones, in a
  random order per round (the per-round time ratio, its median and the sign test's interval:
  `nvscope._measure._stats.summarize`, as in benchmarks/thunder_steps.py). Loss and every gradient of the shared
  steps are compared with Thunder's own first warm step bit for bit (``torch.equal``), judged where Thunder's own
  warm steps repeat themselves.
* ``shared``: a fresh ``thunder.jit`` whose first step runs inside ``nv_options(share=True)``.

Timed the same way on both paths, in the child, by class-level wrappers put in place for the first step and taken
out after it: nvFuser's ``FusionDefinition.execute`` (the class Thunder executes), whose *first* execution per
definition object is where nvFuser compiles it ("nvFuser s": their sum; "compiled": how many), and Thunder's
``FusionDefinitionWrapper.__call__`` (outermost, over nvscope's patch where it is in place), whose first call per
fusion minus the executions inside it is what building, printing and looking up its definitions cost (Thunder's
``create_fd``; under sharing also nvscope's partition and shared-definition lookup): "build ms/fusion", target
< 20 ms. "Thunder s" is the rest of the step: tracing, autodiff, fusion passes, that building and the warm
executions. Shared rows add nvscope's own counters (`nvscope._exec._shared.stats`,
`nvscope._exec._shared.compiling`).

``--profile-row``: ``python -m nvscope profile --rounds 5 --enable OPTION --backward`` of the Llama-2 step
(``--profile-layers``, default 8) from a fresh process, its wall time. It measures the code it runs with: the
"before" side of the issue's comparison needs the earlier commit's nvscope (``mkdir -p before && git archive
1c7cad1 nvscope | tar -x -C before``, in the tree that goes to the GPU machine), given as ``--before-root before``:
the same command then runs with that folder first on ``PYTHONPATH``, from a working directory outside both (so that
``python -m`` does not pick the current one); each run records which nvscope it imported. ``--profile-side`` runs
one side per device call where both do not fit in one; ``--summarize`` joins them. ``--rounds 5``: the issue asks
for 3, which nvscope's CLI refuses (5 is its least).

Written under --out: ``defaults_shared-<workloads>-<modes>.json`` (every row, raw, and the summary) and ``.txt``
(the table), the tensors compared across processes (``<workload>-plain-own.pt``, ``<workload>-shared-first.pt``);
``defaults_shared-profile-<side>.json``, the profile script, each profile's ``.json`` and its output (``.log``).
One device call (600 s) fits the default run (8 layers, both modes) if the fresh plain step takes what the issue
measured (137-149 s); a plain 32-layer step may not fit: ``--modes shared`` for it, and say so.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, os.pardir))
MODES = ("plain", "shared")
BUILD_TARGET_MS = 20.0
REPEAT = 3  # warm steps of each kind compared bit for bit


# --- in the child: the workloads and the timing ---------------------------------------------------------------------

def build(workload: str) -> tuple[Any, Any]:
    """(the CUDA module, step(jitted) -> (loss, grads)) for "llama2-LxD" or "nanogpt-4x768": seeded, fp32."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
    from workloads import fwd_bwd, llama2_loss, llama2_model, nanogpt_model  # tests/gpu/workloads.py

    kind, layers, width = _shape(workload)
    if kind == "llama2":
        model, tokens, targets = llama2_model(layers, width)

        def step(jitted: Any) -> tuple[Any, list[Any]]:
            return fwd_bwd(llama2_loss(jitted, tokens, targets), model)
    elif kind == "nanogpt":
        model, idx, targets = nanogpt_model(4, 256, layers, width)

        def step(jitted: Any) -> tuple[Any, list[Any]]:
            return fwd_bwd(lambda: jitted(idx, targets)[1], model)
    else:
        raise SystemExit(f"unknown workload {workload!r}: llama2-LAYERSxDIM or nanogpt-LAYERSxWIDTH")
    return model, step


def _shape(workload: str) -> tuple[str, int, int]:
    """("llama2", 8, 256) for "llama2-8x256"."""
    kind, _, shape = workload.partition("-")
    layers, _, width = shape.partition("x")
    return kind, int(layers), int(width)


class FirstRuns:
    """Class-level timing wrappers for one first step (see the module's docstring): in place inside ``with``, Thunder's
    and nvFuser's classes as they were (nvscope's patch included, where it is in place) afterwards."""

    def __init__(self, impl: Any) -> None:
        self.fd_class, self.wrapper_class = impl.FusionDefinition, impl.FusionDefinitionWrapper
        self.executed: dict[int, float] = {}  # id(definition) -> seconds of its first execute
        self.calls: dict[int, tuple[float, float]] = {}  # id(fusion) -> (its first call, the executes inside it)
        self._alive: list[Any] = []  # what was timed stays alive: no id is reused while this counts
        self._inside = threading.local()  # seconds of executes inside the current outer call of this thread
        self._saved: list[tuple[type, str, Any]] = []

    def _patch(self, cls: type, name: str, make: Any) -> None:
        own = vars(cls).get(name)
        self._saved.append((cls, name, own))
        setattr(cls, name, make(getattr(cls, name)))

    def __enter__(self) -> FirstRuns:
        def timed_execute(original: Any) -> Any:
            def execute(fd: Any, *args: Any, **kwargs: Any) -> Any:
                first = id(fd) not in self.executed
                start = time.perf_counter()
                try:
                    return original(fd, *args, **kwargs)
                finally:
                    seconds = time.perf_counter() - start
                    if first:
                        self.executed[id(fd)] = seconds
                        self._alive.append(fd)
                    if getattr(self._inside, "seconds", None) is not None:
                        self._inside.seconds += seconds
            return execute

        def timed_call(original: Any) -> Any:
            def call(fusion: Any, *args: Any) -> Any:
                if id(fusion) in self.calls:
                    return original(fusion, *args)
                outer = getattr(self._inside, "seconds", None)
                self._inside.seconds = 0.0
                start = time.perf_counter()
                try:
                    return original(fusion, *args)
                finally:
                    self.calls[id(fusion)] = (time.perf_counter() - start, self._inside.seconds)
                    self._alive.append(fusion)
                    self._inside.seconds = outer
            return call

        self._patch(self.fd_class, "execute", timed_execute)
        self._patch(self.wrapper_class, "__call__", timed_call)
        return self

    def __exit__(self, *exc: object) -> None:
        for cls, name, own in reversed(self._saved):
            if own is None:
                delattr(cls, name)
            else:
                setattr(cls, name, own)
        self._saved.clear()

    def row(self, step_s: float) -> dict[str, Any]:
        nvfuser = sum(self.executed.values())
        build = sum(call - inside for call, inside in self.calls.values())
        fusions = len(self.calls)
        return {"first_step_s": step_s, "nvfuser_s": nvfuser, "thunder_s": step_s - nvfuser,
                "compiled": len(self.executed), "fusions": fusions, "build_s": build,
                "build_ms_per_fusion": build / fusions * 1e3 if fusions else None}


def _timed_step(step: Any, jitted: Any, impl: Any) -> tuple[tuple[Any, list[Any]], dict[str, Any]]:
    with FirstRuns(impl) as runs:
        start = time.perf_counter()
        result = step(jitted)
        seconds = time.perf_counter() - start
    return result, runs.row(seconds)


def _install() -> None:
    import nvscope.thunder

    if not nvscope.thunder.install():  # else share=True would change nothing, and the rows would not say so
        raise SystemExit("nvscope.thunder.install() found no Thunder nvFuser executor to patch")


def _nvscope_counters() -> dict[str, Any]:
    from nvscope._exec import _shared

    seconds, count = _shared.compiling()
    return {**_shared.stats(), "compiling_s": seconds, "compiling_n": count}


def _counters_since(before: dict[str, Any]) -> dict[str, Any]:
    now = _nvscope_counters()
    return {f"nvscope_{k}": (v - before[k] if k not in ("entries", "failed") else v) for k, v in now.items()}


def _differences(step: tuple[Any, list[Any]], reference: tuple[Any, list[Any]]) -> list[str]:
    import torch

    tensors = [(x, y) for x, y in zip([step[0], *step[1]], [reference[0], *reference[1]], strict=True)]
    return [f"tensor {k} ({int((x != y).sum())} of {x.numel()} elements)"
            for k, (x, y) in enumerate(tensors) if not torch.equal(x, y)]


def _versions() -> dict[str, Any]:
    import thunder
    import torch

    try:
        import nvfuser_direct
        nvfuser = str(nvfuser_direct.version())
    except Exception as error:  # the legacy-only frontend, or a build without version()
        nvfuser = f"unknown ({type(error).__name__})"
    return {"thunder": thunder.__version__, "nvfuser": nvfuser, "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0), "NVFUSER_ENABLE": os.environ.get("NVFUSER_ENABLE")}


def child(workload: str, mode: str, out: str, rounds: int, steps: int, seed: int) -> None:
    import thunder
    import thunder.executors.nvfuserex_impl as impl
    import torch

    model, step = build(workload)
    row: dict[str, Any] = {"workload": workload, "mode": mode, **_versions()}
    if mode == "shared":
        from nvscope import nv_options

        _install()
        jitted = thunder.jit(model)
        before = _nvscope_counters()
        with nv_options(share=True):
            first, timing = _timed_step(step, jitted, impl)
            row.update(timing, **_counters_since(before))
            start = time.perf_counter()
            step(jitted)
            row["second_step_s"] = time.perf_counter() - start
        torch.save({"loss": first[0].cpu(), "grads": [g.cpu() for g in first[1]]},
                   os.path.join(out, f"{workload}-shared-first.pt"))
        print("RESULT " + json.dumps(row), flush=True)
        return
    jitted = thunder.jit(model)
    _, timing = _timed_step(step, jitted, impl)  # nvscope not imported yet: Thunder's own path
    row.update(timing)
    own = [step(jitted) for _ in range(REPEAT)]
    torch.save({"loss": own[0][0].cpu(), "grads": [g.cpu() for g in own[0][1]]},
               os.path.join(out, f"{workload}-plain-own.pt"))
    from nvscope import nv_options

    _install()
    before = _nvscope_counters()
    with nv_options(share=True):
        shared_first, timing = _timed_step(step, jitted, impl)
        shared = [shared_first] + [step(jitted) for _ in range(REPEAT)]
    row["shared_after_plain"] = {**timing, **_counters_since(before)}
    row["own_repeats"] = not any(_differences(s, own[0]) for s in own[1:])
    differ = {f"shared step {k}": found for k, s in enumerate(shared) if (found := _differences(s, own[0]))}
    row["shared_equals_own"] = not differ
    row["shared_differences"] = differ
    row["warm"] = _paired(step, jitted, rounds, steps, seed) if rounds else None
    print("RESULT " + json.dumps(row), flush=True)


def _paired(step: Any, jitted: Any, rounds: int, steps: int, seed: int) -> dict[str, Any]:
    """Thunder's own warm steps against default-shared ones: ``steps`` of each per round, in a random order."""
    from nvscope import nv_options
    from nvscope._measure._stats import summarize

    times: dict[str, list[float]] = {"own": [], "shared": []}
    order = random.Random(seed)

    def run(kind: str) -> float:
        start = time.perf_counter()
        if kind == "shared":
            with nv_options(share=True):
                for _ in range(steps):
                    step(jitted)
        else:
            for _ in range(steps):
                step(jitted)
        return time.perf_counter() - start

    for kind in times:  # warm both once more outside the rounds
        run(kind)
    for _ in range(rounds):
        for kind in order.sample(list(times), len(times)):
            times[kind].append(run(kind))
    summary = summarize(times["shared"], times["own"])
    return {"rounds": rounds, "steps_per_round": steps, "seed": seed, "own_s": times["own"],
            "shared_s": times["shared"], "ratio": summary.as_dict()}


# --- in the parent: the plan, the children, the table ---------------------------------------------------------------

def _env(first_on_path: str) -> dict[str, str]:
    """The children's environment: ``first_on_path`` first on PYTHONPATH (and no other checkout), no NVSCOPE_SHARE."""
    others = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
              if p and os.path.abspath(p) not in (ROOT, first_on_path)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([first_on_path, *others]))
    env.pop("NVSCOPE_SHARE", None)
    return env


def _run(command: list[str], env: dict[str, str], timeout: float, cwd: str | None = None) -> dict[str, Any]:
    """Run ``command`` with a temporary directory of its own (TMPDIR): nothing an earlier process left there (nvFuser's
    kernel database, ``<TMPDIR>/nvfuser_kernel_db``, where ``NVFUSER_ENABLE=kernel_db``) makes its compiles cheaper."""
    temporary = tempfile.mkdtemp(prefix="defaults-shared-")
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=dict(env, TMPDIR=temporary),
                              timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout.decode() if isinstance(expired.stdout, bytes) else expired.stdout or ""
        return {"error": f"timed out after {timeout:.0f} s", "stdout": out, "wall_s": time.perf_counter() - started}
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr,
            "wall_s": time.perf_counter() - started}


def run_rows(args: argparse.Namespace, workloads: list[str], modes: list[str]) -> list[dict[str, Any]]:
    rows = []
    env = _env(ROOT)
    for workload in workloads:
        for mode in modes:
            command = [sys.executable, __file__, "--child", workload, mode, "--out", args.out, "--rounds",
                       str(args.rounds), "--steps", str(args.steps), "--seed", str(args.seed)]
            if args.dry_run:
                print("would run: " + " ".join(command))
                continue
            done = _run(command, env, args.timeout)
            lines = [line for line in done.get("stdout", "").splitlines() if line.startswith("RESULT ")]
            if done.get("rc") or not lines:
                tail = (done.get("stderr") or done.get("stdout") or "").strip().splitlines()[-8:]
                rows.append({"workload": workload, "mode": mode, "error": done.get("error") or "\n".join(tail)})
                print(f"== {workload} {mode}: failed ({done.get('error') or 'exit ' + str(done.get('rc'))})\n"
                      + "\n".join(tail), flush=True)
                continue
            row = json.loads(lines[-1][len("RESULT "):])
            row["process_s"] = done["wall_s"]
            rows.append(row)
            print(f"== {workload} {mode}: {_describe(row)}", flush=True)
            if "shared_after_plain" in row:
                print(f"   then, same process, under nv_options(share=True): {_describe(row['shared_after_plain'])}",
                      flush=True)
    return rows


def _describe(r: dict[str, Any]) -> str:
    ms = r["build_ms_per_fusion"]
    return (f"first step {r['first_step_s']:.1f} s = nvFuser {r['nvfuser_s']:.1f} s ({r['compiled']} definitions "
            f"compiled / {r['fusions']} fusions) + Thunder {r['thunder_s']:.1f} s; building+looking up definitions "
            f"{'-' if ms is None else f'{ms:.1f}'} ms/fusion" + (
                f"; nvscope: {r['nvscope_registered']} registered, {r['nvscope_adopted']} adopted, "
                f"{r['nvscope_compiling_s']:.1f} s in {r['nvscope_compiling_n']} new partitions' first runs"
                if "nvscope_registered" in r else ""))


def _equal_files(out: str, workload: str) -> bool | None:
    import torch

    paths = [os.path.join(out, f"{workload}-{name}.pt") for name in ("shared-first", "plain-own")]
    if not all(os.path.exists(p) for p in paths):
        return None
    a, b = (torch.load(p) for p in paths)
    return not _differences((a["loss"], a["grads"]), (b["loss"], b["grads"]))


def summarize_rows(rows: list[dict[str, Any]], out: str | None) -> tuple[list[str], dict[str, Any]]:
    """The table the issue asks for, from the rows (of one run or of several: --summarize)."""
    good = [r for r in rows if "error" not in r]
    lines = ["workload        mode    first s  nvFuser s  Thunder s  compiled/fusions  build ms/fusion"]
    for r in good:
        ms = r["build_ms_per_fusion"]
        lines.append(f"{r['workload']:<15} {r['mode']:<7} {r['first_step_s']:>7.1f}  {r['nvfuser_s']:>9.1f}  "
                     f"{r['thunder_s']:>9.1f}  {r['compiled']:>7}/{r['fusions']:<8}  "
                     f"{'-' if ms is None else f'{ms:.1f}':>15}")
    summary: dict[str, Any] = {}
    for workload in dict.fromkeys(r["workload"] for r in good):
        by = {r["mode"]: r for r in good if r["workload"] == workload}
        entry: dict[str, Any] = {}
        if {"plain", "shared"} <= by.keys():
            plain, shared = by["plain"], by["shared"]
            entry.update(nvfuser_ratio=shared["nvfuser_s"] / plain["nvfuser_s"],
                         first_step_ratio=shared["first_step_s"] / plain["first_step_s"],
                         thunder_ratio=shared["thunder_s"] / plain["thunder_s"])
            lines.append(f"  {workload}: nvFuser s shared/plain {entry['nvfuser_ratio']:.3f} (target <= 0.2 at "
                         f"8 x 256); whole first step {entry['first_step_ratio']:.3f}; Thunder s "
                         f"{entry['thunder_ratio']:.3f}")
        for mode, r in by.items():
            ms = r["build_ms_per_fusion"]
            if ms is not None:
                entry[f"build_under_target_{mode}"] = ms < BUILD_TARGET_MS
        if "plain" in by:
            plain = by["plain"]
            entry.update(own_repeats=plain["own_repeats"], shared_equals_own=plain["shared_equals_own"])
            judged = "judged" if plain["own_repeats"] else "not judged: Thunder's own warm steps do not repeat"
            lines.append(f"  {workload}: shared steps bit-equal to Thunder's own warm step: "
                         f"{plain['shared_equals_own']} ({judged})")
            if out is not None:
                entry["fresh_shared_first_equals_own"] = _equal_files(out, workload)
                lines.append(f"  {workload}: fresh-process shared first step bit-equal to Thunder's own warm step: "
                             f"{entry['fresh_shared_first_equals_own']}")
            warm = plain.get("warm")
            if warm:
                ratio = warm["ratio"]
                entry["warm_ratio"] = ratio
                lines.append(f"  {workload}: warm step shared/own {ratio['median']:.4f} [{ratio['low']:.4f}, "
                             f"{ratio['high']:.4f}] over {ratio['rounds']} rounds: {ratio['verdict']} (target: "
                             "the interval contains 1.0 or is below it)")
        summary[workload] = entry
    llamas = [(_shape(r["workload"]), r) for r in good if r["workload"].startswith("llama2-")]
    for width in dict.fromkeys(shape[2] for shape, _ in llamas):
        deep = {shape[1]: r for shape, r in llamas if shape[2] == width and r["mode"] == "shared"}
        if len(deep) < 2:
            continue
        low, high = min(deep), max(deep)
        ratio = deep[high]["nvfuser_s"] / deep[low]["nvfuser_s"]
        summary[f"llama2_x{width}_shared_nvfuser_{high}_over_{low}_layers"] = ratio
        lines.append(f"  Llama-2 x {width}, shared, nvFuser s {high} / {low} layers: {deep[high]['nvfuser_s']:.1f} / "
                     f"{deep[low]['nvfuser_s']:.1f} s = {ratio:.2f} (target <= 1.5 at 32 / 2)")
    return lines, summary


PROFILE_SCRIPT = """\
import sys
sys.path.insert(0, {gpu!r})
import thunder
from workloads import llama2_loss, llama2_model  # tests/gpu/workloads.py of the checkout that wrote this script

model, tokens, targets = llama2_model({layers}, {dim})
step = llama2_loss(thunder.jit(model), tokens, targets)
"""


def profile_row(args: argparse.Namespace) -> None:
    script = os.path.join(args.out, f"profile_llama2_{args.profile_layers}x{args.dim}.py")
    with open(script, "w", encoding="utf-8") as file:
        file.write(PROFILE_SCRIPT.format(gpu=os.path.join(ROOT, "tests", "gpu"), layers=args.profile_layers,
                                         dim=args.dim))
    sides = [("now", ROOT)] + ([("before", os.path.abspath(args.before_root))] if args.before_root else [])
    sides = [(side, root) for side, root in sides if args.profile_side in ("both", side)]
    runs = []
    cwd = args.out  # not a checkout: `python -m nvscope` must find nvscope through PYTHONPATH alone
    for repeat in range(args.profile_repeats):
        for side, root in sides if repeat % 2 == 0 else sides[::-1]:
            env = _env(root)
            command = [sys.executable, "-m", "nvscope", "profile", "--rounds", str(args.profile_rounds), "--enable",
                       args.profile_enable, "--backward", "--params", "model", "--quiet", "--json",
                       os.path.join(args.out, f"profile-{side}-{repeat}.json"), f"{script}:step"]
            if args.dry_run:
                print(f"would run ({side}: {root} first on PYTHONPATH, in {cwd}): " + " ".join(command))
                continue
            probe = [sys.executable, "-c", "import nvscope; print(nvscope.__file__)"]
            which = _run(probe, env, 60, cwd).get("stdout", "").strip()
            done = _run(command, env, args.timeout, cwd)
            with open(os.path.join(args.out, f"profile-{side}-{repeat}.log"), "w", encoding="utf-8") as file:
                file.write(f"$ {' '.join(command)}\n{done.get('stdout', '')}\n{done.get('stderr', '')}")
            runs.append({"side": side, "root": root, "nvscope": which, "repeat": repeat, "wall_s": done["wall_s"],
                         "rc": done.get("rc"), "error": done.get("error")})
            print(f"== profile {side} ({which}): {done['wall_s']:.1f} s, "
                  f"{done.get('error') or 'exit ' + str(done.get('rc'))}", flush=True)
    if args.dry_run:
        return
    document = {"commit": _commit(), "layers": args.profile_layers, "dim": args.dim, "enable": args.profile_enable,
                "rounds": args.profile_rounds, "runs": runs}
    print("\n".join(profile_lines(runs)))
    with open(os.path.join(args.out, f"defaults_shared-profile-{args.profile_side}.json"), "w",
              encoding="utf-8") as file:
        json.dump(document, file, indent=2)
    if any(run["rc"] != 0 for run in runs):
        sys.exit(1)


def profile_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The profile row: each side's wall times (the runs that exited 0) and now / before, fastest of each."""
    wall = {side: [r["wall_s"] for r in runs if r["side"] == side and r["rc"] == 0] for side in ("now", "before")}
    lines = [f"  nvscope profile wall time, {side}: {', '.join(f'{w:.1f}' for w in times)} s"
             for side, times in wall.items() if times]
    if wall["now"] and wall["before"]:
        lines.append(f"  nvscope profile wall time now / before (fastest of each): "
                     f"{min(wall['now']) / min(wall['before']):.3f} (target <= 0.5)")
    return lines


def _csv_ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"a comma-separated list of positive integers, got {text[:40]!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"a comma-separated list of positive integers, got {text[:40]!r}")
    return values


def _modes(text: str) -> list[str]:
    modes = text.split(",")
    if not modes or any(m not in MODES for m in modes):
        raise argparse.ArgumentTypeError(f"comma-separated modes among {', '.join(MODES)}, got {text[:40]!r}")
    return modes


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=".", help="where the JSON, text, tensors and logs go (default .)")
    parser.add_argument("--layers", type=_csv_ints, default=[8], help="Llama-2 depths, comma-separated (default 8)")
    parser.add_argument("--dim", type=int, default=256, help="Llama-2 width (default 256)")
    parser.add_argument("--nanogpt", action="store_true", help="also nanoGPT 4 x 768")
    parser.add_argument("--no-llama", action="store_true", help="no Llama-2 rows (with --nanogpt: nanoGPT alone)")
    parser.add_argument("--modes", type=_modes, default=list(MODES), help="plain,shared (default both)")
    parser.add_argument("--rounds", type=int, default=20,
                        help="paired warm rounds in the plain process, Thunder's own vs shared (0: none; default 20)")
    parser.add_argument("--steps", type=int, default=3, help="steps of each kind per round (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the round order (default 0)")
    parser.add_argument("--timeout", type=float, default=560, help="seconds per fresh process (default 560)")
    parser.add_argument("--dry-run", action="store_true", help="print the processes it would start, start none")
    parser.add_argument("--summarize", nargs="+", metavar="JSON",
                        help="print the table of rows saved by earlier runs (their .json), run nothing")
    parser.add_argument("--profile-row", action="store_true", help="the nvscope profile wall-time row instead")
    parser.add_argument("--profile-layers", type=int, default=8, help="Llama-2 depth of the profiled step (8)")
    parser.add_argument("--profile-enable", default="static_fusion_count",
                        help="the one option profiled (default static_fusion_count: every fusion feels it)")
    parser.add_argument("--profile-rounds", type=int, default=5, help="nvscope profile --rounds (default 5)")
    parser.add_argument("--profile-side", choices=("both", "now", "before"), default="both",
                        help="which side to run (default both; one side per device call where both do not fit)")
    parser.add_argument("--profile-repeats", type=int, default=1,
                        help="runs of each side, alternating which goes first (default 1)")
    parser.add_argument("--before-root", metavar="PATH", help="a checkout of the earlier commit: the profile's "
                        "'before' side runs with it first on PYTHONPATH")
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rounds < 0 or args.steps < 1 or args.profile_repeats < 1:
        parser.error("--rounds must be >= 0, --steps and --profile-repeats >= 1")
    if args.before_root and not os.path.isdir(os.path.join(args.before_root, "nvscope")):
        parser.error(f"--before-root {args.before_root[:80]!r} has no nvscope/ folder: give a checkout's root")
    os.makedirs(args.out, exist_ok=True)
    if args.child:
        workload, mode = args.child
        child(workload, mode, args.out, args.rounds, args.steps, args.seed)
        return
    if args.summarize:
        documents = []
        for path in args.summarize:
            with open(path, encoding="utf-8") as file:
                documents.append(json.load(file))
        rows = [row for document in documents for row in document.get("rows", ())]
        runs = [run for document in documents for run in document.get("runs", ())]
        print("\n".join((summarize_rows(rows, None)[0] if rows else []) + profile_lines(runs)))
        return
    if args.profile_row:
        profile_row(args)
        return
    workloads = ([] if args.no_llama else [f"llama2-{n}x{args.dim}" for n in args.layers]) + (
        ["nanogpt-4x768"] if args.nanogpt else [])
    if not workloads:
        parser.error("nothing to run: --no-llama without --nanogpt")
    rows = run_rows(args, workloads, args.modes)
    if args.dry_run:
        return
    lines, summary = summarize_rows(rows, args.out)
    text = "\n".join(lines)
    print(text)
    name = os.path.join(args.out, "defaults_shared-" + "_".join(workloads) + "-" + "_".join(args.modes))
    with open(name + ".txt", "w", encoding="utf-8") as file:
        file.write(text + "\n")
    with open(name + ".json", "w", encoding="utf-8") as file:
        json.dump({"commit": _commit(), "args": {k: v for k, v in vars(args).items() if k != "child"},
                   "rows": rows, "summary": summary}, file, indent=2)
    if any("error" in row for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
