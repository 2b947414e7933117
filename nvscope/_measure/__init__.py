"""Layer 3, the measuring kit the tools share: candidates, numerics, timer, statistics, kernel names and
schedulers. Imports only the core and execution layers (tests/test_layers.py)."""
