"""Fusions every option can change, and whose executions can take a random time: for the tools' statistics.

`NoisyFusions` loads the direct frontend double (tests/fake_nvfuser_frontend.py) and installs nvscope's real adapter
over it. Each fusion's definition holds every op the catalog gates an option on, so every option can change it: a
candidate runs in a partition of its own and the search judges it on time (not "changed nothing"); `run` executes
one and returns the options nvFuser received, as the `fusion` fixture of tests/conftest.py does for a linear.

With ``noise=True`` every execution draws how long it "took" (lognormal around 1 ms, 20 % spread, times the factor
of each enable option it ran with, none by default) and advances the tools' clock by that much (a `StepClock`):
thousands of runs in seconds. The noise is in the measured calls themselves, not in a clock that would make variants
tie: two variants without a factor are identical but never time alike, as on a real machine. Only the drawn delays
count, not the host's time, so a loaded CI machine cannot add noise the statistics' error rates do not allow for.
Seeded (`reseed`), so a run of many seeds is reproducible.

`StepClock` is the tools' clock for tests whose calls say how long they take, with no noise: ``advance(seconds)``
where a test would sleep (the `clock` fixture of tests/conftest.py).
"""

from __future__ import annotations

import gc
import math
import random
import time
from types import SimpleNamespace
from typing import Any

import pytest
from thunder_double import load_frontend, reset_nvscope

import nvscope
import nvscope.nvfuser
from nvscope._measure import _harness, _timer

MEDIAN_S = 1e-3
SPREAD = 0.2


class NoisyFusions:
    """``step()`` executes ``fusions`` distinct direct fusions in a row; ``factors``: option -> time factor."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fusions: int = 1, factors: dict[str, float] | None = None,
                 *, noise: bool = True) -> None:
        reset_nvscope()
        fe = load_frontend(monkeypatch, "nvfuser_direct")
        ops = sorted({"linear", *(op for o in nvscope.catalog().options for op in o.ops)})
        self.definitions = []
        for k in range(fusions):
            with fe.FusionDefinition() as fd:
                fd.define_tensor(shape=[1], dtype=fe.DataType.Float)
                for op in ops:
                    getattr(fd.ops, op)(0)
                fd.ops.tag(k)  # distinct definitions: distinct fusions
            self.definitions.append(fd)
        self.fe, self.factors = fe, factors or {}
        self.rng = random.Random(0)
        execute = fe.FusionDefinition.execute

        def noisy(fd: Any, inputs: Any, **kwargs: Any) -> Any:
            if not noise:
                return execute(fd, inputs, **kwargs)
            took = self.rng.lognormvariate(math.log(MEDIAN_S), SPREAD)
            for name in kwargs.get("_enable_options") or ():
                took *= self.factors.get(name, 1.0)
            self.clock.advance(took)
            return execute(fd, inputs, **kwargs)

        # Before nvscope's adapter is installed, so that it wraps this execute (and the definitions it rebuilds per
        # option set run it too).
        monkeypatch.setattr(fe.FusionDefinition, "execute", noisy)
        if noise:  # without it the clock is left alone, for a test's own (`StepClock`)
            self.clock = StepClock(monkeypatch)
        # The harness collects all garbage before each batch of rounds, so that no collection lands in a timed block:
        # 0.05-0.2 s once torch is loaded, most of the time of a search here, and nothing the drawn delays can feel.
        monkeypatch.setattr(_harness, "gc", SimpleNamespace(
            collect=lambda generation=2: 0, isenabled=gc.isenabled, disable=gc.disable, enable=gc.enable))
        assert nvscope.nvfuser.install()

    def reseed(self, seed: int) -> None:
        """Draw from ``seed`` on; forget the double's records of earlier runs (a million of them slows every
        garbage collection the tools do between rounds)."""
        self.rng.seed(seed)
        self.fe.EXECUTIONS.clear()
        self.fe.COMPILES.clear()

    def run(self) -> nvscope.OptionSet:
        """Execute the first fusion; the options nvFuser received."""
        self.definitions[0].execute([1.0])
        last = self.fe.EXECUTIONS[-1]
        return nvscope.OptionSet(last.enable, last.disable)

    def step(self) -> float:
        x = 1.0
        for fd in self.definitions:
            (x,) = fd.execute([x])
        return x

    def close(self) -> None:
        reset_nvscope()


class StepClock:
    """The tools' clock (``nvscope._measure._timer.clock``) moved by what a test's calls say they took.

    Between two readings it moves by exactly the seconds `advance` was given in between; where none were given, by
    the host clock, so that a block of calls that advance nothing (the harness timing a no-op to learn its own
    overhead, say) still ends. An interval in which the calls advance it is therefore exact (a block of the search's
    calls, a fusion's execution under the profile): a loaded machine cannot stretch it and a scope's bookkeeping
    does not count, so a time ratio is the ratio of what the test said, round after round. (A profiled step's time
    still holds the host's microseconds between one fusion's timer and the next.)
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seconds = 0.0  # the last reading
        self._pending: float | None = None  # advanced since the last reading
        self._host = time.perf_counter()
        monkeypatch.setattr(_timer, "clock", self.read)

    def advance(self, seconds: float) -> None:
        """The call in progress takes ``seconds`` more (instead of ``time.sleep(seconds)``)."""
        self._pending = (self._pending or 0.0) + seconds

    def read(self) -> float:
        host = time.perf_counter()
        self.seconds += host - self._host if self._pending is None else self._pending
        self._pending, self._host = None, host
        return self.seconds
