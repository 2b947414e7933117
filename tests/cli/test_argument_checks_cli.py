"""The tools' argument checks on the command line (nvscope/_measure/_checks.py as argparse types, written once in
nvscope/_cli/_args.py): ``nvscope profile``, ``search`` and ``bisect`` refuse bad values with exit 2 before the script
is imported, and a step that is broken or runs no fusion exits 1 saying so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvscope.cli import main

TESTS = Path(__file__).resolve().parents[1]  # the doubles live at tests/ top level


SCRIPT = f'''\
import sys
sys.path.insert(0, {str(TESTS)!r})
open(__file__ + ".imported", "w").close()
import pytest
from thunder_double import ThunderDouble
import nvscope.thunder

MONKEYPATCH = pytest.MonkeyPatch()
double = ThunderDouble(MONKEYPATCH)
nvscope.thunder.install()
wrappers = [double.make_wrapper(f"nvFusion{{i}}") for i in range(3)]

def step():
    x = 1.0
    for w in wrappers:
        (x,) = w(x)
    return x

def plain():
    return 1.0

def broken():
    raise RuntimeError("the step's own bug")
'''


@pytest.fixture
def script(tmp_path: Path, imported: None) -> Path:
    path = tmp_path / "bench.py"
    path.write_text(SCRIPT)
    return path


def test_profile_fusions_split_on_commas_as_run_does(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = script.with_name("p.json")
    assert main(["profile", "--enable", "fast_math", "--rounds", "5", "--quiet", "--json", str(out),
                 "--fusions", "forward/nvFusion0, forward/nvFusion2", f"{script}:step"]) == 0, capsys.readouterr()
    assert [r["fusion"] for r in json.loads(out.read_text())["rows"]] == ["forward/nvFusion0", "forward/nvFusion2"]


@pytest.mark.parametrize(("argv", "message"), [
    (["profile", "--enable", "fast_math", "--fusions", "nvFusion0"], "fusion ids are '<phase>/<name>'"),
    (["profile", "--enable", "fast_math", "--fusions", " , "], "--fusions needs a glob over fusion ids"),
    (["profile", "--enable", "fast_math", "--rounds", "2"], "argument --rounds: must be an int >= 5, got 2"),
    (["profile", "--enable", "fast_math", "--warmup", "-1"], "argument --warmup: must be an int >= 0, got -1"),
    (["search", "--per-fusion", "--steps", "0"], "argument --steps: must be an int >= 1, got 0"),
    (["bisect", "--enable", "fast_math", "--slower-by", "-1"], "argument --slower-by: must be a finite number >= 0"),
    (["bisect", "--enable", "fast_math", "--subprocess", "--timeout", "0"],
     "argument --timeout: must be a finite number > 0"),
    (["bisect", "--enable", "fast_math", "--subprocess", "--timeout", "inf"],  # Issue 35 item 10: OverflowError
     "argument --timeout: must be a finite number > 0"),
    (["bisect", "--enable", "fast_math", "--subprocess", "--timeout", "1e300"],
     "argument --timeout: must be at most 1000000 seconds"),
])
def test_bad_values_exit_2_before_the_script_is_imported(script: Path, capsys: pytest.CaptureFixture[str],
                                                         argv: list[str], message: str) -> None:
    try:
        code = main([*argv, f"{script}:step"])
    except SystemExit as stop:  # argparse's own errors
        code = stop.code  # type: ignore[assignment]
    assert code == 2
    assert message in capsys.readouterr().err
    assert not script.with_name("bench.py.imported").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["search", "--per-fusion", "--candidates", "fast_math", "--rounds", "5", "--quiet"], "RuntimeError: the step's "
                                                                                          "own bug"),
])
def test_search_per_fusion_on_a_broken_step_exits_1(script: Path, capsys: pytest.CaptureFixture[str],
                                                    argv: list[str], message: str) -> None:
    assert main([*argv, f"{script}:broken"]) == 1
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("command", [["profile", "--enable", "fast_math"],
                                     ["search", "--per-fusion", "--candidates", "fast_math"]])
def test_a_step_without_fusions_exits_1_saying_so(script: Path, capsys: pytest.CaptureFixture[str],
                                                  command: list[str]) -> None:
    assert main([*command, "--rounds", "5", "--quiet", f"{script}:plain"]) == 1
    captured = capsys.readouterr()
    assert "no nvFuser fusion ran through nvscope when the step ran with its defaults" in captured.err
    assert "best global set" not in captured.out and "keep the defaults" not in captured.out
