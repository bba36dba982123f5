"""pytest setup: the examples directory on sys.path, and a `device` fixture that runs a test
on the CPU backend (numpy; needs LLVM at build time) and on the GPU (torch; needs a GPU)."""
import os
import sys

import numpy as np
import pytest

import tilus

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))


def _gpu():
    if not tilus.gpu_available():
        return False
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def line_in(path, marker):
    """The number of the first line of file `path` that holds `marker` (and not "line_of")."""
    with open(path) as f:
        for i, text in enumerate(f, 1):
            if marker in text and "line_of" not in text:
                return i
    raise AssertionError(marker)


HAS_GPU = _gpu()
HAS_CPU = tilus.cpu_backend_available()


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    if request.param == "cpu" and not HAS_CPU:
        pytest.skip("no CPU backend (tilus built without LLVM)")
    if request.param == "cuda" and not HAS_GPU:
        pytest.skip("no GPU")
    return request.param


class Arrays:
    """Random arrays on a device: numpy on the host, torch on the GPU."""

    def __init__(self, device, seed=0):
        self.device = device
        self.rng = np.random.default_rng(seed)

    def rand(self, shape, dtype="float32", lo=-2.0, hi=2.0):
        h = self.rng.uniform(lo, hi, size=shape)
        if dtype.startswith("int") or dtype.startswith("uint"):
            h = np.floor(h)
        return self.put(h.astype(dtype))

    def empty(self, shape, dtype="float32"):
        return self.put(np.full(shape, 7, dtype=dtype))

    def put(self, h):
        if self.device == "cpu":
            return np.ascontiguousarray(h)
        import torch
        h = np.ascontiguousarray(h)
        # Bit patterns (bfloat16 as uint16): int16 holds the same bits on every torch version.
        return torch.from_numpy(h.view(np.int16) if h.dtype == np.uint16 else h).cuda()

    @staticmethod
    def host(x):
        if hasattr(x, "detach"):
            import torch
            torch.cuda.synchronize()
            return x.detach().cpu().numpy()
        return x


@pytest.fixture
def arrays(device):
    return Arrays(device)


def local_memory_uses(sass):
    """The SASS lines that use local memory other than a printf's argument buffer (the stores just
    before the vprintf call that reports a failed run-time check, before its trap): a spill or a
    local array. Empty when the kernel keeps everything in registers and shared memory."""
    import re
    lines = [l for l in sass.splitlines() if re.search(r"/\*[0-9a-f]{4,}\*/", l)]
    bad = []
    for i, line in enumerate(lines):
        if re.search(r"\bLDL\b", line):
            bad.append(line.strip())
        elif re.search(r"\bSTL\b", line) and not any("CALL.ABS.NOINC" in l for l in lines[i + 1:i + 16]):
            bad.append(line.strip())
    return bad
