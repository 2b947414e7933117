"""Model-based test of the shared compiled definitions (nvscope._exec._shared) against a tiny reference model.

Random programs over six fusions of the Thunder double, each printing one of three definitions (drawn), one of which
fails in nvFuser under ``fuse_matmul``: run a fusion inside a scope (an option set drawn from four; scopes that
enable ``fuse_matmul`` fall back on error), run one unscoped, change inputs, uninstall and reinstall nvscope. Each
fusion keeps at most two partitions (``NVSCOPE_MAX_PARTITIONS=2``), so partitions are evicted and rebuilt all the
time; the shared cache's bound is not reached. The model, written from the documented rules only:

* a (definition, inputs, options) key compiles once, the first time any fusion reaches it (after an uninstall,
  again); a failing key is one compile attempt and one `FallbackWarning`, whichever fusions reach it and however
  often their partitions are rebuilt; a fusion that failed under options uses its defaults under them for any inputs
  (one attempt and one warning per fusion and options, as docs/failures.md says);
* a failure injected into an execution (out of memory, say) is the key's when it hits the key's first execution (its
  compile), and only that fusion's once the key has run: other fusions go on running the compiled definition;
* each execution ran the fusion's own definition with its scope's options, or (a failed key) its defaults;
* unscoped executions run Thunder's own definitions, never a scope's.

`DefaultSharingMachine` covers default sharing (``nv_options(share=True)``, issue 38): fusions with and without a
compile-time option, calls unscoped, in a scope with options (selecting the fusion or another one), in a sharing scope
with or without options, and in a sharing scope that a ``share=False`` scope ends; on the main thread or a new one;
with ``NVSCOPE_MAX_SHARED=3``, so shared definitions are evicted all the time. Its model:

* a call runs in a partition of its effective options (its own, overridden by the scope's where the scope reaches it)
  when the scope changes them or shares; else Thunder's own path, which compiles once per (fusion, inputs);
* a partition meets each inputs once (its definition cache): then the (definition, inputs, options) key is looked up
  in an LRU of ``NVSCOPE_MAX_SHARED`` keys: found, it runs that definition (nothing compiled); not found, it compiles
  and registers the key, evicting the least recently looked-up one beyond the bound;
* each execution runs its own definition's text with its effective options, on the thread that called it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections import Counter, OrderedDict
from typing import Any

import pytest
from fake_nvfuser_frontend import Tensor
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from thunder_double import ThunderDouble, reset_nvscope

import nvscope
import nvscope.thunder
from nvscope import FallbackWarning, nv_options

pytestmark = pytest.mark.filterwarnings("ignore::nvscope.NoEffectWarning", "ignore::nvscope.NoFusionWarning")

DEFINITIONS = (  # (ops, breaks_with): every one holds a linear, so the catalog's gates drop no option
    (("linear",), None),
    (("linear", "add"), None),
    (("linear",), "fuse_matmul"),
)
OPTION_SETS = (("fuse_matmul",), ("static_fusion_count",), ("kernel_profile",), ("fuse_matmul", "kernel_profile"))
FUSIONS = 6


class SharedCacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.monkeypatch = pytest.MonkeyPatch()
        reset_nvscope()
        self.monkeypatch.setenv("NVSCOPE_MAX_PARTITIONS", "2")
        self.monkeypatch.setenv("NVSCOPE_MAX_SHARED", "64")
        self.monkeypatch.delenv("NVSCOPE_SHARE", raising=False)
        self.double = ThunderDouble(self.monkeypatch)
        assert nvscope.thunder.install()
        self.fusions: list[Any] = []
        self.definition_of: list[int] = []
        self.compiled: set[tuple[int, int, frozenset[str]]] = set()  # (definition, input size, options)
        self.failed: set[tuple[int, int, frozenset[str]]] = set()
        self.fusion_failed: set[tuple[int, frozenset[str]]] = set()  # (fusion, options)
        self.attempts = 0  # compile attempts the model expects under options
        self.warned = 0
        self.warnings = 0

    @initialize(definitions=st.lists(st.integers(0, len(DEFINITIONS) - 1), min_size=FUSIONS, max_size=FUSIONS))
    def make_fusions(self, definitions: list[int]) -> None:
        self.definition_of = definitions
        for i, d in enumerate(definitions):
            ops, breaks = DEFINITIONS[d]
            self.fusions.append(self.double.make_wrapper(f"nvFusion{i}", ops=ops, breaks_with=breaks))

    def _body(self, fusion: int, size: int) -> str:
        fd: Any = self.fusions[fusion].get_fd.__wrapped__((((size,), "float32"),))  # the definition, built not run
        return str(fd.body())

    @rule(fusion=st.integers(0, FUSIONS - 1), options=st.integers(0, len(OPTION_SETS) - 1),
          size=st.sampled_from([2, 3]))
    def run_scoped(self, fusion: int, options: int, size: int, inject: bool = False) -> None:
        enable = OPTION_SETS[options]
        definition = self.definition_of[fusion]
        breaks = DEFINITIONS[definition][1] in enable
        key = (definition, size, frozenset(enable))
        known = key in self.failed or (fusion, frozenset(enable)) in self.fusion_failed  # its defaults, directly
        # A failure injected into the execution under the options (only where it runs them, under fallback).
        inject = inject and not known and not breaks and "fuse_matmul" in enable
        if inject:
            self.double.fe.FAIL_NEXT.append(RuntimeError("CUDA out of memory"))
        before = len(self.double.executions)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with nv_options(enable=list(enable), on_error="fallback" if "fuse_matmul" in enable else "raise"):
                outputs = self.fusions[fusion](Tensor((1.0,) * size))
        assert not self.double.fe.FAIL_NEXT  # the injected failure hit the execution under the options
        self.warnings += sum(issubclass(w.category, FallbackWarning) for w in caught)
        assert outputs == [Tensor((2.0,) * size)]
        ran = self.double.executions[before:]
        if known or breaks or inject:
            if not known:
                if key not in self.compiled:  # its first execution: the key's compile failed, for every fusion
                    self.failed.add(key)
                    self.attempts += not inject  # an injected failure comes before nvFuser's compile
                self.warned += 1
            self.fusion_failed.add((fusion, frozenset(enable)))
            assert not ran[-1].enable and not ran[-1].disable  # the defaults
        else:
            if key not in self.compiled:
                self.compiled.add(key)
                self.attempts += 1
            assert len(ran) == 1 and set(ran[0].enable) == set(enable)
        assert ran[-1].fd.body() == self._body(fusion, size)  # its own definition, whoever compiled it

    @rule(fusion=st.integers(0, FUSIONS - 1), options=st.sampled_from([0, 3]), size=st.sampled_from([2, 3]))
    def run_scoped_failing_once(self, fusion: int, options: int, size: int) -> None:
        """One execution of ``fusion`` under the options fails; then the fusions with its definition run there."""
        self.run_scoped(fusion, options, size, inject=True)
        for twin, definition in enumerate(self.definition_of):
            if definition == self.definition_of[fusion]:
                self.run_scoped(twin, options, size)

    @rule(fusion=st.integers(0, FUSIONS - 1))
    def run_unscoped(self, fusion: int) -> None:
        before = len(self.double.executions)
        self.fusions[fusion](Tensor((1.0, 1.0)))
        (ran,) = self.double.executions[before:]
        assert not ran.enable and ran.fd is self.fusions[fusion].get_fd((((2,), "float32"),))  # Thunder's own

    @rule()
    def reinstall(self) -> None:
        nvscope.uninstall()
        assert nvscope.thunder.install()
        self.compiled.clear()
        self.failed.clear()
        self.fusion_failed.clear()

    @invariant()
    def compiles_once_per_key_and_warns_once_per_failure(self) -> None:
        scoped = [c for c in self.double.fe.COMPILES if c.enable or c.disable]
        assert len(scoped) == self.attempts
        assert self.warnings == self.warned

    def teardown(self) -> None:
        reset_nvscope()
        self.monkeypatch.undo()


SharedCacheMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("NVSCOPE_HYPOTHESIS_EXAMPLES", "60")),  # more for a long run, as the other models
    stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
test_shared_cache_model = SharedCacheMachine.TestCase


# --- default sharing -------------------------------------------------------------------------------------------------

SHARING_DEFINITIONS = (("linear",), ("linear", "add"))
OWN_OPTIONS = ((), ("kernel_profile",))  # none, or a compile-time option (Thunder's nv_enable_options)
MAX_SHARED = 3
Key = tuple[int, int, frozenset[str]]  # (definition, input size, effective options)


class DefaultSharingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.monkeypatch = pytest.MonkeyPatch()
        reset_nvscope()
        self.monkeypatch.setenv("NVSCOPE_MAX_PARTITIONS", "8")  # above a fusion's option sets: partitions stay
        self.monkeypatch.setenv("NVSCOPE_MAX_SHARED", str(MAX_SHARED))
        self.monkeypatch.delenv("NVSCOPE_SHARE", raising=False)
        self.double = ThunderDouble(self.monkeypatch)
        assert nvscope.thunder.install()
        self.fusions: list[tuple[Any, int, frozenset[str]]] = []  # (wrapper, definition, own options)
        self.shared: OrderedDict[Key, None] = OrderedDict()  # the shared definitions, least recently looked up first
        self.partitions: set[tuple[int, frozenset[str], int]] = set()  # (fusion, options, size) built
        self.thunders: set[tuple[int, int]] = set()  # (fusion, size) compiled on Thunder's own path
        self.compiles: Counter[Key] = Counter()  # what the model expects nvFuser to have compiled
        scratch = {d: self.double.make_wrapper("scratch", ops=ops) for d, ops in enumerate(SHARING_DEFINITIONS)}
        # A printed definition body -> (definition, size): built by Thunder's uncached builder, never executed.
        self.bodies = {scratch[d].get_fd.__wrapped__((((size,), "float32"),)).body(): (d, size)
                       for d in scratch for size in (2, 3)}

    @initialize(drawn=st.lists(st.tuples(st.integers(0, len(SHARING_DEFINITIONS) - 1),
                                         st.integers(0, len(OWN_OPTIONS) - 1)), min_size=FUSIONS, max_size=FUSIONS))
    def make_fusions(self, drawn: list[tuple[int, int]]) -> None:
        for i, (definition, own) in enumerate(drawn):
            wrapper = self.double.make_wrapper(f"nvFusion{i}", ops=SHARING_DEFINITIONS[definition],
                                               enable=list(OWN_OPTIONS[own]))
            self.fusions.append((wrapper, definition, frozenset(OWN_OPTIONS[own])))

    def _expect(self, fusion: int, options: int | None, selected: bool, sharing: bool, size: int) -> frozenset[str]:
        """The model: the options the call runs with, and what it compiles (into ``self.compiles``)."""
        _, definition, own = self.fusions[fusion]
        effective = own | frozenset(OPTION_SETS[options]) if options is not None and selected else own
        if effective == own and not sharing:  # Thunder's own path: its cache, one compile per fusion and inputs
            if (fusion, size) not in self.thunders:
                self.thunders.add((fusion, size))
                self.compiles[(definition, size, own)] += 1
            return effective
        if (fusion, effective, size) in self.partitions:  # built before: it runs the definition it got then
            return effective
        self.partitions.add((fusion, effective, size))
        key = (definition, size, effective)
        if key in self.shared:
            self.shared.move_to_end(key)
        else:
            self.shared[key] = None
            self.compiles[key] += 1
            if len(self.shared) > MAX_SHARED:
                self.shared.popitem(last=False)
        return effective

    # Two option sets (and the fusions' own), two sizes: keys repeat often enough to be found, and evicted.
    @rule(fusion=st.integers(0, FUSIONS - 1), options=st.none() | st.integers(0, 1), selected=st.booleans(),
          share=st.sampled_from(["no", "yes", "ended"]), size=st.sampled_from([2, 3]), in_thread=st.booleans(),
          reinstall=st.integers(0, 7))
    def run(self, fusion: int, options: int | None, selected: bool, share: str, size: int, in_thread: bool,
            reinstall: int) -> None:
        if reinstall == 0:  # one call in eight, first: a rule of its own would be swarm-tested out of most programs
            self.reinstall()
        wrapper = self.fusions[fusion][0]
        scope = None
        if options is not None or share != "no":
            chosen = fusion if selected else (fusion + 1) % FUSIONS
            scope = nv_options(enable=list(OPTION_SETS[options]) if options is not None else [],
                               fusions=[f"forward/nvFusion{chosen}*"], share=True if share == "yes" else None)
        outer = nv_options(share=True) if share == "ended" else None
        inner = nv_options(share=False) if share == "ended" else None

        def call() -> Any:
            with contextlib.ExitStack() as stack:
                for entered in (outer, inner, scope):
                    if entered is not None:
                        stack.enter_context(entered)
                return wrapper(Tensor((1.0,) * size))

        before = len(self.double.executions)
        if in_thread:
            results: list[Any] = []
            thread = threading.Thread(target=lambda: results.append(call()), name="worker")
            thread.start()
            thread.join(30)
            (outputs,) = results
        else:
            outputs = call()
        expected = self._expect(fusion, options, selected, share == "yes", size)
        assert outputs == [Tensor((2.0,) * size)]
        (ran,) = self.double.executions[before:]
        assert frozenset(ran.enable or ()) == expected and not ran.disable
        assert self.bodies[ran.fd.body()] == (self.fusions[fusion][1], size)  # its own definition's text
        assert ran.thread == ("worker" if in_thread else "MainThread")

    def reinstall(self) -> None:
        """Forget every partition and shared definition; Thunder's own caches stay."""
        nvscope.uninstall()
        assert nvscope.thunder.install()
        self.partitions.clear()
        self.shared.clear()

    @invariant()
    def compiles_what_the_model_expects(self) -> None:
        compiled = Counter((*self.bodies[c.definition], frozenset(c.enable)) for c in self.double.fe.COMPILES)
        assert compiled == self.compiles

    def teardown(self) -> None:
        reset_nvscope()
        self.monkeypatch.undo()


DefaultSharingMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("NVSCOPE_HYPOTHESIS_EXAMPLES", "40")), stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_default_sharing_model = DefaultSharingMachine.TestCase
