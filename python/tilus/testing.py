"""Benchmarking helpers.

    ms = tilus.testing.do_bench(lambda: kernel(m, n, k, a, b, c))

``do_bench`` takes the name and parameters of Triton's ``triton.testing.do_bench`` so that
benchmarks move between the two unchanged. ``requires`` marks tests that need a GPU
architecture, under NVIDIA Tilus's names:

    @tilus.testing.requires.nvgpu_sm90
    def test_tma(): ...
"""
import functools
import math
import time

from . import _C
from . import target as _target

_MODES = ("min", "max", "mean", "median", "all")


def _quantile(sorted_times, q):
    """The q-quantile (0 <= q <= 1) of sorted values, interpolated linearly between ranks."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"do_bench: quantile {q} is not in [0, 1]")
    at = q * (len(sorted_times) - 1)
    lo, hi = math.floor(at), math.ceil(at)
    return sorted_times[lo] + (sorted_times[hi] - sorted_times[lo]) * (at - lo)


def _summary(times, quantiles, return_mode):
    ordered = sorted(times)
    if quantiles is not None:
        out = [_quantile(ordered, q) for q in quantiles]
        return out[0] if len(out) == 1 else out
    if return_mode == "all":
        return list(times)
    if return_mode == "min":
        return ordered[0]
    if return_mode == "max":
        return ordered[-1]
    if return_mode == "median":
        return _quantile(ordered, 0.5)
    return sum(times) / len(times)


def _torch_cuda():
    """torch, when it can time CUDA work with events; else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _clear_grads(grad_to_none):
    if grad_to_none is not None:
        for t in grad_to_none:
            t.grad = None


def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean", *, device=None):
    """The run time of ``fn()`` in milliseconds.

    ``fn`` first runs for about ``warmup`` ms (not measured), then about ``rep`` ms of separate
    calls are each timed. On the GPU (``device="cuda"``) each call is timed with CUDA events on
    torch's current stream after the L2 cache is flushed; on the CPU (``device="cpu"``, the CPU
    backend's kernels return when done) with the wall clock. ``device`` defaults to "cuda" when
    torch sees a GPU and tilus can use it, else "cpu".

    Returns, by ``return_mode``, the "min", "max", "mean" (default) or "median" time, or "all"
    times as a list; with ``quantiles`` (a list of numbers in [0, 1]) the times at those
    quantiles instead (a single number for one quantile). ``grad_to_none`` (a list of tensors)
    has their ``.grad`` reset before every call, as in Triton.
    """
    if return_mode not in _MODES:
        raise ValueError(f"do_bench: return_mode must be one of {', '.join(_MODES)}, got {return_mode!r}")
    if device not in (None, "cuda", "cpu"):
        raise ValueError(f"do_bench: device must be 'cuda' or 'cpu', got {device!r}")
    timer = _timer(device)
    # Five calls estimate one's time; the ms budgets become call counts.
    estimate = sum(_time_calls(timer, fn, 0, 5, None, True)) / 5
    estimate = max(estimate, 1e-6)
    n_warmup, n_rep = max(1, int(warmup / estimate)), max(1, int(rep / estimate))
    return _summary(_time_calls(timer, fn, n_warmup, n_rep, grad_to_none, True), quantiles, return_mode)


def _timer(device):
    """torch (CUDA events) when the calls are to be timed on the GPU, None for the wall clock.
    device None: the GPU when torch sees one and tilus can use it."""
    torch = _torch_cuda() if device != "cpu" and _C.gpu_available() else None
    if device == "cuda" and torch is None:
        raise RuntimeError("do_bench(device='cuda') needs torch with CUDA and a GPU tilus can use")
    return torch


def _time_calls(torch, fn, n_warmup, n_rep, grad_to_none, flush_l2, flush_bytes=256 * 1024 * 1024, hold_cycles=0):
    """The times in ms of n_rep calls of fn after n_warmup untimed ones: CUDA events around each
    call (the L2 cache flushed before each when flush_l2, by writing flush_bytes) with torch, the
    wall clock without. hold_cycles > 0: a GPU sleep of that many cycles before the first timed
    call, so that the host queues every timed call before the GPU reaches it and the events time
    the GPU's work alone (NVIDIA Tilus's benchmark_func)."""
    if torch is None:
        for _ in range(n_warmup):
            fn()
        times = []
        for _ in range(n_rep):
            _clear_grads(grad_to_none)
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000.0)
        return times
    cache = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda") if flush_l2 else None
    for _ in range(n_warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    torch.cuda.synchronize()
    for i in range(n_rep):
        _clear_grads(grad_to_none)
        if cache is not None:
            cache.zero_()  # larger than any L2
        if i == 0 and hold_cycles > 0:
            torch.cuda._sleep(hold_cycles)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _requires(needed):
    """A test decorator: the test runs where the current target supports ``needed`` and is skipped,
    saying why, elsewhere (NVIDIA Tilus compiles it without running instead)."""

    def decorator(test):
        @functools.wraps(test)
        def wrapper(*args, **kw):
            current = _target.get_current_target()
            if not current.supports(needed):
                import pytest
                pytest.skip(f"needs a GPU of {needed} (the current target is {current})")
            return test(*args, **kw)

        return wrapper

    return decorator


class requires:
    """Test decorators (pytest) for the GPU a test needs: ``@tilus.testing.requires.nvgpu_sm90``
    runs the test on an sm_90 GPU or newer and skips it elsewhere (the CPU backend included)."""
    nvgpu_sm80 = staticmethod(_requires(_target.nvgpu_sm80))
    nvgpu_sm90 = staticmethod(_requires(_target.nvgpu_sm90))
    nvgpu_sm90a = staticmethod(_requires(_target.nvgpu_sm90a))
    nvgpu_sm100 = staticmethod(_requires(_target.nvgpu_sm100))
    nvgpu_sm100a = staticmethod(_requires(_target.nvgpu_sm100a))
