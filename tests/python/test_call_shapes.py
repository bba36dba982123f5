"""Every call shape takes the C++ fast path after its first call (issue 41): a new instance per
call, autotuned classes, compile-time constants, float and bool scalars, bf16 / int / sub-byte
tensors, keyword arguments, stream=, numpy and DLPack arrays; the fast path's launch counter
shows which calls it took, and its results and errors are the general path's. On the CPU
backend (numpy arrays and CPU torch tensors), so no GPU is needed."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tilus
from tilus import bfloat16, boolean, float32, int4, int32, int8

from conftest import HAS_CPU

needs_cpu = pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")


@pytest.fixture(autouse=True)
def fresh_kernels(monkeypatch):
    from tilus import launch, tuning
    monkeypatch.setattr(launch, "_shared_kernels", {})
    monkeypatch.setattr(launch, "by_constructor", {})
    monkeypatch.setattr(tuning, "_tuners", {})
    monkeypatch.setattr(tuning.Tuner, "timer", staticmethod(lambda config, repeat: float(config["warps"])))


class Scale(tilus.Script):
    def __init__(self, block=64):
        super().__init__()
        self.block = block

    def __call__(self, n: int32, alpha: float32, flip: boolean, x: ~float32, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, self.block)]
        self.attrs.warps = 2
        o = self.blockIdx.x * self.block
        v = self.load_global(self.global_view(x, shape=[n]), offsets=[o], shape=[self.block])
        s = tilus.select(flip, -alpha, alpha)
        self.store_global(self.global_view(y, shape=[n]), v * s, offsets=[o])


@tilus.autotune("warps", [1, 2])
@tilus.autotune("block", [32, 64])
class Gating(tilus.Script):
    """NVIDIA Tilus's decode idiom: autotuned, made anew for every call, a bf16 array and Python
    int and float compile-time constants."""

    def __init__(self, warps, block):
        super().__init__()
        self.warps, self.block = warps, block

    def __call__(self, y: ~float32, a: ~bfloat16, n: int, beta: float):
        self.attrs.blocks = [tilus.cdiv(n, self.block)]
        self.attrs.warps = self.warps
        o = self.blockIdx.x * self.block
        v = self.load_global(self.global_view(a, shape=[n]), offsets=[o], shape=[self.block]).to(float32)
        self.store_global(self.global_view(y, shape=[n]), v * beta, offsets=[o])


class Widen(tilus.Script):
    def __call__(self, n: int32, x: ~int4, y: ~int8):
        self.attrs.blocks = [tilus.cdiv(n, 64)]
        self.attrs.warps = 2
        o = self.blockIdx.x * 64
        v = self.load_global(self.global_view(x, shape=[n]), offsets=[o], shape=[64])
        self.store_global(self.global_view(y, shape=[n]), v.to(int8), offsets=[o])


def _launches(script):
    shared = script.__dict__.get("_tilus_shared")
    tuner = script.__dict__.get("_tilus_tuner")
    fast = (tuner.shared if tuner is not None else shared).fast
    return 0 if fast is None else fast.launches


@needs_cpu
def test_new_instance_per_call_shares_one_fast_path():
    x = np.arange(100, dtype=np.float32)
    y = np.zeros(100, dtype=np.float32)
    Scale()(100, 2.0, False, x, y)  # compiles
    Scale()(100, 2.0, False, x, y)  # the class's first call made its signature: registered now
    k = Scale()
    assert "_tilus_fast" in k.__dict__, "an instance made like an earlier one joins its fast path at once"
    before = _launches(k)
    for alpha in (3.0, 4, 5.5):  # a float parameter takes ints too
        Scale()(100, alpha, False, x, y)
        np.testing.assert_array_equal(y, x * alpha)
    Scale()(100, 1.5, True, x, y)  # a bool scalar (1 is not 16-divisible like 0: compiled once more)
    Scale()(100, 2.5, True, x, y)
    np.testing.assert_array_equal(y, -2.5 * x)
    assert _launches(k) == before + 4
    assert len(tilus.compiled_kernels(k)) == 2
    other = Scale(block=32)  # other constructor arguments: other kernels, not this path
    other(100, 1.0, False, x, y)
    assert len(tilus.compiled_kernels(other)) == 1 and _launches(k) == before + 4


@needs_cpu
def test_changing_an_attribute_leaves_the_shared_kernels():
    x = np.arange(100, dtype=np.float32)
    y = np.zeros(100, dtype=np.float32)
    Scale()(100, 2.0, False, x, y)
    k = Scale()
    k(100, 2.0, False, x, y)
    k.block = 32  # no longer what Scale() makes: its own kernels from now on
    assert "_tilus_fast" not in k.__dict__
    k(100, 3.0, False, x, y)
    np.testing.assert_array_equal(y, 3 * x)
    assert len(tilus.compiled_kernels(k)) == 1 and len(tilus.compiled_kernels(Scale())) == 1
    assert tilus.compiled_kernels(k) != tilus.compiled_kernels(Scale())


@needs_cpu
def test_keywords_stream_and_array_kinds_take_the_fast_path():
    torch = pytest.importorskip("torch")
    x = np.arange(100, dtype=np.float32)
    y = np.zeros(100, dtype=np.float32)
    k = Scale()
    k(100, 2.0, False, x, y)
    n0 = _launches(k)
    k(n=100, alpha=3.0, flip=False, x=x, y=y)
    np.testing.assert_array_equal(y, 3 * x)
    k(100, 4.0, False, y=y, x=x, stream=0)  # stream= is checked, and ignored by the CPU backend
    np.testing.assert_array_equal(y, 4 * x)
    xt, yt = torch.arange(100, dtype=torch.float32), torch.zeros(100)
    k(100, 5.0, False, xt, yt)  # CPU torch tensors: the same kernel (same specialization)
    assert torch.equal(yt, 5 * xt)

    class DLPackOnly:  # an array known only by __dlpack__
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    k(100, 6.0, False, DLPackOnly(x), DLPackOnly(y))
    np.testing.assert_array_equal(y, 6 * x)
    assert _launches(k) == n0 + 4
    # Misuse is the general path's error, whichever path the call tried first.
    with pytest.raises(tilus.ArgumentError, match="argument 'alpha' is given both by position and by name"):
        k(100, 1.0, False, x, y, alpha=2.0)
    with pytest.raises(tilus.ArgumentError, match="stream= must be a CUDA stream"):
        k(100, 1.0, False, x, y, stream=-1)
    with pytest.raises(tilus.ArgumentError, match="points to float64 data"):
        k(100, 1.0, False, x.astype(np.float64), y)
    with pytest.raises(tilus.ArgumentError, match="read-only"):
        r = y.copy()
        r.flags.writeable = False
        k(100, 1.0, False, x, r)
    assert _launches(k) == n0 + 4


@needs_cpu
def test_the_fast_path_checks_the_argument_contract():
    """A too-small array is refused on the fast path as on the general one (CPU kernels run
    check_arguments at every launch)."""
    x = np.arange(100, dtype=np.float32)
    y = np.zeros(100, dtype=np.float32)
    k = Scale()
    k(100, 2.0, False, x, y)
    with pytest.raises(tilus.ArgumentError, match="reaches 100 elements"):
        k(100, 2.0, False, x[:96], y)
    with pytest.raises(tilus.ArgumentError, match="not C-contiguous"):
        k(48, 2.0, False, x[::2], y)


@needs_cpu
def test_autotuned_new_instance_with_constants_finds_its_winner_on_the_fast_path():
    torch = pytest.importorskip("torch")
    a = torch.randn(100).to(torch.bfloat16)
    y = torch.zeros(100)
    Gating()(y, a, 100, 0.5)  # tunes (the timer above: 1 warp wins) and compiles the winner
    assert torch.equal(y, a.float() * 0.5)
    g = Gating()
    assert "_tilus_tuner" in g.__dict__
    tuner = g.__dict__["_tilus_tuner"]
    key_calls = []
    real_key = tuner._key
    tuner._key = lambda *a, **k: key_calls.append(1) or real_key(*a, **k)
    try:
        n0 = _launches(g)
        for _ in range(3):
            Gating()(y, a, 100, 0.5)
        assert _launches(g) == n0 + 3 and key_calls == [], "the winner found without the tuning key"
        Gating()(y, a, 100, 0.25)  # another constant: a new key (the stored winner), then fast
        Gating()(y, a, 100, 0.25)
        assert torch.equal(y, a.float() * 0.25)
        assert key_calls == [1] and _launches(g) == n0 + 4
        Gating()(y, a, 60, 0.25)  # another int constant
        assert torch.equal(y[:60], a[:60].float() * 0.25)
    finally:
        tuner._key = real_key
    winner = tuner.winners[next(iter(tuner.winners))]
    assert winner.warps == 1


@needs_cpu
def test_sub_byte_tilus_tensors_take_the_fast_path():
    x = tilus.randint(-8, 8, [100], tilus.int4, device="cpu")
    y = np.zeros(100, dtype=np.int8)
    k = Widen()
    k(100, x, y)
    n0 = _launches(k)
    Widen()(100, x, y)
    np.testing.assert_array_equal(y, x.numpy())
    assert _launches(k) == n0 + 1
    with pytest.raises(tilus.ArgumentError, match="int4"):
        Widen()(100, tilus.zeros([100], tilus.int8, device="cpu"), y)


_COMPILE = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np, tilus
from test_call_shapes import Scale
x = np.zeros(4096, dtype=np.float32)
c = Scale(block=128).compiled(4096, 2.0, False, x, x, arch="sm_90a")
print("from_cache", c.from_cache, flush=True)
"""


def _compiler(cache):
    env = dict(os.environ, TILUS_CACHE_DIR=str(cache), TILUS_NVRTC_PCH="0")
    code = _COMPILE.format(tests=os.path.dirname(os.path.abspath(__file__)))
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_many_processes_compile_one_kernel_once(tmp_path):
    """Ranks of a distributed job calling one kernel: the first to take the cache entry's lock
    compiles it (NVRTC, compile-only here), the others wait and load what it stored."""
    if not tilus._C.nvrtc_available():
        pytest.skip("no NVRTC")
    procs = [_compiler(tmp_path / "cache") for _ in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    results = sorted(line for out, _ in outs for line in out.splitlines() if line.startswith("from_cache"))
    assert results == ["from_cache False"] + ["from_cache True"] * 3, results
    assert len(list((tmp_path / "cache" / "locks").iterdir())) == 1


def test_a_crashed_lock_holder_leaves_no_stale_lock(tmp_path):
    """A process killed while it holds an entry's lock (flock: released with the process) does not
    block the next compile of that entry, which waited while it lived."""
    if not tilus._C.nvrtc_available():
        pytest.skip("no NVRTC")
    import signal
    import time
    first = _compiler(tmp_path / "probe")  # finds the entry's lock file name
    assert first.communicate(timeout=300)[0].strip() == "from_cache False"
    (name,) = [p.name for p in (tmp_path / "probe" / "locks").iterdir()]
    lock = tmp_path / "cache" / "locks" / name
    lock.parent.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, time
        f = open({str(lock)!r}, "w")
        fcntl.flock(f, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(120)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        waiter = _compiler(tmp_path / "cache")
        time.sleep(3)
        assert waiter.poll() is None, "the compile waits while another process holds the entry's lock"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    out, err = waiter.communicate(timeout=300)
    assert waiter.returncode == 0, err
    assert out.strip() == "from_cache False"


def test_torch_tensors_read_through_torchs_c_shim_as_through_python():
    """torch.Tensor and nn.Parameter are read through torch's C shim (FastPath's TorchShim), a
    subclass through its Python attributes: both readings say the same of every layout."""
    torch = pytest.importorskip("torch")

    class Sub(torch.Tensor):  # read through Python (its attributes may be its own)
        pass

    params = [(0, "x", float32, torch.float32, True, 0), (1, "n", int32, None, False, 0),
              (2, "alpha", float32, None, False, 0), (0, "h", bfloat16, torch.bfloat16, True, 0)]
    fast = tilus._C.FastPath(params, torch.Tensor, None, tilus.Tensor)
    h = torch.zeros(8, dtype=torch.bfloat16)
    for t in (torch.randn(4, 6), torch.randn(6, 4).t(), torch.randn(3, 5)[:, ::2], torch.randn(1, 5, 1),
              torch.nn.Parameter(torch.randn(3)), torch.randn(2, 3)[1:]):
        got, at, device = fast.read_arrays([t, 7, 0.5, h])
        want, _, _ = fast.read_arrays([t.as_subclass(Sub), 7, 0.5, h])
        assert (at, device) == (4, None)  # no CUDA tensor
        assert got[1] == 7 and got[2] == 0.5
        for x, y in ((got[0], want[0]), (got[3], want[3])):
            assert (x.address, x.bytes, x.shape, x.byte_strides, x.device) == \
                   (y.address, y.bytes, y.shape, y.byte_strides, y.device)
        assert got[0].address == t.data_ptr() and got[0].shape == list(t.shape)
        assert got[0].byte_strides == [s * 4 for s in t.stride()] and got[0].bytes == t.numel() * 4
    got, _, _ = fast.read_arrays([torch.randn(4, dtype=torch.float64), True, 1, torch.zeros(2)])
    assert got == [None, None, None, None]  # another dtype, a bool, an int for a float: arguments.py reads them


@needs_cpu
def test_the_general_path_keeps_its_checked_arguments_in_the_core():
    """A call of torch tensors and plain numbers is read and checked in one C++ pass, and its
    arguments stay there (an ArgList) for the launch: the same values, facts and result as the
    Python reading of the same call (numpy arrays, a list of KernelArgs), and the contract still
    checked at the launch."""
    torch = pytest.importorskip("torch")
    from tilus import launch
    from tilus.arguments import signature
    x = torch.arange(100, dtype=torch.float32)
    y = torch.zeros(100)
    k = Scale()
    compiled, call = launch.prepare(k, (100, 2.0, True, x, y), {})
    assert isinstance(call.values, tilus._C.ArgList) and len(call.values) == 5
    assert call.values[0] == 100 and call.values[1] == 2.0 and call.values[2] == 1
    assert call.values[3].address == x.data_ptr() and call.values[4].bytes == 400
    with pytest.raises(IndexError):
        call.values[5]
    launch.run(compiled, call)
    assert torch.equal(y, -2.0 * x)
    xn, yn = x.numpy().copy(), np.zeros(100, dtype=np.float32)
    compiled_py, call_py = launch.prepare(k, (100, 2.0, True, xn, yn), {})
    assert isinstance(call_py.values, list) and compiled_py is compiled
    assert call_py.key == call.key and call_py.facts == call.facts
    assert call.facts == signature(Scale).kernel.check(list(call.values))[2]
    launch.run(compiled_py, call_py)
    np.testing.assert_array_equal(yn, -2.0 * xn)
    with pytest.raises(tilus.ArgumentError, match="reaches 100 elements"):
        _, short = launch.prepare(k, (100, 2.0, True, x[:96], y), {})
        launch.run(compiled, short)
