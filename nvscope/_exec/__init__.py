"""Layer 2, execution: the `Adapter` interface, the one execution path, fusion tables and partitions, events and
audit, failure notes and repro scripts, nvFuser's frontends, the Thunder and nvFuser adapters, auto-install.
Imports only `nvscope._core` from below (tests/test_layers.py)."""
