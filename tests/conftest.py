"""Shared fixtures for the CPU suite.

In-process tests run in development mode so that entering scopes does not fill the output with
`DevelopmentModeWarning`; a test that needs the policy itself opts out with ``@pytest.mark.no_development_mode``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import nvscope


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


@pytest.fixture(autouse=True)
def _no_scope_leaks() -> Iterator[None]:
    """Every test starts and ends with no active scope in the main thread."""
    from nvscope._scope import ACTIVE

    assert nvscope.current_options() == nvscope.OptionSet()
    yield
    leaked = nvscope.current_options()
    ACTIVE.set(None)  # so that one leaking test does not fail every test after it
    assert leaked == nvscope.OptionSet(), f"the test left a scope active: {leaked!r}"
