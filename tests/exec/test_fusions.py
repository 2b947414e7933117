"""Per-fusion control against the Thunder double: identity, selectors, the catalog's gates, fallback, listing.

Observed: which FusionDefinition each fake nvFuser execution ran (Thunder's own or a partition's) and the options it
got, nvscope's audit records, warnings, and the fusions' outputs.
"""

from __future__ import annotations

import re
import sys
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
from fake_nvfuser_frontend import Tensor
from thunder_double import ThunderDouble, jit, reset_nvscope

import nvscope
import nvscope.thunder
from nvscope import FusionInfo, NvscopeError, OptionSet, audit, holding, nv_options, phase
from nvscope._core._site import inputs_digest

FM = ["fuse_matmul"]
SFC = ["static_fusion_count"]
MEE = ["matmul_expr_eval"]


def t(n: int = 2) -> Tensor:
    return Tensor((1.0,) * n)


def options_of(double: ThunderDouble, since: int = 0) -> list[OptionSet]:
    return [OptionSet(e.enable or (), e.disable or ()) for e in double.executions[since:]]


# --- identity ----------------------------------------------------------------------------------------------------

def test_fusions_lists_ids_phases_ops_and_the_jitted_function(installed: ThunderDouble) -> None:
    torch = pytest.importorskip("torch")
    model, _, _ = installed.make_model()

    def train_step(x: Any) -> None:
        model(x).sum().backward()

    step = jit(train_step)
    found = nvscope.fusions(step, torch.ones(3, requires_grad=True))
    function = "test_fusions_lists_ids_phases_ops_and_the_jitted_function.<locals>.train_step"
    site = f"test_fusions:{function}"
    # The key: a digest of each fusion's inputs (which trace of the function it belongs to).
    assert all(f.key is not None and re.fullmatch("[0-9a-f]{6}", f.key) for f in found)
    assert [f.id for f in found] == [f"forward/nvFusion0@{site}:{found[0].key}",
                                     f"backward/nvFusion1@{site}:{found[1].key}"]
    assert [f.phase for f in found] == ["forward", "backward"] and all(f.ops == ("linear",) for f in found)
    assert found[0].function == function and found[0].site == site
    assert found[0] == FusionInfo("nvFusion0", "forward", ["linear"], function, site=site, key=found[0].key)


def test_a_backwards_function_is_its_forwards_when_the_forward_ran_scoped(installed: ThunderDouble) -> None:
    torch = pytest.importorskip("torch")
    model, _, _ = installed.make_model()
    step = jit(model)
    x = torch.ones(3, requires_grad=True)
    with audit() as log:
        with nv_options(enable=SFC):
            y = step(x)
        y.sum().backward()  # on another line, outside the jitted function: named after its forward's
    assert [f.function for f in log.fusions()] == ["ThunderDouble.make_model.<locals>.model"] * 2


def test_fusions_and_audit_see_a_step_run_before_any_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    reset_nvscope()
    double = ThunderDouble(monkeypatch)  # imported, not installed: no scope was ever entered
    try:
        step = jit(double.make_wrapper())
        step(t())  # a first, unscoped step
        # The jitted callable is the fusion wrapper itself here: named after its class, as an nn.Module would be.
        fusion_id = ("forward/nvFusion0@thunder.executors.nvfuserex_impl:FusionDefinitionWrapper:"
                     + inputs_digest((t(),)))
        assert [f.id for f in nvscope.fusions(step, t())] == [fusion_id]
        with audit() as log:
            step(t())
        assert [r.fusion for r in log.records] == [fusion_id]
    finally:
        reset_nvscope()


def test_fusions_installs_nothing_under_nvscope_autoinstall_0(monkeypatch: pytest.MonkeyPatch) -> None:
    reset_nvscope()
    monkeypatch.setenv("NVSCOPE_AUTOINSTALL", "0")
    double = ThunderDouble(monkeypatch)
    try:
        assert nvscope.fusions(double.make_wrapper(), t()) == []
        assert not nvscope.thunder.installed()
    finally:
        reset_nvscope()


def test_fusions_sees_a_direct_fusion_definition_program(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")  # the direct adapter rebuilds definitions from Python that imports torch
    from thunder_double import load_frontend

    reset_nvscope()
    fe = load_frontend(monkeypatch, "nvfuser_direct")  # no Thunder
    try:
        with fe.FusionDefinition() as fd:
            fd.define_tensor(shape=[2], dtype=fe.DataType.Float)
            fd.ops.linear(0)
        (info,) = nvscope.fusions(lambda: fd.execute([1.0, 2.0]))  # looked up when it runs, as in a step
        assert info.phase == "call" and info.ops == ("linear",) and info.site is None
        # Its id is the definition's digest alone; where it executed is information, not identity.
        # Where it first ran, by the code's qualified name (co_qualname, Python 3.11+; its plain name before).
        where = ("test_fusions_sees_a_direct_fusion_definition_program.<locals>.<lambda>"
                 if sys.version_info >= (3, 11) else "<lambda>")
        assert info.function == f"test_fusions:{where}"
        assert info.key is not None and info.id == f"call/FusionDefinition@{info.key}"
        assert re.fullmatch("[0-9a-f]{6}", info.key)
    finally:
        reset_nvscope()


def test_a_backwards_function_is_its_forwards_whether_or_not_the_first_step_was_scoped(
        installed: ThunderDouble) -> None:
    torch = pytest.importorskip("torch")
    model, _, _ = installed.make_model()
    jitted = jit(model)

    def train_step(x: Any) -> None:
        jitted(x).sum().backward()  # the backward outside the jitted function, as with thunder.jit(model)

    x = torch.ones(3, requires_grad=True)
    found = nvscope.fusions(train_step, x)  # unscoped: the first step nvscope sees
    name = "ThunderDouble.make_model.<locals>.model"
    assert [(f.id, f.function) for f in found] == [(f"forward/nvFusion0@thunder_double:{name}:{found[0].key}", name),
                                                   (f"backward/nvFusion1@thunder_double:{name}:{found[1].key}", name)]
    with nv_options(enable=SFC, fusions=lambda info: info.phase == "backward" and info.function == name):
        train_step(x)
    assert options_of(installed)[-2:] == [OptionSet(), OptionSet(SFC)]


@pytest.mark.parametrize("forward_scoped", [True, False])
def test_a_backward_fusions_id_does_not_depend_on_whether_its_forward_ran_in_a_scope(
        installed: ThunderDouble, forward_scoped: bool) -> None:
    """The listed id of a backward fusion selects it in a fresh run whose forward ran in a scope, or with no scope
    and no audit anywhere (the scope around ``.backward()`` alone)."""
    torch = pytest.importorskip("torch")

    def program() -> tuple[Any, Any]:
        model, _, _ = installed.make_model()
        return jit(model), torch.ones(3, requires_grad=True)

    step, x = program()
    listed = nvscope.fusions(lambda: step(x).sum().backward())
    backward_id = listed[1].id
    assert backward_id == f"backward/nvFusion1@thunder_double:ThunderDouble.make_model.<locals>.model:{listed[1].key}"
    nvscope.uninstall()  # a fresh run of the program
    nvscope.thunder.install()
    step, x = program()
    with nv_options(disable=MEE, fusions="*/*") if forward_scoped else nullcontext():
        y = step(x)
    with audit() as log, nv_options(enable=SFC, fusions=backward_id):
        y.sum().backward()
    assert [(r.fusion, r.options) for r in log.records] == [
        (backward_id, OptionSet(SFC, MEE if forward_scoped else ()))]


def test_ops_come_from_the_printed_definition(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper(ops=("matmul", "add", "matmul"))
    (info,) = nvscope.fusions(wrapper, t())
    assert info.ops == ("add", "matmul") and info.id == "forward/nvFusion0"


@pytest.mark.parametrize(("args", "error", "match"), [
    (("nvFusion0", "forward", "linear"), TypeError, r"ops= takes a collection of op names.*\('linear',\)"),
    (("nvFusion0", "Forward"), ValueError, r"phase 'Forward'.*'forward', 'backward' or 'call'"),
    (("", "forward"), ValueError, "name"),
    ((3, "forward"), TypeError, "name"),
])
def test_a_fusion_info_refuses_what_no_selector_could_match(args: tuple[Any, ...], error: type[Exception],
                                                            match: str) -> None:
    with pytest.raises(error, match=match):
        FusionInfo(*args)


def test_current_options_takes_a_fusion_info() -> None:
    for scope in (nv_options(enable=SFC), nv_options(enable=SFC, fusions="forward/*")):
        with scope, pytest.raises(TypeError, match=r"FusionInfo\('nvFusion0', 'forward'"):
            nvscope.current_options("forward/nvFusion0")  # type: ignore[arg-type]


# --- selectors ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fusions", ["forward/*", ["forward/nvFusion0"], phase("forward"),
                                     lambda f: f.phase == "forward", ~phase("backward")])
def test_a_selector_limits_the_options_to_the_fusions_it_matches(installed: ThunderDouble, fusions: Any) -> None:
    torch = pytest.importorskip("torch")
    model, _, _ = installed.make_model()
    x = torch.ones(3, requires_grad=True)
    with audit() as log, nv_options(enable=SFC, fusions=fusions):
        model(x).sum().backward()
    assert [(r.fusion, r.options, r.route) for r in log.records] == [
        ("forward/nvFusion0", OptionSet(SFC), "new"), ("backward/nvFusion1", OptionSet(), "default")]
    assert options_of(installed) == [OptionSet(SFC), OptionSet()]
    assert torch.equal(x.grad, torch.full((3,), 2.0))


def test_the_reverse_selector_reaches_only_the_backward(installed: ThunderDouble) -> None:
    torch = pytest.importorskip("torch")
    model, _, _ = installed.make_model()
    with nv_options(enable=SFC, fusions="backward/*"):
        model(torch.ones(3, requires_grad=True)).sum().backward()
    assert options_of(installed) == [OptionSet(), OptionSet(SFC)]


def test_nested_selective_scopes_each_reach_their_own_fusions(installed: ThunderDouble) -> None:
    a = installed.make_wrapper("nvFusion0", ops=("linear",))
    b = installed.make_wrapper("nvFusion1", ops=("add",))
    with nv_options(enable=SFC, fusions=holding("linear")), nv_options(disable=["fallback"], fusions="*/nvFusion1"):
        a(t())
        b(t())
        with nv_options(inherit=False, fusions="forward/nvFusion0"):  # cuts below, for that fusion only
            a(t())
            b(t())
    assert options_of(installed) == [OptionSet(SFC), OptionSet((), ["fallback"]), OptionSet(),
                                  OptionSet((), ["fallback"])]


def test_a_selector_is_matched_once_per_scope_and_fusion(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper()
    seen: list[str] = []

    def chosen(info: FusionInfo) -> bool:
        seen.append(info.id)
        return True

    scope = nv_options(enable=SFC, fusions=chosen)
    for _ in range(5):
        with scope:
            for _ in range(3):
                wrapper(t())
    other = nv_options(disable=MEE)
    for _ in range(3):  # alternating scopes: each pair resolves through the fusion's memo, not the selector
        with scope:
            wrapper(t())
        with other:
            wrapper(t())
    assert seen == ["forward/nvFusion0"]
    assert options_of(installed)[-2:] == [OptionSet(SFC), OptionSet((), MEE)]


def test_a_scope_built_anew_each_step_with_the_same_selector_matches_once(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper()
    seen: list[str] = []

    def chosen(info: FusionInfo) -> bool:
        seen.append(info.id)
        return True

    for _ in range(5):  # the usual training loop: the scope written inside it
        with nv_options(enable=SFC, fusions=chosen), nv_options(disable=MEE, fusions=phase("forward") | "*/x"):
            wrapper(t())
    assert seen == ["forward/nvFusion0"]
    assert options_of(installed) == [OptionSet(SFC, MEE)] * 5
    assert phase("forward") == phase("forward") and nvscope.holding("add") != nvscope.holding("mul")
    assert len({nv_options(fusions="backward/*").fusions, nv_options(fusions=" backward/*").fusions}) == 1


@pytest.mark.parametrize(("fusions", "error", "match"), [
    ("nvFusion0", ValueError, r"'\*/nvFusion0'"),
    ("forward/[x", ValueError, "unbalanced"),
    ("", ValueError, "empty glob"),
    ([], ValueError, "empty list"),
    (3, TypeError, "not int: 3"),
    ([3], TypeError, "not int: 3"),
    (b"forward/*", TypeError, "not bytes"),
])
def test_bad_selectors_fail_when_the_scope_is_built(fusions: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        nv_options(enable=SFC, fusions=fusions)
    assert nvscope.current_options() == OptionSet()


def test_a_selector_that_raises_names_itself_and_the_fusion_and_leaves_the_scope_whole(
        installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper()

    def broken(info: FusionInfo) -> bool:
        raise KeyError("oops")

    scope = nv_options(enable=SFC, fusions=broken)
    with scope:
        message = r"fusions=.*broken raised KeyError on fusion forward/nvFusion0"
        with pytest.raises(NvscopeError, match=message) as raised:
            wrapper(t())
        assert isinstance(raised.value.__cause__, KeyError)
        assert nvscope.current_options() == OptionSet()  # the selective scope is still the active one
    assert installed.executions == []
    with nv_options(enable=SFC):
        wrapper(t())  # the fusion is fine afterwards
    assert options_of(installed) == [OptionSet(SFC)]


def test_current_options_for_a_fusion() -> None:
    forward, backward = FusionInfo("nvFusion0", "forward"), FusionInfo("nvFusion0", "backward")
    with nv_options(enable=SFC), nv_options(disable=MEE, fusions="backward/*") as active:
        assert active == OptionSet(SFC)
        assert nvscope.current_options(forward) == OptionSet(SFC)
        assert nvscope.current_options(backward) == OptionSet(SFC, MEE)


# --- the catalog's gates -----------------------------------------------------------------------------------------

def test_an_option_that_cannot_affect_a_fusion_keeps_it_on_its_defaults_and_says_so(installed: ThunderDouble) -> None:
    pointwise = installed.make_wrapper("nvFusion0", ops=("add", "mul"))
    pointwise(t())  # warm: Thunder compiled it already
    before = len(installed.built)
    with audit() as log, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with nv_options(enable=FM, disable=MEE):
            pointwise(t())
            pointwise(t())
    assert [r.route for r in log.records] == ["default", "default"]
    assert options_of(installed, 1) == [OptionSet(), OptionSet()]
    assert len(installed.built) == before and nvscope.thunder.partitions(pointwise) is not None
    assert len(nvscope.thunder.partitions(pointwise)) == 0  # type: ignore[arg-type]
    (warning,) = [w for w in caught if issubclass(w.category, nvscope.NoEffectWarning)]
    text = str(warning.message)
    assert "changed no fusion" in text and "+fuse_matmul only fusions holding" in text
    assert "nv_enable_matmul=True" in text and warning.filename == __file__


def test_gated_options_still_reach_the_fusions_they_can_affect(installed: ThunderDouble) -> None:
    pointwise = installed.make_wrapper("nvFusion0", ops=("add",))
    matmul = installed.make_wrapper("nvFusion1", ops=("matmul",))
    with warnings.catch_warnings():
        warnings.simplefilter("error", nvscope.NoEffectWarning)  # one fusion changed: no warning
        with nv_options(enable=[*FM, *SFC], disable=MEE):
            pointwise(t())
            matmul(t())
    assert options_of(installed) == [OptionSet(SFC), OptionSet([*FM, *SFC], MEE)]


def test_a_selector_that_matches_nothing_says_so(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper()
    with pytest.warns(nvscope.NoEffectWarning, match=r"fusions='backward/\*' matched none of them"):
        with nv_options(enable=SFC, fusions="backward/*"):
            wrapper(t())


def test_a_selector_that_matched_a_fusion_whose_gate_dropped_the_options_is_not_said_to_match_none(
        installed: ThunderDouble) -> None:
    pointwise = installed.make_wrapper(ops=("add",))
    with pytest.warns(nvscope.NoEffectWarning) as caught, nv_options(enable=FM, fusions="forward/*"):
        pointwise(t())
    text = str(caught[0].message)
    assert "fusions='forward/*' matched none of them or its options can affect only some fusions" in text


def test_a_nested_selector_that_matches_nothing_says_so_as_it_would_alone(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with nv_options(enable=SFC):
            with nv_options(disable=MEE, fusions="forward/none*"):  # it matches nothing
                wrapper(t())
    said = [str(w.message) for w in caught if issubclass(w.category, nvscope.NvscopeWarning)]
    assert len(said) == 1 and "fusions='forward/none*' matched none of them" in said[0]  # the outer scope did change it
    assert options_of(installed) == [OptionSet(SFC)]


def test_a_nested_selector_that_matches_keeps_both_scopes_quiet(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper()
    with warnings.catch_warnings():
        warnings.simplefilter("error", nvscope.NvscopeWarning)
        for _ in range(2):  # the second pass runs from the fusion's memo
            with nv_options(enable=SFC), nv_options(disable=MEE, fusions="forward/*"):
                wrapper(t())
    assert options_of(installed) == [OptionSet(SFC, MEE)] * 2


def test_a_selector_that_raised_inside_its_scope_is_not_reported_as_no_fusion(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper()

    def broken(info: FusionInfo) -> bool:
        raise KeyError("oops")

    with warnings.catch_warnings():
        warnings.simplefilter("error", nvscope.NvscopeWarning)
        with nv_options(enable=SFC, fusions=broken):
            with pytest.raises(NvscopeError, match="broken raised KeyError on fusion forward/nvFusion0"):
                wrapper(t())


@pytest.mark.parametrize("result", ["no", 1, None, [True]])
def test_a_selector_returning_something_else_than_a_bool_is_refused(installed: ThunderDouble, result: Any) -> None:
    wrapper = installed.make_wrapper()

    def sloppy(info: FusionInfo) -> Any:
        return result

    with nv_options(enable=SFC, fusions=sloppy | phase("backward")):
        with pytest.raises(TypeError, match=r"fusions=.*sloppy returned .* for fusion forward/nvFusion0: a selector "
                                            r"must return True or False") as raised:
            wrapper(t())
    assert isinstance(raised.value, NvscopeError)  # nvscope's own: never a fallback
    assert installed.executions == []


def test_a_selector_built_from_the_same_globs_is_compiled_once(installed: ThunderDouble) -> None:
    globs = [f"forward/nvFusion{i}" for i in range(50)]
    first = nv_options(enable=SFC, fusions=globs).fusions
    assert nv_options(enable=SFC, fusions=list(globs)).fusions is first
    assert nv_options(enable=SFC, fusions=tuple(globs)).fusions is first
    assert nv_options(enable=SFC, fusions="forward/*").fusions is nv_options(enable=SFC, fusions="forward/*").fusions
    assert first is not None and first(FusionInfo("nvFusion7", "forward")) and \
        not first(FusionInfo("nvFusion7", "backward"))


# --- failure policy ----------------------------------------------------------------------------------------------

def test_fallback_completes_the_step_and_keeps_the_failure(installed: ThunderDouble, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("NVSCOPE_REPRO_DIR", str(tmp_path))
    model, _, _ = installed.make_model(breaks_with="fuse_matmul")  # the backward fusion breaks under fuse_matmul

    def step() -> Any:
        x = torch.ones(3, requires_grad=True)
        model(x).sum().backward()
        return x.grad

    expected = step()
    with audit() as log, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with nv_options(enable=FM, disable=MEE, on_error="fallback"):
            first = step()
            executions = len(installed.executions)
            second = step()
    assert torch.equal(first, expected) and torch.equal(second, expected)
    # The failed attempt is recorded as its partition (built, so "new"), then the defaults' run as "fallback"; the
    # second step goes to the defaults directly.
    assert [(r.fusion, r.route) for r in log.records] == [
        ("forward/nvFusion0", "new"), ("backward/nvFusion1", "new"), ("backward/nvFusion1", "fallback"),
        ("forward/nvFusion0", "reused"), ("backward/nvFusion1", "fallback")]
    failure = log.failures()[0]
    assert "INTERNAL ASSERT FAILED" in (failure.error or "") and "repro script:" in (failure.error or "")
    assert failure.options == OptionSet(FM, MEE)
    assert len(installed.executions) - executions == 2  # the second step does not try the broken partition again
    fallbacks = [w for w in caught if issubclass(w.category, nvscope.FallbackWarning)]
    assert len(fallbacks) == 1 and "backward/nvFusion1" in str(fallbacks[0].message)
    assert [p.name for p in tmp_path.iterdir()] and all(p.name.startswith("backward-nvFusion1-")
                                                        for p in tmp_path.iterdir())


def test_raise_is_the_default_and_an_inner_scope_can_ask_for_it(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper(breaks_with="fuse_matmul")
    with pytest.raises(RuntimeError, match="INTERNAL ASSERT"), nv_options(enable=FM):
        wrapper(t())
    with nv_options(on_error="fallback"):
        with pytest.warns(nvscope.FallbackWarning):
            with nv_options(enable=FM):  # inherits fallback
                assert wrapper(t()) == [t() * 2]
        with pytest.raises(RuntimeError, match="INTERNAL ASSERT"), nv_options(enable=FM, on_error="raise"):
            wrapper(t())


def test_a_backward_keeps_its_forwards_explicit_raise_inside_a_fallback_scope(installed: ThunderDouble) -> None:
    torch = pytest.importorskip("torch")
    model, _, _ = installed.make_model(breaks_with="fuse_matmul")  # the backward fusion breaks under fuse_matmul
    x = torch.ones(3, requires_grad=True)
    with nv_options(on_error="fallback"):
        with nv_options(enable=FM, on_error="raise"):
            y = model(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error", nvscope.FallbackWarning)
            with pytest.raises(RuntimeError, match="INTERNAL ASSERT"):
                y.sum().backward()  # under its forward's choice, as its options are
    with nv_options(on_error="raise"):  # and the other way round: the forward's fallback holds
        with nv_options(enable=FM, on_error="fallback"):
            y = model(x)
        with pytest.warns(nvscope.FallbackWarning):
            y.sum().backward()


def test_on_error_is_validated(installed: ThunderDouble) -> None:
    with pytest.raises(ValueError, match="on_error= takes 'raise', 'fallback' or 'torch'"):
        nv_options(enable=FM, on_error="ignore")


# --- state --------------------------------------------------------------------------------------------------------

def test_uninstall_drops_every_fusions_table(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper()
    with nv_options(enable=SFC):
        wrapper(t())
    assert nvscope.thunder.partitions(wrapper) is not None
    get_fd = wrapper.get_fd
    nvscope.thunder.uninstall()
    assert "_nvscope_partitions" not in vars(get_fd)
    nvscope.thunder.install()
    assert nvscope.thunder.partitions(wrapper) is None


def test_an_option_set_as_a_scope(installed: ThunderDouble) -> None:
    recommended = OptionSet(SFC, MEE)
    with pytest.warns(nvscope.NoFusionWarning), nv_options(recommended) as active:
        assert active == recommended
    with pytest.raises(TypeError, match="takes no disable="):
        nv_options(recommended, disable=["fallback"])


def test_with_nv_options_without_parentheses_says_how() -> None:
    with pytest.raises(TypeError, match=r"write @with_nv_options\(enable=\[\.\.\.\]\) \(with parentheses\)"):
        @nvscope.with_nv_options  # type: ignore[arg-type]
        def step() -> None:
            pass

