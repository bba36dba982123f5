"""Ahead-of-time bundles: Scripts compiled for a list of GPU archs and specializations into C
sources that build with any C compiler and run with only the CUDA driver (no NVRTC, no Python,
no tilus). The C++ core writes them (tilus/runtime/aot.h); docs/gpu.md, "Ahead-of-time bundles",
has the contract of the generated functions.

    from tilus import aot
    bundle = aot.Bundle("mylib", archs=["sm_90a", "sm_80"])
    bundle.add(VectorAdd(), name="vector_add")                  # mylib_vector_add(stream, n, a, b, c)
    bundle.add(Matmul(128, 128), name="matmul", constants={"transpose_b": True})
    bundle.write("build/mylib")   # mylib.h, mylib.c, the runtime headers, CMakeLists.txt

Each Script is traced with its compile-time constants, then compiled once per arch and per
specialization: by default two, "all" (every integer argument divisible by 16 and every pointer
16-byte aligned, the fast variant) and "none" (any arguments). The generated function picks the
first variant compiled for the GPU at hand whose specialization the arguments meet.
"""
import re

from . import _C
from ._C import CompileError
from .launch import signature, trace

_DIVISOR = 16  # the one specialization rule (tilus/runtime/jit.h, kSpecializationDivisor)


def _snake(name):
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


class Bundle:
    """A bundle of kernels being built; ``write(directory)`` writes it.

    Args:
        name: a C identifier, the prefix of every generated function (``<name>_<kernel>``).
        archs: the GPU targets to compile every kernel for ("sm_90a", "sm_80", ...), unless
            ``add`` names its own.
    """

    def __init__(self, name, archs=("sm_90a",)):
        self._bundle = _C.AotBundle(name)
        self.name = name
        self.archs = [archs] if isinstance(archs, str) else list(archs)
        self.kernels = []

    def add(self, script, *, name=None, constants=None, specializations=("all", "none"), archs=None, when=None):
        """Compiles ``script`` (an instance of a tilus.Script subclass) into the bundle as the C
        function ``<bundle>_<name>`` (default: the class name in snake case).

        Args:
            constants: values of the compile-time parameters of ``__call__`` (those annotated
                int / float / bool / str), by name.
            specializations: the variants to compile, each "all", "none", or an iterable of the
                names of the integer and pointer parameters it assumes divisible by 16 / 16-byte
                aligned. The generated function tries the most specialized first.
            archs: the GPU targets of this kernel (default: the bundle's).
            when: a size bucket, ``{"m": (1, 16)}``: this Script serves only calls whose integer
                parameters lie in these inclusive ranges (``None`` for an open end). Several
                Scripts (configurations, or whole kernels with the same C arguments) may be
                added under one name, each with its ``when``; the function tries them in the
                order they were added, and the last may have none (any size).

        Raises:
            CompileError: the Script cannot be traced or compiled, a specialization names no
                integer or pointer parameter, or a parameter cannot be passed from C.
        """
        cls = type(script)
        if "_tilus_tuner" in getattr(script, "__dict__", {}):
            raise CompileError(f"tilus.aot: {cls.__name__} is autotuned; a bundle takes one configuration: construct "
                               "the Script with the tuned parameters (its tuner's winner) instead")
        program = trace(script, constants)  # checks the Script and the constants
        sig = signature(cls)
        runtime = {p.name: p for p in sig.params if p.kind != "const"}
        specializable = {n: p.index for n, p in runtime.items() if p.kind == "ptr" or not p.dtype.is_float()}
        facts = []
        for spec in ([specializations] if isinstance(specializations, str) else specializations):
            if spec == "all":
                facts.append({i: _DIVISOR for i in specializable.values()})
            elif spec == "none":
                facts.append({})
            else:
                names = [spec] if isinstance(spec, str) else list(spec)
                bad = [n for n in names if n not in specializable]
                if bad:
                    raise CompileError(f"tilus.aot: {cls.__name__}: specialization {spec!r} names {', '.join(bad)}, "
                                       f"not an integer or pointer parameter (those are: "
                                       f"{', '.join(specializable) or 'none'})")
                facts.append({specializable[n]: _DIVISOR for n in names})
        ranges = []
        for pname, bounds in (when or {}).items():
            p = runtime.get(pname)
            if p is None or p.kind != "scalar" or p.dtype.is_float():
                raise CompileError(f"tilus.aot: {cls.__name__}: when= names {pname!r}, not an integer parameter")
            if not isinstance(bounds, (tuple, list)) or len(bounds) != 2 or \
                    not all(b is None or (isinstance(b, int) and not isinstance(b, bool)) for b in bounds):
                raise CompileError(f"tilus.aot: {cls.__name__}: when={{{pname!r}: {bounds!r}}}: a range is (lo, hi), "
                                   "each an int or None")
            ranges.append((p.index, bounds[0], bounds[1]))
        name = name or _snake(cls.__name__)
        self._bundle.add(name, program, list(archs or self.archs), facts, ranges)
        if f"{self.name}_{name}" not in self.kernels:
            self.kernels.append(f"{self.name}_{name}")
        return self

    def header(self):
        """The bundle's C header: one declaration per kernel, with its variants in a comment."""
        return self._bundle.header()

    def source(self):
        """The bundle's C source: the cubins and the launch functions."""
        return self._bundle.source()

    def write(self, directory):
        """Writes ``<name>.h``, ``<name>.c``, the runtime (``tilus_aot_runtime.h``,
        ``tilus_cu_types.h``) and ``CMakeLists.txt`` into
        ``directory`` (created when missing); returns their paths."""
        return self._bundle.write(str(directory))
