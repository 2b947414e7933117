"""``nvscope search`` (nvscope._cli._search_cmd): a script's or module's function searched from the command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from nvscope._cli._search_cmd import add_parser, command
from nvscope._measure._candidates import default_candidates

TESTS = Path(__file__).resolve().parents[1]  # the doubles live at tests/ top level

# The step runs a fusion (the direct double, through nvscope's adapter) and its speed follows the options that
# fusion ran with (on the tools' clock, tests/noisy_double.py `StepClock`: no sleep): a step through which no fusion
# runs is refused.
SCRIPT = f'''\
import pathlib, sys
sys.path.insert(0, {str(TESTS)!r})
import pytest
from noisy_double import NoisyFusions, StepClock

MONKEYPATCH = pytest.MonkeyPatch()
FUSION = NoisyFusions(MONKEYPATCH, noise=False)
CLOCK = StepClock(MONKEYPATCH)

pathlib.Path(__file__).with_suffix(".argv").write_text(repr(sys.argv))  # shows what the script saw at import

def step():
    options = FUSION.run()
    if "fma" in options.disable:
        raise RuntimeError("nvFuser refused this one")
    CLOCK.advance(0.001 if "fast_math" in options.enable else 0.002)
    return 1.0

not_a_function = 3

if __name__ == "__main__":
    raise SystemExit("the __main__ block must not run under nvscope search")
'''

TIMED = ["--rounds", "12", "--steps", "1", "--warmup", "1", "--quiet"]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nvscope")
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["search", *argv])


@pytest.fixture
def script(tmp_path: Path, imported: None) -> Path:
    path = tmp_path / "bench.py"
    path.write_text(SCRIPT)
    return path


def test_searches_a_script_function(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = script.with_name("result.json")
    argv, path = sys.argv[:], sys.path[:]
    code = command(parse("--candidates", "fast_math", "--candidates=-fma", "--json", str(out), *TIMED,
                         f"{script}:step", "--size", "4", "--rounds", "x"))  # after the target: the script's
    stdout = capsys.readouterr().out
    assert code == 0
    assert "* 1 fast_math" in stdout and "FAILED: RuntimeError: nvFuser refused this one" in stdout
    assert stdout.rstrip().endswith("recommended: nv_options(enable=['fast_math'])")
    data = json.loads(out.read_text())
    assert data["recommended"] == {"enable": ["fast_math"], "disable": []}
    assert [row["label"] for row in data["rows"]] == ["default", "fast_math", "-fma"]
    assert script.with_suffix(".argv").read_text() == repr([str(script), "--size", "4", "--rounds", "x"])
    assert sys.argv == argv and sys.path == path  # restored


def test_searches_a_module_function(script: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    script.rename(script.with_name("searchmod.py"))
    monkeypatch.chdir(script.parent)
    monkeypatch.delitem(sys.modules, "searchmod", raising=False)
    # The `imported` fixture forgets the module and undoes its doubles afterwards (popping it here left them in).
    assert command(parse("--candidates", "fast_math", *TIMED, "-m", "searchmod:step", "--", "-x", "a")) == 0
    assert "recommended: nv_options(enable=['fast_math'])" in capsys.readouterr().out
    assert script.with_name("searchmod.argv").read_text() == repr(["searchmod", "-x", "a"])


def test_progress_goes_to_stderr(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert command(parse("--candidates", "fast_math", "--rounds", "5", "--steps", "1", f"{script}:step")) == 0
    captured = capsys.readouterr()
    assert "nvscope search: [1/1] fast_math: first call" in captured.err
    assert "nvscope search:" not in captured.out


def test_gradients_of_a_module_attribute(tmp_path: Path, imported: None) -> None:
    pytest.importorskip("torch")
    path = tmp_path / "train.py"
    path.write_text(
        f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
        "import pytest, torch\n"
        "from noisy_double import NoisyFusions\n"
        "MONKEYPATCH = pytest.MonkeyPatch()\n"
        "FUSION = NoisyFusions(MONKEYPATCH, noise=False)\n"
        "torch.manual_seed(0)\n"
        "model = torch.nn.Linear(3, 2)\n"
        "x = torch.randn(4, 3)\n"
        "def loss():\n"
        "    scale = 1.5 if 'fast_math' in FUSION.run().enable else 1.0\n"
        "    return model(x).square().mean() * scale\n"
    )
    out = tmp_path / "r.json"
    assert command(parse("--backward", "--params", "model", "--candidates", "fast_math", "--rounds", "5",
                         "--steps", "1", "--quiet", "--json", str(out), f"{path}:loss")) == 0
    row = json.loads(out.read_text())["rows"][1]
    assert row["numerics"]["compared"] == 3 and not row["numerics"]["ok"]  # the loss, weight.grad, bias.grad
    assert row["status"] == "over tolerance"


@pytest.mark.parametrize(("argv", "message"), [
    (["{script}"], "names no function: write"),
    (["{script}:missing"], "has no function 'missing'"),
    ([":step"], "':step' names no script: write script.py:step"),
    (["-m", ":step"], "':step' names no module: write module:step"),
    (["{script}:not_a_function"], "is a int, not a function"),
    (["{dir}/nope.py:step"], "no such file"),
    (["-m", "no_such_module_here:step"], "cannot import module"),
    ([], "give the target"),
    (["--candidates", "fast_maht", "{script}:step"], "did you mean 'fast_math'"),
    (["--candidates", "fma", "{script}:step"], "write '-fma'"),
    (["--json", "{dir}/missing/r.json", "{script}:step"], "the directory does not exist"),
    (["--params", "nothing_here", "{script}:step"], "has no 'nothing_here'"),
])
def test_bad_command_lines_exit_2_with_the_fix(script: Path, argv: list[str], message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    args = [a.format(script=script, dir=script.parent) for a in argv]
    assert command(parse("--quiet", *args)) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--candidates", "fast_maht"], "did you mean 'fast_math'"),
    (["--candidates", "fuse_matmul", "--candidates", "fuse_matmul"],
     "error: candidates 'fuse_matmul' and 'fuse_matmul' are the same option set"),
    (["--candidates", "fast_math,-fma", "--candidates=-fma,+fast_math"], "are the same option set"),
    (["--params", "3"], "--params '3' is not a Python name: give the name of the script's nn.Module"),
    (["--params", "model-1"], "is not a Python name"),
    (["--params", "model."], "is not a Python name"),
])
def test_a_bad_command_line_fails_before_the_script_is_imported(script: Path, argv: list[str], message: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert command(parse("--quiet", *argv, f"{script}:step")) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert not script.with_suffix(".argv").exists()


def test_params_that_hold_no_tensors_are_a_usage_error(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert command(parse("--quiet", "--candidates", "fast_math", "--params", "not_a_function", f"{script}:step")) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert ("--params not_a_function: takes an nn.Module (or anything with named_parameters()) or an iterable of "
            "tensors, not int: 3") in err


def test_search_names_a_module_that_is_neither_a_module_nor_tensors() -> None:
    import nvscope

    with pytest.raises(TypeError, match=r"module= takes an nn\.Module .* not int: 3"):
        nvscope.search(lambda: 1.0, candidates=["fast_math"], rounds=5, module=3, progress=False)


def test_plot_without_matplotlib_fails_early(script: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert command(parse("--plot", str(script.with_name("p.png")), f"{script}:step")) == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err
    assert not script.with_suffix(".argv").exists()


def test_plot_is_written(script: Path) -> None:
    pytest.importorskip("matplotlib")
    png = script.with_name("chart.png")
    assert command(parse("--candidates", "fast_math", "--plot", str(png), *TIMED, f"{script}:step")) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_a_script_that_fails_at_import_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.py"
    path.write_text("raise ImportError('missing dependency xyz')\n")
    assert command(parse("--quiet", f"{path}:step")) == 1
    err = capsys.readouterr().err
    assert "missing dependency xyz" in err and "importing" in err


def test_a_step_through_which_no_fusion_runs_exits_1_saying_so(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's plain.py: a step that even reads the options, but runs no fusion, was searched and ended in a
    recommendation; now it is refused as profile and bisect refuse it: one line, exit 1, no table."""
    path = tmp_path / "plain.py"
    path.write_text("import time, nvscope\n"
                    "def step():\n"
                    "    time.sleep(0.001 if nvscope.current_options().enable else 0.002)\n")
    assert command(parse("--quiet", "--rounds", "12", f"{path}:step")) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("nvscope search: error: search: no nvFuser fusion ran through nvscope when the "
                                   "step ran with its defaults")
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err


def test_a_failing_default_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fails.py"
    path.write_text("def step():\n    raise ValueError('shape mismatch')\n")
    assert command(parse("--candidates", "fast_math", "--quiet", f"{path}:step")) == 1
    assert "shape mismatch" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--rounds", "3"], ["--steps", "0"], ["--tolerance", "-1"], ["--warmup", "x"]])
def test_bad_numbers_are_argparse_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        parse(*argv, "x.py:f")
    assert stop.value.code == 2


def test_list_prints_the_default_candidates(capsys: pytest.CaptureFixture[str]) -> None:
    assert command(parse("--list")) == 0
    assert capsys.readouterr().out.split() == default_candidates()


def test_json_dash_is_standard_output(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = command(parse("--candidates", "fast_math", "--json", "-", *TIMED, f"{script}:step"))
    captured = capsys.readouterr()
    assert code == 0
    assert [row["label"] for row in json.loads(captured.out)["rows"]][-1] == "fast_math"  # the JSON alone
    assert "fast_math" in captured.err  # the table went to standard error
    assert not script.with_name("-").exists() and not Path("-").exists()
