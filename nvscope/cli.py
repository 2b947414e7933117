"""The ``nvscope`` command (``python -m nvscope``): `main`. The commands live in `nvscope._cli`."""

from nvscope._cli._main import main

__all__ = ["main"]
