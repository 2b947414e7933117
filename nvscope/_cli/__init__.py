"""Layer 5, the command line: the ``nvscope`` command and its subcommands, ``nvscope run`` and its child-process
carry, doctor, wheels, and the pytest plugin's body. The top of the package below the public faces."""
