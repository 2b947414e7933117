"""The fast path, followed call by call: a scoped fusion call whose partition is cached goes from the adapter's
patch to nvFuser's ``execute`` through two nvscope functions (the patch, `nvscope._exec._execute`; the partition's
run, the adapter's module), for Thunder's adapter and the direct nvFuser adapter alike, building no dict on the way.
``sys.setprofile`` sees every Python function call; the doubles stand in for Thunder and nvFuser.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest
from fake_nvfuser_frontend import Tensor
from thunder_double import ThunderDouble, load_frontend, reset_nvscope

import nvscope.nvfuser
import nvscope.thunder
from nvscope import audit, nv_options

FM = ["fuse_matmul"]


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    reset_nvscope()
    yield
    reset_nvscope()


def followed(call: Callable[[], Any], frontend: str) -> tuple[list[str], list[str], list[str]]:
    """Run ``call`` under ``sys.setprofile``: the nvscope functions it called before ``frontend``'s
    ``FusionDefinition.execute`` began (``module.function``, in order), those called inside that execute, and every
    dict comprehension run before it (a dict built per call)."""
    before: list[str] = []
    inside: list[str] = []
    comprehensions: list[str] = []
    reached: list[FrameType] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        name = frame.f_code.co_name
        if not reached and module == frontend and name == "execute":
            reached.append(frame)
            return
        if name == "<dictcomp>" and not reached:
            comprehensions.append(module)
        elif module.partition(".")[0] == "nvscope":
            (inside if reached else before).append(f"{module}.{name}")

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    assert reached, f"{frontend}'s execute never ran"
    return before, inside, comprehensions


def direct_linear(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """The direct frontend double, nvscope's adapter installed over it, and a definition holding a linear."""
    fe = load_frontend(monkeypatch, "nvfuser_direct")
    assert nvscope.nvfuser.install()
    with fe.FusionDefinition() as fd:
        fd.define_tensor(shape=[2], dtype=fe.DataType.Float)
        fd.ops.linear(0)
    return fe, fd


def test_thunders_repeated_scoped_call_is_two_nvscope_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    double = ThunderDouble(monkeypatch)
    assert nvscope.thunder.install()
    fusion = double.make_wrapper()
    x = Tensor((1.0, 1.0))
    with nv_options(enable=FM):
        fusion(x)  # builds and compiles the partition: the fusion's memo now holds it
        before, inside, dicts = followed(lambda: fusion(x), "nvfuser_direct")
    assert before == ["nvscope._exec._execute.call", "nvscope._exec._thunder_adapter.run"]
    assert inside == dicts == []
    assert double.executions[-1].enable == FM  # the partition ran, with the options
    assert fusion.last_used is double.executions[-1].fd  # and Thunder's tools see what ran


def test_a_direct_definitions_repeated_scoped_call_is_two_nvscope_functions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fe, fd = direct_linear(monkeypatch)
    with nv_options(enable=FM):
        fd.execute([1.0, 1.0])
        before, inside, dicts = followed(lambda: fd.execute([1.0, 1.0]), "nvfuser_direct")
    assert before == ["nvscope._exec._execute.call", "nvscope._exec._nvfuser.run"]  # as short as Thunder's
    assert inside == dicts == []  # no dict built per call: the options go to nvFuser as keyword arguments
    ran = fe.EXECUTIONS[-1]
    assert ran.fd is not fd and ran.enable == FM  # the partition's rebuilt definition, with the options


def test_what_the_call_wrapper_leaves_to_execute_is_recorded_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under an audit (or with keyword arguments) a call never takes the call wrapper's cache hit: it is recorded."""
    fe, fd = direct_linear(monkeypatch)
    with nv_options(enable=FM):
        fd.execute([1.0, 1.0])
        with audit() as log:
            fd.execute([1.0, 1.0])
            fd.execute([1.0, 1.0], device="cuda:0")
    assert [(r.route, r.options.enable) for r in log.records] == [("reused", frozenset(FM))] * 2
    assert [e.device for e in fe.EXECUTIONS[-2:]] == [None, "cuda:0"]  # a definition per device argument
