"""What a call compiles to, without launching it: the CUDA source, PTX, SASS, register use and
the IR after every pass, for the specialization that call would use (docs/python.md, "Seeing
what runs").

    k = Matmul()
    print(k.source(m, n, k_, a, b, c))        # CUDA C++
    print(k.ir(m, n, k_, a, b, c)["select_instructions"])

The arguments are checked and specialized exactly as a launch does (16-divisible integers,
16-byte aligned pointers, compile-time constants); nothing runs. `arch=` picks the GPU target
("sm_80", "sm_90a", ...); the default is the present GPU's, else sm_90a.
"""
import glob
import os
import shutil
import subprocess
import tempfile

from . import _C
from ._C import CompileError, Error
from .launch import arguments, bind, signature, specialized


def _specialized(script, args, kw):
    """(the traced, specialized Program, the Call) of a call's arguments."""
    tuner = script.__dict__.get("_tilus_tuner")
    if tuner is not None:
        winner = tuner.winner_for(args, kw)
        if winner is None:
            raise CompileError(f"{type(script).__name__} is autotuned and not tuned for these arguments yet: call it "
                               "once first, or construct it with every tuned argument given")
        script = winner
    sig = signature(type(script))
    call = arguments(sig, *bind(sig, args, kw))
    return specialized(script, call), call


def _gpu_arch(arch):
    if arch:
        return arch
    return _C.device_info()["arch"] if _C.gpu_available() else "sm_90a"


def _cuobjdump():
    for d in [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]:
        if d and os.access(os.path.join(d, "bin", "cuobjdump"), os.X_OK):
            return os.path.join(d, "bin", "cuobjdump")
    found = shutil.which("cuobjdump")
    if found:
        return found
    # NVIDIA's PyPI package (pip install nvidia-cuda-cuobjdump) puts it in nvidia/cu<N>/bin.
    try:
        import nvidia
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for tool in sorted(glob.glob(os.path.join(root, "cu*", "bin", "cuobjdump")), reverse=True):
            if os.access(tool, os.X_OK):
                return tool
    return None


class Artifacts:
    """The methods of tilus.Script that show what a call compiles to (see the module's doc)."""

    def source(self, *args, arch=None, **kw):
        """The CUDA C++ source the call ``self(*args, **kw)`` compiles (for ``arch``)."""
        program, _ = _specialized(self, args, kw)
        return _C.compile_cuda_source(program, _gpu_arch(arch))

    def ptx(self, *args, arch=None, **kw):
        """The PTX that NVRTC makes of the call's CUDA source (needs NVRTC, not a GPU)."""
        program, _ = _specialized(self, args, kw)
        return _C.cuda_ptx(program, _gpu_arch(arch))

    def compiled(self, *args, arch=None, **kw):
        """The call's GPU kernel, compiled (through the disk cache) but not launched: a
        ``tilus._C.GpuKernel`` with ``source``, ``cubin``, ``arch``, and ptxas's ``registers``,
        ``stack_frame_bytes``, ``spill_store_bytes``, ``spill_load_bytes`` (per thread)."""
        program, _ = _specialized(self, args, kw)
        return _C.compile_gpu(program, _gpu_arch(arch))

    def sass(self, *args, arch=None, **kw):
        """The machine code (SASS) of the call's kernel, from ``cuobjdump -sass`` (the CUDA
        toolkit's; looked for in $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin, PATH)."""
        tool = _cuobjdump()
        if tool is None:
            raise Error("tilus: .sass() needs cuobjdump from the CUDA toolkit, and none was found in $CUDA_HOME/bin, "
                        "$CUDA_PATH/bin, /usr/local/cuda/bin, on PATH or in NVIDIA's Python package (install the "
                        "toolkit's, or pip install nvidia-cuda-cuobjdump)")
        kernel = self.compiled(*args, arch=arch, **kw)
        with tempfile.TemporaryDirectory(prefix="tilus-sass-") as d:
            path = os.path.join(d, "kernel.cubin")
            with open(path, "wb") as f:
                f.write(kernel.cubin)
            r = subprocess.run([tool, "-sass", path], capture_output=True, text=True)
        if r.returncode != 0:
            raise Error(f"tilus: cuobjdump -sass failed ({r.returncode}): {r.stderr.strip()}")
        return r.stdout

    def ir(self, *args, arch=None, **kw):
        """The tile IR of the call after every pass, as an ordered dict {stage: text}: "traced"
        first, then one entry per pass in pipeline order. For the call's backend (the CPU for
        host arrays) unless ``arch`` names a GPU target or "cpu"."""
        program, call = _specialized(self, args, kw)
        target = arch or ("cpu" if call.backend == "cpu" else _gpu_arch(None))
        return dict(_C.pass_stages(program, target))
