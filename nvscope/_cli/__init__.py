"""Layer 6, the command line: ``nvscope`` and its subcommands, ``nvscope run``'s carry, doctor, wheels and the
pytest plugin's body. Names in ``__init__.pyi`` load on first use, so the plugin does not load the command line."""

from nvscope._core import lazy_face

__all__, __getattr__, __dir__ = lazy_face(__name__, __file__)
del lazy_face
