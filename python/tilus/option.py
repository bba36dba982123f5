"""Process-wide options under NVIDIA Tilus's names (``tilus.option``), each the same as an
environment variable of docs/environment.md, set from Python:

    tilus.option.cache_dir("./cache")      # TILUS_CACHE_DIR
    tilus.option.bench_repeat(20)          # TILUS_AUTOTUNE_REPEAT
    tilus.option.debug.dump_ir()           # TILUS_DUMP_IR=<cache dir>/ir

They apply to the compiles and autotuning runs that start after the call. Tilus's
``parallel_workers``, ``bench_warmup`` and ``debug.disable_ptxas_opt`` are accepted and recorded
(``get_option`` returns them) but change nothing: the autotuner compiles on its own threads and
times without warmup runs, and NVRTC's ptxas options are fixed (``disable_ptxas_opt(True)``
warns so).
"""
import os
import warnings

from . import _C


def cache_dir(dir_path) -> None:
    """Puts the disk cache (compiled kernels, autotuning results) in ``dir_path`` (a relative
    path is taken from the current directory now), as ``TILUS_CACHE_DIR`` does."""
    path = os.path.abspath(os.fspath(dir_path))
    _C.set_cache_dir(path)
    os.environ["TILUS_CACHE_DIR"] = path  # processes this one starts see the same cache


def bench_repeat(n: int) -> None:
    """Timed runs per config when autotuning (the median counts; default 10), as
    ``TILUS_AUTOTUNE_REPEAT`` does."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"tilus.option.bench_repeat: expects an int >= 1, got {n!r}")
    os.environ["TILUS_AUTOTUNE_REPEAT"] = str(n)


_recorded = {"parallel_workers": os.cpu_count() or 1, "bench_warmup": 5, "debug.disable_ptxas_opt": False}


def _positive(what, n, least):
    if isinstance(n, bool) or not isinstance(n, int) or n < least:
        raise ValueError(f"tilus.option.{what}: expects an int >= {least}, got {n!r}")
    return n


def parallel_workers(n: int) -> None:
    """NVIDIA Tilus's number of parallel compile workers: recorded, no effect (the autotuner
    compiles its configs on threads of its own)."""
    _recorded["parallel_workers"] = _positive("parallel_workers", n, 1)


def bench_warmup(n: int) -> None:
    """NVIDIA Tilus's warmup runs before autotuning timings: recorded, no effect (tilus times
    ``bench_repeat`` runs after one untimed launch)."""
    _recorded["bench_warmup"] = _positive("bench_warmup", n, 0)


class debug:
    """Debugging switches."""

    @staticmethod
    def dump_ir(enable: bool = True) -> None:
        """Writes every kernel's IR after each pass (and its CUDA source or LLVM IR) into
        ``<cache dir>/ir``, one folder per specialization, as ``TILUS_DUMP_IR`` does (an already
        set ``TILUS_DUMP_IR`` keeps its folder); ``enable=False`` stops it."""
        if enable:
            os.environ.setdefault("TILUS_DUMP_IR", os.path.join(_C.cache_dir(), "ir"))
        else:
            os.environ.pop("TILUS_DUMP_IR", None)

    @staticmethod
    def disable_ptxas_opt(enabled: bool = True) -> None:
        """NVIDIA Tilus's switch for ptxas -O0: recorded, no effect (NVRTC compiles with its fixed
        options); enabling it warns."""
        if enabled:
            warnings.warn("tilus.option.debug.disable_ptxas_opt has no effect in tilus: NVRTC's ptxas options are "
                          "fixed", stacklevel=2)
        _recorded["debug.disable_ptxas_opt"] = bool(enabled)


def get_option(name: str):
    """The value of an option: "cache_dir", "bench_repeat", "debug.dump_ir" (the folder, or None
    when off), or one of the recorded ones ("parallel_workers", "bench_warmup",
    "debug.disable_ptxas_opt")."""
    if name == "cache_dir":
        return _C.cache_dir()
    if name == "bench_repeat":
        return int(os.environ.get("TILUS_AUTOTUNE_REPEAT", "10"))
    if name == "debug.dump_ir":
        return os.environ.get("TILUS_DUMP_IR") or None
    if name in _recorded:
        return _recorded[name]
    raise ValueError(f"tilus.option.get_option: unknown option {name!r} (cache_dir, bench_repeat, debug.dump_ir, "
                     f"{', '.join(_recorded)})")
