"""``nvscope run``'s start-up hook for the Python processes its program starts (nvscope/_cli/_child_carry.py).

Python's ``site`` imports it as ``sitecustomize`` from ``PYTHONPATH``: it runs the ``sitecustomize`` it hides, then,
when ``NVSCOPE_RUN`` is set, enters the run's scope. Any Python 3 the program starts reads it, so it keeps to that
syntax."""

import os
import sys


def _chain() -> None:
    """Run the sitecustomize module this one hides, as ``site`` would have."""
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    here = os.path.normcase(os.path.dirname(os.path.abspath(__file__)))
    rest = [entry for entry in sys.path if os.path.normcase(os.path.abspath(entry or os.curdir)) != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _start() -> None:
    try:
        from nvscope._cli import start_child
    except ImportError as error:
        sys.stderr.write(f"nvscope: NVSCOPE_RUN is set, but this Python ({sys.executable}) cannot import nvscope "
                         f"({error}); this process runs without nvscope run's options\n")
        return
    start_child()


try:
    _chain()
finally:  # an error in the hidden sitecustomize still reaches `site`, which reports it as it would have
    if os.environ.get("NVSCOPE_RUN") is not None:
        _start()
