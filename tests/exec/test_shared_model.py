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
"""

from __future__ import annotations

import os
import warnings
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
