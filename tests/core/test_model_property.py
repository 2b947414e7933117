"""Model-based test: random programs of enters, exits, nesting, exceptions and re-entry against a reference model.

The model is the stack of entered scopes; what a fusion gets is computed from it by a reference resolver written
here from the documented rules, not from nvscope's code: from the outermost scope in, a scope whose ``fusions=``
selector (a reference predicate here) does not match the fusion is skipped; ``inherit=False`` starts again from its
own options; otherwise its options are laid over what is below, a name it requests the other way replacing the outer
request. After every step ``current_options()`` (scopes that reach every fusion) and ``current_options(info)`` for a
few fusions must equal the model's, and so must what three fusions of the Thunder double execute with: the model's
options for them, less those the catalog's gates say cannot affect them, laid over their compile-time options
(through the execution path and its per-fusion memo, audited or not). Two of them share Thunder's name ``nvFusion0``
(two jitted functions): the second nvscope sees is ``forward/nvFusion0#2``, and globs select either by number or
both by name. Another fusion breaks under ``fuse_matmul``: it must raise, or run its defaults when the innermost
scope that sets ``on_error=`` says ``"fallback"``, or run its region in PyTorch when it says ``"torch"`` (whatever
that scope's selector or ``inherit=``). A fusion that the scopes route (``run="torch"``, the innermost selecting
scope that sets ``run=`` deciding, ``inherit=False`` starting again from nvFuser) runs its region in PyTorch without
nvFuser. Contexts copied along the way (as an asyncio task's) keep the scopes they were copied in after those exit
here: fusions run in them get those scopes' options, while the adapters' patches come and go with the scopes that
exist (`nvscope._core._patches.demand`).
"""

from __future__ import annotations

import contextvars
import functools
import os
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import pytest
from fake_nvfuser_frontend import Tensor
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from thunder_double import ThunderDouble, reset_nvscope

import nvscope
import nvscope.thunder
from nvscope import OptionSet, audit, current_options, nv_options

# Scopes here run fusions of the double or none, as drawn: what they say about it is tested elsewhere.
pytestmark = pytest.mark.filterwarnings("ignore::nvscope.NoEffectWarning", "ignore::nvscope.NoFusionWarning",
                                        "ignore::nvscope.FallbackWarning")

# id_model is valid in both lists: nested scopes may ask for it both ways (the inner request wins).
ENABLE = ("fuse_matmul", "static_fusion_count", "kernel_profile", "id_model")
DISABLE = ("matmul_expr_eval", "fallback", "parallel_compile", "id_model")

Pair = tuple[frozenset[str], frozenset[str]]
EMPTY_PAIR: Pair = (frozenset(), frozenset())

FUSIONS = (
    nvscope.FusionInfo("nvFusion0", "forward", ("linear", "add")),
    nvscope.FusionInfo("nvFusion1", "backward", ("add",)),
    nvscope.FusionInfo("nvFusion1", "forward", ()),
    nvscope.FusionInfo("FusionDefinition#3", "call", None),
    nvscope.FusionInfo("nvFusion2", "forward", None),
    nvscope.FusionInfo("nvFusion0", "forward", ("add",), instance=2),
)
# The forward fusions the Thunder double runs, in the order nvscope first sees them: (name, its number among the
# fusions of that name) -> (the ops its definition prints, None: nvscope cannot read them; its compile-time options).
RUNS: dict[tuple[str, int], tuple[tuple[str, ...] | None, Pair]] = {
    ("nvFusion0", 1): (("linear", "add"),
                       (frozenset({"kernel_profile", "id_model"}), frozenset({"parallel_compile"}))),
    ("nvFusion1", 1): ((), EMPTY_PAIR),
    ("nvFusion2", 1): (None, EMPTY_PAIR),
    ("nvFusion3", 1): (("linear",), EMPTY_PAIR),  # breaks under fuse_matmul
    ("nvFusion0", 2): (("add",), EMPTY_PAIR),  # another jitted function's nvFusion0: forward/nvFusion0#2
}
BREAKS = ("nvFusion3", 1)
RUN_INFOS = {run: nvscope.FusionInfo(run[0], "forward", ops, instance=run[1]) for run, (ops, _) in RUNS.items()}
X = Tensor((1.0,))  # every fusion's input: its region (PyTorch) computes 3 * x, nvFuser 2 * x
BY_TORCH, BY_NVFUSER = [X * 3], [X * 2]  # the result tells which ran
# fusions= values with a reference predicate each (written without nvscope's selector code).
SELECTORS: dict[str, tuple[Any, Any]] = {
    "none": (None, None),
    "forward glob": ("forward/*", lambda f: f.phase == "forward"),
    "one id": ("backward/nvFusion1", lambda f: f.phase == "backward" and f.name == "nvFusion1"),
    "list": (["backward/*", "*/nvFusion0"], lambda f: f.phase == "backward" or f.name == "nvFusion0"),
    "second": ("forward/nvFusion0#2", lambda f: f.phase == "forward" and f.name == "nvFusion0" and f.instance == 2),
    "first": (["forward/nvFusion0#1", "call/*"],
              lambda f: f.phase == "call" or (f.phase == "forward" and f.name == "nvFusion0" and f.instance == 1)),
    "phase": (nvscope.phase("call", "backward"), lambda f: f.phase in ("call", "backward")),
    "holding": (nvscope.holding("linear"), lambda f: "linear" in (f.ops or ())),
    "holding add": (nvscope.holding("add"), lambda f: "add" in (f.ops or ())),
    "callable": (lambda f: f.name.endswith("1"), lambda f: f.name.endswith("1")),
    "combined": (nvscope.phase("forward") & ~nvscope.holding("add"),
                 lambda f: f.phase == "forward" and "add" not in (f.ops or ())),
}
_predicates: dict[int, Any] = {}  # id(nv_options) -> the reference predicate of its selector (None: every fusion)


def resolve(scopes: list[nv_options], fusion: nvscope.FusionInfo | None) -> Pair:
    """The reference resolver (see the module docstring); ``fusion=None`` matches no selector."""
    enable: frozenset[str] = frozenset()
    disable: frozenset[str] = frozenset()
    for scope in scopes:
        predicate = _predicates[id(scope)]
        if predicate is not None and (fusion is None or not predicate(fusion)):
            continue
        own_enable, own_disable = scope.options.enable, scope.options.disable
        if scope.inherit:
            enable, disable = (enable - own_disable) | own_enable, (disable - own_enable) | own_disable
        else:
            enable, disable = own_enable, own_disable
    return enable, disable


@functools.cache
def gated(pair: Pair, ops: tuple[str, ...] | None) -> Pair:
    """``pair`` less the names whose catalog gate (``OptionInfo.ops``) the fusion's ops miss; unknown ops: all kept."""
    if ops is None:
        return pair
    cat = nvscope.catalog()

    def kept(kind: Any, names: frozenset[str]) -> frozenset[str]:
        gates = {name: cat.get(kind, name).ops for name in names}  # type: ignore[union-attr]
        return frozenset(name for name, gate in gates.items() if not gate or set(gate) & set(ops))

    return kept("enable", pair[0]), kept("disable", pair[1])


def laid_over(below: Pair, above: Pair) -> Pair:
    return (below[0] - above[1]) | above[0], (below[1] - above[0]) | above[1]


class Unprintable:
    """A definition whose printing fails: nvscope cannot read the fusion's ops."""

    def __repr__(self) -> str:
        raise RuntimeError("no printer")


def test_the_pool_names_are_valid_per_call_options() -> None:
    cat = nvscope.catalog()
    for kind, names in (("enable", ENABLE), ("disable", DISABLE)):
        for name in names:
            info = cat.get(kind, name)  # type: ignore[arg-type]
            assert info is not None and not info.requires_args, (kind, name)


@pytest.fixture(autouse=True, scope="module")
def _development_mode_for_the_machine() -> Iterator[None]:
    with nvscope.dev_mode(True):
        yield


class Boom(Exception):
    pass


# A nested block: (scope index, raise at the end?, children). Drawn whole and run with real `with` statements.
blocks = st.recursive(
    st.tuples(st.integers(0, 1_000), st.booleans(), st.just(())),
    lambda children: st.tuples(st.integers(0, 1_000), st.booleans(), st.lists(children, max_size=3).map(tuple)),
    max_leaves=6,
)


class ScopeMachine(RuleBasedStateMachine):
    scopes = Bundle("scopes")

    def __init__(self) -> None:
        super().__init__()
        self.entered: list[nv_options] = []  # the objects entered by hand, innermost last
        self.model: list[nv_options] = []  # the reference: every entered scope, hand-entered or in a block
        self.all_scopes: list[nv_options] = []
        self.captured: list[tuple[contextvars.Context, list[nv_options]]] = []  # copied contexts and their models
        self.patches = pytest.MonkeyPatch()
        self.patches.setenv("NVSCOPE_REPRO", "0")  # the failures here need no repro scripts
        reset_nvscope()
        self.double = ThunderDouble(self.patches)
        assert nvscope.thunder.install()
        self.wrappers = {}
        for (name, number), (ops, (enable, disable)) in RUNS.items():
            breaks = "fuse_matmul" if (name, number) == BREAKS else None
            wrapper = self.double.make_wrapper(name, sorted(enable), sorted(disable), breaks, ops=ops or (),
                                               eager="wrong")
            if ops is None:
                wrapper.last_used = Unprintable()  # what nvscope reads a fusion's ops from when it first sees it
            with audit() as log:  # nvscope sees it now: its identity is computed before any scope
                wrapper(X)
            assert log.records[0].info.instance == number
            self.wrappers[name, number] = wrapper

    # -- the reference model --

    def top(self) -> Pair:
        return resolve(self.model, None)

    def merged(self, scope: nv_options) -> Pair:
        return resolve([*self.model, scope], None)

    def expected(self) -> OptionSet:
        enable, disable = self.top()
        return OptionSet(enable, disable)

    def check(self) -> None:
        got = current_options()
        enable, disable = self.top()
        assert got.enable == enable and got.disable == disable, (got, self.top())
        for fusion in FUSIONS:
            got = current_options(fusion)
            assert (got.enable, got.disable) == resolve(self.model, fusion), (fusion, got)
        self.run_fusions(audited=False)

    def shares(self) -> bool:
        """The model's sharing (issue 38): the innermost scope that sets ``share=`` decides; off when none does. It
        changes no option: only where a fusion at its own options runs (nvscope's partition, not Thunder's path)."""
        chosen = [scope.share for scope in self.model if scope.share is not None]
        return bool(chosen) and bool(chosen[-1])

    def on_error(self) -> str:
        """The model's on_error: the innermost scope that sets one decides; "raise" when none does."""
        chosen = [scope.on_error for scope in self.model if scope.on_error is not None]
        return chosen[-1] if chosen else "raise"

    def falls_back(self) -> bool:
        return self.on_error() == "fallback"

    def routed(self, fusion: nvscope.FusionInfo) -> bool:
        """The model's ``run=``: from the outermost scope in, a scope whose selector misses the fusion is skipped;
        ``inherit=False`` starts again from nvFuser; a scope that sets ``run=`` decides for the fusions it selects."""
        torch = False
        for scope in self.model:
            predicate = _predicates[id(scope)]
            if predicate is not None and not predicate(fusion):
                continue
            if not scope.inherit:
                torch = False
            if scope.run is not None:
                torch = scope.run == "torch"
        return torch

    def run_fusions(self, audited: bool) -> None:
        """Each of the double's fusions runs with the model's options for it, gated, over its compile-time ones."""
        for (name, number), (ops, static) in RUNS.items():
            fusion = RUN_INFOS[name, number]
            expected = laid_over(static, gated(resolve(self.model, fusion), ops))
            broken = (name, number) == BREAKS and "fuse_matmul" in expected[0]
            ran_before = len(self.double.executions)
            with audit() if audited else nullcontext() as log:
                routed = self.routed(fusion)
                if routed or (broken and self.on_error() == "torch"):
                    assert self.wrappers[name, number](X) == BY_TORCH, fusion  # its region, in PyTorch
                    if routed:
                        assert len(self.double.executions) == ran_before, fusion  # nvFuser never ran it
                    if log is not None:
                        record = log.records[-1]
                        assert record.info == fusion and record.route == "torch", (fusion, record)
                    continue
                if broken and not self.falls_back():
                    with pytest.raises(RuntimeError, match="INTERNAL ASSERT"):
                        self.wrappers[name, number](X)
                    continue
                assert self.wrappers[name, number](X) == BY_NVFUSER, fusion
            execution = self.double.executions[-1]
            ran = static if broken else expected  # a fusion that fell back ran its defaults
            assert (frozenset(execution.enable), frozenset(execution.disable)) == ran, (fusion, execution)
            if log is not None:
                record = log.records[-1]  # a first failure records the attempt, then the fallback
                assert record.info == fusion and (record.options.enable, record.options.disable) == expected
                if broken:
                    assert record.route == "fallback", (fusion, record)
                else:
                    assert (record.route == "default") == (expected == static and not self.shares()), \
                        (fusion, record)

    # -- rules --

    @initialize(target=scopes, enable=st.sampled_from(ENABLE), disable=st.sampled_from(DISABLE))
    def first_scope(self, enable: str, disable: str) -> nv_options:
        return self.make_scope([enable], [disable], True, False, "none")

    @rule(
        target=scopes,
        # id_model drawn twice as often: the only name both lists take, so the only one an inner scope can reverse
        enable=st.lists(st.sampled_from((*ENABLE, "id_model")), max_size=3),
        disable=st.lists(st.sampled_from((*DISABLE, "id_model")), max_size=3),
        inherit=st.booleans(),
        as_str=st.booleans(),
        chosen=st.sampled_from(["none"] * 3 + sorted(SELECTORS)),  # unselective scopes as often as not
        on_error=st.sampled_from([None, None, "raise", "fallback", "torch"]),
        share=st.sampled_from([None, None, True, False]),
        run=st.sampled_from([None, None, None, "torch", "nvfuser"]),
    )
    def make_scope(self, enable: list[str], disable: list[str], inherit: bool, as_str: bool,
                   chosen: str, on_error: str | None = None, share: bool | None = None,
                   run: str | None = None) -> nv_options:
        disable = [name for name in disable if name not in enable]  # one scope takes a name in one list only
        before = current_options()
        enable_arg: Any = enable[0] if as_str and len(enable) == 1 else enable
        value, predicate = SELECTORS[chosen]
        scope = nv_options(enable=enable_arg, disable=tuple(disable), inherit=inherit, fusions=value,
                           on_error=on_error, share=share, run=run)
        _predicates[id(scope)] = predicate
        assert scope.options == OptionSet(enable, disable)
        assert current_options() == before  # construction enters nothing
        self.all_scopes.append(scope)
        return scope

    @rule(scope=scopes)
    def enter(self, scope: nv_options) -> None:
        result = scope.__enter__()
        self.entered.append(scope)
        self.model.append(scope)
        assert result == self.expected()

    @precondition(lambda self: bool(self.entered))
    @rule()
    def reenter_top(self) -> None:
        """The innermost scope object, entered again nested in itself."""
        self.enter(self.entered[-1])

    @precondition(lambda self: bool(self.entered))
    @rule(data=st.data())
    def reenter_any_active(self, data: st.DataObject) -> None:
        """An object already active further out, entered again on top."""
        self.enter(data.draw(st.sampled_from(self.entered)))

    @precondition(lambda self: bool(self.entered))
    @rule()
    def exit(self) -> None:
        scope = self.entered.pop()
        self.model.pop()
        assert scope.__exit__(None, None, None) is None

    @precondition(lambda self: bool(self.entered))
    @rule()
    def exit_with_exception(self) -> None:
        scope = self.entered.pop()
        self.model.pop()
        assert not scope.__exit__(Boom, Boom(), None)

    @rule(scope=scopes)
    def exit_out_of_order(self, scope: nv_options) -> None:
        if self.entered and self.entered[-1] is scope:
            return  # that would be a valid exit
        with pytest.raises(RuntimeError):
            scope.__exit__(None, None, None)
        # and nothing changed (the invariant checks the options; check the frames too)
        if self.entered:
            self.entered[-1].__exit__(None, None, None)
            self.entered[-1].__enter__()

    @rule(block=blocks, data=st.data())
    def nested_block(self, block: Any, data: st.DataObject) -> None:
        """Run a tree of `with` blocks (some raising) on top of the hand-entered scopes."""
        pool = self.all_scopes or [nv_options()]

        def run(node: Any) -> None:
            index, raises, children = node
            scope = pool[index % len(pool)]
            _predicates.setdefault(id(scope), None)
            outer = self.top()
            try:
                with scope as active:
                    self.model.append(scope)
                    try:
                        self.check()
                        assert active == self.expected()
                        for child in children:
                            run(child)
                            self.check()
                        if raises:
                            raise Boom
                    finally:
                        self.model.pop()
            except Boom:
                if not raises:
                    raise  # a child's exception escaped its own handler
            assert self.top() == outer
            self.check()

        run(block)

    @precondition(lambda self: bool(self.all_scopes))
    @rule(data=st.data())
    def decorated_call(self, data: st.DataObject) -> None:
        scope = data.draw(st.sampled_from(self.all_scopes))
        expected = self.merged(scope)
        fusion = data.draw(st.sampled_from(FUSIONS))
        expected_for_fusion = resolve([*self.model, scope], fusion)

        @scope
        def body() -> tuple[OptionSet, OptionSet]:
            self.model.append(scope)
            try:
                self.run_fusions(audited=False)
            finally:
                self.model.pop()
            return current_options(), current_options(fusion)

        got, got_for_fusion = body()
        assert (got.enable, got.disable) == expected
        assert (got_for_fusion.enable, got_for_fusion.disable) == expected_for_fusion

    @rule()
    def run_audited(self) -> None:
        self.run_fusions(audited=True)

    @precondition(lambda self: len(self.captured) < 3)
    @rule()
    def capture(self) -> None:
        """A context copied here (an asyncio task's), with the model as it is now; it outlives the scopes."""
        self.captured.append((contextvars.copy_context(), list(self.model)))

    @precondition(lambda self: self.captured)
    @rule(data=st.data())
    def drop_captured(self, data: st.DataObject) -> None:
        """The task is done: its context, and the frames only it held, go away."""
        del self.captured[data.draw(st.integers(0, len(self.captured) - 1))]

    @rule(target=scopes, scope=scopes, inherit=st.booleans(), chosen=st.sampled_from(["same", *sorted(SELECTORS)]))
    def variant(self, scope: nv_options, inherit: bool, chosen: str) -> nv_options:
        """The options of a scope made before, with its selector (the same object) or another, and either inherit=:
        a policy interned for one must not serve another."""
        if chosen == "same":
            made = nv_options(scope.options, inherit=inherit, fusions=scope.fusions, on_error=scope.on_error,
                              share=scope.share)
            _predicates[id(made)] = _predicates[id(scope)]
        else:
            value, predicate = SELECTORS[chosen]
            made = nv_options(scope.options, inherit=inherit, fusions=value, on_error=scope.on_error,
                              share=scope.share)
            _predicates[id(made)] = predicate
        self.all_scopes.append(made)
        return made

    @invariant()
    def matches_the_model(self) -> None:
        self.check()
        assert len(self.entered) == len(self.model)

    @invariant()
    def copied_contexts_keep_their_scopes(self) -> None:
        """Fusions run in a copied context get the scopes it was copied in, whatever is open here now."""
        here = self.model
        try:
            for context, model in self.captured:
                self.model = model
                context.run(self.check)
        finally:
            self.model = here

    def teardown(self) -> None:
        # unwind whatever is still entered, checking each step, and leave no scope behind
        while self.entered:
            self.exit()
            self.check()
        assert current_options() == OptionSet()
        self.captured.clear()
        reset_nvscope()
        self.patches.undo()


# The programs (NVSCOPE_HYPOTHESIS_EXAMPLES of them in all, 1000 by default) run in parts, each a test of its own, so
# that pytest-xdist spreads them over its workers; each part draws its own random programs.
PARTS = 8
EXAMPLES = int(os.environ.get("NVSCOPE_HYPOTHESIS_EXAMPLES", "1000"))


@pytest.mark.parametrize("part", range(PARTS))
def test_scope_machine(part: int) -> None:
    run_state_machine_as_test(ScopeMachine, settings=settings(
        max_examples=max(1, EXAMPLES // PARTS + (part < EXAMPLES % PARTS)),
        stateful_step_count=20,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        derandomize=False,
    ))
