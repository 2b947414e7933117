"""How long `nvscope check` takes over a tree the size of Thunder's sources, and one ten times larger.

    python benchmarks/check_speed.py                      # synthetic trees (below), in a temporary folder
    python benchmarks/check_speed.py --source /tmp/wild/thunder   # copies of a real tree instead (the primary measure)

Targets (issue 39, on 2 CPU cores as CI has): at most 0.5 s for the Thunder-size tree, 3 s for the larger one.

Each tree is checked once cold, then --repeat rounds that alternate the two ways `nvscope check` reads files: in
this process alone ("serial") and as it chooses ("auto": forked processes from 400 files on), so that a machine
shared with other work slows both alike; the ratio serial/auto is the gain of the processes. Times are wall clock
and CPU time (this process and its children): on a loaded machine the CPU time of the serial run is what its wall
time would be on a quiet one. The load average is printed at the start and the end.

The synthetic tree mixes files as real code does: the lightning-thunder 0.2.6 wheel holds 197 .py files, 4.2 MB,
of which 13 hold a word that a finding needs (they are parsed) and 10 hold findings, and those are its larger files
(tests of the nvFuser executor). So: 600 files, 8 MB (twice the wheel: its git tree is larger), sizes spread from
1 kB to 120 kB, 5% with findings (in their larger half, at a random place in the file), 2% more that only mention
an option in a docstring (parsed, no finding), plus a few shell, YAML and TOML files.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nvscope
from nvscope._check import _files as _check_files
from nvscope._check._files import PARALLEL

FILES, BYTES, FINDINGS, MENTIONS = 600, 8_000_000, 0.05, 0.02

PLAIN = '''
def function_{i}(x, y=None):
    """A function that does something with tensors: {i}."""
    total = 0
    for index in range(len(x)):
        total += x[index] * (y[index] if y is not None else 1)
    if total > {i}:
        raise ValueError(f"too large: {{total}}")
    return {{"total": total, "name": "function_{i}", "values": [1, 2, 3]}}
'''
WITH_OPTIONS = '''
def jit_{i}(fn):
    import thunder
    return thunder.jit(fn, nv_enable_options=["fuse_matmul"], nv_enable_linear=True)

def run_{i}(fd, inputs, enable_options):
    os.environ.setdefault("NVFUSER_DISABLE", "matmul_expr_eval")
    return fd.execute(inputs, _enable_options=enable_options)
'''
MENTION = '''
def compile_{i}(fn, **options):
    """Compile with Thunder; nv_enable_options=[...] passes nvFuser options (see its docs)."""
    return fn
'''


def synthesize(root: Path, seed: int = 0) -> None:
    rng = random.Random(seed)
    # Sizes: a long tail (most modules small, a few large), scaled to BYTES in all.
    weights = sorted(rng.lognormvariate(0, 1.0) for _ in range(FILES))
    scale = BYTES / sum(weights)
    sizes = [min(120_000, max(1_000, int(w * scale))) for w in weights]
    large = list(range(FILES // 2, FILES))  # files with findings are among the larger ones, as in Thunder
    hits = set(rng.sample(large, int(FILES * FINDINGS)))
    mentions = set(rng.sample([n for n in large if n not in hits], int(FILES * MENTIONS)))
    for n, size in enumerate(sizes):
        folder = root / f"pkg{n % 12}" / f"sub{n % 5}"
        folder.mkdir(parents=True, exist_ok=True)
        parts, total, i = ["import os\nimport math\n"], 0, 0
        while total < size:
            block = PLAIN.format(i=n * 1000 + i)
            parts.append(block)
            total += len(block)
            i += 1
        if n in hits or n in mentions:
            parts.insert(rng.randrange(1, len(parts) + 1), (WITH_OPTIONS if n in hits else MENTION).format(i=n))
        (folder / f"module_{n}.py").write_text("".join(parts))
    (root / "run.sh").write_text("#!/bin/sh\nexport NVFUSER_ENABLE=fuse_matmul\npython train.py\n")
    (root / "ci.yml").write_text("env:\n  NVFUSER_DISABLE: fma\nsteps:\n  - run: pytest -q\n")
    (root / "pyproject.toml").write_text('[project]\nname = "bench"\n')


def tree_size(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def once(root: Path, serial: bool) -> tuple[float, float, nvscope.CheckResult]:
    """Wall and CPU seconds (this process and its children) of one check, and its result."""
    _check_files.PARALLEL = 10**9 if serial else PARALLEL
    before = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = nvscope.check([root], nvfuser=">=0.2.35")
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in zip(after, before, strict=True))
    return wall, cpu, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, help="a real tree to copy (default: synthesize one)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPU cores, nvscope {nvscope.__version__}; "
          f"load average at the start {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch) / "x1"
        if args.source is not None:
            shutil.copytree(args.source, base, symlinks=True)
        else:
            synthesize(base)
        large = Path(scratch) / "x10"
        for copy in range(10):
            shutil.copytree(base, large / f"copy{copy}", symlinks=True)
        for label, root, target in (("Thunder-size", base, 0.5), ("10x", large, 3.0)):
            files, size = tree_size(root)
            cold, _, result = once(root, serial=False)
            runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
            for _ in range(args.repeat):
                for serial in (False, True):
                    runs[serial].append(once(root, serial)[:2])
            (auto_wall, auto_cpu), (serial_wall, serial_cpu) = (
                tuple(statistics.median(x) for x in zip(*runs[s], strict=True)) for s in (False, True))
            print(f"{label:>12}: {files} files, {size / 1e6:.1f} MB, {result.read} parsed; cold {cold:.3f} s; "
                  f"median of {args.repeat}: auto {auto_wall:.3f} s wall ({auto_cpu:.3f} s CPU), serial "
                  f"{serial_wall:.3f} s wall ({serial_cpu:.3f} s CPU), serial/auto {serial_wall / auto_wall:.2f}x "
                  f"(target {target} s: {'ok' if auto_wall <= target else 'OVER TARGET'})")
            print(f"{'':>12}  {result.summary()}")
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
