"""`nvscope check`'s reader for files that are not Python: shell scripts, Dockerfiles, Makefiles, YAML, TOML and INI
configs, ``.env`` files and notebooks.

Read line by line, not parsed: comments dropped, continued lines joined, each line searched for the assignments its
format uses and for command lines that pass options. A notebook's code cells go to `_python` as one module; its
magics are read here, reported as lines of the ``.ipynb`` file."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType

from nvscope._check import _python
from nvscope._check._use import DEV, ENV_KINDS, Use, command_options, env_names

__all__ = ["FORMATS", "file_format", "scan", "scan_notebook", "strip_comment"]

FORMATS = ("python", "notebook", "shell", "dockerfile", "make", "yaml", "toml", "ini", "env")

_SUFFIXES: Mapping[str, str] = MappingProxyType({
    ".py": "python", ".pyw": "python", ".ipynb": "notebook",
    ".sh": "shell", ".bash": "shell", ".zsh": "shell", ".ksh": "shell", ".envrc": "shell",
    ".dockerfile": "dockerfile", ".mk": "make", ".make": "make",
    ".yml": "yaml", ".yaml": "yaml", ".toml": "toml", ".ini": "ini", ".cfg": "ini", ".env": "env",
})
_NAMES: Mapping[str, str] = MappingProxyType({"dockerfile": "dockerfile", "containerfile": "dockerfile",
                                              "makefile": "make", "gnumakefile": "make", ".env": "env",
                                              ".envrc": "shell", ".flake8": "ini"})

# A variant of a named file: a separator and anything after the name.
_NAMED = re.compile(r"(dockerfile|containerfile|makefile|gnumakefile)[._-]")
_NOT_VARIANTS = frozenset({".py", ".pyw", ".ipynb", ".md", ".rst", ".txt", ".adoc", ".html"})  # makefile_gen.py
_VARIABLE = "|".join(ENV_KINDS)
# A value: quoted, or up to a blank, a shell operator, a quote or a closing bracket (`["NVFUSER_ENABLE=a", ...]`);
# p2p_protocol(put): arguments in a value.
_VALUE = r"(\"[^\"]*\"|'[^']*'|(?:[^\s;&|()`'\"\]}]|\([^\s()]*\))*)"
# X=value, export X=value, X := value (make), X = "value" (TOML, INI): not $X, ${X}, X==value.
_ASSIGN = re.compile(rf"(?<![\w${{/.-])(export\s+|readonly\s+|local\s+|declare\s+(?:-\w+\s+)*)?({_VARIABLE})"
                     rf"(\s*(?:[:?+]?=)(?!=)\s*){_VALUE}")
# ${X:=value} and ${X=value}: the shell's default, assigned when X is unset (`: "${NVFUSER_DISABLE:=fma}"`).
_DEFAULT = re.compile(rf"\$\{{({_VARIABLE}):?=((?:[^{{}}]|\$\{{[^{{}}]*\}})*)\}}")
_DOCKER_ENV = re.compile(rf"^\s*ENV\s+({_VARIABLE})\s+(?!=)(.*)$", re.IGNORECASE)  # ENV X value (legacy form)
_YAML_KEY = re.compile(rf"^\s*(?:-\s+)?[\"']?({_VARIABLE})[\"']?\s*:\s+(.*)$")
_YAML_FLOW = re.compile(rf"[{{,]\s*[\"']?({_VARIABLE})[\"']?\s*:\s*(\"[^\"]*\"|'[^']*'|[^,}}]*)")  # env: {X: a}
_BLOCK = re.compile(r"[|>][-+0-9]*")  # a YAML block scalar's header: the value is on the lines below
# docker-compose's list form, `- NVFUSER_ENABLE=fuse_matmul`: the whole item, else it is a command (`script:` lists).
_YAML_ITEM = re.compile(rf"^\s*-\s+([\"']?)({_VARIABLE})=([^\s\"']*)\1\s*$")
# Kubernetes' list form: `- name: NVFUSER_ENABLE` with `value: ...` (or `valueFrom:`) a key of the same item.
_YAML_NAMED = re.compile(rf"^(\s*(?:-\s+)?)[\"']?name[\"']?\s*:\s*([\"']?)({_VARIABLE})\2\s*$")
_YAML_VALUE = re.compile(r"^\s*(?:-\s+)?[\"']?(value|valueFrom)[\"']?\s*:(.*)$")
_YAML_NAMED_FLOW = re.compile(rf"\bname[\"']?\s*:\s*[\"']?({_VARIABLE})[\"']?\s*,\s*[\"']?value[\"']?\s*:\s*"
                              r"(\"[^\"]*\"|'[^']*'|[^,}]*)")  # - {name: NVFUSER_ENABLE, value: fuse_matmul}
# Keys whose values are prose (a step's name, a description): a setting written there is shown, not made.
_PROSE = re.compile(r"^\s*(?:-\s+)?[\"']?(?:name|description|title|summary|help)[\"']?\s*[:=]")
# A command that prints: a setting in its arguments is shown, not made, unless the output goes to a file or a pipe
# (echo "NVFUSER_ENABLE=a" >> "$GITHUB_ENV").
_PRINT = re.compile(r"\s*(?:-\s+)?(?:run:\s*)?@?-?(?:echo|printf)\b")
_MAGIC_ENV = re.compile(rf"^\s*%(?:set_)?env\s+({_VARIABLE})(?:\s*=\s*|\s+)(.*)$")
_WORD = re.compile(r"[^\s'\"\[\]]+")
_CONSTRUCT: Mapping[str, str] = MappingProxyType({"shell": "shell", "dockerfile": "Dockerfile", "make": "Makefile",
                                                  "yaml": "YAML", "toml": "TOML", "ini": "INI", "env": ".env",
                                                  "notebook": "notebook"})
# Where '#' starts a comment only at the start of a line (Dockerfile, .env, INI): elsewhere it is part of a value.
_LEADING_COMMENTS: Mapping[str, str] = MappingProxyType({"dockerfile": "#", "env": "#", "ini": "#;"})


def file_format(name: str, head: bytes = b"") -> str | None:
    """Which reader a file needs, by its name (``train.sh``, ``Dockerfile.cuda``, ``.env.local``) or, for a file
    without a suffix, a shell shebang in its first bytes; None for a file no reader reads."""
    lower = name.lower()
    if lower in _NAMES:
        return _NAMES[lower]
    dot = lower.rfind(".")
    named = _NAMED.match(lower)
    if named is not None and (dot < 0 or lower[dot:] not in _NOT_VARIANTS):
        return _NAMES[named[1]]  # Dockerfile.cuda, Dockerfile-gpu, Dockerfile_cuda, Makefile.inc
    if lower.startswith(".env."):
        return "env"
    if dot > 0:
        return _SUFFIXES.get(lower[dot:])
    first = head.split(b"\n", 1)[0]
    if first.startswith(b"#!"):
        if re.search(rb"\b(ba|z|k|da)?sh\b", first):
            return "shell"
        if b"python" in first:
            return "python"
    return None


def strip_comment(line: str, fmt: str) -> str:
    """The line without its comment: whole-line comments always; ``#`` after a blank, outside quotes, where the
    format has inline comments."""
    stripped = line.lstrip()
    if stripped[:1] in _LEADING_COMMENTS.get(fmt, "#"):
        return ""
    if fmt in _LEADING_COMMENTS:
        return line
    quote = ""
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _logical_lines(text: str, fmt: str) -> list[tuple[int, int, str]]:
    """(first line, last line, text) of each line without comments, lines ending in a backslash joined to the next."""
    out: list[tuple[int, int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = strip_comment(raw, fmt)
        if not pending:
            start = number
        if line.rstrip().endswith("\\") and fmt != "ini":
            pending.append(line.rstrip()[:-1])
            continue
        pending.append(line)
        out.append((start, number, " ".join(pending)))
        pending = []
    if pending:
        out.append((start, start + len(pending) - 1, " ".join(pending)))
    return out


def _value_use(line: int, col: int, end: int, construct: str, variable: str, value: str) -> list[Use]:
    """The `Use` for ``variable=value``, as a list: empty when it sets nothing (an empty value, NVSCOPE_DEV=0)."""
    value = value.strip()
    if value[:1] in "'\"" and value.endswith(value[:1]) and len(value) >= 2:
        value = value[1:-1]
    dynamic = "$" in value or "`" in value or "{{" in value
    if ENV_KINDS[variable] == DEV:
        options = () if dynamic else env_names(variable, value)
    else:
        options = tuple((k, n) for k, n in env_names(variable, value) if "$" not in n and "{" not in n)
    if not options and not dynamic:
        return []
    return [Use(line, col, end, construct, options, dynamic, per_call=False, detail=variable)]


def _words(text: str) -> list[str | None]:
    """The words of a command line (quotes and TOML/YAML brackets dropped); None for one that holds a variable."""
    words = [w.strip(",") for w in _WORD.findall(text)]
    return [None if "$" in w or "{{" in w else w for w in words if w]


def _printed(text: str, at: int) -> bool:
    """Whether position ``at`` is in the arguments of ``echo``/``printf`` whose output goes to no file or pipe."""
    start = max(text.rfind(c, 0, at) for c in ";&|") + 1
    end = min((i for i in (text.find(c, at) for c in ";&|") if i >= 0), default=len(text))
    piped = text[end:end + 1] == "|" and text[end + 1:end + 2] != "|"
    return _PRINT.match(text, start) is not None and ">" not in text[start:end] and not piped


def _line_uses(first: int, last: int, text: str, fmt: str) -> list[Use]:
    uses: list[Use] = []
    kind = _CONSTRUCT[fmt]
    if fmt in ("yaml", "toml", "ini") and _PROSE.match(text):
        return uses
    keyed = _YAML_KEY.match(text) if fmt == "yaml" else _DOCKER_ENV.match(text) if fmt == "dockerfile" else None
    if keyed is not None:
        uses += _value_use(first, keyed.start(1) + 1, last, f"{kind} {'env' if fmt == 'yaml' else 'ENV'}",
                           keyed[1], keyed[2])
    elif fmt == "yaml" and (_YAML_FLOW.search(text) or _YAML_NAMED_FLOW.search(text)):
        for match in (*_YAML_FLOW.finditer(text), *_YAML_NAMED_FLOW.finditer(text)):
            uses += _value_use(first, match.start(1) + 1, last, f"{kind} env", match[1], match[2])
    elif fmt == "yaml" and (item := _YAML_ITEM.match(text)):
        uses += _value_use(first, item.start(2) + 1, last, f"{kind} env", item[2], item[3])
    else:
        for match in _ASSIGN.finditer(text):
            if _printed(text, match.start()):
                continue
            if fmt in ("shell", "notebook"):
                how = "export" if match[1] else "assignment"
            elif fmt == "dockerfile":
                how = "ENV" if re.match(r"\s*ENV\b", text, re.IGNORECASE) else "RUN"
            else:
                how = {"make": "variable", "yaml": "run", "env": "variable"}.get(fmt, "setting")
            uses += _value_use(first, match.start(2) + 1, last, f"{kind} {how}".replace(".env variable", ".env"),
                               match[2], match[4])
        if "${" in text:
            for match in _DEFAULT.finditer(text):
                uses += _value_use(first, match.start(1) + 1, last, f"{kind} default", match[1], match[2])
    if "nvscope" in text or "--nv-" in text:
        found = command_options(_words(text))
        if found is not None:
            construct, options, dynamic = found
            at = text.find("nvscope") if construct.startswith("nvscope") else text.find("--nv-")
            uses.append(Use(first, at + 1, last, construct, options, dynamic, per_call=True, detail=kind))
    return uses


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


def _block(lines: list[tuple[int, int, str]], i: int, value: str) -> tuple[str, int, int]:
    """A YAML value that starts on logical line ``i - 1`` as ``value``: (the value, its last line, the index after
    it). A block scalar's header (``>-``, ``|``) takes the lines below that are indented deeper."""
    last = lines[i - 1][1]
    if not _BLOCK.fullmatch(value.strip()):
        return value, last, i
    indent = _indent(lines[i - 1][2])
    below = i
    while below < len(lines) and (not lines[below][2].strip() or _indent(lines[below][2]) > indent):
        below += 1
    joined = " ".join(more.strip() for _, _, more in lines[i:below] if more.strip())
    return f"'{joined}'", lines[below - 1][1] if below > i else last, below


def _named_value(lines: list[tuple[int, int, str]], at: int, named: re.Match[str]) -> int | None:
    """The index of the ``value:`` (or ``valueFrom:``) line of the YAML list item whose ``name:`` key is on logical
    line ``at``; None when the item has none."""
    key = len(named[1])  # the column of the item's keys

    def is_value(index: int) -> bool:
        text = lines[index][2]
        return len(text) - len(text.lstrip(" -")) == key and _YAML_VALUE.match(text) is not None

    for index in range(at + 1, len(lines)):  # the keys below, up to the end of the item
        text = lines[index][2]
        if not text.strip():
            continue
        if _indent(text) < key:
            break
        if is_value(index):
            return index
    if "-" not in named[1]:  # `name:` is not the item's first key: the keys above it, up to the item's `-`
        for index in range(at - 1, -1, -1):
            text = lines[index][2]
            if not text.strip() or _indent(text) > key:
                continue
            if len(text) - len(text.lstrip(" -")) != key:
                break
            if is_value(index):
                return index
            if text.lstrip().startswith("-"):
                break  # the item's first line
    return None


def scan(text: str, fmt: str) -> list[Use]:
    """Every `Use` in a text file of format ``fmt`` (one of `FORMATS` but python and notebook)."""
    uses: list[Use] = []
    lines = _logical_lines(text, fmt)
    i = 0
    while i < len(lines):
        first, last, line = lines[i]
        i += 1
        keyed = _YAML_KEY.match(line) if fmt == "yaml" else None
        if keyed is not None and _BLOCK.fullmatch(keyed[2].strip()):  # NVFUSER_ENABLE: >- and the value below
            value, last, i = _block(lines, i, keyed[2])
            line = f"{line[:keyed.start(2)]}{value}"
        named = _YAML_NAMED.match(line) if fmt == "yaml" else None
        if named is not None and (at := _named_value(lines, i - 1, named)) is not None:
            uses += _named_use(lines, i - 1, at, named)
            continue
        uses += _line_uses(first, last, line, fmt)
    return uses


def _named_use(lines: list[tuple[int, int, str]], at: int, value_at: int, named: re.Match[str]) -> list[Use]:
    """The `Use` of ``- name: NVFUSER_ENABLE`` whose ``value:`` is on logical line ``value_at``: from Kubernetes'
    ``valueFrom:`` (a secret, a field) the value is not known here."""
    key = _YAML_VALUE.match(lines[value_at][2])
    assert key is not None
    value, last, _ = _block(lines, value_at + 1, key[2])
    last = max(last, lines[at][1])
    if key[1] == "valueFrom":
        return [Use(lines[at][0], named.start(3) + 1, last, "YAML env", (), dynamic=True, per_call=False,
                    detail=named[3])]
    return _value_use(lines[at][0], named.start(3) + 1, last, "YAML env", named[3], value)


def scan_notebook(raw: str, note: Callable[[str], None]) -> list[Use]:
    """Every `Use` in a notebook's code cells (raises ValueError if it is not notebook JSON). ``note`` hears of
    cells that are not Python."""
    document = json.loads(raw)
    cells = document.get("cells") if isinstance(document, dict) else None
    if not isinstance(cells, list):
        raise ValueError("not a Jupyter notebook (no list of cells)")
    # the line of the file at which each cell's "source" starts, in order
    starts = [i for i, line in enumerate(raw.splitlines(), 1) if re.match(r'\s*"source"\s*:', line)]
    python: list[str] = []
    where: list[int] = []  # file line of each line of `python`
    uses: list[Use] = []
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        lines = "".join(source).splitlines() if isinstance(source, list) else str(source).splitlines()
        base = starts[index] if index < len(starts) else 1
        # In nbformat's own layout a list source has one line per line of the file after `"source": [`.
        listed = isinstance(source, list) and len(source) > 0 and index < len(starts)

        def at(k: int, base: int = base, listed: bool = listed) -> int:
            return base + k + 1 if listed else base

        shell_cell = bool(lines) and re.match(r"\s*%%(bash|sh|script\s+\w*sh)\b", lines[0]) is not None
        for k, line in enumerate(lines):
            magic_env = _MAGIC_ENV.match(line)
            if shell_cell or line.lstrip().startswith("!"):
                text = line.lstrip()[1:] if not shell_cell else line
                uses += [_moved(u, at(k)) for u in _line_uses(1, 1, strip_comment(text, "shell"), "notebook")]
                python.append("")
            elif magic_env is not None:
                found = _value_use(1, magic_env.start(1) + 1, 1, "notebook %env", magic_env[1], magic_env[2])
                uses += [_moved(use, at(k)) for use in found]
                python.append("")
            elif line.lstrip().startswith("%"):
                python.append("")
            else:
                python.append(line)
            where.append(at(k))
    if python:
        try:
            found = _python.scan("\n".join(python), shell=lambda line: scan(line, "shell"))
        except (SyntaxError, ValueError) as error:
            note(f"its code cells are not Python as a whole ({type(error).__name__}: line "
                 f"{getattr(error, 'lineno', '?')}); read line by line for magics only")
            found = []
        uses += [_moved(u, where[u.line - 1], where[min(u.end_line, len(where)) - 1]) for u in found]
    return sorted(uses, key=lambda u: (u.line, u.col))


def _moved(use: Use, line: int, end: int | None = None) -> Use:
    return dataclasses.replace(use, line=line, end_line=line if end is None else end)
