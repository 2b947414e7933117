"""Shared by the CPU tests that need a real torch.distributed group: one gloo rank, and the Thunder double over it.

tests/exec/conftest.py gives its tests `process_group` (over `one_rank`). Elsewhere, import the fixtures after
``pytest.importorskip("torch")``; pytest picks them up from the importing module's namespace.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import torch.distributed as tdist
from thunder_double import ThunderDouble, reset_nvscope

import nvscope.thunder

__all__ = ["installed", "one_rank", "process_group"]


def one_rank() -> Iterator[None]:
    """A one-rank gloo group for the time the generator runs (the process's group, if it has one already)."""
    if tdist.is_initialized():  # another module's group: use it, leave it
        yield
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    tdist.destroy_process_group()


@pytest.fixture(scope="module")
def process_group() -> Iterator[None]:
    yield from one_rank()


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch, process_group: None) -> Iterator[ThunderDouble]:
    reset_nvscope()
    double = ThunderDouble(monkeypatch)
    assert nvscope.thunder.install()
    yield double
    reset_nvscope()
