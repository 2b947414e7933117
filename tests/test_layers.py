"""The package's layers, read from its imports: each layer imports only the layers below it, no module imports the
package face (``import nvscope`` inside the package would put ``__init__`` between the tools and the core), and no
two modules import each other, directly or round a circle. Function-level imports count: they run too, and so do
module names in strings that code imports or runs (``"from nvscope._cli._run import run"`` in a child's source,
``importlib.import_module("nvscope._profile._profile")``, ``-m nvscope._cli._run``). A public face named
there counts as the layer it re-exports (``"from nvscope.cli import main"`` and ``-m nvscope`` run ``_cli``); a layer
module that names one above it only to show the user a command lists it, with the reason, in `USER_FACING`.

Each layer's ``__init__`` names what the layers above may use (the list in its ``__init__.pyi``, else its ``__all__``
or explicit re-exports ``from ._x import a as a``), and a module of a higher layer imports a lower layer only through
it:
``from nvscope._measure import Runner``, never ``from nvscope._measure._harness import Runner``. The public faces are
exempt: each re-exports named modules' verbs (``nvscope.thunder`` is ``nvscope._exec._thunder``'s), and the lazy
table of ``nvscope/__init__.py`` names the module each tool loads from.

The layers, lowest first (docs/how-it-works.md draws the same map): ``_core``; ``_exec`` and ``_check`` beside it
(only ``_cli`` and the faces use ``_check``); ``_measure``; ``_tools``, the tools' common ground; the tool families
``_profile``, ``_bisect``, ``_search`` and ``_rescue``, which use one another only through their faces and never in a
circle; ``_cli``; and the public faces (``nvscope/__init__.py``, ``thunder.py``, ``nvfuser.py``, ``cli.py``,
``pytest_plugin.py``, ``__main__.py``, ``_child/``) above them all.
"""

from __future__ import annotations

import ast
import itertools
import pathlib
import re
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "nvscope"
FAMILIES = ("_profile", "_bisect", "_search", "_rescue")
LEVELS = {"_core": 0, "_check": 1, "_exec": 1, "_measure": 2, "_tools": 3, **dict.fromkeys(FAMILIES, 4), "_cli": 5}
LAYERS = tuple(LEVELS)
FACE = max(LEVELS.values()) + 1  # the public modules sit above every layer
ONLY_FOR = {"_check": {"_cli"}}  # a package that only these layers above it may use


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# A module named in a string that code imports or runs: after `import`, in `from X import a, b` (X, or X.a where that
# is a module), after `-m` (a package's `__main__`), or a layer's module as the whole string (import_module's argument,
# or `nvscope._core.load`'s "module:attribute").
_NAME = r"nvscope(?:\.\w+)*"
CODE_NAME = re.compile(rf"\bfrom\s+({_NAME})\s+import\s+([\w\s,()]+?)\s*(?=$|;)|\bimport\s+({_NAME})(?=$|[\s;,])"
                       rf"|-m\s+({_NAME})(?=$|\s)|^(nvscope\._\w+(?:\.\w+)*)(?::\w+)?$")


def _module(name: str) -> str:
    """The module a dotted name in a string loads: itself, or its package's ``__main__`` (``-m nvscope``), or the
    module that holds it (``nvscope.cli.main``)."""
    while name not in MODULES and f"{name}.__main__" not in MODULES and "." in name:
        name = name.rpartition(".")[0]
    return name


def _named(text: str) -> set[str]:
    found: set[str] = set()
    for line in text.splitlines() or [""]:
        for match in CODE_NAME.finditer(line.strip()):
            source, names, imported, run, whole = match.groups()
            if source is not None:  # `from nvscope import _cli`: the submodule, where the name is one
                found.update(_module(f"{source}.{n.split()[0]}") for n in names.strip("()").split(",") if n.strip())
            elif run is not None:
                found.add(f"{run}.__main__" if f"{run}.__main__" in MODULES else _module(run))
            else:
                found.add(_module(imported or whole))
    return found


def names_in_strings(tree: ast.Module) -> set[str]:
    """Module names that string constants (not docstrings) give to code: a child's source, import_module's argument,
    a ``-m`` command line, in one string or as a list's words (``[python, "-m", "nvscope", "run"]``)."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found |= _named(node.value)
        elif isinstance(node, (ast.List, ast.Tuple)):
            words = [e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else None for e in node.elts]
            found |= {_named(f"-m {after}").pop() for before, after in itertools.pairwise(words)
                      if before == "-m" and after is not None and re.fullmatch(_NAME, after)}
    return found


def imports_of(path: pathlib.Path) -> set[str]:
    """The nvscope modules one file imports (at any depth of its code, or in strings it runs), as dotted names."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    found = names_in_strings(tree) & set(MODULES)
    for node in ast.walk(tree):
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


def package(name: str) -> str | None:
    """The layer package a module belongs to (``_exec`` for ``nvscope._exec._execute``); None for a public face."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LEVELS else None


def layer(name: str) -> int:
    found = package(name)
    return FACE if found is None else LEVELS[found]


def may_use(user: str, used: str) -> bool:
    """Whether layer package ``user`` may import layer package ``used``: its own, one below (unless ``ONLY_FOR``
    keeps it for others), or another family."""
    if used == user or (user in FAMILIES and used in FAMILIES):
        return True
    return LEVELS[used] < LEVELS[user] and user in ONLY_FOR.get(used, {user})


def serves(name: str, seen: frozenset[str] = frozenset()) -> int:
    """The layer whose code a module runs: a layer module's own; for a public face, the highest layer it re-exports
    from (``nvscope.cli`` runs ``_cli``, ``nvscope.thunder`` ``_exec``, ``python -m nvscope`` ``nvscope.__main__``
    and so ``_cli``), so that a layer module naming a face above it (``"from nvscope.cli import main"`` in a child's
    source) is caught as the upward use it is."""
    if layer(name) < FACE:
        return layer(name)
    return max((serves(d, seen | {name}) for d in GRAPH.get(name, ()) if d not in seen | {name, "nvscope"}),
               default=0)


# A layer module may name a face above it only to show a user the command to run, never to run it; each entry says
# why. (The package's own `python -m nvscope ...` lines in docstrings are not read at all.)
USER_FACING: dict[tuple[str, str], str] = {
    ("nvscope._measure._results", "nvscope.__main__"):
        "run_command spells the `python -m nvscope run ...` line that results print for the user to run (a bisect's "
        "reproduction); nothing in the package runs those words",
}


def test_the_layers_exist_and_hold_the_package() -> None:
    flat = [n for n in MODULES if n.count(".") == 1 and layer(n) == FACE]
    faces = {"nvscope.thunder", "nvscope.nvfuser", "nvscope.cli", "nvscope.pytest_plugin", "nvscope.__main__",
             "nvscope._child", "nvscope._child.sitecustomize"}
    assert sorted(set(flat) - faces) == [], "a module outside the layers: move it into one of " + ", ".join(LAYERS)
    for layer_name in LAYERS:
        assert f"nvscope.{layer_name}" in MODULES


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n != "nvscope"))
def test_imports_point_down(name: str) -> None:
    mine = package(name)
    up = sorted(d for d in GRAPH[name] if d != "nvscope" and (name, d) not in USER_FACING and mine is not None
                and (serves(d) > layer(name) if package(d) is None else not may_use(mine, package(d) or "")))
    assert not up, f"{name} (layer {layer(name)}) imports or runs a higher layer: {up}"
    if layer(name) < FACE:
        assert "nvscope" not in GRAPH[name], f"{name} imports the package face: import from the defining module"


def test_the_user_facing_exceptions_are_still_needed() -> None:
    for (name, face), why in USER_FACING.items():
        assert face in GRAPH[name] and serves(face) > layer(name), f"{name} no longer names {face}: drop it ({why})"


def test_no_import_circles() -> None:
    circles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(GRAPH.get(node, ())):
            if dep == "nvscope" or dep not in GRAPH or (node, dep) in USER_FACING:
                continue  # the face, imported by faces only (the test above); a command shown, not run
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


# --- the layers' interfaces ----------------------------------------------------------------------------------------

def stub_names(path: pathlib.Path) -> set[str] | None:
    """The names of the ``__init__.pyi`` beside ``path`` (a face that `nvscope._core.lazy_face` reads), if any."""
    stub = path.with_suffix(".pyi")
    if not stub.exists():
        return None
    tree = ast.parse(stub.read_text())
    body = [n for top in tree.body for n in (top.body if isinstance(top, ast.If) else [top])]  # TYPE_CHECKING's too
    return ({a.asname for node in body if isinstance(node, ast.ImportFrom) for a in node.names if a.asname}
            | {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
            | {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)})


def declared(path: pathlib.Path) -> ast.Module:
    """An ``__init__``'s declarations: its ``__init__.pyi`` where it has one, else its code."""
    stub = path.with_suffix(".pyi")
    return ast.parse((stub if stub.exists() else path).read_text())


def types_only(path: pathlib.Path) -> set[str]:
    """The names an ``__init__`` (or its stub) offers for type checkers only (under ``if TYPE_CHECKING:``)."""
    tree = declared(path)
    return {a.name for top in tree.body if isinstance(top, ast.If) and getattr(top.test, "id", "") == "TYPE_CHECKING"
            for node in top.body if isinstance(node, ast.ImportFrom) for a in node.names}


def type_sources(path: pathlib.Path) -> dict[str, tuple[str, str]]:
    """Where each name of `types_only` comes from: its (relative) module and the name there."""
    tree = declared(path)
    return {a.asname or a.name: ("." * node.level + (node.module or ""), a.name) for top in tree.body
            if isinstance(top, ast.If) and getattr(top.test, "id", "") == "TYPE_CHECKING"
            for node in top.body if isinstance(node, ast.ImportFrom) for a in node.names}


def interface(path: pathlib.Path) -> set[str]:
    """What a layer's ``__init__`` offers the layers above: its ``__all__``, else its explicit re-exports (``from ._x
    import a as a``, also under ``if TYPE_CHECKING:``) and the names it assigns."""
    listed = stub_names(path)
    if listed is not None:
        return listed
    tree = ast.parse(path.read_text())
    offered: set[str] = set()
    body = [n for top in tree.body for n in (top.body if isinstance(top, ast.If) else [top])]
    for node in body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["__all__"]:
            return set(ast.literal_eval(node.value))
        if isinstance(node, ast.ImportFrom):
            offered.update(a.name for a in node.names if a.asname == a.name)
        elif isinstance(node, ast.Assign):
            offered.update(t.id for t in node.targets if isinstance(t, ast.Name) and t.id != "TYPE_CHECKING")
    return offered


INTERFACES = {layer_name: interface(PACKAGE / layer_name / "__init__.py") for layer_name in LAYERS}


def bypasses(path: pathlib.Path) -> list[str]:
    """Where a layer module imports another layer other than through that layer's interface."""
    me = package(module_name(path))
    tree = ast.parse(path.read_text())
    found = [f"the string naming {n}" for n in sorted(names_in_strings(tree))
             if package(n) not in (me, None) and n != f"nvscope.{package(n)}"]  # the interface itself may be named
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names
                      if a.name.startswith("nvscope.") and package(a.name) not in (me, None)]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("nvscope."):
            target = node.module or ""
            other = package(target)
            if other in (me, None):
                continue
            if target != f"nvscope.{other}":
                found.append(f"line {node.lineno}: from {target} import ... (import it from nvscope.{other})")
            else:
                found += [f"line {node.lineno}: {a.name}, which nvscope.{other}/__init__.py does not offer"
                          for a in node.names if a.name not in INTERFACES[other]]
    return found


@pytest.mark.parametrize("name", sorted(n for n in MODULES if layer(n) < FACE))
def test_callers_go_through_each_layers_interface(name: str) -> None:
    found = bypasses(MODULES[name])
    assert not found, f"{name} imports a lower layer around its interface: " + "; ".join(found)


def test_the_interfaces_name_what_exists() -> None:
    """Every name a layer offers resolves (the lazy ones load), a submodule offered as a namespace included."""
    import importlib

    for layer_name, names in INTERFACES.items():
        package = importlib.import_module(f"nvscope.{layer_name}")
        assert names, layer_name
        for name in sorted(names):
            if name.startswith("_"):
                assert f"nvscope.{layer_name}.{name}" in MODULES, f"nvscope.{layer_name} offers no module {name}"
                importlib.import_module(f"nvscope.{layer_name}.{name}")
            elif name not in types_only(PACKAGE / layer_name / "__init__.py"):
                getattr(package, name)
            elif hasattr(package, "__getattr__"):  # offered lazily: resolves to the defining module's object
                module, attribute = type_sources(PACKAGE / layer_name / "__init__.py")[name]
                source = importlib.import_module(module, package.__name__)
                if hasattr(source, attribute):  # else a type alias (a Literal) that exists for type checkers only
                    assert getattr(package, name) is getattr(source, attribute), (layer_name, name)


def test_naming_the_interfaces_loads_nothing() -> None:
    """The interfaces above the core load their modules on first use: importing them costs `import nvscope`
    nothing, so the tools (and the command line) stay out of a program that only scopes."""
    code = ("import sys, nvscope; before = set(sys.modules)\n"
            f"import {', '.join('nvscope.' + n for n in LAYERS[1:])}\n"
            "print(*sorted(set(sys.modules) - before))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == sorted(f"nvscope.{n}" for n in LAYERS[1:])


def test_the_interface_test_reads_what_it_must() -> None:
    """The readers above see a bypass, a name no interface offers and a module named in a child's source (else the
    tests above could not fail)."""
    tree = ast.parse('"""from nvscope._cli._run import run"""\n'
                     'CHILD = "import nvscope\\nfrom nvscope._cli._run import run\\n"\n'
                     'NOTE = "see `nvscope._measure._stats`"\n'
                     'import_module("nvscope._profile._profile")\n'
                     'on_enter("nvscope._exec._autoinstall:ensure_adapters")\n')
    # not the docstring, not the note; the package face a child imports; a hook loaded by name
    assert names_in_strings(tree) == {"nvscope", "nvscope._cli._run", "nvscope._profile._profile",
                                      "nvscope._exec._autoinstall"}
    # The public faces too, mapped to the layer they serve: the command's face, `-m nvscope` (in one string or as a
    # list's words), `from nvscope import _x`, and a face named for a child to import.
    tree = ast.parse('CHILD = "import json\\nfrom nvscope.cli import main; main(command)\\n"\n'
                     'RUN = [python, "-m", "nvscope", "run"]\n'
                     'LINE = "python -m nvscope.cli run x.py"\n'
                     'MORE = "from nvscope import _measure, _tools as tools"\n')
    assert names_in_strings(tree) == {"nvscope.cli", "nvscope.__main__", "nvscope._measure", "nvscope._tools"}
    assert [serves(n) for n in ("nvscope.cli", "nvscope.__main__", "nvscope.thunder", "nvscope._child.sitecustomize",
                                "nvscope._bisect")] == [5, 5, 1, 5, 4]
    assert "Runner" in INTERFACES["_measure"] and "nv_options" in INTERFACES["_core"]
    assert "_harness" not in INTERFACES["_measure"] and "Frame" in INTERFACES["_core"]



def test_the_levels_are_read() -> None:
    """The rule above sees a family using another, _exec kept from _check, and a family below its user."""
    assert may_use("_rescue", "_bisect") and may_use("_search", "_profile") and may_use("_cli", "_check")
    assert not may_use("_exec", "_check") and not may_use("_measure", "_check") and not may_use("_tools", "_search")
    assert package("nvscope._rescue._probe") == "_rescue" and package("nvscope.thunder") is None
