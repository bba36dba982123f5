"""The thread-level builtins of seed 004 from Python: per-thread indices and shuffles as tiles,
named barriers, __syncwarp, setmaxnreg, explicit-width ldg / stg, loop_break, the cluster group
and the grid barrier, run against numpy on each backend present (the `arrays` fixture), and
their CUDA text (no GPU needed)."""
import numpy as np
import pytest

import tilus
from tilus import float16, float32, int32

from conftest import HAS_CPU

needs_cpu = pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")


def source_lane(op, lane, b, width=32):
    """PTX shfl.sync's source lane (own lane where the source leaves the segment)."""
    b &= 31
    first = lane & ~(width - 1)
    last = first + width - 1
    if op == "xor":
        return lane if lane ^ b > last else lane ^ b
    if op == "down":
        return lane if lane + b > last else lane + b
    if op == "up":
        return lane if lane - b < first else lane - b
    return first + (b & (width - 1))


class Indices(tilus.Script):
    def __call__(self, out: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        g = self.global_view(out, shape=[6, 128])
        self.store_global(g, self.get_lane_idx(), offsets=[0, 0])
        self.store_global(g, self.get_warp_idx(), offsets=[1, 0])
        self.store_global(g, self.get_warp_group_idx(warps_per_group=2), offsets=[2, 0])
        self.store_global(g, self.shuffle_elect(32).to(int32), offsets=[3, 0])
        with self.warp_group(2, 2):
            self.store_global(g, self.get_warp_idx_sync(), offsets=[4, 0])
            self.store_global(g, self.shuffle_elect(0).to(int32), offsets=[5, 0])


def test_thread_indices(arrays):
    out = arrays.put(np.full((6, 128), -1, dtype=np.int32))
    Indices()(out)
    got = arrays.host(out)
    t = np.arange(128)
    np.testing.assert_array_equal(got[0], t % 32)
    np.testing.assert_array_equal(got[1], t // 32)
    np.testing.assert_array_equal(got[2], t // 64)
    np.testing.assert_array_equal(got[3], (t % 32 == 0).astype(np.int32))
    np.testing.assert_array_equal(got[4, :64], (64 + t[:64]) // 32)  # warps of the block
    np.testing.assert_array_equal(got[5, :64], (t[:64] == 0).astype(np.int32))


class Shuffle(tilus.Script):
    def __init__(self, op, b, width=None, layout=None, dtype=float32):
        super().__init__()
        self.op, self.b, self.width, self.layout, self.dtype = op, b, width, layout, dtype

    def __call__(self, n: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 2
        v = self.load_global(self.global_view(x, shape=[n]), offsets=[0], shape=[128])
        if self.layout is not None:
            self.annotate_layout(v, self.layout)
        v = v.to(self.dtype)
        if self.op == "sync":
            r = self.shfl_sync(0xFFFFFFFF, v, self.b, self.width)
        else:
            r = getattr(self, "shfl_" + self.op)(v, self.b)
        # A scalar is the same in every thread: it comes back unchanged.
        assert self.shfl_xor(n, 1) is n
        self.store_global(self.global_view(y, shape=[n]), r.to(float32), offsets=[0])


@pytest.mark.parametrize("op,b,width", [("xor", 1, None), ("xor", 16, None), ("down", 5, None), ("up", 31, None),
                                        ("sync", 3, None), ("sync", 9, 4)])
@pytest.mark.parametrize("layout", ["spatial", "local"])
def test_shuffles_follow_the_layout(arrays, op, b, width, layout):
    # spatial: thread t holds element t; local: thread t holds elements 2t and 2t + 1.
    lay = tilus.spatial(64) * tilus.local(2) if layout == "local" else tilus.local(2) * tilus.spatial(64)
    x = arrays.rand((128,))
    y = arrays.empty((128,))
    Shuffle(op, b, width, lay)(128, x, y)
    hx = arrays.host(x)
    want = np.empty(128, dtype=np.float32)
    for t in range(64):
        src = t - t % 32 + source_lane(op, t % 32, b, width or 32)
        for s in range(2):
            e_out = 2 * t + s if layout == "local" else s * 64 + t
            e_in = 2 * src + s if layout == "local" else s * 64 + src
            want[e_out] = hx[e_in]
    np.testing.assert_array_equal(arrays.host(y), want)


def test_sixteen_bit_shuffles(arrays):
    x = arrays.put(np.arange(128, dtype=np.float32))
    y = arrays.empty((128,))
    Shuffle("down", 2, layout=tilus.local(2) * tilus.spatial(64), dtype=float16)(128, x, y)
    src = [t - t % 32 + source_lane("down", t % 32, 2) for t in range(64)]
    want = np.array([s * 64 + src[t] for s in range(2) for t in range(64)], dtype=np.float32)
    np.testing.assert_array_equal(arrays.host(y), want)


class Vectors(tilus.Script):
    def __init__(self, bits):
        super().__init__()
        self.bits = bits

    def __call__(self, n: int32, live: int32, x: ~float16, y: ~float16):
        per = self.bits // 16
        self.attrs.blocks = [tilus.cdiv(n, per)]
        self.attrs.warps = 1
        gx = self.global_view(x, shape=[n])
        gy = self.global_view(y, shape=[n])
        i0 = self.blockIdx.x * per
        src = gx[i0] if self.bits == 32 else gx[i0:i0 + per]  # a head element: the vector there
        v = getattr(self, f"ldg{self.bits}")(src, pred=self.blockIdx.x < live)
        getattr(self, f"stg{self.bits}")(gy[i0:i0 + per], v * 2.0)


@pytest.mark.parametrize("bits", [32, 64, 128, 256])
def test_explicit_width_loads_and_stores(arrays, bits):
    per = bits // 16
    n, live = 12 * per, 9
    x = arrays.rand((n,), "float16")
    y = arrays.empty((n,), "float16")
    Vectors(bits)(n, live, x, y)
    want = arrays.host(x).astype(np.float32) * 2
    want[live * per:] = 0
    np.testing.assert_array_equal(arrays.host(y), want.astype(np.float16))


class Breaks(tilus.Script):
    def __call__(self, stop: int32, out: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 8
        count = self.declare("count", int32, 0)
        for i in range(100):
            if i == stop:
                self.loop_break()
            count += 1
        self.sync_threads()
        self.sync_threads(1)
        with self.warp_group(4, 4):
            self.sync_threads(2, 256)
            self.sync_warp()
            self.dec_max_nreg(40)
        with self.warp_group(0, 4):
            self.sync_threads(2, 256)
            self.inc_max_nreg(232)
        with self.single_warp(1):
            self.sync_warp(0xFFFF)
        self.cluster.sync()
        self.store_global(self.global_view(out, shape=[1]),
                          self.register_tensor(dtype=int32, shape=[1], init=count), offsets=[0])


@needs_cpu
@pytest.mark.parametrize("stop", [0, 7, 500])
def test_loop_break_and_barriers(stop):
    out = np.zeros(1, dtype=np.int32)
    Breaks()(stop, out)
    assert out[0] == min(stop, 100)


def test_barriers_and_register_budgets_in_cuda():
    src = Breaks().source(7, np.zeros(1, dtype=np.int32), arch="sm_90a")
    for text in ("break;", "tilus::named_barrier(1, 256);", "tilus::named_barrier(2, 256);", "__syncwarp(0xffffffffu);",
                 "__syncwarp(((uint32_t)65535u));", "tilus::setmaxnreg_dec<40>();", "tilus::setmaxnreg_inc<232>();",
                 "tilus::cluster_sync();"):
        assert text in src, (text, src)
    with pytest.raises(tilus.CompileError, match=r"test_builtins.py:\d+: (error: )?dec_max_nreg: setmaxnreg needs .* not sm_80"):
        Breaks().source(7, np.zeros(1, dtype=np.int32), arch="sm_80")


class Turns(tilus.Script):
    """Two warp groups take turns at named barriers (FlashAttention-3's ping-pong): group 0 waits
    at barrier 1 and hands over at barrier 2, group 1 the other way, and each turn reads what
    the other group wrote in its last: x[i] = y[i] + 1, then y[i + 1] = 2 x[i]."""

    def __call__(self, x: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 8
        gx = self.global_view(x, shape=[TURNS])
        gy = self.global_view(y, shape=[TURNS + 1])
        with self.warp_group(0, 4):
            for i in range(TURNS):
                self.sync_threads(1, 256)
                self.store_global(gx, self.load_global(gy, offsets=[i], shape=[1]) + 1.0, offsets=[i])
                self.named_barrier_arrive(2, 256)
            self.sync_threads(1, 256)  # the start's handing over: barrier 1 ends empty
        with self.warp_group(4, 4):
            self.named_barrier_arrive(1, 256)  # group 0 starts
            for i in range(TURNS):
                self.sync_threads(2, 256)
                self.store_global(gy, self.load_global(gx, offsets=[i], shape=[1]) * 2.0, offsets=[i + 1])
                self.named_barrier_arrive(1, 256)


TURNS = 5


def test_named_barriers_take_turns(arrays):
    """Each turn sees the other group's last one, on the GPU and on the CPU backend (where the
    groups run as fibers that wait at the barriers): the groups one after the other would give
    x = 1 everywhere."""
    x, y = arrays.put(np.zeros(TURNS, np.float32)), arrays.put(np.zeros(TURNS + 1, np.float32))
    Turns()(x, y)
    want_x, want_y = np.zeros(TURNS), np.zeros(TURNS + 1)
    for i in range(TURNS):
        want_x[i] = want_y[i] + 1
        want_y[i + 1] = 2 * want_x[i]
    np.testing.assert_array_equal(arrays.host(x), want_x)
    np.testing.assert_array_equal(arrays.host(y), want_y)


def test_named_barrier_arrive_in_cuda():
    src = Turns().source(np.zeros(TURNS, np.float32), np.zeros(TURNS + 1, np.float32), arch="sm_90a")
    for text in ("tilus::named_barrier(1, 256);", "tilus::named_barrier_arrive(2, 256);",
                 "tilus::named_barrier(2, 256);", "tilus::named_barrier_arrive(1, 256);"):
        assert text in src, (text, src)


class Stuck(tilus.Script):
    """Group 0 waits at barrier 1 twice, group 1 hands over once."""

    def __call__(self, x: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 8
        with self.warp_group(0, 4):
            self.sync_threads(1, 256)
            self.sync_threads(1, 256)
        with self.warp_group(4, 4):
            self.named_barrier_arrive(1, 256)


@needs_cpu
def test_a_named_barrier_never_completed_is_reported_on_the_cpu():
    with pytest.raises(tilus.CpuCheckError, match=r"test_builtins.py:\d+: sync_threads: block \(0, 0, 0\) waits at "
                                                  r"named barrier 1: 128 of its 256 threads arrived"):
        Stuck()(np.zeros(1, np.float32))


class ClusterIds(tilus.Script):
    def __call__(self, out: ~int32):
        self.attrs.blocks = [4, 2]
        self.attrs.warps = 1
        self.attrs.cluster_blocks = [2, 1]
        c = self.cluster
        x, y, z = c.clusterDim
        b = self.blockIdx.y * 4 + self.blockIdx.x
        g = self.global_view(out, shape=[8, 4])
        for k, v in enumerate([c.blockIdx.x, c.blockIdx.y, c.blockRank, x * 100 + y * 10 + z]):
            self.store_global(g, self.register_tensor(dtype=int32, shape=[1], init=v), offsets=[b, k])


@needs_cpu
def test_cluster_indices_on_the_cpu():
    out = np.full((8, 4), -1, dtype=np.int32)
    ClusterIds()(out)
    bx = np.arange(8) % 4
    np.testing.assert_array_equal(out[:, 0], bx % 2)
    np.testing.assert_array_equal(out[:, 1], 0)
    np.testing.assert_array_equal(out[:, 2], bx % 2)
    np.testing.assert_array_equal(out[:, 3], 211)
    src = ClusterIds().source(out, arch="sm_90a")
    assert "tilus::cluster_ctaid(0)" in src and "tilus::cluster_ctarank()" in src, src


class GridSync(tilus.Script):
    def __init__(self, cluster=None):
        super().__init__()
        self.cluster_shape = cluster

    def __call__(self, n: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, 128)]
        self.attrs.warps = 4
        if self.cluster_shape:
            self.attrs.cluster_blocks = self.cluster_shape
            self.cluster.sync()  # GRID-CLUSTER-SYNC
        else:
            self.sync_grid()  # GRID-SYNC
        gx, gy = self.global_view(x, shape=[n]), self.global_view(y, shape=[n])
        self.store_global(gy, self.load_global(gx, offsets=[self.blockIdx.x * 128], shape=[128]),
                          offsets=[self.blockIdx.x * 128])


def line_of(marker):
    import inspect
    import sys
    for i, text in enumerate(inspect.getsource(sys.modules[__name__]).splitlines(), 1):
        if marker in text and "line_of(" not in text:
            return i
    raise AssertionError(marker)


@needs_cpu
def test_grid_and_cluster_barriers_are_compile_errors_on_the_cpu():
    x = np.zeros(256, dtype=np.float32)
    with pytest.raises(tilus.CompileError, match=rf"test_builtins.py:{line_of('# GRID-SYNC')}: (error: )?sync_grid: .*every "
                                                  r"block resident at once; the CPU backend runs blocks in batches"):
        GridSync()(256, x, x.copy())
    # The blocks of a cluster run together on the CPU backend (as fibers): cluster.sync runs there.
    x = np.arange(256, dtype=np.float32)
    y = np.zeros(256, dtype=np.float32)
    GridSync([2])(256, x, y)
    np.testing.assert_array_equal(y, x)


def test_grid_sync_in_cuda():
    x = np.zeros(256, dtype=np.float32)
    src = GridSync().source(256, x, x, arch="sm_90a")
    assert "tilus::grid_sync();" in src, src
    assert "grid_sync" not in Breaks().source(7, np.zeros(1, dtype=np.int32), arch="sm_90a")
