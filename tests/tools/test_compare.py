"""nvscope.compare on CPU: each variant really runs under its options; validation happens before anything runs."""

from __future__ import annotations

import io
import math
import sys
import warnings
from typing import Any

import pytest

import nvscope
from nvscope import current_options


def depends_on_options(x: Any) -> dict[str, Any]:
    """An output that shows which options were active: the number of enable names, added to the input."""
    n = len(current_options().enable)
    return {"tensor": x + n, "count": n, "label": "not compared"}


def test_each_variant_runs_under_its_own_options() -> None:
    torch = pytest.importorskip("torch")
    x = torch.zeros(3)
    calls: list[frozenset[str]] = []

    def fn(x: Any) -> dict[str, Any]:
        calls.append(current_options().enable)
        return depends_on_options(x)

    result = nvscope.compare(
        fn, x, variants={"default": {}, "two": {"enable": ["static_fusion_count", "kernel_profile"]}},
        warmup=1, repeat=4, kernels=False, show=False,
    )
    default, two = result["default"], result["two"]
    assert default.max_abs_diff == 0.0
    assert two.max_abs_diff == 2.0  # tensor +2 and count +2 against the first variant
    assert two.options == nvscope.OptionSet(["static_fusion_count", "kernel_profile"])
    assert len(default.times_ms) == len(two.times_ms) == 4  # samples, each the mean of calls_per_sample calls
    assert default.timer == "time.perf_counter" and two.kernels == ()
    assert 0 <= two.min_ms <= two.median_ms
    # Each variant runs under its own options only, one variant after the other: the first variant's calls include
    # the calibration of the calls per sample; the second makes 1 first call + 1 warm-up + 4 samples.
    two_options = frozenset({"static_fusion_count", "kernel_profile"})
    first = calls.index(two_options)
    assert set(calls[:first]) == {frozenset()} and calls[first:] == [two_options] * (2 + 4 * result.calls_per_sample)
    assert result.calls_per_sample > 1  # a call of microseconds: a sample holds many
    assert current_options() == nvscope.OptionSet()  # nothing leaked


def test_table_lists_variants_and_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    result = nvscope.compare(lambda: 1.0, variants={"a": {}, "b": {"disable": "fma"}}, warmup=0, repeat=2)
    printed = capsys.readouterr().out
    assert printed.strip() == result.table().strip()
    assert "NVFUSER_DISABLE=fma" in printed and "(no options)" in printed and "timer: time.perf_counter" in printed


@pytest.mark.parametrize(
    ("variants", "error"),
    [
        ({}, ValueError),
        ({"x": {"enable": ["fuse_matmull"]}}, nvscope.UnknownOptionError),
        ({"ok": {}, "x": {"enabled": ["fuse_matmul"]}}, TypeError),
        ({"x": {"enable": [1]}}, TypeError),
        ({"ok": {}, "a": "fuse_matmul"}, TypeError),
        ([{"enable": ["fuse_matmul"]}], TypeError),
        ({1: {}, 2: {"enable": ["kernel_profile"]}}, TypeError),  # a name labels the table: a str
        ({"": {}}, TypeError),
    ],
)
def test_bad_variants_fail_before_anything_runs(variants: dict[str, Any], error: type[Exception]) -> None:
    ran: list[int] = []
    with pytest.raises(error):
        nvscope.compare(lambda: ran.append(1), variants=variants, show=False)
    assert ran == []
    assert current_options() == nvscope.OptionSet()


def test_a_variant_that_is_not_a_mapping_says_what_a_variant_is() -> None:
    with pytest.raises(TypeError) as info:
        nvscope.compare(lambda: 0, variants={"a": "fuse_matmul"}, show=False)  # type: ignore[dict-item]
    message = str(info.value)
    assert "variant 'a'" in message and "{'enable': [...]" in message and "not str: 'fuse_matmul'" in message
    assert "unknown keys" not in message  # not the letters of 'fuse_matmul'
    with pytest.raises(TypeError, match="mapping from a variant's name to its options"):
        nvscope.compare(lambda: 0, variants=[("a", {})], show=False)  # type: ignore[arg-type]


NAN = float("nan")


@pytest.mark.parametrize(("first", "second"), [
    ((1.0, NAN), (1.0, 2.0)),  # max() with a NaN depends on the order: (0.0, nan) -> 0.0 but (nan, 0.0) -> nan
    ((1.0, 2.0), (1.0, NAN)),
    ((NAN, 1.0), (5.0, 1.0)),
    ([1.0, {"a": NAN}], [1.0, {"a": 1.0}]),
])
def test_a_nan_in_any_output_shows(first: Any, second: Any) -> None:
    outputs = {"a": first, "b": second}

    def fn() -> Any:
        return outputs["b" if current_options() else "a"]

    result = nvscope.compare(fn, variants={"a": {}, "b": {"enable": ["kernel_profile"]}}, repeat=1, show=False)
    diff = result["b"].max_abs_diff
    assert diff is not None and math.isnan(diff)
    flagged = [name for name in ("a", "b") if result[name].has_nan]
    assert flagged == [name for name, value in outputs.items() if any(map(math.isnan, _numbers(value)))]
    assert f"NaN in the output of: {', '.join(flagged)}" in result.table()
    assert " nan " in result.table()


def _numbers(value: Any) -> list[float]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _numbers(v)]
    return [value]


def test_a_nan_in_tensors_shows_and_equal_infinities_do_not_differ() -> None:
    torch = pytest.importorskip("torch")
    outputs = {
        "a": torch.tensor([1.0, float("inf"), NAN, 3.0]),
        "b": torch.tensor([1.0, float("inf"), 7.0, 3.0]),
        "c": torch.tensor([1.0, float("inf"), 7.0, 5.0]),
    }

    def fn() -> Any:
        enabled = current_options().enable
        return outputs["c" if "static_fusion_count" in enabled else "b" if enabled else "a"]

    variants = {"a": {}, "b": {"enable": ["kernel_profile"]}, "c": {"enable": ["static_fusion_count"]}}
    result = nvscope.compare(fn, variants=variants, repeat=1, show=False)
    assert math.isnan(result["a"].max_abs_diff)  # type: ignore[arg-type]  # the reference itself has a NaN
    assert math.isnan(result["b"].max_abs_diff)  # type: ignore[arg-type]
    assert [result[n].has_nan for n in variants] == [True, False, False]
    no_nan = nvscope.compare(lambda: outputs["c" if current_options() else "b"],
                             variants={"b": {}, "c": {"enable": ["kernel_profile"]}}, repeat=1, show=False)
    assert no_nan["b"].max_abs_diff == 0.0  # inf vs inf is no difference
    assert no_nan["c"].max_abs_diff == 2.0
    assert "NaN" not in no_nan.table()


def test_outputs_are_copied_before_the_next_variant_runs() -> None:
    torch = pytest.importorskip("torch")
    buffer = torch.zeros(3)
    numbers = [0.0, 0.0]

    def reuses_its_buffers() -> Any:
        value = 2.0 * len(current_options().enable)
        buffer.fill_(value)  # a preallocated output, overwritten in place by every call
        numbers[:] = [value, value]  # and a list, mutated in place
        return {"tensor": buffer, "list": numbers}

    result = nvscope.compare(reuses_its_buffers, variants={"a": {}, "b": {"enable": ["kernel_profile"]}},
                             warmup=1, repeat=2, show=False)
    assert result["b"].max_abs_diff == 2.0


def test_outputs_of_different_shapes_are_reported_not_broadcast() -> None:
    torch = pytest.importorskip("torch")

    def fn() -> Any:
        return torch.ones(3) if current_options() else torch.ones(1)

    result = nvscope.compare(fn, variants={"a": {}, "b": {"enable": ["kernel_profile"]}}, repeat=1, show=False)
    assert result["b"].max_abs_diff == math.inf and result["b"].mismatch == "out: shape (1,) became (3,)"
    assert "b: output differs from a's: out: shape (1,) became (3,)" in result.table()


def test_bad_repeat_or_warmup() -> None:
    with pytest.raises(ValueError, match="repeat"):
        nvscope.compare(lambda: 0, variants={"a": {}}, repeat=0, show=False)
    with pytest.raises(ValueError, match="warmup"):
        nvscope.compare(lambda: 0, variants={"a": {}}, warmup=-1, show=False)


def test_outputs_of_different_length_are_reported() -> None:
    def fn() -> list[float]:
        return [1.0] * (1 + len(current_options().enable))

    result = nvscope.compare(fn, variants={"a": {}, "b": {"enable": ["kernel_profile"]}}, repeat=1, show=False)
    assert result["b"].max_abs_diff == math.inf
    assert result["b"].mismatch == "the structure differs: out[1] only in 'b'"
    assert result["a"].max_abs_diff == 0.0 and result["a"].mismatch == ""


def test_non_numeric_outputs_have_no_diff() -> None:
    result = nvscope.compare(lambda: "text", variants={"a": {}, "b": {"enable": "kernel_profile"}}, repeat=1,
                             show=False)
    assert result["b"].max_abs_diff is None and result["b"].mismatch == ""
    assert "n/a" in result.table()


@pytest.mark.parametrize(("first", "second", "diff", "mismatch"), [
    ({"y": 1.0}, {"x": 1.0}, math.inf, "the structure differs: out['y'] only in 'a'; out['x'] only in 'b'"),
    ([1.0, [2.0]], [[1.0], 2.0], math.inf, "the structure differs: out[0], out[1][0] only in 'a'; out[0][0], out[1] "
                                           "only in 'b'"),
    (1.0, "a", math.inf, "out: a float became a str"),
    ("a", "b", math.inf, "out: 'a' became 'b'"),
    (True, False, 1.0, ""),  # bools are numbers
    (1 + 2j, 1 + 3j, 1.0, ""),
    (None, None, None, ""),
])
def test_structure_and_value_differences_are_reported(first: Any, second: Any, diff: float | None,
                                                      mismatch: str) -> None:
    result = nvscope.compare(lambda: second if current_options() else first,
                             variants={"a": {}, "b": {"enable": ["kernel_profile"]}}, repeat=1, show=False)
    assert result["b"].max_abs_diff == diff and result["b"].mismatch == mismatch
    assert (f"b: output differs from a's: {mismatch}" in result.table()) == bool(mismatch)


@pytest.mark.no_development_mode
def test_runs_its_variants_in_development_mode_even_under_strict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSCOPE_STRICT", "1")
    previous = nvscope.set_development_mode(False)
    seen: list[bool] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", nvscope.DevelopmentModeWarning)
            nvscope.compare(lambda: seen.append(nvscope.is_development_mode()),
                            variants={"a": {}, "b": {"enable": ["kernel_profile"]}}, repeat=1, show=False)
        assert seen and all(seen)
        assert nvscope.is_development_mode() is False  # restored
    finally:
        nvscope.set_development_mode(previous)


def test_a_variant_that_fails_after_others_were_measured_keeps_their_results() -> None:
    def fn() -> float:
        if "static_fusion_count" in current_options().enable:
            raise RuntimeError("INTERNAL ASSERT FAILED at csrc/scheduler/runtime_info.h:69\nthe rest")
        return 1.0

    variants = {"a": {}, "b": {"enable": ["static_fusion_count"]}, "c": {"enable": ["kernel_profile"]}}
    result = nvscope.compare(fn, variants=variants, repeat=3, show=False)
    assert len(result["a"].times_ms) == len(result["c"].times_ms) == 3 and result["c"].max_abs_diff == 0.0
    assert result["b"].error == "RuntimeError: INTERNAL ASSERT FAILED at csrc/scheduler/runtime_info.h:69"
    assert result["b"].times_ms == () and math.isnan(result["b"].median_ms)
    assert "FAILED: RuntimeError: INTERNAL ASSERT FAILED" in result.table() and "the rest" not in result.table()


def test_the_first_variant_failing_at_once_propagates() -> None:
    def fn() -> float:
        raise KeyError("no such parameter")

    with pytest.raises(KeyError, match="no such parameter"):
        nvscope.compare(fn, variants={"a": {}, "b": {"enable": ["kernel_profile"]}}, show=False)


def test_a_table_that_cannot_be_printed_does_not_lose_the_result(monkeypatch: pytest.MonkeyPatch) -> None:
    class Unwritable(io.StringIO):
        def write(self, text: str) -> int:
            raise UnicodeEncodeError("ascii", text, 0, 1, "ordinal not in range(128)")

    monkeypatch.setattr(sys, "stdout", Unwritable())
    with pytest.warns(nvscope.NvscopeWarning, match="the table could not be printed"):
        result = nvscope.compare(lambda: 1.0, variants={"a": {}, "b": {"enable": ["kernel_profile"]}}, repeat=2)
    assert len(result["b"].times_ms) == 2


@pytest.mark.parametrize(("variants", "kwargs"), [
    ({"x" * 100_000: "fuse_matmul"}, {}),
    ({"a": {"k" * 100_000: 1}}, {}),
])
def test_errors_do_not_echo_huge_inputs(variants: Any, kwargs: dict[str, Any]) -> None:
    with pytest.raises((TypeError, ValueError)) as info:
        nvscope.compare(lambda: 1.0, variants=variants, show=False, **kwargs)
    assert len(str(info.value)) < 500, str(info.value)[:300]


def test_compare_is_loaded_lazily() -> None:
    import subprocess
    import sys

    code = ("import nvscope, sys; assert 'nvscope._tools._compare' not in sys.modules; nvscope.compare; "
            "assert 'nvscope._tools._compare' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
