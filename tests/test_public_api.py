"""The top-level API a user reaches for: ``nvscope.install()`` beside ``nvscope.uninstall()``, ``dir(nvscope)``, and
what ``import nvscope`` loads."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from fake_nvfuser_frontend import Tensor
from thunder_double import ThunderDouble, load_frontend, reset_nvscope

import nvscope
import nvscope.nvfuser
import nvscope.thunder
from nvscope import UnsupportedError, nv_options

FRAMEWORKS = ("thunder", "nvfuser_direct", "nvfuser")


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in FRAMEWORKS:  # whatever the session imported, each test imports its own frameworks (or none)
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.delenv("NVSCOPE_AUTOINSTALL", raising=False)
    reset_nvscope()
    yield
    reset_nvscope()


def define(fe: Any) -> Any:
    with fe.FusionDefinition() as fd:
        fd.define_tensor(shape=[2], dtype=fe.DataType.Float)
        fd.ops.linear(0)  # a fusion fuse_matmul can affect (the catalog gates it to matmul/linear)
    return fd


def test_install_with_thunder_imported_installs_thunders_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSCOPE_AUTOINSTALL", "0")  # explicit: no automatic installation needed
    double = ThunderDouble(monkeypatch)
    assert nvscope.install() == ["nvscope.thunder"]
    assert nvscope.thunder.installed() and not nvscope.nvfuser.installed()  # Thunder's adapter covers its nvFuser
    wrapper = double.make_wrapper()
    with nv_options(enable=["fuse_matmul"]):
        wrapper(Tensor((1.0, 1.0)))
    assert double.executions[-1].enable == ["fuse_matmul"]
    assert nvscope.install() == ["nvscope.thunder"]  # idempotent
    assert nvscope.uninstall() is True and not nvscope.thunder.installed()
    nvscope.thunder.uninstall()  # an explicit uninstall keeps scopes from installing it; install() does not care
    assert nvscope.install() == ["nvscope.thunder"] and nvscope.thunder.installed()


def test_install_with_only_nvfuser_imported_installs_the_direct_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    fe = load_frontend(monkeypatch, "nvfuser_direct")
    fd = define(fe)
    assert nvscope.install() == ["nvscope.nvfuser"]
    assert nvscope.nvfuser.frontends() == ["nvfuser_direct"] and not nvscope.thunder.installed()
    with nv_options(enable=["fuse_matmul"]):
        fd.execute([1.0, 1.0])
    assert list(fe.EXECUTIONS[-1].enable) == ["fuse_matmul"]
    assert nvscope.install() == ["nvscope.nvfuser"]
    assert nvscope.uninstall() is True and not nvscope.nvfuser.installed()


def test_install_with_nothing_imported_installs_nothing() -> None:
    assert nvscope.install() == []
    assert not any(name in sys.modules for name in FRAMEWORKS)  # it imports no framework
    assert not nvscope.thunder.installed() and not nvscope.nvfuser.installed()


def test_install_refuses_a_thunder_it_cannot_drive(monkeypatch: pytest.MonkeyPatch) -> None:
    ThunderDouble(monkeypatch, drop=("get_fd",))
    with pytest.raises(UnsupportedError, match="get_fd"):
        nvscope.install()
    assert not nvscope.thunder.installed()


def test_dir_shows_the_public_names_only() -> None:
    names = dir(nvscope)
    assert names == sorted(nvscope.__all__)
    for name in ("sys", "annotations", "TYPE_CHECKING", "ENTER_HOOKS", "_LAZY", "_autoinstall"):
        assert name not in names
    for name in names:
        getattr(nvscope, name)  # each one resolves (the lazy ones load)
    assert "install" in names and "uninstall" in names


def test_a_selector_that_returns_no_bool_raises_the_exported_selector_error(monkeypatch: pytest.MonkeyPatch) -> None:
    double = ThunderDouble(monkeypatch)
    wrapper = double.make_wrapper()
    with nvscope.dev_mode(), pytest.raises(nvscope.SelectorError, match="returned str 'yes'") as caught:
        with nv_options(enable=["fuse_matmul"], fusions=lambda info: "yes"):  # type: ignore[arg-type,return-value]
            wrapper(Tensor((1.0, 1.0)))
    assert isinstance(caught.value, nvscope.NvscopeError) and isinstance(caught.value, TypeError)
    assert "SelectorError" in nvscope.__all__


def test_the_development_mode_getter_is_named_for_what_it_returns() -> None:
    assert not hasattr(nvscope, "development_mode") and "development_mode" not in nvscope.__all__
    with nvscope.dev_mode(True):
        assert nvscope.is_development_mode() is True
        with nvscope.dev_mode(False):
            assert nvscope.is_development_mode() is False


def test_partitions_returns_the_exported_fusion_table(monkeypatch: pytest.MonkeyPatch) -> None:
    double = ThunderDouble(monkeypatch)
    wrapper = double.make_wrapper()
    assert nvscope.thunder.partitions(wrapper) is None  # never seen scoped
    with nvscope.dev_mode(), nv_options(enable=["fuse_matmul"]):
        wrapper(Tensor((1.0, 1.0)))
    table = nvscope.thunder.partitions(wrapper)
    assert isinstance(table, nvscope.thunder.FusionTable) and "FusionTable" in nvscope.thunder.__all__
    assert len(table) == 1


# All that `import nvscope` loads: its face and the core's, which register the adapters' installation by name; the rest
# (the scope, the adapters, the tools, and the standard library modules they use) loads on first use.
IMPORTED = ["nvscope", "nvscope._core", "nvscope._core._lazy"]


def test_import_nvscope_loads_its_face_and_nothing_else() -> None:
    code = "import sys; before = set(sys.modules); import nvscope; print(sorted(set(sys.modules) - before))"
    env = {name: value for name, value in os.environ.items() if not name.startswith("NVSCOPE_")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == repr(IMPORTED)
    code = "import nvscope, sys; nvscope.nv_options; print(sorted(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert "nvscope._core._scope" in done.stdout and "nvscope._exec" not in done.stdout  # a name loads its own module
