"""Layer 2 beside execution, the source check (``nvscope check``): nvFuser developer options set where they do not
belong, found in Python, shell, Dockerfiles, Makefiles, YAML, TOML, INI, .env files and notebooks without running
them. Imports only `nvscope._core`; the names below are in ``__init__.pyi`` and load on first use."""

from nvscope._core import lazy_face

__all__, __getattr__, __dir__ = lazy_face(__name__, __file__)
del lazy_face
