"""Fusion ids name where a fusion sits in the program (issue 27 item 2, issue 35 item 1), not what nvscope saw first.

``<phase>/<name>@<module>:<qualname>`` for a fusion of a jitted function (its forward's for a backward), ``:<t>``
after it for the function's t-th trace, ``#k`` only for fusions nothing else tells apart (one function jitted twice);
a glob selects by the id, by the short form ``<phase>/<name>`` (every such fusion) or by the numbered id. Observed
through the Thunder double: ids in audits and `nvscope.fusions`, which fusion the fake nvFuser ran with which options,
and the rows, culprits and lines of profile and bisect. The model-based proof over random programs is
tests/core/test_fusion_ids_model.py.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from contextlib import nullcontext
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
HERE = "test_fusion_ids"
ENCODER = f"forward/nvFusion0@{HERE}:encoder"
DECODER = f"forward/nvFusion0@{HERE}:decoder"


@pytest.fixture
def double(monkeypatch: pytest.MonkeyPatch) -> Iterator[ThunderDouble]:
    reset_nvscope()
    yield ThunderDouble(monkeypatch)
    reset_nvscope()


# Two jitted functions, each with one fusion Thunder calls nvFusion0: module-level, so their qualnames are plain.
WRAPPERS: list[Any] = []


def encoder(x: Any) -> Any:
    return WRAPPERS[0](x)[0]


def decoder(x: Any) -> Any:
    return WRAPPERS[1](x)[0]


class TwoFunctions:
    """``step(x)``: the two jitted functions; ``breaks`` maps 0 or 1 to an option under which that one fails."""

    def __init__(self, double: ThunderDouble, breaks: dict[int, str] | None = None) -> None:
        breaks = breaks or {}
        self.double = double
        # Two different definitions (an identical one would share the first's compiled partition, nvscope._exec._shared,
        # and `ran` could not tell the functions apart by the definition that ran).
        WRAPPERS[:] = [double.make_wrapper("nvFusion0", breaks_with=breaks.get(i), ops=("linear",) * (i + 1))
                       for i in range(2)]
        self.wrappers = list(WRAPPERS)
        self.encoder, self.decoder = jit(encoder), jit(decoder)

    def __call__(self, x: Any) -> Any:
        return self.decoder(self.encoder(x))

    def ran(self, since: int = 0) -> list[tuple[int, OptionSet]]:
        """(which wrapper, options) of each execution since ``since``: wrapper i's definitions hold its ops."""
        return [(len(e.fd.calls) - 2, OptionSet(e.enable or (), e.disable or ()))
                for e in self.double.executions[since:]]


def t(n: int = 2) -> Tensor:
    return Tensor((1.0,) * n)


def test_two_jitted_functions_are_named_after_their_functions(double: ThunderDouble) -> None:
    nvscope.thunder.install()
    step = TwoFunctions(double)
    found = nvscope.fusions(step, t())
    assert [f.id for f in found] == [ENCODER, DECODER]
    assert [(f.function, f.site, f.instance) for f in found] == [("encoder", f"{HERE}:encoder", 1),
                                                                 ("decoder", f"{HERE}:decoder", 1)]
    with audit() as log:
        step(t())
    assert [r.fusion for r in log.records] == [ENCODER, DECODER]


def test_an_id_does_not_depend_on_what_ran_first_or_what_was_scoped(double: ThunderDouble) -> None:
    """The issue's case: a listing audits everything; a later run scopes only the second function's fusion, or calls
    it first. Each is a fresh run of the program (uninstall, new objects), as another process would be."""
    listed = [f.id for f in nvscope.fusions(TwoFunctions(double), t())]
    nvscope.uninstall()
    step = TwoFunctions(double)
    step.decoder(t())  # the decoder alone first, unscoped: nvscope does not see it
    with audit() as log, nv_options(enable=SFC, fusions=listed[1]):
        step.decoder(t())
    assert [r.fusion for r in log.records] == [listed[1]]
    assert step.ran(len(double.executions) - 1) == [(1, OptionSet(SFC))]
    nvscope.uninstall()
    step = TwoFunctions(double)
    with audit() as log:
        step.decoder(t())
        step.encoder(t())
    assert [r.fusion for r in log.records] == [listed[1], listed[0]]


@pytest.mark.parametrize(("glob", "reached"), [
    ("*/nvFusion0", [0, 1]), ("forward/*", [0, 1]), ("forward/nvFusion0", [0, 1]), (ENCODER, [0]), (DECODER, [1]),
    (f"{DECODER}#1", [1]), ("forward/nvFusion0@*:encoder", [0]), (f"*@{HERE}:*", [0, 1]), ("forward/nvFusion0#2", []),
])
def test_a_glob_selects_by_id_by_phase_and_name_or_by_number(double: ThunderDouble, glob: str,
                                                             reached: list[int]) -> None:
    step = TwoFunctions(double)
    step(t())
    since = len(double.executions)
    with pytest.warns(nvscope.NoEffectWarning) if not reached else nullcontext(), nv_options(enable=SFC,
                                                                                              fusions=glob):
        step(t())  # "forward/nvFusion0#2" numbered the second to claim the name; now only where nothing else can
    assert step.ran(since) == [(i, OptionSet(SFC) if i in reached else OptionSet()) for i in (0, 1)]


def jitted_encode(wrapper: Any) -> Any:
    """The same function (one qualname) jitted anew, with its own fusion: Thunder's traces are per jit."""

    def encode(x: Any) -> Any:
        return wrapper(x)[0]

    return jit(encode)


ENCODE = f"forward/nvFusion0@{HERE}:jitted_encode.<locals>.encode"


def test_one_function_jitted_twice_is_told_apart_by_number(double: ThunderDouble) -> None:
    first, second = (jitted_encode(double.make_wrapper("nvFusion0", ops=ops)) for ops in (("linear",), ("add",)))
    with audit() as log:
        first(t())
        second(t())
    assert [r.fusion for r in log.records] == [ENCODE, f"{ENCODE}#2"]
    assert [exact_glob(r.fusion) for r in log.records] == [ENCODE, f"{ENCODE}#2"]  # exact as printed
    since = len(double.executions)
    with nv_options(enable=SFC, fusions=f"{ENCODE}#2"):
        second(t())
        first(t())
    assert [OptionSet(e.enable or (), e.disable or ()) for e in double.executions[since:]] == [OptionSet(SFC),
                                                                                              OptionSet()]


def test_a_functions_traces_are_numbered_by_thunders_cache(double: ThunderDouble) -> None:
    """One function, two input shapes: two traces, each with its nvFusion0. The index is the trace's in Thunder's
    cache (the order the function met the shapes), so a run that scopes only the second trace names it alike."""
    by_size = {2: double.make_wrapper("nvFusion0"), 3: double.make_wrapper("nvFusion0", ops=("add",))}

    def shaped(x: Any) -> Any:
        return by_size[len(x.values)](x)

    jitted = jit(shaped)
    jitted(t(2))  # unscoped: trace 0, which nvscope does not see
    with audit() as log, nv_options(enable=SFC, fusions=f"forward/nvFusion0@{HERE}:*shaped:1"):
        jitted(t(3))
        jitted(t(2))
    site = f"{HERE}:test_a_functions_traces_are_numbered_by_thunders_cache.<locals>.shaped"
    assert [r.fusion for r in log.records] == [f"forward/nvFusion0@{site}:1", f"forward/nvFusion0@{site}"]
    assert [r.options for r in log.records] == [OptionSet(SFC), OptionSet()]


def test_exact_glob_adds_a_number_only_where_the_id_is_also_a_short_form(double: ThunderDouble) -> None:
    step = TwoFunctions(double)
    outside = double.make_wrapper("nvFusion0", ops=("mul",))  # run outside any jitted function: no site
    ids = [f.id for f in nvscope.fusions(lambda x: outside(step(x)), t())]
    assert ids == [ENCODER, DECODER, "forward/nvFusion0"]
    assert [exact_glob(i) for i in ids] == [ENCODER, DECODER, "forward/nvFusion0#1"]
    assert exact_glob("backward/nvFusion3") == "backward/nvFusion3"  # alone with its short form: as it is
    assert exact_glob("forward/x*@m:f") == "forward/x[*]@m:f"
    for k, fusion_id in enumerate(ids):
        since = len(double.executions)
        with nv_options(enable=SFC, fusions=[exact_glob(fusion_id)]):
            outside(step(t()))
        got = [OptionSet(e.enable or (), e.disable or ()) for e in double.executions[since:]]
        assert got == [OptionSet(SFC) if i == k else OptionSet() for i in range(3)]


def test_profile_has_a_row_per_fusion(double: ThunderDouble) -> None:
    step = TwoFunctions(double)
    result = profile(step, t(), enable=SFC, rounds=5, steps_per_round=1, warmup=1, progress=False)
    assert [(r.fusion, r.calls) for r in result.rows] == [(ENCODER, 1), (DECODER, 1)]


@pytest.mark.parametrize("culprit", [0, 1])
def test_bisect_tells_the_two_apart_and_its_line_selects_the_culprit_alone(double: ThunderDouble,
                                                                          culprit: int) -> None:
    step = TwoFunctions(double, breaks={culprit: "fuse_matmul"})
    result = bisect(step, t(), enable=["fuse_matmul", "static_fusion_count"])
    assert result.reproduced and result.all_fusions == (ENCODER, DECODER)
    assert result.fusions == ((ENCODER, DECODER)[culprit],)
    assert result.line() == f"nv_options(enable=['fuse_matmul'], fusions=[{(ENCODER, DECODER)[culprit]!r}])"
    nvscope.uninstall()  # the line in a fresh run, the other function called first
    step = TwoFunctions(double, breaks={culprit: "fuse_matmul"})
    with nv_options(enable=["fuse_matmul"], fusions=list(result.fusions)), pytest.raises(Exception) as raised:
        step.decoder(t())
        step.encoder(t())
    assert any(f"fusion {result.fusions[0]} failed" in note for note in raised.value.__notes__)


def test_a_fusion_info_carries_its_site_and_number() -> None:
    second = FusionInfo("nvFusion0", "forward", ["add"], "f", instance=2, site="train:f")
    assert second.id == "forward/nvFusion0@train:f#2" and second.aliases() == ("forward/nvFusion0",
                                                                              "forward/nvFusion0@train:f#2")
    assert repr(second) == "FusionInfo('forward/nvFusion0@train:f#2', ops=['add'], function='f')"
    assert pickle.loads(pickle.dumps(second)) == second
    assert FusionInfo("nvFusion0", "forward").id == "forward/nvFusion0"  # no site: the short form, as before
    assert FusionInfo("nvFusion0", "forward", site="a:f") != FusionInfo("nvFusion0", "forward", site="b:f")
    for bad, error in ((0, ValueError), ("2", TypeError), (True, TypeError)):
        with pytest.raises(error, match="instance="):
            FusionInfo("nvFusion0", "forward", instance=bad)  # type: ignore[arg-type]
    for site, error in (("", ValueError), ("a:f#2", ValueError), ("a:f*", ValueError), ("a/b", ValueError),
                        ("a f", ValueError), (3, TypeError)):
        with pytest.raises(error, match="site="):
            FusionInfo("nvFusion0", "forward", site=site)  # type: ignore[arg-type]


def test_a_failure_note_and_its_repro_script_name_the_one_fusion(double: ThunderDouble) -> None:
    step = TwoFunctions(double, breaks={1: "fuse_matmul"})
    step(t())
    with nv_options(enable=["fuse_matmul"]), pytest.raises(RuntimeError, match="INTERNAL ASSERT") as raised:
        step(t())
    note = "\n".join(raised.value.__notes__)
    assert f"fusion {DECODER} failed" in note and "forward-nvFusion0_test_fusion_ids_decoder-" in note


def test_an_id_outlives_uninstall_and_install(double: ThunderDouble) -> None:
    """The same fusion seen again after nvscope.uninstall() keeps its id, even a number by order; a fusion seen for
    the first time after it, once the others were seen again, does not take their numbers."""
    first, second = (jitted_encode(double.make_wrapper("nvFusion0", ops=ops)) for ops in (("linear",), ("add",)))
    with audit() as log:
        first(t())
        second(t())
    nvscope.uninstall()
    third = jitted_encode(double.make_wrapper("nvFusion0", ops=("mul",)))
    with audit() as log:
        second(t())
        third(t())
        first(t())
    assert [r.fusion for r in log.records] == [f"{ENCODE}#2", f"{ENCODE}#3", ENCODE]


def test_ids_learned_from_another_process_make_the_culprit_line_exact() -> None:
    """A subprocess bisect learns the ids from its child: a fusion without a site whose short form another shares
    gets ``#1``; numbered ids and ids with a site are exact as they are."""
    from nvscope._core._fusion import forget_ids, note_ids

    forget_ids()
    try:
        assert exact_glob("forward/nvFusion0") == "forward/nvFusion0"
        note_ids(["forward/nvFusion0", "forward/nvFusion0@m:f", "forward/nvFusion0@m:f#2", "call/FusionDefinition#3",
                  "backward/nvFusion1@m:f", "junk"])
        assert [exact_glob(i) for i in ("forward/nvFusion0", "forward/nvFusion0@m:f", "forward/nvFusion0@m:f#2",
                                        "backward/nvFusion1@m:f", "call/FusionDefinition#3")] == [
            "forward/nvFusion0#1", "forward/nvFusion0@m:f", "forward/nvFusion0@m:f#2", "backward/nvFusion1@m:f",
            "call/FusionDefinition#3"]
    finally:
        forget_ids()


def test_a_long_glob_is_cut_in_messages() -> None:
    """Issue 35 item 11: a 180,000-character glob, an unbalanced one, a long phase or op name: one short message."""
    long = "x" * 180_000
    for call in (lambda: nv_options(enable=SFC, fusions=long), lambda: nv_options(enable=SFC, fusions=long + "["),
                 lambda: nv_options(enable=SFC, fusions=[f"forward/{long}", long]),
                 lambda: nvscope.phase(long), lambda: nvscope.holding(long + "-"),
                 lambda: FusionInfo(long, "forward", site=long + "#")):
        with pytest.raises((ValueError, TypeError)) as raised:
            call()
        assert len(str(raised.value)) < 1000 and " characters)" in str(raised.value), str(raised.value)[:300]
    scope = nv_options(enable=SFC, fusions=[f"forward/{long}"] * 3)
    assert len(repr(scope)) < 1000 and len(repr(nvscope.phase("forward") | f"forward/{long}")) < 1000
