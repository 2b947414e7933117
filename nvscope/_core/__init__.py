"""Layer 1, the core: option sets, fusion identity and selectors, the catalog, policy, the scope and its verbs,
development mode, environment, errors, text helpers and the patch ledger. Everything ``import nvscope`` loads; it
knows no Thunder or nvFuser object and imports nothing from the layers above (tests/test_layers.py)."""
