"""Process-wide options under NVIDIA Tilus's names (``tilus.option``), each the same as an
environment variable of docs/environment.md, set from Python:

    tilus.option.cache_dir("./cache")      # TILUS_CACHE_DIR
    tilus.option.bench_repeat(20)          # TILUS_AUTOTUNE_REPEAT
    tilus.option.debug.dump_ir()           # TILUS_DUMP_IR=<cache dir>/ir

They apply to the compiles and autotuning runs that start after the call. Tilus's
``parallel_workers``, ``bench_warmup`` and ``debug.disable_ptxas_opt`` have no counterpart here.
"""
import os

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


def get_option(name: str):
    """The value of an option: "cache_dir", "bench_repeat" or "debug.dump_ir" (the folder, or
    None when off)."""
    if name == "cache_dir":
        return _C.cache_dir()
    if name == "bench_repeat":
        return int(os.environ.get("TILUS_AUTOTUNE_REPEAT", "10"))
    if name == "debug.dump_ir":
        return os.environ.get("TILUS_DUMP_IR") or None
    raise ValueError(f"tilus.option.get_option: unknown option {name!r} (cache_dir, bench_repeat, debug.dump_ir)")
