"""Decorators: ``@nv_options(...)`` (and `nvscope._core._scope.with_nv_options`) for functions, coroutines,
generators and async generators, through the base class `ScopeDecorator`; and `bind`, which carries the active scope
to other threads, tasks and later calls.

Between the frames (`nvscope._core._frames`) and the scope (`nvscope._core._scope`, whose `nv_options` inherits
`ScopeDecorator`), as torch keeps ``_contextlib`` below grad mode: the state and its verbs are small; how a body of
each kind runs under a scope is most of the code.

Generators (`_Steps`) follow what PEP 568 describes for generator context: a body runs in steps, and each step sees
the options of whoever resumes it, then the decorator's, then the scopes the body entered and has not exited; the
consumer never sees the body's scopes. The body's scopes are therefore kept as a list and rebuilt as frames over the
resuming consumer's frame at every step, instead of keeping the body's suspended frames, whose parents would be the
consumer's frames of an earlier step.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, Callable, Generator
from contextvars import Token
from types import TracebackType

from nvscope._core import _patches
from nvscope._core._frames import ACTIVE, NOTHING, Frame, enter_frame, note_run, reset, switch_frame
from nvscope._core._validate import shown as _shown

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time: `import nvscope` must stay light (nvscope/_core/_record.py)
    from typing import Any, ParamSpec, TypeVar

    P = ParamSpec("P")
    R = TypeVar("R")
    F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["ScopeDecorator", "bind", "decorate"]


class ScopeDecorator:
    """The base of `nvscope.nv_options`: a scope that is also a decorator, ``@nv_options(...)``, by inheritance (as
    torch's grad-mode classes inherit ``_DecoratorContextManager``). A subclass is a context manager that enters a
    frame and makes the frames `decorate` rebuilds for a generator body's steps: `_frame`, `_make`, `_report`."""

    __slots__ = ()

    def __call__(self, func: F) -> F:
        return decorate(self, func)

    def __enter__(self) -> object:
        raise NotImplementedError

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        raise NotImplementedError

    def _frame(self, parent: Frame | None, check: bool) -> Frame:
        """This scope's frame over ``parent``, after its entry checks (``check``: the policy check too)."""
        raise NotImplementedError

    def _make(self, parent: Frame | None) -> Frame:
        """This scope's frame over ``parent``, with no check (a scope already let in, rebuilt for a later step)."""
        raise NotImplementedError

    def _report(self, ran: int) -> None:
        """At a clean exit: what ran under the scope (`nvscope._core._frames.note_run`)."""
        raise NotImplementedError


def decorate(scope: ScopeDecorator, func: F) -> F:
    """Wrap ``func`` so its body runs in ``scope``; right for functions, coroutines, generators, async generators."""
    import inspect  # here, not at the top: it costs milliseconds that `import nvscope` should not pay

    if isinstance(func, type):
        raise TypeError(
            f"with_nv_options cannot decorate a class ({func.__qualname__}): it is ambiguous whether the constructor "
            "or every method should run under the options, and the name would no longer be a class. Decorate the "
            "methods that should (e.g. forward) instead."
        )
    if isinstance(func, (staticmethod, classmethod)):  # above @staticmethod/@classmethod: decorate what they hold
        return type(func)(decorate(scope, func.__func__))
    if not callable(func):
        raise TypeError(f"with_nv_options decorates a callable, not {type(func).__name__}: {_shown(func)}")
    if inspect.isasyncgenfunction(func):
        return _wrap_async_generator(func, scope, None)  # type: ignore[return-value]
    if inspect.isgeneratorfunction(func):
        return _wrap_generator(func, scope, None)  # type: ignore[return-value]
    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def coroutine_wrapper(*args: Any, **kwargs: Any) -> Any:
            # Runs in the awaiting task's context, but only while this coroutine runs: the awaiting code is
            # suspended until it returns, and other tasks have contexts of their own.
            with scope:
                return await func(*args, **kwargs)
        return coroutine_wrapper  # type: ignore[return-value]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with scope:
            return func(*args, **kwargs)
    return wrapper  # type: ignore[return-value]


class _Steps:
    """The frames of one generator body around each of its steps (a ``with`` block per resume).

    A step's base is the decorator's frame entered over the resuming consumer's frame (``scope``), or the frame
    `bind` captured (``captured``). On top of it go the body's own open scopes, rebuilt from ``body``: (owner, the
    pushed policy and fallback for a `push` left open or None, ran) per scope, outermost first. When the step ends,
    whatever the body left above the base becomes the new ``body``, and the consumer's frame is restored. A fusion
    that ran during the step counts for the consumer's frame of that step (or, for `bind`, the captured frames), as
    if the body were a nested ``with``. One generator cannot run two steps at once, so nothing here is shared.
    """

    __slots__ = ("base", "body", "captured", "checked", "consumer", "ran", "scope", "token")

    def __init__(self, scope: ScopeDecorator | None, captured: Frame | None) -> None:
        self.scope = scope
        self.captured = captured
        self.body: list[tuple[object, Frame | None, int]] = []
        self.base: Frame | None = None
        self.consumer: Frame | None = None
        self.ran = NOTHING  # the most that happened in any step: the decorator's exit report looks at this
        # The development-mode policy applies once per generator, at its first step: later steps (and the close
        # at garbage collection, which has no user frame to blame and must not raise) resume a scope already let in.
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
            else:  # a push() left open (adapters pop within one call): its policy as it was, over this step's
                assert pushed is not None
                frame = Frame(pushed.policy, frame, owner, pushed.on_error)
            frame.ran_earlier = ran
        self.consumer = consumer
        # The step demands the patches itself: the collector may close a generator after finalizing the frame it
        # captured (a reference cycle), and the body's cleanup then runs under that frame.
        _patches.demand(id(self))
        switch_frame(frame)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        base, consumer = self.base, self.consumer
        frame = ACTIVE.get()
        body: list[tuple[object, Frame | None, int]] = []
        ran = NOTHING  # what happened in this step under the frame looked at or one above it
        while frame is not base and frame is not None:
            ran = max(ran, frame.ran)
            owner = frame.owner
            body.append((owner, None if isinstance(owner, ScopeDecorator) else frame, max(ran, frame.ran_earlier)))
            frame = frame.parent
        if frame is not base:
            body = []  # the body exited below its base (the decorator's own scope): it has no scopes of its own left
        elif base is not None:
            ran = max(ran, base.ran)
        switch_frame(consumer)
        _patches.release(id(self))
        self.base = self.consumer = None
        body.reverse()
        self.body = [] if exc_type is not None else body  # an exception (StopIteration too) ends the body
        if ran:
            self.ran = max(self.ran, ran)
            # A bound generator's step counts for the captured scopes, all of them (`_count_and_reset`).
            note_run(consumer if self.scope is not None else base, ran, outward=self.scope is None)

    def finished(self) -> None:
        """The body returned: like a ``with`` block, the decorator reports what happened over all of its steps."""
        if self.scope is not None:
            self.scope._report(self.ran)


def _wrap_generator(func: Callable[..., Generator[Any, Any, Any]], scope: ScopeDecorator | None,
                    captured: Frame | None) -> Callable[..., Any]:
    # The shape of torch/utils/_contextlib.py's _wrap_generator: every resume of the body is one step.
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
    """Capture the scope active now and return ``func`` wrapped to run under it, wherever and whenever it is called.

    A new thread starts with no scope (contextvars semantics), and so do executor workers. Use
    ``pool.submit(nvscope.bind(work), x)`` or ``Thread(target=nvscope.bind(work))`` to carry the caller's options
    along. Only nvscope's variable is carried, so one bound callable may run in many threads at once (unlike
    ``contextvars.copy_context().run``, which cannot be entered twice concurrently). The body of an ``async def``
    runs under the captured scope when awaited, and each step of a generator or async generator body runs under it,
    whatever scope the code that resumes it is in. Fusions run by bound work count for the captured scopes.
    """
    import inspect

    if not callable(func):
        raise TypeError(f"bind takes a function, not {type(func).__name__}: {_shown(func)} (to carry a scope into a "
                        "generator or coroutine, bind the function that creates it, before calling it)")
    frame = ACTIVE.get()
    if inspect.isasyncgenfunction(func):
        return _wrap_async_generator(func, None, frame)
    if inspect.isgeneratorfunction(func):
        return _wrap_generator(func, None, frame)
    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def bound_coroutine(*args: Any, **kwargs: Any) -> Any:
            token = enter_frame(frame)
            try:
                return await func(*args, **kwargs)
            finally:
                _count_and_reset(frame, token)
        return bound_coroutine  # type: ignore[return-value]

    @functools.wraps(func)
    def bound(*args: P.args, **kwargs: P.kwargs) -> R:
        token = enter_frame(frame)
        try:
            return func(*args, **kwargs)
        finally:
            _count_and_reset(frame, token)
    return bound


def _count_and_reset(frame: Frame | None, token: Token[Frame | None]) -> None:
    """Bound work ended: what ran under the captured frame counts for it and every scope around it. Not only the
    innermost, as an exit would: that scope may have exited already (the bound work runs later, or elsewhere), and
    then it could not pass the fusion on to the enclosing scopes that are still open."""
    if frame is not None:
        note_run(frame, frame.ran, outward=True)
    reset(token)
