"""Once torch.profiler has run in a process (`kernel_names`), it holds CUPTI for good: the scheduler recorder then
reads kernel names instead of asking nvFuser's own profiler, which would abort the process."""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from nvscope._measure import kernel_names, recorder
from nvscope._measure._kernels import Cupti


class Profile:
    """torch.profiler.profile without CUDA: no events."""

    def __init__(self, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> Profile:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def events(self) -> list[Any]:
        return []


@pytest.fixture
def cuda_and_nvfuser(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr("torch.profiler.profile", Profile)
    monkeypatch.setitem(sys.modules, "nvfuser_direct", types.SimpleNamespace(PythonProfiler=contextlib.nullcontext))
    monkeypatch.setattr(Cupti, "held", False)  # this process's real profiler history is not the test's
    yield


@pytest.mark.usefixtures("cuda_and_nvfuser")
def test_after_kernel_names_the_recorder_reads_kernel_names() -> None:
    assert recorder("nvfuser").source == "nvFuser's PythonProfiler"  # type: ignore[union-attr]
    assert kernel_names(lambda: 7) == ([], 7)
    assert recorder("nvfuser").source == "kernel names (torch.profiler)"  # type: ignore[union-attr]
