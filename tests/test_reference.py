"""The generated reference in docs/ (tools/gen_reference.py): the committed pages match the code, and a stale or
unmarked page is reported with the one command that fixes it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GENERATOR = ROOT / "tools" / "gen_reference.py"
PAGES = ("cli.md", "environment.md", "modules.md")


def generate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(GENERATOR), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    for page in PAGES:
        shutil.copy(ROOT / "docs" / page, tmp_path / page)
    return tmp_path


def test_the_committed_pages_match_the_code() -> None:
    done = generate("--check")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("page", "line"), [
    ("cli.md", "| `--share-defaults` |"),  # a flag of `nvscope run`
    ("environment.md", "| `NVSCOPE_MAX_PARTITIONS` |"),
    ("modules.md", "| `nvscope/_cli/_main.py` |"),
])
def test_a_stale_page_is_named_with_the_fix_and_regenerated(docs: Path, page: str, line: str) -> None:
    path = docs / page
    text = path.read_text(encoding="utf-8")
    assert line in text
    path.write_text(text.replace(line, f"{line} edited by hand |", 1), encoding="utf-8")

    check = generate("--check", "--docs", str(docs))
    assert check.returncode == 1
    assert str(path) in check.stderr and "run `python tools/gen_reference.py`" in check.stderr
    assert path.read_text(encoding="utf-8") != text  # --check changes nothing

    assert generate("--docs", str(docs)).returncode == 0
    assert path.read_text(encoding="utf-8") == text
    assert generate("--check", "--docs", str(docs)).returncode == 0


def test_the_text_around_a_generated_part_is_kept(docs: Path) -> None:
    path = docs / "environment.md"
    text = path.read_text(encoding="utf-8")
    begin = text.index("<!-- begin generated: environment")
    end = text.index("<!-- end generated: environment -->")
    emptied = text[:text.index("\n", begin) + 1] + text[end:] + "\nA hand-written line.\n"
    path.write_text(emptied, encoding="utf-8")

    assert generate("--docs", str(docs)).returncode == 0
    assert path.read_text(encoding="utf-8") == text + "\nA hand-written line.\n"


def test_a_page_without_markers_is_one_line_and_exit_2(docs: Path) -> None:
    path = docs / "modules.md"
    path.write_text("# The modules\n", encoding="utf-8")
    done = generate("--check", "--docs", str(docs))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "<!-- begin generated: modules -->" in done.stderr
    assert "Traceback" not in done.stderr
