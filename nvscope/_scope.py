"""The scope: one ContextVar holding the nvFuser options active here, and the verbs that set it.

Why a ContextVar: it is what threads (each starts empty), asyncio tasks (each runs in a copy of its creator's
context) and generators need, and reading it costs about 20 ns, which matters because the executor adapters read it
at every fusion execution. The variable holds a `Frame` (or None when no scope is active): the frame's ``options``
are already merged with the enclosing scopes, so the hot path does one ``get()`` and one attribute load, never a
merge.

Why no token on the `nv_options` instance: a ContextDecorator that keeps ``self._token`` breaks as soon as the same
object is entered twice, nested or from two threads (numpy#24013 hit exactly this in ``errstate``). Each entry
instead pushes a frame that remembers its parent, and exit restores the parent of the frame it finds, after
checking that the frame is its own. The instance holds only its validated options, so one object can be shared by
any number of threads, tasks and nested entries.

Generators (`_Steps`) follow what PEP 568 describes for generator context: a body runs in steps, and each step sees
the options of whoever resumes it, then the decorator's, then the scopes the body entered and has not exited; the
consumer never sees the body's scopes. The body's scopes are therefore kept as a list and rebuilt as frames over the
resuming consumer's frame at every step, instead of keeping the body's suspended frames, whose parents would be the
consumer's frames of an earlier step.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, Callable, Generator, Iterable
from contextvars import ContextVar, Token
from types import TracebackType

from nvscope import _devmode, _events
from nvscope._names import names as _names
from nvscope._names import shown as _shown
from nvscope._optionset import EMPTY, OptionSet

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time: `import nvscope` must stay light (nvscope/_record.py)
    from typing import Any, ParamSpec, TypeVar

    P = ParamSpec("P")
    R = TypeVar("R")
    F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["ACTIVE", "Frame", "bind", "current_options", "nv_options", "with_nv_options"]

class Frame:
    """One entered scope. ``options`` is the merged, effective set (None when empty, so the hot path tests ``is``)."""

    __slots__ = ("options", "owner", "parent", "ran", "ran_earlier")

    def __init__(self, options: OptionSet | None, parent: Frame | None, owner: object) -> None:
        self.options = options
        self.parent = parent
        self.owner = owner
        self.ran = False  # set by the adapters when a fusion executes under this frame
        # Set on a generator body's scope rebuilt for a later step (`_Steps`) when a fusion ran under it in an earlier
        # step: that fusion has already been counted below, so it only keeps the scope's exit from warning.
        self.ran_earlier = False


# The one piece of state. Adapters read ACTIVE.get() on their hot path; everything else goes through the verbs.
ACTIVE: ContextVar[Frame | None] = ContextVar("nvscope.active", default=None)

# Called (without arguments) before each non-empty scope is entered; nvscope.__init__ registers the lazy
# installation of the executor adapters here, so that entering a scope is all a user has to do.
ENTER_HOOKS: list[Callable[[], None]] = []


def current_options() -> OptionSet:
    """The options active in this context (thread, task, generator step): an immutable, hashable `OptionSet`."""
    frame = ACTIVE.get()
    if frame is None or frame.options is None:
        return EMPTY
    return frame.options


def _over(parent: Frame | None, own: OptionSet, inherit: bool, owner: object) -> Frame:
    """A frame for ``own`` entered over ``parent``: merged with it, or alone for ``inherit=False``."""
    if inherit and parent is not None and parent.options is not None:
        effective = parent.options.union(own)
    else:
        effective = own
    return Frame(effective if effective else None, parent, owner)


class nv_options:
    """Run every nvFuser fusion executed inside with these options: ``with nv_options(enable=[...], disable=[...])``.

    Names are validated here, at construction, before anything is entered. Nested scopes merge (inner = outer |
    inner, per list) unless ``inherit=False``, which starts from no options; neither can remove options that come
    from ``NVFUSER_ENABLE``/``NVFUSER_DISABLE`` or from Thunder's compile-time ``nv_enable_options``, because
    nvFuser adds per-call options to those. ``__enter__`` returns the effective `OptionSet`.

    The object is also a decorator (``@nv_options(...)``, same as ``@with_nv_options(...)``), and it is safe to
    share: it keeps no per-entry state, so it can be entered nested in itself and from many threads at once.
    """

    __slots__ = ("_inherit", "_options")

    def __init__(self, enable: Iterable[str] | str = (), disable: Iterable[str] | str = (), *,
                 inherit: bool = True) -> None:
        if not isinstance(inherit, bool):
            raise TypeError(f"inherit= takes True or False, not {inherit!r}")
        enabled, disabled = _names("enable", enable), _names("disable", disable)
        both = enabled & disabled
        if both:  # a few names are valid in both lists (id_model, ...); nvFuser would get both requests at once
            raise ValueError(f"{', '.join(map(repr, sorted(both)))} in both enable= and disable= of one scope: "
                             "keep each name in one of the lists")
        self._options = OptionSet(enabled, disabled)
        self._inherit = inherit

    @property
    def options(self) -> OptionSet:
        """This scope's own options (before merging with enclosing scopes)."""
        return self._options

    @property
    def inherit(self) -> bool:
        return self._inherit

    def __repr__(self) -> str:
        inherit = "" if self._inherit else ", inherit=False"
        return (f"nv_options(enable={sorted(self._options.enable)!r}, "
                f"disable={sorted(self._options.disable)!r}{inherit})")

    def __enter__(self) -> OptionSet:
        frame = self._frame(ACTIVE.get(), check=True)
        ACTIVE.set(frame)
        return EMPTY if frame.options is None else frame.options  # not `or`: OptionSet.__bool__ is a Python call

    def _frame(self, parent: Frame | None, check: bool) -> Frame:
        """This scope's frame over ``parent``, after the policy check and the enter hooks (which may raise)."""
        own = self._options
        if own:
            if check:
                _devmode.check_scope(own)  # may raise (strict mode): nothing has been entered yet
            for hook in ENTER_HOOKS:
                hook()
        if self._inherit and parent is not None and parent.options is not None:  # _over, inlined: it is hot
            own = parent.options.union(own)
        return Frame(own if own else None, parent, self)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        frame = ACTIVE.get()
        if frame is None or frame.owner is not self:
            raise RuntimeError(
                f"{self!r} exited, but the innermost active scope is not one it entered here: scopes must exit in "
                "the reverse order of entry, in the same thread/task (use nvscope.bind to carry a scope elsewhere)"
            )
        ACTIVE.set(frame.parent)
        if frame.ran:
            if frame.parent is not None:
                frame.parent.ran = True  # the enclosing scope saw this fusion too
        elif exc_type is None and not frame.ran_earlier and self._options and _events.ADAPTERS:
            _devmode.warn_no_fusion(self)

    def __call__(self, func: F) -> F:
        return _decorate(self, func)


def with_nv_options(enable: Iterable[str] | str = (), disable: Iterable[str] | str = (), *,
                    inherit: bool = True) -> Callable[[F], F]:
    """Decorator: run the function (or coroutine, generator, async generator) body under these options.

    Names are validated once, when the decorator is built. See `nv_options` for the merge rules. A generator's body
    sees, at each step, the options of the code that resumes it (``next``, ``send``, ...) merged with these and with
    the scopes it entered itself. Placed above ``@staticmethod`` or ``@classmethod`` it decorates the function inside.
    A class cannot be decorated (decorate its methods).
    """
    return nv_options(enable, disable, inherit=inherit)


def _decorate(scope: nv_options, func: F) -> F:
    """Wrap ``func`` so its body runs in ``scope``; right for functions, coroutines, generators, async generators."""
    import inspect  # here, not at the top: it costs milliseconds that `import nvscope` should not pay

    if isinstance(func, type):
        raise TypeError(
            f"with_nv_options cannot decorate a class ({func.__qualname__}): it is ambiguous whether the constructor "
            "or every method should run under the options, and the name would no longer be a class. Decorate the "
            "methods that should (e.g. forward) instead."
        )
    if isinstance(func, (staticmethod, classmethod)):  # above @staticmethod/@classmethod: decorate what they hold
        return type(func)(_decorate(scope, func.__func__))
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
    `bind` captured (``captured``). On top of it go the body's own open scopes, rebuilt from ``body``: (owner, own
    options, inherit, ran) per scope, outermost first. When the step ends, whatever the body left above the base
    becomes the new ``body``, and the consumer's frame is restored. A fusion that ran during the step counts for
    the consumer's frame of that step (or, for `bind`, the captured frames), as if the body were a nested ``with``.
    One generator cannot run two steps at once, so nothing here is shared.
    """

    __slots__ = ("base", "body", "captured", "checked", "consumer", "ran", "scope")

    def __init__(self, scope: nv_options | None, captured: Frame | None) -> None:
        self.scope = scope
        self.captured = captured
        self.body: list[tuple[object, OptionSet, bool, bool]] = []
        self.base: Frame | None = None
        self.consumer: Frame | None = None
        self.ran = False  # a fusion ran in some step: the decorator's NoFusionWarning looks at this
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
        for owner, own, inherit, ran in self.body:
            frame = _over(frame, own, inherit, owner)
            frame.ran_earlier = ran
        self.consumer = consumer
        ACTIVE.set(frame)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        base, consumer = self.base, self.consumer
        frame = ACTIVE.get()
        body: list[tuple[object, OptionSet, bool, bool]] = []
        ran = False  # whether a fusion ran in this step under the frame looked at or one above it
        while frame is not base and frame is not None:
            ran = ran or frame.ran
            owner = frame.owner
            if isinstance(owner, nv_options):
                body.append((owner, owner._options, owner._inherit, ran or frame.ran_earlier))
            else:  # a push() left open (adapters pop within one call): keep its options as they are
                body.append((owner, frame.options or EMPTY, False, ran or frame.ran_earlier))
            frame = frame.parent
        if frame is not base:
            body = []  # the body exited below its base (the decorator's own scope): it has no scopes of its own left
        elif base is not None:
            ran = ran or base.ran
        ACTIVE.set(consumer)
        self.base = self.consumer = None
        body.reverse()
        self.body = [] if exc_type is not None else body  # an exception (StopIteration too) ends the body
        if ran:
            self.ran = True
            if self.scope is not None:
                if consumer is not None:
                    consumer.ran = True
            else:
                _count(base)

    def finished(self) -> None:
        """The body returned: like a ``with`` block, the decorator warns if no fusion ran in any of its steps."""
        scope = self.scope
        if scope is not None and not self.ran and scope._options and _events.ADAPTERS:
            _devmode.warn_no_fusion(scope)


def _count(frame: Frame | None) -> None:
    """A fusion ran under a frame `bind` captured: it counts for that scope and every one around it.

    Not only the innermost, as an exit would: that scope may have exited already (the bound work runs later, or
    elsewhere), and then it could not pass the fusion on to the enclosing scopes that are still open.
    """
    while frame is not None:
        frame.ran = True
        frame = frame.parent


def _wrap_generator(func: Callable[..., Generator[Any, Any, Any]], scope: nv_options | None,
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


def _wrap_async_generator(func: Callable[..., AsyncGenerator[Any, Any]], scope: nv_options | None,
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
            token = ACTIVE.set(frame)
            try:
                return await func(*args, **kwargs)
            finally:
                _count_and_reset(frame, token)
        return bound_coroutine  # type: ignore[return-value]

    @functools.wraps(func)
    def bound(*args: P.args, **kwargs: P.kwargs) -> R:
        token = ACTIVE.set(frame)
        try:
            return func(*args, **kwargs)
        finally:
            _count_and_reset(frame, token)
    return bound


def _count_and_reset(frame: Frame | None, token: Token[Frame | None]) -> None:
    if frame is not None and frame.ran:
        _count(frame)
    ACTIVE.reset(token)


def push(options: OptionSet) -> Token[Frame | None]:
    """Activate ``options`` merged over the current scope, unvalidated and without policy checks; for adapters.

    Used where nvscope itself carries a scope somewhere (a backward pass on another thread). Undo with `pop`.
    """
    return ACTIVE.set(_over(ACTIVE.get(), options, True, push))


def pop(token: Token[Frame | None]) -> None:
    """Undo a `push`; a fusion that ran under the pushed frame counts for the scope it was pushed over."""
    frame = ACTIVE.get()
    ACTIVE.reset(token)
    if frame is not None and frame.ran and frame.parent is not None:
        frame.parent.ran = True
