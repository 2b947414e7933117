"""tests/gpu: the real path, on CUDA with nvFuser and Lightning Thunder. Skipped cleanly where any is missing.

Run on the H200 through ../shared/gpu (see README): `source .gpu/activate.sh && python -m pytest tests/gpu -q`.
"""

from __future__ import annotations

import importlib.util
import os

import pytest


def _missing() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    import torch

    if not torch.cuda.is_available():
        return "CUDA is not available"
    if importlib.util.find_spec("nvfuser_direct") is None and importlib.util.find_spec("nvfuser") is None:
        return "nvFuser is not installed"
    try:
        import thunder  # noqa: F401
    except Exception as error:  # Thunder 0.2.x does not import with torch >= 2.13
        return f"Lightning Thunder is not importable: {error!r}"
    return None


_reason = _missing()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu = [item for item in items if "tests/gpu" in str(item.fspath).replace("\\", "/")]
    for item in gpu:  # some of their scopes' NoFusion/NoEffectWarnings are not asserted yet: shown, not errors as
        item.add_marker(pytest.mark.filterwarnings("default::nvscope.NvscopeWarning"))  # elsewhere (pyproject)
    if _reason is None:
        return
    skip = pytest.mark.skip(reason=f"tests/gpu need CUDA, nvFuser and Thunder: {_reason}")
    for item in gpu:
        item.add_marker(skip)


@pytest.fixture(autouse=True)
def _development_mode():
    import nvscope

    previous = nvscope.set_development_mode(True)
    yield
    nvscope.set_development_mode(previous)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With NVSCOPE_GPU_FAILURES=<file>, each failure's report is appended there the moment it happens.

    A device call has a time limit; pytest prints failures only at the end, so a run cut by that limit loses them
    (2026-12-04: one failure of a full run on next was known only as an "F" in the progress line).
    """
    path = os.environ.get("NVSCOPE_GPU_FAILURES")
    if not path or not report.failed:
        return
    with open(path, "a", encoding="utf-8") as file:
        file.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext}\n")
        for name, text in report.sections:
            file.write(f"---- {name}\n{text}\n")
