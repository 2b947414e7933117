"""Fixtures of the execution-layer tests: `process_group`, a one-rank gloo group (tests/gloo_group.py) for the tests
of real torch.distributed inputs, which take it with `installed` (tests/conftest.py): the Thunder double and adapter
over that group."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def process_group() -> Iterator[None]:
    pytest.importorskip("torch.distributed")  # imported here, not at collection: the other tests here need no torch
    from gloo_group import one_rank

    yield from one_rank()
