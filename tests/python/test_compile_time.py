"""Issue 18's compile-time machinery from Python: the process's precompiled device header (made
once, reused, the same cubin, removed when the process exits, a file changed under the process
warned about once and not used), the runtime keeping it beside the cubin cache, and
bench/compile_time.py."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tilus
from tilus import _C, float16, float32, int32

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
pytestmark = pytest.mark.skipif(not _C.nvrtc_available() or _C.nvrtc_version() < 12080,
                                reason="needs NVRTC 12.8 or newer (precompiled headers)")

SRC = ('#include "tilus/device.h"\n'
       'extern "C" __global__ void k(float* x) { x[threadIdx.x] = tilus::exp(x[threadIdx.x]); }\n')


def test_pch_is_made_once_and_reused(tmp_path):
    d = str(tmp_path / "pch")
    runs = [_C.nvrtc_compile(SRC, "k", "sm_90a", pch_dir=d) for _ in range(3)]
    assert [r["pch"] for r in runs] == ["created", "used", "used"]
    assert runs[0]["pch_file"] == runs[2]["pch_file"]
    assert os.listdir(d) == [os.path.basename(runs[0]["pch_file"])]
    assert runs[0]["pch_file"] in _C.nvrtc_pch_files()
    plain = _C.nvrtc_compile(SRC, "k", "sm_90a")
    assert plain["pch"] == "none" and plain["pch_file"] == ""
    assert runs[0]["cubin"] == runs[1]["cubin"] == plain["cubin"]
    assert all(r["log"] == "" for r in runs)


def test_pch_goes_when_the_process_exits(tmp_path):
    d = str(tmp_path / "pch")
    code = ("import os, sys\nfrom tilus import _C\n"
            f"r = _C.nvrtc_compile({SRC!r}, 'k', 'sm_90a', pch_dir=sys.argv[1])\n"
            "print(r['pch'], os.path.exists(r['pch_file']))\n")
    out = subprocess.run([sys.executable, "-c", code, d], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["created", "True"]
    assert os.listdir(d) == []


def test_changed_pch_file_is_not_used_and_said_once(tmp_path, capfd):
    d = str(tmp_path / "pch")
    first = _C.nvrtc_compile(SRC, "k", "sm_90a", pch_dir=d)
    assert first["pch"] == "created"
    with open(first["pch_file"], "r+b") as f:  # garbage every 4 KB, same size
        size = os.path.getsize(first["pch_file"])
        for at in range(1000, size, 4096):
            f.seek(at)
            f.write(b"\x5a")
    capfd.readouterr()
    again = _C.nvrtc_compile(SRC, "k", "sm_90a", pch_dir=d)  # NVRTC would crash reading it
    assert again["pch"] == "created" and again["cubin"] == first["cubin"]
    assert _C.nvrtc_compile(SRC, "k", "sm_90a", pch_dir=d)["pch"] == "used"
    err = capfd.readouterr().err
    assert err.count("was changed by something other than this process") == 1, err


def test_a_pch_that_cannot_be_written_falls_back_with_one_warning(tmp_path):
    # A cache directory with no room (a full file system; here a file-size limit of 1 MiB, which
    # NVRTC's PCH exceeds and the compile itself does not need): the compiles go on without a
    # PCH, and say so once. In a child process: the limit is the process's.
    d = str(tmp_path / "pch")
    code = ("import resource, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))\n"
            "from tilus import _C\n"
            f"runs = [_C.nvrtc_compile({SRC!r}, 'k', 'sm_90a', pch_dir=sys.argv[1]) for _ in range(3)]\n"
            f"plain = _C.nvrtc_compile({SRC!r}, 'k', 'sm_90a')\n"
            "print([r['pch'] for r in runs], all(r['cubin'] == plain['cubin'] for r in runs),\n"
            "      all(r['log'] == '' for r in runs))\n")
    r = subprocess.run([sys.executable, "-c", code, d], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["['none',", "'none',", "'none']", "True", "True"], r.stdout
    assert r.stderr.count("tilus:") == 1, r.stderr
    assert "NVRTC could not make the precompiled device header" in r.stderr and "compiling without one" in r.stderr, \
        r.stderr


def test_a_source_error_with_a_pch_is_the_sources(tmp_path):
    bad = SRC.replace("tilus::exp", "tilus::no_such_function")
    d = str(tmp_path / "pch")
    for _ in range(2):
        with pytest.raises(tilus.Error, match="no_such_function") as e:
            _C.nvrtc_compile(bad, "k", "sm_90a", pch_dir=d)
        assert "precompiled" not in str(e.value)
    assert _C.nvrtc_compile(SRC, "k", "sm_90a", pch_dir=d)["pch"] == "created"  # the PCH was not blamed


def test_runtime_keeps_the_pch_beside_the_cubin_cache(tmp_path, monkeypatch):
    from vector_add import VectorAdd
    from softmax import Softmax
    monkeypatch.delenv("TILUS_NVRTC_PCH", raising=False)
    _C.set_cache_dir(str(tmp_path))
    try:
        assert _C.nvrtc_pch_dir() == str(tmp_path / "pch")
        _C.compile_gpu(tilus.trace(VectorAdd()), "sm_90a")
        _C.compile_gpu(tilus.trace(Softmax()), "sm_90a")
        mine = [f for f in _C.nvrtc_pch_files() if f.startswith(str(tmp_path))]
        assert len(mine) == 1 and os.path.exists(mine[0]), _C.nvrtc_pch_files()
        monkeypatch.setenv("TILUS_NVRTC_PCH", "0")
        assert _C.nvrtc_pch_dir() == ""
    finally:
        _C.set_cache_dir("")


def test_bench_compile_time_runs(tmp_path):
    out = tmp_path / "figures.json"
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "compile_time.py"), "--only", "py/vector_add",
                    "--repeat", "1", "--json", str(out), "--nvrtc-option=-DTILUS_BENCH_OPTION=1"], check=True,
                   capture_output=True, text=True,
                   env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    figures = json.loads(out.read_text())
    row, = figures["kernels"]
    assert row["kernel"] == "py/vector_add"
    assert figures["nvrtc_options"] == ["-DTILUS_BENCH_OPTION=1"] and row["sass_bytes"] > 0
    assert figures["driver_cache"] is False  # real compiles, not the driver's compute cache
    for mode in ("full", "cold", "warm"):
        assert row[mode]["total"] > 0 and row[mode]["front_end"] >= 0 and row[mode]["ptxas"] >= 0


def test_extra_nvrtc_options_follow_tilus_options():
    """nvrtc_compile's extra_options reach NVRTC after tilus's own options (before the header
    variant's defines); a bad one is NVRTC's error."""
    base = _C.nvrtc_compile(SRC, "k", "sm_90a")["options"]
    r = _C.nvrtc_compile(SRC, "k", "sm_90a", extra_options=["-DTILUS_EXTRA=1"])
    defines = [o for o in base if o.startswith("-DTILUS_DEVICE_")]
    assert r["options"] == [o for o in base if o not in defines] + ["-DTILUS_EXTRA=1"] + defines
    with pytest.raises(Exception, match="--no-such-option"):
        _C.nvrtc_compile(SRC, "k", "sm_90a", extra_options=["--no-such-option"])


class SlotLoops(tilus.Script):
    """Register tensors named as the emitter's own C names (tilus_s, tilus_acc) and as its old
    loop variables (i, j, s, acc), elementwise work whose slots line up (one loop each) and one
    whose operand repeats a row (a slot map that is not affine: one line per slot), an mma.sync
    dot and a SIMT dot."""

    def __call__(self, n: int32, x: ~float32, y: ~float32, z: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, 64)]
        self.attrs.warps = 2
        g = self.global_view(x, dtype=float32, shape=[n, 16])
        tilus_s = self.load_global(g, offsets=[self.blockIdx.x * 64, 0], shape=[64, 16])
        i = tilus_s * 2.0
        w = self.load_global(g, offsets=[0, 0], shape=[16, 16])
        tilus_acc = self.dot(i.to(float16), w.to(float16), self.register_tensor(dtype=float32, shape=[64, 16], init=0.0))
        row = self.load_global(g, offsets=[0, 0], shape=[1, 16])
        j = tilus_acc + row
        self.store_global(self.global_view(y, dtype=float32, shape=[n, 16]), j, offsets=[self.blockIdx.x * 64, 0])
        s = self.load_global(g, offsets=[self.blockIdx.x * 64, 0], shape=[64, 16])
        acc = self.dot(s, w, self.register_tensor(dtype=float32, shape=[64, 16], init=0.0))
        self.store_global(self.global_view(z, dtype=float32, shape=[n, 16]), acc, offsets=[self.blockIdx.x * 64, 0])


def test_register_slots_are_one_loop_and_names_stay_apart(device, arrays):
    import re
    program = tilus.trace(SlotLoops())
    program.specialize({0: 16, 1: 16, 2: 16, 3: 16})
    src = _C.compile_cuda_source(program, "sm_90a")
    # The Script's names that are the emitter's own get a prefix; the others are kept.
    assert "v_tilus_s[" in src and "v_tilus_acc[" in src and "float i[" in src and "float j[" in src, src
    assert not re.search(r"\btilus_(s|acc)\[", src), src
    # Lined-up slots: one unrolled loop per instruction, no statement per slot.
    assert re.search(r"#pragma unroll\n\s*for \(int tilus_s = 0; tilus_s < 16; \+\+tilus_s\) "
                     r"i\[tilus_s\] = \(v_tilus_s\[tilus_s\] \* 2\.0f\);", src), src
    assert not re.search(r"\bi\[1\] = ", src), src
    # The row operand's slots repeat (0 1 0 1 2 3 2 3 ...): one line per slot.
    assert "j[0] = (v_tilus_acc[0] + row[0]);" in src and "j[2] = (v_tilus_acc[2] + row[0]);" in src, src
    assert "tilus_acc = tilus_acc +" in src and "for (int tilus_k = 0;" in src, src  # the SIMT dot's own names
    if _C.nvrtc_available():
        assert _C.nvrtc_compile(src, program.kernel_name, "sm_90a")["cubin"]
    n = 80
    xs = arrays.rand((n, 16))
    y, z = arrays.empty((n, 16)), arrays.empty((n, 16))
    SlotLoops()(n, xs, y, z)
    xh = arrays.host(xs)
    w = xh[:16]
    ref_y = (xh * 2).astype(np.float16).astype(np.float32) @ w.astype(np.float16).astype(np.float32) + xh[0:1]
    np.testing.assert_allclose(arrays.host(y), ref_y, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(arrays.host(z), xh @ w, rtol=1e-4, atol=1e-4)
