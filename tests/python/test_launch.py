"""Parameters (constants vs runtime), specialization keys, the in-process cache, target
selection and argument kinds; run on the CPU backend (numpy), so they need no GPU."""
import glob
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tilus
from tilus import float32, int32

from conftest import HAS_CPU, HAS_GPU
from future_kernels import Scale

needs_cpu = pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")


@pytest.fixture(autouse=True)
def fresh_kernels(monkeypatch):
    """Each test counts the kernels its own instances compile (equal instances share them)."""
    from tilus import launch
    monkeypatch.setattr(launch, "_shared_kernels", {})
    monkeypatch.setattr(launch, "by_constructor", {})


class AddConst(tilus.Script):
    def __init__(self, block=64):
        super().__init__()
        self.block = block

    def __call__(self, n: int32, bias: int, x: ~float32, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, self.block)]
        self.attrs.warps = 2
        o = self.blockIdx.x * self.block
        v = self.load_global(self.global_view(x, shape=[n]), offsets=[o], shape=[self.block])
        self.store_global(self.global_view(y, shape=[n]), v + bias, offsets=[o])


def test_constants_are_folded_and_runtime_params_are_not():
    text = str(tilus.trace(AddConst(), constants={"bias": 7}))
    assert "kernel AddConst(n: int32, x: float32*, y: float32*)" in text
    assert "constants bias=7" in text and "x0 + float32(7)" in text


@needs_cpu
def test_each_constant_value_and_specialization_compiles_once():
    k = AddConst()
    x = np.arange(208, dtype=np.float32)
    y = np.zeros(208, dtype=np.float32)
    for bias in (1, 2, 1):
        k(208, bias, x, y)
        assert (y == x + bias).all()
    assert len(tilus.compiled_kernels(k)) == 2
    k(199, 1, x, y)  # 199 is not a multiple of 16: a new specialization
    assert len(tilus.compiled_kernels(k)) == 3
    k(48, 1, x, y)   # 48 is, like 208: the same one as before
    assert len(tilus.compiled_kernels(k)) == 3
    k(150, 1, x[1:], y[1:])  # unaligned pointers: another
    assert (y[1:151] == x[1:151] + 1).all()
    keys = list(tilus.compiled_kernels(k))
    assert len(keys) == 4 and (False, ("c", 1), False, False, "cpu") in keys
    # The keys are still those tuples, and say what each entry is.
    key = next(key for key in keys if key == (False, ("c", 1), False, False, "cpu"))
    assert repr(key) == "Specialization(n: not divisible by 16, bias=1, x: not 16-byte aligned, y: not 16-byte " \
                        "aligned; cpu)"
    assert key.params == {"n": False, "bias": ("c", 1), "x": False, "y": False} and key.backend == "cpu"
    assert hash(key) == hash((False, ("c", 1), False, False, "cpu")) and key[-1] == "cpu"


@needs_cpu
def test_instances_with_the_same_attributes_share_their_kernels(monkeypatch):
    """NVIDIA Tilus's examples make a Script for every call (`Kernel()(x, y)` in a function): equal
    plain attributes reuse the compiled kernel; other attributes keep it to the instance."""
    from tilus import launch
    compiles = []
    real = launch._compile
    monkeypatch.setattr(launch, "_compile", lambda script, call: compiles.append(1) or real(script, call))
    x = np.arange(96, dtype=np.float32)
    y = np.zeros(96, dtype=np.float32)
    for _ in range(3):
        AddConst(block=32)(96, 5, x, y)
        assert (y == x + 5).all()
    assert len(compiles) == 1
    AddConst(block=16)(96, 5, x, y)
    assert len(compiles) == 2
    k = AddConst(block=32)
    k.table = np.zeros(4)  # not plain data: its repr need not tell two arrays apart
    k(96, 5, x, y)
    assert len(compiles) == 3


@needs_cpu
def test_divisibility_reaches_the_kernel():
    k = AddConst()
    x = np.arange(64, dtype=np.float32)
    k(64, 0, x, np.zeros(64, dtype=np.float32))
    (_, program), = tilus.compiled_kernels(k).values()
    text = program.text()
    assert "n divisible by 16" in text and "x aligned 16" in text and "y aligned 16" in text, text
    k2 = AddConst()  # the same attributes: k's kernels, and one more for n = 63
    k2(63, 0, x, np.zeros(64, dtype=np.float32))
    assert sorted(key[0] for key in tilus.compiled_kernels(k2)) == [False, True]


@needs_cpu
def test_future_annotations_and_float_constants():
    x = np.linspace(-1, 1, 100).astype(np.float32)
    y = np.zeros_like(x)
    Scale()(100, 2.5, x, y)
    assert np.allclose(y, x * 2.5)
    assert "Scale(n: int32, x: float32*, y: float32*)" in str(tilus.trace(Scale(), constants={"factor": 2.5}))


@needs_cpu
def test_keyword_arguments_and_dlpack_objects():
    class DLPackOnly:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, *args, **kw):
            return self.a.__dlpack__(*args, **kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, dtype=np.float32)
    try:
        import torch  # noqa: F401 - torch.from_dlpack handles the object when present
    except ImportError:
        pass
    AddConst()(n=64, bias=3, x=DLPackOnly(x), y=y)
    assert (y == x + 3).all()


@needs_cpu
def test_target_selection_by_environment(monkeypatch):
    monkeypatch.setenv("TILUS_TARGET", "cpu")
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(32, dtype=np.float32)
    k = AddConst()
    k(32, 1, x, y)
    assert list(tilus.compiled_kernels(k))[0][-1] == "cpu"


@needs_cpu
def test_checked_mode_from_python(monkeypatch):
    monkeypatch.setenv("TILUS_CPU_CHECK", "1")

    class Unchecked(tilus.Script):
        def __call__(self, n: int32, x: ~float32, y: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            s = self.shared_tensor(dtype=float32, shape=[32])
            self.copy_async(self.global_view(x, shape=[n]), s, offsets=[0], check_bounds=False)  # OOB-LINE
            self.store_global(self.global_view(y, shape=[32]), self.load_shared(s), offsets=[0])

    with pytest.raises(tilus.CpuCheckError, match=r"test_launch.py:\d+: copy_async: out-of-bounds access"):
        Unchecked()(20, np.zeros(64, dtype=np.float32), np.zeros(32, dtype=np.float32))


class Axpy(tilus.Script):
    def __call__(self, n: int32, alpha: float32, x: ~float32, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, 128)]
        self.attrs.warps = 4
        o = self.blockIdx.x * 128
        gx, gy = self.global_view(x, shape=[n]), self.global_view(y, shape=[n])
        v = self.load_global(gx, offsets=[o], shape=[128]) * alpha + self.load_global(gy, offsets=[o], shape=[128])
        self.store_global(gy, v, offsets=[o])


class CopyBits(tilus.Script):
    """y = x, both read as 32-bit words through untyped pointers."""

    def __call__(self, n: int32, x: tilus.void_p, y: tilus.void_p):
        self.attrs.blocks = [tilus.cdiv(n, 128)]
        self.attrs.warps = 4
        o = self.blockIdx.x * 128
        gx, gy = self.global_view(x, dtype=tilus.uint32, shape=[n]), self.global_view(y, dtype=tilus.uint32, shape=[n])
        self.store_global(gy, self.load_global(gx, offsets=[o], shape=[128]), offsets=[o])


@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
def test_gpu_fast_path_takes_void_pointers_of_any_dtype():
    """A void_p parameter takes a torch tensor of any dtype on the fast path (quantized kernels
    pass bf16 / fp8 / byte tensors that way), and its byte contract is still checked there."""
    import torch
    k = CopyBits()
    x = torch.arange(1000, device="cuda", dtype=torch.float32)
    y = torch.zeros(1000, device="cuda", dtype=torch.int32)
    k(1000, x, y)
    fast = k.__dict__.get("_tilus_fast")
    assert fast is not None, "a Script with void_p parameters gets the torch fast path"
    y.zero_()
    assert fast((1000, x, y)), "the fast path launched"
    assert torch.equal(y.view(torch.float32), x)
    h = torch.arange(2000, device="cuda", dtype=torch.int16)  # another dtype, the same bytes
    assert fast((1000, h, y))
    assert torch.equal(y.view(torch.int16), h)
    assert not fast((1000, x[:999], y)), "too few bytes: left to the general path"
    with pytest.raises(tilus.ArgumentError):
        k(1000, x[:999], y)


def test_fast_path_entry_is_a_plain_cpython_function():
    """Script.__call__ reaches the fast path through a METH_FASTCALL function, not pybind11's
    dispatcher (issue 18). It takes the call's argument tuple (and keyword dict), answers False for
    what it cannot launch (no kernel for these arguments here), and keeps its path alive on its own."""
    import gc
    params = [(1, "n", tilus.int32, None, False, 0), (2, "alpha", tilus.float32, None, False, 0)]
    fast = tilus._C.FastPath(params, None, None, tilus.Tensor)
    entry = fast.entry
    assert type(entry).__name__ == "builtin_function_or_method"
    assert entry((16, 2.0)) is False and entry((16,)) is False and entry((16, "x")) is False
    assert entry((16,), {"alpha": 2.0}) is False and entry((16, 2.0), {"stream": -1}) is False
    assert entry((16, 2.0), 1) is False  # not a keyword dict: left to the general path
    for bad in [(), (1, 2), ((16, 2.0), None, 1), (16,)]:
        with pytest.raises(TypeError, match="the call's argument tuple"):
            entry(*bad)
    del fast
    gc.collect()
    assert entry((16, 2.0)) is False  # the capsule holds the path


@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
def test_gpu_fast_path_still_checks_every_launch():
    import torch
    k = Axpy()
    x = torch.arange(1000, device="cuda", dtype=torch.float32)
    y = torch.zeros(1000, device="cuda")
    k(1000, 2.0, x, y)
    assert "_tilus_fast" in k.__dict__  # later calls take the fast path
    assert type(k.__dict__["_tilus_fast"]).__name__ == "builtin_function_or_method"
    k(1000, 2.0, x, y)
    assert torch.equal(y, 4 * x)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        k(1000, 1.0, x, y)  # torch's current stream
    k(1000, 1.0, x, y, stream=s)
    s.synchronize()
    assert torch.equal(y, 6 * x)
    k(999, 1.0, x, y)  # another specialization (999 % 16 != 0): compiled, then fast
    k(999, 1.0, x, y)
    assert y[998].item() == 8 * 998 and y[999].item() == 6 * 999
    with pytest.raises(tilus.ArgumentError, match="points to float64 data"):
        k(1000, 1.0, x.double(), y)
    with pytest.raises(tilus.ArgumentError, match="mix host and CUDA"):
        k(1000, 1.0, x.cpu(), y)
    with pytest.raises(tilus.ArgumentError, match="out of the range of int32"):
        k(1 << 33, 1.0, x, y)
    with pytest.raises(tilus.ArgumentError, match="null pointer"):
        k(0, 1.0, torch.empty(0, device="cuda"), y)


class ClusteredAdd(tilus.Script):
    def __init__(self, cluster=(2, 1)):
        super().__init__()
        self.cluster = cluster

    def __call__(self, n: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, 64)]
        self.attrs.warps = 2
        self.attrs.cluster_blocks = list(self.cluster)
        o = self.blockIdx.x * 64
        v = self.load_global(self.global_view(x, shape=[n]), offsets=[o], shape=[64])
        self.store_global(self.global_view(y, shape=[n]), v + 1.0, offsets=[o])


def test_cluster_blocks_attribute():
    assert "cluster [2, 1, 1]" in str(tilus.trace(ClusteredAdd()))
    assert "cluster" not in str(tilus.trace(ClusteredAdd(cluster=[1])))
    too_big = r"test_launch.py:\d+: error: attrs.cluster_blocks: a cluster of 16 blocks"
    with pytest.raises(tilus.CompileError, match=too_big):
        tilus.trace(ClusteredAdd(cluster=(4, 4)))
    with pytest.raises(tilus.CompileError, match=r"attrs.cluster_blocks: dimension 0 is 0, not positive"):
        tilus.trace(ClusteredAdd(cluster=(0,)))


def test_clustered_blocks_run_and_the_grid_is_checked(arrays):
    if arrays.device == "cuda" and tilus._C.device_info()["arch"] != "sm_90a":
        pytest.skip("thread-block clusters need sm_90")
    k = ClusteredAdd()
    x = arrays.rand([200])  # 4 blocks of 64, ragged: 2 clusters
    y = arrays.empty([200])
    k(200, x, y)
    assert (arrays.host(y) == arrays.host(x) + 1).all()
    k(200, x, y)  # again, on the fast path where there is one
    assert (arrays.host(y) == arrays.host(x) + 1).all()
    with pytest.raises(tilus.ArgumentError, match=r"kernel ClusteredAdd: .* is 3, not a multiple of the cluster's 2"):
        k(150, x, y)


@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
@pytest.mark.parametrize("warm", [True, False], ids=["compiled-before", "compiled-during-capture"])
def test_launches_are_captured_into_a_cuda_graph_and_replayed(warm):
    """Launches inside torch.cuda.graph() are recorded on the capture stream (the fast path and
    the general path alike) and each replay runs them again on the tensors' current contents."""
    import torch
    k = Axpy()
    n = 3001
    x = torch.randn(n, device="cuda")
    y = torch.zeros(n, device="cuda")
    z = torch.zeros(n, device="cuda")
    if warm:
        k(n, 1.0, x, y)
        k(n, 1.0, x, y)  # the fast path is registered now
        torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        k(n, 2.0, x, y)  # y += 2x
        k(n, 3.0, y, z)  # z += 3y
    for step in range(3):
        x.copy_(torch.randn(n, device="cuda"))
        y0, z0 = y.clone(), z.clone()
        g.replay()
        torch.cuda.synchronize()
        want_y = y0 + 2 * x
        torch.testing.assert_close(y, want_y)
        torch.testing.assert_close(z, z0 + 3 * want_y)


@needs_cpu
def test_cpu_machine_code_is_cached_on_disk_across_processes(tmp_path):
    # A new process (an autotuned winner's, a test run's) takes a CPU kernel's machine code from
    # the disk cache, as the GPU takes its cubin: no LLVM optimization or code generation.
    code = textwrap.dedent(f"""
        import sys, numpy as np, tilus
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_launch import AddConst
        program = tilus.trace(AddConst(), constants={{"bias": 3}})
        first = tilus._C.compile_cpu(program)
        again = tilus._C.compile_cpu(program)  # linked once per process
        x, y = np.arange(200, dtype=np.float32), np.zeros(200, dtype=np.float32)
        AddConst()(200, 3, x, y)
        assert (y == x + 3).all()
        print(first.from_cache, again.from_cache, round(first.compile_ms))
    """)
    env = dict(os.environ, TILUS_CACHE_DIR=str(tmp_path), TILUS_LOG_LEVEL="debug")

    def run():
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        return r.stdout.split()

    assert run()[:2] == ["False", "True"]
    metas = [open(m).read() for m in glob.glob(str(tmp_path / "kernels" / "*" / "*" / "meta.json"))]
    assert any('"format": "tilus-cpu-object-1"' in m and '"kernel": "AddConst"' in m for m in metas), metas
    assert run()[:2] == ["True", "True"]
    # A damaged entry is not used: compiled again, and written again.
    for f in glob.glob(str(tmp_path / "kernels" / "*" / "*" / "kernel.cubin")):
        with open(f, "r+b") as fh:
            fh.truncate(100)
    assert run()[:2] == ["False", "True"]
    assert run()[:2] == ["True", "True"]


@needs_cpu
def test_cpu_launches_reuse_their_worker_threads_and_survive_a_fork():
    # A launch used to create and join its worker threads (stacks of 64 MiB and more, mapped
    # anew): most of a one-block call's cost. They are kept between launches; a forked child
    # (multiprocessing) starts without the parent's and makes its own.
    code = textwrap.dedent(f"""
        import os, sys, numpy as np
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_launch import AddConst
        def tasks():
            return len(os.listdir("/proc/self/task"))
        from tilus import launch
        x, y = np.arange(64, dtype=np.float32), np.zeros(64, dtype=np.float32)
        k = AddConst()
        launch.prepare(k, (64, 1, x, y), {{}})  # compiled, not launched
        before = tasks()
        k(64, 1, x, y)
        after_one = tasks()
        for _ in range(50):
            k(64, 1, x, y)
        print(after_one > before, tasks() - after_one)
        pid = os.fork()
        if pid == 0:
            z = np.zeros(64, dtype=np.float32)
            k(64, 2, x, z)
            os._exit(0 if (z == x + 2).all() else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "0", "0"], r.stdout


class KeepsViewsOnSelf(tilus.Script):
    """A body that keeps a view on the instance and reads it back later, as FlashDecoding does; the
    sleep lets another thread run in between."""

    def __call__(self, n: int32, x: ~float32, y: ~float32):
        import time
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        self.gx = self.global_view(x, shape=[n])
        time.sleep(0.02)
        self.store_global(self.global_view(y, shape=[n]), self.load_global(self.gx, offsets=[0], shape=[32]), offsets=[0])


def test_threads_tracing_one_instance_do_not_see_each_others_state():
    # (Before tracing was serialized, the second thread's view replaced the first's on self and
    # the first trace failed: "'x' is not defined here".)
    import concurrent.futures
    script = KeepsViewsOnSelf()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        programs = list(pool.map(lambda _: str(tilus.trace(script)), range(4)))
    assert len(set(programs)) == 1 and "global_view" in programs[0]


def test_fast_paths_made_by_many_threads_at_once_do_not_deadlock():
    """The first fast paths of a process, made by 16 threads at once (bench/attention.py compiles
    its kernels so): torch's C shim is looked up under the GIL without a C++ static guard, which a
    thread waiting while holding the GIL would never see released (the bench hung so on the H200).
    In a fresh process with a tiny switch interval, so that the GIL changes hands inside the
    lookup; a hang is a timeout here."""
    pytest.importorskip("torch")
    code = textwrap.dedent("""
        import sys, threading
        sys.setswitchinterval(1e-6)
        import torch
        from tilus import _C
        barrier = threading.Barrier(16)
        def make():
            barrier.wait()
            for _ in range(20):
                _C.FastPath([], torch.Tensor, None, None)
        threads = [threading.Thread(target=make) for _ in range(16)]
        for t in threads: t.start()
        for t in threads: t.join()
        print("made")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "made" in r.stdout, r.stderr[-2000:]
