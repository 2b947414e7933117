"""The ``nvscope`` command (nvscope/cli.py), run as ``python -m nvscope`` in a subprocess with a clean environment."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

import nvscope

REPO = Path(__file__).resolve().parents[2]
STATUSES = ("ok    ", "note  ", "warn  ", "FAIL  ", "fix:  ")


def nvscope_cmd(*args: str, cwd: Path, path: Sequence[Path] = (), **env: str) -> subprocess.CompletedProcess[str]:
    # No COLUMNS or LINES either (pytest-xdist's workers set them): a test that wants a width passes COLUMNS.
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("NVSCOPE_", "PYTHON", "NVFUSER_")) and k not in ("COLUMNS", "LINES")}
    clean["PYTHONPATH"] = os.pathsep.join(str(p) for p in (*path, REPO))
    clean.update(env)
    return subprocess.run([sys.executable, "-m", "nvscope", *args], env=clean, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


# --- help -----------------------------------------------------------------------------------------------------------

def test_help_has_examples(tmp_path: Path) -> None:
    result = nvscope_cmd("--help", cwd=tmp_path)
    assert result.returncode == 0
    assert "examples:" in result.stdout
    for command in ("options", "doctor", "run"):
        assert command in result.stdout
    run_help = nvscope_cmd("run", "--help", cwd=tmp_path)
    assert run_help.returncode == 0
    assert "-m module" in run_help.stdout and "examples:" in run_help.stdout


def test_no_command_prints_help_and_exits_2(tmp_path: Path) -> None:
    result = nvscope_cmd(cwd=tmp_path)
    assert result.returncode == 2
    assert "usage:" in result.stderr and "examples:" in result.stderr


# --- options --------------------------------------------------------------------------------------------------------

def test_options_table(tmp_path: Path) -> None:
    result = nvscope_cmd("options", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"source: {nvscope.catalog().source}"
    assert "enable options (" in result.stdout and "disable options (" in result.stdout
    row = next(line for line in lines if line.split()[:1] == ["fuse_matmul"])
    assert row.split()[1:4] == ["(ops)", "codegen", "0.2.23+"]  # can only affect some fusions
    assert any(line.split()[:2] == ["p2p_protocol", "(args)"] for line in lines)  # needs arguments
    assert next(line for line in lines if line.split()[:1] == ["fma"]).split()[1] == "codegen"  # every fusion
    for option in nvscope.catalog().options:
        assert f" {option.name} " in result.stdout
    # The gated options, at the end: which ops, and the nvFuser files that show it
    gates = lines[next(i for i, line in enumerate(lines) if line.startswith("(ops): ")):]
    gated = [o for o in nvscope.catalog().options if o.ops]
    for option in gated:
        assert any(line.split()[:2] == [option.kind, option.name] and f" {', '.join(option.ops)} " in line
                   and line.endswith(str(option.source)) for line in gates), option.name
    assert sum(1 for line in gates if line.split()[:1] in (["enable"], ["disable"])) == len(gated)


def test_options_one_kind(tmp_path: Path) -> None:
    result = nvscope_cmd("options", "--disable", cwd=tmp_path)
    assert result.returncode == 0
    assert "disable options (" in result.stdout and "enable options (" not in result.stdout
    assert nvscope_cmd("options", "--enable", "--disable", cwd=tmp_path).returncode == 2


def test_options_json(tmp_path: Path) -> None:
    result = nvscope_cmd("options", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["source"] == nvscope.catalog().source
    assert document["nvfuser"] is None  # no nvFuser in this environment
    assert len(document["options"]) == len(nvscope.catalog().options)
    by_name = {(o["kind"], o["name"]): o for o in document["options"]}
    assert by_name["enable", "fuse_matmul"] == {
        "kind": "enable", "name": "fuse_matmul", "effect": "codegen",
        "description": nvscope.catalog().get("enable", "fuse_matmul").description,  # type: ignore[union-attr]
        "since": "0.2.23", "until": None, "since_day": None, "until_day": None, "requires_args": False,
        "ops": ["linear", "matmul"], "source": "csrc/scheduler/matmul_utils.cpp",
    }
    assert (by_name["enable", "p2p_transport"]["since"], by_name["enable", "p2p_transport"]["since_day"]) == (
        "0.2.36", "2026-04-01")  # a nightly of 0.2.36 before that day lacks it
    assert by_name["disable", "fma"]["ops"] == [] and by_name["disable", "fma"]["source"] is None
    assert by_name["enable", "p2p_protocol"]["requires_args"] is True
    only_enable = json.loads(nvscope_cmd("options", "--enable", "--json", cwd=tmp_path).stdout)
    assert {o["kind"] for o in only_enable["options"]} == {"enable"}


def fake_dist(site: Path, dist_info: str) -> None:
    """An installed distribution as pip leaves it: ``<name>-<version>.dist-info/METADATA``."""
    name, _, version = dist_info.removesuffix(".dist-info").rpartition("-")
    write(site / dist_info / "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_options_source_names_the_installed_nvfuser(tmp_path: Path) -> None:
    site = tmp_path / "site"
    fake_dist(site, "nvfuser-0.2.30.dist-info")
    result = nvscope_cmd("options", "--json", cwd=tmp_path, path=[site])
    document = json.loads(result.stdout)
    assert document["nvfuser"] == "0.2.30"
    assert "for installed nvFuser 0.2.30" in document["source"]
    assert "cutlass_scheduler" not in {o["name"] for o in document["options"]}  # 0.2.34+
    text = nvscope_cmd("options", cwd=tmp_path, path=[site]).stdout
    assert text.splitlines()[0].startswith("source: bundled catalog for installed nvFuser 0.2.30")


def table_rows(stdout: str) -> dict[tuple[str, str], str]:
    """{(kind, option name): its row and continuation lines, joined} of ``nvscope options``'s option tables."""
    rows: dict[tuple[str, str], str] = {}
    kind, key = None, None
    for line in stdout.splitlines():
        if line.startswith(("enable options (", "disable options (")):
            kind, key = line.split()[0], None
        elif line.startswith("("):  # the notes and the ops table after the option tables
            break
        elif line.startswith("    ") and key is not None:
            rows[key] += " " + line.strip()
        elif kind is not None and line.startswith("  ") and not line.strip().startswith(("name ", "----")):
            key = (kind, line.split()[0])
            rows[key] = line.strip()
    return rows


def names(rows: dict[tuple[str, str], str]) -> set[str]:
    return {name for _, name in rows}


def test_options_query_filters_by_name_and_description(tmp_path: Path) -> None:
    """Issue 35 item 13: `nvscope options QUERY` was "unrecognized arguments"."""
    result = nvscope_cmd("options", "MATMUL", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    matching = {o.name for o in nvscope.catalog().options
                if "matmul" in o.name.lower() or "matmul" in o.description.lower()}
    assert {"fuse_matmul", "matmul_expr_eval"} <= matching
    assert names(table_rows(result.stdout)) == matching
    by_description = nvscope_cmd("options", "--disable", "FMA INSTRUCTIONS", cwd=tmp_path)  # fma's description
    assert by_description.returncode == 0, by_description.stderr
    assert names(table_rows(by_description.stdout)) == {o.name for o in nvscope.catalog().options if o.kind ==
                                                      "disable" and "fma instructions" in o.description.lower()}
    assert ("disable", "fma") in table_rows(by_description.stdout)
    document = json.loads(nvscope_cmd("options", "--json", "-", "matmul", cwd=tmp_path).stdout)
    assert {o["name"] for o in document["options"]} == matching
    nothing = nvscope_cmd("options", "no such words", cwd=tmp_path)
    assert nothing.returncode == 1 and nothing.stdout == ""
    assert nothing.stderr.count("\n") == 1 and "'no such words'" in nothing.stderr, nothing.stderr


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_options_table_fits_the_terminal_width(tmp_path: Path, columns: int) -> None:
    """Issue 35 item 13: the table ran to 223 characters whatever the terminal's width."""
    result = nvscope_cmd("options", cwd=tmp_path, COLUMNS=str(columns))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("enable options ("))
    tables = [line for line in lines[start:] if line.startswith("  ")]
    assert all(len(line) <= columns for line in tables), max(tables, key=len)
    use = [line for line in lines[1:start] if line]  # the `use:` line was 105 characters at any width
    assert use[0].startswith("use:    ") and all(len(line) <= columns for line in use), use
    assert [way.strip() for way in " ".join(use).removeprefix("use:").split("|")] == [
        "nv_options(enable=[...], disable=[...])", "nvscope run --enable NAME", "NVFUSER_ENABLE=NAME,..."]
    rows = table_rows(result.stdout)  # nothing lost: every description is there, wrapped
    for option in nvscope.catalog().options:
        assert " ".join(option.description.split()) in " ".join(rows[option.kind, option.name].split())
    gates = lines[next(i for i, line in enumerate(lines) if line.startswith("(ops): ")):]
    text = " ".join(" ".join(gates).split())
    assert all(str(o.source).replace(" ", "") in text.replace(" ", "") for o in nvscope.catalog().options if o.ops)
    notes = lines[next(i for i, line in enumerate(lines) if line.startswith("(args): ")):]
    assert all(len(line) <= columns for line in notes), max(notes, key=len)  # the notes under the tables too


def test_json_dash_is_standard_output_and_doctor_prints_json(tmp_path: Path) -> None:
    """Issue 35 item 13: doctor had no JSON; `--json -` is standard output wherever --json takes a path."""
    options = nvscope_cmd("options", "--json", "-", cwd=tmp_path)
    assert options.returncode == 0 and not (tmp_path / "-").exists()
    assert len(json.loads(options.stdout)["options"]) == len(nvscope.catalog().options)
    for args in (("--json",), ("--json", "-")):
        doctor = nvscope_cmd("doctor", *args, cwd=tmp_path, NVSCOPE_DEV="1")
        assert doctor.returncode == 0, doctor.stderr
        report = json.loads(doctor.stdout)  # nothing else on stdout
        assert report["ok"] is True and report["failures"] == 0
        assert {"status": "ok", "check": "development mode on (NVSCOPE_DEV=1)", "fix": None} in report["checks"]
    assert not (tmp_path / "-").exists()
    bad = nvscope_cmd("doctor", f"--json={tmp_path / 'doctor.json'}", cwd=tmp_path, NVFUSER_ENABLE="bogus")
    assert bad.returncode == 1
    assert "FAIL  NVFUSER_ENABLE: unknown nvFuser enable option 'bogus'" in bad.stdout  # the text as before
    report = json.loads((tmp_path / "doctor.json").read_text())
    assert report["ok"] is False and report["failures"] == 1
    (failed,) = [c for c in report["checks"] if c["status"] == "FAIL"]
    assert failed["check"].startswith("NVFUSER_ENABLE: unknown nvFuser enable option 'bogus'") and failed["fix"]


def test_fusions_prints_json(tmp_path: Path) -> None:
    """Issue 35 item 13: `nvscope fusions --json [PATH|-]`."""
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(REPO / "tests" / "fake_nvfuser_frontend.py", site / "nvfuser_direct.py")
    write(tmp_path / "prog.py", """\
        import nvfuser_direct as fe

        with fe.FusionDefinition() as fd:
            fd.define_tensor(shape=[2], dtype=fe.DataType.Float)
            fd.ops.linear(0)
        fd.execute([1.0])
        fd.execute([1.0])
    """)
    result = nvscope_cmd("fusions", "--json", "-", "prog.py", cwd=tmp_path, path=[site])
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    ((fusion,),) = [document["fusions"]]
    assert fusion["id"].startswith("call/") and fusion["phase"] == "call"
    assert fusion["ops"] == ["linear"] and fusion["calls"] == 2
    assert "nvscope fusions: 1 fusions" in result.stderr  # the listing, as before
    to_file = nvscope_cmd("fusions", "--json", str(tmp_path / "f.json"), "prog.py", cwd=tmp_path, path=[site])
    assert to_file.returncode == 0 and to_file.stdout == ""
    assert json.loads((tmp_path / "f.json").read_text()) == document


# --- doctor ---------------------------------------------------------------------------------------------------------

def test_doctor_ok_here(tmp_path: Path) -> None:
    result = nvscope_cmd("doctor", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"ok    python {sys.version_info.major}.{sys.version_info.minor}.")
    checks = [line for line in lines if line and not line.startswith("doctor:")]
    assert all(line.startswith(STATUSES) for line in checks), checks
    assert "FAIL" not in result.stdout
    assert "ok    NVFUSER_ENABLE not set" in lines
    assert "note  development mode off (NVSCOPE_DEV not set)" in result.stdout


def test_doctor_reports_development_mode(tmp_path: Path) -> None:
    result = nvscope_cmd("doctor", cwd=tmp_path, NVSCOPE_DEV="1", NVSCOPE_STRICT="1")
    assert result.returncode == 0
    assert "ok    development mode on (NVSCOPE_DEV=1)" in result.stdout.splitlines()
    assert "ok    strict mode on (NVSCOPE_STRICT=1)" in result.stdout.splitlines()


@pytest.mark.parametrize(("variable", "value", "expected"), [
    ("NVFUSER_ENABLE", "bogus", "FAIL  NVFUSER_ENABLE: unknown nvFuser enable option 'bogus'"),
    ("NVFUSER_ENABLE", "fuse_matmul,fuse_matmu",
     "FAIL  NVFUSER_ENABLE: unknown nvFuser enable option 'fuse_matmu'; did you mean 'fuse_matmul'"),
    ("NVFUSER_DISABLE", "fuse_matmul",
     "FAIL  NVFUSER_DISABLE: 'fuse_matmul' is an nvFuser enable option, not a disable option"),
    ("NVFUSER_ENABLE", "matmul_expr_eval",
     "FAIL  NVFUSER_ENABLE: 'matmul_expr_eval' is an nvFuser disable option, not an enable option"),
    ("NVFUSER_ENABLE", "FUSE_MATMUL",
     "FAIL  NVFUSER_ENABLE: unknown nvFuser enable option 'FUSE_MATMUL'; did you mean 'fuse_matmul'"),
    # malformed values, which nvFuser's own parser does not read as meant
    ("NVFUSER_ENABLE", "fuse_matmul(", "FAIL  NVFUSER_ENABLE: an unclosed '(' in 'fuse_matmul('"),
    ("NVFUSER_ENABLE", ",", "FAIL  NVFUSER_ENABLE: an empty name between commas in ','"),
    ("NVFUSER_DISABLE", "fma,,matmul_expr_eval",
     "FAIL  NVFUSER_DISABLE: an empty name between commas in 'fma,,matmul_expr_eval'"),
    ("NVFUSER_ENABLE", "fuse_matmul)", "FAIL  NVFUSER_ENABLE: a ')' without its '(' in 'fuse_matmul)'"),
])
def test_doctor_fails_on_bad_environment_names(tmp_path: Path, variable: str, value: str, expected: str) -> None:
    result = nvscope_cmd("doctor", cwd=tmp_path, **{variable: value})
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith(expected))
    assert lines[index + 1].startswith("fix:  ")
    assert lines[-1].startswith("doctor: 1 failure")


def test_doctor_reports_bad_nvscope_variables(tmp_path: Path) -> None:
    result = nvscope_cmd("doctor", cwd=tmp_path, NVSCOPE_MAX_PARTITIONS="0", NVSCOPE_DEV="maybe",
                         NVSCOPE_STRCT="1")
    assert result.returncode == 0, result.stdout + result.stderr  # warnings: nvscope still works
    lines = result.stdout.splitlines()
    assert ("warn  NVSCOPE_MAX_PARTITIONS='0' is not a positive integer; using the default (8)" in lines), lines
    assert "warn  NVSCOPE_DEV='maybe' is not 1/true/yes/on or 0/false/no/off; using the default (False)" in lines
    assert any(line.startswith("warn  NVSCOPE_STRCT is not a variable nvscope reads (known: NVSCOPE_DEV, ")
               for line in lines), lines
    index = lines.index("warn  NVSCOPE_MAX_PARTITIONS='0' is not a positive integer; using the default (8)")
    assert lines[index + 1] == "fix:  set NVSCOPE_MAX_PARTITIONS to an accepted value, or unset it"
    assert "Traceback" not in result.stderr


def test_doctor_suggests_the_variable_meant_and_reports_a_bad_value_once(tmp_path: Path) -> None:
    """Issue 35 item 14: no did-you-mean for NVSCOPE_DEVV; a bad value came as a warn line and a ConfigWarning."""
    result = nvscope_cmd("doctor", cwd=tmp_path, NVSCOPE_DEVV="1", NVSCOPE_DEV="maybe")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith("warn  NVSCOPE_DEVV is not a variable"))
    assert "did you mean NVSCOPE_DEV?" in lines[index] + lines[index + 1], lines[index:index + 2]
    output = result.stdout + result.stderr
    assert output.count("'maybe' is not") == 1, output
    assert "ConfigWarning" not in result.stderr


def test_doctor_accepts_environment_names_with_arguments(tmp_path: Path) -> None:
    result = nvscope_cmd("doctor", cwd=tmp_path, NVFUSER_ENABLE="p2p_protocol(put),fuse_matmul",
                         NVFUSER_DISABLE="expr_simplify(a, b)")
    assert result.returncode == 0, result.stdout
    assert "ok    NVFUSER_ENABLE=p2p_protocol(put),fuse_matmul: valid" in result.stdout
    assert "ok    NVFUSER_DISABLE=expr_simplify(a, b): valid" in result.stdout
    missing_args = nvscope_cmd("doctor", cwd=tmp_path, NVFUSER_ENABLE="p2p_protocol")
    assert missing_args.returncode == 0
    assert "warn  NVFUSER_ENABLE: 'p2p_protocol' needs arguments" in missing_args.stdout


def test_doctor_with_an_nvfuser_newer_than_the_catalog(tmp_path: Path) -> None:
    # No CUDA here, so nvFuser cannot be asked (the probe's child process fails): the FAIL says how to override,
    # and with the override the name is a note, not a failure.
    site = tmp_path / "site"
    fake_dist(site, "nvfuser-9.0.0.dist-info")
    result = nvscope_cmd("doctor", cwd=tmp_path, path=[site], NVFUSER_ENABLE="brand_new_option")
    assert result.returncode == 1
    line = next(line for line in result.stdout.splitlines() if line.startswith("FAIL  NVFUSER_ENABLE: "))
    assert "older than the installed 9.0.0" in line and "NVSCOPE_TRUST_NVFUSER=1" in line
    trusted = nvscope_cmd("doctor", cwd=tmp_path, path=[site], NVFUSER_ENABLE="brand_new_option",
                          NVSCOPE_TRUST_NVFUSER="1")
    assert trusted.returncode == 0, trusted.stdout
    assert ("note  NVFUSER_ENABLE: nvFuser enable option 'brand_new_option' is not in nvscope's option catalog: "
            "passed to nvFuser unvalidated (NVSCOPE_TRUST_NVFUSER=1)") in trusted.stdout.splitlines()
    assert "ok    NVFUSER_ENABLE=brand_new_option: valid" in trusted.stdout


def test_doctor_reports_a_thunder_that_fails_to_import(tmp_path: Path) -> None:
    site = tmp_path / "site"
    write(site / "thunder" / "__init__.py", "raise RuntimeError('this Thunder needs an older torch')\n")
    result = nvscope_cmd("doctor", cwd=tmp_path, path=[site])
    assert result.returncode == 0, result.stdout
    assert ("warn  Thunder is installed but fails to import: RuntimeError: this Thunder needs an older torch"
            in result.stdout.splitlines())
    strict = nvscope_cmd("doctor", "--require-gpu-stack", cwd=tmp_path, path=[site])
    assert strict.returncode == 1
    assert "FAIL  Thunder is installed but fails to import" in strict.stdout


def test_doctor_nvfuser_found_without_importing_it(tmp_path: Path) -> None:
    site = tmp_path / "site"
    fake_dist(site, "nvfuser_cu130_torch210-0.2.35.dist-info")
    write(site / "nvfuser_direct" / "__init__.py", "raise AssertionError('doctor must not import nvFuser')\n")
    result = nvscope_cmd("doctor", cwd=tmp_path, path=[site])
    assert "ok    nvFuser 0.2.35 (nvfuser_cu130_torch210), frontend nvfuser_direct" in result.stdout.splitlines()
    shutil.rmtree(site / "nvfuser_cu130_torch210-0.2.35.dist-info")
    fake_dist(site, "nvfuser-0.2.20.dist-info")
    old = nvscope_cmd("doctor", cwd=tmp_path, path=[site])
    assert "warn  nvFuser 0.2.20 (nvfuser), frontend nvfuser_direct: too old for per-call options" in old.stdout


def test_doctor_require_gpu_stack(tmp_path: Path) -> None:
    result = nvscope_cmd("doctor", "--require-gpu-stack", cwd=tmp_path)
    notes = [line for line in result.stdout.splitlines() if line.startswith("note  ")]
    assert all("development mode" in line for line in notes), notes  # missing pieces are failures
    assert result.returncode == (1 if "FAIL  " in result.stdout else 0)


# --- run ------------------------------------------------------------------------------------------------------------

SCRIPT = """\
    import sys
    import nvscope
    print("options:", nvscope.current_options().as_shell())
    print("argv:", sys.argv)
    print("development mode:", nvscope.is_development_mode())
    print("main:", __name__, __file__)
    import sibling  # sys.path[0] is the script's directory
    sys.exit(3)
"""


def test_run_script(tmp_path: Path) -> None:
    script = write(tmp_path / "work" / "script.py", SCRIPT)
    write(tmp_path / "work" / "sibling.py", "")
    result = nvscope_cmd("run", "--enable", "fuse_matmul", "--enable", "static_fusion_count,kernel_profile",
                         "--disable", "matmul_expr_eval", str(script), "--enable", "x", "-m", "y", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    options = "NVFUSER_ENABLE=fuse_matmul,kernel_profile,static_fusion_count NVFUSER_DISABLE=matmul_expr_eval"
    assert result.stdout.splitlines() == [
        f"options: {options}",
        f"argv: {[str(script), '--enable', 'x', '-m', 'y']}",
        "development mode: True",
        f"main: __main__ {script}",
    ]
    assert result.stderr.splitlines()[:3] == [
        f"nvscope run: note: --enable after {script} goes to the program as its own argument, not to nvscope: put "
        "nvscope's flags before the script (or `--` before it, to pass them on without this note)",
        f"nvscope run: options {options}",
        "nvscope audit: no nvFuser fusion executed",
    ]


def test_run_after_double_dash_and_relative_path(tmp_path: Path) -> None:
    write(tmp_path / "script.py", SCRIPT)
    write(tmp_path / "sibling.py", "")
    result = nvscope_cmd("run", "--disable=fma", "--", "script.py", "--flag", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert "options: NVFUSER_DISABLE=fma" in result.stdout
    assert "argv: ['script.py', '--flag']" in result.stdout


def test_run_module(tmp_path: Path) -> None:
    site = tmp_path / "site"
    module = write(site / "pkg" / "tool.py", """\
        import sys
        import nvscope
        print("options:", nvscope.current_options().as_shell())
        print("argv:", sys.argv)
        print("name:", __name__)
    """)
    write(site / "pkg" / "__init__.py", "")
    write(site / "pkg" / "__main__.py", "import nvscope; print('package main', nvscope.current_options().as_shell())")
    result = nvscope_cmd("run", "--enable", "fuse_matmul", "-m", "pkg.tool", "a", "--b", cwd=tmp_path, path=[site])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "options: NVFUSER_ENABLE=fuse_matmul",
        f"argv: {[str(module), 'a', '--b']}",
        "name: __main__",
    ]
    assert result.stderr.startswith("nvscope run: options NVFUSER_ENABLE=fuse_matmul\n")
    package = nvscope_cmd("run", "--disable", "fma", "-m", "pkg", cwd=tmp_path, path=[site])
    assert package.stdout == "package main NVFUSER_DISABLE=fma\n"


def test_run_module_from_the_working_directory(tmp_path: Path) -> None:
    write(tmp_path / "here.py", "import sys; print(sys.argv[1:])")
    result = nvscope_cmd("run", "-m", "here", "x", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "['x']\n"


def test_run_unknown_option_exits_2_before_running(tmp_path: Path) -> None:
    write(tmp_path / "script.py", "open('ran', 'w').close()")
    result = nvscope_cmd("run", "--enable", "fuse_matmu", "script.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "unknown nvFuser enable option 'fuse_matmu'; did you mean 'fuse_matmul'" in result.stderr
    assert not (tmp_path / "ran").exists()
    wrong_list = nvscope_cmd("run", "--enable", "matmul_expr_eval", "script.py", cwd=tmp_path)
    assert wrong_list.returncode == 2
    # The hint speaks the command line, not Python's nv_options(disable=[...]).
    assert wrong_list.stderr == ("nvscope run: error: 'matmul_expr_eval' is an nvFuser disable option, not an enable "
                                 "option: pass it as --disable matmul_expr_eval\n")
    other_way = nvscope_cmd("run", "--enable", "kernel_profile", "--disable", "fuse_matmul", "script.py", cwd=tmp_path)
    assert other_way.returncode == 2
    assert other_way.stderr.endswith("not a disable option: pass it as --enable fuse_matmul\n")
    upper = nvscope_cmd("run", "--disable", "FMA", "script.py", cwd=tmp_path)
    assert upper.returncode == 2 and "did you mean 'fma'?" in upper.stderr
    assert not (tmp_path / "ran").exists()


def test_run_names_may_be_separated_by_spaces(tmp_path: Path) -> None:
    write(tmp_path / "script.py", "import nvscope; print(nvscope.current_options().as_shell())")
    result = nvscope_cmd("run", "--no-audit", "--enable", "fuse_matmul kernel_profile, static_fusion_count",
                         "script.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "NVFUSER_ENABLE=fuse_matmul,kernel_profile,static_fusion_count\n"


def test_run_of_a_program_that_leaves_a_scope_open(tmp_path: Path) -> None:
    write(tmp_path / "leaks.py", """\
        import sys
        import nvscope
        nvscope.nv_options(disable=["fma"]).__enter__()
        print("options:", nvscope.current_options().as_shell())
        sys.exit(5)
    """)
    result = nvscope_cmd("run", "--enable", "fuse_matmul", "leaks.py", cwd=tmp_path)
    assert result.returncode == 5, result.stderr  # the program's exit code, not nvscope's
    assert result.stdout == "options: NVFUSER_ENABLE=fuse_matmul NVFUSER_DISABLE=fma\n"
    assert "Traceback" not in result.stderr and "RuntimeError" not in result.stderr
    assert ("UnclosedScopeWarning: the program ended with 1 scope(s) it entered still open (innermost first): "
            "nv_options(enable=[], disable=['fma'])") in result.stderr
    assert "nvscope run: options NVFUSER_ENABLE=fuse_matmul\nnvscope audit: no nvFuser fusion executed" in (
        result.stderr)


def test_run_summary_names_the_process_wide_options_as_shell_words(tmp_path: Path) -> None:
    write(tmp_path / "plain.py", "")
    result = nvscope_cmd("run", "--enable", "fuse_matmul", "plain.py", cwd=tmp_path,
                         NVFUSER_ENABLE="p2p_protocol(put)", NVFUSER_DISABLE="kernel_reuse")
    assert result.returncode == 0, result.stderr
    # Quoted as in the repro command: pasted into a shell, the line sets the same value.
    assert result.stderr.splitlines()[0] == (
        "nvscope run: options NVFUSER_ENABLE=fuse_matmul (and NVFUSER_ENABLE='p2p_protocol(put)' "
        "NVFUSER_DISABLE=kernel_reuse from the environment, for the whole process)"), result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("missing.py",), "can't open file"),
    (("-m", "no_such_module"), "No module named 'no_such_module'"),
    ((), "give the script to run"),
])
def test_run_missing_target_exits_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    result = nvscope_cmd("run", "--enable", "fuse_matmul", *args, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr


def test_run_of_a_directory_without_main_exits_2_with_one_line(tmp_path: Path) -> None:
    """Issue 35 item 14: a runpy traceback."""
    (tmp_path / "somedir").mkdir()
    result = nvscope_cmd("run", "--enable", "fast_math", "somedir", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("nvscope run: error: "), result.stderr
    assert "somedir" in result.stderr and "__main__.py" in result.stderr
    write(tmp_path / "somedir" / "__main__.py", "print('main ran')")  # as python runs a directory: its __main__
    assert nvscope_cmd("run", "--no-audit", "somedir", cwd=tmp_path).stdout == "main ran\n"


@pytest.mark.parametrize("interpreter", ["python", "python3", sys.executable])
def test_run_of_the_interpreter_says_to_give_the_script(tmp_path: Path, interpreter: str) -> None:
    """Issue 35 item 14: `nvscope run --enable X -- python x.py` looked for a file named python."""
    write(tmp_path / "x.py", "open('ran', 'w').close()")
    result = nvscope_cmd("run", "--enable", "fast_math", "--", interpreter, "x.py", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "give the script itself" in result.stderr and "nvscope run --enable fast_math x.py" in result.stderr
    assert not (tmp_path / "ran").exists()


def test_fusions_errors_say_nvscope_fusions(tmp_path: Path) -> None:
    """Issue 35 item 14: `nvscope fusions`'s errors said `nvscope run`."""
    missing = nvscope_cmd("fusions", cwd=tmp_path)
    assert missing.returncode == 2
    assert re.match(r"usage: (python -m )?nvscope fusions ", missing.stderr), missing.stderr
    assert "nvscope fusions: error: give the script" in missing.stderr and "nvscope run" not in missing.stderr
    no_file = nvscope_cmd("fusions", "nope.py", cwd=tmp_path)
    assert no_file.returncode == 2 and no_file.stderr.startswith("nvscope fusions: error: can't open file")
    bad_name = nvscope_cmd("fusions", "--enable", "fast_maht", "nope.py", cwd=tmp_path)
    assert bad_name.returncode == 2 and bad_name.stderr.startswith("nvscope fusions: error: unknown nvFuser")


@pytest.mark.parametrize(("args", "usage", "hint"), [
    (("fusions", "--bogus", "x.py"), "usage: nvscope fusions ", None),
    (("run", "--enabel", "fast_math", "x.py"), "usage: nvscope run ", "--enable"),
    (("doctor", "--require-gpu-stak"), "usage: nvscope doctor ", "--require-gpu-stack"),
    (("options", "--jsno"), "usage: nvscope options ", "--json"),
    (("search", "--candidatse", "fma", "x.py:f"), "usage: nvscope search ", "--candidates"),
    (("bisect", "--enable", "fma", "--chek", "raises", "x.py:f"), "usage: nvscope bisect ", "--check"),
])
def test_a_misspelt_flag_shows_its_subcommands_usage(tmp_path: Path, args: tuple[str, ...], usage: str,
                                                     hint: str | None) -> None:
    """Issue 35 item 14: the top-level usage came with "unrecognized arguments"."""
    result = nvscope_cmd(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.replace("python -m nvscope", "nvscope", 1).startswith(usage), result.stderr
    assert f"nvscope {args[0]}: error: unrecognized arguments: " in result.stderr
    if hint is not None:
        assert f"did you mean {hint}?" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_script_raising(tmp_path: Path) -> None:
    write(tmp_path / "boom.py", """\
        def fail():
            raise ValueError("boom")
        fail()
    """)
    result = nvscope_cmd("run", "--enable", "fuse_matmul", "boom.py", cwd=tmp_path)
    assert result.returncode == 1
    traceback = result.stderr[:result.stderr.index("nvscope run: options")]
    assert traceback.startswith("Traceback (most recent call last):")
    assert 'boom.py", line 3, in <module>' in traceback
    assert traceback.rstrip().endswith("ValueError: boom")
    assert "runpy" not in traceback and "cli.py" not in traceback  # only the program's frames
    assert "nvscope run: options NVFUSER_ENABLE=fuse_matmul" in result.stderr


@pytest.mark.parametrize(("source", "code", "stderr"), [
    ("import sys; sys.exit('bad input')", 1, "bad input"),
    ("import sys; sys.exit()", 0, ""),
    ("raise SystemExit(7)", 7, ""),
])
def test_run_exit_codes(tmp_path: Path, source: str, code: int, stderr: str) -> None:
    write(tmp_path / "script.py", source)
    result = nvscope_cmd("run", "script.py", cwd=tmp_path)
    assert result.returncode == code
    assert result.stderr.startswith(stderr)
    assert "nvscope run: options (none)" in result.stderr


def test_run_no_audit(tmp_path: Path) -> None:
    write(tmp_path / "script.py", "import nvscope; print(nvscope.current_options().as_shell())")
    result = nvscope_cmd("run", "--no-audit", "--enable", "fuse_matmul", "script.py", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout == "NVFUSER_ENABLE=fuse_matmul\n"
    assert result.stderr == ""


def _fake_thunder(site: Path) -> None:
    """Just enough of Thunder's and nvFuser's modules for nvscope.thunder.install() to patch."""
    write(site / "nvfuser_direct" / "__init__.py", """\
        class FusionDefinition:
            def execute(self, inputs, **kwargs):
                return inputs

        def version():
            return "0.2.35"
    """)
    write(site / "thunder" / "__init__.py", """\
        __version__ = "0.0.fake"
        import nvfuser_direct
        from thunder.executors import nvfuserex_impl, torch_autograd
    """)
    write(site / "thunder" / "executors" / "__init__.py", "")
    write(site / "thunder" / "executors" / "nvfuserex.py", "def nvfuser_version():\n    return '0.2.35'\n")
    write(site / "thunder" / "executors" / "nvfuserex_impl.py", """\
        from nvfuser_direct import FusionDefinition

        class FusionDefinitionWrapper:
            # Thunder's is a slots dataclass with these fields; the adapter checks for them before patching.
            __slots__ = ("get_fd", "to_descriptors", "name", "use_cache", "last_used", "last_inputs",
                         "store_inputs", "enable_options", "disable_options")

            def __call__(self, *args):
                return args
    """)
    write(site / "thunder" / "executors" / "torch_autograd.py", """\
        class ThunderFunction:
            @staticmethod
            def forward(ctx, *args):
                return args

            @staticmethod
            def backward(ctx, *grads):
                return grads
    """)


def test_run_installs_the_thunder_adapter_when_the_program_imports_thunder(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _fake_thunder(site)
    write(tmp_path / "uses_thunder.py", """\
        import nvscope.nvfuser
        import nvscope.thunder
        assert not nvscope.thunder.installed()
        import thunder
        print(nvscope.thunder.installed(), nvscope.nvfuser.frontends(), type(thunder.__loader__).__name__)
    """)
    write(tmp_path / "uses_nvfuser.py", """\
        import nvscope.nvfuser
        import nvfuser_direct
        print(nvscope.nvfuser.frontends())
    """)
    result = nvscope_cmd("run", "--enable", "fuse_matmul", "uses_thunder.py", cwd=tmp_path, path=[site])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "True [] SourceFileLoader\n"  # the module keeps its real loader
    direct = nvscope_cmd("run", "--enable", "fuse_matmul", "uses_nvfuser.py", cwd=tmp_path, path=[site])
    assert direct.stdout == "['nvfuser_direct']\n", direct.stderr
    off = nvscope_cmd("run", "--enable", "fuse_matmul", "uses_thunder.py", cwd=tmp_path, path=[site],
                      NVSCOPE_AUTOINSTALL="0")
    assert off.stdout.startswith("False")
    assert "no nvscope adapter was installed" in off.stderr


def test_tools_import_no_heavy_modules(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import sys, nvscope.cli, nvscope.pytest_plugin; "
                               "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'thunder') "
                               "or m.startswith('nvfuser')))"],
        env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[]\n"


# --- options --probe: nvFuser's own list against the catalog ------------------------------------------------------

def test_probe_without_nvfuser_fails_clearly() -> None:
    done = subprocess.run([sys.executable, "-m", "nvscope", "options", "--probe"], capture_output=True, text=True,
                          timeout=120)
    if "nvfuser" in done.stdout.lower() and done.returncode == 0:
        pytest.skip("an nvFuser that runs is installed here")
    assert done.returncode == 1
    # Issue 35 item 14: it printed a Python list of the child's traceback lines.
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("nvscope options --probe: "), done.stderr
    assert "nvFuser" in done.stderr and "Traceback" not in done.stderr and "['" not in done.stderr


def test_probe_of_an_nvfuser_that_imports_but_cannot_run_says_its_last_line(tmp_path: Path) -> None:
    """Issue 35 item 14: an nvFuser that imports (here the frontend double, as `nvfuser`) but fails the probe's fusion
    (as one without CUDA does) printed a Python list of the child's traceback lines."""
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(REPO / "tests" / "fake_nvfuser_frontend.py", site / "nvfuser.py")
    done = nvscope_cmd("options", "--probe", cwd=tmp_path, path=[site])
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("nvscope options --probe: "), done.stderr
    assert "Traceback" not in done.stderr and "['" not in done.stderr and "File " not in done.stderr
    assert "AttributeError: 'FusionDefinition' object has no attribute 'add_output'" in done.stderr  # its last line


@pytest.mark.parametrize(("extra", "code"), [(set(), 0), ({"brand_new_option"}, 1)])
def test_probe_compares_with_the_catalog(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                         extra: set[str], code: int) -> None:
    from nvscope import cli
    from nvscope._core import _catalog_probe as _probe

    known = nvscope.catalog()
    accepted = {"enable": (known.names("enable") - {"fuse_matmul"}) | extra, "disable": known.names("disable")}
    monkeypatch.setattr(_probe, "probe_installed", lambda: {k: frozenset(v) for k, v in accepted.items()})
    assert cli.main(["options", "--probe"]) == code
    out = capsys.readouterr().out
    assert "in the catalog for this version but not accepted by this build: fuse_matmul" in out
    assert ("accepted by nvFuser but missing from the catalog: brand_new_option" in out) == bool(extra)


@pytest.mark.parametrize(("args", "said"), [
    (("optons",), "error: unknown command 'optons'; did you mean options?"),
    (("zzz", "x.py"), "error: unknown command 'zzz' (choose from options, doctor, search, profile, bisect, rescue, "
                      "check, run, fusions)"),
    (("--verison",), "error: unrecognized arguments: --verison; did you mean --version?"),
])
def test_a_misspelt_command_or_top_level_flag_names_what_it_resembles(tmp_path: Path, args: tuple[str, ...],
                                                                      said: str) -> None:
    result = nvscope_cmd(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].endswith(said), result.stderr
    assert "Traceback" not in result.stderr
