"""Layer 2, execution: the `Adapter` interface, the one execution path, fusion tables and partitions, events and
audit, failure notes and repro scripts, nvFuser's frontends, the Thunder and nvFuser adapters, auto-install.
Imports only `nvscope._core` from below (tests/test_layers.py); the names below are in ``__init__.pyi`` and load on
first use, so that `import nvscope` loads only the modules it needs."""

from nvscope._core import lazy_face

__all__, __getattr__, __dir__ = lazy_face(__name__, __file__)
del lazy_face
