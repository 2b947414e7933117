"""The bisect's drive: its stages over a probe callable ``run(options, fusions) -> Outcome``, free of any harness.

Probes run in process (`nvscope._bisect._in_process`) or one process each (`nvscope._bisect._process`);
the stages are `nvscope._bisect._bisect`'s, steps 2 and 3 `nvscope._bisect._minimize.minimize`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from nvscope._bisect._minimize import minimize
from nvscope._bisect._report import BisectResult, Culprit, Probe
from nvscope._core import OptionSet
from nvscope._measure import Compiles, compile_clock, spec

__all__ = ["MAX_CULPRITS", "Outcome", "drive"]

MAX_CULPRITS = 4  # culprits found before the bisect stops looking for more


@dataclass
class Outcome:
    """What one probe saw: whether the step went wrong, how (one line, or a few), the repro scripts named, and what
    its run compiled (None where it could not be told: a child that died)."""

    bad: bool
    detail: str = ""
    repro: tuple[str, ...] = ()
    compiles: Compiles | None = None


def items_of(options: OptionSet) -> list[str]:
    return [*options.enable_list(), *(f"-{name}" for name in options.disable_list())]


def options_of(items: Iterable[str]) -> OptionSet:
    items = list(items)
    return OptionSet([i for i in items if not i.startswith("-")], [i[1:] for i in items if i.startswith("-")])


def drive(given: OptionSet, fusions: Sequence[str], run: Callable[[OptionSet, tuple[str, ...] | None], Outcome],
          say: Callable[[str], None], check: str, mode: str = "in-process", program: tuple[str, ...] = (),
          default: Compiles | None = None) -> BisectResult:
    """The bisect's stages (module docstring) over ``run(options, fusions) -> Outcome``; ``fusions``: the ids;
    ``default``: what the default's run compiled."""
    began, compiled = time.perf_counter(), compile_clock()

    def compile_s() -> float | None:  # the probes' children compile in subprocess mode: not seen here
        return compile_clock() - compiled if mode == "in-process" else None

    all_fusions = tuple(fusions)
    items = items_of(given)
    log: list[Probe] = []
    seen: dict[tuple[OptionSet, tuple[str, ...] | None], Outcome] = {}
    last_bad: list[tuple[OptionSet, tuple[str, ...] | None, Outcome]] = []
    stage = ["confirm"]

    def probe(options: OptionSet, selected: tuple[str, ...] | None) -> bool:
        key = (options, selected)
        outcome = seen.get(key)
        if outcome is None:
            where = "every fusion" if selected is None else ", ".join(selected) if len(selected) <= 3 else \
                f"{len(selected)} fusions ({selected[0]} ... {selected[-1]})"
            start = time.perf_counter()
            outcome = run(options, selected)
            seconds = time.perf_counter() - start
            seen[key] = outcome
            log.append(Probe(len(log) + 1, stage[0], options, selected, outcome.bad, outcome.detail, seconds,
                             outcome.compiles))
            first = outcome.detail.splitlines()[0][:160] if outcome.detail else ""
            compiled = "" if outcome.compiles is None else f"; {outcome.compiles}"
            say(f"probe {len(log)} ({stage[0]}): {spec(options)} on {where}: "
                f"{'BAD' if outcome.bad else 'ok'} in {seconds:.1f} s{compiled}{f' ({first})' if first else ''}")
        if outcome.bad:
            last_bad.append((options, selected, outcome))
        return outcome.bad

    def fewest_options(pool: tuple[str, ...]) -> OptionSet:
        return options_of(minimize(items, lambda sub: probe(options_of(sub), pool))) if len(items) > 1 else given

    def fewest_fusions(options: OptionSet, pool: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(minimize(pool, lambda sub: probe(options, tuple(sub)))) if len(pool) > 1 else pool

    def final_culprit(options: OptionSet, found: tuple[str, ...]) -> tuple[Culprit, str | None]:
        stage[0] = "final"
        probe(options, found)  # usually run already (then free): the problem and repro scripts of this culprit
        final = seen[(options, found)]
        if final.bad:
            return Culprit(options, found, final.detail, final.repro), None
        # It went wrong under a probe and not under the same options again: keep the last evidence.
        options, selected, final = last_bad[-1]
        return Culprit(options, all_fusions if selected is None else selected, final.detail, final.repro), (
            "the step did not go wrong again under a culprit it found: it may be flaky, so that culprit is the last "
            "probe that went wrong")

    if not probe(given, all_fusions):
        outcome = seen[(given, all_fusions)]
        return BisectResult(given, (), all_fusions, tuple(log), check, None, mode, program,
                            time.perf_counter() - began, (), outcome.detail or "it ran clean", compile_s(), default)
    # The first culprit, coarse to fine: the options on every fusion, then the fusions with those options; then each
    # option once more on those fusions only, so that none is kept that only other fusions needed.
    stage[0] = "options"
    chosen = fewest_options(all_fusions)
    stage[0] = "fusions"
    found = fewest_fusions(chosen, all_fusions)
    reduced = True
    while reduced and len(items_of(chosen)) > 1:
        reduced = False
        for item in items_of(chosen):
            fewer = options_of(i for i in items_of(chosen) if i != item)
            if probe(fewer, found):
                chosen, reduced = fewer, True
                break
    culprit, flaky = final_culprit(chosen, found)
    culprits, notes = [culprit], [flaky] if flaky else []
    # More culprits among the other fusions, until the given options on all the rest run clean.
    others_clean = None
    while True:
        taken = {f for c in culprits for f in c.fusions}
        rest = tuple(f for f in all_fusions if f not in taken)
        if not rest:  # every fusion is a culprit: there is no other fusion to run clean
            others_clean = None
            break
        stage[0] = "rest"
        others_clean = not probe(given, rest)
        if others_clean or len(culprits) >= MAX_CULPRITS:
            break
        stage[0] = "more"
        found = fewest_fusions(given, rest)
        chosen = fewest_options(found)
        culprit, flaky = final_culprit(chosen, found)
        if set(culprit.fusions) <= taken:  # flaky: nothing new can be told apart
            break
        culprits.append(culprit)
        notes += [flaky] if flaky else []
    return BisectResult(given, tuple(culprits), all_fusions, tuple(log), check, others_clean, mode, program,
                        time.perf_counter() - began, tuple(dict.fromkeys(notes)), compile_s=compile_s(),
                        default_compiles=default)
