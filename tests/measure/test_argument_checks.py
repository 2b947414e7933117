"""One owner for the tools' argument checks (nvscope/_measure/_checks.py): search, profile, bisect, compare and
search_fusions refuse the same bad values with the same messages before the step runs once, the command line's types
are the same checks (the commands themselves: tests/cli/test_argument_checks_cli.py), and what the tools used to
accept silently (issue 27 items 5, 6, 7, 9, 11) is refused or said."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

import pytest
from thunder_double import ThunderDouble

import nvscope
from nvscope._bisect._bisect import bisect
from nvscope._measure import _checks
from nvscope._measure._candidates import parse_candidate
from nvscope._profile._profile import profile
from nvscope._search._fusions import search_fusions
from nvscope._search._search import search
from nvscope._tools._compare import compare

# --- the checks ---------------------------------------------------------------------------------------------------

def test_count_takes_ints_at_least_the_minimum_and_names_what_it_refuses() -> None:
    assert _checks.count("warmup", 0) == 0 and _checks.count("steps", 3, 1) == 3
    for bad in (-1, 1.0, "2", True, None):
        with pytest.raises(ValueError, match=r"^warmup must be an int >= 0, got "):
            _checks.count("warmup", bad)
    with pytest.raises(ValueError, match=r"^rounds must be an int >= 5, got 4 \(fewer rounds give no confidence "):
        _checks.rounds("rounds", 4)
    assert _checks.rounds("rounds", 5) == 5
    with pytest.raises(ValueError, match="seed must be an int, got 'x'"):
        _checks.integer("seed", "x")


def test_numbers_and_fractions() -> None:
    assert _checks.number("tolerance", None, none=True) is None and _checks.number("tolerance", 0) == 0
    for bad in (-1, math.nan, math.inf, "0.1", False):
        with pytest.raises(ValueError, match=r"^tolerance must be a finite number >= 0 or None, got "):
            _checks.number("tolerance", bad, none=True)
    assert _checks.number("timeout", math.inf, above=True, finite=False) == math.inf
    with pytest.raises(ValueError, match=r"^timeout must be a number > 0, got 0$"):
        _checks.number("timeout", 0, above=True, finite=False)
    assert _checks.fraction("min_gain", 0) == 0.0
    for bad in (1, -0.1, 1.5, "x", True):
        with pytest.raises(ValueError, match=r"^min_gain must be a number in \[0, 1\)"):
            _checks.fraction("min_gain", bad)
    with pytest.raises(TypeError, match=r"^search\(\) needs the step to run as its first argument, a callable"):
        _checks.step_callable("search", 3)


def test_argparse_types_are_the_same_checks() -> None:
    rounds = _checks.arg(_checks.rounds)
    assert rounds("7") == 7
    for text, message in (("x", "not an integer: 'x'"), ("2", "must be an int >= 5, got 2 (fewer rounds give no "
                                                                "confidence interval)")):
        with pytest.raises(argparse.ArgumentTypeError) as caught:
            rounds(text)
        assert str(caught.value) == message
    tolerance = _checks.arg(_checks.number, float)
    assert tolerance("0.5") == 0.5
    with pytest.raises(argparse.ArgumentTypeError, match="must be a finite number >= 0, got inf"):
        tolerance("inf")


# --- every tool: refused before the step runs ---------------------------------------------------------------------

class Counted:
    """A step that counts its calls: a refused argument must leave it at zero."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return 1.0


def _tools() -> dict[str, Callable[..., Any]]:
    return {
        "search": lambda fn, **kw: search(fn, candidates=["fast_math"], progress=False, **kw),
        "search_fusions": lambda fn, **kw: search_fusions(fn, candidates=["fast_math"], progress=False, **kw),
        "profile": lambda fn, **kw: profile(fn, enable=["fast_math"], progress=False, **kw),
        "bisect": lambda fn, **kw: bisect(fn, enable=["fast_math"], check="slower", progress=False, **kw),
    }


BAD = [("rounds", 2, "rounds must be an int >= 5, got 2"), ("rounds", 0, "rounds must be an int >= 5, got 0"),
       ("rounds", "x", "rounds must be an int >= 5, got 'x'"), ("warmup", -1, "warmup must be an int >= 0, got -1"),
       ("steps_per_round", 0, "steps_per_round must be an int >= 1, got 0"),
       ("tolerance", -1, "tolerance must be a finite number >= 0 or None, got -1"),
       ("seed", 1.5, "seed must be an int, got 1.5")]


@pytest.mark.parametrize("tool", ["search", "search_fusions", "profile", "bisect"])
@pytest.mark.parametrize(("name", "value", "message"), BAD)
def test_every_tool_refuses_the_same_bad_values_before_the_step_runs(tool: str, name: str, value: object,
                                                                     message: str) -> None:
    if tool == "bisect" and name == "warmup":
        return  # bisect has no warmup=
    step = Counted()
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        _tools()[tool](step, **{name: value})
    assert step.calls == 0


@pytest.mark.parametrize(("tool", "kwargs", "message"), [
    ("search_fusions", {"min_gain": 1.0}, "min_gain must be a number in [0, 1)"),
    ("bisect", {"slower_by": -0.1}, "slower_by must be a finite number >= 0, got -0.1"),
    ("bisect", {"slower_by": math.nan}, "slower_by must be a finite number >= 0, got nan"),
])
def test_tool_specific_values(tool: str, kwargs: dict[str, object], message: str) -> None:
    step = Counted()
    with pytest.raises(ValueError) as caught:
        _tools()[tool](step, **kwargs)
    assert str(caught.value).startswith(message) and step.calls == 0


@pytest.mark.parametrize("tool", ["search", "search_fusions", "profile", "bisect", "compare"])
def test_every_tool_refuses_a_step_that_is_not_callable(tool: str) -> None:
    run = _tools().get(tool) or (lambda fn: compare(fn, variants={"a": {}}, show=False))
    with pytest.raises(TypeError, match=rf"^{tool}\(\) needs the step to run as its first argument, a callable"):
        run("not a step")


def test_compare_refuses_repeat_and_warmup_as_the_others_do() -> None:
    step = Counted()
    with pytest.raises(ValueError, match=r"^repeat must be an int >= 1, got 0$"):
        compare(step, variants={"a": {}}, repeat=0, show=False)
    with pytest.raises(ValueError, match=r"^warmup must be an int >= 0, got True$"):
        compare(step, variants={"a": {}}, warmup=True, show=False)
    assert step.calls == 0


# --- item 5, 6 and 11: what ran silently ----------------------------------------------------------------------------

def test_search_fusions_lets_a_default_that_raises_propagate(double: ThunderDouble) -> None:
    def broken() -> float:
        raise RuntimeError("the step's own bug")

    with pytest.raises(RuntimeError, match="the step's own bug"):
        search_fusions(broken, candidates=["fast_math"], rounds=5, progress=False)


@pytest.mark.parametrize("tool", ["profile", "search_fusions"])
def test_a_step_that_runs_no_fusion_through_nvscope_is_an_error_not_an_empty_table(
        double: ThunderDouble, tool: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nvscope._tools._common.machine_cause", lambda: None)  # a machine that runs fusions
    step = Counted()
    with pytest.raises(ValueError, match=rf"^{tool}: no nvFuser fusion ran through nvscope when the step ran with its "
                                         r"defaults.*is the function jitted \(thunder.jit\)"):
        _tools()[tool](step, rounds=5)
    assert step.calls == 1  # the default, once: no candidate, no rounds


def test_profile_fusions_that_select_nothing_name_the_ids(double: ThunderDouble) -> None:
    wrappers = [double.make_wrapper(f"nvFusion{i}") for i in range(2)]

    def step() -> float:
        x = 1.0
        for w in wrappers:
            (x,) = w(x)
        return x

    with pytest.raises(ValueError, match=r"selects none of the fusions the step ran \(forward/nvFusion0, "
                                         r"forward/nvFusion1\)"):
        profile(step, enable=["fast_math"], fusions="backward/*", rounds=5, progress=False)


@pytest.mark.parametrize("extra", [{"fusions": "backward/*"}, {"on_error": "fallback"}, {"inherit": False}])
def test_a_candidate_scope_whose_extra_arguments_would_be_dropped_is_refused(extra: dict[str, Any]) -> None:
    step = Counted()
    key = next(iter(extra))
    for tool in (search, search_fusions):
        with pytest.raises(ValueError, match=rf"so its {key}=.* would be dropped: pass nv_options\(enable=..., "):
            tool(step, candidates=[nvscope.nv_options(["fast_math"], **extra)], progress=False)
    assert step.calls == 0
    # A plain scope (its arguments at their defaults) is still a candidate.
    assert parse_candidate(nvscope.nv_options(["fast_math"], inherit=True)) == nvscope.OptionSet(["fast_math"])


def test_kernel_names_without_cuda_says_so() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    with pytest.raises(RuntimeError, match=r"^kernel_names needs a CUDA device: torch.cuda.is_available\(\) is False"):
        nvscope.kernel_names(lambda: None)
