"""``nvscope rescue`` from the command line: bad input is one line and exit 2 before anything runs; a healthy step
answers "nothing to rescue" (exit 0); a fusion without a cure exits 1 with the partial answer; ``--json -``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rescue_probes import calls, counting_program
from thunder_double import chain_program

from nvscope.cli import main

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent

@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return chain_program(tmp_path, monkeypatch, 3)


@pytest.mark.parametrize("argv, message", [
    ([], "give the target"),
    (["nope.py:step"], "no such file"),
    (["{script}:"], "names no function"),
    (["--reference", "eager", "{script}"], "--reference needs a function target"),
    (["{script}:step", "--", "--steps", "1"], "a function takes none"),
    (["--candidates", "no_such_option", "{script}:step"], "--candidates"),
    (["--sanitize", "--sanitizer", "no-such-sanitizer-here", "{script}:step"], "not on PATH"),
    (["--json", "/no/such/dir/r.json", "{script}:step"], "the directory does not exist"),
])
def test_bad_command_lines_are_one_line_and_exit_2(script: Path, argv: list[str], message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["rescue", *(a.replace("{script}", str(script)) for a in argv)])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvscope rescue: error: ") and message in lines[0]


@pytest.mark.parametrize("flag", ["--jobs", "--max-set-size"])
def test_counts_below_one_are_argparse_errors(script: Path, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["rescue", flag, "0", f"{script}:step"])
    assert exit_.value.code == 2 and flag in capsys.readouterr().err


def test_a_healthy_step_answers_nothing_to_rescue(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["rescue", "--quiet", "--reference", "eager", f"{script}:step"])
    out = capsys.readouterr().out
    assert code == 0 and "nothing to rescue" in out and "matches its reference" in out


def test_a_fusion_without_a_cure_exits_1_with_json_on_stdout(script: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAILS", "1=raise::")
    code = main(["rescue", "--candidates=-resize_scheduler", "--json", "-", str(script)])
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert code == 1 and not data["rescued"] and data["rescues"][0]["fusion"] == "forward/nvFusion1"
    assert data["rescues"][0]["cure"] is None and "NO CURE" in captured.err
    assert "nvscope rescue: running the step" in captured.err  # progress on stderr


def test_a_rescued_program_prints_the_line_and_exits_0(script: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAILS", "1=raise::-resize_scheduler")
    code = main(["rescue", "--quiet", "--jobs", "2", str(script)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "nv_options(disable=['resize_scheduler'], fusions=['forward/nvFusion1'])" in out
    assert "rescued: every failing fusion has a cure" in out


@pytest.mark.parametrize("fresh", [False, True])
def test_the_search_runs_in_a_worker_unless_fresh_probes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str], fresh: bool) -> None:
    script = counting_program(tmp_path, monkeypatch, 3)
    monkeypatch.setenv("FAILS", "1=raise::-resize_scheduler")
    code = main(["rescue", "--quiet", *(["--fresh-probes"] if fresh else []), "--candidates=-infer_contiguity",
                 "--candidates=fast_math", "--candidates=-resize_scheduler", f"{script}:step"])
    assert code == 0 and "nv_options(disable=['resize_scheduler'], fusions=['forward/nvFusion1'])" in \
        capsys.readouterr().out
    # the first run, three search probes, the confirmation, the proof's two runs
    ran = calls(tmp_path)
    search = ran[1:4]
    assert len(ran) == 7 and len({c.pid for c in search}) == (3 if fresh else 1)
    assert len({c.pid for c in ran}) == (7 if fresh else 5)
