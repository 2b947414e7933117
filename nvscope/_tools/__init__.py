"""Layer 4, the tools: compare, search, per-fusion search, profile, bisect and minimize, with their results.
Imports only the layers below (tests/test_layers.py); the command line is above, in `nvscope._cli`."""
