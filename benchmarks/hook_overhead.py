"""CPU microbenchmark: what nvscope's Thunder hook adds to each fusion call, with a no-op executor double.

    python benchmarks/hook_overhead.py [--rounds 200] [--calls 20000] [--seed 0] [--import-only]

Thunder's FusionDefinitionWrapper.__call__ is reproduced (same shape: lru_cache'd get_fd on the input descriptors,
then fd.execute(...)) over an FD whose execute does nothing, so the differences are the hook's own cost. Three copies
of the wrapper class exist: nvscope patches one (registered as Thunder's), one is left alone and one is wrapped by a
bare pass-through, so the unpatched, the least a wrapping patch costs and the patched call are measured in the same
run, side by side.

Method, paired and interleaved (as `nvscope.search` and benchmarks/thunder_steps.py do, with nvscope._measure._stats):
in each
round every variant runs one block of ``--calls`` calls, in an order shuffled per round, with the garbage collector
off; a round's variants share whatever the machine did during it, so per-round differences (ns added per call) and
ratios to the unpatched wrapper cancel it. Printed: their medians over the rounds with 95% sign-test intervals. The
variants: a bare function call (the loop's floor), the unpatched wrapper, a third copy patched with a bare
pass-through (``def __call__(fusion, *args): return original(fusion, *args)``: the least a patch that wraps
Thunder's ``__call__`` adds), and the patched wrapper's class called with
(a) no scope anywhere (the hook is not in place then: nvscope._core._patches.demand), (a2) no scope in the caller's
context while one exists elsewhere (a context copied inside a scope, as an asyncio task's), (b) one scope, (c) five
nested scopes, (d) a ``share=True`` scope that adds no option (the defaults run shared; skipped by code older than
``share=``); (c) - (b) and (d) - (b) are paired too. Then, paired the same way: the per-call cost against
the number of option sets used round-robin on one fusion; net allocations on the cache-hit path; and
`import nvscope` time against bare Python in fresh interpreters (``--import-only``: that alone), with nvscope's
bytecode compiled first (``compileall``, as an installed copy has it; ``PYTHONDONTWRITEBYTECODE`` would otherwise
make each interpreter compile the sources), and the first scope's entry and exit after it, which loads what the import
leaves out. No numbers are hard-coded.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import functools
import gc
import itertools
import math
import os
import random
import subprocess
import sys
import time
import tracemalloc
import types
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nvscope._measure._stats import median, median_interval, summarize

WARMUP_ROUNDS = 5


class NoOpFD:
    """The nvFuser boundary: execute does nothing."""

    __module__ = "nvfuser_direct"
    _selected_device = None

    def execute(self, args: Any, **kwargs: Any) -> Any:
        return None

    def __repr__(self) -> str:
        # What nvFuser prints for a definition: ops that no catalog gate excludes, so every option set gets a
        # partition of its own (the path this benchmark measures).
        return ("def nvfuser_fusion(fd : FusionDefinition) -> None :\n"
                "    T1 = fd.ops.linear(T0, T0)\n    T2 = fd.ops.slice(T1)\n    T3 = fd.ops.sum(T2)\n")


def wrapper_class() -> type:
    """A fresh copy of Thunder's wrapper, reduced to what its __call__ does on the no-DTensor path."""

    @dataclass(slots=True)
    class FusionDefinitionWrapper:
        get_fd: Any
        to_descriptors: Any
        name: str
        use_cache: bool = True
        store_inputs: bool = False
        save_fake_inputs: bool = False
        enable_options: Any = None
        disable_options: Any = None
        last_used: Any = None
        last_inputs: Any = None

        def __call__(self, *args: Any) -> Any:
            if self.use_cache or self.last_used is None:
                self.last_used = self.get_fd(self.to_descriptors(args))
            fd = self.last_used
            return fd.execute(args, device=fd._selected_device, save_repro_inputs=self.save_fake_inputs,
                              _enable_options=self.enable_options, _disable_options=self.disable_options)

    return FusionDefinitionWrapper


PATCHED = wrapper_class()  # registered as Thunder's: nvscope.thunder.install() patches it
UNPATCHED = wrapper_class()  # the same code, never patched
PASS_THROUGH = wrapper_class()  # patched below with the least any Python-level patch does: call the original


def _pass_through(original: Callable[..., Any]) -> Callable[..., Any]:
    def __call__(fusion: Any, *args: Any) -> Any:
        return original(fusion, *args)
    return __call__


PASS_THROUGH.__call__ = _pass_through(PASS_THROUGH.__call__)  # type: ignore[method-assign]


class ThunderFunction:
    @staticmethod
    def forward(ctx: Any, *args: Any) -> Any:
        return None

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        return None


def install_fake_thunder() -> None:
    impl = types.ModuleType("thunder.executors.nvfuserex_impl")
    impl.FusionDefinitionWrapper = PATCHED  # type: ignore[attr-defined]
    impl.FusionDefinition = NoOpFD  # type: ignore[attr-defined]
    autograd = types.ModuleType("thunder.executors.torch_autograd")
    autograd.ThunderFunction = ThunderFunction  # type: ignore[attr-defined]
    version = types.ModuleType("thunder.executors.nvfuserex")
    version.nvfuser_version = lambda: "0.2.35"  # type: ignore[attr-defined]
    for name, module in {"thunder": types.ModuleType("thunder"), "thunder.executors": types.ModuleType("x"),
                         impl.__name__: impl, autograd.__name__: autograd, version.__name__: version}.items():
        sys.modules[name] = module


def bare_call() -> None:
    return None


def make_fusion(cls: type = PATCHED) -> Any:
    @functools.lru_cache(maxsize=2048)
    def get_fd(descriptors: Any) -> NoOpFD:
        return NoOpFD()

    return cls(get_fd, lambda args: (len(args),), "nvFusion0", enable_options=[], disable_options=[])


def block(call: Callable[[], Any], calls: int, scopes: Sequence[Any] = ()) -> Callable[[], None]:
    """``calls`` calls of ``call`` inside ``scopes`` (entered once per block: a few us over thousands of calls)."""

    def run() -> None:
        with contextlib.ExitStack() as stack:
            for scope in scopes:
                stack.enter_context(scope)
            for _ in itertools.repeat(None, calls):
                call()

    return run


def paired_rounds(variants: dict[str, Callable[[], Any]], rounds: int, rng: random.Random,
                  warmup: int = WARMUP_ROUNDS) -> dict[str, list[float]]:
    """Seconds per run of each variant, one run of each per round, in an order shuffled per round, GC off."""
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(warmup + rounds):
        rng.shuffle(names)
        gc.collect()
        gc.disable()
        try:
            for name in names:
                start = time.perf_counter()
                variants[name]()
                elapsed = time.perf_counter() - start
                if r >= warmup:
                    times[name].append(elapsed)
        finally:
            gc.enable()
    return times


def added_ns(times: Sequence[float], base: Sequence[float], per: int, seed: int) -> tuple[float, float, float]:
    """Median over the rounds of (times - base) / per, in ns, with its 95% interval."""
    differences = [(t - b) / per * 1e9 for t, b in zip(times, base, strict=True)]
    return median(differences), *_interval(differences)


def _interval(values: Sequence[float]) -> tuple[float, float]:
    """The sign test's 95% interval of the median (the one the tools' verdicts use); NaN when too few values."""
    found = median_interval(values)
    return found if found is not None else (math.nan, math.nan)


def interval(mid: float, low: float, high: float, digits: int = 1) -> str:
    return f"{mid:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def net_blocks(call: Any, n: int = 100_000) -> tuple[int, int]:
    """Net allocated blocks after n more calls (a leak shows as growth) and tracemalloc's peak over them."""
    for _ in range(1000):
        call()
    gc.collect()
    before = sys.getallocatedblocks()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    for _ in range(n):
        call()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    gc.collect()
    return sys.getallocatedblocks() - before, peak - base


def import_ms(rounds: int, rng: random.Random, seed: int) -> tuple[tuple[float, float, float], ...]:
    """Fresh interpreters, run to completion in a random order per round: ``import nvscope`` minus ``pass``, and
    ``import nvscope`` then a first scope (development mode; `warnings`, which the scope loads, filtered) minus
    ``import nvscope`` alone: the medians of the per-round differences with their intervals, in ms."""
    import compileall

    import nvscope

    compileall.compile_dir(os.path.dirname(nvscope.__file__), quiet=1)
    env = {name: value for name, value in os.environ.items() if not name.startswith("NVSCOPE_")}
    env["NVSCOPE_DEV"] = "1"

    def run(code: str) -> None:
        subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, env=env)

    heavy = subprocess.run([sys.executable, "-c", "import nvscope, sys; print(sorted(m for m in sys.modules if "
                            "m.split('.')[0] in ('torch', 'thunder', 'nvfuser', 'nvfuser_direct')))"],
                           capture_output=True, text=True, check=True, env=env).stdout.strip()
    assert heavy == "[]", heavy
    scope = ("import nvscope, warnings\nwarnings.simplefilter('ignore')\n"
             "with nvscope.nv_options(enable=['static_fusion_count']):\n    pass")
    times = paired_rounds({"bare": lambda: run("pass"), "import": lambda: run("import nvscope"),
                           "scope": lambda: run(scope)}, rounds, rng, warmup=1)
    found = []
    for name, base in (("import", "bare"), ("scope", "import")):
        differences = [(a - b) * 1e3 for a, b in zip(times[name], times[base], strict=True)]
        found.append((median(differences), *_interval(differences)))
    return tuple(found)


def print_import_ms(rng: random.Random, seed: int, rounds: int) -> None:
    imported, first = import_ms(rounds, rng, seed)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nimport nvscope: {interval(*imported, digits=2)} ms over bare python (target <= 5); first scope after it: "
          f"{interval(*first, digits=2)} ms; {rounds} paired rounds of fresh interpreters, bytecode compiled; load "
          f"average {load}; no torch/thunder/nvfuser imported")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=200, help="paired rounds of the per-call cases (default 200)")
    parser.add_argument("--calls", type=int, default=20_000, help="calls per variant per round (default 20000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the round order")
    parser.add_argument("--import-only", action="store_true", help="measure `import nvscope` and the first scope only")
    parser.add_argument("--import-rounds", type=int, default=21, help="paired rounds of fresh interpreters")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    if args.import_only:
        print_import_ms(rng, args.seed, args.import_rounds)
        return
    install_fake_thunder()
    import nvscope
    import nvscope.thunder
    from nvscope import nv_options

    nvscope.set_development_mode(True)
    # Scopes entered below only to bind callables run no fusion: that is expected here, not a finding.
    warnings.simplefilter("ignore", nvscope.NoFusionWarning)
    assert nvscope.thunder.install()
    patched, unpatched = make_fusion(PATCHED), make_fusion(UNPATCHED)
    # The hook is in place only while a scope exists somewhere (nvscope._core._patches.demand).
    assert not hasattr(PATCHED.__call__, "__wrapped__")
    with nv_options(enable=["static_fusion_count"]):
        assert hasattr(PATCHED.__call__, "__wrapped__") and not hasattr(UNPATCHED.__call__, "__wrapped__")

    def elsewhere(run: Callable[[], None]) -> Callable[[], None]:
        """``run`` while a scope exists elsewhere: a context copied inside one (as an asyncio task's is) keeps its
        frame after this thread left the scope, so the hook is in place for every caller, scoped or not."""
        def with_scope_elsewhere() -> None:
            with nv_options(enable=["static_fusion_count"]):
                other = contextvars.copy_context()
            run()
            del other
        return with_scope_elsewhere

    one = [nv_options(enable=["static_fusion_count"])]
    five = [nv_options(enable=[name]) for name in
            ("static_fusion_count", "kernel_profile", "kernel_lineinfo", "fuse_matmul", "memory_promotion")]
    try:
        shared = [nv_options(share=True)]  # type: ignore[call-arg]
    except TypeError:  # the code before default sharing (an A/B run against an older checkout)
        shared = []
    n = args.calls
    variants = {
        "bare function call (floor)": block(bare_call, n),
        "Thunder wrapper, unpatched": block(unpatched, n),
        "pass-through (wrapping floor)": block(make_fusion(PASS_THROUGH), n),
        "(a) no scope anywhere": block(patched, n),
        "(a2) no scope here, one elsewhere": elsewhere(block(patched, n)),
        "(b) patched, one scope": block(patched, n, one),
        "(c) patched, 5 nested scopes": block(patched, n, five),
    }
    if shared:
        variants["(d) patched, share=True, no option"] = block(patched, n, shared)
    times = paired_rounds(variants, args.rounds, rng)
    base = times["Thunder wrapper, unpatched"]
    with contextlib.ExitStack() as stack:
        blocks = {"(a) no scope anywhere": net_blocks(patched),
                  "pass-through (wrapping floor)": net_blocks(make_fusion(PASS_THROUGH))}

        def measure_elsewhere() -> None:
            blocks["(a2) no scope here, one elsewhere"] = net_blocks(patched)

        elsewhere(measure_elsewhere)()
        for scope in one:
            stack.enter_context(scope)
        blocks["(b) patched, one scope"] = net_blocks(patched)
        for scope in five[1:]:
            stack.enter_context(scope)
        blocks["(c) patched, 5 nested scopes"] = net_blocks(patched)
    if shared:
        with shared[0]:
            blocks["(d) patched, share=True, no option"] = net_blocks(patched)

    print(f"python {sys.version.split()[0]}; {args.rounds} paired rounds (+{WARMUP_ROUNDS} warm-up) x {n:,} calls "
          f"per variant, variants in a random order per round (seed {args.seed}); medians over the rounds, "
          "[95% sign-test interval]")
    print(f"\n{'case':<38}{'ns/call':>9}  {'added ns/call vs unpatched':<28}{'ratio to unpatched':<26}"
          f"{'net blocks':>10}{'peak B':>8}")
    for name, run_times in times.items():
        per_call = median(run_times) / n * 1e9
        if name in blocks:
            ratio = summarize(run_times, base)
            added = interval(*added_ns(run_times, base, n, args.seed))
            shown = f"{interval(ratio.median, ratio.low, ratio.high, 3)} {ratio.verdict}"
            net, peak = blocks[name]
            print(f"{name:<38}{per_call:9.1f}  {added:<28}{shown:<26}{net:10d}{peak:8d}")
        else:
            print(f"{name:<38}{per_call:9.1f}")
    nested = added_ns(times["(c) patched, 5 nested scopes"], times["(b) patched, one scope"], n, args.seed)
    print(f"(c) - (b), 5 nested scopes against one: {interval(*nested)} ns/call")
    if shared:
        extra = added_ns(times["(d) patched, share=True, no option"], times["(b) patched, one scope"], n, args.seed)
        print(f"(d) - (b), a shared default call against a scoped one: {interval(*extra)} ns/call")
    over = added_ns(times["(a2) no scope here, one elsewhere"], times["pass-through (wrapping floor)"], n,
                    args.seed)
    print(f"(a2) - pass-through, what the unscoped path adds over a bare wrapping patch: {interval(*over)} ns/call")

    print("\nscaling: added ns per call with N option sets used round-robin on one fusion (LRU maxsize 64); each "
          "call switches option set; paired against the unpatched wrapper called the same way, 60 rounds")
    nvscope.thunder.uninstall()
    os.environ["NVSCOPE_MAX_PARTITIONS"] = str(64)
    nvscope.thunder.install()
    # Options that take no arguments and that no catalog gate keeps from a fusion: each set is a partition of its own.
    pool = [n for n in sorted(nvscope.catalog().names("enable"))
            if not (info := nvscope.catalog().get("enable", n)).requires_args and not info.ops]
    for count in (1, 4, 16, 64):
        sets = [nv_options(enable=[pool[j] for j in range(len(pool)) if (i + 1) >> j & 1]) for i in range(count)]
        fusion, plain = make_fusion(), make_fusion(UNPATCHED)
        # One callable per option set, bound to its scope (nvscope.bind), called round-robin: every call switches
        # option set, the worst case for the hook (no one-entry memo hit: a merge lookup and an LRU update each).
        # The unpatched wrapper, bound and called the same way, is the pair: bind's own cost cancels.
        calls, floors = [], []
        for scope in sets:
            with scope:
                calls.append(nvscope.bind(fusion))
                floors.append(nvscope.bind(plain))
        loops = max(1, n // count)

        def round_robin(fns: list[Any] = calls, loops: int = loops) -> None:
            for _ in itertools.repeat(None, loops):
                for fn in fns:
                    fn()

        def round_robin_floor(fns: list[Any] = floors, loops: int = loops) -> None:
            for _ in itertools.repeat(None, loops):
                for fn in fns:
                    fn()

        round_robin()  # build every partition once
        scaled = paired_rounds({"hook": round_robin, "floor": round_robin_floor}, 60, rng)
        mid, low, high = added_ns(scaled["hook"], scaled["floor"], loops * count, args.seed)
        table = nvscope.thunder.partitions(fusion)
        assert table is not None
        print(f"  N={count:<3} {interval(mid, low, high):>24} ns added per call, partitions {len(table)}")

    print("\nmemory: partitions kept per fusion, 128 option sets used, by LRU bound")
    for bound in (8, 64):
        os.environ["NVSCOPE_MAX_PARTITIONS"] = str(bound)
        fusion = make_fusion()
        sets = [nv_options(enable=[pool[j] for j in range(len(pool)) if (i + 1) >> j & 1]) for i in range(128)]
        tracemalloc.start()
        for scope in sets:
            with scope:
                fusion()
        current, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        table = nvscope.thunder.partitions(fusion)
        assert table is not None
        print(f"  maxsize {bound:<3} partitions kept {len(table):3d}, evicted {table.evictions:3d}, "
              f"traced {current / 1024:7.1f} KiB")

    print_import_ms(rng, args.seed, args.import_rounds)


if __name__ == "__main__":
    main()
