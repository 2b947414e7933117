"""pyproject.toml's ``test`` extra brings everything the CPU suite uses, so that the README's test command
(``pip install -e ".[test]" && python -m pytest``) runs every CPU test on a fresh machine instead of skipping some."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# A module the tests import -> the distribution that provides it, where the two names differ.
DISTRIBUTION = {"torch.distributed": "torch"}


def extra(name: str) -> set[str]:
    """The distribution names in ``name = [...]`` of pyproject's optional dependencies (a regex: no tomllib on 3.10)."""
    text = (REPO / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    match = re.search(rf"^{name} = \[(.*?)\]", section, re.M | re.S)
    assert match, f"no {name} extra in pyproject.toml"
    return {re.split(r"[<>=!~; \[]", item.strip().strip('"'), maxsplit=1)[0].lower()
            for item in match[1].split(",") if item.strip()}


def skipped_without() -> set[str]:
    """The modules the CPU tests skip without (``pytest.importorskip("name")``), in every folder but tests/gpu."""
    found = set()
    for path in (REPO / "tests").rglob("*.py"):
        if "gpu" in path.relative_to(REPO / "tests").parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "importorskip" and node.args and isinstance(node.args[0], ast.Constant)):
                found.add(str(node.args[0].value))
    return found


def test_the_test_extra_brings_every_module_a_cpu_test_skips_without() -> None:
    needed = {DISTRIBUTION.get(module, module.partition(".")[0]) for module in skipped_without()}
    assert {"torch", "matplotlib", "mypy"} <= needed  # the scan finds them (else this test checks nothing)
    assert needed - extra("test") == set()


def test_the_test_extra_brings_numpy_for_torch() -> None:
    # Without numpy, torch warns "Failed to initialize NumPy: No module named 'numpy'" in every test run.
    assert "numpy" in extra("test")



def test_the_readmes_test_command_runs_in_parallel_with_what_the_extras_bring() -> None:
    """The README's test command spreads the suite over the cores with pytest-xdist, which the test and dev extras
    bring; both legs of .ci/run run that command."""
    command = "python -m pytest -n auto"
    assert f'python -m pip install -e ".[test]" && {command}' in (REPO / "README.md").read_text()
    assert "pytest-xdist" in extra("test") and "pytest-xdist" in extra("dev")
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if "python -m pytest" in line]
    assert len(ci) == 2 and all(command in line for line in ci), ci
