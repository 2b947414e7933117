"""Layer 5, the command line: the ``nvscope`` command and its subcommands, ``nvscope run`` and what it carries to
child processes, doctor, wheels, and the pytest plugin's body. The names the public faces use are in
``__init__.pyi`` and load on first use: the pytest plugin must not load the command line."""

from nvscope._core import lazy_face

__all__, __getattr__, __dir__ = lazy_face(__name__, __file__)
del lazy_face
