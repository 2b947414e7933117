"""A layer's face, declared once, and the hooks a scope entry calls, registered by name. The package's
``__init__.pyi`` is the one list: a line ``from .module import name as name`` per public name (``name: type`` for a
value the face computes, ``name = submodule.attribute`` for an alias). Type checkers read that stub; `lazy_face`
reads the same lines at import time (plain string splits, no ``ast``) into ``__all__`` and a ``__getattr__`` that
imports a name's module on first lookup, so that naming a layer loads none of it. No ``importlib``, ``typing`` or
``__future__``: ``import nvscope`` loads this module and must stay light (tests/test_public_api.py)."""

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["ENTER_HOOKS", "lazy_face", "load", "on_enter"]

# Called before each non-empty scope is entered (nvscope/_core/_scope.py): a callable, or "module:function", loaded at
# the first such entry. The layers above register here, by name, so that `import nvscope` loads none of them.
ENTER_HOOKS: "list[Callable[[], None] | str]" = []


def on_enter(hook: "Callable[[], None] | str") -> None:
    """Call ``hook()`` (or the function a ``"module:function"`` string names) before each non-empty scope is entered,
    once however often registered; if it raises, the scope is not entered."""
    if hook not in ENTER_HOOKS:
        ENTER_HOOKS.append(hook)


def load(spec: str) -> "Any":
    """What ``spec`` names, importing its module if need be: ``"package.module"`` or ``"package.module:attribute"``."""
    module, _, attribute = spec.partition(":")
    found = sys.modules.get(module)
    if found is None:
        __import__(module)
        found = sys.modules[module]
    return getattr(found, attribute) if attribute else found


def lazy_face(package: str, init_file: str, **computed: "Callable[[], object]",
              ) -> "tuple[list[str], Callable[[str], object], Callable[[], list[str]]]":
    """``__all__, __getattr__, __dir__`` of ``package``, read from the ``__init__.pyi`` beside ``init_file``. A stub
    line ``alias: type`` names a value that ``computed[alias]()`` gives at each lookup (``__version__``). A
    parenthesised import fails here: one name per line keeps the stub readable without a parser."""
    where: dict[str, tuple[str, str]] = {}
    with open(init_file[: -len(".py")] + ".pyi", encoding="utf-8") as stub:
        for line in stub:
            words = line.split("#")[0].split()
            if words[:1] == ["from"] and "(" in line:
                raise ImportError(f"{package}/__init__.pyi: one `from m import a as a` per line, not {line.strip()!r}")
            if line[0] in " \t":  # under `if TYPE_CHECKING:`: for type checkers only
                continue
            if len(words) == 6 and words[0] == "from" and words[2] == "import" and words[4] == "as":
                if words[3] != words[5]:  # a type checker re-exports `a as a` only
                    raise ImportError(f"{package}/__init__.pyi: `import {words[3]} as {words[3]}`, not as {words[5]}")
                where[words[5]] = (words[1], words[3])
            elif len(words) == 3 and words[1] == "=" and where.get(words[2].partition(".")[0], ("",))[0] == ".":
                where[words[0]] = ("." + words[2].partition(".")[0], words[2].partition(".")[2])
            elif words and words[0].endswith(":") and words[0][:-1] not in computed:
                raise ImportError(f"{package}/__init__.pyi declares {words[0][:-1]}, which {package} does not compute")

    def __getattr__(name: str) -> object:
        if name in computed:
            return computed[name]()
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = where[name]
        if module[:1] == ".":
            module = package + module.rstrip(".")  # "." (a submodule: `from . import _x as _x`) or "._x"
        value = load(f"{module}.{attribute}" if module == package else f"{module}:{attribute}")
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    names = sorted([*where, *computed])
    return names, __getattr__, lambda: list(names)
