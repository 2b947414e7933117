"""Shared by the examples: can this machine run real nvFuser fusions through Thunder? How a call is shown."""

from __future__ import annotations


def gpu_stack() -> str | None:
    """None when CUDA, nvFuser and Thunder are all usable here; otherwise what is missing, in words."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device"
    try:
        import thunder
        import thunder.executors.nvfuserex_impl  # noqa: F401
    except Exception as error:  # Thunder 0.2.x does not import with torch >= 2.13; nvFuser may be missing
        return f"Thunder's nvFuser executor is not importable ({type(error).__name__}: {error})"
    return None


def cuda_median_ms(fn, runs: int = 30, warmup: int = 5) -> float:  # type: ignore[no-untyped-def]
    """Median wall time of ``fn()`` on the GPU in milliseconds, measured with CUDA events, one event pair a run."""
    import statistics

    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def kernel_names(fn) -> list[str]:  # type: ignore[no-untyped-def]
    """The CUDA kernels ``fn()`` launches, by name (templates cut), as torch.profiler reports them."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name.split("(")[0].split("<")[0] for e in prof.events() if e.device_type.name == "CUDA"})


def nv_options_call(kwargs: dict[str, object]) -> str:
    """``nv_options(enable=[...], ...)``: the call as a user writes it, for keyword arguments held in a dict."""
    return f"nv_options({', '.join(f'{name}={value!r}' for name, value in kwargs.items())})"
