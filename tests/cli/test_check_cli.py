"""``nvscope check``: exit codes (0 clean, 1 findings, 2 usage errors), the text, JSON and GitHub formats, --strict,
and the pre-commit hook's entry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nvscope.cli import main

REPO = Path(__file__).resolve().parents[2]
USE = "import nvscope\nnvscope.nv_options(enable=['fuse_matmul'])\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["check", "--nvfuser", "==0.2.36", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "clean.py", "import os\nprint(os.environ.get('NVFUSER_ENABLE'))\n")
    assert check(capsys, "clean.py")[0] == 0
    write(tmp_path / "bench.py", USE)
    code, out, _ = check(capsys, ".")
    assert code == 1
    assert out.splitlines()[0] == "bench.py:2:1: nv_options: enable:fuse_matmul: sets nvFuser developer options"
    assert out.splitlines()[-1].startswith("nvscope check: 1 failing (1 option), 0 allowed, 0 plumbing; 2 files")


@pytest.mark.parametrize(("args", "message"), [
    (["missing/"], "missing: no such file or folder: give existing files or folders"),
    (["--nvfuser", "latest", "."], "is not a version range"),
    (["--config", "nowhere.toml", "."], "nowhere.toml: no such configuration file: give the pyproject.toml"),
    ([""], "an empty path names no file or folder: give existing files or folders"),
    (["src", ""], "an empty path names no file or folder"),
    (["--nvfuser", "", "."], "nvfuser = '' (--nvfuser) is not a version range"),
    (["--nvfuser", " ", "."], "is not a version range"),
    (["--json=no/such/dir/out.json", "."], "--json no/such/dir/out.json: cannot write it"),
])
def test_usage_errors_exit_2_with_one_line(capsys: pytest.CaptureFixture[str], args: list[str],
                                           message: str) -> None:
    (Path.cwd() / "src").mkdir()
    code, out, err = check(capsys, *args)
    assert code == 2 and out == ""
    assert err.startswith("nvscope check: error: ") and message in err and len(err.splitlines()) == 1
    if "--config" in args:
        assert "files or folders" not in err  # a configuration file is not a PATH


def test_a_config_file_without_the_table_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--config names the table to use: a file without it would drop the tree's own table without a word."""
    write(tmp_path / "pyproject.toml", '[tool.nvscope.check]\nallow = ["bench.py"]\n')
    write(tmp_path / "bench.py", USE)
    write(tmp_path / "other.toml", "[tool.ruff]\nline-length = 120\n")
    code, out, err = check(capsys, "--config", "other.toml", ".")
    assert (code, out) == (2, "")
    assert err == ("nvscope check: error: other.toml has no [tool.nvscope.check] table: add one to it (it may be "
                   "empty), or give no config file (then the nearest pyproject.toml above the first path that has "
                   "the table applies)\n")
    assert check(capsys, ".")[0] == 0  # the tree's own table allows it
    write(tmp_path / "other.toml", "[tool.nvscope.check]\n")  # an empty table: nothing allowed
    assert check(capsys, "--config", "other.toml", ".")[0] == 1


def test_a_bad_table_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "pyproject.toml", "[tool.nvscope.check]\nallow = 3\n")
    code, _, err = check(capsys, ".")
    assert code == 2 and "allow must be a list of path globs" in err


def test_an_unknown_flag_is_argparses_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["check", "--strickt"])
    assert exit_info.value.code == 2


def test_allowances_and_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "pyproject.toml", '[tool.nvscope.check]\nallow = ["experiments/**"]\n')
    write(tmp_path / "experiments" / "a.py", USE)
    write(tmp_path / "b.py", "import nvscope\nnvscope.nv_options(disable=['fma'])  # nvscope: allow ablation\n")
    code, out, _ = check(capsys, ".")
    assert code == 0 and out.strip() == "nvscope check: 0 failing, 2 allowed, 0 plumbing; 3 files (3 read), 0 notes"
    code, out, _ = check(capsys, "-v", ".")
    assert "b.py:2:1: nv_options: disable:fma: sets nvFuser developer options [allowed by comment: ablation]" in out
    assert "experiments/a.py:2:1: nv_options: enable:fuse_matmul: sets nvFuser developer options [allowed by config: "\
           "experiments/**]" in out
    code, out, _ = check(capsys, "--strict", ".")
    assert code == 1 and "2 failing (2 option)" in out and "--strict: allowances ignored" in out


def test_json_to_stdout_and_to_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "bench.py", USE)
    code, out, _ = check(capsys, "--json", "--", ".")
    document = json.loads(out)
    assert code == 1 and document["counts"]["failing"] == 1
    assert document["findings"][0] | {"message": ""} == {
        "path": "bench.py", "line": 2, "col": 1, "construct": "nv_options", "options": ["enable:fuse_matmul"],
        "kind": "option", "message": "", "allowed": None, "reason": "", "failing": True}
    code, out, _ = check(capsys, "--json=report.json", ".")
    assert code == 1 and out.splitlines()[0].startswith("bench.py:2:1:")  # the text too
    assert json.loads((tmp_path / "report.json").read_text())["counts"]["failing"] == 1
    code, out, _ = check(capsys, "--format", "json", ".")
    assert json.loads(out)["summary"].startswith("nvscope check: 1 failing")


def test_github_annotations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "ci.yml", "env:\n  NVFUSER_ENABLE: fuse_matmu\n")
    code, out, _ = check(capsys, "--format", "github", ".")
    lines = out.splitlines()
    assert code == 1
    assert lines[0] == ("::error file=ci.yml,line=2,col=3,title=nvscope check (option)::YAML env: "
                        "enable:fuse_matmu: sets nvFuser developer options")
    assert lines[1].startswith("::error file=ci.yml,line=2,col=3,title=nvscope check (name)::YAML env: "
                               "enable:fuse_matmu: unknown nvFuser enable option 'fuse_matmu'; did you mean")
    assert lines[2].startswith("nvscope check: 2 failing")


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVSCOPE_", "NVFUSER_", "PYTHON"))}
    env["PYTHONPATH"] = str(REPO)
    return env


@pytest.mark.parametrize("args", [["--format", "json"], ["--format", "github"], ["--json", "-"], []],
                         ids=["json", "github", "json-dash", "text"])
def test_a_reader_that_stops_early_ends_it_quietly(tmp_path: Path, args: list[str]) -> None:
    """`nvscope check --format json . | head -1`: no BrokenPipeError traceback, as for `nvscope options | head`."""
    write(tmp_path / "bench.py", "import nvscope\n" + "nvscope.nv_options(enable=['fuse_matmul'])\n" * 3000)
    child = subprocess.Popen([sys.executable, "-m", "nvscope", "check", "--nvfuser", "==0.2.36", *args, "."],
                             cwd=tmp_path, env=_child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout is not None and child.stderr is not None
    child.stdout.readline()  # what `head -1` reads; the rest (far more than a pipe holds) meets a closed pipe
    child.stdout.close()
    with child.stderr:
        err = child.stderr.read().decode()  # --json -: the text goes here, after the JSON, which stopped
    assert child.wait(timeout=120) in (0, 1)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_statistics_count_per_construct(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "run.sh", "export NVFUSER_DISABLE=fma\nNVFUSER_DISABLE=fma python x.py\n")
    code, out, _ = check(capsys, "--statistics", ".")
    assert code == 1
    assert "shell assignment        1        0         0" in out and "shell export            1" in out


def test_python_dash_m_and_the_pre_commit_hooks_entry(tmp_path: Path) -> None:
    """pre-commit runs `nvscope check` with the changed files as arguments (.pre-commit-hooks.yaml)."""
    hooks = (REPO / ".pre-commit-hooks.yaml").read_text()
    assert "id: nvscope-check" in hooks and "entry: nvscope check" in hooks
    write(tmp_path / "a.py", USE)
    write(tmp_path / "b.txt", "NVFUSER_ENABLE=x\n")
    done = subprocess.run([sys.executable, "-m", "nvscope", "check", "--nvfuser", "==0.2.36", "a.py", "b.txt"],
                          cwd=tmp_path, env=_child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[0].startswith("a.py:2:1: nv_options:")
    assert "1 files (1 read)" in done.stdout  # b.txt: no reader reads it
