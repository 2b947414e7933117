"""Layer 3, the measuring kit the tools share: the harness (the step called, copied, compared and timed in rounds;
progress), candidates, numerics, timer, statistics, kernel names and schedulers, and what every result shares (JSON,
charts, the ``nv_options(...)`` line and the ``nvscope run`` command). Imports only the core and execution layers
(tests/test_layers.py)."""
