"""Host-side helpers under NVIDIA Tilus's names (``tilus.utils``): integer arithmetic,
``benchmark_func`` and the torch dtype of a tilus data type (``dtype_to_torch``).

    from tilus.utils import benchmark_func, cdiv
    ms = benchmark_func(lambda: kernel(m, n, k, a, b, c), warmup=5, repeat=20)
"""
import math
import typing as _typing

from . import _C
from ._C import Expr
from .tensor import dtype_from_torch, torch_dtype as dtype_to_torch  # noqa: F401 - NVIDIA Tilus's names
from .testing import _time_calls, _timer
from .tracing import _scalars

_Int = _typing.Union[int, Expr]  # a Python int or an integer kernel scalar


def cdiv(a: _Int, b: _Int) -> _Int:
    """ceil(a / b) for non-negative integers (Python ints or tilus expressions).

    Two Python ints give a Python int; otherwise the result is a kernel expression.
    """
    _scalars("cdiv", a, b)
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return _C.cdiv(a, b)


def idiv(a: int, b: int) -> int:
    """a / b for Python ints that must divide exactly (a ValueError otherwise)."""
    if a % b != 0:
        raise ValueError(f"tilus.utils.idiv: {a} is not divisible by {b}")
    return a // b


def prod(values) -> int:
    """The product of an iterable of ints (1 when empty)."""
    return math.prod(values)


def gcd(a: int, b: int) -> int:
    """The greatest common divisor of two ints."""
    return math.gcd(a, b)


def lcm(a: int, b: int) -> int:
    """The least common multiple of two ints."""
    return a * b // math.gcd(a, b) if a and b else 0


def same_list(a, b) -> bool:
    """True when two sequences have equal lengths and equal elements."""
    return len(a) == len(b) and all(x == y for x, y in zip(a, b))


def is_power_of_two(n: int) -> bool:
    """True for 1, 2, 4, 8, ..."""
    return isinstance(n, int) and n > 0 and n & (n - 1) == 0


def floor_log2(n: int) -> int:
    """The largest k with 2**k <= n (n >= 1)."""
    if n < 1:
        raise ValueError(f"tilus.utils.floor_log2: {n} is not positive")
    return n.bit_length() - 1


def nbytes_from_nbits(nbits: int) -> int:
    """The bytes that ``nbits`` densely packed bits occupy (rounded up)."""
    return (nbits + 7) // 8


def benchmark_func(run_func, warmup: int = 1, repeat: int = 5, clear_l2_cache: bool = True) -> float:
    """The median time of ``run_func()`` in milliseconds over ``repeat`` timed calls, after
    ``warmup`` untimed ones, as NVIDIA Tilus's ``benchmark_func`` measures it. On the GPU (torch
    sees one and tilus can use it) each call is timed with CUDA events on torch's current stream,
    the L2 cache flushed before each when ``clear_l2_cache`` (by writing twice the GPU's L2 size,
    at least 128 MiB); the GPU first sleeps 150,000 cycles per timed call, so that the host
    queues every call before the GPU runs the first and the events time the GPU's work alone,
    not the host's cost of a call. Otherwise (the CPU backend) with the wall clock.
    ``tilus.testing.do_bench`` is the time-budgeted variant with Triton's parameters."""
    if not isinstance(repeat, int) or repeat < 1 or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"tilus.utils.benchmark_func: warmup must be >= 0 and repeat >= 1, got {warmup}, {repeat}")
    torch = _timer(None)
    flush_bytes = 0
    if torch is not None:
        l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0)
        flush_bytes = max(2 * int(l2), 128 * 1024 * 1024)
    times = sorted(_time_calls(torch, run_func, warmup, repeat, None, clear_l2_cache, flush_bytes,
                               hold_cycles=150000 * repeat))
    mid = len(times) // 2
    return times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2
