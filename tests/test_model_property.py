"""Model-based test: random programs of enters, exits, nesting, exceptions and re-entry against a reference model.

The model is the stack of entered scopes; what a fusion gets is computed from it by a reference resolver written
here from the documented rules, not from nvscope's code: from the outermost scope in, a scope whose ``fusions=``
selector (a reference predicate here) does not match the fusion is skipped; ``inherit=False`` starts again from
its own options; otherwise its options are laid over what is below, a name it requests the other way replacing the
outer request. After every step ``current_options()`` (scopes that reach every fusion) and ``current_options(info)``
for a few fusions must equal the model's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, precondition, rule

import nvscope
from nvscope import OptionSet, current_options, nv_options

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
)
# fusions= values with a reference predicate each (written without nvscope's selector code).
SELECTORS: dict[str, tuple[Any, Any]] = {
    "none": (None, None),
    "forward glob": ("forward/*", lambda f: f.phase == "forward"),
    "one id": ("backward/nvFusion1", lambda f: f.phase == "backward" and f.name == "nvFusion1"),
    "list": (["backward/*", "*/nvFusion0"], lambda f: f.phase == "backward" or f.name == "nvFusion0"),
    "phase": (nvscope.phase("call", "backward"), lambda f: f.phase in ("call", "backward")),
    "holding": (nvscope.holding("linear"), lambda f: "linear" in (f.ops or ())),
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

    # -- rules --

    @initialize(target=scopes, enable=st.sampled_from(ENABLE), disable=st.sampled_from(DISABLE))
    def first_scope(self, enable: str, disable: str) -> nv_options:
        return self.make_scope([enable], [disable], True, False, "none")

    @rule(
        target=scopes,
        enable=st.lists(st.sampled_from(ENABLE), max_size=3),
        disable=st.lists(st.sampled_from(DISABLE), max_size=3),
        inherit=st.booleans(),
        as_str=st.booleans(),
        chosen=st.sampled_from(sorted(SELECTORS)),
    )
    def make_scope(self, enable: list[str], disable: list[str], inherit: bool, as_str: bool,
                   chosen: str) -> nv_options:
        disable = [name for name in disable if name not in enable]  # one scope takes a name in one list only
        before = current_options()
        enable_arg: Any = enable[0] if as_str and len(enable) == 1 else enable
        value, predicate = SELECTORS[chosen]
        scope = nv_options(enable=enable_arg, disable=tuple(disable), inherit=inherit, fusions=value)
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
            return current_options(), current_options(fusion)

        got, got_for_fusion = body()
        assert (got.enable, got.disable) == expected
        assert (got_for_fusion.enable, got_for_fusion.disable) == expected_for_fusion

    @invariant()
    def matches_the_model(self) -> None:
        self.check()
        assert len(self.entered) == len(self.model)

    def teardown(self) -> None:
        # unwind whatever is still entered, checking each step, and leave no scope behind
        while self.entered:
            self.exit()
            self.check()
        assert current_options() == OptionSet()


ScopeMachine.TestCase.settings = settings(
    max_examples=1000,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    derandomize=False,
)
TestScopeMachine = ScopeMachine.TestCase
