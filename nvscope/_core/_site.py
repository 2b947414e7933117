"""Where a fusion sits in a program, as its id says it: a module, ``<module>:<qualname>``, or a digest of a printed
definition or of inputs; each the same in every run, so an id printed by one run selects the same fusion in the next."""

from __future__ import annotations

import sys

from nvscope._core import _state

__all__ = ["NOT_IN_SITE", "definition_digest", "file_of", "inputs_digest", "program_module", "run_as_program",
           "site_of"]

# Not in a site: they would make a printed id a glob, or ambiguous to read back.
NOT_IN_SITE = frozenset("#/*?[] \t\n\r")


def definition_digest(text: str) -> str:
    """Six hex digits of a printed FusionDefinition, without its ``def ...`` line (which the legacy frontend numbers
    in cache order)."""
    import hashlib

    first, _, rest = text.partition("\n")
    body = rest if first.lstrip().startswith("def ") else text
    return hashlib.blake2b(body.encode("utf-8", "replace"), digest_size=3).hexdigest()


_PROGRAMS: set[str] = set()
_state.keep(__name__, "_PROGRAMS", "the program this process runs: it stays the program")


def run_as_program(module: str) -> None:
    """``module`` is the program a command line named (``-m pkg.train:step``): ids name it by its file's stem."""
    _PROGRAMS.add(module)


def program_module(module: str | None, filename: str | None = None) -> str:
    """A module's name as ids show it: a script's or a program's is its file's stem, so that ``python train.py`` and
    ``nvscope profile train.py:step`` agree."""
    if not module or module == "__main__" or module.startswith("__nvscope") or module in _PROGRAMS:
        path = filename or getattr(sys.modules.get(module or "__main__"), "__file__", None)
        if path:
            module = path.replace("\\", "/").rpartition("/")[2].rpartition(".")[0] or module
    return _clean(module or "__main__")


def file_of(obj: object) -> str | None:
    """The file defining ``obj``: a function's, or for a class or instance its first method's."""
    code = getattr(obj, "__code__", None)
    if code is None:
        cls = obj if isinstance(obj, type) else type(obj)
        code = next((v.__code__ for v in vars(cls).values() if hasattr(v, "__code__")), None)
    return getattr(code, "co_filename", None)


def site_of(module: str | None, qualname: str, filename: str | None = None) -> str:
    """``<module>:<qualname>``; characters that would read as a glob become ``_``."""
    return f"{program_module(module, filename)}:{_clean(qualname)}"


def _clean(text: str) -> str:
    return "".join("_" if c in NOT_IN_SITE else c for c in text)


def inputs_digest(args: tuple[object, ...]) -> str:
    """Six hex digits of a fusion's inputs: each tensor's shape, strides and dtype (not Thunder's symbolic shapes),
    anything else's type."""
    import hashlib

    def one(arg: object) -> object:
        shape = getattr(arg, "shape", None)
        if shape is None:
            return type(arg).__name__
        stride = getattr(arg, "stride", None)
        try:
            strides = tuple(stride()) if callable(stride) else None
        except Exception:  # a tensor without strides (sparse, nested)
            strides = None
        return tuple(shape), strides, str(getattr(arg, "dtype", None))

    text = repr(tuple(one(arg) for arg in args))
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=3).hexdigest()
