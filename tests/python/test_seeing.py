"""Issue 19, seeing what runs and a first hour that works: Script.source/ptx/sass/ir/compiled
for the specialization a call would use, TILUS_DUMP_IR with a folder per specialization, ptxas's
register and spill counts, the GIL released while the CPU backend compiles and runs, Ctrl-C
stopping a spinning CPU kernel, tilus.testing.do_bench and tilus.visualize_layout. Nothing here
needs a GPU (NVRTC compiles for sm_90a without one); the CPU-backend cases skip without LLVM."""
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import tilus
from tilus import _C, float32, int32

from conftest import HAS_CPU

needs_cpu = pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")


def line_of(marker):
    """The line of this file where `marker` stands."""
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if marker in text and "line_of(" not in text)
needs_nvrtc = pytest.mark.skipif(not _C.nvrtc_available(), reason="tilus built without NVRTC")


class Scale(tilus.Script):
    def __init__(self, factor=2.0):
        super().__init__()
        self.factor = factor

    def __call__(self, n: int32, x: ~float32, y: ~float32):
        # 4 elements per thread: 16-byte vectors where n % 16 == 0 says they are aligned
        self.attrs.blocks = [tilus.cdiv(n, 512)]
        self.attrs.warps = 4
        o = self.blockIdx.x * 512
        xs = self.load_global(self.global_view(x, shape=[n]), offsets=[o], shape=[512])
        self.store_global(self.global_view(y, shape=[n]), xs * self.factor, offsets=[o])


def arrays(n):
    return np.arange(n, dtype=np.float32), np.zeros(n, dtype=np.float32)


def test_source_is_the_cuda_of_the_calls_specialization():
    x, y = arrays(256)
    divisible = Scale().source(256, x, y)
    ragged = Scale().source(250, x, y)
    assert "__global__" in divisible and "Scale" in divisible
    # n % 16 == 0 is a specialization: its source differs from the ragged call's.
    assert divisible != ragged
    assert "3.0" in Scale(3.0).source(256, x, y) and "3.0" not in divisible  # the instance's hyperparameter
    assert (y == 0).all(), "source() must not launch"


def test_ir_lists_every_pass_in_order():
    x, y = arrays(200)
    stages = Scale().ir(200, x, y, arch="sm_90a")
    assert list(stages) == ["traced"] + list(_C.pass_names())
    assert "load_global" in stages["traced"]
    assert "lowering:" in stages["select_instructions"]
    assert "lowering:" not in stages["traced"]


def test_artifacts_check_arguments_like_a_launch():
    x, _ = arrays(64)
    with pytest.raises(tilus.ArgumentError):
        Scale().source(64, x, "not an array")


@needs_nvrtc
def test_ptx_and_resources_from_nvrtc():
    x, y = arrays(256)
    ptx = Scale().ptx(256, x, y, arch="sm_90a")
    assert ".entry" in ptx and ".target sm_90a" in ptx
    k = Scale().compiled(256, x, y, arch="sm_90a")
    assert k.arch == "sm_90a"
    assert 0 < k.registers <= 255  # ptxas's report, or the cubin's record when NVRTC leaves the report out
    assert k.stack_frame_bytes == 0  # the report's, or the cubin's record without one
    if k.spill_store_bytes >= 0:  # reported (NVRTC on the GPU machine leaves some reports out)
        assert k.spill_store_bytes == 0 and k.spill_load_bytes == 0
    else:
        assert k.spill_store_bytes == -1 and k.spill_load_bytes == -1
    assert len(k.cubin) > 0


@needs_nvrtc
def test_sass_is_the_machine_code_or_says_what_is_missing():
    from tilus.artifacts import _cuobjdump
    x, y = arrays(256)
    if _cuobjdump() is None:
        with pytest.raises(tilus.Error, match="needs cuobjdump from the CUDA toolkit"):
            Scale().sass(256, x, y, arch="sm_90a")
        pytest.skip("no cuobjdump here: only its error was checked")
    sass = Scale().sass(256, x, y, arch="sm_90a")
    assert "Function" in sass and "EXIT" in sass


@needs_cpu
def test_dump_ir_keeps_a_folder_per_specialization(tmp_path):
    script = textwrap.dedent(f"""
        import sys, numpy as np
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_seeing import Scale
        for n in (256, 250):
            x, y = np.ones(n, np.float32), np.zeros(n, np.float32)
            Scale()(n, x, y)
            assert (y == 2).all()
        Scale(3.0)(256, np.ones(256, np.float32), np.zeros(256, np.float32))
    """)
    env = dict(os.environ, TILUS_DUMP_IR=str(tmp_path), TILUS_TARGET="cpu")
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=300)
    folders = sorted(os.listdir(tmp_path))
    # n divisible by 16 or not, and a different hyperparameter: three folders, none overwritten.
    assert len(folders) == 3, folders
    assert sum("-n16-" in f for f in folders) == 2, folders
    for f in folders:
        files = sorted(os.listdir(tmp_path / f))
        assert files[0] == "00_traced.tir" and len([f for f in files if f.endswith(".tir")]) == len(_C.pass_names()) + 1


class Spin(tilus.Script):
    """Loops while `spin` is nonzero: a kernel that never ends by itself."""

    def __call__(self, spin: int32, y: ~int32):
        self.attrs.blocks = [2]
        self.attrs.warps = 1
        t = self.register_tensor(dtype=int32, shape=[32], init=1)
        while spin != 0:
            self.store_global(self.global_view(y, shape=[32]), t, offsets=[0])


class Count(tilus.Script):
    """y[0..32) = rounds, after `rounds` iterations of a loop (a kernel that runs a while)."""

    def __call__(self, rounds: int32, y: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        acc = self.register_tensor(dtype=int32, shape=[32], init=0)
        for _ in self.range(rounds):
            acc = acc + 1
        self.store_global(self.global_view(y, shape=[32]), acc, offsets=[0])


@needs_cpu
def test_ctrl_c_stops_a_spinning_cpu_kernel():
    y = np.zeros(32, np.int32)
    Spin()(0, y)  # compiled; returns at once
    main = threading.get_ident()
    timer = threading.Timer(0.3, lambda: signal.pthread_kill(main, signal.SIGINT))
    start = time.perf_counter()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        Spin()(1, y)
    timer.cancel()
    assert time.perf_counter() - start < 10
    assert (y == 1).all()  # it ran until interrupted
    # The kernel is usable afterwards.
    z = np.zeros(32, np.int32)
    Count()(5, z)
    assert (z == 5).all()


def ticks_while(work):
    """How many 1 ms sleeps this thread completes while `work()` runs in another thread (a
    call that held the GIL throughout would leave it a tick or two)."""
    worker = threading.Thread(target=work)
    ticks = 0
    worker.start()
    while worker.is_alive():
        ticks += 1
        time.sleep(0.001)
    worker.join()
    return ticks


@needs_cpu
def test_gil_is_released_while_a_cpu_kernel_runs():
    k = Count()
    y = np.zeros(32, np.int32)
    k(1, y)  # compile first
    rounds = 1
    while True:  # a launch long enough to observe (~0.3 s)
        t0 = time.perf_counter()
        k(rounds, y)
        if time.perf_counter() - t0 > 0.3 or rounds >= 1 << 30:
            break
        rounds *= 4
    ticks = ticks_while(lambda: k(rounds, y))
    assert (y == rounds).all()
    # Holding the GIL for the launch would leave this thread a tick or two.
    assert ticks >= 20, ticks


@needs_cpu
def test_gil_is_released_while_the_cpu_backend_compiles(tmp_path, monkeypatch):
    class Big(tilus.Script):
        def __call__(self, y: ~int32):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            acc = self.register_tensor(dtype=int32, shape=[32], init=0)
            for i in range(600):
                acc = acc + i
            self.store_global(self.global_view(y, shape=[32]), acc, offsets=[0])

    y = np.zeros(32, np.int32)
    done = []
    # An empty cache: the machine code is compiled, not read back from an earlier run's disk cache
    # (which takes a few milliseconds).
    previous = tilus.option.get_option("cache_dir")
    monkeypatch.setenv("TILUS_CACHE_DIR", previous)  # put back after the test
    tilus.option.cache_dir(tmp_path)
    try:
        ticks = ticks_while(lambda: done.append(Big()(y)))
    finally:
        tilus.option.cache_dir(previous)
    assert done and (y == sum(range(600))).all()
    assert ticks >= 5, ticks


def test_do_bench_times_a_function_in_milliseconds():
    ms = tilus.testing.do_bench(lambda: time.sleep(0.002), warmup=5, rep=20, device="cpu")
    assert 1.5 < ms < 50
    lo, hi = tilus.testing.do_bench(lambda: time.sleep(0.001), warmup=2, rep=10, quantiles=[0.0, 1.0], device="cpu")
    assert lo <= hi
    times = tilus.testing.do_bench(lambda: None, warmup=1, rep=1, return_mode="all", device="cpu")
    assert isinstance(times, list) and len(times) >= 1
    with pytest.raises(ValueError, match="return_mode"):
        tilus.testing.do_bench(lambda: None, return_mode="best")
    with pytest.raises(ValueError, match="quantile"):
        tilus.testing.do_bench(lambda: None, warmup=1, rep=1, quantiles=[1.5], device="cpu")


def test_visualize_layout_maps_every_element(tmp_path):
    layout = tilus.spatial([4, 8]) * tilus.local([2, 1])  # 32 threads, [8, 8], two slots each
    text = tilus.visualize_layout(layout)
    cells = [row.split() for row in text.splitlines()[1:]]
    assert len(cells) == 8 and all(len(r) == 8 for r in cells), text
    # Each cell names the (thread, slot) that holds that element, as the layout maps it.
    for thread in range(32):
        for slot in range(2):
            i, j = layout.map(thread, slot)
            assert cells[i][j] == f"T{thread}:{slot}", (thread, slot, text)
    svg = tmp_path / "layout.svg"
    tilus.visualize_layout(layout, file=svg)
    body = svg.read_text()
    assert body.startswith("<svg") or "<svg" in body[:200]
    assert body.count("<rect") >= 64
    with pytest.raises(ValueError, match=r"\.svg or \.png"):
        tilus.visualize_layout(layout, file=tmp_path / "layout.txt")


class Rows(tilus.Script):
    def __call__(self, m: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        v = self.load_global(self.global_view(x, shape=[m, 64]), offsets=[0, 0], shape=[16, 64])
        self.store_global(self.global_view(y, shape=[m, 1]), self.sum(v, dim=1, keepdim=True), offsets=[0, 0])


def test_visualize_layout_draws_a_layout_the_compiler_inferred():
    x, y = np.zeros((16, 64), np.float32), np.zeros((16, 1), np.float32)
    ir = Rows().ir(16, x, y, arch="sm_90a")["infer_layouts"]
    line = next(l for l in ir.splitlines() if "load_global" in l)
    printed = re.search(r"layout\(shape=[^)]*\)", line).group(0)
    inferred = tilus.visualize_layout(line)  # the whole line, or just the layout's text
    assert inferred == tilus.visualize_layout(printed)
    assert inferred.splitlines()[0] == printed  # the table is titled with the layout
    # The same table as for the layout object with those modes.
    shape, modes, spatial, local = (
        [-int(v[1:]) if v.startswith("r") else int(v) for v in g.replace(" ", "").split(",") if v]
        for g in re.match(r"layout\(shape=\[(.*?)\], modes=\[(.*?)\], spatial=\[(.*?)\], local=\[(.*?)\]\)",
                          printed).groups())
    layout = tilus.RegisterLayout(shape, modes, spatial, local)
    assert layout.num_threads == 128 and list(layout.shape) == [16, 64]
    assert inferred == tilus.visualize_layout(layout)
    # Round trip of the printed form, replicated axes included.
    for l in [tilus.spatial(4, 8) * tilus.local(2, 1), tilus.replicated(4) * tilus.spatial(2, 4)]:
        assert tilus.visualize_layout(repr(l)) == tilus.visualize_layout(l)
    with pytest.raises(tilus.CompileError, match="holds none"):
        tilus.visualize_layout("no layout here")
    with pytest.raises(tilus.CompileError, match="expects a RegisterLayout"):
        tilus.visualize_layout(3)


@needs_cpu
def test_a_huge_register_tile_runs_on_the_cpu_and_says_it_would_spill_on_a_gpu(tmp_path):
    # 2 x 128 MiB of register tiles in one block (256 KiB per GPU thread): the CPU worker's stack
    # is sized for them (this crashed with a 256 MiB stack), and the GPU limit is a warning.
    script = textwrap.dedent("""
        import numpy as np, tilus
        from tilus import float32
        class Huge(tilus.Script):
            def __call__(self, y: ~float32):
                self.attrs.blocks = [1]
                self.attrs.warps = 32
                t = self.register_tensor(dtype=float32, shape=[1024, 32768], init=1.0)
                self.store_global(self.global_view(y, shape=[1024, 32768]), t + 1.0, offsets=[0, 0])
        y = np.zeros((1024, 32768), np.float32)
        Huge()(y)
        print("mean", y.mean())
    """)
    (tmp_path / "huge.py").write_text(script)
    r = subprocess.run([sys.executable, str(tmp_path / "huge.py")], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TILUS_TARGET="cpu"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "mean 2.0" in r.stdout
    assert "kernel Huge would spill to local memory" in r.stderr
    assert "1024 threads per block allow 64" in r.stderr


class TileMatmul(tilus.Script):
    """docs/python.md's matmul, with its warps a parameter."""

    def __init__(self, block_m, block_n, warps):
        super().__init__()
        self.block_m, self.block_n, self.warps = block_m, block_n, warps

    def __call__(self, m: int32, n: int32, k: int32, a: ~tilus.float16, b: ~tilus.float16, c: ~float32):
        self.attrs.blocks = [tilus.cdiv(m, self.block_m), tilus.cdiv(n, self.block_n)]
        self.attrs.warps = self.warps
        om, on = self.blockIdx.x * self.block_m, self.blockIdx.y * self.block_n
        ga, gb = self.global_view(a, shape=[m, k]), self.global_view(b, shape=[k, n])
        sa = self.shared_tensor(dtype=tilus.float16, shape=[self.block_m, 32])
        sb = self.shared_tensor(dtype=tilus.float16, shape=[32, self.block_n])
        acc = self.register_tensor(dtype=float32, shape=[self.block_m, self.block_n], init=0.0)
        for k0 in range(0, k, 32):
            self.copy_async(ga, sa, offsets=[om, k0])
            self.copy_async(gb, sb, offsets=[k0, on])
            acc = self.dot(self.load_shared(sa), self.load_shared(sb), acc)  # SPILL-DOT
        self.store_global(self.global_view(c, shape=[m, n]), acc, offsets=[om, on])


@needs_cpu
def test_the_spill_warning_follows_the_warps_and_says_it_once(capfd):
    def run(warps, *sizes):
        k = TileMatmul(128, 128, warps)
        for s in sizes:
            a, b, c = np.ones((s, s), np.float16), np.ones((s, s), np.float16), np.zeros((s, s), np.float32)
            k(s, s, s, a, b, c)
            assert (c == s).all()
        return [w for w in capfd.readouterr().err.splitlines() if "spill" in w]
    capfd.readouterr()
    # 4 warps: the accumulator (128 registers per thread) and the dot's result, which ptxas keeps
    # in the same registers, counted once: no warning (ptxas: 249 registers, no spills).
    assert run(4, 64) == []
    # 3 warps: the dot splits its tile over 2 of them; the advice is a count it splits over. Two
    # specializations (a ragged size, an aligned one): one warning.
    said = run(3, 50, 64)
    assert len(said) == 1, said
    assert "kernel TileMatmul would spill to local memory" in said[0] and "96 threads per block allow 255" in said[0]
    assert "(the largest: acc, float32[128, 128], 256 per thread)" in said[0], said[0]
    assert f"test_seeing.py:{line_of('SPILL-DOT')} spreads its [128, 128] tile over 2 of the 3 warps (warps=1x2)" \
        in said[0] and "use 4 warps" in said[0], said[0]


def test_tilus_utils_under_nvidia_tilus_names():
    from tilus.utils import benchmark_func, cdiv, floor_log2, gcd, idiv, is_power_of_two, lcm, nbytes_from_nbits, prod
    calls = []
    ms = benchmark_func(lambda: (calls.append(1), time.sleep(0.002)), warmup=2, repeat=5)
    assert len(calls) == 7 and 1.5 < ms < 50  # the median of the 5 timed calls
    with pytest.raises(ValueError, match="repeat >= 1"):
        benchmark_func(lambda: None, repeat=0)
    assert cdiv(7, 2) == 4 and cdiv(8, 2) == 4 and tilus.cdiv is cdiv
    assert idiv(8, 2) == 4 and prod([2, 3, 4]) == 24 and prod([]) == 1
    with pytest.raises(ValueError, match="not divisible"):
        idiv(7, 2)
    assert gcd(12, 18) == 6 and lcm(4, 6) == 12
    assert [is_power_of_two(n) for n in (0, 1, 2, 3, 64)] == [False, True, True, False, True]
    assert floor_log2(1) == 0 and floor_log2(1023) == 9 and floor_log2(1024) == 10
    assert nbytes_from_nbits(12) == 2 and nbytes_from_nbits(16) == 2


def test_benchmark_func_times_the_gpu_work_not_the_host_cost_of_a_call():
    """NVIDIA Tilus's benchmark_func holds the GPU (a sleep) while the host queues the timed calls:
    a call whose host part (here 30 us of busy waiting) is longer than its GPU work is timed at
    its GPU work; without the hold the events would see the GPU idle while the host busy-waits
    (at least 0.03 ms a call, no L2 flush to hide it behind)."""
    from conftest import HAS_GPU
    torch = pytest.importorskip("torch")
    if not HAS_GPU or not torch.cuda.is_available():
        pytest.skip("needs a GPU that torch and tilus can use")
    from tilus.utils import benchmark_func
    x = torch.zeros(256, device="cuda")

    def call():
        t = time.perf_counter()
        while time.perf_counter() - t < 30e-6:
            pass
        x.add_(1.0)

    held = benchmark_func(call, warmup=2, repeat=30, clear_l2_cache=False)
    assert held < 0.015, held


@needs_cpu
def test_tilus_option_sets_the_cache_and_the_ir_dump(tmp_path):
    script = textwrap.dedent(f"""
        import os, sys, numpy as np, tilus
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_seeing import Scale
        os.chdir({str(tmp_path)!r})
        tilus.option.cache_dir("./cache")
        assert tilus.option.get_option("cache_dir") == {str(tmp_path / "cache")!r}
        tilus.option.debug.dump_ir()
        assert tilus.option.get_option("debug.dump_ir") == {str(tmp_path / "cache" / "ir")!r}
        x, y = np.ones(256, np.float32), np.zeros(256, np.float32)
        Scale()(256, x, y)
        if tilus._C.nvrtc_available():
            assert not Scale().compiled(256, x, y, arch="sm_90a").from_cache
            assert Scale().compiled(256, x, y, arch="sm_90a").from_cache
        tilus.option.debug.dump_ir(False)
        assert tilus.option.get_option("debug.dump_ir") is None
        tilus.option.bench_repeat(3)
        assert tilus.option.get_option("bench_repeat") == 3
        for bad in (0, 2.5, True):
            try:
                tilus.option.bench_repeat(bad)
                raise SystemExit("accepted " + repr(bad))
            except ValueError:
                pass
        print("ok")
    """)
    (tmp_path / "opt.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if k not in ("TILUS_DUMP_IR", "TILUS_CACHE_DIR")}
    r = subprocess.run([sys.executable, str(tmp_path / "opt.py")], capture_output=True, text=True, timeout=300,
                       env=dict(env, TILUS_TARGET="cpu"))
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
    dumps = os.listdir(tmp_path / "cache" / "ir")
    assert any(d.startswith("Scale-cpu") for d in dumps), dumps
    if _C.nvrtc_available():
        assert os.listdir(tmp_path / "cache" / "kernels")
