"""Shared fixtures for the CPU suite.

In-process tests run in development mode so that entering scopes does not fill the output with
`DevelopmentModeWarning`; a test that needs the policy itself opts out with ``@pytest.mark.no_development_mode``.

Between tests, fixtures that install adapters reset nvscope with ``reset_nvscope()`` (tests/thunder_double.py), which
is ``nvscope.uninstall()``: the one reset of every piece of state registered with `nvscope._core._state`
(tests/core/test_state.py holds the package to registering it), before monkeypatch takes the doubles away.

The doubles' fixtures: `make_double`, `double` (the Thunder double, tests/thunder_double.py), `installed` (with the
Thunder adapter installed), `fusion` (one direct fusion), and `clock` (the tools' clock, advanced instead of sleeping).
A folder's conftest.py adds its own (tests/exec: a gloo group; tests/cli: the scripts a command imports).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

import nvscope

if TYPE_CHECKING:
    from noisy_double import StepClock
    from thunder_double import ThunderDouble


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "no_development_mode: do not turn development mode on for this test")


@pytest.fixture(autouse=True)
def _development_mode(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("no_development_mode") is not None:
        yield
        return
    previous = nvscope.set_development_mode(True)
    try:
        yield
    finally:
        nvscope.set_development_mode(previous)


@pytest.fixture(autouse=True, scope="session")
def _repro_scripts_in_pytests_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Repro scripts of the suite's failing fusions go to pytest's temporary directories (cleaned up by pytest), not
    to a new ``nvscope-repro-*`` directory under /tmp per test process; a test may still set or unset the variable."""
    import os

    before = os.environ.get("NVSCOPE_REPRO_DIR")
    os.environ["NVSCOPE_REPRO_DIR"] = str(tmp_path_factory.mktemp("repro"))
    yield
    if before is None:
        os.environ.pop("NVSCOPE_REPRO_DIR", None)
    else:
        os.environ["NVSCOPE_REPRO_DIR"] = before


@pytest.fixture(autouse=True)
def _temporary_directory_in_pytests_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Each test's temporary directory (``TMPDIR`` and ``tempfile.tempdir``, so its child processes' too) is a new
    one of pytest's (cleaned up by pytest), apart from the test's ``tmp_path``: what the tools make there by default
    (``nvscope-repro-*``, ``nvscope-rescue-*``, nvFuser's ``nvfuser_kernel_db``, torch's caches) never lands in the
    machine's (tests/test_temporary_files.py)."""
    import os
    import tempfile

    before, cached = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = tempfile.tempdir = str(tmp_path_factory.mktemp("tmp"))
    try:
        yield
    finally:
        tempfile.tempdir = cached
        if before is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before


@pytest.fixture(autouse=True)
def _no_scope_leaks() -> Iterator[None]:
    """Every test starts and ends with no active scope in the main thread."""
    from nvscope._core._scope import ACTIVE

    assert nvscope.current_options() == nvscope.OptionSet()
    yield
    leaked = nvscope.current_options()
    ACTIVE.set(None)  # so that one leaking test does not fail every test after it
    assert leaked == nvscope.OptionSet(), f"the test left a scope active: {leaked!r}"


@pytest.fixture
def run_threads() -> Callable[..., list[Any]]:
    """``run_threads(n, target, timeout=30)``: run ``target(i)`` in n threads at once; re-raise the first failure
    (an assertion in a thread fails the test); return the results in thread order."""

    def run(n: int, target: Callable[[int], Any], timeout: float = 30) -> list[Any]:
        results: list[Any] = [None] * n
        errors: list[BaseException] = []

        def runner(i: int) -> None:
            try:
                results[i] = target(i)
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=runner, args=(i,)) for i in range(n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout)
            assert not thread.is_alive(), "a thread hung"
        if errors:
            raise errors[0]
        return results

    return run


@pytest.fixture
def make_double(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., ThunderDouble]]:
    """``make_double(frontend="direct", version=..., **shape)``: a `ThunderDouble` (tests/thunder_double.py; its
    arguments), no adapter installed; nvscope reset before the test and after it."""
    from thunder_double import ThunderDouble, reset_nvscope

    reset_nvscope()

    def make(*args: Any, **kwargs: Any) -> ThunderDouble:
        return ThunderDouble(monkeypatch, *args, **kwargs)

    yield make
    reset_nvscope()


@pytest.fixture
def double(make_double: Callable[..., ThunderDouble]) -> ThunderDouble:
    """The Thunder double over the direct frontend, no adapter installed."""
    return make_double()


@pytest.fixture
def installed(double: ThunderDouble) -> ThunderDouble:
    """`double` with nvscope's Thunder adapter installed."""
    import nvscope.thunder

    assert nvscope.thunder.install() is True
    return double


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> StepClock:
    """The tools' clock, moved by ``clock.advance(seconds)`` instead of sleeping (tests/noisy_double.py)."""
    from noisy_double import StepClock

    return StepClock(monkeypatch)


@pytest.fixture
def fusion(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], nvscope.OptionSet]]:
    """``fusion()`` executes one nvFuser fusion in the active scope and returns the options nvFuser received.

    The real `nvscope.nvfuser` adapter over the fake frontend (tests/fake_nvfuser_frontend.py): what a scope counts as
    a fusion that ran under it (no NoFusionWarning) is what the adapter reports, not a stand-in.
    """
    pytest.importorskip("torch")  # the adapter rebuilds a definition per option set from Python that imports torch
    from thunder_double import load_frontend, reset_nvscope

    import nvscope.nvfuser

    reset_nvscope()
    frontend = load_frontend(monkeypatch, "nvfuser_direct")
    with frontend.FusionDefinition() as fd:
        fd.define_tensor(shape=[1], dtype=frontend.DataType.Float)
        fd.ops.linear(0)  # a fusion every option can affect (the catalog gates fuse_matmul to matmul/linear)
    assert nvscope.nvfuser.install()

    def run() -> nvscope.OptionSet:
        assert fd.execute([1.0]) == [2.0]
        last = frontend.EXECUTIONS[-1]
        return nvscope.OptionSet(last.enable, last.disable)

    try:
        yield run
    finally:
        reset_nvscope()
