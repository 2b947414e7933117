"""``nvscope rescue`` from the command line: bad input is one line and exit 2 before anything runs; a healthy step
answers "nothing to rescue" (exit 0); a fusion without a cure exits 1 with the partial answer; ``--json -``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rescue_probes import add_to, calls, counting_program
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
    ([":step"], "':step' names no script: write script.py:step"),
    (["-m", ":step"], "names no module: write -m module:step"),
    (["--max-set-size", "1", "--candidates=fast_math,-resize_scheduler", "{script}:step"],
     "--candidates: no set has at most --max-set-size 1 options (the smallest has 2)"),
    (["{syntax}:step"], "bad.py does not compile: "),
    (["{syntax}"], "bad.py does not compile: "),
    (["-m", "no_such_module_here:step"], "cannot import module 'no_such_module_here': no module named"),
    (["-m", "no_such_module_here"], "cannot import module 'no_such_module_here': no module named"),
])
def test_bad_command_lines_are_one_line_and_exit_2(script: Path, argv: list[str], message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    syntax = script.with_name("bad.py")
    syntax.write_text("def step(:\n    pass\n")
    code = main(["rescue", *(a.replace("{script}", str(script)).replace("{syntax}", str(syntax)) for a in argv)])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvscope rescue: error: ") and message in lines[0]


@pytest.mark.parametrize("argv, message", [
    (["{script}:nosuch"], "train.py has no function 'nosuch'"),
    (["{script}:notcallable"], "train.py:notcallable is a int, not a function"),
    (["--reference", "eagr", "{script}:step"], "the reference: train.py has no function 'eagr'"),
    (["--reference", "notcallable", "{script}:step"], "the reference: train.py:notcallable is a int, not a function"),
])
def test_a_name_the_script_lacks_is_one_line_and_exit_2(script: Path, argv: list[str], message: str,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Only the import (in a child: the rescue runs none of the script in this process) can tell: the child says so
    and the parent exits 2 with that one line, without running the step or blaming a fusion."""
    add_to(script, "notcallable = 3")
    monkeypatch.setenv("FAILS", "1=raise::-resize_scheduler")
    monkeypatch.chdir(script.parent)
    code = main(["rescue", "--quiet", *(a.replace("{script}", script.name) for a in argv)])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.splitlines() == [f"nvscope rescue: error: {message}"]


def test_a_step_through_which_no_fusion_runs_says_so_and_exits_1(script: Path, capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nvscope._tools._common.machine_cause", lambda: None)  # a machine that runs fusions
    add_to(script, "def plain():\n    return 1.0")
    code = main(["rescue", "--quiet", "--json", "-", f"{script}:plain"])
    captured = capsys.readouterr()
    report, data = captured.err, json.loads(captured.out)  # the report on stderr when the JSON takes stdout
    assert code == 1 and not data["healthy"] and not data["rescued"] and data["no_fusion"]
    assert "no nvFuser fusion ran: is the step jitted by thunder.jit with nvFuser (is Thunder installed)?" in report
    assert "nothing to rescue" not in report


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
    monkeypatch.setenv("EAGER", "1=unsupported")  # no PyTorch route either
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
    # the issue text for nvFuser, written beside the repro script
    (repro,) = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("  repro script: ")]
    (issue,) = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("  issue text: ")]
    assert issue == repro.removesuffix(".py") + ".issue.md"
    text = Path(issue).read_text()
    assert text.startswith("### Raises in fusion forward/nvFusion1") and "Passes with: -resize_scheduler" in text


@pytest.mark.parametrize("fresh", [False, True])
def test_the_search_runs_in_a_worker_unless_fresh_probes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str], fresh: bool) -> None:
    script = counting_program(tmp_path, monkeypatch, 3)
    monkeypatch.setenv("FAILS", "1=raise::-resize_scheduler")
    code = main(["rescue", "--quiet", *(["--fresh-probes"] if fresh else []), "--candidates=-infer_contiguity",
                 "--candidates=fast_math", "--candidates=-resize_scheduler", f"{script}:step"])
    assert code == 0 and "nv_options(disable=['resize_scheduler'], fusions=['forward/nvFusion1'])" in \
        capsys.readouterr().out
    # the first run, its check (one more run of the defaults), three search probes, the confirmation, the proof's
    # two runs
    ran = calls(tmp_path)
    search = ran[2:5]
    assert len(ran) == 8 and len({c.pid for c in search}) == (3 if fresh else 1)
    assert len({c.pid for c in ran}) == (8 if fresh else 6)


_PACKAGE_STEP = """\
import sys
sys.path.insert(0, {tests!r})
import pytest
from thunder_double import load_frontend
import nvscope.nvfuser

fe = load_frontend(pytest.MonkeyPatch(), "nvfuser_direct")


class TrainFusion(fe.FusionDefinition):  # a subclass: its id names its module and class
    pass


with TrainFusion() as fd:
    fd.define_tensor(shape=[1], dtype=fe.DataType.Float)
    fd.ops.slice(0)
nvscope.nvfuser.install()


def step():
    return fd.execute([1.0])
"""


def test_a_module_targets_fusions_are_named_as_python_dash_m_names_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    chain_program(tmp_path, monkeypatch, 1)  # the tests' folder and the checkout on the children's PYTHONPATH
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(_PACKAGE_STEP.format(tests=str(TESTS)))
    monkeypatch.chdir(tmp_path)
    assert main(["rescue", "--quiet", "--json", "-", "-m", "pkg.train:step"]) == 0
    out = capsys.readouterr().out
    (fusion,) = json.loads(out[out.index("{"):])["fusions"]
    assert fusion.startswith("call/TrainFusion@train:TrainFusion:"), fusion  # as `python -m pkg.train` names it


@pytest.mark.parametrize("argv, message, code", [
    (["--json", "", "{script}:step"], "--json takes a file path or -", 2),
    (["--json", "{folder}", "{script}:step"], "is a folder: give a file path in it", 2),
    (["{script}:step", "--reference", "eager"], "'--reference' after the target: put nvscope rescue's options "
                                                "before it", 2),
    (["{script}:later"], "is an async function", 2),
    (["{broken}:step"], "importing", 1),
])
def test_bad_input_is_refused_before_the_rescue_runs(script: Path, argv: list[str], message: str, code: int,
                                                     tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    add_to(script, "async def later():\n    return step()\n")
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_for_rescue\n\ndef step():\n    pass\n")
    (tmp_path / "out").mkdir()
    names = {"script": str(script), "folder": str(tmp_path / "out"), "broken": str(broken)}
    assert main(["rescue", "--quiet", *(a.format(**names) for a in argv)]) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    if "importing" in message:
        assert "ModuleNotFoundError" in err and "kills the process" not in err
    assert not list((tmp_path / "out").iterdir())


def test_a_repro_folder_that_is_a_file_is_one_line(script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("NVSCOPE_REPRO_DIR", str(tmp_path / "afile"))
    assert main(["rescue", "--quiet", f"{script}:step"]) == 2
    err = capsys.readouterr().err
    assert "NVSCOPE_REPRO_DIR=" in err and "set it to a folder" in err and "Traceback" not in err


def test_a_script_whose_path_has_a_colon_runs_as_the_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "run:01").mkdir()
    program = tmp_path / "run:01" / "prog.py"
    program.write_text(chain_program(tmp_path, monkeypatch, 2).read_text())
    monkeypatch.chdir(tmp_path)
    assert main(["rescue", "--quiet", "run:01/prog.py"]) == 0
    assert "nothing to rescue" in capsys.readouterr().out


def test_a_fusion_with_a_long_id_gets_a_repro_name_that_fits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    chain_program(tmp_path, monkeypatch, 1)
    long = "TrainFusion" + "X" * 200  # its id's <module>:<qualname> is past a file name's 255 bytes
    script = tmp_path / "longid.py"
    script.write_text(_PACKAGE_STEP.format(tests=str(TESTS)).replace("TrainFusion", long))
    assert main(["rescue", "--quiet", f"{script}:step"]) == 0
    assert "nothing to rescue" in capsys.readouterr().out


def test_fusions_that_raise_with_no_option_cure_are_routed_to_pytorch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")  # a region's PyTorch form runs under torch.no_grad
    script = chain_program(tmp_path, monkeypatch, 4)
    monkeypatch.setenv("FAILS", "1=raise::;3=raise::")
    code = main(["rescue", "--candidates=-resize_scheduler", "--reference", "eager", f"{script}:step"])
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert code == 0, captured.out
    assert sum(line.startswith('  ROUTED to PyTorch (on_error="torch"): no option cure among 1 attempts; costs ')
               for line in out) == 2, captured.out
    assert "option cures: none; routed to PyTorch: forward/nvFusion1, forward/nvFusion3" in out
    assert out[out.index("the step's scope:") + 1] == '  nv_options(on_error="torch")'
    assert out[out.index("or as a decorator:") + 1] == '  @with_nv_options(on_error="torch")'
    assert "final run with it: PROVED (2 runs clean, matching the reference (2 fusions in PyTorch))" in out
    assert sum(line.startswith("  issue text: ") for line in out) == 2  # the repro and the issue, per fusion
    # both named by the first run: the usable line comes before any search
    said = captured.err.splitlines()
    assert said[1].startswith("nvscope rescue: forward/nvFusion1, forward/nvFusion3: raised and ran in PyTorch")
    assert said[2] == 'nvscope rescue: usable now: nv_options(on_error="torch")'
