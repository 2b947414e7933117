"""with_nv_options / @nv_options(...): functions, methods, coroutines, generators and async generators."""

from __future__ import annotations

import asyncio
import functools
import inspect
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from nvscope import NoFusionWarning, OptionSet, current_options, nv_options, with_nv_options

NONE = OptionSet()
FM = OptionSet(enable=["fuse_matmul"])
OUTER = OptionSet(disable=["fallback"])
BOTH = FM | OUTER


class Boom(Exception):
    pass


# --- plain functions and methods --------------------------------------------------------------------------------------


def test_function_runs_under_the_options() -> None:
    @with_nv_options(enable=["fuse_matmul"])
    def f(x: int, *, y: int = 2) -> tuple[int, OptionSet]:
        return x * y, current_options()

    assert current_options() == NONE
    assert f(3) == (6, FM)
    assert f(3, y=4) == (12, FM)
    assert current_options() == NONE
    with nv_options(disable=["fallback"]):
        assert f(1) == (2, BOTH)
        assert current_options() == OUTER


def test_inherit_false_decorator() -> None:
    @with_nv_options(enable="fuse_matmul", inherit=False)
    def f() -> OptionSet:
        return current_options()

    with nv_options(disable=["fallback"]):
        assert f() == FM


def test_wraps_and_signature() -> None:
    def original(a: int, b: str = "x", *args: Any, c: float, **kwargs: Any) -> list[int]:
        """The docstring."""
        return [a]

    wrapped = with_nv_options(enable=["fuse_matmul"])(original)
    assert wrapped.__name__ == "original"
    assert wrapped.__qualname__ == original.__qualname__
    assert wrapped.__doc__ == "The docstring."
    assert wrapped.__module__ == original.__module__
    assert wrapped.__wrapped__ is original  # type: ignore[attr-defined]
    assert inspect.signature(wrapped) == inspect.signature(original)
    assert wrapped is not original


def test_exceptions_propagate_and_restore() -> None:
    seen = []

    @with_nv_options(enable=["fuse_matmul"])
    def f() -> None:
        seen.append(current_options())
        raise Boom("from inside")

    with nv_options(disable=["fallback"]):
        with pytest.raises(Boom, match="from inside"):
            f()
        assert current_options() == OUTER
    assert current_options() == NONE
    assert seen == [BOTH]


def test_recursion() -> None:
    @with_nv_options(enable=["fuse_matmul"])
    def depth(n: int) -> list[OptionSet]:
        here = [current_options()]
        return here if n == 0 else here + depth(n - 1)

    assert depth(5) == [FM] * 6
    assert current_options() == NONE


def test_methods() -> None:
    class Model:
        def __init__(self) -> None:
            self.factor = 10

        @with_nv_options(enable=["fuse_matmul"])
        def forward(self, x: int) -> tuple[int, OptionSet]:
            return x * self.factor, current_options()

        @staticmethod
        @with_nv_options(enable=["fuse_matmul"])
        def static(x: int) -> tuple[int, OptionSet]:
            return x, current_options()

        @classmethod
        @with_nv_options(enable=["fuse_matmul"])
        def klass(cls, x: int) -> tuple[str, OptionSet]:
            return cls.__name__, current_options()

    m = Model()
    assert m.forward(2) == (20, FM)
    assert Model.forward(m, 3) == (30, FM)
    assert Model.static(4) == (4, FM)
    assert m.klass(1) == ("Model", FM)
    assert Model.forward.__name__ == "forward"
    assert list(inspect.signature(m.forward).parameters) == ["x"]
    assert current_options() == NONE


def test_above_staticmethod_and_classmethod() -> None:
    """Both orders work: @with_nv_options above @staticmethod/@classmethod decorates the function inside."""

    class Model:
        @with_nv_options(enable=["fuse_matmul"])
        @staticmethod
        def static(x: int) -> tuple[int, OptionSet]:
            return x, current_options()

        @with_nv_options(enable=["fuse_matmul"])
        @classmethod
        def klass(cls, x: int) -> tuple[str, int, OptionSet]:
            return cls.__name__, x, current_options()

        @with_nv_options(enable=["fuse_matmul"])
        @staticmethod
        def static_steps(n: int) -> Iterator[OptionSet]:
            for _ in range(n):
                yield current_options()

    class Sub(Model):
        pass

    m = Model()
    assert Model.static(4) == (4, FM) and m.static(5) == (5, FM)
    assert Model.klass(1) == ("Model", 1, FM) and Sub().klass(2) == ("Sub", 2, FM)
    assert list(m.static_steps(2)) == [FM, FM]
    assert isinstance(Model.__dict__["static"], staticmethod)
    assert isinstance(Model.__dict__["klass"], classmethod)
    assert Model.static.__name__ == "static" and Model.klass.__name__ == "klass"
    with nv_options(disable=["fallback"]):
        assert Model.static(0) == (0, BOTH)
    assert current_options() == NONE


def test_decorating_a_class_raises() -> None:
    with pytest.raises(TypeError, match=r"cannot decorate a class \(.*Model\).*Decorate the methods"):
        @with_nv_options(enable=["fuse_matmul"])
        class Model:
            pass
    with pytest.raises(TypeError, match="cannot decorate a class"):
        nv_options(enable=["fuse_matmul"])(int)
    assert current_options() == NONE


def test_nv_options_instance_as_decorator() -> None:
    scope = nv_options(enable=["fuse_matmul"])

    @scope
    def f() -> OptionSet:
        return current_options()

    @scope
    def g() -> OptionSet:
        return f()  # the same instance nested in itself

    assert f() == FM
    assert g() == FM
    with scope:
        assert f() == FM
    assert current_options() == NONE


def test_decorating_a_non_callable_raises() -> None:
    with pytest.raises(TypeError):
        with_nv_options(enable=["fuse_matmul"])(42)  # type: ignore[type-var]


def test_decorated_functions_keep_their_kind() -> None:
    deco = with_nv_options(enable=["fuse_matmul"])

    async def coro() -> None:
        pass

    def gen() -> Iterator[int]:
        yield 1

    async def agen() -> AsyncIterator[int]:
        yield 1

    assert inspect.iscoroutinefunction(deco(coro))
    assert inspect.isgeneratorfunction(deco(gen))
    assert inspect.isasyncgenfunction(deco(agen))


def test_partial_objects_can_be_decorated() -> None:
    def f(a: int, b: int) -> tuple[int, OptionSet]:
        return a + b, current_options()

    wrapped = with_nv_options(enable=["fuse_matmul"])(functools.partial(f, 1))
    assert wrapped(2) == (3, FM)


# --- coroutines ----------------------------------------------------------------------------------------------------


def test_coroutine_scope_is_inside_only() -> None:
    caller_saw: list[OptionSet] = []

    @with_nv_options(enable=["fuse_matmul"])
    async def work(x: int) -> tuple[int, OptionSet, OptionSet]:
        before = current_options()
        await asyncio.sleep(0)
        return x + 1, before, current_options()

    async def main() -> Any:
        coro = work(1)
        caller_saw.append(current_options())  # created, not started
        result = await coro
        caller_saw.append(current_options())
        return result

    assert asyncio.run(main()) == (2, FM, FM)
    assert caller_saw == [NONE, NONE]
    assert current_options() == NONE


def test_coroutine_scope_not_visible_in_caller_while_awaiting() -> None:
    """The awaiting task is suspended; a second task observes the world while the decorated coroutine waits."""

    @with_nv_options(enable=["fuse_matmul"])
    async def slow(started: asyncio.Event, release: asyncio.Event) -> OptionSet:
        started.set()
        await release.wait()
        return current_options()

    async def observer(started: asyncio.Event, release: asyncio.Event) -> OptionSet:
        await started.wait()
        seen = current_options()
        release.set()
        return seen

    async def main() -> list[OptionSet]:
        started, release = asyncio.Event(), asyncio.Event()
        with nv_options(disable=["fallback"]):
            return list(await asyncio.gather(slow(started, release), observer(started, release)))

    assert asyncio.run(main()) == [BOTH, OUTER]


def test_concurrent_decorated_coroutines_see_only_their_own() -> None:
    profile = OptionSet(enable=["kernel_profile"])

    @with_nv_options(enable=["fuse_matmul"])
    async def a() -> list[OptionSet]:
        seen = []
        for _ in range(5):
            seen.append(current_options())
            await asyncio.sleep(0)
        return seen

    @with_nv_options(enable=["kernel_profile"], inherit=False)
    async def b() -> list[OptionSet]:
        seen = []
        for _ in range(5):
            seen.append(current_options())
            await asyncio.sleep(0)
        return seen

    async def plain() -> list[OptionSet]:
        seen = []
        for _ in range(5):
            seen.append(current_options())
            await asyncio.sleep(0)
        return seen

    async def main() -> Any:
        return await asyncio.gather(a(), b(), plain(), a())

    ra, rb, rplain, ra2 = asyncio.run(main())
    assert ra == ra2 == [FM] * 5
    assert rb == [profile] * 5
    assert rplain == [NONE] * 5


def test_coroutine_exception_propagates_and_restores() -> None:
    @with_nv_options(enable=["fuse_matmul"])
    async def fails() -> None:
        await asyncio.sleep(0)
        raise Boom

    async def main() -> OptionSet:
        with nv_options(disable=["fallback"]):
            with pytest.raises(Boom):
                await fails()
            return current_options()

    assert asyncio.run(main()) == OUTER


def test_coroutine_wraps() -> None:
    async def original(a: int, *, b: int = 1) -> int:
        """Doc."""
        return a

    wrapped = with_nv_options(enable=["fuse_matmul"])(original)
    assert wrapped.__name__ == "original" and wrapped.__doc__ == "Doc."
    assert inspect.signature(wrapped) == inspect.signature(original)


# --- generators -------------------------------------------------------------------------------------------------------


def test_generator_body_sees_options_consumer_does_not() -> None:
    @with_nv_options(enable=["fuse_matmul"])
    def gen(n: int) -> Iterator[tuple[int, OptionSet]]:
        for i in range(n):
            yield i, current_options()

    consumer: list[OptionSet] = []
    produced: list[OptionSet] = []
    g = gen(3)
    assert current_options() == NONE  # creating it enters nothing
    for i, inside in g:
        produced.append(inside)
        consumer.append(current_options())
        assert i == len(produced) - 1
    assert produced == [FM] * 3
    assert consumer == [NONE] * 3
    with nv_options(disable=["fallback"]):
        for _, inside in gen(2):
            assert inside == BOTH
            assert current_options() == OUTER


def test_generator_sees_the_consumer_scope_of_each_step() -> None:
    @with_nv_options(enable=["fuse_matmul"])
    def gen() -> Iterator[OptionSet]:
        while True:
            yield current_options()

    g = gen()
    assert next(g) == FM
    with nv_options(disable=["fallback"]):
        assert next(g) == BOTH
    assert next(g) == FM
    g.close()


def test_generator_send() -> None:
    @with_nv_options(enable=["fuse_matmul"])
    def echo() -> Iterator[Any]:
        received = yield "ready"
        while True:
            received = yield (received, current_options())

    g = echo()
    assert next(g) == "ready"
    assert g.send(1) == (1, FM)
    assert current_options() == NONE
    assert g.send("two") == ("two", FM)
    assert next(g) == (None, FM)
    g.close()


def test_generator_throw_handled_inside() -> None:
    handled: list[tuple[str, OptionSet]] = []

    @with_nv_options(enable=["fuse_matmul"])
    def gen() -> Iterator[str]:
        while True:
            try:
                yield "value"
            except Boom as error:
                handled.append((str(error), current_options()))
                yield "recovered"

    g = gen()
    assert next(g) == "value"
    assert g.throw(Boom("first")) == "recovered"
    assert current_options() == NONE
    assert handled == [("first", FM)]
    assert next(g) == "value"
    g.close()


def test_generator_throw_reraised() -> None:
    seen: list[OptionSet] = []

    @with_nv_options(enable=["fuse_matmul"])
    def gen() -> Iterator[int]:
        try:
            yield 1
        except Boom:
            seen.append(current_options())
            raise

    g = gen()
    next(g)
    with nv_options(disable=["fallback"]):
        with pytest.raises(Boom, match="thrown"):
            g.throw(Boom("thrown"))
        assert current_options() == OUTER
    assert seen == [BOTH]
    with pytest.raises(StopIteration):
        next(g)


def test_generator_exception_from_body_restores() -> None:
    @with_nv_options(enable=["fuse_matmul"])
    def gen() -> Iterator[int]:
        yield 1
        raise Boom

    g = gen()
    assert next(g) == 1
    with pytest.raises(Boom):
        next(g)
    assert current_options() == NONE


def test_generator_close_runs_finally_inside_the_scope() -> None:
    finally_saw: list[OptionSet] = []

    @with_nv_options(enable=["fuse_matmul"])
    def gen() -> Iterator[int]:
        try:
            yield 1
            yield 2
        finally:
            finally_saw.append(current_options())

    g = gen()
    assert next(g) == 1
    g.close()
    assert finally_saw == [FM]
    assert current_options() == NONE
    with pytest.raises(StopIteration):
        next(g)


def test_generator_close_before_start() -> None:
    started = []

    @with_nv_options(enable=["fuse_matmul"])
    def gen() -> Iterator[int]:
        started.append(True)
        yield 1

    gen().close()
    assert started == []
    assert current_options() == NONE


def test_generator_garbage_collected_mid_iteration() -> None:
    import gc

    finally_saw: list[OptionSet] = []

    @with_nv_options(enable=["fuse_matmul"])
    def gen() -> Iterator[int]:
        try:
            yield 1
            yield 2
        finally:
            finally_saw.append(current_options())

    g = gen()
    next(g)
    del g
    gc.collect()
    assert finally_saw == [FM]
    assert current_options() == NONE


def test_generator_return_value_via_yield_from() -> None:
    @with_nv_options(enable=["fuse_matmul"])
    def inner() -> Any:
        x = yield "a"
        yield "b"
        return ("done", x, current_options())

    def outer() -> Any:
        result = yield from inner()
        yield result

    g = outer()
    assert next(g) == "a"
    assert g.send(42) == "b"
    assert next(g) == ("done", 42, FM)
    assert current_options() == NONE


def test_generator_return_value_via_stop_iteration() -> None:
    @with_nv_options(enable=["fuse_matmul"])
    def gen() -> Any:
        yield 1
        return "result"

    g = gen()
    next(g)
    with pytest.raises(StopIteration) as info:
        next(g)
    assert info.value.value == "result"


def test_generator_that_yields_nothing() -> None:
    @with_nv_options(enable=["fuse_matmul"])
    def gen() -> Any:
        return 7
        yield  # pragma: no cover

    assert list(gen()) == []
    g = gen()
    with pytest.raises(StopIteration) as info:
        next(g)
    assert info.value.value == 7


def test_generator_wraps() -> None:
    def original(n: int, *, step: int = 1) -> Iterator[int]:
        """Doc."""
        yield from range(0, n, step)

    wrapped = with_nv_options(enable=["fuse_matmul"])(original)
    assert wrapped.__name__ == "original" and wrapped.__doc__ == "Doc."
    assert inspect.signature(wrapped) == inspect.signature(original)
    assert list(wrapped(6, step=2)) == [0, 2, 4]


def test_two_generators_interleaved() -> None:
    @with_nv_options(enable=["fuse_matmul"])
    def a() -> Iterator[OptionSet]:
        while True:
            yield current_options()

    @with_nv_options(disable=["fallback"], inherit=False)
    def b() -> Iterator[OptionSet]:
        while True:
            yield current_options()

    ga, gb = a(), b()
    for _ in range(3):
        assert next(ga) == FM
        assert next(gb) == OUTER
        assert current_options() == NONE
    ga.close()
    gb.close()


def test_generator_yielding_inside_its_own_scope() -> None:
    profile = OptionSet(enable=["kernel_profile"])
    closed: list[OptionSet] = []

    @with_nv_options(enable=["fuse_matmul"])
    def gen() -> Iterator[OptionSet]:
        with nv_options(enable=["kernel_profile"]):
            yield current_options()
            yield current_options()
        yield current_options()
        with nv_options(disable=["fallback"], inherit=False):
            try:
                yield current_options()
            finally:
                closed.append(current_options())

    g = gen()
    assert next(g) == FM | profile
    assert current_options() == NONE  # the body's own scope does not leak to the consumer either
    with nv_options(disable=["fallback"]):
        assert next(g) == FM | profile | OUTER  # the consumer's scope at this resume, under the body's own
        assert current_options() == OUTER
    assert next(g) == FM  # the consumer's scope has exited, and the body's own scope exited in the body
    assert next(g) == OUTER
    assert current_options() == NONE
    g.close()
    assert closed == [OUTER]
    assert current_options() == NONE


def test_async_generator_yielding_inside_its_own_scope() -> None:
    profile = OptionSet(enable=["kernel_profile"])

    @with_nv_options(enable=["fuse_matmul"])
    async def agen() -> AsyncIterator[OptionSet]:
        with nv_options(enable=["kernel_profile"]):
            yield current_options()
            await asyncio.sleep(0)
            yield current_options()
        yield current_options()

    async def main() -> list[tuple[OptionSet, OptionSet]]:
        return [(inside, current_options()) async for inside in agen()]

    assert asyncio.run(main()) == [(FM | profile, NONE), (FM | profile, NONE), (FM, NONE)]


# --- async generators -------------------------------------------------------------------------------------------------


def test_async_generator_body_sees_options_consumer_does_not() -> None:
    @with_nv_options(enable=["fuse_matmul"])
    async def agen(n: int) -> AsyncIterator[tuple[int, OptionSet]]:
        for i in range(n):
            await asyncio.sleep(0)
            yield i, current_options()

    async def main() -> tuple[list[Any], list[OptionSet]]:
        produced, consumer = [], []
        async for item in agen(3):
            produced.append(item)
            consumer.append(current_options())
        with nv_options(disable=["fallback"]):
            async for _, inside in agen(1):
                produced.append(("outer", inside))
                consumer.append(current_options())
        return produced, consumer

    produced, consumer = asyncio.run(main())
    assert produced == [(0, FM), (1, FM), (2, FM), ("outer", BOTH)]
    assert consumer == [NONE, NONE, NONE, OUTER]


def test_async_generator_asend() -> None:
    @with_nv_options(enable=["fuse_matmul"])
    async def echo() -> AsyncIterator[Any]:
        received = yield "ready"
        while True:
            received = yield (received, current_options())

    async def main() -> list[Any]:
        g = echo()
        out = [await g.asend(None), await g.asend(1), current_options(), await g.asend("two")]
        await g.aclose()
        return out

    assert asyncio.run(main()) == ["ready", (1, FM), NONE, ("two", FM)]


def test_async_generator_athrow_handled_and_reraised() -> None:
    handled: list[OptionSet] = []

    @with_nv_options(enable=["fuse_matmul"])
    async def agen() -> AsyncIterator[str]:
        try:
            yield "value"
        except Boom:
            handled.append(current_options())
            yield "recovered"
        try:
            yield "again"
        except Boom:
            handled.append(current_options())
            raise

    async def main() -> list[Any]:
        g = agen()
        out: list[Any] = [await g.asend(None), await g.athrow(Boom()), current_options(), await g.asend(None)]
        with pytest.raises(Boom):
            await g.athrow(Boom())
        out.append(current_options())
        return out

    assert asyncio.run(main()) == ["value", "recovered", NONE, "again", NONE]
    assert handled == [FM, FM]


def test_async_generator_aclose_runs_finally_inside_the_scope() -> None:
    finally_saw: list[OptionSet] = []

    @with_nv_options(enable=["fuse_matmul"])
    async def agen() -> AsyncIterator[int]:
        try:
            yield 1
            yield 2
        finally:
            await asyncio.sleep(0)
            finally_saw.append(current_options())

    async def main() -> OptionSet:
        g = agen()
        assert await g.__anext__() == 1
        await g.aclose()
        with pytest.raises(StopAsyncIteration):
            await g.__anext__()
        return current_options()

    assert asyncio.run(main()) == NONE
    assert finally_saw == [FM]


def test_async_generator_exception_from_body_restores() -> None:
    @with_nv_options(enable=["fuse_matmul"])
    async def agen() -> AsyncIterator[int]:
        yield 1
        raise Boom

    async def main() -> OptionSet:
        with nv_options(disable=["fallback"]):
            with pytest.raises(Boom):
                async for _ in agen():
                    pass
            return current_options()

    assert asyncio.run(main()) == OUTER


def test_concurrent_async_generators() -> None:
    @with_nv_options(enable=["fuse_matmul"])
    async def a() -> AsyncIterator[OptionSet]:
        for _ in range(4):
            await asyncio.sleep(0)
            yield current_options()

    @with_nv_options(disable=["fallback"], inherit=False)
    async def b() -> AsyncIterator[OptionSet]:
        for _ in range(4):
            await asyncio.sleep(0)
            yield current_options()

    async def consume(agen: AsyncIterator[OptionSet]) -> list[tuple[OptionSet, OptionSet]]:
        return [(inside, current_options()) async for inside in agen]

    async def main() -> Any:
        return await asyncio.gather(consume(a()), consume(b()))

    ra, rb = asyncio.run(main())
    assert ra == [(FM, NONE)] * 4
    assert rb == [(OUTER, NONE)] * 4


def test_async_generator_wraps() -> None:
    async def original(n: int) -> AsyncIterator[int]:
        """Doc."""
        yield n

    wrapped = with_nv_options(enable=["fuse_matmul"])(original)
    assert wrapped.__name__ == "original" and wrapped.__doc__ == "Doc."
    assert inspect.signature(wrapped) == inspect.signature(original)


# --- fusions run by a decorated generator count for the scopes that ran them -----------------------------------------

MEE = OptionSet(disable=["matmul_expr_eval"])


def no_fusion_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    """The scopes (their repr) named by the NoFusionWarnings caught, in order."""
    return [str(w.message).partition(" exited")[0] for w in caught if issubclass(w.category, NoFusionWarning)]


@pytest.fixture
def caught() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        yield record


def test_a_generator_step_runs_with_the_consumer_scope_of_that_step(
    fusion: Callable[[], OptionSet], caught: list[warnings.WarningMessage]
) -> None:
    """The issue-9 case: a consumer scope that has exited is not seen by later steps, even under the body's scope."""
    profile = OptionSet(enable=["kernel_profile"])

    @with_nv_options(enable="fuse_matmul")
    def steps() -> Iterator[OptionSet]:
        with nv_options(enable="kernel_profile"):
            yield fusion()
            yield fusion()

    g = steps()
    with nv_options(disable="matmul_expr_eval"):
        assert next(g) == FM | profile | MEE  # what nvFuser received
    assert next(g) == FM | profile
    with pytest.raises(StopIteration):
        next(g)
    assert no_fusion_warnings(caught) == []  # each scope saw a fusion: the consumer's too


def test_a_consumer_scope_around_a_step_without_fusion_still_warns(
    fusion: Callable[[], OptionSet], caught: list[warnings.WarningMessage]
) -> None:
    @with_nv_options(enable="fuse_matmul")
    def steps() -> Iterator[None]:
        with nv_options(enable="kernel_profile"):
            fusion()
            yield  # the body's scope saw a fusion in the first step ...
            yield  # ... and none in this one
        # ... and exits in the third step: no warning, it did see one

    g = steps()
    next(g)
    with nv_options(disable="matmul_expr_eval"):
        next(g)  # no fusion in this step
    assert no_fusion_warnings(caught) == ["nv_options(enable=[], disable=['matmul_expr_eval'])"]
    with pytest.raises(StopIteration):
        next(g)
    assert no_fusion_warnings(caught) == ["nv_options(enable=[], disable=['matmul_expr_eval'])"]


def test_a_decorated_generator_warns_when_none_of_its_steps_ran_a_fusion(
    fusion: Callable[[], OptionSet], caught: list[warnings.WarningMessage]
) -> None:
    @with_nv_options(enable="fuse_matmul")
    def idle() -> Iterator[int]:
        yield 1
        yield 2

    @with_nv_options(enable="fuse_matmul")
    def busy() -> Iterator[int]:
        yield 1
        fusion()
        yield 2

    assert list(busy()) == [1, 2]
    assert no_fusion_warnings(caught) == []
    g = idle()
    next(g)
    g.close()  # left early, like a with block left by an exception: no verdict
    assert no_fusion_warnings(caught) == []
    assert list(idle()) == [1, 2]
    assert no_fusion_warnings(caught) == ["nv_options(enable=['fuse_matmul'], disable=[])"]
    assert caught[-1].filename == __file__  # attributed to the consuming line


def test_async_generator_steps_count_their_fusions(
    fusion: Callable[[], OptionSet], caught: list[warnings.WarningMessage]
) -> None:
    @with_nv_options(enable="fuse_matmul")
    async def steps() -> AsyncIterator[OptionSet]:
        with nv_options(disable="fallback", inherit=False):
            await asyncio.sleep(0)
            yield fusion()
        yield fusion()

    async def main() -> list[OptionSet]:
        g = steps()
        with nv_options(disable="matmul_expr_eval"):
            first = await g.__anext__()
        return [first] + [options async for options in g]

    assert asyncio.run(main()) == [OUTER, FM]
    assert no_fusion_warnings(caught) == []
