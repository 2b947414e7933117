"""The keywords of search, search_fusions, profile, bisect and compare: a keyword that is neither the tool's nor one
the step takes is the tool's `TypeError` (its parameters named, a did-you-mean), raised before the step runs; every
keyword the step takes still reaches it.

The steps here record what they got and then stop the tool (a `BaseException` no tool catches): whether a keyword
reaches the step is decided before anything is timed, so no test waits for a measurement."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nvscope

# Each tool with what it needs besides the step to get as far as calling it.
TOOLS: dict[str, dict[str, Any]] = {
    "search": {"candidates": ["fast_math"], "rounds": 5, "progress": False},
    "search_fusions": {"candidates": ["fast_math"], "rounds": 5, "progress": False},
    "profile": {"enable": ["fast_math"], "rounds": 5, "progress": False},
    "bisect": {"enable": ["fast_math"], "progress": False},
    "compare": {"variants": {"a": {}}, "show": False, "kernels": False},
}
# A misspelling of one of each tool's own parameters, and the parameter meant.
MISSPELT = {"search": ("candiates", "candidates"), "search_fusions": ("min_gian", "min_gain"),
            "profile": ("schedulrs", "schedulers"), "bisect": ("chek", "check"), "compare": ("repet", "repeat")}

# The Measure fields each tool also takes as keywords, in the order its message names them.
TIMED = ["rounds", "steps_per_round", "warmup", "tolerance", "backward", "module", "seed", "progress", "share_defaults"]
MEASURING = {"search": TIMED, "search_fusions": TIMED, "profile": TIMED,
             "bisect": [k for k in TIMED if k != "warmup"], "compare": ["warmup", "repeat", "share_defaults"]}


class Stop(BaseException):
    """Raised by a step once it has recorded its call: ends the tool there."""


class Step:
    """A step with the signature given (else ``(*args, **kwargs)``): records the keywords of each call, then stops
    the tool."""

    def __init__(self, signature: inspect.Signature | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        if signature is not None:
            self.__signature__ = signature

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        raise Stop

    def plain(self) -> Callable[..., Any]:
        """The same step as a plain function ``step(x, scale=1.0)``: no ``**kwargs``."""

        def step(x: Any, scale: float = 1.0) -> Any:
            return self(x, scale=scale)

        return step


def run(tool: str, step: Callable[..., Any], **kwargs: Any) -> Any:
    return getattr(nvscope, tool)(step, 1.0, **TOOLS[tool], **kwargs)


@pytest.mark.parametrize("tool", TOOLS)
def test_a_misspelt_keyword_is_the_tools_error_before_the_step_runs(tool: str) -> None:
    recorder = Step()
    wrong, meant = MISSPELT[tool]
    with pytest.raises(TypeError) as raised:
        run(tool, recorder.plain(), **{wrong: 3})
    message = str(raised.value)
    assert message.startswith(f"{tool}() got an unexpected keyword argument {wrong!r}; did you mean {meant!r}?")
    own = [name for name in list(inspect.signature(getattr(nvscope, tool)).parameters)[1:]
           if name not in ("args", "kwargs")]
    assert f"{tool}() takes {', '.join(own + MEASURING[tool])};" in message  # its parameters, then its keywords
    assert message.endswith("other keywords go to the step, and step() takes x, scale)")
    assert "\n" not in message
    assert recorder.calls == []  # refused before anything ran


@pytest.mark.parametrize("tool", TOOLS)
def test_keywords_the_step_takes_still_reach_it(tool: str) -> None:
    recorder = Step()
    with pytest.raises(Stop):
        run(tool, recorder.plain(), scale=2.0)
    assert recorder.calls[0] == {"scale": 2.0}
    # A step with **kwargs takes any keyword, a misspelling of the tool's too: it is the step's, as before.
    recorder = Step()
    wrong, _ = MISSPELT[tool]
    with pytest.raises(Stop):
        run(tool, recorder, **{wrong: 3})
    assert recorder.calls[0] == {wrong: 3}


def test_the_did_you_mean_looks_at_the_steps_parameters_too_and_cuts_a_long_name() -> None:
    recorder = Step()
    with pytest.raises(TypeError, match=r"^search\(\) got an unexpected keyword argument 'scael'; did you mean "
                                        r"the step's 'scale'\?"):
        run("search", recorder.plain(), scael=2.0)
    with pytest.raises(TypeError) as raised:
        run("profile", recorder.plain(), **{"k" * 100_000: 1})
    assert len(str(raised.value)) < 500
    assert recorder.calls == []


def test_a_wrapped_step_is_judged_by_the_function_it_wraps() -> None:
    """A decorator that keeps ``__wrapped__`` (functools.wraps; thunder.jit does) shows the step's own parameters."""
    recorder = Step()
    plain = recorder.plain()

    @functools.wraps(plain)
    def jitted(*args: Any, **kwargs: Any) -> Any:
        return plain(*args, **kwargs)

    with pytest.raises(TypeError, match="did you mean 'tolerance'"):
        run("search", jitted, tolerence=0.1)
    with pytest.raises(Stop):
        run("search", jitted, scale=3.0)
    assert recorder.calls == [{"scale": 3.0}]


def test_a_step_without_a_signature_gets_every_keyword_as_before() -> None:
    """``max`` has no signature Python can tell: nothing is refused, the step judges its keywords itself."""
    result = nvscope.compare(max, [1, -2], key=abs, variants={"a": {}}, show=False, kernels=False, repeat=1,
                             warmup=0)
    assert result["a"].error is None


NAMES = st.sampled_from(["x", "y", "scale", "lr", "candiates", "rond", "warmup_", "n"])
KINDS = [inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY]


@st.composite
def signatures(draw: st.DrawFn) -> tuple[inspect.Signature, set[str]]:
    """A step's signature and, by the rules of a Python call, the keywords it takes (None: any)."""
    names = draw(st.lists(NAMES, unique=True, max_size=4))
    kinds = sorted((draw(st.sampled_from(KINDS)) for _ in names), key=KINDS.index)
    parameters = [inspect.Parameter(name, kind) for name, kind in zip(names, kinds, strict=True)]
    any_keyword = draw(st.booleans())
    if any_keyword:
        parameters.append(inspect.Parameter("options", inspect.Parameter.VAR_KEYWORD))
    takes = {p.name for p in parameters if p.kind is not inspect.Parameter.POSITIONAL_ONLY}
    return inspect.Signature(parameters), takes | ({"*"} if any_keyword else set())


@settings(max_examples=60, deadline=None)
@given(tool=st.sampled_from(sorted(TOOLS)), signature=signatures(), keywords=st.lists(NAMES, unique=True, max_size=3))
def test_a_keyword_is_refused_exactly_when_the_step_cannot_take_it(
        tool: str, signature: tuple[inspect.Signature, set[str]], keywords: list[str]) -> None:
    shape, takes = signature
    recorder = Step(shape)
    refused = [k for k in keywords if "*" not in takes and k not in takes]
    if refused:
        with pytest.raises(TypeError, match=f"^{tool}\\(\\) got an unexpected keyword argument {refused[0]!r}"):
            run(tool, recorder, **dict.fromkeys(keywords, 0))
        assert recorder.calls == []
    else:
        with pytest.raises(Stop):
            run(tool, recorder, **dict.fromkeys(keywords, 0))
        assert recorder.calls == [dict.fromkeys(keywords, 0)]
