"""No command overwrites a file it did not write. ``--json`` of options, doctor and check is a flag (JSON on standard
output): the word after it is a QUERY or a PATH to check, never the file to write, which is ``--json=PATH``. Every
output path (``--json``, ``--plot``, ``--table`` of every command) replaces an existing file only when it looks like
nvscope's earlier output of that kind; anything else is refused (exit 2) and left as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvscope.cli import main

SOURCE = "import os\nos.environ['NVFUSER_ENABLE'] = 'fuse_matmul'\n"
NOTES = "my notes, not nvscope's\n"


@pytest.fixture(autouse=True)
def _here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SOURCE)
    (tmp_path / "notes.txt").write_text(NOTES)
    (tmp_path / "step.py").write_text("def step():\n    return 1.0\n")


def nvscope(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as stop:  # argparse's usage errors
        code = stop.code  # type: ignore[assignment]
    out, err = capsys.readouterr()
    return code, out, err


def test_check_json_before_a_staged_file_checks_it_and_keeps_it(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A pre-commit entry ending in `--json` got the first staged file as the JSON's path: it checked `.` and wrote
    the JSON over the source file."""
    code, out, _ = nvscope(capsys, "check", "--nvfuser", "==0.2.36", "--json", "train.py")
    assert (tmp_path / "train.py").read_text() == SOURCE
    document = json.loads(out)  # JSON on standard output
    assert code == 1 and [f["path"] for f in document["findings"]] == ["train.py"]  # the file was checked
    code, out, _ = nvscope(capsys, "check", "--json", "-", "train.py")  # `--json -` is still standard output
    assert code == 1 and json.loads(out)["findings"] and not (tmp_path / "-").exists()


def test_options_and_doctor_never_take_the_next_word_as_their_file(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = nvscope(capsys, "options", "--json", "notes.txt")  # a QUERY, as without --json
    assert code == 1 and out == "" and err.count("\n") == 1 and "--json=notes.txt" in err, err
    code, out, err = nvscope(capsys, "doctor", "--json", "notes.txt")
    assert code == 2 and "unrecognized arguments: notes.txt; to write the JSON to a file: --json=notes.txt" in err
    assert (tmp_path / "notes.txt").read_text() == NOTES
    code, out, _ = nvscope(capsys, "options", "--js", "fast_math")  # an abbreviation is the flag too
    assert code == 0 and [o["name"] for o in json.loads(out)["options"]] == ["fast_math"]


def test_check_json_report_without_equals_says_how_to_write_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = nvscope(capsys, "check", "--json", "report.json", ".")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("nvscope check: error: report.json: no such file") and "--json=report.json" in err


@pytest.mark.parametrize("argv", [
    ["options", "--json=notes.txt"],
    ["doctor", "--json=notes.txt"],
    ["check", "--json=notes.txt", "train.py"],
    ["check", "--json=train.py", "."],
    ["fusions", "--json", "notes.txt", "step.py"],
    ["search", "--json", "notes.txt", "step.py:step"],
    ["search", "--plot", "notes.txt", "step.py:step"],
    ["profile", "--enable", "fuse_matmul", "--json", "notes.txt", "step.py:step"],
    ["profile", "--enable", "fuse_matmul", "--table", "notes.txt", "step.py:step"],
    ["profile", "--enable", "fuse_matmul", "--plot", "notes.txt", "step.py:step"],
    ["bisect", "--enable", "fuse_matmul", "--json", "notes.txt", "step.py:step"],
    ["rescue", "--json", "notes.txt", "step.py:step"],
], ids=" ".join)
def test_an_output_path_never_replaces_a_file_nvscope_did_not_write(argv: list[str], tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = nvscope(capsys, *argv)
    assert code == 2 and out == ""
    assert "exists and is not" in err.splitlines()[-1] and "remove the file or give another path" in err, err
    assert (tmp_path / "notes.txt").read_text() == NOTES and (tmp_path / "train.py").read_text() == SOURCE


def test_an_earlier_json_output_is_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "options.json"
    assert nvscope(capsys, "options", "--json=options.json", "fast_math")[0] == 0
    assert [o["name"] for o in json.loads(out_file.read_text())["options"]] == ["fast_math"]
    assert nvscope(capsys, "options", "--json=options.json", "fuse_matmul")[0] == 0  # its own output: replaced
    assert [o["name"] for o in json.loads(out_file.read_text())["options"]] == ["fuse_matmul"]
    (tmp_path / "empty.json").write_text("")
    assert nvscope(capsys, "check", "--json=empty.json", "train.py")[0] == 1
    assert json.loads((tmp_path / "empty.json").read_text())["counts"]["failing"] == 1
