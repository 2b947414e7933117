"""``nvscope profile``, ``nvscope bisect`` and ``nvscope bisect --subprocess`` (nvscope._cli._profile_bisect_cmd), on
scripts whose
fusions are the Thunder double's. In process, the script is imported by the command (as `nvscope search` does);
with --subprocess, each probe is a fresh ``python -m nvscope run --fusions=... script.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from nvscope import OptionSet
from nvscope._bisect._process import bisect_program
from nvscope._core._fusion import exact_glob
from nvscope._measure._results import nv_options_line, run_command
from nvscope.cli import main

TESTS = Path(__file__).resolve().parents[1]  # the doubles live at tests/ top level
ROOT = TESTS.parent

SCRIPT = f'''\
import os, sys
sys.path.insert(0, {str(TESTS)!r})
import pytest
from thunder_double import ThunderDouble
import nvscope.thunder

MONKEYPATCH = pytest.MonkeyPatch()
double = ThunderDouble(MONKEYPATCH, autograd=False)  # no backward here: its probes run without importing torch
nvscope.thunder.install()
BREAKS = {{2: "fuse_matmul"}}
wrappers = [double.make_wrapper(f"nvFusion{{i}}", breaks_with=BREAKS.get(i)) for i in range(6)]

def step():
    x = 1.0
    for w in wrappers:
        (x,) = w(x)
    return x

if __name__ == "__main__":
    try:
        step()
    except RuntimeError:
        if os.environ.get("CRASH"):
            os.abort()  # as a CUDA abort would: no Python exception, no exit code of its own
        raise
'''


@pytest.fixture
def script(tmp_path: Path, imported: None) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def test_bisect_a_script_function(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = script.with_name("bisect.json")
    code = main(["bisect", "--enable", "fuse_matmul,fast_math", "--disable", "matmul_expr_eval", "--json", str(out),
                 "--quiet", f"{script}:step"])
    stdout = capsys.readouterr().out
    assert code == 0, stdout
    assert ("culprit: options fuse_matmul (1-minimal: without any one of them it runs clean) on fusions "
            "forward/nvFusion2 (of 6)") in stdout
    assert "  reproduce: with nv_options(enable=['fuse_matmul'], fusions=['forward/nvFusion2']):" in stdout
    assert "  repro script: " in stdout
    assert "the given options on every fusion but the culprits': clean" in stdout
    data = json.loads(out.read_text())
    assert data["fusions"] == ["forward/nvFusion2"] and data["options"] == {"enable": ["fuse_matmul"], "disable": []}
    assert data["probes"] == len(data["log"]) and data["line"].startswith("nv_options(")


def test_bisect_that_does_not_reproduce_exits_with_1(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bisect", "--enable", "fast_math", "--quiet", f"{script}:step"]) == 1
    assert "not reproduced" in capsys.readouterr().out


def test_profile_a_script_function_writes_table_json_and_chart(script: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    paths = {kind: script.with_name(f"profile.{kind}") for kind in ("json", "png", "txt")}
    code = main(["profile", "--enable", "fuse_matmul", "--rounds", "5", "--steps", "1", "--quiet",
                 "--json", str(paths["json"]), "--plot", str(paths["png"]), "--table", str(paths["txt"]),
                 f"{script}:step"])
    stdout = capsys.readouterr().out
    assert code == 0, stdout
    assert stdout.startswith("nvscope profile: fuse_matmul against the defaults, per fusion")
    assert "FAILED under the options" in stdout  # fusion 2 breaks under fuse_matmul: a row, not the end
    assert paths["txt"].read_text().rstrip("\n") == stdout.rstrip("\n")
    rows = json.loads(paths["json"].read_text())["rows"]
    assert [r["fusion"] for r in rows] == [f"forward/nvFusion{i}" for i in range(6)]
    assert [r["status"] for r in rows].count("failed") == 1
    assert paths["png"].stat().st_size > 1000


def test_profile_torch_alone(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = script.with_name("profile.json")
    code = main(["profile", "--torch", "--rounds", "5", "--quiet", "--json", str(out), f"{script}:step"])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    assert stdout.startswith("nvscope profile: PyTorch against nvFuser's defaults, per fusion")
    data = json.loads(out.read_text())
    assert data["torch"] is True and data["options"] == {"enable": [], "disable": []}
    assert all(r["torch_ratio"] is not None and r["torch_numerics"]["ok"] for r in data["rows"]), data["rows"]


def test_profile_torch_beside_the_options(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["profile", "--enable", "fuse_matmul", "--torch", "--rounds", "5", "--quiet", f"{script}:step"])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    assert stdout.startswith("nvscope profile: fuse_matmul and PyTorch against the defaults")
    assert "FAILED under the options" in stdout and "torch: match" in stdout


def test_profile_torch_alone_has_no_chart(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["profile", "--torch", "--plot", str(script.with_name("p.png")), f"{script}:step"])
    assert code == 2
    assert capsys.readouterr().err.strip() == ("nvscope profile: error: --plot charts the options' ratios: give "
                                               "--enable/--disable too, or leave --plot out")


@pytest.mark.parametrize(("argv", "message"), [
    (["bisect", "--enable", "fast_maht", "nope.py:step"], "unknown nvFuser enable option 'fast_maht'"),
    (["profile", "nope.py:step"], "give the options"),
    (["bisect", "--enable", "fast_math", "nope.py"], "names no function"),
    (["profile", "--enable", "fast_math", "nope.py:step"], "no such file"),
    (["bisect", "--enable", "fast_math", "--subprocess", "nope.py"], "no such file"),
    (["bisect", "--enable", "fast_math", "--subprocess", "--check", "numerics", "nope.py"],
     "--check: not with --subprocess"),
    (["bisect", "--enable", "fast_math", "--timeout", "5", "nope.py:step"], "--timeout: not without --subprocess"),
    # Issue 35 item 10: it said "can't open file 'nope.py:step'"
    (["bisect", "--enable", "fast_math", "--subprocess", "nope.py:step"],
     "--subprocess takes a program (script.py [args] or -m module [args]), not 'nope.py:step', a function: to bisect "
     "the function step, leave out --subprocess"),
    (["bisect", "--enable", "fast_math", "--subprocess", "-m", "pkg.mod:step", "2"],
     "not 'pkg.mod:step', a function"),
])
def test_bad_command_lines_exit_with_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("check", ["sloer", "raises,sloer", ","])
def test_a_bad_check_is_refused_before_the_script_is_imported(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              check: str) -> None:
    """Issue 35 item 10: `--check sloer` was refused after the import, with exit 1."""
    script = tmp_path / "s.py"
    script.write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\ndef step():\n    return 1.0\n")
    assert main(["bisect", "--enable", "fast_math", "--check", check, f"{script}:step"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nvscope bisect: error: --check ") and err.count("\n") == 1, err
    assert "raises, numerics, slower" in err
    assert not (tmp_path / "imported").exists()


@pytest.mark.parametrize("timeout", ["inf", "1e300", "nan", "0", "-1"])
def test_a_subprocess_timeout_out_of_range_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      timeout: str) -> None:
    """Issue 35 item 10: inf and 1e300 passed the check, then crashed with OverflowError."""
    script = tmp_path / "p.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    try:
        code = main(["bisect", "--subprocess", "--enable", "fast_math", "--timeout", timeout, str(script)])
    except SystemExit as stop:  # argparse's own errors
        code = stop.code  # type: ignore[assignment]
    assert code == 2
    err = capsys.readouterr().err
    assert "--timeout" in err and "Traceback" not in err and "OverflowError" not in err
    assert err.splitlines()[-1].startswith("nvscope bisect: error: "), err
    assert not (tmp_path / "ran").exists()
    with pytest.raises(ValueError, match="timeout"):
        bisect_program([str(script)], enable=["fast_math"], timeout=float(timeout), progress=False)


@pytest.mark.parametrize(("timeout", "given"), [("1000001", "1000001"), ("2.5e6", "2500000.0")])
def test_a_timeout_out_of_range_is_named_as_given(tmp_path: Path, capsys: pytest.CaptureFixture[str], timeout: str,
                                                  given: str) -> None:
    """Issue 35 item 10: `--timeout 1000001` said "must be at most 1e+06 seconds ..., got 1e+06"."""
    with pytest.raises(SystemExit):
        main(["bisect", "--subprocess", "--enable", "fast_math", "--timeout", timeout, str(tmp_path / "p.py")])
    err = capsys.readouterr().err.splitlines()[-1]
    assert err == (f"nvscope bisect: error: argument --timeout: must be at most 1000000 seconds (11.6 days), got "
                   f"{given}"), err


def test_bisect_json_dash_is_standard_output(script: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35 item 13: `--json -` wrote a file named `-`."""
    monkeypatch.chdir(script.parent)
    code = main(["bisect", "--enable", "fuse_matmul", "--json", "-", "--quiet", f"{script}:step"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["fusions"] == ["forward/nvFusion2"]  # stdout is the JSON alone
    assert "culprit: options fuse_matmul" in err  # the report goes to stderr
    assert not Path("-").exists()


@pytest.mark.parametrize("command", [["profile", "--enable", "fuse_matmul", "--rounds", "5"],
                                     ["bisect", "--enable", "fuse_matmul"],
                                     ["search", "--candidates", "fast_math", "--rounds", "5"]])
def test_json_dash_is_json_alone_when_the_script_prints(tmp_path: Path, command: list[str]) -> None:
    """Issue 35 item 13: what the script printed at import (or its step printed) went to stdout before the JSON.
    A real process: the script also writes to file descriptor 1, as C code does."""
    printing = tmp_path / "printing.py"
    printing.write_text('print("imported")\nimport os\nos.write(1, b"fd 1 at import\\n")\n' + SCRIPT
                        + 'def loud():\n    print("stepping")\n    return step()\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVSCOPE_", "NVFUSER_", "PYTHON"))}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-m", "nvscope", *command, "--json", "-", "--quiet", f"{printing}:loud"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert isinstance(json.loads(done.stdout), dict)  # the JSON alone
    assert {"imported", "fd 1 at import", "stepping"} <= set(done.stderr.splitlines())


def test_probe_command_lines() -> None:
    options = OptionSet(["fuse_matmul", "fast_math"], ["matmul_expr_eval"])
    line = run_command(options, ("backward/nvFusion3", "a/b*[1]"), ["train.py", "--steps", "1"], audit=False)
    assert line == ["python", "-m", "nvscope", "run", "--no-audit", "--enable=fast_math,fuse_matmul",
                    "--disable=matmul_expr_eval", "--fusions=backward/nvFusion3", "--fusions=a/b[*][[]1]", "--",
                    "train.py", "--steps", "1"]
    assert run_command(OptionSet(disable=["fma"]), None, ["-m", "pkg.train", "--fast"], python="/bin/py") == [
        "/bin/py", "-m", "nvscope", "run", "--disable=fma", "-m", "pkg.train", "--fast"]
    assert exact_glob("forward/nvFusion0") == "forward/nvFusion0"
    assert nv_options_line(OptionSet(["fast_math"]), ("call/FusionDefinition#2", "x/a*")) == (
        "nv_options(enable=['fast_math'], fusions=['call/FusionDefinition#2', 'x/a[*]'])")


@pytest.mark.parametrize("crash", [False, True])
def test_bisect_a_program_one_process_per_probe(script: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str], crash: bool) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    if crash:
        monkeypatch.setenv("CRASH", "1")
    result = bisect_program([str(script)], enable=["fuse_matmul", "fast_math"], disable=["matmul_expr_eval"],
                            timeout=120)
    err = capsys.readouterr().err
    assert result.reproduced and result.mode == "subprocess"
    assert result.options == OptionSet(["fuse_matmul"]) and result.fusions == ("forward/nvFusion2",)
    assert result.others_clean is True
    assert ("killed by SIGABRT" if crash else "exit 1") in result.problem
    assert err.count("nvscope bisect: probe ") == result.probes
    assert result.command() == f"python -m nvscope run --enable=fuse_matmul --fusions=forward/nvFusion2 -- {script}"
    if not crash:
        assert result.repro_scripts and Path(result.repro_scripts[0]).is_file()


def test_search_per_fusion_from_the_command_line(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = script.with_name("per_fusion.json")
    code = main(["search", "--per-fusion", "--candidates", "fast_math", "--candidates", "fuse_matmul",
                 "--rounds", "5", "--steps", "1", "--warmup", "1", "--quiet", "--json", str(out), f"{script}:step"])
    stdout = capsys.readouterr().out
    assert code == 0, stdout
    assert "best candidate" in stdout and "\nverdict: " in stdout
    data = json.loads(out.read_text())
    assert [p["options"] for p in data["profiles"]] == [{"enable": ["fast_math"], "disable": []},
                                                        {"enable": ["fuse_matmul"], "disable": []}]
    # fuse_matmul breaks fusion 2: never its choice.
    assert all(c["options"] != "fuse_matmul" for c in data["choices"] if c["fusion"] == "forward/nvFusion2")


def test_the_tools_are_public_names_loaded_on_first_use() -> None:
    import subprocess

    code = (
        "import sys, nvscope\n"
        "tools = ('nvscope._profile._profile', 'nvscope._bisect._bisect',\n"
        "         'nvscope._search._fusions', 'nvscope._bisect._minimize')\n"
        "assert not any(m in sys.modules for m in tools), [m for m in tools if m in sys.modules]\n"
        "names = ('profile', 'ProfileResult', 'ProfileRow', 'bisect', 'BisectResult', 'search_fusions',\n"
        "         'FusionSearchResult')\n"
        "assert all(n in nvscope.__all__ and n in dir(nvscope) for n in names)\n"
        "assert nvscope.profile.__module__ == 'nvscope._profile._profile'\n"
        "assert nvscope.bisect.__module__ == 'nvscope._bisect._bisect'\n"
        "assert nvscope.search_fusions.__module__ == 'nvscope._search._fusions'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("kernel_db", [True, False])
def test_bisect_subprocess_probes_share_a_kernel_db_of_their_own(script: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 kernel_db: bool) -> None:
    # Each run records what nvFuser would read: NVFUSER_ENABLE, and the temporary directory (TMPDIR) that its
    # kernel_db lives in (<temp>/nvfuser_kernel_db); and leaves a file there, as nvFuser's database would.
    log = tmp_path / "runs.jsonl"
    wrapper = tmp_path / "logged.py"
    wrapper.write_text(
        "import json, os, runpy, sys, tempfile\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(json.dumps([os.environ.get('NVFUSER_ENABLE', ''), tempfile.gettempdir()]) + '\\n')\n"
        "os.makedirs(os.path.join(tempfile.gettempdir(), 'nvfuser_kernel_db'), exist_ok=True)\n"
        f"runpy.run_path({str(script)!r}, run_name='__main__')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("NVFUSER_ENABLE", "id_model")
    monkeypatch.delenv("NVSCOPE_REPRO_DIR", raising=False)
    temporary = tmp_path / "tmp"  # the temporary directory, this bisect's and its runs': left in the test's own
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    result = bisect_program([str(wrapper)], enable=["fuse_matmul", "fast_math"], timeout=120, progress=False,
                            kernel_db=kernel_db)
    assert result.reproduced and result.fusions == ("forward/nvFusion2",)
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(runs) == result.probes + 1  # the listing run, then every probe
    if kernel_db:
        assert {enable for enable, _ in runs} == {"id_model,kernel_db"}
        (directory,) = {where for _, where in runs}  # one database for the whole bisect
        assert directory.startswith(tempfile.gettempdir()) and not os.path.exists(directory)  # removed
        assert any("kernel database" in note for note in result.notes)
    else:
        assert {enable for enable, _ in runs} == {"id_model"}
        assert {where for _, where in runs} == {tempfile.gettempdir()}
    # The repro scripts outlive the bisect (they are not written under the removed directory).
    assert result.repro_scripts and all(Path(path).is_file() for path in result.repro_scripts)


@pytest.mark.parametrize(("user", "share_defaults", "seen"), [(None, True, "all"), ("0", True, "0"),
                                                               (None, False, None)])
def test_bisect_subprocess_runs_share_the_defaults_unless_told_not_to(
        script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user: str | None, share_defaults: bool,
        seen: str | None) -> None:
    # Each run records the NVSCOPE_SHARE it got; the listing run's counts say whether its defaults were shared (the
    # script's six fusions print two distinct definitions: fusion 2's differs).
    log = tmp_path / "share.jsonl"
    wrapper = tmp_path / "logged.py"
    wrapper.write_text(
        "import json, os, runpy\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(json.dumps(os.environ.get('NVSCOPE_SHARE')) + '\\n')\n"
        f"runpy.run_path({str(script)!r}, run_name='__main__')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    if user is None:
        monkeypatch.delenv("NVSCOPE_SHARE", raising=False)
    else:
        monkeypatch.setenv("NVSCOPE_SHARE", user)
    result = bisect_program([str(wrapper)], enable=["fuse_matmul"], timeout=120, progress=False,
                            share_defaults=share_defaults)
    assert result.reproduced and result.fusions == ("forward/nvFusion2",)
    assert {json.loads(line) for line in log.read_text().splitlines()} == {seen}
    counts = result.default_compiles
    assert counts is not None and counts.fusions == 6
    assert (counts.definitions, counts.unshared) == ((2, 0) if seen == "all" else (0, 6))
    # Each probe says what it compiled (a bad one stopped at fusion 2, the culprit: it ran three).
    assert all(p.compiles is not None and p.compiles.fusions == (3 if p.bad else 6) for p in result.log)
    assert "\n  defaults: 6 fusions, " in result.report()
    assert type(result).from_json(result.to_json()) == result


@pytest.mark.parametrize("shared", [True, False])
def test_no_share_defaults_on_the_command_line(script: Path, capsys: pytest.CaptureFixture[str], shared: bool) -> None:
    out = script.with_name("profile.json")
    code = main(["profile", "--enable", "fast_math", "--rounds", "5", "--steps", "1", "--quiet",
                 *([] if shared else ["--no-share-defaults"]), "--json", str(out), f"{script}:step"])
    assert code == 0, capsys.readouterr()
    counts = json.loads(out.read_text())["default_compiles"]
    # The script's six fusions print two distinct definitions; on Thunder's own path nvscope counts no compile.
    assert (counts["definitions"], counts["unshared"]) == ((2, 0) if shared else (0, 6))
    assert counts["line"].startswith("6 fusions, 2 definitions compiled, " if shared else "6 fusions, 0 definitions")
