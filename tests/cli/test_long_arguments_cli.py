"""Issue 35 item 11: a message never echoes a command-line argument whole. Every command, given a 100,000-character
path, module, function name or value, says what is wrong in a few hundred characters, the argument cut."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvscope.cli import main

LONG = "a" * 100_000
CUT = "... (100"  # `cut`'s mark: the first characters, then how long the text was


@pytest.mark.parametrize("argv", [
    ["run", f"{LONG}.py"],
    ["fusions", f"{LONG}.py"],
    ["run", "-m", LONG],
    ["fusions", "-m", LONG],
    ["run", "--", f"{LONG}.py"],
    ["run", "--on-error", LONG, "plain.py"],  # argparse's own "invalid choice"
    ["fusions", "--json", f"/no/such/dir/{LONG}", "plain.py"],
    ["search", f"{LONG}.py:step"],
    ["search", f"plain.py:{LONG}"],
    ["search", "-m", f"{LONG}:step"],
    ["search", LONG],  # names no function
    ["search", "--params", LONG, "plain.py:step"],
    ["search", f"--params=1{LONG}", "plain.py:step"],  # not a Python name
    ["search", "--json", f"/no/such/dir/{LONG}", "plain.py:step"],
    ["search", "--rounds", LONG, "plain.py:step"],  # the tools' own argparse types
    ["profile", "--enable", "fuse_matmul", f"plain.py:{LONG}"],
    ["profile", "--enable", "fuse_matmul", f"{LONG}.py:step"],
    ["profile", "--enable", "fuse_matmul", "--params", LONG, "plain.py:step"],
    ["profile", "--enable", "fuse_matmul", "--plot", f"/no/such/dir/{LONG}", "plain.py:step"],
    ["bisect", "--enable", "fuse_matmul", f"plain.py:{LONG}"],
    ["bisect", "--enable", "fuse_matmul", "-m", f"{LONG}:step"],
    ["bisect", "--subprocess", "--enable", "fuse_matmul", f"{LONG}.py"],
    ["bisect", "--subprocess", "--enable", "fuse_matmul", f"plain.py:{LONG[:50]}{LONG}"],
    ["bisect", "--subprocess", "--enable", "fuse_matmul", "--timeout", LONG, "plain.py"],
    ["rescue", f"{LONG}.py:step"],
    ["rescue", f"{LONG}.py"],
    ["rescue", f"{LONG}:"],
    ["rescue", "--json", f"/no/such/dir/{LONG}", "plain.py:step"],
    ["rescue", "--sanitize", "--sanitizer", LONG, "plain.py"],
    ["check", LONG],
    ["check", f"--json=/no/such/dir/{LONG}", "plain.py"],
    ["options", f"--{LONG}"],  # an unknown flag
])
def test_a_long_argument_is_cut_in_the_message(argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain.py").write_text("def step():\n    return 1.0\n")
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's usage errors
        code = stop.code  # type: ignore[assignment]
    out, err = capsys.readouterr()
    assert code not in (0, None), err[:500]
    assert len(out) + len(err) < 3000, (len(out), len(err), err[:500])
    assert CUT in err and "Traceback" not in err, err[:500]
