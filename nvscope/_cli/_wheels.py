"""Which nvFuser wheel fits an installed torch: the exact ``pip install`` line, or a plain "none fits, because ...".
nvFuser publishes one distribution per CUDA and torch pair (``nvfuser-cu130-torch210``), so no package metadata can
pick by the installed torch: ``nvscope doctor`` asks torch and prints the line (docs/install-gpu.md)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from nvscope._exec import MIN_VERSION

__all__ = ["LISTED", "NIGHTLY", "PYTHONS", "THUNDER", "WheelHint", "install_hint", "nvfuser_wheel",
           "thunder_hint", "torch_hint"]

# (CUDA, torch) -> the newest nvFuser under nvfuser-cu<CUDA>-torch<torch> on PyPI; a newer torch may have a wheel by
# now: the hint then names it and says how to check
LISTED: Mapping[tuple[tuple[int, int], tuple[int, int]], str] = MappingProxyType({
    ((11, 8), (2, 1)): "0.1.6", ((11, 8), (2, 2)): "0.2.0", ((11, 8), (2, 3)): "0.2.9", ((11, 8), (2, 4)): "0.2.9",
    ((11, 8), (2, 5)): "0.2.24", ((11, 8), (2, 6)): "0.2.27", ((11, 8), (2, 7)): "0.2.27",
    ((12, 1), (2, 1)): "0.1.6", ((12, 1), (2, 2)): "0.2.0", ((12, 1), (2, 3)): "0.2.9", ((12, 1), (2, 4)): "0.2.9",
    ((12, 1), (2, 5)): "0.2.26",
    ((12, 4), (2, 5)): "0.2.24", ((12, 4), (2, 6)): "0.2.27",
    ((12, 6), (2, 6)): "0.2.27", ((12, 6), (2, 7)): "0.2.28", ((12, 6), (2, 8)): "0.2.34", ((12, 6), (2, 9)): "0.2.35",
    ((12, 6), (2, 10)): "0.2.36",
    ((12, 8), (2, 7)): "0.2.27", ((12, 8), (2, 8)): "0.2.34", ((12, 8), (2, 9)): "0.2.35", ((12, 8), (2, 10)): "0.2.36",
    ((12, 9), (2, 8)): "0.2.34",
    ((13, 0), (2, 9)): "0.2.35", ((13, 0), (2, 10)): "0.2.36",
})
# nvfuser-cu<CUDA> (no torch in the name): nightlies built against a torch nightly, with no compatibility promised
NIGHTLY = frozenset({(12, 6), (12, 8), (13, 0)})
# the Pythons and platform nvFuser publishes wheels for
PYTHONS = ((3, 10), (3, 12))
PLATFORM = ("Linux", "x86_64")
# The Thunder known to work with nvFuser 0.2.35 and 0.2.36 (pyproject's thunder extra asks for it), and the first
# torch with which it does not import (docs/install-gpu.md lists the combinations)
THUNDER = "0.2.7.dev20260201"
THUNDER_TORCH_BELOW = (2, 13)
# The torch to install where none is: the newest with nvFuser wheels (LISTED) that Thunder imports with; a bare
# `pip install torch` takes PyPI's newest, with which Thunder does not import
TORCH_PIN = "torch==2.10.*"

_TORCH = re.compile(r"(\d+)\.(\d+)(?:\.\d+)?([^+]*)(?:\+(.*))?")
_CUDA = re.compile(r"(\d+)\.(\d)(?:\.\d+)*")


class WheelHint(NamedTuple):
    """``command``: the exact line to run (None when no wheel fits); ``reason``: one sentence, for a person."""

    command: str | None
    reason: str


def _name(cuda: tuple[int, int], torch: tuple[int, int] | None = None) -> str:
    base = f"nvfuser-cu{cuda[0]}{cuda[1]}"
    return base if torch is None else f"{base}-torch{torch[0]}{torch[1]}"


def _dotted(pair: tuple[int, int]) -> str:
    return f"{pair[0]}.{pair[1]}"


def _older(version: str) -> bool:
    return tuple(int(p) for p in version.split(".")) < tuple(int(p) for p in MIN_VERSION.split("."))


def nvfuser_wheel(torch_version: str, cuda_version: str | None, *, python: tuple[int, int] | None = None,
                  system: str | None = None, machine: str | None = None) -> WheelHint:
    """The nvFuser wheel for torch ``torch_version`` (``torch.__version__``) built for CUDA ``cuda_version``
    (``torch.version.cuda``, None for a CPU or ROCm build); ``python``, ``system`` and ``machine``, when given, are
    checked against what nvFuser publishes wheels for."""
    match = _TORCH.fullmatch(torch_version.strip())
    if match is None:
        return WheelHint(None, f"torch {torch_version!r} is not a version nvscope can read, so it cannot name the "
                               "nvFuser wheel; nvFuser's wheels are named nvfuser-cu<CUDA>-torch<torch>")
    torch = (int(match[1]), int(match[2]))
    suffix = match[3]
    if cuda_version is None:
        return WheelHint(None, f"torch {torch_version} is not a CUDA build (torch.version.cuda is None): nvFuser "
                               "needs one; install a CUDA build of torch, then `nvscope doctor` names the wheel")
    cuda_match = _CUDA.fullmatch(cuda_version.strip())
    if cuda_match is None:
        return WheelHint(None, f"CUDA version {cuda_version!r} (torch.version.cuda) is not one nvscope can read")
    cuda = (int(cuda_match[1]), int(cuda_match[2]))
    where = f"torch {torch_version} (CUDA {_dotted(cuda)})"

    if system is not None and machine is not None and (system, machine.lower()) != PLATFORM:
        return WheelHint(None, f"nvFuser publishes its wheels for {PLATFORM[0]} {PLATFORM[1]} only, and this is "
                               f"{system} {machine}: build nvFuser from source (github.com/NVIDIA/Fuser)")
    if python is not None and tuple(python[:2]) not in PYTHONS:
        shown = " and ".join(_dotted(p) for p in PYTHONS)
        either = " or ".join(_dotted(p) for p in PYTHONS)
        listed = LISTED.get((cuda, torch))  # a name nvscope has seen published, or only how one would be named
        wheel = (f"the wheel for torch {_dotted(torch)} and CUDA {_dotted(cuda)} is {_name(cuda, torch)}"
                 if listed is not None and not _older(listed) else
                 f"nvscope knows no wheel for torch {_dotted(torch)} and CUDA {_dotted(cuda)}; one would be named "
                 f"{_name(cuda, torch)}: `pip index versions {_name(cuda, torch)}` tells")
        return WheelHint(None, f"nvFuser publishes its wheels for Python {shown} only, and this is Python "
                               f"{_dotted((python[0], python[1]))}, so pip finds none here: use Python {either} "
                               f"({wheel})")

    if ".dev" in suffix:  # a torch nightly: the stable wheels do not fit it
        if cuda in NIGHTLY:
            return WheelHint(f"pip install --pre {_name(cuda)} --extra-index-url https://pypi.nvidia.com",
                             f"{where} is a nightly; {_name(cuda)} is nvFuser's nightly, built against a torch "
                             "nightly of its own day (nvFuser promises no compatibility between nightlies)")
        return WheelHint(None, f"{where} is a nightly, and nvFuser publishes nightlies only for CUDA "
                               f"{', '.join(_dotted(c) for c in sorted(NIGHTLY))}")
    if suffix and not suffix.startswith("rc"):  # 2.8.0a0+git...: built from source
        return WheelHint(None, f"{where} is a pre-release or source build; nvFuser's wheels are built against torch "
                               "releases: build nvFuser from source against this torch (github.com/NVIDIA/Fuser)")

    newest = LISTED.get((cuda, torch))
    if newest is not None and not _older(newest):
        return WheelHint(f"pip install {_name(cuda, torch)}",
                         f"nvFuser's wheel for torch {_dotted(torch)} and CUDA {_dotted(cuda)}")
    if newest is not None:
        return WheelHint(None, f"{_name(cuda, torch)} stops at nvFuser {newest}, older than the {MIN_VERSION} "
                               f"nvscope needs (per-call options): {_upgrade(cuda, torch)}")

    other_cudas = sorted(c for c, t in LISTED if t == torch and not _older(LISTED[(c, t)]))
    if other_cudas:
        names = ", ".join(_name(c, torch) for c in other_cudas)
        return WheelHint(None, f"nvFuser publishes no wheel for torch {_dotted(torch)} with CUDA {_dotted(cuda)}; "
                               f"for torch {_dotted(torch)} it has {names}: install a torch built for one of those "
                               "CUDA versions, then that wheel")
    newest_torch = max(t for _, t in LISTED)
    if torch > newest_torch:
        return WheelHint(None, f"nvscope knows no nvFuser wheel for torch {_dotted(torch)} with CUDA "
                               f"{_dotted(cuda)} (its list, from PyPI in 2026, ends at torch "
                               f"{_dotted(newest_torch)}); one published since would be named "
                               f"{_name(cuda, torch)} (`pip index versions {_name(cuda, torch)}` tells); "
                               f"{_upgrade(cuda, torch)}")
    return WheelHint(None, f"nvFuser publishes no wheel for {where}: {_upgrade(cuda, torch)}")


def _upgrade(cuda: tuple[int, int], torch: tuple[int, int]) -> str:
    """What to install instead: the newest listed torch for this CUDA, or any listed pair."""
    usable = [t for c, t in LISTED if c == cuda and not _older(LISTED[(c, t)])]
    if usable:
        best = max(usable)
        verb = "downgrade" if best < torch else "upgrade"
        return f"{verb} to torch {_dotted(best)} built for CUDA {_dotted(cuda)}, then pip install {_name(cuda, best)}"
    pair = max(((c, t) for c, t in LISTED if not _older(LISTED[(c, t)])), key=lambda p: (p[1], p[0]))
    return (f"nvFuser has no current wheel for CUDA {_dotted(cuda)}; e.g. torch {_dotted(pair[1])} built for CUDA "
            f"{_dotted(pair[0])} with pip install {_name(*pair)}")


def thunder_hint(torch_version: str, installed: bool = True) -> str:
    """The doctor's fix line for a Thunder that fails to import next to torch ``torch_version``, or (``installed``
    false) for none installed: `pip install lightning-thunder` takes a Thunder that does not import with torch 2.13
    or newer, so that line is version-aware too."""
    match = _TORCH.fullmatch(torch_version.strip())
    known = "docs/install-gpu.md lists the torch, nvFuser and Thunder builds known to work together"
    if match is None or (int(match[1]), int(match[2])) < THUNDER_TORCH_BELOW:
        if not installed:
            torch = "" if match else f' "{TORCH_PIN}"'  # else pip would take PyPI's newest torch for Thunder
            return f"pip install --pre \"lightning-thunder=={THUNDER}\"{torch}  (the Thunder known to run nvFuser's " \
                   f"newest wheels{', with the torch they are built for' if torch else ''}; {known})"
        return f"install a Thunder release that supports torch {torch_version}, or a torch that this Thunder " \
               f"supports ({known})"
    newest = max(t for _, t in LISTED)
    return (f"Thunder 0.2.6 and 0.2.7.dev do not import with torch {_dotted(THUNDER_TORCH_BELOW)} or newer (this is "
            f"torch {torch_version}): install torch {_dotted(newest)} for your CUDA (nvFuser's newest wheels are "
            f"built for it), then pip install --pre \"lightning-thunder=={THUNDER}\" ({known})")


def torch_hint() -> str:
    """The doctor's fix line where no torch is installed: the pinned torch (`TORCH_PIN`), not PyPI's newest."""
    return (f"pip install \"{TORCH_PIN}\"  (a CUDA build: the newest torch that nvFuser publishes wheels for and "
            "that Thunder imports with; then `nvscope doctor` names the nvFuser wheel)")


def install_hint() -> str:
    """One line for ``nvscope doctor``: the ``pip install`` line for the installed torch, or why no wheel fits."""
    import importlib.util
    import platform
    import sys
    import warnings

    if importlib.util.find_spec("torch") is None:
        return (f"install a CUDA build of torch first: nvFuser publishes one wheel per torch and CUDA version: "
                f"pip install \"{TORCH_PIN}\"; then `nvscope doctor` prints the pip install line for nvFuser")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torch
    except Exception as error:
        return f"torch fails to import ({type(error).__name__}: {error}): fix torch first, then run nvscope doctor"
    cuda = getattr(getattr(torch, "version", None), "cuda", None)
    hint = nvfuser_wheel(str(torch.__version__), None if cuda is None else str(cuda),
                         python=(sys.version_info[0], sys.version_info[1]), system=platform.system(),
                         machine=platform.machine())
    return hint.reason if hint.command is None else f"{hint.command}  ({hint.reason})"
