"""Every call shape of bench/launch_overhead.py takes the C++ fast path on a GPU target (issue 41),
checked without a GPU: bench/launch_host_cost.py launches each shape through a CUDA driver that
does nothing (bench/null_cuda.c) and counts, per shape, the calls its fast path launched against
the launches the driver saw; --check fails when any call missed the fast path. Not a timed test:
only the counts are asserted. Also: Script.__call__ and the metaclass's __call__ are C method
descriptors (tilus._C.script_launch_call / script_construct_call) that keep a function's face."""
import inspect
import os
import shutil
import subprocess
import sys

import pytest

import tilus
from tilus import float32, int32

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.mark.skipif(shutil.which("cc") is None or not tilus._C.nvrtc_available(),
                    reason="needs a C compiler (to build the null CUDA driver) and NVRTC")
def test_every_call_shape_takes_the_fast_path():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    env.pop("TILUS_TARGET", None)
    env.pop("TILUS_FAST_PATH", None)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "launch_host_cost.py"), "--launches", "50",
                        "--rounds", "1", "--check"], env=env, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    if "No module named 'torch'" in out:
        pytest.skip("torch is not installed")
    assert r.returncode == 0, out
    rows = {line[:62].strip(): line[62:].split() for line in r.stdout.splitlines()[2:] if "/" in line}
    for shape in ("reused instance", "new instance per call", "keyword arguments", "stream=", "bf16 + float scalar",
                  "Tilus idiom (new autotuned instance, bf16, float constants)", "DLPack arrays",
                  "__cuda_array_interface__ arrays (cupy's shape)"):
        assert rows[shape][1] == "50/50", f"{shape}: {rows[shape]}\n{out}"  # the counted loop of 50 calls
    assert rows["general path (no fast path)"][1] == "0/50", out
    assert "MISSED" not in out


class Axpy(tilus.Script):
    def __call__(self, n: int32, alpha: float32, x: ~float32, y: ~float32):
        """y = alpha * x over n elements (never traced here)."""
        self.attrs.blocks = [1]
        self.attrs.warps = 1


def test_script_call_keeps_a_functions_face():
    call = Axpy.__dict__["__call__"]
    assert type(call).__name__ == "ScriptCall"
    assert Axpy.__call__ is call  # from the class: the descriptor itself
    assert call.__doc__ == "y = alpha * x over n elements (never traced here)."
    assert call.__wrapped__ is Axpy._tilus_body
    k = Axpy()
    bound = k.__call__
    assert bound.__self__ is k and bound.__func__ is call
    assert list(inspect.signature(k).parameters) == ["n", "alpha", "x", "y"]
    assert type(type(Axpy).__dict__["__call__"]).__name__ == "ScriptCall"
    assert str(inspect.signature(Axpy)) == "(*args, **kw)"  # the metaclass's, as when it was a Python function


def test_script_call_reports_bad_calls_as_before():
    k = Axpy()
    with pytest.raises(tilus.ArgumentError, match="takes 4 arguments"):
        k(1, 2.0)
    with pytest.raises(tilus.ArgumentError, match="has no parameter 'z'"):
        k(1, 2.0, None, None, z=1)
    with pytest.raises(TypeError):
        Axpy.__call__()  # no instance
    with tilus.launch.skipped_launches():  # nothing runs, not even the argument checks
        assert k(1, 2.0) is None
    assert tilus._C.skip_launches(0) == 0


def test_instances_made_alike_share_after_the_first(monkeypatch):
    from tilus import launch
    monkeypatch.setattr(launch, "_shared_kernels", {})
    monkeypatch.setattr(launch, "by_constructor", {})

    class Made(tilus.Script):
        def __init__(self, block, scale=1.0):
            super().__init__()
            self.block, self.scale = block, scale

        def __call__(self, n: int32, x: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 1

    Made._tilus_signature = launch.signature(Made)  # as after a first call
    a = Made(64)
    shared = launch.shared_of(a)
    launch.by_constructor[(Made, (64,), (int,))] = shared
    b = Made(64)  # the C construction: the same Shared at once
    assert b.__dict__["_tilus_shared"] is shared and b.block == 64
    c = Made(64, scale=2.0)  # keywords: the Python construction (a new key)
    assert c.scale == 2.0 and c.__dict__.get("_tilus_shared") is not shared
    d = Made(32)
    assert "_tilus_shared" not in d.__dict__ or d.__dict__["_tilus_shared"] is not shared
    with pytest.raises(TypeError):
        Made([1], 2, 3)  # the constructor's own error
