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
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, Callable, Generator, Iterable, Mapping
from contextvars import ContextVar, Token
from types import TracebackType

from nvscope import _devmode, _events
from nvscope._catalog import catalog
from nvscope._errors import UnknownOptionError
from nvscope._optionset import EMPTY, OptionSet

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time: `import nvscope` must stay light (nvscope/_record.py)
    from typing import Any, ParamSpec, TypeVar

    from nvscope._catalog import Kind

    P = ParamSpec("P")
    R = TypeVar("R")
    F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["ACTIVE", "Frame", "bind", "current_options", "nv_options", "with_nv_options"]



class Frame:
    """One entered scope. ``options`` is the merged, effective set (None when empty, so the hot path tests ``is``)."""

    __slots__ = ("options", "owner", "parent", "ran")

    def __init__(self, options: OptionSet | None, parent: Frame | None, owner: object) -> None:
        self.options = options
        self.parent = parent
        self.owner = owner
        self.ran = False  # set by the adapters when a fusion executes under this frame


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


def _names(kind: Kind, value: object) -> frozenset[str]:
    """Validate one of ``enable=``/``disable=``: a str is one name; anything else must be an iterable of str."""
    if isinstance(value, str):
        items: list[object] = [value]
    elif isinstance(value, (bytes, bytearray)) or isinstance(value, Mapping) or not isinstance(value, Iterable):
        raise TypeError(f"{kind}= takes an option name (str) or an iterable of names, not {type(value).__name__}: "
                        f"{value!r}")
    else:
        items = list(value)
    names = []
    known = catalog()
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"{kind}= option names must be str, got {type(item).__name__}: {item!r}")
        name = item.strip()
        if not name:
            raise ValueError(f"{kind}= got an empty option name: {item!r}")
        if "," in name or any(c.isspace() for c in name):
            parts = [p for p in name.replace(",", " ").split() if p]
            raise ValueError(f"{kind}= got {item!r}, which looks like several names: pass a list, {kind}={parts!r}")
        if "(" in name:
            raise UnknownOptionError(
                f"{kind}= got {item!r}: per-call options carry no arguments; set NVFUSER_{kind.upper()}={name} "
                "in the environment before the process starts"
            )
        known.check(kind, name)
        names.append(name)
    return frozenset(names)


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
        self._options = OptionSet(_names("enable", enable), _names("disable", disable))
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
        return self._enter(check=True)

    def _enter(self, check: bool) -> OptionSet:
        parent = ACTIVE.get()
        own = self._options
        if own:
            if check:
                _devmode.check_scope(own)  # may raise (strict mode): nothing has been entered yet
            for hook in ENTER_HOOKS:
                hook()
        if self._inherit and parent is not None and parent.options is not None:
            effective = parent.options.union(own)
        else:
            effective = own
        ACTIVE.set(Frame(effective if effective else None, parent, self))
        return effective

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
        elif exc_type is None and self._options and _events.ADAPTERS:
            _devmode.warn_no_fusion(self)

    def __call__(self, func: F) -> F:
        return _decorate(self, func)


def with_nv_options(enable: Iterable[str] | str = (), disable: Iterable[str] | str = (), *,
                    inherit: bool = True) -> Callable[[F], F]:
    """Decorator: run the function (or coroutine, generator, async generator) body under these options.

    Names are validated once, when the decorator is built. See `nv_options` for the merge rules.
    """
    return nv_options(enable, disable, inherit=inherit)


def _decorate(scope: nv_options, func: F) -> F:
    """Wrap ``func`` so its body runs in ``scope``; right for functions, coroutines, generators, async generators.

    A generator's body runs in steps, each started by the consumer's next()/send()/throw()/close(). The scope must
    be active during each step and not in the consumer between steps, so it is entered around every resume
    (as torch/utils/_contextlib.py does for grad modes), not once around the whole iteration.
    """
    import inspect  # here, not at the top: it costs milliseconds that `import nvscope` should not pay

    if not callable(func):
        raise TypeError(f"with_nv_options decorates a callable, not {type(func).__name__}: {func!r}")
    if inspect.isasyncgenfunction(func):
        return _wrap_async_generator(scope, func)  # type: ignore[return-value]
    if inspect.isgeneratorfunction(func):
        return _wrap_generator(scope, func)  # type: ignore[return-value]
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
    """Enters a decorator's scope around each step of one generator body, and keeps the body's own scopes.

    A body that yields inside its own ``with nv_options(...)`` leaves that frame on top when it suspends; exiting the
    decorator's scope then would find a frame it did not enter. So each step ends by restoring the consumer's frame
    (whatever the body left on top), and the next step resumes the body's frame as it left it. One generator cannot
    run two steps at once, so the per-generator state here is never shared.
    """

    __slots__ = ("base", "checked", "consumer", "scope", "suspended")

    def __init__(self, scope: nv_options) -> None:
        self.scope = scope
        self.base: Frame | None = None  # the decorator's frame of the current step
        self.consumer: Frame | None = None
        self.suspended: Frame | None = None  # the body's innermost frame when it yielded inside its own scope
        # The development-mode policy applies once per generator, at its first step: later steps (and the close
        # at garbage collection, which has no user frame to blame and must not raise) resume a scope already let in.
        self.checked = False

    def __enter__(self) -> None:
        consumer = ACTIVE.get()
        if self.suspended is None:
            self.scope._enter(check=not self.checked)  # may raise (strict mode): nothing has been entered then
            self.checked = True
            self.base = ACTIVE.get()
        else:
            ACTIVE.set(self.suspended)
        self.consumer = consumer

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        top = ACTIVE.get()
        # An exception out of a step (StopIteration included) means the body is finished: forget its frames.
        self.suspended = None if exc_type is not None or top is self.base else top
        ACTIVE.set(self.consumer)
        self.consumer = None


def _wrap_generator(scope: nv_options, func: Callable[..., Generator[Any, Any, Any]]) -> Callable[..., Any]:
    @functools.wraps(func)
    def generator_wrapper(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        gen = func(*args, **kwargs)
        steps = _Steps(scope)
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
            return stop.value
    return generator_wrapper


def _wrap_async_generator(scope: nv_options, func: Callable[..., AsyncGenerator[Any, Any]]) -> Callable[..., Any]:
    @functools.wraps(func)
    async def async_generator_wrapper(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, Any]:
        agen = func(*args, **kwargs)
        steps = _Steps(scope)
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
            return
    return async_generator_wrapper


def bind(func: Callable[P, R]) -> Callable[P, R]:
    """Capture the scope active now and return ``func`` wrapped to run under it, wherever it is called.

    A new thread starts with no scope (contextvars semantics), and so do executor workers. Use
    ``pool.submit(nvscope.bind(work), x)`` or ``Thread(target=nvscope.bind(work))`` to carry the caller's options
    along. Only nvscope's variable is carried, so one bound callable may run in many threads at once (unlike
    ``contextvars.copy_context().run``, which cannot be entered twice concurrently).
    """
    frame = ACTIVE.get()

    @functools.wraps(func)
    def bound(*args: P.args, **kwargs: P.kwargs) -> R:
        token = ACTIVE.set(frame)
        try:
            return func(*args, **kwargs)
        finally:
            ACTIVE.reset(token)
    return bound


def push(options: OptionSet) -> Token[Frame | None]:
    """Activate ``options`` merged over the current scope, unvalidated and without policy checks; for adapters.

    Used where nvscope itself carries a scope somewhere (a backward pass on another thread). Undo with `pop`.
    """
    parent = ACTIVE.get()
    effective = parent.options.union(options) if parent is not None and parent.options is not None else options
    return ACTIVE.set(Frame(effective if effective else None, parent, push))


def pop(token: Token[Frame | None]) -> None:
    """Undo a `push`; a fusion that ran under the pushed frame counts for the scope it was pushed over."""
    frame = ACTIVE.get()
    ACTIVE.reset(token)
    if frame is not None and frame.ran and frame.parent is not None:
        frame.parent.ran = True
