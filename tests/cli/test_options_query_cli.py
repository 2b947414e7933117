"""``nvscope options QUERY`` reads a query as ``nv_options`` reads a name: spaces or dashes for underscores, the
catalog's did-you-mean for a near miss, and the other list for a name of the other kind."""

from __future__ import annotations

import pytest

from nvscope.cli import main


def options(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["options", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("query", ["fast math", "Fast-Math", "fast_math"])
def test_a_name_written_with_spaces_or_dashes_finds_the_option(capsys: pytest.CaptureFixture[str],
                                                               query: str) -> None:
    code, out, _ = options(capsys, query)
    assert code == 0 and "\n  fast_math " in out


def test_a_near_miss_gets_the_catalogs_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = options(capsys, "fuse_matmull")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "; did you mean fuse_matmul" in err
    code, _, err = options(capsys, "--disable", "fuse_matmulx")
    assert code == 1 and "did you mean the enable option fuse_matmul?" in err


def test_a_name_of_the_other_list_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = options(capsys, "--disable", "fuse_matmul")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "it is an enable option: nvscope options --enable fuse_matmul" in err
    code, _, err = options(capsys, "--enable", "fma")
    assert code == 1 and "it is a disable option: nvscope options --disable fma" in err
    code, _, err = options(capsys, "--disable", "zzzz")  # nothing close: no guess
    assert code == 1 and "did you mean" not in err and "it is" not in err
