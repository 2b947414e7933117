"""What `nvscope check`'s Python reader knows of a module: its imports, the values its names are bound to, and
which of its lines can matter (`nvscope._check._python` visits those).

Values resolve where they are literals or names bound once to literals; a parameter's is forwarded, anything else
unknown (`UNKNOWN`, `FORWARDED` holes in the resolved strings)."""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Sequence

from nvscope._check._use import ENV_KINDS, env_names

__all__ = ["COMPOUND", "DEPTH", "FORWARDED", "SCOPES", "UNKNOWN", "Lines", "Scope", "Values", "params"]

SCOPES = frozenset({"nv_options", "with_nv_options", "OptionSet"})  # take (enable, disable)
_NVSCOPE_NAMES = SCOPES | {"set_development_mode", "dev_mode"}
_COPIES = frozenset({"list", "tuple", "set", "frozenset", "sorted"})
# Holes in a resolved string: a part the reader could not resolve, and a part forwarded from the caller.
UNKNOWN, FORWARDED = "\0", "\1"
DEPTH = 8  # how many names deep a value is followed (a = b; b = [...])


class Scope:
    """A function's parameters and the values bound to its names (None: bound some other way, e.g. a loop). The
    names are gathered on the first look-up: most functions never need them."""

    __slots__ = ("_assigned", "body", "defaults", "forwards", "params")

    def __init__(self, params: frozenset[str], body: list[ast.stmt], forwards: bool,
                 defaults: dict[str, ast.expr] | None = None) -> None:
        self.params = params
        self.body = body
        self.forwards = forwards  # False for tests and fixtures: their parameters are pytest's, not a caller's
        self.defaults = defaults or {}  # parameters whose default is a literal option value: a setting
        self._assigned: dict[str, list[ast.expr | None]] | None = None

    @property
    def assigned(self) -> dict[str, list[ast.expr | None]]:
        if self._assigned is not None:
            return self._assigned
        assigned: dict[str, list[ast.expr | None]] = {}
        stack: list[ast.AST] = list(self.body)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                assigned.setdefault(node.name, []).append(None)
                continue  # their bodies are scopes of their own
            if isinstance(node, ast.Lambda):
                continue
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                assigned.setdefault(node.targets[0].id, []).append(node.value)
                stack.append(node.value)
                continue
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                assigned.setdefault(node.target.id, []).append(node.value)
                stack.append(node.value)
                continue
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                assigned.setdefault(node.id, []).append(None)
            elif isinstance(node, ast.alias):
                assigned.setdefault((node.asname or node.name).partition(".")[0], []).append(None)
            stack.extend(ast.iter_child_nodes(node))
        self._assigned = assigned
        return assigned


class Lines:
    """Which lines of the source hold one of some words: a statement none of whose lines does is skipped whole,
    which is what makes reading a large module cheap (its few lines that matter are visited, not its every node)."""

    __slots__ = ("_lines",)

    def __init__(self, text: str, words: list[str]) -> None:
        lines: list[int] = []  # the numbers of the lines that hold a word, ascending
        line, position = 1, 0
        for match in re.finditer("|".join(map(re.escape, sorted(set(words), key=len, reverse=True))), text):
            line += text.count("\n", position, match.start())  # in C, and over each stretch once
            position = match.start()
            if not lines or lines[-1] != line:
                lines.append(line)
        self._lines = lines

    def any(self, node: ast.AST) -> bool:
        first = getattr(node, "lineno", 1)
        for decorator in getattr(node, "decorator_list", ()):  # a def's lineno is its `def` line, after these
            first = min(first, decorator.lineno)
        last = getattr(node, "end_lineno", None) or first
        index = bisect.bisect_left(self._lines, first)
        return index < len(self._lines) and self._lines[index] <= last


# What every line that sets an option holds (with the local names nvscope's setters are imported as).
WORDS: Sequence[str] = ("NVFUSER_ENABLE", "NVFUSER_DISABLE", "NVSCOPE_DEV", "nv_options", "OptionSet",
                        "development_mode", "dev_mode", "nv_enable", "nv_disable", "nv_skip_cache", "nv_store_fusion",
                        "nv_save_fake", "able_options", "--nv-", "nvscope")
COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match,
             getattr(ast, "TryStar", ast.Try))


def params(args: ast.arguments) -> frozenset[str]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, (args.vararg, args.kwarg))]
    return frozenset(a.arg for a in every)


def _bound_names(targets: Sequence[ast.expr]) -> list[str]:
    """The names an assignment binds: ``a``, ``a, (b, *c)``; not ``a.x`` nor ``a[k]``, which change ``a``."""
    out: list[str] = []
    for target in targets:
        if isinstance(target, ast.Name):
            out.append(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            out += _bound_names(target.elts)
        elif isinstance(target, ast.Starred):
            out += _bound_names([target.value])
    return out


class Values:
    def __init__(self, tree: ast.Module, text: str) -> None:
        # What each imported name stands for, in the order of the module: (where the binding ends, its dotted path,
        # None once a top-level def, class, assignment or import of something else shadows it).
        self.bindings: dict[str, list[tuple[tuple[int, int], str | None]]] = {}
        self.env_keys: dict[str, str] = {}  # a name bound to "NVFUSER_ENABLE" (or the other two) -> that variable
        env_dicts: list[str] = []  # names bound to a dict literal with such a key: where they are used matters
        imports = Lines(text, ["import", "nvscope", *ENV_KINDS])
        for node in self._pruned(tree.body, imports):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    root = alias.name.partition(".")[0]
                    self._bind(node, alias.asname or root, alias.name if alias.asname else root)
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name == "*":
                        if node.module and not node.level and node.module.partition(".")[0] == "nvscope":
                            for name in _NVSCOPE_NAMES:
                                self._bind(node, name, f"nvscope.{name}")
                    else:  # a relative import binds a name of this project: not nvscope's
                        self._bind(node, alias.asname or alias.name,
                                   f"{node.module}.{alias.name}" if node.module and not node.level else None)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                # ns = importlib.import_module("nvscope"), opts = nvscope.nv_options, KEY = "NVFUSER_ENABLE"
                key = self.env_key(node.value)
                named = self.qualname(node.value)
                if key is not None:
                    self.env_keys[node.targets[0].id] = key
                elif isinstance(node.value, ast.Dict) and any(self.env_key(k) for k in node.value.keys):
                    env_dicts.append(node.targets[0].id)  # ENV = {"NVFUSER_ENABLE": ...}, maybe given as env=ENV
                elif named is not None and named.partition(".")[0] in ("nvscope", "importlib", "os"):
                    self._bind(node, node.targets[0].id, named)
        self._shadow(tree.body)
        local = [name for name, bound in self.bindings.items()
                 if any(path is not None and path.partition(".")[0] in ("nvscope", "pytest") for _, path in bound)]
        self.lines = Lines(text, [*WORDS, *local, *self.env_keys, *env_dicts])
        self.scopes = [Scope(frozenset(), tree.body, False)]
        self.consumed: set[int] = set()  # ids of calls already reported as part of an enclosing one

    def _bind(self, node: ast.stmt, name: str, path: str | None) -> None:
        end = (node.end_lineno or node.lineno, node.end_col_offset or 0)
        self.bindings.setdefault(name, []).append((end, path))

    def _shadow(self, body: list[ast.stmt]) -> None:
        """A def, class or assignment at the module's top level rebinds an imported name for the code after it
        (``def nv_options(**k): ...`` after ``from nvscope import nv_options``). One inside an ``if`` or ``try``
        may not run (``except ImportError: nv_options = None``): it shadows nothing."""
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = _bound_names(targets)
            else:
                continue
            for name in names:
                bound = self.bindings.get(name)
                end = (node.end_lineno, node.end_col_offset)
                if bound is not None and all(at != end for at, _ in bound):  # bound by no import, nor an alias
                    self._bind(node, name, None)
        for bound in self.bindings.values():
            bound.sort(key=lambda binding: binding[0])

    def env_key(self, node: ast.expr | None) -> str | None:
        """The variable a key names: ``"NVFUSER_ENABLE"``, ``b"NVFUSER_ENABLE"`` (``os.environb``) or a name bound
        to one; None for anything else."""
        if isinstance(node, ast.Constant):
            value = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
            return value if isinstance(value, str) and value in ENV_KINDS else None
        return self.env_keys.get(node.id) if isinstance(node, ast.Name) else None

    def restores(self, node: ast.expr | None, variable: str, depth: int = 0) -> bool:
        """Whether a value is the variable's own value, read before (``old = os.environ.get("X")`` ...
        ``os.environ["X"] = old``): putting it back sets nothing."""
        if node is None or depth > DEPTH:
            return False
        if isinstance(node, ast.Name):
            bound = self._lookup(node.id)
            return not isinstance(bound, str) and self.restores(bound, variable, depth + 1)
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            return self.env_key(node.slice) == variable
        if isinstance(node, ast.Call) and node.args and self.env_key(node.args[0]) == variable:
            name = self.qualname(node.func) or ""
            return name == "os.getenv" or (isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop"))
        return False

    @staticmethod
    def _pruned(body: list[ast.stmt], lines: Lines) -> list[ast.stmt]:
        """The simple statements under ``body`` that hold a word of ``lines``, compound ones opened."""
        out: list[ast.stmt] = []
        stack = list(reversed(body))
        while stack:
            node = stack.pop()
            if not lines.any(node):
                continue
            inner: list[ast.stmt] = []
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                for item in getattr(node, field, None) or ():
                    if isinstance(item, (ast.ExceptHandler, ast.match_case)):
                        inner.extend(item.body)
                    elif isinstance(item, ast.stmt):
                        inner.append(item)
            if inner:
                stack.extend(reversed(inner))
            else:
                out.append(node)
        return out

    def qualname(self, node: ast.expr) -> str | None:
        """What an expression names through the imports: ``ns.nv_options`` -> ``nvscope.nv_options``; None when it
        does not start at an imported name."""
        if isinstance(node, ast.Name):
            bound = self.bindings.get(node.id)
            if bound is None:
                return None
            # The binding in force where the name is read; before any (a function body above the import, run
            # later), the first.
            at = (getattr(node, "lineno", 1 << 30), getattr(node, "col_offset", 0))
            path = bound[0][1]
            for end, target in bound:
                if end > at:
                    break
                path = target
            return path
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return None if base is None else f"{base}.{node.attr}"
        last = node.args[-1] if isinstance(node, ast.Call) and node.args else None
        if isinstance(node, ast.Call) and isinstance(last, ast.Constant) and isinstance(last.value, str):
            function = node.func.id if isinstance(node.func, ast.Name) else self.qualname(node.func)
            if function == "getattr" and len(node.args) == 2:  # getattr(nvscope, "nv_options")
                base = self.qualname(node.args[0])
                return None if base is None else f"{base}.{last.value}"
            if function == "importlib.import_module" and len(node.args) == 1:
                return last.value
            if function == "__import__" and len(node.args) == 1:  # the top package, as __import__ returns
                return last.value.partition(".")[0]
        return None

    def _nvscope(self, node: ast.expr) -> str | None:
        """The nvscope setter a call's function is (``nv_options``, ``OptionSet.parse``, ...), or None."""
        name = self.qualname(node)
        if name is None or name.partition(".")[0] != "nvscope":
            return None
        parts = name.split(".")
        if parts[-1] in _NVSCOPE_NAMES:
            return parts[-1]
        return "OptionSet.parse" if parts[-2:] == ["OptionSet", "parse"] else None

    def _lookup(self, name: str) -> ast.expr | str:
        """The one literal-or-expression bound to ``name`` as seen here, or a hole (`UNKNOWN`, `FORWARDED`)."""
        for scope in reversed(self.scopes):
            if name in scope.params:  # the caller's value, or the literal default (unless the body rebinds it)
                default = scope.defaults.get(name)
                if default is not None and name not in scope.assigned:
                    return default
                return FORWARDED if scope.forwards else UNKNOWN
            values = scope.assigned.get(name)
            if values is not None:
                value = values[0]
                return value if len(values) == 1 and value is not None else UNKNOWN
        return UNKNOWN

    def _root_hole(self, node: ast.expr) -> str:
        """For ``self.enable_options`` or ``args.enable``: forwarded when the chain starts at a parameter."""
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        if isinstance(node, ast.Name):
            for scope in reversed(self.scopes):
                if node.id in scope.params:
                    return FORWARDED if scope.forwards else UNKNOWN
                if node.id in scope.assigned:
                    return UNKNOWN
        return UNKNOWN

    def text(self, node: ast.expr, depth: int = 0) -> str:
        """A string value, with holes where it is not a literal."""
        if depth > DEPTH:
            return UNKNOWN
        if isinstance(node, ast.Constant):
            value = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value  # os.environb
            return value if isinstance(value, str) else UNKNOWN
        if isinstance(node, ast.JoinedStr):
            return "".join(self.text(v.value if isinstance(v, ast.FormattedValue) else v, depth + 1)
                           for v in node.values)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.text(node.left, depth + 1) + self.text(node.right, depth + 1)
        if isinstance(node, ast.Name):
            bound = self._lookup(node.id)
            return bound if isinstance(bound, str) else self.text(bound, depth + 1)
        if isinstance(node, ast.Attribute):
            return self._root_hole(node)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"
                and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)
                and len(node.args) == 1):
            names, holes = self.names(node.args[0], depth + 1)
            return node.func.value.value.join([*names, *holes])
        return UNKNOWN

    def names(self, node: ast.expr, depth: int = 0) -> tuple[list[str], str]:
        """Option names of a per-call list value (a str is one name; else an iterable of str), and the holes."""
        if depth > DEPTH:
            return [], UNKNOWN
        if isinstance(node, ast.Constant) and (node.value is None or node.value is False):
            return [], ""  # nv_enable_options=False: Thunder reads a false value as no options
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            found: list[str] = []
            holes = ""
            for element in node.elts:
                if isinstance(element, ast.Starred):
                    more, hole = self.names(element.value, depth + 1)
                    found += more
                    holes += hole
                    continue
                text = self.text(element, depth + 1)
                if UNKNOWN in text or FORWARDED in text:
                    holes += text
                elif text.strip():
                    found.append(text.strip())
            return found, holes
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.BitOr)):
            left, right = self.names(node.left, depth + 1), self.names(node.right, depth + 1)
            return left[0] + right[0], left[1] + right[1]
        if isinstance(node, ast.IfExp):
            body, orelse = self.names(node.body, depth + 1), self.names(node.orelse, depth + 1)
            return body[0] + [n for n in orelse[0] if n not in body[0]], body[1] + orelse[1]
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in _COPIES and len(node.args) == 1:
                return self.names(node.args[0], depth + 1)
            if self._nvscope(node.func) in ("OptionSet", "OptionSet.parse"):
                self.consumed.add(id(node))  # reported with the call it is given to
                options, holes = self.call_options(node, self._nvscope(node.func) or "", depth + 1)
                return [name for _, name in options], holes
            return [], UNKNOWN
        if isinstance(node, ast.Name):
            bound = self._lookup(node.id)
            return ([], bound) if isinstance(bound, str) else self.names(bound, depth + 1)
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            return [], self._root_hole(node)
        text = self.text(node, depth + 1)
        if UNKNOWN in text or FORWARDED in text:
            return [], text
        return ([text.strip()] if text.strip() else []), ""
    def call_options(self, node: ast.Call, what: str, depth: int = 0) -> tuple[list[tuple[str, str]], str]:
        """The options of a call to nvscope's ``nv_options``, ``with_nv_options``, ``OptionSet`` or the marker."""
        if what == "OptionSet.parse":
            if not node.args:
                return [], UNKNOWN
            text = self.text(node.args[0], depth)
            parsed: list[tuple[str, str]] = []
            for word in text.split():
                variable, _, assigned = word.partition("=")
                if variable in ("NVFUSER_ENABLE", "NVFUSER_DISABLE"):
                    parsed += [o for o in env_names(variable, assigned) if UNKNOWN not in o[1]
                               and FORWARDED not in o[1]]
            return parsed, "".join(c for c in text if c in (UNKNOWN, FORWARDED))
        arguments: dict[str, ast.expr] = dict(zip(("enable", "disable"), node.args, strict=False))
        holes = ""
        for keyword in node.keywords:
            if keyword.arg in ("enable", "disable"):
                arguments[keyword.arg] = keyword.value
            elif keyword.arg is None:  # **kwargs: whatever the mapping holds
                holes += self.names(keyword.value, depth)[1] or UNKNOWN
        options: list[tuple[str, str]] = []
        for kind, value in arguments.items():
            found, hole = self.names(value, depth)
            options += [(kind, name) for name in found]
            holes += hole
        return options, holes

