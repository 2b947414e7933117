"""Threads and asyncio tasks: each has its own scope; shared nv_options objects carry no per-entry state."""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import nvscope
from nvscope import OptionSet, bind, current_options, nv_options

NONE = OptionSet()
ENABLE = ["fuse_matmul", "static_fusion_count", "kernel_profile", "kernel_lineinfo"]
DISABLE = ["matmul_expr_eval", "fallback", "parallel_compile", "kernel_reuse"]

# shared by every thread
SHARED_A = nv_options(enable=["fuse_matmul"])
SHARED_B = nv_options(disable=["matmul_expr_eval"])
SHARED_RESET = nv_options(enable=["kernel_profile"], inherit=False)


@pytest.fixture(autouse=True)
def _switch_often() -> Iterator[None]:
    """Make the interpreter switch threads far more often than every 5 ms, so that scope operations interleave."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


RunThreads = Callable[..., list[Any]]  # the conftest fixture


def test_a_new_thread_starts_with_no_scope(run_threads: RunThreads) -> None:
    with nv_options(enable=["fuse_matmul"]):
        assert current_options() == OptionSet(enable=["fuse_matmul"])
        seen = run_threads(1, lambda _: current_options())
    assert seen == [NONE]


def test_scopes_entered_in_a_thread_stay_in_it() -> None:
    inside = threading.Event()
    release = threading.Event()

    def worker(_: int) -> OptionSet:
        with nv_options(enable=["fuse_matmul"]) as active:
            inside.set()
            assert release.wait(10)
            return active

    t = threading.Thread(target=lambda: results.append(worker(0)))
    results: list[OptionSet] = []
    t.start()
    assert inside.wait(10)
    assert current_options() == NONE  # the worker's scope is active now, in the worker only
    release.set()
    t.join(10)
    assert results == [OptionSet(enable=["fuse_matmul"])]


def test_eight_threads_share_scope_objects_without_cross_talk(run_threads: RunThreads) -> None:
    n, iterations = 8, 200
    barrier = threading.Barrier(n)

    def worker(i: int) -> int:
        own = nv_options(enable=[ENABLE[i % 4]], disable=[DISABLE[i % 4]])
        own_set = own.options
        a, b = SHARED_A.options, SHARED_B.options
        checks = 0

        def expect(value: OptionSet) -> None:
            nonlocal checks
            got = current_options()
            assert got == value, (i, got, value)
            checks += 1

        barrier.wait()
        for k in range(iterations):
            if k % 50 == 0:
                barrier.wait()  # force overlap again and again
            expect(NONE)
            order = (i + k) % 3
            if order == 0:
                with SHARED_A:
                    expect(a)
                    with own:
                        expect(a | own_set)
                        with SHARED_A:  # the shared object nested in itself, in many threads at once
                            expect(a | own_set)
                            with SHARED_B:
                                expect(a | own_set | b)
                        expect(a | own_set)
                    expect(a)
            elif order == 1:
                with own, SHARED_B:
                    expect(own_set | b)
                    with SHARED_RESET as reset:
                        expect(reset)
                        assert reset == SHARED_RESET.options
                        with SHARED_A:
                            expect(reset | a)
                    expect(own_set | b)
            else:
                try:
                    with SHARED_B, own:
                        expect(b | own_set)
                        raise KeyError(i)
                except KeyError:
                    pass
                expect(NONE)
        return checks

    results = run_threads(n, worker)
    assert all(r >= iterations * 3 for r in results), results


def test_bind_carries_the_scope_into_a_thread() -> None:
    with nv_options(enable=["fuse_matmul"], disable=["fallback"]) as active:
        work = bind(current_options)
    assert current_options() == NONE
    assert work() == active  # here too, after the scope has exited
    assert current_options() == NONE
    seen: list[OptionSet] = []
    t = threading.Thread(target=bind(lambda: seen.append(current_options())))
    t.start()
    t.join(10)
    assert seen == [NONE]  # bound outside any scope: carries "no scope"
    t = threading.Thread(target=lambda: seen.append(work()))
    t.start()
    t.join(10)
    assert seen == [NONE, active]


def test_bind_overrides_the_scope_of_the_calling_thread_and_restores_it() -> None:
    with nv_options(enable=["fuse_matmul"]):
        work = bind(current_options)
    with nv_options(disable=["fallback"]):
        assert work() == OptionSet(enable=["fuse_matmul"])
        assert current_options() == OptionSet(disable=["fallback"])


def test_bind_restores_on_exception() -> None:
    def fail() -> None:
        assert current_options() == OptionSet(enable=["fuse_matmul"])
        raise ValueError("inside")

    with nv_options(enable=["fuse_matmul"]):
        bound = bind(fail)
    try:
        bound()
    except ValueError as error:
        assert str(error) == "inside"
    else:
        raise AssertionError("the exception was swallowed")
    assert current_options() == NONE


def test_bind_preserves_metadata() -> None:
    def work(x: int, *, y: int = 0) -> int:
        """Doc."""
        return x + y

    bound = bind(work)
    assert bound.__name__ == "work" and bound.__doc__ == "Doc."
    assert bound(1, y=2) == 3


def test_bind_carries_the_scope_into_a_coroutine_body() -> None:
    async def work() -> list[OptionSet]:
        seen = [current_options()]
        await asyncio.sleep(0)
        with nv_options(enable=["kernel_profile"]):
            await asyncio.sleep(0)
            seen.append(current_options())
        return [*seen, current_options()]

    with nv_options(enable=["fuse_matmul"]):
        bound = bind(work)
    assert inspect.iscoroutinefunction(bound)

    async def main() -> tuple[list[OptionSet], OptionSet]:
        with nv_options(disable=["fallback"]):  # the awaiting code's scope is replaced, as for a bound function
            result = await bound()
            return result, current_options()

    fm = OptionSet(enable=["fuse_matmul"])
    assert asyncio.run(main()) == ([fm, fm | OptionSet(enable=["kernel_profile"]), fm], OptionSet(disable=["fallback"]))


def test_bind_carries_the_scope_into_every_step_of_a_generator() -> None:
    def steps() -> Iterator[OptionSet]:
        yield current_options()
        with nv_options(enable=["kernel_profile"]):
            yield current_options()
            yield current_options()
        yield current_options()

    with nv_options(enable=["fuse_matmul"]):
        bound = bind(steps)
    assert inspect.isgeneratorfunction(bound)
    fm, kp = OptionSet(enable=["fuse_matmul"]), OptionSet(enable=["kernel_profile"])
    g = bound()  # created after the scope exited, stepped under other scopes: each step sees the captured one
    assert next(g) == fm
    with nv_options(disable=["fallback"]):
        assert next(g) == fm | kp
        assert current_options() == OptionSet(disable=["fallback"])  # the body's scope stays in the body
    assert next(g) == fm | kp
    assert current_options() == NONE
    assert list(g) == [fm]


def test_bind_carries_the_scope_into_an_async_generator_and_other_threads(run_threads: RunThreads) -> None:
    async def steps() -> AsyncIterator[OptionSet]:
        for _ in range(3):
            await asyncio.sleep(0)
            yield current_options()

    with nv_options(enable=["fuse_matmul"]) as active:
        bound = bind(steps)
    assert inspect.isasyncgenfunction(bound)

    async def consume() -> list[tuple[OptionSet, OptionSet]]:
        with nv_options(disable=["fallback"]):
            return [(inside, current_options()) async for inside in bound()]

    expected = [(active, OptionSet(disable=["fallback"]))] * 3
    assert asyncio.run(consume()) == expected
    assert run_threads(4, lambda _: asyncio.run(consume())) == [expected] * 4


def test_bind_refuses_what_is_not_callable() -> None:
    def gen() -> Iterator[int]:
        yield 1

    with pytest.raises(TypeError, match="bind the function that creates it"):
        bind(gen())  # type: ignore[arg-type]
    assert current_options() == NONE


def test_fusions_of_bound_work_count_for_the_captured_scopes(
    fusion: Callable[[], OptionSet], run_threads: RunThreads
) -> None:
    fm, mee = OptionSet(enable=["fuse_matmul"]), OptionSet(disable=["matmul_expr_eval"])

    def steps() -> Iterator[OptionSet]:
        yield fusion()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with nv_options(enable=["fuse_matmul"]):
            work = bind(fusion)
            assert run_threads(2, lambda _: work()) == [fm, fm]
            with nv_options(disable=["matmul_expr_eval"]):  # exits before the bound work runs: it warns
                later = bind(steps)
            assert list(later()) == [fm | mee]  # ran under the exited scope: counts for the open one around it
    assert [str(w.message).partition(" exited")[0] for w in caught] == [
        "nv_options(enable=[], disable=['matmul_expr_eval'])"
    ]


def test_fusions_under_a_scope_the_bound_call_leaves_open_count_for_the_captured_one(
    fusion: Callable[[], OptionSet]
) -> None:
    def work() -> OptionSet:
        nv_options(enable=["kernel_profile"]).__enter__()  # left open: the bound call's end discards it
        return fusion()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with nv_options(enable=["fuse_matmul"]):
            assert bind(work)() == OptionSet(enable=["fuse_matmul", "kernel_profile"])
            assert current_options() == OptionSet(enable=["fuse_matmul"])
    assert [str(w.message) for w in caught if "exited without" in str(w.message)] == []


def test_nested_scopes_inside_a_bound_function(run_threads: RunThreads) -> None:
    def work() -> tuple[OptionSet, OptionSet]:
        with nv_options(enable=["kernel_profile"]) as inner:
            pass
        return inner, current_options()

    with nv_options(enable=["fuse_matmul"]):
        bound = bind(work)
    inner, after = run_threads(1, lambda _: bound())[0]
    assert inner == OptionSet(enable=["fuse_matmul", "kernel_profile"])
    assert after == OptionSet(enable=["fuse_matmul"])


def test_one_bound_callable_runs_concurrently_in_many_threads(run_threads: RunThreads) -> None:
    n = 8
    barrier = threading.Barrier(n)

    def work(i: int) -> list[OptionSet]:
        barrier.wait()
        seen = [current_options()]
        with nv_options(enable=[ENABLE[i % 4]]):
            barrier.wait()  # everyone is inside its own nested scope at once
            seen.append(current_options())
        seen.append(current_options())
        return seen

    with nv_options(disable=["matmul_expr_eval"]):
        bound = bind(work)
    base = OptionSet(disable=["matmul_expr_eval"])
    results = run_threads(n, bound)
    for i, seen in enumerate(results):
        assert seen == [base, base | OptionSet(enable=[ENABLE[i % 4]]), base]


def test_thread_pool_executor_workers_start_empty_and_bind_carries_scopes() -> None:
    n = 8
    barrier = threading.Barrier(n)

    def probe(i: int) -> tuple[int, OptionSet]:
        barrier.wait(10)
        return i, current_options()

    with ThreadPoolExecutor(max_workers=n) as pool:
        with nv_options(enable=["fuse_matmul"]):
            plain = [pool.submit(probe, i) for i in range(n)]
            assert [f.result(10) for f in plain] == [(i, NONE) for i in range(n)]
        futures = []
        expected = []
        for i in range(n):
            with nv_options(enable=[ENABLE[i % 4]], disable=[DISABLE[(i // 4) % 4]]) as active:
                futures.append(pool.submit(bind(probe), i))
                expected.append((i, active))
        assert [f.result(10) for f in futures] == expected
        # the workers did not keep the bound scopes
        assert list(pool.map(lambda _: current_options(), range(n))) == [NONE] * n


def test_asyncio_tasks_with_different_scopes_interleave() -> None:
    async def task(i: int, log: list[tuple[int, OptionSet]]) -> list[OptionSet]:
        seen: list[OptionSet] = []
        own = nv_options(enable=[ENABLE[i % 4]])
        for k in range(20):
            with own:
                await asyncio.sleep(0)
                seen.append(current_options())
                log.append((i, current_options()))
                if k % 2:
                    with SHARED_B:
                        await asyncio.sleep(0)
                        seen.append(current_options())
                await asyncio.sleep(0)
                seen.append(current_options())
            await asyncio.sleep(0)
            seen.append(current_options())
        return seen

    async def main() -> tuple[list[list[OptionSet]], list[tuple[int, OptionSet]], OptionSet]:
        log: list[tuple[int, OptionSet]] = []
        with nv_options(disable=["fallback"]):
            results = await asyncio.gather(*(task(i, log) for i in range(6)))
            return results, log, current_options()

    results, log, after = asyncio.run(main())
    assert after == OptionSet(disable=["fallback"])
    base = OptionSet(disable=["fallback"])
    b = SHARED_B.options
    for i, seen in enumerate(results):
        own = base | OptionSet(enable=[ENABLE[i % 4]])
        expected: list[OptionSet] = []
        for k in range(20):
            expected.append(own)
            if k % 2:
                expected.append(own | b)
            expected += [own, base]
        assert seen == expected
    # the tasks really interleaved: the log does not consist of one task's steps in a row
    assert len({i for i, _ in log[:6]}) == 6


def test_asyncio_task_created_in_a_scope_inherits_it_but_not_later_changes() -> None:
    async def child(started: asyncio.Event, proceed: asyncio.Event) -> list[OptionSet]:
        seen = [current_options()]
        started.set()
        await proceed.wait()
        seen.append(current_options())
        return seen

    async def main() -> list[OptionSet]:
        started, proceed = asyncio.Event(), asyncio.Event()
        with nv_options(enable=["fuse_matmul"]):
            t = asyncio.create_task(child(started, proceed))
        await started.wait()
        with nv_options(disable=["fallback"]):  # the parent's later scope does not reach the running child
            proceed.set()
            return await t

    fm = OptionSet(enable=["fuse_matmul"])
    assert asyncio.run(main()) == [fm, fm]


def test_dev_mode_switch_is_process_wide(run_threads: RunThreads) -> None:
    # threads see the same development-mode setting (no warnings from worker threads in this suite)
    assert run_threads(2, lambda _: nvscope.is_development_mode()) == [True, True]
