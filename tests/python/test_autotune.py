"""Autotuning without a GPU (the C++ tuner through tilus._C): spaces and their errors, keys and
buckets, the persisted entries (stale and corrupt ones retune), a parallel compile-only tuning
of the matmul space with a fake timer, Python constants of any kind as config values, and
tuning on the CPU backend."""
import os

import numpy as np
import pytest

import tilus
from tilus import tuning as A
from tilus import float16, float32, int32

from matmul_autotune import AutotunedMatmul


def test_space_is_the_product_and_fixed_arguments_are_not_tuned():
    configs = A.space_of(AutotunedMatmul, {})
    assert len(configs) == 16
    assert {"block_m": 128, "block_n": 128, "warps": 4, "stages": 3} in configs
    fixed = A.space_of(AutotunedMatmul, {"stages": 3})
    assert len(fixed) == 8 and all("stages" not in c for c in fixed)
    assert A.space_of(AutotunedMatmul, {"block_m": 64, "block_n": 64, "warps": 4, "stages": 2}) == [{}]


def test_space_errors_name_the_decorator_line():
    with pytest.raises(tilus.CompileError, match=r"test_autotune.py:\d+: autotune: K.__init__ has no parameter 'bk'"):
        @tilus.autotune("bk", [16, 32])
        class K(tilus.Script):
            def __init__(self, bm):
                super().__init__()
    with pytest.raises(tilus.CompileError, match=r"value \(1, 2, 3\) has 3 entries, expected 2"):
        tilus.autotune("a, b", [(1, 2, 3)])
    with pytest.raises(tilus.CompileError, match="an empty list"):
        tilus.autotune("a", [])
    with pytest.raises(tilus.CompileError, match="already tuned"):
        @tilus.autotune("a", [1])
        @tilus.autotune("a, b", [(1, 2)])
        class K2(tilus.Script):
            def __init__(self, a, b):
                super().__init__()


def test_buckets_and_keys():
    assert [tilus._C.tune_bucket(n) for n in (0, 1, 2, 3, 100, 128, 129, 4096)] == [0, 1, 2, 4, 128, 128, 256, 4096]
    ptr = [tilus._C.KernelArg.pointer(a, float16, 1 << 20, "cuda") for a in (256, 512, 1024)]
    texts = A.Tuner(AutotunedMatmul, {}, ("f", 1)).texts

    def key(sizes, pointers=ptr, arch="sm_90a", configs=texts, fixed={}, constants={}):
        return tilus._C.tune_key("m.K", list(sizes) + pointers, arch, tilus._C.tune_space_id(configs), fixed, constants)

    k1 = key([100, 200, 300])
    assert "sizes=[128,256,512]" in k1 and "device=compile-only arch=sm_90a" in k1
    assert "nvrtc=" in k1 and f"tilus={tilus.__version__}" in k1
    assert key([127, 129, 301]) == k1  # the same buckets and facts: one key
    for other in (key([100, 200, 300], ptr[:2] + [tilus._C.KernelArg.pointer(1028, float16, 64, "cuda")]),
                  key([100, 200, 300], arch="sm_80"), key([100, 200, 300], configs=texts[:8]),
                  key([100, 200, 300], fixed={"block_k": "32"}), key([100, 200, 300], constants={"c": "'x'"})):
        assert other != k1


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(tilus._C, "cache_dir", lambda: str(tmp_path))
    monkeypatch.setattr(A, "_tuners", {})  # as in a new process: nothing tuned in memory
    return tmp_path


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
def test_parallel_compile_only_tuning_with_a_fake_timer(cache_dir, monkeypatch, capsys):
    timed = []

    def fake_timer(config, repeat):
        timed.append(config)
        return config["block_m"] * 0.01 + config["stages"] * 0.001 + config["warps"] * 0.0001

    monkeypatch.setattr(A.Tuner, "timer", staticmethod(fake_timer))
    monkeypatch.setattr(A.Tuner, "compile_only_arch", "sm_90a")
    m, n, k = 1000, 1000, 1000
    a = np.zeros((m, k), np.float16)
    b = np.zeros((k, n), np.float16)
    c = np.zeros((m, n), np.float16)
    kernel = AutotunedMatmul()
    kernel(m, n, k, a, b, c)
    assert len(timed) == 16
    files = list((cache_dir / "autotune").iterdir())
    assert len(files) == 1 and files[0].suffix == ".txt"  # no temporary left behind
    assert files[0].read_text().startswith("tilus-autotune 3\n")
    key, = kernel._tilus_tuner.winners
    entry = tilus._C.load_tune_entry(key, str(cache_dir))
    assert entry.winner == {"block_m": "64", "block_n": "64", "warps": "4", "stages": "2"}
    assert "sizes=[1024,1024,1024]" in entry.key and "device=compile-only arch=sm_90a" in entry.key
    assert len(entry.results) == 16 and all(ms is not None for _, ms, _ in entry.results)
    assert tilus._C.load_tune_entry(key + " driver=2", str(cache_dir)) is None  # another key: retune
    # A new instance in a new process (no tuner in memory) with a size in the same bucket: the
    # stored winner, no tuning.
    monkeypatch.setattr(A, "_tuners", {})
    monkeypatch.setattr(tilus.launch, "by_constructor", {})
    timed.clear()
    AutotunedMatmul()(1020, 1000, 999, a, b, c)
    assert timed == []
    capsys.readouterr()
    tilus.autotune_report()
    out = capsys.readouterr().out
    assert "AutotunedMatmul" in out and "* block_k" not in out and "* block_m=64 block_n=64 stages=2 warps=4" in out
    # A corrupt or truncated entry is ignored and rewritten by the next tuning (in a new process).
    files[0].write_text(files[0].read_text()[:100])
    monkeypatch.setattr(A, "_tuners", {})
    monkeypatch.setattr(tilus.launch, "by_constructor", {})
    AutotunedMatmul()(1000, 1000, 1000, a, b, c)
    assert len(timed) == 16
    assert tilus._C.load_tune_entry(key, str(cache_dir)).winner == entry.winner


@tilus.autotune("block, scale", [(32, (1, 2)), (64, (3, 4))])
@tilus.autotune("mode", ["add", "sub"])
@tilus.autotune("twice", [True, False])
class AnyValues(tilus.Script):
    """A space of Python constants that are not ints: strings, bools, tuples."""

    def __init__(self, block, scale, mode, twice):
        super().__init__()
        self.block, self.scale, self.mode, self.twice = block, scale, mode, twice

    def __call__(self, n: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, self.block)]
        self.attrs.warps = 1
        o = self.blockIdx.x * self.block
        v = self.load_global(self.global_view(x, shape=[n]), offsets=[o], shape=[self.block])
        one = float(self.scale[1] - self.scale[0])
        v = v + one if self.mode == "add" else v - (-one)
        if self.twice:
            v = v * 2.0 - v
        self.store_global(self.global_view(y, shape=[n]), v, offsets=[o])


@pytest.mark.skipif(not __import__("conftest").HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
def test_any_python_constants_are_stored_as_text_and_mapped_back(cache_dir, monkeypatch):
    best = {"block": 64, "scale": (3, 4), "mode": "sub", "twice": False}
    seen = []

    def fake_timer(config, repeat):
        seen.append(config)
        return 0.5 if config == best else 1.0

    monkeypatch.setattr(A.Tuner, "timer", staticmethod(fake_timer))
    x = np.arange(200, dtype=np.float32)
    y = np.zeros_like(x)
    kernel = AnyValues()
    kernel(200, x, y)
    assert (y == x + 1).all()
    assert len(seen) == 8 and best in seen
    (key, winner), = kernel._tilus_tuner.winners.items()
    assert (winner.block, winner.scale, winner.mode, winner.twice) == (64, (3, 4), "sub", False)
    assert "device=cpu" in key
    entry = tilus._C.load_tune_entry(key, str(cache_dir))
    assert entry.winner == {"block": "64", "scale": "(3, 4)", "mode": "'sub'", "twice": "False"}
    seen.clear()
    again = AnyValues(mode="sub")  # a fixed argument: another space and key
    again(200, x, y)
    assert len(seen) == 4 and all("mode" not in c for c in seen)
    seen.clear()
    AnyValues()(200, x, y)  # the stored text maps back to the Python values
    assert seen == []


@pytest.mark.skipif(not __import__("conftest").HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
def test_cpu_backend_tuning_times_every_config_with_the_wall_clock(cache_dir, monkeypatch):
    monkeypatch.setenv("TILUS_AUTOTUNE_REPEAT", "2")
    monkeypatch.setattr(A, "_reports", {})
    x = np.arange(300, dtype=np.float32)
    y = np.zeros_like(x)
    AnyValues(scale=(1, 2), twice=True)(300, x, y)
    assert (y == x + 1).all()
    entry, = tilus.autotune_report(file=open(os.devnull, "w"))
    assert len(entry.results) == 4 and all(ms is not None and ms > 0 for _, ms, _ in entry.results)
    assert entry.compile_s > 0 and entry.tuning_s >= entry.compile_s


@tilus.autotune("warps", [1, 2, 4])
class AccumulateInPlace(tilus.Script):
    """y += x: a kernel that reads what it writes (NVIDIA Tilus's recurrent-state update)."""

    def __init__(self, warps):
        super().__init__()
        self.warps = warps

    def __call__(self, n: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, 128)]
        self.attrs.warps = self.warps
        gx, gy = self.global_view(x, shape=[n]), self.global_view(y, shape=[n])
        v = self.load_global(gx, offsets=[self.blockIdx.x * 128], shape=[128])
        w = self.load_global(gy, offsets=[self.blockIdx.x * 128], shape=[128])
        self.store_global(gy, v + w, offsets=[self.blockIdx.x * 128])


def test_tuning_runs_on_copies_of_what_the_kernel_writes(cache_dir, monkeypatch, arrays):
    """The candidates' launches must not touch the caller's arrays: only the winner's call does."""
    monkeypatch.setenv("TILUS_AUTOTUNE_REPEAT", "3")
    n = 1000
    x = np.arange(n, dtype=np.float32)
    y0 = np.full(n, 0.5, np.float32)
    y = arrays.put(y0.copy())
    AccumulateInPlace()(n, arrays.put(x), y)
    np.testing.assert_array_equal(arrays.host(y), y0 + x)


@pytest.mark.skipif(not __import__("conftest").HAS_GPU, reason="no GPU")
def test_autotuned_matmul_on_the_gpu(cache_dir, monkeypatch):
    import torch
    monkeypatch.setenv("TILUS_AUTOTUNE_REPEAT", "2")
    calls = []
    real = A.Tuner.tune

    def spy(self, *a, **k):
        calls.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(A.Tuner, "tune", spy)
    m, n, k = 300, 260, 190
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    AutotunedMatmul()(m, n, k, a, b, c)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)
    assert len(calls) == 1
    c.zero_()
    AutotunedMatmul()(m, n, k, a, b, c)  # a new instance: the persisted winner, no tuning
    assert len(calls) == 1
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)


def test_one_name_takes_tuple_values_whole():
    """NVIDIA Tilus's quantized matmul tunes autotune("warp_spatial", [(1, 4), (2, 2)]): for one
    name, each value is one point, tuples included; several names take one tuple per point."""

    @tilus.autotune("warp_spatial", [(1, 4), (2, 2), (4, 1)])
    @tilus.autotune("a, b", [(1, (2, 3))])
    class Spatial(tilus.Script):
        def __init__(self, warp_spatial, a, b):
            super().__init__()

        def __call__(self, n: int32):
            self.attrs.blocks = [1]

    assert sorted(Spatial._tilus_space.names) == ["a", "b", "warp_spatial"]
    assert sorted(Spatial._tilus_values["warp_spatial"].values()) == [(1, 4), (2, 2), (4, 1)]
    assert Spatial._tilus_values["b"] == {"(2, 3)": (2, 3)}


@tilus.autotune("block", [32, 48, 64])
class PicksBlock(tilus.Script):
    """48 is refused by the constructor, as NVIDIA Tilus's examples refuse tiles their warps
    cannot split."""

    def __init__(self, block):
        super().__init__()
        if block % 32:
            raise ValueError(f"block {block} is not a multiple of 32")
        self.block = block

    def __call__(self, n: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, self.block)]
        self.attrs.warps = 1
        o = self.blockIdx.x * self.block
        v = self.load_global(self.global_view(x, shape=[n]), offsets=[o], shape=[self.block])
        self.store_global(self.global_view(y, shape=[n]), v + 1.0, offsets=[o])


@pytest.mark.skipif(not __import__("conftest").HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
def test_a_config_its_constructor_refuses_is_skipped(cache_dir, monkeypatch, capfd):
    monkeypatch.setattr(A.Tuner, "timer", staticmethod(lambda config, repeat: 1.0 if config["block"] == 64 else 2.0))
    x = np.arange(100, dtype=np.float32)
    y = np.zeros_like(x)
    PicksBlock()(100, x, y)
    assert (y == x + 1).all()
    err = capfd.readouterr().err
    assert "skipped 1 of 3 configs" in err
    assert "block=48: PicksBlock.__init__ raised ValueError: block 48 is not a multiple of 32" in err


class DebugScheduled(PicksBlock):
    """NVIDIA Tilus's debug_schedule: the class runs with this config instead of its space (its
    flash_attention_v3 example sets one)."""
    debug_schedule = dict(block=64)


def test_a_debug_schedule_replaces_the_space():
    assert A.space_of(PicksBlock, {}) == [{"block": 32}, {"block": 48}, {"block": 64}]
    assert A.space_of(DebugScheduled, {}) == [{"block": 64}]
    with pytest.raises(tilus.CompileError, match="the caller fixes block, which the class's debug_schedule also sets"):
        A.space_of(DebugScheduled, {"block": 32})


@pytest.mark.skipif(not __import__("conftest").HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
def test_a_debug_scheduled_class_tunes_only_that_config(cache_dir, monkeypatch):
    timed = []
    monkeypatch.setattr(A.Tuner, "timer", staticmethod(lambda config, repeat: timed.append(config) or 1.0))
    monkeypatch.setattr(A, "_reports", {})
    x = np.arange(100, dtype=np.float32)
    y = np.zeros_like(x)
    DebugScheduled()(100, x, y)
    assert (y == x + 1).all()
    assert timed and all(c == {"block": 64} for c in timed)
    entry, = tilus.autotune_report(file=open(os.devnull, "w"))
    assert entry.winner == {"block": "64"} and len(entry.results) == 1


@pytest.mark.skipif(not __import__("conftest").HAS_GPU, reason="no GPU")
def test_examples_timed_configs_do_not_time_the_host_building_arguments():
    """common.timed_configs (the tuner of the W4A16 and decode examples) times the launch, not the
    call that builds its arguments: a configuration whose call sleeps 5 ms on the host still times
    a tiny kernel at well under a millisecond, and its order against a cheap twin is not decided by
    that host time."""
    import time
    import torch
    from common import timed_configs
    x = torch.zeros(1024, device="cuda")

    class Launch:
        def compiled(self, *args):
            return None

        def __call__(self, y):
            y.add_(1)

    def call(cfg):
        if cfg == "slow host":
            time.sleep(0.005)
        return Launch(), (x,)

    times = dict((cfg, ms) for ms, cfg in timed_configs(["cheap", "slow host"], call, repeat=5))
    assert times["slow host"] < 1.0, times
    assert times["cheap"] < 1.0, times
