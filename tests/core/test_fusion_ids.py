"""Fusion ids name one fusion each (issue 27, item 2): two jitted functions both have a ``forward/nvFusion0``.

The second distinct fusion to claim ``<phase>/<name>`` is ``<phase>/<name>#2`` (in order of first sight, so the same
program gives the same ids); a glob selects by the id, by ``<phase>/<name>`` (every such fusion) or by the numbered
id (``#1`` for the first). Observed through the Thunder double: ids in audits and `nvscope.fusions`, which fusion the
fake nvFuser ran with which options, and the rows, culprits and lines of profile and bisect.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import pytest
from fake_nvfuser_frontend import Tensor
from thunder_double import ThunderDouble, jit, reset_nvscope

import nvscope
import nvscope.thunder
from nvscope import FusionInfo, OptionSet, audit, nv_options
from nvscope._core._fusion import exact_glob
from nvscope._tools._bisect import bisect
from nvscope._tools._profile import profile

SFC = ["static_fusion_count"]


@pytest.fixture
def double(monkeypatch: pytest.MonkeyPatch) -> Iterator[ThunderDouble]:
    reset_nvscope()
    yield ThunderDouble(monkeypatch)
    reset_nvscope()


class TwoFunctions:
    """``step(x)``: two jitted functions, each with one fusion Thunder calls ``nvFusion0``; ``breaks`` maps 0 or 1 to
    an option under which that function's fusion fails."""

    def __init__(self, double: ThunderDouble, breaks: dict[int, str] | None = None) -> None:
        breaks = breaks or {}
        self.double = double
        # Two different definitions (an identical one would share the first's compiled partition, nvscope._exec._shared,
        # and `ran` could not tell the functions apart by the definition that ran).
        self.wrappers = [double.make_wrapper("nvFusion0", breaks_with=breaks.get(i), ops=("linear",) * (i + 1))
                         for i in range(2)]

        def encoder(x: Any) -> Any:
            return self.wrappers[0](x)[0]

        def decoder(x: Any) -> Any:
            return self.wrappers[1](x)[0]

        self.encoder, self.decoder = jit(encoder), jit(decoder)

    def __call__(self, x: Any) -> Any:
        return self.decoder(self.encoder(x))

    def ran(self, since: int = 0) -> list[tuple[int, OptionSet]]:
        """(which wrapper, options) of each execution since ``since``: wrapper i's definitions hold its descriptors."""
        out = []
        for execution in self.double.executions[since:]:
            owner = next(i for i, w in enumerate(self.wrappers) if execution.fd in _definitions(self.double, w))
            out.append((owner, OptionSet(execution.enable or (), execution.disable or ())))
        return out


def _definitions(double: ThunderDouble, wrapper: Any) -> list[Any]:
    table = nvscope.thunder.partitions(wrapper)
    fds = [wrapper.last_used]
    if table is not None:
        fds += [p.runner.last_used for p in (table.get(o)[0] for o in table.keys())]
    return [fd for fd in fds if fd is not None]


def t() -> Tensor:
    return Tensor((1.0, 2.0))


def test_two_jitted_functions_get_one_id_each_in_order_of_first_sight(double: ThunderDouble) -> None:
    nvscope.thunder.install()
    step = TwoFunctions(double)
    found = nvscope.fusions(step, t())
    assert [f.id for f in found] == ["forward/nvFusion0", "forward/nvFusion0#2"]
    assert [f.function for f in found] == ["TwoFunctions.__init__.<locals>.encoder",
                                           "TwoFunctions.__init__.<locals>.decoder"]
    assert [(f.name, f.instance) for f in found] == [("nvFusion0", 1), ("nvFusion0", 2)]
    with audit() as log:
        step(t())
    assert [r.fusion for r in log.records] == ["forward/nvFusion0", "forward/nvFusion0#2"]
    # The same program in a fresh state (what another run of it is) gives the same ids.
    nvscope.uninstall()
    again = TwoFunctions(double)
    assert [f.id for f in nvscope.fusions(again, t())] == ["forward/nvFusion0", "forward/nvFusion0#2"]


@pytest.mark.parametrize(("glob", "reached"), [
    ("*/nvFusion0", [0, 1]), ("forward/*", [0, 1]), ("forward/nvFusion0", [0, 1]),
    ("forward/nvFusion0#2", [1]), ("forward/nvFusion0#1", [0]), ("forward/nvFusion0#[12]", [0, 1]),
])
def test_a_glob_selects_by_id_by_phase_and_name_or_by_number(double: ThunderDouble, glob: str,
                                                             reached: list[int]) -> None:
    step = TwoFunctions(double)
    step(t())  # unscoped first: ids by first sight
    since = len(double.executions)
    with nv_options(enable=SFC, fusions=glob):
        step(t())
    assert step.ran(since) == [(i, OptionSet(SFC) if i in reached else OptionSet()) for i in (0, 1)]


def test_exact_glob_selects_one_fusion_of_several_with_one_name(double: ThunderDouble) -> None:
    step = TwoFunctions(double)
    ids = [f.id for f in nvscope.fusions(step, t())]
    assert [exact_glob(i) for i in ids] == ["forward/nvFusion0#1", "forward/nvFusion0#2"]
    assert exact_glob("backward/nvFusion3") == "backward/nvFusion3"  # alone with its name: the id as it is
    for k, fusion_id in enumerate(ids):
        since = len(double.executions)
        with nv_options(enable=SFC, fusions=[exact_glob(fusion_id)]):
            step(t())
        assert step.ran(since) == [(i, OptionSet(SFC) if i == k else OptionSet()) for i in (0, 1)]


def test_profile_has_a_row_per_fusion(double: ThunderDouble) -> None:
    step = TwoFunctions(double)
    result = profile(step, t(), enable=SFC, rounds=5, steps_per_round=1, warmup=1, progress=False)
    assert [(r.fusion, r.calls) for r in result.rows] == [("forward/nvFusion0", 1), ("forward/nvFusion0#2", 1)]
    assert len({r.fusion for r in result.rows}) == 2


def test_bisect_tells_the_two_apart_and_its_line_selects_the_culprit_alone(double: ThunderDouble) -> None:
    step = TwoFunctions(double, breaks={0: "fuse_matmul"})
    result = bisect(step, t(), enable=["fuse_matmul", "static_fusion_count"])
    assert result.reproduced and result.all_fusions == ("forward/nvFusion0", "forward/nvFusion0#2")
    assert result.fusions == ("forward/nvFusion0",)
    assert result.line() == "nv_options(enable=['fuse_matmul'], fusions=['forward/nvFusion0#1'])"
    assert "x 2 fusions" in result.report()
    with nv_options(enable=["fuse_matmul"], fusions=["forward/nvFusion0#1"]), pytest.raises(Exception) as raised:
        step(t())  # the line reproduces: the first function's fusion breaks under it
    assert any("fusion forward/nvFusion0 failed" in note for note in raised.value.__notes__)


def test_the_second_function_as_culprit(double: ThunderDouble) -> None:
    step = TwoFunctions(double, breaks={1: "fuse_matmul"})
    result = bisect(step, t(), enable=["fuse_matmul"])
    assert result.fusions == ("forward/nvFusion0#2",)
    assert result.line() == "nv_options(enable=['fuse_matmul'], fusions=['forward/nvFusion0#2'])"


def test_a_fusion_info_carries_its_number() -> None:
    second = FusionInfo("nvFusion0", "forward", ["add"], "f", instance=2)
    assert second.id == "forward/nvFusion0#2" and repr(second) == "FusionInfo('forward/nvFusion0#2', ops=['add'], " \
        "function='f')"
    assert pickle.loads(pickle.dumps(second)) == second
    assert FusionInfo("nvFusion0", "forward") != FusionInfo("nvFusion0", "forward", instance=2)
    for bad, error in ((0, ValueError), ("2", TypeError), (True, TypeError)):
        with pytest.raises(error, match="instance="):
            FusionInfo("nvFusion0", "forward", instance=bad)  # type: ignore[arg-type]


def test_a_failure_note_and_its_repro_script_name_the_one_fusion(double: ThunderDouble) -> None:
    step = TwoFunctions(double, breaks={1: "fuse_matmul"})
    step(t())
    with nv_options(enable=["fuse_matmul"]), pytest.raises(RuntimeError, match="INTERNAL ASSERT") as raised:
        step(t())
    note = "\n".join(raised.value.__notes__)
    assert "fusion forward/nvFusion0#2 failed" in note and "forward-nvFusion0_2-" in note


def test_ids_learned_from_another_process_make_the_culprit_line_exact() -> None:
    """A subprocess bisect learns the ids from its child: ``x#2`` among them makes ``x``'s glob ``x#1``."""
    from nvscope._core._fusion import forget_ids, note_ids

    forget_ids()
    try:
        assert exact_glob("forward/nvFusion0") == "forward/nvFusion0"
        note_ids(["forward/nvFusion0", "forward/nvFusion0#2", "call/FusionDefinition#3", "backward/nvFusion1"])
        assert [exact_glob(i) for i in ("forward/nvFusion0", "forward/nvFusion0#2", "backward/nvFusion1",
                                        "call/FusionDefinition#3")] == [
            "forward/nvFusion0#1", "forward/nvFusion0#2", "backward/nvFusion1", "call/FusionDefinition#3"]
    finally:
        forget_ids()
