"""Installing nvscope for real: the nvFuser wheel for a torch, the license in the wheel, one source for the version."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from nvscope._cli import _wheels as _install
from nvscope._core import _version

ROOT = Path(__file__).resolve().parents[2]


# --- which nvFuser wheel ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("torch", "cuda", "package"), [
    ("2.10.0+cu130", "13.0", "nvfuser-cu130-torch210"),
    ("2.10.0+cu128", "12.8", "nvfuser-cu128-torch210"),
    ("2.8.0+cu128", "12.8", "nvfuser-cu128-torch28"),
    ("2.8.0", "12.9", "nvfuser-cu129-torch28"),  # no local label: torch.version.cuda decides
    ("2.9.1+cu126", "12.6", "nvfuser-cu126-torch29"),
    ("2.10.0rc3+cu128", "12.8", "nvfuser-cu128-torch210"),  # a release candidate is that release
    ("2.5.1+cu118", "11.8.0", "nvfuser-cu118-torch25"),
])
def test_a_published_pair_gets_its_pip_line(torch: str, cuda: str, package: str) -> None:
    hint = _install.nvfuser_wheel(torch, cuda, python=(3, 12), system="Linux", machine="x86_64")
    assert hint.command == f"pip install {package}"


def test_no_wheel_is_said_plainly_with_what_to_do() -> None:
    def reason(torch: str, cuda: str | None, **where: object) -> str:
        hint = _install.nvfuser_wheel(torch, cuda, **where)  # type: ignore[arg-type]
        assert hint.command is None, hint
        return hint.reason

    assert "not a CUDA build" in reason("2.13.0+cpu", None)
    # The H200's torch: no torch211 wheel known; the newest for CUDA 13.0 is named, and how to check for a new one.
    text = reason("2.11.0+cu130", "13.0")
    assert "nvfuser-cu130-torch211" in text and "pip index versions" in text
    assert "torch 2.10" in text and "pip install nvfuser-cu130-torch210" in text
    # A CUDA nvFuser has no wheel for, with this torch: the CUDA versions it does have.
    text = reason("2.9.1+cu129", "12.9")
    assert "nvfuser-cu126-torch29" in text and "nvfuser-cu130-torch29" in text
    # A wheel that exists but is older than per-call options.
    text = reason("2.4.1+cu121", "12.1")
    assert "0.2.9" in text and "0.2.23" in text and "nvfuser-cu121-torch25" in text
    assert "source build" in reason("2.8.0a0+5228986c39.nv25.06", "12.9")
    assert "Python 3.10 and 3.12" in reason("2.10.0+cu130", "13.0", python=(3, 11))
    assert "the wheel for torch 2.10 and CUDA 13.0 is nvfuser-cu130-torch210" in reason("2.10.0+cu130", "13.0",
                                                                                           python=(3, 11))
    # On a Python without wheels, a torch newer than the list: the name it would have, not a wheel that is not there.
    text = reason("2.14.0+cu130", "13.0", python=(3, 11))
    assert "Python 3.10 and 3.12" in text and "would be named nvfuser-cu130-torch214" in text
    assert "is nvfuser-cu130-torch214" not in text
    assert "x86_64" in reason("2.10.0+cu130", "13.0", system="Linux", machine="aarch64")
    assert "not a version" in reason("banana", "13.0")
    assert "not one nvscope can read" in reason("2.10.0", "thirteen")


def test_a_torch_nightly_gets_nvfusers_nightly_with_the_caveat() -> None:
    hint = _install.nvfuser_wheel("2.12.0.dev20260301+cu130", "13.0")
    assert hint.command == "pip install --pre nvfuser-cu130 --extra-index-url https://pypi.nvidia.com"
    assert "no compatibility" in hint.reason
    assert _install.nvfuser_wheel("2.12.0.dev20260301+cu129", "12.9").command is None


def test_the_table_in_the_install_page_is_what_the_code_answers() -> None:
    text = (ROOT / "docs" / "install-gpu.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \| (.+) \|$", text, flags=re.MULTILINE)
    assert len(rows) >= 8
    for torch, cuda, answer in rows:
        hint = _install.nvfuser_wheel(torch, None if cuda == "None" else cuda, python=(3, 12), system="Linux",
                                      machine="x86_64")
        shown = re.fullmatch(r"`(pip install [^`]+)`", answer)
        assert hint.command == (shown[1] if shown else None), (torch, cuda, answer, hint)


# The distribution names in the METADATA of real nvFuser wheels (``Name:``), as pip normalises them, with the CUDA and
# torch each is built for: nvfuser-cu128-torch28 and nvfuser-cu130-torch210 were downloaded
# (nvscope/_cli/_wheels.py), the others are PyPI's project names in the same scheme. Held here, so that the test
# runs on a fresh clone.
REAL_NAMES = [
    ("nvfuser_cu128_torch28", "2.8", "12.8"),
    ("nvfuser_cu130_torch210", "2.10", "13.0"),
    ("nvfuser_cu126_torch29", "2.9", "12.6"),
    ("nvfuser_cu118_torch25", "2.5", "11.8"),
]


@pytest.mark.parametrize(("name", "torch", "cuda"), REAL_NAMES)
def test_the_naming_matches_real_nvfuser_wheels(name: str, torch: str, cuda: str, tmp_path: Path) -> None:
    # A wheel with that METADATA, read as a real one is: its Name is the distribution the pip line installs.
    import zipfile

    version = _install.LISTED[(tuple(map(int, cuda.split("."))), tuple(map(int, torch.split("."))))]  # type: ignore[index]
    wheel = tmp_path / f"{name}-{version}-cp312-cp312-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{name}-{version}.dist-info/METADATA",
                         f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        found = re.search(r"^Name: (\S+)$", archive.read(metadata).decode(), flags=re.MULTILINE)
    assert found is not None and found[1] == name
    for local in ("", f"+cu{cuda.replace('.', '')}"):  # torch with and without its local CUDA label
        hint = _install.nvfuser_wheel(f"{torch}.0{local}", cuda, python=(3, 12), system="Linux", machine="x86_64")
        assert hint.command == f"pip install {name.replace('_', '-')}", hint


def test_a_thunder_that_does_not_import_gets_the_combination_known_to_work(tmp_path: Path) -> None:
    """Thunder 0.2.6 and 0.2.7.dev fail to import with torch 2.13 and newer: the doctor's fix names the torch the
    newest nvFuser wheels are built for and the Thunder that runs them, pinned, and the page with the combinations."""
    hint = _install.thunder_hint("2.14.0+cu130")
    assert "do not import with torch 2.13 or newer (this is torch 2.14.0+cu130)" in hint
    assert "install torch 2.10 for your CUDA" in hint
    assert 'pip install --pre "lightning-thunder==0.2.7.dev20260201"' in hint
    assert "docs/install-gpu.md" in hint and _install.THUNDER in (ROOT / "docs" / "install-gpu.md").read_text()
    older = _install.thunder_hint("2.10.0+cu130")  # the import failed for another reason: no claim about torch
    assert older.startswith("install a Thunder release that supports torch 2.10.0+cu130") and "2.13" not in older
    # The extra installs that Thunder (a pre-release named in the requirement: pip needs no --pre for it).
    assert f'thunder = ["lightning-thunder>={_install.THUNDER}", "{_install.TORCH_PIN}"]' in \
        (ROOT / "pyproject.toml").read_text()
    # What `nvscope doctor` prints for a Thunder that raises on import, next to the installed torch.
    site = tmp_path / "site"
    (site / "thunder").mkdir(parents=True)
    (site / "thunder" / "__init__.py").write_text("raise AttributeError(\"type object 'Tensor' has no attribute "
                                                  "'align_as'\")\n")
    done = subprocess.run([sys.executable, "-m", "nvscope", "doctor"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])})
    lines = done.stdout.splitlines()
    at = lines.index("warn  Thunder is installed but fails to import: AttributeError: type object 'Tensor' has no "
                     "attribute 'align_as'")
    torch = pytest.importorskip("torch")
    assert lines[at + 1] == f"fix:  {_install.thunder_hint(str(torch.__version__))}"


def test_without_thunder_the_fix_is_a_thunder_that_imports_with_the_installed_torch(tmp_path: Path) -> None:
    """Issue 35 item 18: without Thunder, doctor said `pip install lightning-thunder`, which next to torch 2.13 or newer
    installs a Thunder that does not import."""
    newer = _install.thunder_hint("2.14.0+cu130", installed=False)
    assert newer == _install.thunder_hint("2.14.0+cu130")  # the same line as for one that fails to import
    older = _install.thunder_hint("2.10.0+cu130", installed=False)
    assert older.startswith(f'pip install --pre "lightning-thunder=={_install.THUNDER}"  (') and "2.13" not in older
    # No torch: the line pins the torch too, else pip takes PyPI's newest, with which this Thunder does not import.
    bare = _install.thunder_hint("(not importable)", installed=False)
    assert bare.startswith(f'pip install --pre "lightning-thunder=={_install.THUNDER}" "{_install.TORCH_PIN}"  (')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVSCOPE_", "NVFUSER_", "PYTHON"))}
    done = subprocess.run([sys.executable, "-m", "nvscope", "doctor"], capture_output=True, text=True, timeout=120,
                          env={**env, "PYTHONPATH": str(ROOT)}, cwd=tmp_path)
    lines = done.stdout.splitlines()
    if "note  Thunder not installed (nvscope also works with nvFuser directly)" not in lines:
        pytest.skip("Thunder is installed here")
    at = lines.index("note  Thunder not installed (nvscope also works with nvFuser directly)")
    torch = sys.modules.get("torch") or pytest.importorskip("torch")
    assert lines[at + 1] == f"fix:  {_install.thunder_hint(str(torch.__version__), installed=False)}"
    assert lines[at + 1] != "fix:  pip install lightning-thunder"


def test_install_hint_reads_the_installed_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("torch")
    fake.__version__ = "2.10.0+cu130"  # type: ignore[attr-defined]
    fake.version = types.SimpleNamespace(cuda="13.0")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, package=None: object())
    monkeypatch.setattr("platform.system", lambda: "Linux")
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    hint = _install.install_hint()
    if sys.version_info[:2] in _install.PYTHONS:
        assert hint.startswith("pip install nvfuser-cu130-torch210  (")
    else:
        assert "Python 3.10 and 3.12" in hint and "nvfuser-cu130-torch210" in hint


def test_install_hint_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr("importlib.util.find_spec", lambda name, package=None: None if name == "torch" else
                        real(name, package))
    assert _install.install_hint().startswith("install a CUDA build of torch first")
    assert f'pip install "{_install.TORCH_PIN}"' in _install.install_hint()


def test_the_pinned_torch_is_one_thunder_imports_with_and_nvfuser_has_wheels_for() -> None:
    """The torch that the thunder extra and the doctor's lines pin: below the first torch Thunder does not import
    with, and the newest nvFuser publishes wheels for (a bare `pip install torch` takes PyPI's newest)."""
    pinned = tuple(int(part) for part in _install.TORCH_PIN.removeprefix("torch==").removesuffix(".*").split("."))
    assert pinned < _install.THUNDER_TORCH_BELOW and pinned == max(t for _, t in _install.LISTED)
    hint = _install.nvfuser_wheel(f"{pinned[0]}.{pinned[1]}.0+cu130", "13.0", python=(3, 12), system="Linux",
                                  machine="x86_64")
    assert hint.command == f"pip install nvfuser-cu130-torch{pinned[0]}{pinned[1]}"


def test_doctor_without_torch_or_thunder_pins_the_torch_thunder_imports_with(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """In a bare virtualenv, doctor's fix lines lead to a torch and Thunder that import together: not the bare
    `pip install torch`, which takes PyPI's newest (Thunder does not import with torch 2.13 or newer)."""
    import importlib.util

    from nvscope._cli._doctor import doctor

    real = importlib.util.find_spec
    monkeypatch.setattr("importlib.util.find_spec", lambda name, package=None: None if name.split(".")[0] in (
        "torch", "thunder", "nvfuser", "nvfuser_direct") else real(name, package))
    doctor(require_gpu_stack=False)
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("note  torch not installed (nvFuser and Thunder need it)")
    assert lines[at + 1].startswith(f'fix:  pip install "{_install.TORCH_PIN}"  (a CUDA build')
    at = lines.index("note  Thunder not installed (nvscope also works with nvFuser directly)")
    assert lines[at + 1].startswith(f'fix:  pip install --pre "lightning-thunder=={_install.THUNDER}" '
                                    f'"{_install.TORCH_PIN}"')
    assert not any(line.startswith("fix:  pip install torch") for line in lines)


# --- the version: one source --------------------------------------------------------------------------------------

def test_the_version_is_pyprojects() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    declared = _version.from_pyproject(text)
    if sys.version_info >= (3, 11):
        import tomllib

        assert declared == tomllib.loads(text)["project"]["version"]
    assert declared is not None and re.fullmatch(r"\d+\.\d+\.\d+\S*", declared)
    import nvscope

    assert nvscope.__version__ == declared


def test_the_pyproject_reader_takes_only_nvscopes_project_table() -> None:
    assert _version.from_pyproject('[project]\nname = "nvscope"\nversion = "1.2.3"  # bumped\n') == "1.2.3"
    assert _version.from_pyproject('[project]\nname = "other"\nversion = "1.2.3"\n') is None
    assert _version.from_pyproject('[tool.x]\nversion = "9"\n[project]\nname = "nvscope"\nversion = \'2.0\'\n') == "2.0"
    assert _version.from_pyproject('[project]\nname = "nvscope"\n[tool.x]\nversion = "9"\n') is None


def _copy_package(target: Path) -> None:
    shutil.copytree(ROOT / "nvscope", target / "nvscope", ignore=shutil.ignore_patterns("__pycache__"))


def _version_in(path: Path, code: str = "import nvscope; print(nvscope.__version__)") -> str:
    # -S and cwd: neither site-packages nor the checkout (an editable install's nvscope.egg-info) can answer instead.
    done = subprocess.run([sys.executable, "-S", "-c", f"import sys; sys.path.insert(0, {str(path)!r}); {code}"],
                          cwd=path, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


def test_an_installed_copy_reads_its_metadata(tmp_path: Path) -> None:
    _copy_package(tmp_path)
    info = tmp_path / "nvscope-7.8.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.4\nName: nvscope\nVersion: 7.8.9\n")
    assert _version_in(tmp_path) == "7.8.9"
    assert _version_in(tmp_path, "from nvscope.cli import main; main(['--version'])") == "nvscope 7.8.9"


def test_a_source_tree_wins_over_stale_metadata(tmp_path: Path) -> None:
    _copy_package(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "nvscope"\nversion = "3.0.0"\n')
    info = tmp_path / "nvscope-2.0.0.dist-info"  # e.g. an editable install made before the version was bumped
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.4\nName: nvscope\nVersion: 2.0.0\n")
    assert _version_in(tmp_path) == "3.0.0"


def test_neither_source_nor_metadata_says_so(tmp_path: Path) -> None:
    _copy_package(tmp_path)
    assert _version_in(tmp_path) == _version.UNKNOWN


def test_reading_the_version_keeps_import_nvscope_light() -> None:
    code = ("import sys, nvscope; before = 'importlib.metadata' in sys.modules; v = nvscope.__version__; "
            "print(before, bool(v))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stdout.split() == ["False", "True"]


# --- the license --------------------------------------------------------------------------------------------------

def test_the_license_is_the_apache_2_text_declared_in_pyproject() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^license = "Apache-2.0"$', pyproject, flags=re.MULTILINE)
    assert re.search(r'^license-files = \["LICENSE"\]$', pyproject, flags=re.MULTILINE)


def test_the_wheel_carries_the_license(tmp_path: Path) -> None:
    # Built from a copy, so that the build's own files (build/, *.egg-info) stay out of the checkout.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "_nvscope_pytestplugin.py"):
        shutil.copy(ROOT / name, source / name)
    _copy_package(source)
    shutil.copytree(ROOT / "src", source / "src", symlinks=True)  # the links to the package and the plugin
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"),
                           str(source)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0 and "No matching distribution found for setuptools" in done.stderr:
        pytest.skip("pip cannot fetch the build backend here (no package index)")
    assert done.returncode == 0, done.stderr
    import zipfile

    (wheel,) = (tmp_path / "dist").glob("nvscope-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = archive.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert "nvscope/_child/sitecustomize.py" in names  # nvscope run's hook for child processes (package data)
    # The pytest plugin's entry point: a top-level module, so that it can load without nvscope.
    assert "_nvscope_pytestplugin.py" in names
    assert "[pytest11]\nnvscope = _nvscope_pytestplugin\n" in entry_points
    assert "License-Expression: Apache-2.0" in metadata and "License-File: LICENSE" in metadata
    assert "Requires-Python: >=3.10" in metadata
