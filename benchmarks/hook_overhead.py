"""CPU microbenchmark: what nvscope's Thunder hook adds to each fusion call, with a no-op executor double.

    python benchmarks/hook_overhead.py

Thunder's FusionDefinitionWrapper.__call__ is reproduced (same shape: lru_cache'd get_fd on the input descriptors,
then fd.execute(...)) over an FD whose execute does nothing, so the numbers are the hook's own cost. Measures, in one
run, per call: a bare function call and a bare ContextVar.get() (the floor), the unpatched wrapper, and the patched
wrapper with (a) no scope, (b) one scope, (c) five nested scopes; then the per-call cost against the number of
option sets used round-robin on one fusion; net allocations on the steady-state path; and `import nvscope` time.
Prints ratios and differences measured here; no numbers are hard-coded.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import statistics
import subprocess
import sys
import timeit
import tracemalloc
import types
import warnings
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

REPEAT = 7
NUMBER = 200_000


class NoOpFD:
    """The nvFuser boundary: execute does nothing."""

    __module__ = "nvfuser_direct"
    _selected_device = None

    def execute(self, args: Any, **kwargs: Any) -> Any:
        return None


@dataclass(slots=True)
class FusionDefinitionWrapper:
    """Thunder's wrapper, reduced to what its __call__ does on the no-DTensor path."""

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


class ThunderFunction:
    @staticmethod
    def forward(ctx: Any, *args: Any) -> Any:
        return None

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        return None


def install_fake_thunder() -> None:
    impl = types.ModuleType("thunder.executors.nvfuserex_impl")
    impl.FusionDefinitionWrapper = FusionDefinitionWrapper  # type: ignore[attr-defined]
    impl.FusionDefinition = NoOpFD  # type: ignore[attr-defined]
    autograd = types.ModuleType("thunder.executors.torch_autograd")
    autograd.ThunderFunction = ThunderFunction  # type: ignore[attr-defined]
    version = types.ModuleType("thunder.executors.nvfuserex")
    version.nvfuser_version = lambda: "0.2.35"  # type: ignore[attr-defined]
    for name, module in {"thunder": types.ModuleType("thunder"), "thunder.executors": types.ModuleType("x"),
                         impl.__name__: impl, autograd.__name__: autograd, version.__name__: version}.items():
        sys.modules[name] = module


def make_fusion() -> FusionDefinitionWrapper:
    @functools.lru_cache(maxsize=2048)
    def get_fd(descriptors: Any) -> NoOpFD:
        return NoOpFD()

    return FusionDefinitionWrapper(get_fd, lambda args: (len(args),), "nvFusion0", enable_options=[],
                                   disable_options=[])


def per_call_ns(stmt: Any, number: int = NUMBER) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=REPEAT)) / number * 1e9


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


def import_ms() -> tuple[float, float]:
    def run(code: str) -> float:
        times = []
        for _ in range(15):
            out = subprocess.run([sys.executable, "-c", f"import time; t=time.perf_counter(); {code}; "
                                  "print(time.perf_counter()-t)"], capture_output=True, text=True, check=True)
            times.append(float(out.stdout) * 1e3)
        return statistics.median(times)

    heavy = subprocess.run([sys.executable, "-c", "import nvscope, sys; print(sorted(m for m in sys.modules if "
                            "m.split('.')[0] in ('torch', 'thunder', 'nvfuser', 'nvfuser_direct')))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert heavy == "[]", heavy
    return run("import nvscope"), run("pass")


def main() -> None:
    install_fake_thunder()
    import nvscope
    import nvscope.thunder
    from nvscope import nv_options

    nvscope.set_development_mode(True)
    # Scopes entered below only to bind callables run no fusion: that is expected here, not a finding.
    warnings.simplefilter("ignore", nvscope.NoFusionWarning)
    fusion = make_fusion()
    var: ContextVar[int | None] = ContextVar("floor", default=None)

    def bare() -> None:
        return None

    floor_call = per_call_ns(bare)
    floor_var = per_call_ns(var.get)
    unpatched = per_call_ns(fusion)
    assert nvscope.thunder.install()
    patched_none = per_call_ns(fusion)
    blocks_none = net_blocks(fusion)
    with nv_options(enable=["static_fusion_count"]):
        patched_one = per_call_ns(fusion)
        blocks_one = net_blocks(fusion)
    names = ["static_fusion_count", "kernel_profile", "kernel_lineinfo", "fuse_matmul", "memory_promotion"]
    with contextlib.ExitStack() as stack:
        for name in names:
            stack.enter_context(nv_options(enable=[name]))
        patched_five = per_call_ns(fusion)
        blocks_five = net_blocks(fusion)

    print(f"python {sys.version.split()[0]}, best of {REPEAT} x {NUMBER:,} calls, ns per call")
    print(f"{'bare function call':<42}{floor_call:8.1f}")
    print(f"{'bare ContextVar.get()':<42}{floor_var:8.1f}")
    print(f"{'Thunder wrapper, unpatched':<42}{unpatched:8.1f}")
    rows = [("(a) patched, no scope", patched_none, 150, blocks_none),
            ("(b) patched, one scope", patched_one, 500, blocks_one),
            ("(c) patched, 5 nested scopes", patched_five, 500, blocks_five)]
    print(f"\n{'case':<32}{'ns/call':>9}{'added ns':>10}{'target':>8}{'ratio':>8}{'net blocks':>12}{'peak B':>8}")
    for label, ns, target, (blocks, peak) in rows:
        added = ns - unpatched
        print(f"{label:<32}{ns:9.1f}{added:10.1f}{'<=' + str(target):>8}{ns / unpatched:8.3f}{blocks:12d}{peak:8d}")

    print("\nscaling: per-call cost with N option sets used round-robin on one fusion (LRU maxsize 64)")
    nvscope.thunder.uninstall()
    os.environ["NVSCOPE_MAX_PARTITIONS"] = str(64)
    nvscope.thunder.install()
    pool = [n for n in nvscope.catalog().names("enable") if not nvscope.catalog().get("enable", n).requires_args]
    scopes_by_n = {}
    for n in (1, 4, 16, 64):
        sets = []
        for i in range(n):  # distinct non-empty subsets of the pool
            chosen = [pool[j] for j in range(len(pool)) if (i + 1) >> j & 1]
            sets.append(nv_options(enable=chosen))
        scopes_by_n[n] = sets
    for n, sets in scopes_by_n.items():
        fusion = make_fusion()
        os.environ["NVSCOPE_MAX_PARTITIONS"] = str(64)
        # One callable per option set, bound to its scope (nvscope.bind), called round-robin: every call switches
        # option set, the worst case for the hook (no one-entry memo hit: a merge lookup and an LRU update each).
        calls, floors = [], []
        for scope in sets:
            with scope:
                calls.append(nvscope.bind(fusion))
                floors.append(nvscope.bind(bare))

        def round_robin(calls: list[Any] = calls) -> None:
            for call in calls:
                call()

        def round_robin_floor(floors: list[Any] = floors) -> None:
            for call in floors:
                call()

        round_robin()  # build every partition once
        number = max(1, 40_000 // n)
        hook = (per_call_ns(round_robin, number) - per_call_ns(round_robin_floor, number)) / n
        table = nvscope.thunder.partitions(fusion)
        assert table is not None
        print(f"  N={n:<3} {hook:7.1f} ns per call (fusion call in a switching scope, bind overhead subtracted; "
              f"unpatched {unpatched:.0f}), partitions {len(table)}")

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

    with_nvscope, bare_python = import_ms()
    print(f"\nimport nvscope: {with_nvscope - bare_python:.1f} ms over bare python (target <= 10), median of 15 "
          "fresh interpreters; no torch/thunder/nvfuser imported")


if __name__ == "__main__":
    main()
