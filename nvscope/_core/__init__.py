"""Layer 1, the core: option sets, fusion identity, the catalog, the scope, development mode, environment, errors
and the patch ledger. It knows no Thunder or nvFuser object; the layers above use only the names in
``__init__.pyi``, which load on first use: ``import nvscope`` loads only this file and `_lazy`."""

from ._lazy import lazy_face

__all__, __getattr__, __dir__ = lazy_face(__name__, __file__)
del lazy_face
