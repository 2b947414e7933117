"""Eight threads, random scopes, the same jitted functions, forward and backward: zero cross-talk (issue 9.16).

Each thread loops over random choices of {no scope, scope A, scope B, A nested in B, inherit=False inside A} and
calls shared ``thunder.jit`` functions with a backward. Checked two ways, independently:

* per call, with audit records: every fusion the call ran on its own thread (``thunder.jit`` runs backward on the
  calling thread) carries exactly the options the call's scopes promise, forward and backward;
* in aggregate, with kernel names from torch.profiler (not nvscope's bookkeeping): afterwards each variant, run on
  one thread, launches ``nvfuser_<n>`` kernels (A = static_fusion_count) exactly when A is in its options, so no
  partition was compiled with another thread's options.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest

import nvscope
from nvscope import OptionSet, nv_options

torch = pytest.importorskip("torch")
thunder = pytest.importorskip("thunder")

A = nv_options(enable=["static_fusion_count"])  # renames every nvFuser kernel: visible in the profiler
B = nv_options(disable=["parallel_compile"])  # runtime only: same kernels, a separate partition
CUT = nv_options(inherit=False)
VARIANTS: dict[str, tuple[nv_options, ...]] = {
    "none": (),
    "A": (A,),
    "B": (B,),
    "A in B": (B, A),
    "inherit=False in A": (A, CUT),
}
EXPECTED = {
    "none": OptionSet(),
    "A": OptionSet(enable=["static_fusion_count"]),
    "B": OptionSet(disable=["parallel_compile"]),
    "A in B": OptionSet(enable=["static_fusion_count"], disable=["parallel_compile"]),
    "inherit=False in A": OptionSet(),
}
THREADS = 8
CALLS = 24


@contextmanager
def entered(scopes: tuple[nv_options, ...]) -> Iterator[None]:
    with ExitStack() as stack:
        for scope in scopes:
            stack.enter_context(scope)
        yield


def _functions() -> list[Callable[..., Any]]:
    def f0(x: Any, w: Any) -> Any:
        return torch.nn.functional.gelu(x @ w).sum()

    def f1(x: Any, w: Any) -> Any:
        return (torch.tanh(x * 3) + w.sum()).square().mean()

    return [thunder.jit(f0), thunder.jit(f1)]


def _numbered(names: list[str]) -> bool:
    return any(n.split("::")[-1].startswith("nvfuser_") and n.split("_")[-1].isdigit() for n in names)


def _scheduler_named(names: list[str]) -> bool:
    return any("nvfuser_" in n and not n.split("_")[-1].isdigit() for n in names)


def test_eight_threads_random_scopes_no_cross_talk() -> None:
    functions = _functions()
    w = torch.randn(256, 256, device="cuda", requires_grad=True)

    def call(fn: Callable[..., Any]) -> None:
        x = torch.randn(128, 256, device="cuda", requires_grad=True)
        fn(x, w).backward()

    with nvscope.dev_mode(True):
        for fn in functions:  # trace and compile the default once; partitions are compiled by the threads
            call(fn)
        torch.cuda.synchronize()
        problems: list[str] = []
        errors: list[BaseException] = []
        barrier = threading.Barrier(THREADS)
        counts: dict[str, int] = {}
        lock = threading.Lock()

        def worker(seed: int) -> None:
            rng = random.Random(seed)
            me = threading.current_thread().name
            try:
                barrier.wait()
                for i in range(CALLS):
                    name = rng.choice(list(VARIANTS))
                    fn = rng.choice(functions)
                    with nvscope.audit() as log:
                        with entered(VARIANTS[name]):
                            call(fn)
                    mine = [r for r in log.records if r.thread == me]
                    phases = {r.phase for r in mine}
                    if phases != {"forward", "backward"}:
                        problems.append(f"{me} call {i} ({name}): phases {sorted(phases)}")
                    wrong = [r for r in mine if r.options != EXPECTED[name]]
                    if wrong:
                        problems.append(f"{me} call {i} ({name}): expected {EXPECTED[name]}, got "
                                        f"{sorted({str(r.options) for r in wrong})}")
                    with lock:
                        counts[name] = counts.get(name, 0) + 1
                torch.cuda.synchronize()
            except BaseException as error:  # reported below
                errors.append(error)

        threads = [threading.Thread(target=worker, args=(seed,), name=f"worker-{seed}") for seed in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        assert not any(t.is_alive() for t in threads), "a worker thread hung"
        assert not errors, errors
        assert not problems, problems[:10]
        assert nvscope.current_options() == OptionSet()
        print(f"calls per variant: {counts}")

        # Aggregate oracle: the partitions compiled concurrently, now run on one thread, show their options.
        for name, scopes in VARIANTS.items():
            for index, fn in enumerate(functions):
                with entered(scopes):
                    names, _ = nvscope.kernel_names(lambda fn=fn: call(fn))
                numbered = _numbered(names)
                assert numbered == ("static_fusion_count" in EXPECTED[name].enable), (name, index, names)
                assert _scheduler_named(names) == (not numbered), (name, index, names)
        names, _ = nvscope.kernel_names(lambda: call(functions[0]))  # and unscoped again: the default kernels
        assert _scheduler_named(names) and not _numbered(names), names
