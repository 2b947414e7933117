"""Layer 2, execution: the adapters, the one execution path, fusion tables, events, audit and failures.

Its face is declared in ``__init__.pyi`` and loads on first use."""

from nvscope._core import lazy_face

__all__, __getattr__, __dir__ = lazy_face(__name__, __file__)
del lazy_face
