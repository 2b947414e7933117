"""nvscope.compare on CPU: each variant really runs under its options; validation happens before anything runs."""

from __future__ import annotations

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
    assert len(default.times_ms) == len(two.times_ms) == 4
    assert default.timer == "time.perf_counter" and two.kernels == ()
    assert 0 <= two.min_ms <= two.median_ms
    # 1 first call + 1 warm-up + 4 timed runs per variant, each under its own options only.
    assert calls == [frozenset()] * 6 + [frozenset({"static_fusion_count", "kernel_profile"})] * 6
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
    ],
)
def test_bad_variants_fail_before_anything_runs(variants: dict[str, Any], error: type[Exception]) -> None:
    ran: list[int] = []
    with pytest.raises(error):
        nvscope.compare(lambda: ran.append(1), variants=variants, show=False)
    assert ran == []
    assert current_options() == nvscope.OptionSet()


def test_bad_repeat_or_warmup() -> None:
    with pytest.raises(ValueError, match="repeat"):
        nvscope.compare(lambda: 0, variants={"a": {}}, repeat=0, show=False)
    with pytest.raises(ValueError, match="warmup"):
        nvscope.compare(lambda: 0, variants={"a": {}}, warmup=-1, show=False)


def test_outputs_of_different_structure_are_an_error() -> None:
    def fn() -> list[float]:
        return [1.0] * (1 + len(current_options().enable))

    with pytest.raises(ValueError, match="different structures"):
        nvscope.compare(fn, variants={"a": {}, "b": {"enable": ["kernel_profile"]}}, repeat=1, show=False)


def test_non_numeric_outputs_have_no_diff() -> None:
    result = nvscope.compare(lambda: "text", variants={"a": {}, "b": {"enable": "kernel_profile"}}, repeat=1,
                             show=False)
    assert result["b"].max_abs_diff is None
    assert "n/a" in result.table()


def test_compare_is_loaded_lazily() -> None:
    import subprocess
    import sys

    code = ("import nvscope, sys; assert 'nvscope._compare' not in sys.modules; nvscope.compare; "
            "assert 'nvscope._compare' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
