"""`nvscope check`'s Python reader: the places a module sets nvFuser developer options, read from its syntax tree.

Names are resolved through the module's imports, so a call counts by what it calls, not by how it is spelled.
Reading a variable or removing it is not setting it; what counts is listed in docs/check.md."""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from types import MappingProxyType

from nvscope._check._use import DEV, ENV_KINDS, THUNDER, Use, command_options, comments, env_names
from nvscope._check._values import (
    COMPOUND,
    DEPTH,
    FORWARDED,
    SCOPES,
    UNKNOWN,
    Scope,
    Values,
    params,
)

__all__ = ["scan"]

_THUNDER_LISTS: Mapping[str, str] = MappingProxyType({"nv_enable_options": "enable", "nv_disable_options": "disable"})
_THUNDER_OTHER = frozenset({"nv_skip_cache", "nv_store_fusion_inputs", "nv_save_fake_inputs"})
_NVFUSER_LISTS: Mapping[str, str] = MappingProxyType({"_enable_options": "enable", "_disable_options": "disable"})
_SETTERS = frozenset({"setdefault", "setenv", "update", "__setitem__", "setitem"})
# Calls whose last argument is the environment of the program they run (os.posix_spawn: the third).
_ENV_LAST = frozenset({f"os.{f}" for f in ("execle", "execlpe", "execve", "execvpe", "spawnle", "spawnlpe", "spawnve",
                                           "spawnvpe", "posix_spawn", "posix_spawnp")})
_SHELL = frozenset({"os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput",
                    "asyncio.create_subprocess_shell"})  # their first argument is a shell command line
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh"})  # `-c SCRIPT` in an argument list: a shell line


def _literal_defaults(args: ast.arguments) -> dict[str, ast.expr]:
    """The parameters whose default is a non-empty literal string or list of strings (``enable=("fuse_matmul",)``):
    a value written here, which reaches what the function sets unless a caller gives another."""
    positional = [*args.posonlyargs, *args.args]
    pairs = [*zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True),
             *((a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None)]
    return {arg.arg: default for arg, default in pairs if _literal_option(default)}


def _literal_option(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and bool(node.value.strip())
    return isinstance(node, (ast.List, ast.Tuple, ast.Set)) and bool(node.elts) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts)


class _Reader(Values, ast.NodeVisitor):
    def __init__(self, tree: ast.Module, text: str, shell: Callable[[str], list[Use]] | None) -> None:
        super().__init__(tree, text)
        self.shell = shell
        self.uses: list[Use] = []
        self.env_dicts: set[int] = set()  # ids of the dict literals reported as environments

    def visit_body(self, body: list[ast.stmt]) -> None:
        """Visit the statements of a body that hold a word a finding needs; compound ones header and body apart."""
        for node in body:
            if not self.lines.any(node):
                continue
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._function(node)
            elif isinstance(node, ast.ClassDef):
                for part in (*node.decorator_list, *node.bases, *node.keywords):
                    self.visit(part)
                self.visit_body(node.body)
            elif isinstance(node, COMPOUND):
                self._compound(node)
            else:
                self.visit(node)

    def _compound(self, node: ast.AST) -> None:
        for _, value in ast.iter_fields(node):
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.stmt):
                        self.visit_body([item])
                    elif isinstance(item, (ast.ExceptHandler, ast.match_case)):
                        self._compound(item)
                    elif isinstance(item, ast.AST):
                        self.visit(item)
            elif isinstance(value, ast.AST):
                self.visit(value)

    def _add(self, node: ast.AST, construct: str, options: list[tuple[str, str]], holes: str,
             per_call: bool = True, detail: str = "") -> None:
        dynamic = UNKNOWN in holes
        plumbing = not dynamic and FORWARDED in holes and not options
        if not options and not dynamic and not plumbing:
            return  # sets nothing: nv_options(), _enable_options=[], NVSCOPE_DEV=0
        line, col = getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1
        end = getattr(node, "end_lineno", None) or line
        self.uses.append(Use(line, col, end, construct, tuple(options), dynamic, plumbing, per_call, detail))

    def _env(self, node: ast.AST, construct: str, variable: str, value: ast.expr | None,
             appends: bool = False) -> None:
        """One environment variable set: NVFUSER_ENABLE's names, or NVSCOPE_DEV turning development mode on."""
        if self.restores(value, variable):
            return  # os.environ["X"] = old, old read from X before: puts back what was there
        self._env_text(node, construct, variable, UNKNOWN if value is None else self.text(value), appends)

    def _env_text(self, node: ast.AST, construct: str, variable: str, text: str, appends: bool = False) -> None:
        holes = "".join(c for c in text if c in (UNKNOWN, FORWARDED)) + (UNKNOWN if appends else "")
        if ENV_KINDS[variable] == DEV:
            options = [] if holes else list(env_names(variable, text))
        else:
            options = [(k, n) for k, n in env_names(variable, text) if UNKNOWN not in n and FORWARDED not in n]
        self._add(node, construct, options, holes, per_call=False, detail=f"{variable}")

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        for default in [*node.args.defaults, *filter(None, node.args.kw_defaults)]:
            self.visit(default)
        if isinstance(node, ast.Lambda):
            body: list[ast.stmt] = [ast.Expr(node.body)]
            forwards = True
        else:
            for decorator in node.decorator_list:
                self.visit(decorator)
            body = node.body
            fixture = any((self.qualname(d.func if isinstance(d, ast.Call) else d) or "").endswith("fixture")
                          for d in node.decorator_list)
            forwards = not node.name.startswith("test") and not fixture
        self.scopes.append(Scope(params(node.args), body, forwards, _literal_defaults(node.args)))
        if isinstance(node, ast.Lambda):
            self.visit(node.body)
        else:
            self.visit_body(body)
        self.scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Call(self, node: ast.Call) -> None:
        what = self._nvscope(node.func)
        name = self.qualname(node.func) or ""
        if id(node) in self.consumed:
            pass
        elif what in SCOPES or what == "OptionSet.parse" or name == "pytest.mark.nv_options":
            options, holes = self.call_options(node, what or "nv_options")
            self._add(node, "pytest.mark.nv_options" if what is None else what, options, holes)
        elif what in ("set_development_mode", "dev_mode"):
            value = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "enabled"), None)
            self._switch(node, what, value, default_on=what == "dev_mode", shown="development mode")
        self._keywords(node, name)
        self.generic_visit(node)

    def _switch(self, node: ast.AST, construct: str, value: ast.expr | None, default_on: bool, shown: str,
                kind: str = DEV) -> None:
        """A switch turned on: a literal True (or any literal but False/None), or a value not known here."""
        if value is None:
            on, holes = default_on, ""
        elif isinstance(value, ast.Constant):
            on, holes = value.value not in (False, None), ""
        else:
            on, holes = False, self.names(value)[1] or UNKNOWN
        literal = "" if value is None else ast.unparse(value) if on else "..."
        named = [(kind, f"{shown}={literal}" if kind == THUNDER else shown)]
        self._add(node, construct, named if on or (kind == THUNDER and UNKNOWN in holes) else [], holes)

    def _keywords(self, node: ast.Call, name: str) -> None:
        func = node.func
        attribute = func.attr if isinstance(func, ast.Attribute) else None
        # Only calls that may set something pay for spelling their receiver out.
        receiver = ("os.environ" if self.qualname(func.value) == "os.environ" else ast.unparse(func.value)) \
            if isinstance(func, ast.Attribute) and attribute in _SETTERS else ""
        args = node.args
        variable = self.env_key(args[0]) if args else None
        if variable is not None and len(args) >= 2:
            if name == "os.putenv":
                self._env(node, "os.putenv", variable, args[1])
            elif attribute in ("setdefault", "setenv", "__setitem__"):
                self._env(node, f"{receiver}.{attribute}", variable, args[1])
        if attribute == "setitem" and len(args) >= 3 and (key := self.env_key(args[1])) is not None:
            self._env(node, f"{receiver}.setitem", key, args[2])  # monkeypatch.setitem(os.environ, "X", ...)
        # mock.patch.dict(os.environ, {...}, X=...), as a call, a context manager or a decorator
        patch = isinstance(func, ast.Attribute) and attribute == "dict" and bool(args) \
            and (self.qualname(args[0]) == "os.environ" or self.text(args[0]) == "os.environ") \
            and ((isinstance(func.value, ast.Attribute) and func.value.attr == "patch")
                 or (self.qualname(func.value) or "").endswith(".patch"))
        environment = name == "os.environ.update" or attribute == "update" or patch or (
            isinstance(func, ast.Name) and func.id == "dict")
        if patch and len(args) >= 2:
            self._mark(args[1], "mock.patch.dict")
        elif environment and args and attribute == "update" and (
                isinstance(args[0], ast.Dict) or receiver.startswith("os.environ") or "env" in receiver.lower()):
            self._mark(args[0], f"{receiver}.update")  # a literal into any mapping; a name into an environment
        if name in _ENV_LAST and args:  # os.execve(path, argv, env), os.spawnle(mode, path, ..., env)
            self._mark(args[2] if name.startswith("os.posix_spawn") and len(args) >= 3 else args[-1], f"{name} env")
        shell = any(k.arg == "shell" and isinstance(k.value, ast.Constant) and k.value.value for k in node.keywords)
        if args and (name in _SHELL or (shell and name.startswith(("subprocess.", "asyncio.create_subprocess")))):
            self._shell(node, args[0])
        for keyword in node.keywords:
            arg = keyword.arg
            if arg is None:
                continue
            if environment and arg in ENV_KINDS:
                construct = "dict(...)" if attribute is None else "mock.patch.dict" if patch else f"{receiver}.update"
                self._env(keyword, construct, arg, keyword.value)
            elif arg == "env":
                self._mark(keyword.value, "env= mapping")
            elif arg in _NVFUSER_LISTS:
                found, holes = self.names(keyword.value)
                self._add(keyword, "nvFuser execute option", [(_NVFUSER_LISTS[arg], n) for n in found], holes,
                          detail=arg)
            else:
                self._thunder_option(keyword, arg, keyword.value)

    def _thunder_option(self, node: ast.AST, name: str, value: ast.expr) -> None:
        """``name=value`` where ``name`` may be one of the compile options Thunder's nvFuser executor reads:
        ``nv_enable_options``/``nv_disable_options`` (lists of names), other ``nv_enable_*``, ``nv_disable_*`` and a
        few more (switches)."""
        if name in _THUNDER_LISTS:
            found, holes = self.names(value)
            self._add(node, "Thunder compile option", [(_THUNDER_LISTS[name], n) for n in found], holes, detail=name)
        elif name in _THUNDER_OTHER or name.startswith(("nv_enable_", "nv_disable_")):
            self._switch(node, "Thunder compile option", value, True, name, THUNDER)

    def _shell(self, node: ast.expr, command: ast.expr) -> None:
        """A shell command line given as a string (``os.system("NVFUSER_ENABLE=... python t.py")``): read as a line
        of a shell script, its parts not known here as variables (dynamic)."""
        if self.shell is None:
            return
        text = self.text(command).replace(UNKNOWN, "$_").replace(FORWARDED, "$_")
        end = getattr(node, "end_lineno", None) or node.lineno
        self.uses += [replace(use, line=node.lineno, col=node.col_offset + 1, end_line=end) for use in self.shell(text)]

    def _mark(self, value: ast.expr, construct: str, depth: int = 0) -> None:
        """A dict that is an environment being set: a literal, a name bound once to one (``env=ENV``), and those
        spread into it (``{**os.environ, **extra}``). Its variables are reported where it is written, once."""
        if isinstance(value, ast.Name) and depth < DEPTH:
            bound = self._lookup(value.id)
            if isinstance(bound, ast.Dict):
                self._mark(bound, construct, depth + 1)
        if not isinstance(value, ast.Dict) or id(value) in self.env_dicts:
            return
        self.env_dicts.add(id(value))
        for key, item in zip(value.keys, value.values, strict=True):
            if key is None:
                self._mark(item, construct, depth + 1)
            elif (variable := self.env_key(key)) is not None:
                self._env(key, construct, variable, item)

    def visit_Dict(self, node: ast.Dict) -> None:
        if id(node) not in self.env_dicts and any(k is None and (self.qualname(v) or "").startswith("os.environ")
                                                  for k, v in zip(node.keys, node.values, strict=True)):
            self._mark(node, "{**os.environ, ...}")
        for key, value in zip(node.keys, node.values, strict=True):
            if not isinstance(key, ast.Constant) or not isinstance(key.value, str) or key.value in ENV_KINDS:
                continue
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                continue  # {"nv_enable_linear": "what it does"}: a table of names, not compile options
            self._thunder_option(key, key.value, value)
        self.generic_visit(node)

    def _assigned(self, node: ast.Assign | ast.AugAssign | ast.AnnAssign, targets: list[ast.expr],
                  value: ast.expr | None) -> None:
        for target in targets:
            if isinstance(target, (ast.Tuple, ast.List)):  # os.environ["X"], y = "a", 1
                values = value.elts if isinstance(value, (ast.Tuple, ast.List)) \
                    and len(value.elts) == len(target.elts) else [None] * len(target.elts)
                for element, item in zip(target.elts, values, strict=True):
                    self._assigned(node, [element], item)
            elif isinstance(target, ast.Subscript) and (variable := self.env_key(target.slice)) is not None:
                where = "os.environ" if self.qualname(target.value) == "os.environ" else ast.unparse(target.value)
                self._env(target, f"{where}[...]", variable, value, isinstance(node, ast.AugAssign))
            elif isinstance(node, ast.AugAssign) and self.qualname(target) == "os.environ" and value is not None:
                self._mark(value, "os.environ |=")

    def _assignment(self, node: ast.Assign | ast.AugAssign | ast.AnnAssign) -> None:
        self._assigned(node, node.targets if isinstance(node, ast.Assign) else [node.target], node.value)
        self.generic_visit(node)

    visit_Assign = visit_AugAssign = visit_AnnAssign = _assignment

    def _argv(self, node: ast.List | ast.Tuple) -> None:
        """An argument list that runs ``nvscope run --enable ...`` or pytest with ``--nv-enable``."""
        words: list[str | None] = []
        for element in node.elts:
            text = None if isinstance(element, ast.Starred) else self.text(element)
            words.append(None if text is None or UNKNOWN in text or FORWARDED in text else text)
        found = command_options(words)
        if found is not None:
            construct, options, dynamic = found
            self._add(node, construct, list(options), UNKNOWN if dynamic else "")
        self._argv_env(node.elts, words)
        self.generic_visit(node)

    def _argv_env(self, elements: list[ast.expr], words: list[str | None]) -> None:
        """Settings in an argument list: ``["env", "NVFUSER_ENABLE=a", "python", ...]`` (the assignments after
        ``env`` and its flags) and ``["bash", "-c", "NVFUSER_ENABLE=a python ..."]`` (the script, read as a shell
        line)."""
        for i, word in enumerate(words):
            program = None if word is None else word.rsplit("/", 1)[-1]
            if program == "env":
                j = i + 1
                while j < len(words) and (flag := words[j]) is not None and flag.startswith("-"):
                    j += 2 if flag in ("-u", "--unset", "-C", "--chdir", "-S", "--split-string") else 1
                for element in elements[j:]:
                    text = self.text(element) if not isinstance(element, ast.Starred) else UNKNOWN
                    variable, equals, value = text.partition("=")
                    if not equals or not variable.isidentifier():
                        break  # the command env runs
                    if variable in ENV_KINDS:
                        self._env_text(element, "env command", variable, value)
                return
            if program in _SHELLS:
                for j in range(i + 1, len(words)):
                    flag = words[j]
                    if flag is None or not flag.startswith("-") or flag.startswith("--"):
                        break
                    if "c" in flag and j + 1 < len(elements) and not isinstance(elements[j + 1], ast.Starred):
                        self._shell(elements[j + 1], elements[j + 1])  # sh -c SCRIPT, bash -lc SCRIPT
                        break
                return

    visit_List = visit_Tuple = _argv


def scan(source: bytes | str, filename: str = "<unknown>", shell: Callable[[str], list[Use]] | None = None,
         allowances: dict[int, str] | None = None) -> list[Use]:
    """Every `Use` in one module's source; ``shell`` reads the command lines it gives a shell (``os.system(...)``;
    `nvscope._check._text`, which imports this module for notebooks, passes its reader); ``allowances``, if
    given, gets the comment of each line that holds ``nvscope:`` (`comments`). Raises SyntaxError (or ValueError for
    null bytes) for what Python cannot parse."""
    tree = ast.parse(source, filename)  # under the usual recursion limit: the parser's recursion is in C
    text = source if isinstance(source, str) else source.decode("utf-8", "replace")
    if allowances is not None and "nvscope:" in text:
        allowances.update(comments(tree, text))
    # The reader takes a few Python frames per level of the tree. Python frames use no C stack since 3.11; before,
    # each takes some and a limit as high as 20,000 lets a deep tree overflow the C stack (a segfault on 3.10), so
    # there it stays within what the C stack holds (a deeper tree is then a RecursionError: a note, not a crash).
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000 if sys.version_info >= (3, 11) else 3_000))
    try:
        reader = _Reader(tree, text, shell)
        reader.visit_body(tree.body)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(reader.uses, key=lambda u: (u.line, u.col))
