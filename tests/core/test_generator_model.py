"""Model-based test of scopes across generator steps (issue 9): decorated and bound, sync and async, with threads.

A Hypothesis state machine runs random programs against a reference model small enough to check by eye:

* the consumer's stack of open scopes (main thread), each an `Entry` (own options, inherit, whether a fusion ran);
* per live generator: its base (the decorator's scope over the consumer's stack *at each resume*, or the stack
  `bind` captured), its body's own stack, and whether any of its steps ran a fusion;
* the options anything sees = ``fold(stack)``: each entry merges over the one below, ``inherit=False`` starts afresh.

The generator bodies are interpreters driven by what the machine sends in (enter a scope, exit, run a fusion, yield,
finish, raise) and report, at each step, the options they see and the options nvFuser received. A fusion counts for
every scope open where it runs (consumer, captured, body, decorator), unless no options at all apply there; a scope
that exits normally without one, with options of its own, must raise exactly one NoFusionWarning (the decorator's
when the body returns, not when it is closed or raises). Async generators are stepped without an event loop (their
bodies suspend with ``asyncio.sleep(0)``, which needs none), so every run is deterministic.

``NVSCOPE_HYPOTHESIS_EXAMPLES`` sets the number of programs (200 by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import os
import threading
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
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

import nvscope
from nvscope import OptionSet, bind, current_options, nv_options

ENABLE = ("fuse_matmul", "kernel_profile", "static_fusion_count")
DISABLE = ("matmul_expr_eval", "fallback")
MAX_LIVE = 4  # generators alive at once
EXAMPLES = int(os.environ.get("NVSCOPE_HYPOTHESIS_EXAMPLES", "200"))

Report = tuple[OptionSet, OptionSet | None]  # (what the body sees, what nvFuser received if it ran a fusion)
Fuse = Callable[[], OptionSet]


class Boom(Exception):
    """Raised by a body, or thrown into it, and not handled: the body unwinds and ends."""


class Handled(Exception):
    """Thrown into a body, which catches it at its innermost yield and goes on."""


class Entry:
    """One open scope in the model."""

    __slots__ = ("ran", "scope")

    def __init__(self, scope: nv_options) -> None:
        self.scope = scope
        self.ran = False


def fold(scopes: list[nv_options]) -> OptionSet:
    options = OptionSet()
    for scope in scopes:
        options = options | scope.options if scope.inherit else scope.options
    return options


# --- the bodies: one instruction per step --------------------------------------------------------------------------
# An instruction is None (just yield again), ("enter", scope), ("exit",), ("fuse",), ("finish",) or ("raise",).


def sync_body(fuse: Fuse | None) -> Callable[[], Iterator[Report]]:
    """Real ``with`` blocks across yields: each entered scope is a nested level, delegated to with ``yield from``."""

    def level() -> Any:
        report: Report = (current_options(), None)
        while True:
            try:
                instruction = yield report
            except Handled:
                instruction = None
            report = (current_options(), None)
            if instruction is None:
                continue
            op = instruction[0]
            if op == "enter":
                with instruction[1]:
                    outcome = yield from level()
                if outcome == "finish":
                    return "finish"
                report = (current_options(), None)
            elif op in ("exit", "finish"):
                return op
            elif op == "fuse":
                assert fuse is not None
                report = (current_options(), fuse())
            elif op == "raise":
                raise Boom

    def body() -> Iterator[Report]:
        yield from level()

    return body


def async_body(fuse: Fuse | None) -> Callable[[], AsyncIterator[Report]]:
    """The same protocol in an async generator (no ``yield from`` there): entered scopes on a list, exited as ``with``
    would exit them, and a suspension inside every step."""

    async def body() -> AsyncIterator[Report]:
        entered: list[nv_options] = []
        try:
            report: Report = (current_options(), None)
            while True:
                try:
                    instruction = yield report
                except Handled:
                    instruction = None
                await asyncio.sleep(0)
                fused = None
                op = None if instruction is None else instruction[0]
                if op == "enter":
                    instruction[1].__enter__()
                    entered.append(instruction[1])
                elif op == "exit":
                    entered.pop().__exit__(None, None, None)
                elif op == "finish":
                    while entered:
                        entered.pop().__exit__(None, None, None)
                    return
                elif op == "fuse":
                    assert fuse is not None
                    fused = fuse()
                elif op == "raise":
                    raise Boom
                report = (current_options(), fused)
        except BaseException as error:
            while entered:
                entered.pop().__exit__(type(error), error, error.__traceback__)
            raise

    return body


def drive(awaitable: Any) -> Any:
    """Run an awaitable that suspends only with bare yields (``asyncio.sleep(0)``) to its end, without a loop."""
    steps = awaitable.__await__()
    while True:
        try:
            steps.send(None)
        except StopIteration as stop:
            return stop.value


def in_thread(call: Callable[[], Any]) -> Any:
    """``call()`` in a new thread (which starts with no scope): its result, or its exception re-raised here."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as error:
            outcome.append((False, error))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert outcome, "the thread hung"
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def own_context(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a rule in its program's own `contextvars.Context`: a scope left open by one (failing) program must not
    leak into the next, or Hypothesis would see later programs fail at random instead of shrinking the first."""

    @functools.wraps(method)
    def run(self: GeneratorScopes, *args: Any, **kwargs: Any) -> Any:
        return self.context.run(method, self, *args, **kwargs)

    return run


class Gen:
    """A live generator and its model."""

    def __init__(self, obj: Any, is_async: bool, scope: nv_options | None, captured: list[Entry] | None) -> None:
        self.obj = obj
        self.is_async = is_async
        self.scope = scope  # the decorator's, or None for a bound generator
        self.captured = captured  # the consumer's entries at bind time (bound generators)
        self.body: list[Entry] = []
        self.started = False
        self.ran = False

    def __repr__(self) -> str:
        kind = "async" if self.is_async else "sync"
        return f"<{kind} {'bound' if self.scope is None else repr(self.scope)} body={[e.scope for e in self.body]}>"

    # the real calls
    def send(self, value: Any) -> Any:
        return drive(self.obj.asend(value)) if self.is_async else self.obj.send(value)

    def throw(self, error: BaseException) -> Any:
        return drive(self.obj.athrow(error)) if self.is_async else self.obj.throw(error)

    def close(self) -> None:
        if self.is_async:
            drive(self.obj.aclose())
        else:
            self.obj.close()

    @property
    def done_error(self) -> type[BaseException]:
        return StopAsyncIteration if self.is_async else StopIteration


scopes_strategy = st.builds(
    lambda enable, disable, inherit: nv_options(enable=enable, disable=disable, inherit=inherit),
    st.lists(st.sampled_from(ENABLE), max_size=2, unique=True),
    st.lists(st.sampled_from(DISABLE), max_size=2, unique=True),
    st.booleans(),
)


class GeneratorScopes(RuleBasedStateMachine):
    fuse: Fuse | None = None  # set by the test: a real fusion through nvscope's adapter, or None without torch

    scopes = Bundle("scopes")

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[Entry] = []  # the consumer's open scopes, main thread, innermost last
        self.gens: list[Gen] = []
        self.bound: list[tuple[Callable[[], Report], list[Entry]]] = []
        self.expected_warnings: list[str] = []
        self.context = contextvars.Context()

    # -- the model --

    def warn_unless_ran(self, scope: nv_options, ran: bool) -> None:
        """A normal exit: nvscope warns iff the scope has options, no fusion ran under it, and an adapter is in."""
        if self.fuse is not None and scope.options and not ran:
            self.expected_warnings.append(repr(scope))

    def base(self, gen: Gen, consumer: list[Entry]) -> list[nv_options]:
        if gen.scope is None:
            assert gen.captured is not None
            return [e.scope for e in gen.captured]
        return [*(e.scope for e in consumer), gen.scope]

    def fused(self, options: OptionSet, *entries: list[Entry]) -> bool:
        """A fusion ran with ``options`` where ``entries`` were open: it counts for all of them, as the adapters count
        it, unless no options applied at all (an empty ``inherit=False`` scope innermost), which counts for none."""
        if options:
            for entry in (e for group in entries for e in group):
                entry.ran = True
        return bool(options)

    @contextlib.contextmanager
    def exactly_the_expected_warnings(self) -> Iterator[None]:
        """The NoFusionWarnings raised inside are those `warn_unless_ran` expected (before or inside), in order."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
        got = [str(w.message).partition(" exited")[0]
               for w in caught if issubclass(w.category, nvscope.NoFusionWarning)]
        expected, self.expected_warnings = self.expected_warnings, []
        assert got == expected
        other = [w for w in caught if not issubclass(w.category, nvscope.NoFusionWarning)]
        assert other == [], [str(w.message) for w in other]

    # -- the consumer --

    @initialize(target=scopes, scope=scopes_strategy)
    def first_scope(self, scope: nv_options) -> nv_options:
        return scope

    @rule(target=scopes, scope=scopes_strategy)
    def new_scope(self, scope: nv_options) -> nv_options:
        return scope

    @rule(scope=scopes)
    @own_context
    def consumer_enter(self, scope: nv_options) -> None:
        assert scope.__enter__() == fold([*(e.scope for e in self.stack), scope])
        self.stack.append(Entry(scope))

    @precondition(lambda self: bool(self.stack))
    @rule(raising=st.booleans())
    @own_context
    def consumer_exit(self, raising: bool) -> None:
        entry = self.stack.pop()
        with self.exactly_the_expected_warnings():
            if raising:
                entry.scope.__exit__(Boom, Boom(), None)
            else:
                self.warn_unless_ran(entry.scope, entry.ran)
                entry.scope.__exit__(None, None, None)

    @precondition(lambda self: self.fuse is not None)
    @rule()
    @own_context
    def consumer_fuse(self) -> None:
        assert self.fuse is not None
        options = fold([e.scope for e in self.stack])
        assert self.fuse() == options
        self.fused(options, self.stack)

    # -- generators --

    @initialize(scope=scopes, is_async=st.booleans(), bound=st.booleans())
    def first_generator(self, scope: nv_options, is_async: bool, bound: bool) -> None:
        self.new_generator(scope, is_async, bound)

    @precondition(lambda self: len(self.gens) < MAX_LIVE)
    @rule(scope=scopes, is_async=st.booleans(), bound=st.booleans())
    @own_context
    def new_generator(self, scope: nv_options, is_async: bool, bound: bool) -> None:
        body = async_body(self.fuse) if is_async else sync_body(self.fuse)
        if bound:
            self.gens.append(Gen(bind(body)(), is_async, None, list(self.stack)))
        else:
            self.gens.append(Gen(scope(body)(), is_async, scope, None))

    def resume(self, gen: Gen, call: Callable[[], Any], instruction: Any, thread: bool) -> None:
        """One step of ``gen``: the model's expectation, then the real call (in a new thread if ``thread``)."""
        consumer = [] if thread else self.stack
        op = "next" if instruction is None else instruction[0]
        fused: OptionSet | None = None
        error: type[BaseException] | None = None
        if op == "enter":
            gen.body.append(Entry(instruction[1]))
        elif op == "exit":
            entry = gen.body.pop()
            self.warn_unless_ran(entry.scope, entry.ran)
        elif op == "fuse":
            fused = fold([*self.base(gen, consumer), *(e.scope for e in gen.body)])
            base = gen.captured if gen.scope is None else consumer
            assert base is not None
            gen.ran = self.fused(fused, gen.body, base) or gen.ran
        elif op == "finish":
            while gen.body:
                entry = gen.body.pop()
                self.warn_unless_ran(entry.scope, entry.ran)
            if gen.scope is not None:
                self.warn_unless_ran(gen.scope, gen.ran)
            error = gen.done_error
        elif op in ("raise", "throw"):
            gen.body.clear()  # unwound by an exception: no warnings
            error = Boom
        expected = (fold([*self.base(gen, consumer), *(e.scope for e in gen.body)]), fused)
        with self.exactly_the_expected_warnings():
            if error is not None:
                with pytest.raises(error):
                    in_thread(call) if thread else call()
                self.gens.remove(gen)
            else:
                assert (in_thread(call) if thread else call()) == expected
        gen.started = True

    def started(self, data: st.DataObject, thread: bool, among: list[Gen] | None = None) -> Gen:
        """A live generator, drawn; started first (its first resume, checked like any other) if it was not."""
        gen = data.draw(st.sampled_from(self.gens if among is None else among), label="generator")
        if not gen.started:
            self.resume(gen, lambda: gen.send(None), None, thread)
        return gen

    def send(self, gen: Gen, instruction: Any, thread: bool) -> None:
        self.resume(gen, lambda: gen.send(instruction), instruction, thread)

    @precondition(lambda self: bool(self.gens))
    @rule(data=st.data(), how=st.sampled_from(["next", "send", "throw"]), thread=st.booleans())
    @own_context
    def step(self, data: st.DataObject, how: str, thread: bool) -> None:
        """A step that changes nothing in the body: next(), send(None), or a throw() the body handles."""
        gen = self.started(data, thread)
        if how == "next":
            self.resume(gen, (lambda: drive(gen.obj.__anext__())) if gen.is_async else (lambda: next(gen.obj)),
                        None, thread)
        elif how == "send":
            self.send(gen, None, thread)
        else:
            self.resume(gen, lambda: gen.throw(Handled()), None, thread)

    @precondition(lambda self: bool(self.gens))
    @rule(data=st.data(), scope=scopes, thread=st.booleans())
    @own_context
    def body_enter(self, data: st.DataObject, scope: nv_options, thread: bool) -> None:
        self.send(self.started(data, thread), ("enter", scope), thread)

    @precondition(lambda self: any(g.body for g in self.gens))
    @rule(data=st.data(), thread=st.booleans())
    @own_context
    def body_exit(self, data: st.DataObject, thread: bool) -> None:
        self.send(self.started(data, thread, [g for g in self.gens if g.body]), ("exit",), thread)

    @precondition(lambda self: bool(self.gens) and self.fuse is not None)
    @rule(data=st.data(), thread=st.booleans())
    @own_context
    def body_fuse(self, data: st.DataObject, thread: bool) -> None:
        self.send(self.started(data, thread), ("fuse",), thread)

    @precondition(lambda self: bool(self.gens))
    @rule(data=st.data(), how=st.sampled_from(["finish", "raise", "throw", "close"]), thread=st.booleans())
    @own_context
    def end(self, data: st.DataObject, how: str, thread: bool) -> None:
        """The body returns, raises, has an exception thrown in, or is closed (maybe before it ever started)."""
        gen = data.draw(st.sampled_from(self.gens), label="generator")
        run = in_thread if thread else (lambda call: call())
        if how in ("finish", "raise"):
            self.started(data, thread, [gen])
            self.send(gen, (how,), thread)
        elif how == "close":
            with self.exactly_the_expected_warnings():  # unwound by GeneratorExit: no warnings
                run(gen.close)
            self.gens.remove(gen)
        elif gen.started:
            self.resume(gen, lambda: gen.throw(Boom()), ("throw",), thread)
        else:  # raised at once: neither the body nor the decorator ever ran
            with self.exactly_the_expected_warnings(), pytest.raises(Boom):
                run(lambda: gen.throw(Boom()))
            self.gens.remove(gen)

    # -- bound callables, run later, here or in another thread --

    @rule()
    @own_context
    def bind_function(self) -> None:
        fuse = self.fuse

        def work() -> Report:
            return current_options(), None if fuse is None else fuse()

        self.bound.append((bind(work), list(self.stack)))

    @precondition(lambda self: bool(self.bound))
    @rule(data=st.data(), thread=st.booleans())
    @own_context
    def run_bound(self, data: st.DataObject, thread: bool) -> None:
        work, captured = data.draw(st.sampled_from(self.bound))
        expected = fold([e.scope for e in captured])
        with self.exactly_the_expected_warnings():
            assert (in_thread(work) if thread else work()) == (expected, None if self.fuse is None else expected)
        if self.fuse is not None:
            self.fused(expected, captured)

    # -- checks --

    @invariant()
    @own_context
    def consumer_sees_its_own_stack(self) -> None:
        assert current_options() == fold([e.scope for e in self.stack])

    @own_context
    def teardown(self) -> None:
        with self.exactly_the_expected_warnings():
            for gen in self.gens:
                gen.close()
            while self.stack:
                entry = self.stack.pop()
                self.warn_unless_ran(entry.scope, entry.ran)
                entry.scope.__exit__(None, None, None)
        assert current_options() == OptionSet()


@pytest.fixture
def fuse(request: pytest.FixtureRequest) -> Fuse | None:
    """A fusion through the real adapter (conftest's ``fusion``); None where torch is missing (no fusion rules)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    fusion: Fuse = request.getfixturevalue("fusion")
    return fusion


def test_generator_scopes_match_the_model(fuse: Fuse | None) -> None:
    machine = type("Machine", (GeneratorScopes,), {"fuse": staticmethod(fuse) if fuse is not None else None})
    run_state_machine_as_test(machine, settings=settings(  # type: ignore[arg-type]
        max_examples=EXAMPLES,
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    ))
