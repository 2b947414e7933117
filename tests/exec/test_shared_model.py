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

`ThreadedSharingMachine` runs batches of one to three calls at once, each on a thread of its own (released together
by a barrier, with a short switch interval so that nvscope's Python interleaves), each under its own scopes (options
or none, for the fusion or another one, ``share=True``, ``share=False`` inside a sharing scope, on_error "raise" or
"fallback"). A call runs a fusion, or a training step of a Thunder-double model (forward in one scope, ``backward()``
in another). Definitions break under ``fuse_matmul`` or ``kernel_profile``; a fusion whose own (compile-time) option
breaks it fails under its defaults too. The fake nvFuser's ``execute`` is serialized by one lock, as nvFuser's holds
the GIL for the whole call (docs/how-it-works.md, "Threads"): what nvscope relies on and documents. The model, from
the documented rules:

* effective options and sharing: as above; a backward runs under its forward's scope laid over the scope it runs in
  (its forward's options win, its forward's on_error), and shares where its forward shared, not where its forward ran
  under ``share=False`` inside a sharing scope, else where the scope it runs in shares (docs/backward.md,
  docs/how-it-works.md "Sharing the defaults"); ``NVSCOPE_SHARE=all`` (read at import) shares wherever no scope
  says ``share=False`` (`test_threaded_sharing_model_under_share_all` runs this machine so in a child process);
* compiles: one per (definition, inputs, options) key on nvscope's path, whichever thread gets there first and however
  many race for it (exact); on Thunder's own path one per fusion, except that threads racing into a fusion's first
  call may each compile (Thunder's ``get_fd`` is a plain ``functools.lru_cache``, nvscope's concern only in that it
  leaves that path alone): at most one more per racing thread;
* failures: a key that breaks is one compile attempt and one `FallbackWarning` under "fallback", recorded (the
  fusions that reach it later, or the same fusion again, use their defaults without compiling: shared defaults where
  the scope shares, else Thunder's; also threads racing to it, and fusions whose partition took the definition
  before); under "raise" the error is raised and nothing recorded (each call attempts it, until a fallback
  records it; then it is refused); a failure of the defaults themselves (Thunder's, or shared at the fusion's own
  options) is raised, never recorded, so every call attempts it again; a transient failure (out of memory) of a
  shared default definition is raised, and the next call compiles and runs it;
* each execution: its own definition's text for its inputs, the options the model says, on its own thread.

Two cases the machine found breaking "one attempt, one warning" for a failing key (fixed since) are kept below as the
smallest programs that show them: a fusion whose partition took the definition before its failure was recorded,
and threads racing to one failing definition.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import threading
import warnings
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fake_nvfuser_frontend import Tensor
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from thunder_double import ThunderDouble, load_frontend, reset_nvscope

import nvscope
import nvscope.nvfuser
import nvscope.thunder
from nvscope import FallbackWarning, audit, nv_options

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


def machine_settings(examples: int, steps: int) -> settings:
    """A machine's settings: ``examples`` programs unless ``NVSCOPE_HYPOTHESIS_EXAMPLES`` says how many (a long
    run), each of up to ``steps`` rules."""
    return settings(max_examples=int(os.environ.get("NVSCOPE_HYPOTHESIS_EXAMPLES", str(examples))),
                    stateful_step_count=steps, deadline=None, suppress_health_check=[HealthCheck.too_slow])


SharedCacheMachine.TestCase.settings = machine_settings(60, steps=30)
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


DefaultSharingMachine.TestCase.settings = machine_settings(40, steps=30)
test_default_sharing_model = DefaultSharingMachine.TestCase


# --- threads at once, backward passes, failures, NVSCOPE_SHARE=all ---------------------------------------------------

SHARE_ALL = os.environ.get("NVSCOPE_SHARE", "").strip().lower() == "all"  # as nvscope reads it, once, at import
THREADED_DEFINITIONS = (  # (ops, breaks_with)
    (("linear",), None),
    (("linear", "add"), None),
    (("linear",), "fuse_matmul"),
    (("linear",), "kernel_profile"),  # with kernel_profile as its own option, its defaults fail too
)
SCOPE_OPTIONS = (("fuse_matmul",), ("static_fusion_count",), ("kernel_profile",))
PLAIN = 6  # fusions called directly, named nvFusion2..nvFusion7 (a model's are nvFusion0 and nvFusion1)
MODELS = 2
Scope = tuple[int | None, bool, str, str]  # (options or None, selects the fusion, share: no/yes/ended, on_error)
TKey = tuple[int, int, frozenset[str]]  # (definition, size, options): what a compile record tells apart
Ran = tuple[int, frozenset[str], bool]  # an execution the model expects: (fusion, options, on a shared definition)


@dataclass
class Fused:
    """A fusion of the machine: its wrapper, definition, own (compile-time) options, input size and kind."""

    wrapper: Any
    definition: int
    own: frozenset[str]
    size: int
    torch: bool  # torch inputs (a model's fusions) or the frontend double's `Tensor`s
    name: str

    @property
    def breaks(self) -> str | None:
        return THREADED_DEFINITIONS[self.definition][1]


@dataclass
class Effect:
    """What the model says a call runs under."""

    options: frozenset[str]  # its effective options
    sharing: bool
    fallback: bool


@dataclass
class Batch:
    """The model's bookkeeping of one batch of calls made at once: what a race may add beyond the exact counts."""

    threads: int
    thunder_before: frozenset[int]  # fusions compiled on Thunder's path before the batch
    failed_before: frozenset[tuple[int, int, bool, frozenset[str]]]
    fusion_failed_before: frozenset[tuple[int, frozenset[str]]]
    fallback_keys: set[tuple[int, int, bool, frozenset[str]]] = field(default_factory=set)  # breaking, under fallback


def scopes() -> st.SearchStrategy[Scope]:
    return st.tuples(st.none() | st.integers(0, len(SCOPE_OPTIONS) - 1), st.booleans(),
                     st.sampled_from(["no", "yes", "ended"]), st.sampled_from(["raise", "fallback"]))


def scoped(scope: Scope) -> bool:
    return scope[0] is not None or scope[2] != "no"


def enter(stack: contextlib.ExitStack, scope: Scope, fusions: list[str] | None) -> None:
    """Enter ``scope`` on this thread: ``share=False`` inside a sharing scope ("ended"), then the options."""
    options, _, share, on_error = scope
    if share == "ended":
        stack.enter_context(nv_options(share=True, on_error=on_error))
        stack.enter_context(nv_options(share=False))
    if options is not None or share == "yes":
        stack.enter_context(nv_options(enable=list(SCOPE_OPTIONS[options]) if options is not None else [],
                                       fusions=fusions, share=True if share == "yes" else None, on_error=on_error))


def effect(scope: Scope, own: frozenset[str], selected: bool = True) -> Effect:
    """The model of one scope on this thread for a fusion with ``own`` options (``selected``: its ``fusions=``)."""
    options, _, share, on_error = scope
    added = frozenset(SCOPE_OPTIONS[options]) if options is not None and selected else frozenset()
    sharing = share == "yes" or (share == "no" and SHARE_ALL)  # share=None inherits NVSCOPE_SHARE=all's sharing
    return Effect(own | added, sharing, scoped(scope) and on_error == "fallback")


def backward_effect(forward: Scope, backward: Scope, own: frozenset[str]) -> Effect:
    """A backward under its forward's scope laid over the one it runs in (docs/backward.md): the forward's options
    over the backward scope's, the forward's on_error; sharing as the forward's where it shares or ended sharing."""
    below = effect(backward, own)
    if not scoped(forward):  # nothing carried (NVSCOPE_SHARE=all's program-wide frame is no scope)
        return below
    above = effect(forward, own)
    sharing = False if forward[2] == "ended" else True if above.sharing else below.sharing
    return Effect(below.options | above.options, sharing, above.fallback)


class ThreadedSharingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.torch = pytest.importorskip("torch")
        self.monkeypatch = pytest.MonkeyPatch()
        reset_nvscope()
        self.monkeypatch.setenv("NVSCOPE_MAX_PARTITIONS", "8")  # above a fusion's option sets: partitions stay
        self.monkeypatch.setenv("NVSCOPE_MAX_SHARED", "256")  # no eviction: LRU order under threads is a race's
        self.double = ThunderDouble(self.monkeypatch)
        self.install()
        self.fused: list[Fused] = []
        self.models: list[tuple[Any, int, int]] = []  # (model, forward fusion, backward fusion): indices in fused
        scratch = {d: self.double.make_wrapper("scratch", ops=ops, breaks_with=breaks)
                   for d, (ops, breaks) in enumerate(THREADED_DEFINITIONS)}
        self.bodies = {(d, size): scratch[d].get_fd.__wrapped__((((size,), "float32"),)).body()
                       for d in scratch for size in (2, 3)}
        self.definition_of = {body: key for key, body in self.bodies.items()}
        # The model's state: what nvscope has compiled (keys with the input kind), recorded failures, Thunder's path.
        self.compiled: set[tuple[int, int, bool, frozenset[str]]] = set()
        self.failed: set[tuple[int, int, bool, frozenset[str]]] = set()
        self.fusion_failed: set[tuple[int, frozenset[str]]] = set()
        self.thunder: set[int] = set()
        # The definition objects seen running: per shared key (until an uninstall), and Thunder's own per fusion.
        self.shared_fds: dict[tuple[int, int, bool, frozenset[str]], Any] = {}
        self.thunder_fds: dict[int, tuple[int, Any]] = {}  # id -> (fusion, the definition, kept alive)
        self.exact: Counter[TKey] = Counter()  # compile attempts the model requires
        self.slack: Counter[TKey] = Counter()  # and the ones a race may add
        self.warned = 0  # FallbackWarnings
        self.warnings = 0

    def install(self) -> None:
        nvscope.thunder.install()
        execute = self.double.fe.FusionDefinition.execute
        if getattr(execute, "serialized", False):
            return
        lock = threading.Lock()

        def serialized(fd: Any, *args: Any, **kwargs: Any) -> Any:
            with lock:  # nvFuser's execute holds the GIL for the whole call: two executions never overlap
                return execute(fd, *args, **kwargs)

        serialized.serialized = True  # type: ignore[attr-defined]
        self.monkeypatch.setattr(self.double.fe.FusionDefinition, "execute", serialized)

    @initialize(plain=st.lists(st.tuples(st.integers(0, len(THREADED_DEFINITIONS) - 1), st.booleans(),
                                         st.sampled_from([2, 3])), min_size=PLAIN, max_size=PLAIN),
                models=st.lists(st.tuples(st.sampled_from([None, 2, 3]), st.booleans(), st.sampled_from([2, 3])),
                                min_size=MODELS, max_size=MODELS))
    def make_fusions(self, plain: list[tuple[int, bool, int]], models: list[tuple[int | None, bool, int]]) -> None:
        for i, (definition, tuned, size) in enumerate(plain):
            own = ["kernel_profile"] if tuned else []
            ops, breaks = THREADED_DEFINITIONS[definition]
            wrapper = self.double.make_wrapper(f"nvFusion{i + 2}", enable=own, ops=ops, breaks_with=breaks)
            self.fused.append(Fused(wrapper, definition, frozenset(own), size, False, f"nvFusion{i + 2}"))
        for backward_definition, tuned, size in models:
            own = ["kernel_profile"] if tuned else []
            breaks = None if backward_definition is None else THREADED_DEFINITIONS[backward_definition][1]
            model, forward, backward = self.double.make_model(enable=own, breaks_with=breaks)
            self.models.append((model, len(self.fused), len(self.fused) + 1))
            self.fused.append(Fused(forward, 0, frozenset(own), size, True, "nvFusion0"))
            self.fused.append(Fused(backward, backward_definition or 0, frozenset(own), size, True, "nvFusion1"))

    # --- the model -----------------------------------------------------------------------------------------------

    def _attempt(self, fused: Fused, options: frozenset[str], exact: int = 1, slack: int = 0) -> None:
        key = (fused.definition, fused.size, options)
        self.exact[key] += exact
        self.slack[key] += slack

    def _defaults(self, index: int, sharing: bool, batch: Batch) -> Ran | None:
        """The fusion runs at its own options (Thunder's path, or shared where the scope shares), or None: raised."""
        fused = self.fused[index]
        if fused.breaks in fused.own:  # its defaults fail: raised, never recorded, so every call attempts them
            self._attempt(fused, fused.own)
            return None
        if sharing:
            key = (fused.definition, fused.size, fused.torch, fused.own)
            if key not in self.compiled:  # one compile per key, whichever thread gets there first
                self.compiled.add(key)
                self._attempt(fused, fused.own)
        elif index not in self.thunder:
            self.thunder.add(index)
            self._attempt(fused, fused.own)
        elif batch.threads > 1 and index not in batch.thunder_before:
            self._attempt(fused, fused.own, 0, 1)  # Thunder's lru_cache: racing first calls each build and compile
        return (index, fused.own, sharing)

    def _call(self, index: int, effect: Effect, batch: Batch) -> Ran | None:
        """The model of one call: what its execution runs, or None where it raises."""
        fused = self.fused[index]
        options = effect.options
        if options == fused.own:
            return self._defaults(index, effect.sharing, batch)
        key = (fused.definition, fused.size, fused.torch, options)
        if fused.breaks not in options:
            if key not in self.compiled:
                self.compiled.add(key)
                self._attempt(fused, options)
            return (index, options, True)
        mine = (index, options)
        if not effect.fallback:
            if key in batch.failed_before:
                pass  # recorded: refused, not compiled again (also where its partition took the definition before)
            elif batch.threads > 1 and key in batch.fallback_keys:
                self._attempt(fused, options, 0, 1)  # a fallback on another thread may record it first
            else:
                self._attempt(fused, options)  # raised, not recorded: every call attempts it
            return None
        if mine in batch.fusion_failed_before:
            pass  # this fusion failed under these options: its defaults directly
        elif key in self.failed or mine in self.fusion_failed:
            # Recorded: its defaults, not compiled again, not warned again; also for a partition that took the
            # definition before (test_a_fusion_that_raised_under_a_failing_key_falls_back_without_compiling_it) and
            # for a thread racing another one to it
            # (test_a_failing_shared_definition_is_compiled_once_by_threads_racing_to_it).
            pass
        else:
            self.failed.add(key)
            self._attempt(fused, options)
            self.warned += 1
        self.fusion_failed.add(mine)
        return self._defaults(index, effect.sharing, batch)

    # --- the rules -----------------------------------------------------------------------------------------------

    @rule(specs=st.lists(st.tuples(st.integers(0, PLAIN + MODELS - 1), scopes(), scopes()), min_size=1, max_size=3),
          reinstall=st.integers(0, 7))
    def batch(self, specs: list[tuple[int, Scope, Scope]], reinstall: int) -> None:
        if reinstall == 0:  # one batch in eight, first (a rule of its own would be swarm-tested out of most programs)
            self.reinstall()
        barrier = threading.Barrier(len(specs))
        outcomes: dict[str, Any] = {}

        def work(name: str, spec: tuple[int, Scope, Scope]) -> None:
            target, scope, backward = spec
            try:
                barrier.wait(30)
                outcomes[name] = self._perform(target, scope, backward)
            except BaseException as error:  # reported by the main thread
                outcomes[name] = error

        before = len(self.double.executions)
        names = [f"worker{i}" for i in range(len(specs))]
        threads = [threading.Thread(target=work, args=(name, spec), name=name)
                   for name, spec in zip(names, specs, strict=True)]
        interval = sys.getswitchinterval()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sys.setswitchinterval(1e-5)  # threads switch often: nvscope's Python interleaves between them
            try:
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(60)
            finally:
                sys.setswitchinterval(interval)
        self.warnings += sum(issubclass(w.category, FallbackWarning) for w in caught)
        batch = Batch(len(specs), frozenset(self.thunder), frozenset(self.failed), frozenset(self.fusion_failed))
        expected = {name: self._expect(spec, batch) for name, spec in zip(names, specs, strict=True)}
        for calls in expected.values():  # keys a fallback may record while the batch runs
            for index, effect_ in calls:
                fused = self.fused[index]
                if effect_.fallback and fused.breaks in effect_.options and effect_.options != fused.own:
                    batch.fallback_keys.add((fused.definition, fused.size, fused.torch, effect_.options))
        ran = self.double.executions[before:]
        for name, spec in zip(names, specs, strict=True):
            self._check(name, spec, expected[name], outcomes[name], [e for e in ran if e.thread == name], batch)

    def _expect(self, spec: tuple[int, Scope, Scope], batch: Batch) -> list[tuple[int, Effect]]:
        """The calls a spec makes, in order, with what each runs under (the model's state is not touched)."""
        target, scope, backward = spec
        if target < PLAIN:
            chosen = target if scope[1] else (target + 1) % PLAIN
            return [(target, effect(scope, self.fused[target].own, chosen == target))]
        _, forward, back = self.models[target - PLAIN]
        own = self.fused[forward].own
        return [(forward, effect(scope, own)), (back, backward_effect(scope, backward, own))]

    def _perform(self, target: int, scope: Scope, backward: Scope) -> Any:
        """One thread's call: a plain fusion under ``scope``, or a model's forward under it and backward under
        ``backward``. Its outputs (a fusion's, or the input's gradient), or the RuntimeError it raised."""
        torch = self.torch
        try:
            if target < PLAIN:
                fused = self.fused[target]
                chosen = target if scope[1] else (target + 1) % PLAIN
                with contextlib.ExitStack() as stack:
                    enter(stack, scope, [f"forward/nvFusion{chosen + 2}*"])
                    return fused.wrapper(Tensor((1.0,) * fused.size))
            model, forward, _ = self.models[target - PLAIN]
            x = torch.ones(self.fused[forward].size, requires_grad=True)
            with contextlib.ExitStack() as stack:
                enter(stack, scope, None)
                loss = model(x).sum()
            with contextlib.ExitStack() as stack:
                enter(stack, backward, None)
                loss.backward()
            return x.grad
        except RuntimeError as error:
            return error

    def _check(self, name: str, spec: tuple[int, Scope, Scope], calls: list[tuple[int, Effect]], outcome: Any,
               ran: list[Any], batch: Batch) -> None:
        expected: list[Ran] = []
        raised = False
        for index, effect_ in calls:
            ran_as = self._call(index, effect_, batch)
            if ran_as is None:
                raised = True
                break
            expected.append(ran_as)
        if raised:
            assert isinstance(outcome, RuntimeError), (name, spec, outcome)
            assert "INTERNAL ASSERT" in str(outcome), outcome  # nvFuser's own error, or a SharedFailure saying it
        else:
            assert not isinstance(outcome, BaseException), (name, spec, outcome)
            size = self.fused[calls[0][0]].size
            if spec[0] < PLAIN:
                assert outcome == [Tensor((2.0,) * size)]
            else:
                assert outcome.tolist() == [2.0] * size  # the gradient, through the backward fusion
        assert len(ran) == len(expected), (name, spec, ran, expected)
        for execution, (index, options, shared) in zip(ran, expected, strict=True):
            fused = self.fused[index]
            assert frozenset(execution.enable or ()) == options and not execution.disable, (spec, execution)
            assert execution.fd.body() == self.bodies[(fused.definition, fused.size)]  # its own definition's text
            assert type(execution.inputs[0]).__module__.startswith("torch") == fused.torch
            # Which definition object: one per key for every fusion that shares it, the fusion's own on Thunder's path.
            fd = execution.fd
            if shared:
                first = self.shared_fds.setdefault((fused.definition, fused.size, fused.torch, options), fd)
                assert fd is first and id(fd) not in self.thunder_fds, (spec, execution)
            else:
                assert self.thunder_fds.setdefault(id(fd), (index, fd))[0] == index, (spec, execution)
                assert all(fd is not other for other in self.shared_fds.values()), (spec, execution)

    @rule(fusion=st.integers(0, PLAIN - 1), on_error=st.sampled_from(["raise", "fallback"]))
    def transient_failure_of_shared_defaults(self, fusion: int, on_error: str) -> None:
        """Out of memory in a shared default definition: raised whatever on_error says (there are no defaults to
        fall back to), no warning, not recorded: the next call compiles (if nothing did) and runs it."""
        fused = self.fused[fusion]
        if fused.breaks in fused.own:
            return
        self.double.fe.FAIL_NEXT.append(RuntimeError("CUDA out of memory (transient)"))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(RuntimeError, match="out of memory"), nv_options(share=True, on_error=on_error):
                fused.wrapper(Tensor((1.0,) * fused.size))
            assert not self.double.fe.FAIL_NEXT
            before = len(self.double.executions)
            with nv_options(share=True, on_error=on_error):
                assert fused.wrapper(Tensor((1.0,) * fused.size)) == [Tensor((2.0,) * fused.size)]
        assert not any(issubclass(w.category, FallbackWarning) for w in caught)
        (execution,) = self.double.executions[before:]
        assert frozenset(execution.enable or ()) == fused.own
        key = (fused.definition, fused.size, fused.torch, fused.own)
        assert execution.fd is self.shared_fds.setdefault(key, execution.fd)
        self._defaults(fusion, True, Batch(1, frozenset(self.thunder), frozenset(), frozenset()))

    def reinstall(self) -> None:
        """Forget every partition, shared definition and failure; Thunder's own caches stay."""
        nvscope.uninstall()
        self.install()
        self.compiled.clear()
        self.failed.clear()
        self.fusion_failed.clear()
        self.shared_fds.clear()

    @invariant()
    def compiles_and_warns_within_the_model(self) -> None:
        compiled = Counter((*self.definition_of[c.definition], frozenset(c.enable)) for c in self.double.fe.COMPILES)
        for key in set(compiled) | set(self.exact):
            assert self.exact[key] <= compiled[key] <= self.exact[key] + self.slack[key], (key, compiled, self.exact)
        assert self.warnings == self.warned

    def teardown(self) -> None:
        reset_nvscope()
        self.monkeypatch.undo()


ThreadedSharingMachine.TestCase.settings = machine_settings(60, steps=15)
test_threaded_sharing_model = ThreadedSharingMachine.TestCase


def test_threaded_sharing_model_under_share_all(tmp_path: Path) -> None:
    """`ThreadedSharingMachine` in a child process under ``NVSCOPE_SHARE=all`` (read once, at import: program-wide
    sharing in every thread, which a scope's ``share=False`` ends), with as many examples as here."""
    if SHARE_ALL:
        pytest.skip("this process is that child")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVSCOPE_", "NVFUSER_"))}
    examples = ThreadedSharingMachine.TestCase.settings.max_examples
    env.update(NVSCOPE_SHARE="all", NVSCOPE_HYPOTHESIS_EXAMPLES=str(examples))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k",
                             "test_threaded_sharing_model and not share_all", __file__],
                            cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout, result.stdout[-2000:]


# --- the defects the machine found (fixed), as the smallest programs that show them ----------------------------------

@pytest.fixture
def breaking(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Two fusions printing one definition that fails under fuse_matmul; the fake nvFuser's execute serialized."""
    reset_nvscope()
    monkeypatch.delenv("NVSCOPE_SHARE", raising=False)
    double = ThunderDouble(monkeypatch)
    assert nvscope.thunder.install()
    yield double, [double.make_wrapper(f"nvFusion{i}", breaks_with="fuse_matmul") for i in range(2)]
    reset_nvscope()


def fallbacks(fusion: Any, caught: list[warnings.WarningMessage]) -> tuple[Any, int]:
    with nv_options(enable=["fuse_matmul"], on_error="fallback"):
        outputs = fusion(Tensor((1.0, 1.0)))
    return outputs, sum(issubclass(w.category, FallbackWarning) for w in caught)


def attempts(double: ThunderDouble) -> int:
    return sum(bool(c.enable) for c in double.fe.COMPILES)


def test_a_fusion_that_raised_under_a_failing_key_falls_back_without_compiling_it(breaking: Any) -> None:
    double, (first, second) = breaking
    with pytest.raises(RuntimeError), nv_options(enable=["fuse_matmul"], on_error="raise"):
        first(Tensor((1.0, 1.0)))  # raised, not recorded: one attempt
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert fallbacks(second, caught) == ([Tensor((2.0, 2.0))], 1)  # the second attempt fails: recorded
        assert attempts(double) == 2
        # docs/how-it-works.md: "every fusion sharing it falls back without compiling it again, under one warning"
        assert fallbacks(first, caught) == ([Tensor((2.0, 2.0))], 1)
    assert attempts(double) == 2


def test_a_failing_shared_definition_is_compiled_once_by_threads_racing_to_it(breaking: Any,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    double, fusions = breaking
    execute = double.fe.FusionDefinition.execute
    lock, built = threading.Lock(), threading.Barrier(2)

    def serialized(fd: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:  # as nvFuser's execute holds the GIL throughout
            return execute(fd, *args, **kwargs)

    monkeypatch.setattr(double.fe.FusionDefinition, "execute", serialized)
    with audit():  # nvscope meets both fusions (and names them) here: the builds below are their partitions'
        for fusion in fusions:
            fusion(Tensor((1.0, 1.0)))
    before = len(double.executions)
    for fusion in fusions:
        build = fusion.get_fd.__wrapped__  # what a partition builds its definitions with (Thunder's cache its own)

        def gated(descriptors: Any, build: Any = build) -> Any:
            built.wait(10)  # both partitions take the (one, shared) definition, then run it: none is refused yet
            return build(descriptors)

        fusion.get_fd = functools.lru_cache(build)
        fusion.get_fd.__wrapped__ = gated
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=fallbacks, args=(fusion, caught)) for fusion in fusions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert len(double.executions) == before + 2  # both ran their defaults
    assert (attempts(double), sum(issubclass(w.category, FallbackWarning) for w in caught)) == (1, 1)


def test_a_direct_definition_that_raised_under_a_failing_key_falls_back_without_compiling_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first case with the direct adapter: its partitions take their definitions per device argument."""
    reset_nvscope()
    monkeypatch.delenv("NVSCOPE_SHARE", raising=False)
    fe = load_frontend(monkeypatch, "nvfuser_direct")
    assert nvscope.nvfuser.install()
    try:
        definitions = []
        for _ in range(2):
            with fe.FusionDefinition() as fd:
                fd.define_tensor(shape=[2], dtype=fe.DataType.Float)
                fd.ops.linear(0)
                fd.define_scalar(fe.BREAKS_WITH + "fuse_matmul")
            definitions.append(fd)
        first, second = definitions
        x = fe.Tensor((1.0, 1.0))
        with pytest.raises(RuntimeError), nv_options(enable=["fuse_matmul"], on_error="raise"):
            first.execute([x])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with nv_options(enable=["fuse_matmul"], on_error="fallback"):
                assert second.execute([x]) == first.execute([x]) == [x * 2]
        assert sum(issubclass(w.category, FallbackWarning) for w in caught) == 1
        assert sum(bool(c.enable) for c in fe.COMPILES) == 2
    finally:
        reset_nvscope()


def test_own_options_that_took_the_definition_before_its_failure_was_remembered_still_compile(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The fix of the first case refuses a definition whose failure is recorded also where a partition took it
    before; a fusion's own options (shared) are never refused on another fusion's failure: they compile, and run."""
    reset_nvscope()
    monkeypatch.delenv("NVSCOPE_SHARE", raising=False)
    double = ThunderDouble(monkeypatch)
    assert nvscope.thunder.install()
    tuned = double.make_wrapper("nvFusion0", enable=["fuse_matmul"])  # its own option, no scope's
    scoped = double.make_wrapper("nvFusion1")
    x = Tensor((1.0, 1.0))
    double.fe.FAIL_NEXT.append(RuntimeError("CUDA out of memory (transient)"))
    with pytest.raises(RuntimeError, match="out of memory"), nv_options(share=True):
        tuned(x)  # its partition holds the definition, not compiled
    double.fe.FAIL_NEXT.append(RuntimeError("CUDA out of memory (transient)"))
    with pytest.warns(FallbackWarning), nv_options(enable=["fuse_matmul"], on_error="fallback"):
        assert scoped(x) == [x * 2]  # the definition's failure, recorded
    compiled = len(double.fe.COMPILES)
    with nv_options(share=True):
        assert tuned(x) == [x * 2]
    assert list(double.executions[-1].enable or ()) == ["fuse_matmul"]
    assert len(double.fe.COMPILES) == compiled + 1
    reset_nvscope()
