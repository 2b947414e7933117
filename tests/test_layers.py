"""The package's layers, read from its imports: each layer imports only the layers below it, no module imports the
package face (``import nvscope`` inside the package would put ``__init__`` between the tools and the core), and no
two modules import each other, directly or round a circle. Function-level imports count: they run too.

The layers, lowest first (docs/how-it-works.md draws the same map):
``_core`` < ``_exec`` < ``_measure`` < ``_tools`` < ``_cli`` < the public faces (``nvscope/__init__.py``,
``thunder.py``, ``nvfuser.py``, ``cli.py``, ``pytest_plugin.py``, ``__main__.py``, ``_child/``).
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "nvscope"
LAYERS = ("_core", "_exec", "_measure", "_tools", "_cli")
FACE = len(LAYERS)  # the public modules sit above every layer


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: pathlib.Path) -> set[str]:
    """The nvscope modules one file imports (at any depth of its code), as dotted names."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "nvscope")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "nvscope":
                continue
            for alias in node.names:  # `from nvscope._core import _scope` imports the module nvscope._core._scope
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
    return found - {name}


MODULES: dict[str, pathlib.Path] = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
GRAPH: dict[str, set[str]] = {name: imports_of(path) for name, path in MODULES.items()}


def layer(name: str) -> int:
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else FACE


def test_the_layers_exist_and_hold_the_package() -> None:
    flat = [n for n in MODULES if n.count(".") == 1 and layer(n) == FACE]
    faces = {"nvscope.thunder", "nvscope.nvfuser", "nvscope.cli", "nvscope.pytest_plugin", "nvscope.__main__",
             "nvscope._child", "nvscope._child.sitecustomize"}
    assert sorted(set(flat) - faces) == [], "a module outside the layers: move it into one of " + ", ".join(LAYERS)
    for layer_name in LAYERS:
        assert f"nvscope.{layer_name}" in MODULES


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n != "nvscope"))
def test_imports_point_down(name: str) -> None:
    up = sorted(d for d in GRAPH[name] if d != "nvscope" and layer(d) > layer(name))
    assert not up, f"{name} (layer {layer(name)}) imports from a higher layer: {up}"
    if layer(name) < FACE:
        assert "nvscope" not in GRAPH[name], f"{name} imports the package face: import from the defining module"


def test_no_import_circles() -> None:
    circles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(GRAPH.get(node, ())):
            if dep == "nvscope" or dep not in GRAPH:
                continue  # the face, imported by faces only (the test above)
            if state.get(dep) == 1:
                circles.append([*stack[stack.index(dep):], dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(GRAPH):
        if node not in state:
            visit(node)
    assert circles == [], "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_test_reads_imports() -> None:
    """The reader sees module-level, function-level and relative imports (else the tests above could not fail)."""
    scope = GRAPH["nvscope._core._scope"]
    assert "nvscope._core._policy" in scope
    assert any(layer(d) == 0 for d in GRAPH["nvscope._exec._execute"])
