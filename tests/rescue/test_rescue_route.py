"""`nvscope.rescue` with the PyTorch route (``on_error="torch"``) on the Thunder double: one run of the defaults names
every fusion that raises (each runs in PyTorch and the step goes on); a fusion without an option cure is routed,
proven by a run of the whole step (against the reference when one is given); option cures and routes mix in one
line; a route whose numbers differ from the reference is no cure."""

from __future__ import annotations

import pytest
from rescue_probes import chain
from thunder_double import ThunderDouble

import nvscope
import nvscope.thunder
from nvscope import OptionSet

pytest.importorskip("torch")  # a region's PyTorch form runs under torch.no_grad


def test_one_run_names_every_fusion_that_raises_and_the_route_cures_them(
        installed: ThunderDouble, capsys: pytest.CaptureFixture[str]) -> None:
    step = chain(installed, {1: "raise::", 3: "raise::"})
    result = nvscope.rescue(step, reference=lambda: 16.0, candidates=["-resize_scheduler"])
    said = capsys.readouterr().err.splitlines()
    # The diagnosis, then at once both fusions named and the route proven: no search before the usable line.
    assert said[0].startswith("nvscope rescue: running the step under nvFuser's defaults")
    assert said[1] == ("nvscope rescue: forward/nvFusion1, forward/nvFusion3: raised and ran in PyTorch; proving that "
                       "route (on_error='torch')")
    assert said[2] == 'nvscope rescue: usable now: nv_options(on_error="torch")'
    assert [(r.fusion, r.cure, r.route) for r in result.rescues] == [("forward/nvFusion1", None, True),
                                                                    ("forward/nvFusion3", None, True)]
    assert result.routes == ("forward/nvFusion1", "forward/nvFusion3")
    assert result.line() == 'nv_options(on_error="torch")'
    assert result.decorator() == '@with_nv_options(on_error="torch")'
    assert result.rescued and result.proved and result.exit_code() == 0
    report = result.report()
    assert "option cures: none; routed to PyTorch: forward/nvFusion1, forward/nvFusion3" in report
    assert "ROUTED to PyTorch (on_error=\"torch\"): no option cure among 1 attempts; costs " in report
    assert all("ms in PyTorch" in r.cost and "% of the step's" in r.cost for r in result.rescues)
    assert "matching the reference (2 fusions in PyTorch)" in result.proof
    # the repro and issue text per fusion, as for any failing fusion
    assert all(r.repro_scripts and f"in fusion {r.fusion}" in r.issue for r in result.rescues)
    # the line works: the step runs under it
    with nvscope.nv_options(on_error="torch"), pytest.warns(nvscope.EscapeWarning):
        assert step() == 16.0


def test_an_option_cure_and_a_route_share_one_line(installed: ThunderDouble) -> None:
    step = chain(installed, {1: "raise::-resize_scheduler", 3: "raise::"})
    result = nvscope.rescue(step, reference=lambda: 16.0, candidates=["-resize_scheduler"], progress=False)
    assert [(r.fusion, r.cure, r.route) for r in result.rescues] == [
        ("forward/nvFusion1", OptionSet(disable=["resize_scheduler"]), False), ("forward/nvFusion3", None, True)]
    assert result.line() == ("nv_options(disable=['resize_scheduler'], fusions=['forward/nvFusion1'], "
                             'on_error="torch")')
    assert result.rescued and result.proved and result.exit_code() == 0
    assert "option cures: forward/nvFusion1; routed to PyTorch: forward/nvFusion3" in result.report()


def test_a_fusion_that_passes_is_never_routed_and_a_healthy_step_has_no_route(installed: ThunderDouble) -> None:
    result = nvscope.rescue(chain(installed, {2: "raise::"}), candidates=["fast_math"], progress=False)
    assert result.routes == ("forward/nvFusion2",) and result.rescued
    healthy = nvscope.rescue(chain(installed, {}), progress=False)
    assert healthy.healthy and not healthy.routes and "on_error" not in healthy.line()


def test_a_route_whose_numbers_differ_from_the_reference_is_no_cure(installed: ThunderDouble) -> None:
    # nvFusion3's region computes 3 * x in PyTorch: the step with it routed differs from the reference.
    step = chain(installed, {1: "raise::", 3: "raise::"}, eager={3: "wrong"})
    result = nvscope.rescue(step, reference=lambda: 16.0, candidates=["-resize_scheduler"], progress=False)
    assert not result.rescued and result.exit_code() == 1 and not result.routes
    assert all(r.cure is None and not r.route for r in result.rescues)
    report = result.report()
    assert "NO CURE" in report and "on_error" not in result.line()
    assert any(n.startswith("the PyTorch route was not proven: the step's result differs from its reference")
               for n in result.notes)
    # with an option cure for the wrong one, the other is routed: the run with the option cure proves its route
    fixed = chain(installed, {1: "raise::", 3: "raise::-resize_scheduler"}, eager={3: "wrong"})
    mixed = nvscope.rescue(fixed, reference=lambda: 16.0, candidates=["-resize_scheduler"], progress=False)
    assert [(r.fusion, r.cure, r.route) for r in mixed.rescues] == [
        ("forward/nvFusion1", None, True), ("forward/nvFusion3", OptionSet(disable=["resize_scheduler"]), False)]
    assert mixed.rescued and mixed.proved and mixed.exit_code() == 0
