"""Decorators: ``@nv_options(...)`` for functions, coroutines, generators and async generators (`ScopeDecorator`),
and `bind`, which carries the active scope to other threads, tasks and later calls.

A generator body runs in steps (PEP 568): each sees its resumer's options, then the decorator's, then the scopes the
body left open, rebuilt over the resumer's frame at every step; the consumer never sees them."""

from __future__ import annotations

import functools

from nvscope._core import _patches
from nvscope._core._frames import ACTIVE, NOTHING, Frame, enter_frame, note_run, reset
from nvscope._core._validate import shown as _shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Callable, Generator
    from types import TracebackType
    from typing import Any, ParamSpec, TypeVar

    P = ParamSpec("P")
    R = TypeVar("R")
    F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["ScopeDecorator", "bind", "decorate"]


class ScopeDecorator:
    """The base of `nvscope.nv_options`: a scope that is also a decorator. A subclass enters frames and makes those
    a generator body's steps rebuild: `_frame` (over a parent, after its entry checks; ``check``: the policy check
    too), `_make` (unchecked, for a later step) and `_report` (at a clean exit, what ran under it)."""

    __slots__ = ()

    def __call__(self, func: F) -> F:
        return decorate(self, func)

    if TYPE_CHECKING:
        def __enter__(self) -> object: ...

        def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                     tb: TracebackType | None) -> None: ...

        def _frame(self, parent: Frame | None, check: bool) -> Frame: ...

        def _make(self, parent: Frame | None) -> Frame: ...

        def _report(self, ran: int) -> None: ...


def decorate(scope: ScopeDecorator, func: F) -> F:
    """Wrap ``func`` so its body runs in ``scope``; right for functions, coroutines, generators, async generators."""
    if isinstance(func, type):
        raise TypeError(
            f"with_nv_options cannot decorate a class ({func.__qualname__}): it is ambiguous whether the constructor "
            "or every method should run under the options, and the name would no longer be a class. Decorate the "
            "methods that should (e.g. forward) instead."
        )
    if isinstance(func, (staticmethod, classmethod)):
        return type(func)(decorate(scope, func.__func__))
    if not callable(func):
        raise TypeError(f"with_nv_options decorates a callable, not {type(func).__name__}: {_shown(func)}")
    return _wrap(func, scope, None)  # type: ignore[no-any-return]


def _wrap(func: Callable[..., Any], scope: ScopeDecorator | None, captured: Frame | None) -> Any:
    """``func`` run in ``scope``, or with no scope in the frame `bind` ``captured``; each call, generator or
    coroutine steps in on its own."""
    import inspect  # not at the top: `import nvscope` stays light

    if inspect.isasyncgenfunction(func):
        return _wrap_async_generator(func, scope, captured)
    if inspect.isgeneratorfunction(func):
        return _wrap_generator(func, scope, captured)
    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def coroutine_wrapper(*args: Any, **kwargs: Any) -> Any:
            with scope if scope is not None else _Steps(None, captured):
                return await func(*args, **kwargs)
        return coroutine_wrapper

    if scope is None:  # a bound call: the captured frame as it is (per call, a `_Steps` would cost twice as much)
        @functools.wraps(func)
        def bound(*args: Any, **kwargs: Any) -> Any:
            token = enter_frame(captured)
            try:
                return func(*args, **kwargs)
            finally:
                frame = ACTIVE.get()
                while frame is not captured and frame is not None:  # scopes the call left open end with it
                    note_run(captured, frame.ran)
                    frame = frame.parent
                if captured is not None:  # counts for every scope around it: they may have exited already
                    note_run(captured, captured.ran, outward=True)
                reset(token)
        return bound

    entered = scope  # not None here

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with entered:
            return func(*args, **kwargs)
    return wrapper


class _Steps:
    """The frames of one generator body (or one bound call) around each step: the decorator's frame over the
    resumer's (or the frame `bind` captured), with the body's open scopes (``body``: owner, a left-open `push`'s frame
    or None, ran) on top."""

    __slots__ = ("base", "body", "captured", "checked", "consumer", "ran", "scope")

    def __init__(self, scope: ScopeDecorator | None, captured: Frame | None) -> None:
        self.scope = scope
        self.captured = captured
        self.body: list[tuple[object, Frame | None, int]] = []
        self.base: Frame | None = None
        self.consumer: Frame | None = None
        self.ran = NOTHING  # the most that happened in any step, for the decorator's exit report
        # The development-mode check runs at the first step only: a close at garbage collection must not raise.
        self.checked = False

    def __enter__(self) -> None:
        consumer = ACTIVE.get()
        if self.scope is None:
            frame = self.captured
        else:
            frame = self.scope._frame(consumer, check=not self.checked)  # may raise: nothing is entered then
            self.checked = True
        self.base = frame
        for owner, pushed, ran in self.body:
            if isinstance(owner, ScopeDecorator):
                frame = owner._make(frame)
            else:  # a push() left open: its policy as it was, over this step's frame
                assert pushed is not None
                frame = Frame(pushed.policy, frame, owner, pushed.on_error)
            frame.ran_earlier = ran
        self.consumer = consumer
        # The step demands the patches itself: the collector may close a generator after freeing its captured frame.
        _patches.demand(id(self))
        ACTIVE.set(frame)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        base, consumer = self.base, self.consumer
        frame = ACTIVE.get()
        body: list[tuple[object, Frame | None, int]] = []
        ran = NOTHING
        while frame is not base and frame is not None:
            ran = max(ran, frame.ran)
            owner = frame.owner
            body.append((owner, None if isinstance(owner, ScopeDecorator) else frame, max(ran, frame.ran_earlier)))
            frame = frame.parent
        if frame is not base:
            body = []  # the body exited below its base: it has no scopes of its own left
        elif base is not None:
            ran = max(ran, base.ran)
        ACTIVE.set(consumer)
        _patches.release(id(self))
        self.base = self.consumer = None
        body.reverse()
        self.body = [] if exc_type is not None else body  # an exception (StopIteration too) ends the body
        if ran:
            self.ran = max(self.ran, ran)
            note_run(consumer if self.scope is not None else base, ran, outward=self.scope is None)

    def finished(self) -> None:
        """The body returned: the decorator reports what ran over all of its steps."""
        if self.scope is not None:
            self.scope._report(self.ran)


def _wrap_generator(func: Callable[..., Generator[Any, Any, Any]], scope: ScopeDecorator | None,
                    captured: Frame | None) -> Callable[..., Any]:
    @functools.wraps(func)
    def generator_wrapper(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        gen = func(*args, **kwargs)
        steps = _Steps(scope, captured)
        try:
            with steps:
                response = gen.send(None)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    with steps:
                        gen.close()
                    raise
                except BaseException as error:
                    with steps:
                        response = gen.throw(error)
                else:
                    with steps:
                        response = gen.send(request)
        except StopIteration as stop:
            steps.finished()
            return stop.value
    return generator_wrapper


def _wrap_async_generator(func: Callable[..., AsyncGenerator[Any, Any]], scope: ScopeDecorator | None,
                          captured: Frame | None) -> Callable[..., Any]:
    @functools.wraps(func)
    async def async_generator_wrapper(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, Any]:
        agen = func(*args, **kwargs)
        steps = _Steps(scope, captured)
        try:
            with steps:
                response = await agen.asend(None)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    with steps:
                        await agen.aclose()
                    raise
                except BaseException as error:
                    with steps:
                        response = await agen.athrow(error)
                else:
                    with steps:
                        response = await agen.asend(request)
        except StopAsyncIteration:
            steps.finished()
    return async_generator_wrapper


def bind(func: Callable[P, R]) -> Callable[P, R]:
    """``func`` wrapped to run under the scope active now, wherever and whenever it is called: new threads start
    with no scope, ``pool.submit(nvscope.bind(work), x)`` carries it. Fusions it runs count for the captured scopes."""
    if not callable(func):
        raise TypeError(f"bind takes a function, not {type(func).__name__}: {_shown(func)} (to carry a scope into a "
                        "generator or coroutine, bind the function that creates it, before calling it)")
    return _wrap(func, None, ACTIVE.get())  # type: ignore[no-any-return]
