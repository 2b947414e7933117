"""Model-based test: random programs of enters, exits, nesting, exceptions and re-entry against a reference model.

The model is a stack of (enable, disable) frozenset pairs; an entry pushes ``own`` merged with the top (or ``own``
alone for ``inherit=False``), an exit pops. After every step ``current_options()`` must equal the top of the model.
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

ENABLE = ("fuse_matmul", "static_fusion_count", "kernel_profile")
DISABLE = ("matmul_expr_eval", "fallback", "parallel_compile")

Pair = tuple[frozenset[str], frozenset[str]]
EMPTY_PAIR: Pair = (frozenset(), frozenset())


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
        self.model: list[Pair] = []  # the reference: effective (enable, disable) per entered scope
        self.all_scopes: list[nv_options] = []

    # -- the reference model --

    def top(self) -> Pair:
        return self.model[-1] if self.model else EMPTY_PAIR

    @staticmethod
    def merged(top: Pair, scope: nv_options) -> Pair:
        own = (scope.options.enable, scope.options.disable)
        if not scope.inherit:
            return own
        return top[0] | own[0], top[1] | own[1]

    def expected(self) -> OptionSet:
        enable, disable = self.top()
        return OptionSet(enable, disable)

    def check(self) -> None:
        got = current_options()
        enable, disable = self.top()
        assert got.enable == enable and got.disable == disable, (got, self.top())

    # -- rules --

    @initialize(target=scopes, enable=st.sampled_from(ENABLE), disable=st.sampled_from(DISABLE))
    def first_scope(self, enable: str, disable: str) -> nv_options:
        return self.make_scope([enable], [disable], True, False)

    @rule(
        target=scopes,
        enable=st.lists(st.sampled_from(ENABLE), max_size=3),
        disable=st.lists(st.sampled_from(DISABLE), max_size=3),
        inherit=st.booleans(),
        as_str=st.booleans(),
    )
    def make_scope(self, enable: list[str], disable: list[str], inherit: bool, as_str: bool) -> nv_options:
        before = current_options()
        enable_arg: Any = enable[0] if as_str and len(enable) == 1 else enable
        scope = nv_options(enable=enable_arg, disable=tuple(disable), inherit=inherit)
        assert scope.options == OptionSet(enable, disable)
        assert current_options() == before  # construction enters nothing
        self.all_scopes.append(scope)
        return scope

    @rule(scope=scopes)
    def enter(self, scope: nv_options) -> None:
        expected = self.merged(self.top(), scope)
        result = scope.__enter__()
        self.entered.append(scope)
        self.model.append(expected)
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
            expected = self.merged(self.top(), scope)
            outer = self.top()
            try:
                with scope as active:
                    self.model.append(expected)
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
        expected = self.merged(self.top(), scope)

        @scope
        def body() -> OptionSet:
            return current_options()

        got = body()
        assert (got.enable, got.disable) == expected

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
