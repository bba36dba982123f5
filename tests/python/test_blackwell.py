"""Blackwell (sm_100a): tensor memory and the tcgen05 group, cluster launch control, cta_group=2 TMA,
and examples/python/blackwell_matmul.py. No Blackwell GPU is needed: the IR and its errors are
checked here, the CUDA is compiled for sm_100a with NVRTC (its SASS read with cuobjdump where one is
found), and every instruction runs on the CPU backend against numpy."""
import os
import re

import numpy as np
import pytest

import tilus
from tilus import bfloat16, float16, float32, int32, tfloat32, uint32
from tilus.artifacts import _cuobjdump
from conftest import HAS_CPU, local_memory_uses

from blackwell_matmul import BlackwellMatmul, reference

needs_cpu = pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
needs_nvrtc = pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
GOLDEN = os.path.join(os.path.dirname(__file__), "golden")


def _sass_or_skip():
    if _cuobjdump() is None:
        pytest.skip("no cuobjdump here ($CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin, PATH): the PTX and the "
                    "compile were checked, not the SASS")


# --- tensor memory through registers: alloc, slice, view, store, load, dealloc ----------------------

@needs_cpu
def test_tensor_memory_round_trip_on_the_cpu():
    class RoundTrip(tilus.Script):
        def __call__(self, x: ~float32, y: ~float32, z: ~float16):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            t = self.tcgen05.alloc(dtype=float32, shape=[128, 2, 32])
            gx = self.global_view(x, shape=[128, 64])
            for h in tilus.static_range(2):
                self.tcgen05.store(t[:, h, :], self.load_global(gx, offsets=[0, 32 * h], shape=[128, 32]))
            self.tcgen05.wait_store()
            self.sync()
            # The second half through a slice of the first lane-dim view, and the first half's bits as
            # float16 pairs through a view.
            second = self.tcgen05.slice(t, offsets=[0, 1, 0], dims=[0, 2], shape=[128, 32])
            back = self.tcgen05.load(second)
            self.store_global(self.global_view(y, shape=[128, 32]), back, offsets=[0, 0])
            halves = self.tcgen05.load(self.tcgen05.view(t[:, 0, :], dtype=float16, shape=[128, 64]))
            self.store_global(self.global_view(z, shape=[128, 64]), halves, offsets=[0, 0])
            self.sync()
            self.tcgen05.dealloc(t)

    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (128, 64)).astype(np.float32)
    y = np.zeros((128, 32), np.float32)
    z = np.zeros((128, 64), np.float16)
    RoundTrip()(x, y, z)
    np.testing.assert_array_equal(y, x[:, 32:])
    np.testing.assert_array_equal(z, x[:, :32].copy().view(np.float16))


# --- tcgen05.mma on the CPU: every kind, enable_input_d, a from tensor memory ------------------------

def _mma_script(ab, acc, k_steps, a_tmem=False, bn=64, bk=32):
    class Mma(tilus.Script):
        """d = a[:, :bk] @ b[:, :bk].T (enable_input_d false), then += the next k steps, all issued by
        one warp, committed to one mbarrier; d (tensor memory) -> registers -> out."""

        def __call__(self, a: ~ab, b: ~ab, out: ~acc):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            ga = self.global_view(a, shape=[128, bk * k_steps])
            gb = self.global_view(b, shape=[bn, bk * k_steps])
            sa = self.shared_tensor(dtype=ab, shape=[k_steps, 128, bk])
            sb = self.shared_tensor(dtype=ab, shape=[k_steps, bn, bk])
            for s in tilus.static_range(k_steps):
                self.copy(ga[:, s * bk:(s + 1) * bk], sa[s])
                self.copy(gb[:, s * bk:(s + 1) * bk], sb[s])
            d = self.tcgen05.alloc(dtype=acc, shape=[128, bn])
            ta = self.tcgen05.alloc(dtype=ab, shape=[128, bk]) if a_tmem else None
            if a_tmem:
                self.tcgen05.store(ta, self.load_shared(sa[0]))
                self.tcgen05.wait_store()
            done = self.mbarrier.alloc(counts=[1])
            self.sync()
            with self.single_warp():
                for s in tilus.static_range(k_steps):
                    self.tcgen05.mma(ta if (a_tmem and s == 0) else sa[s], sb[s].transpose(), d,
                                     enable_input_d=s != 0)
                self.tcgen05.commit(mbarrier=done[0])
                self.mbarrier.wait(done[0], phase=0)
            self.sync()
            r = self.tcgen05.load(d)
            self.tcgen05.wait_load()
            self.store_global(self.global_view(out, shape=[128, bn]), r, offsets=[0, 0])
            self.sync()
            if a_tmem:
                self.tcgen05.dealloc(ta)
            self.tcgen05.dealloc(d)

    return Mma()


def _values(dtype, shape, rng):
    """Random values exactly representable in `dtype`, as float64 (and as the array to pass)."""
    x = rng.uniform(-1, 1, shape)
    if dtype == float16:
        arr = x.astype(np.float16)
        return arr, arr.astype(np.float64)
    arr = tilus.tensor._from_values(x, dtype, "cpu")
    return arr, arr.numpy().astype(np.float64)


@needs_cpu
@pytest.mark.parametrize("ab,acc,bk", [(float16, float32, 32), (bfloat16, float32, 32), (float16, float16, 32),
                                       (tfloat32, float32, 16), (tilus.float8_e4m3, float32, 64),
                                       (tilus.float8_e5m2, float16, 64)])
def test_mma_of_every_kind_against_numpy(ab, acc, bk):
    rng = np.random.default_rng(2)
    k_steps = 2
    a, fa = _values(ab, (128, bk * k_steps), rng)
    b, fb = _values(ab, (64, bk * k_steps), rng)
    out = tilus.empty([128, 64], acc, device="cpu")
    _mma_script(ab, acc, k_steps, bk=bk)(a, b, out)
    want = fa @ fb.T
    tol = 2e-2 if acc == float16 else 1e-4
    np.testing.assert_allclose(out.numpy().astype(np.float64), want, rtol=tol, atol=tol)


@needs_cpu
def test_mma_with_a_in_tensor_memory():
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (128, 64)).astype(np.float16)
    b = rng.uniform(-1, 1, (64, 64)).astype(np.float16)
    out = np.zeros((128, 64), np.float32)
    _mma_script(float16, float32, 2, a_tmem=True)(a, b, out)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64).T, rtol=1e-4, atol=1e-4)


# --- the CUDA: PTX of each instruction, NVRTC for sm_100a and sm_103a, SASS ----------------------------

def _mma_args():
    return (np.zeros((128, 64), np.float16), np.zeros((64, 64), np.float16), np.zeros((128, 64), np.float32))


def test_mma_source_and_lowering_record():
    s = _mma_script(float16, float32, 2)
    src = s.source(*_mma_args(), arch="sm_100a")
    for want in ("tilus::tcgen05_alloc<1>", "tilus::tcgen05_mma_ss<1, 0>", "tilus::tcgen05_commit<1>",
                 "tcgen05.ld.sync.aligned.32x32b.x32.b32", "tilus::tcgen05_wait_ld()", "tilus::tcgen05_dealloc<1>"):
        assert want in src, want
    ir = s.ir(*_mma_args(), arch="sm_100a")["select_instructions"]
    # m128 n64 k16, f32 accumulator (bit 4), f16 operands, N>>3 = 8 at bit 17, M>>4 = 8 at bit 24.
    assert "lowering: tcgen05.mma cta_group::1.kind::f16 m128n64k16 tiles=1x2 idesc=0x8100010 a=sw64/sbo512 " \
           "b=sw64/sbo512 completion=tcgen05-commit" in ir, ir
    assert "lowering: tcgen05.ld 32x32b.x32 x2 completion=tcgen05-wait-load" in ir, ir


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_100a", "sm_103a"])
def test_mma_compiles_for_blackwell(arch):
    s = _mma_script(float16, float32, 2)
    ptx = s.ptx(*_mma_args(), arch=arch)
    for want in ("tcgen05.alloc.cta_group::1", "tcgen05.mma.cta_group::1.kind::f16", "tcgen05.commit.cta_group::1",
                 "tcgen05.ld.sync.aligned.32x32b.x32.b32", "tcgen05.wait::ld", "tcgen05.dealloc.cta_group::1"):
        assert want in ptx, want
    g = s.compiled(*_mma_args(), arch=arch)
    assert g.spill_store_bytes == 0 and g.spill_load_bytes == 0


@needs_nvrtc
def test_mma_sass_has_utchmma():
    _sass_or_skip()
    sass = _mma_script(float16, float32, 2).sass(*_mma_args(), arch="sm_100a")
    assert "UTCHMMA" in sass and "UTCATOMSWS" in sass, sass[:2000]


def test_tcgen05_needs_sm100a():
    with pytest.raises(tilus.CompileError, match=r"test_blackwell\.py:\d+: .*tcgen05\.\w+: tensor memory \(tcgen05\) "
                                                 r"needs sm_100a or sm_103a, the target is sm_90a"):
        _mma_script(float16, float32, 2).source(*_mma_args(), arch="sm_90a")


# --- the verifier: errors name the instruction, the operands and the line ----------------------------

def _traced_error(body):
    class Bad(tilus.Script):
        def __call__(self, out: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            body(self)

    with pytest.raises(tilus.CompileError) as e:
        Bad().ir(np.zeros(4, np.float32), arch="sm_100a")
    assert "test_blackwell.py:" in str(e.value), str(e.value)
    return str(e.value)


def test_alloc_errors():
    assert "shape[0] (the lanes) must be 32, 64 or 128, got 96" in _traced_error(
        lambda s: s.tcgen05.alloc(dtype=float32, shape=[96, 32]))
    assert "takes 1024 32-bit columns of tensor memory; a block has 512" in _traced_error(
        lambda s: s.tcgen05.alloc(dtype=float32, shape=[128, 1024]))
    assert "cta_group must be 1 or 2, got 3" in _traced_error(
        lambda s: s.tcgen05.alloc(dtype=float32, shape=[128, 32], cta_group=3))


def test_mma_errors():
    def shapes(s):
        sa = s.shared_tensor(dtype=float16, shape=[128, 32])
        sb = s.shared_tensor(dtype=float16, shape=[64, 16])
        d = s.tcgen05.alloc(dtype=float32, shape=[128, 64])
        with s.single_warp():
            s.tcgen05.mma(sa, sb.transpose(), d, enable_input_d=False)
    assert "tcgen05.mma: a is shared float16[128, 32] and b is shared float16[16, 64]: the inner dims differ" in \
        _traced_error(shapes)

    def dtypes(s):
        sa = s.shared_tensor(dtype=float16, shape=[128, 16])
        sb = s.shared_tensor(dtype=bfloat16, shape=[64, 16])
        d = s.tcgen05.alloc(dtype=float32, shape=[128, 64])
        with s.single_warp():
            s.tcgen05.mma(sa, sb.transpose(), d, enable_input_d=False)
    assert "a and b must have one dtype" in _traced_error(dtypes)

    def threads(s):
        sa = s.shared_tensor(dtype=float16, shape=[128, 16])
        sb = s.shared_tensor(dtype=float16, shape=[64, 16])
        d = s.tcgen05.alloc(dtype=float32, shape=[128, 64])
        s.tcgen05.mma(sa, sb.transpose(), d, enable_input_d=False)
    assert "tcgen05.mma: must be issued by one warp (a thread group of 32 threads starting on a warp), but the " \
           "current thread group is threads [0, 128) of the block; use self.single_warp()" in _traced_error(threads)


def test_load_lanes_must_match_the_group():
    class Bad(tilus.Script):
        def __call__(self, out: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            t = self.tcgen05.alloc(dtype=float32, shape=[128, 32])
            with self.warp_group(warp_begin=0, num_warps=2):
                # The value is stored: a load nothing reads is removed before its lowering is chosen.
                self.store_global(self.global_view(out, shape=[128, 32]), self.tcgen05.load(t), offsets=[0, 0])
            self.sync()
            self.tcgen05.dealloc(t)

    with pytest.raises(tilus.CompileError) as e:
        Bad().ir(np.zeros(128 * 32, np.float32), arch="sm_100a")
    msg = str(e.value)
    assert "test_blackwell.py:" in msg, msg
    assert "tcgen05.load: the current thread group has 64 threads but the tile 128 lanes" in msg, msg


def test_slice_errors():
    def body(s):
        t = s.tcgen05.alloc(dtype=float32, shape=[128, 2, 32])
        s.tcgen05.slice(t, offsets=[0, 2, 0], dims=[0, 2], shape=[128, 32])
    assert "offset 2 along dim 1 takes [2, 3), outside tmem float32[128, 2, 32]'s [0, 2)" in _traced_error(body)


# --- what the CPU backend checks at run time --------------------------------------------------------

@needs_cpu
def test_tensor_memory_left_allocated_is_an_error():
    class Leak(tilus.Script):
        def __call__(self, out: ~float32):
            self.attrs.blocks = [2]
            self.attrs.warps = 4
            self.tcgen05.alloc(dtype=float32, shape=[128, 32])

    with pytest.raises(tilus.CpuCheckError, match=r"ended with 32 columns of tensor memory allocated: every "
                                                  r"tcgen05.alloc needs a tcgen05.dealloc"):
        Leak()(np.zeros(4, np.float32))


@needs_cpu
def test_alloc_after_relinquish_is_an_error():
    class Late(tilus.Script):
        def __call__(self, out: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            self.tcgen05.relinquish_alloc_permit()
            t = self.tcgen05.alloc(dtype=float32, shape=[128, 32])
            self.tcgen05.dealloc(t)

    with pytest.raises(tilus.CpuCheckError, match=r"test_blackwell\.py:\d+: tcgen05\.alloc: block \(0, 0, 0\) "
                                                  r"allocates tensor memory after tcgen05.relinquish_alloc_permit"):
        Late()(np.zeros(4, np.float32))


# --- thread groups that wait on each other, on the CPU: a producer warp and a consumer warp group -----

class ProducerConsumer(tilus.Script):
    """A producer warp fills a ring of two shared stages with n tiles of x, a consumer warp group
    (128 threads) adds each tile to its sum and hands the stage back; the ring goes round n / 2
    times, which a block that ran its groups one after the other could not do."""

    def __call__(self, n: int32, x: ~float32, out: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 8
        gx = self.global_view(x, shape=[n, 128])
        ring = self.shared_tensor(dtype=float32, shape=[2, 128])
        full = self.mbarrier.alloc(counts=[1, 1])
        empty = self.mbarrier.alloc(counts=[128, 128])
        self.sync()
        with self.single_warp(0):
            phase: uint32 = 1
            for i in range(n):
                self.mbarrier.wait(empty[i % 2], phase=phase)
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(full[i % 2], transaction_bytes=512)
                self.tma.global_to_shared(src=gx, dst=ring[i % 2], offsets=[i, 0], dims=[1], mbarrier=full[i % 2])
                phase = phase ^ (i % 2)
        with self.warp_group(warp_begin=4, num_warps=4):
            acc = self.register_tensor(dtype=float32, shape=[128], init=0.0)
            phase: uint32 = 0
            for i in range(n):
                self.mbarrier.wait(full[i % 2], phase=phase)
                acc = acc + self.load_shared(ring[i % 2])
                self.mbarrier.arrive(empty[i % 2])
                phase = phase ^ (i % 2)
            self.store_global(self.global_view(out, shape=[128]), acc, offsets=[0])


@needs_cpu
def test_groups_that_wait_on_each_other_run_concurrently_on_the_cpu():
    n = 7
    x = np.random.default_rng(4).uniform(-1, 1, (n, 128)).astype(np.float32)
    out = np.zeros(128, np.float32)
    ProducerConsumer()(n, x, out)
    np.testing.assert_allclose(out, x.sum(0), rtol=1e-5, atol=1e-5)
    # No barrier of the block between the two groups: on the GPU it would never be passed.
    ir = ProducerConsumer().ir(n, x, out, arch="sm_90a")["insert_barriers"]
    between = ir[ir.index("single_warp(thread_begin=0"):ir.index("warp_group(thread_begin=128")]
    assert between.count("  sync()") == 0, between


@needs_cpu
def test_a_wait_no_group_can_complete_lists_every_waiter():
    class Stuck(tilus.Script):
        def __call__(self, out: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 8
            a = self.mbarrier.alloc(counts=[1])
            b = self.mbarrier.alloc(counts=[1])
            self.sync()
            with self.single_warp(0):
                self.mbarrier.wait(a[0], phase=0)
                self.mbarrier.arrive(b[0])
            with self.single_warp(1):
                self.mbarrier.wait(b[0], phase=0)
                self.mbarrier.arrive(a[0])

    with pytest.raises(tilus.CpuCheckError) as e:
        Stuck()(np.zeros(1, np.float32))
    msg = str(e.value)
    assert "wait on each other and none can go on (on a GPU the blocks would hang)" in msg, msg
    assert msg.count("mbarrier.wait: block (0, 0, 0) waits for the phase of parity 0") == 2, msg


# --- cluster launch control ---------------------------------------------------------------------------

class Persistent(tilus.Script):
    """A persistent kernel: each block handles its own tile, then takes over blocks of the grid that
    have not started (clc.try_cancel) until none is left; every tile writes its index + 1 and counts
    the tiles its block handled into `handled`."""

    def __call__(self, tiles: int32, out: ~int32, handled: ~int32):
        self.attrs.blocks = [tiles]
        self.attrs.warps = 4
        gout = self.global_view(out, shape=[tiles])
        ghandled = self.global_view(handled, shape=[tiles])
        response = self.shared_tensor(dtype=int32, shape=[4])
        bar = self.mbarrier.alloc(counts=[1])
        self.sync()
        tile: int32 = self.blockIdx.x
        count: int32 = 0
        phase: uint32 = 0
        while True:
            self.store_global(gout, self.register_tensor(dtype=int32, shape=[1], init=tile + 1), offsets=[tile])
            count = count + 1
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(bar[0], transaction_bytes=16)
            self.clc.try_cancel(response, mbarrier=bar[0])
            self.mbarrier.wait(bar[0], phase=phase)
            phase = phase ^ 1
            more, block = self.clc.query_response(response)
            self.sync()
            if not more:
                break
            tile = block.x
        self.store_global(ghandled, self.register_tensor(dtype=int32, shape=[1], init=count),
                          offsets=[self.blockIdx.x])


@needs_cpu
def test_cluster_launch_control_hands_every_tile_to_exactly_one_block():
    tiles = 61
    out = np.zeros(tiles, np.int32)
    handled = np.zeros(tiles, np.int32)
    Persistent()(tiles, out, handled)
    np.testing.assert_array_equal(out, np.arange(tiles) + 1)
    # The tiles handled add up to all of them; a canceled block never starts, so it counts none.
    assert handled.sum() == tiles
    started = np.count_nonzero(handled)
    assert started <= max(1, os.cpu_count() or 1) or started < tiles


def test_cluster_launch_control_ptx():
    args = (61, np.zeros(61, np.int32), np.zeros(61, np.int32))
    src = Persistent().source(*args, arch="sm_100a")
    assert "tilus::clc_try_cancel<false>(" in src and "tilus::clc_query(" in src, src
    if tilus._C.nvrtc_available():
        ptx = Persistent().ptx(*args, arch="sm_100a")
        assert "clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128" in ptx
        assert "clusterlaunchcontrol.query_cancel.is_canceled.pred.b128" in ptx
    with pytest.raises(tilus.CompileError, match="cluster launch control needs sm_100 or newer, the target is sm_90a"):
        Persistent().source(*args, arch="sm_90a")


# --- a pair of blocks: cta_group=2 MMA, TMA into the pair's barrier, multicast commit -------------------

class PairMma(tilus.Script):
    """Clusters of 2: each block holds half of a's rows and half of b's rows; the even block issues
    one cta_group=2 MMA for the pair (d [256, 128], 128 rows in each block's tensor memory), whose
    commit arrives on both blocks' barriers; each block stores its rows of d."""

    def __call__(self, a: ~float16, b: ~float16, d: ~float32):
        self.attrs.blocks = [2]
        self.attrs.cluster_blocks = 2
        self.attrs.warps = 4
        rank = self.cluster.blockRank
        ga = self.global_view(a, shape=[256, 64])
        gb = self.global_view(b, shape=[128, 64])
        sa = self.shared_tensor(dtype=float16, shape=[128, 64])
        sb = self.shared_tensor(dtype=float16, shape=[64, 64])
        loaded = self.mbarrier.alloc(counts=[1])
        done = self.mbarrier.alloc(counts=[1])
        t = self.tcgen05.alloc(dtype=float32, shape=[128, 128], cta_group=2)
        self.cluster.sync()
        with self.single_warp():
            bar = loaded[0]
            if rank == 0:
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(bar, transaction_bytes=2 * (128 + 64) * 64 * 2)
            else:
                bar = self.cluster.map_shared_addr(bar, target_rank=0)
            self.tma.global_to_shared(src=ga, dst=sa, offsets=[rank * 128, 0], mbarrier=bar, cta_group=2)
            self.tma.global_to_shared(src=gb, dst=sb, offsets=[rank * 64, 0], mbarrier=bar, cta_group=2)
            if rank == 0:
                self.mbarrier.wait(loaded[0], phase=0)
                self.tcgen05.mma(sa, sb.transpose(), t, enable_input_d=False, cta_group=2)
                self.tcgen05.commit(mbarrier=done[0], cta_group=2, multicast_mask=0b11)
            self.mbarrier.wait(done[0], phase=0)
        self.cluster.sync()
        r = self.tcgen05.load(t)
        self.tcgen05.wait_load()
        self.store_global(self.global_view(d, shape=[256, 128]), r, offsets=[rank * 128, 0])
        self.cluster.sync()
        self.tcgen05.dealloc(t)


def _pair_args(rng=None):
    rng = rng or np.random.default_rng(5)
    a = rng.uniform(-1, 1, (256, 64)).astype(np.float16)
    b = rng.uniform(-1, 1, (128, 64)).astype(np.float16)
    return a, b, np.zeros((256, 128), np.float32)


@needs_cpu
def test_pair_mma_on_the_cpu():
    a, b, d = _pair_args()
    PairMma()(a, b, d)
    np.testing.assert_allclose(d, a.astype(np.float64) @ b.astype(np.float64).T, rtol=1e-4, atol=1e-4)


def test_pair_mma_source():
    src = PairMma().source(*_pair_args(), arch="sm_100a")
    for want in ("tilus::tcgen05_alloc<2>", "tilus::tcgen05_mma_ss<2, 0>", "tilus::tcgen05_commit_multicast<2>",
                 "tilus::tma_load_cta_pair<2>", "tilus::map_shared_rank("):
        assert want in src, want
    if tilus._C.nvrtc_available():
        ptx = PairMma().ptx(*_pair_args(), arch="sm_100a")
        assert "tcgen05.mma.cta_group::2.kind::f16" in ptx and ".cta_group::2 [" in ptx


# --- examples/python/blackwell_matmul.py --------------------------------------------------------------

@needs_cpu
@pytest.mark.parametrize("m,n,k", [(301, 517, 200), (128, 128, 64), (64, 300, 72), (257, 129, 8)])
def test_blackwell_matmul_example_on_the_cpu(m, n, k):
    rng = np.random.default_rng(6)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (n, k)).astype(np.float16)
    c = np.full((m, n), 7, np.float16)
    BlackwellMatmul()(m, n, k, a, b, c)
    np.testing.assert_allclose(c.astype(np.float64), reference(a, b), rtol=1e-2, atol=2e-2)


def _example_args(m=4096, n=4096, k=4096):
    a = np.zeros((m, k), np.float16)
    return m, n, k, a, np.zeros((n, k), np.float16), np.zeros((m, n), np.float16)


@needs_nvrtc
def test_blackwell_matmul_example_compiles_for_sm100a():
    kernel = BlackwellMatmul()
    ptx = kernel.ptx(*_example_args(), arch="sm_100a")
    for want in ("tcgen05.mma.cta_group::1.kind::f16", "tcgen05.commit", "tcgen05.ld.sync.aligned",
                 "clusterlaunchcontrol.try_cancel", "cp.async.bulk.tensor.2d"):
        assert want in ptx, want
    g = kernel.compiled(*_example_args(), arch="sm_100a")
    assert g.spill_store_bytes == 0 and g.spill_load_bytes == 0, (g.spill_store_bytes, g.spill_load_bytes)
    _sass_or_skip()
    sass = kernel.sass(*_example_args(), arch="sm_100a")
    assert "UTCHMMA" in sass and "UGETNEXTWORKID" in sass, sass[:2000]
    assert local_memory_uses(sass) == [], "local memory in the SASS"


def test_blackwell_matmul_ir_is_golden():
    text = str(tilus.trace(BlackwellMatmul()))
    path = os.path.join(GOLDEN, "blackwell_matmul.tir")
    if os.environ.get("TILUS_UPDATE_GOLDEN") == "1":
        with open(path, "w") as f:
            f.write(text)
    with open(path) as f:
        assert text == f.read(), f"{path} differs (TILUS_UPDATE_GOLDEN=1 rewrites it)"


def test_blackwell_matmul_passes_are_golden():
    """The passes' output for Blackwell: the async-wait pass's tcgen05.wait_load, the barrier pass's
    barriers only around the three roles, the lowering records and the planned slot of the
    accumulators' address."""
    stages = BlackwellMatmul().ir(*_example_args(301, 517, 200), arch="sm_100a")
    text = "".join(f"--- {name}\n{stages[name]}" for name in ("select_instructions", "plan_shared_memory",
                                                               "insert_async_waits", "insert_barriers"))
    path = os.path.join(GOLDEN, "blackwell_matmul_passes.tir")
    if os.environ.get("TILUS_UPDATE_GOLDEN") == "1":
        with open(path, "w") as f:
            f.write(text)
    with open(path) as f:
        assert text == f.read(), f"{path} differs (TILUS_UPDATE_GOLDEN=1 rewrites it)"
