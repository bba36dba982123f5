"""Seed 004 (TileLang's tilelang.language.builtin) under its names: every one of its 52 functions is
a Script method, and the thirteen that map onto tilus last (pointers, TMA descriptors and loads,
register-reallocation hints, matrix descriptors, the cluster barrier arrival, Volta's mma and
tcgen05_mma_arrive) do what the seed says, on each backend present (the `arrays` fixture)."""
import numpy as np
import pytest

import tilus
from tilus import float16, float32, int32, uint32, uint64

from conftest import HAS_CPU

needs_cpu = pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")

# The functions seed 004 lists (its autoapisummary), in its order.
SEED_004 = """access_ptr create_tma_descriptor tma_load fence_proxy_async tma_store_arrive tma_store_wait set_max_nreg
inc_max_nreg dec_max_nreg annotate_producer_reg_dealloc annotate_consumer_reg_alloc no_set_max_nreg
disable_warp_group_reg_alloc ptx_arrive_cluster_barrier mbarrier_wait_parity mbarrier_arrive mbarrier_expect_tx
warpgroup_arrive warpgroup_commit_batch warpgroup_wait get_lane_idx get_warp_idx_sync get_warp_idx
get_warp_group_idx shuffle_elect warpgroup_fence_operand wait_wgmma barrier_wait barrier_arrive shfl_xor shfl_down
shfl_up sync_threads sync_warp shfl_sync sync_global sync_grid initialize_wgmma_descriptor
initialize_tcgen05_descriptor increase_descriptor_offset loop_break cp_async_barrier_noinc tcgen05_mma_arrive
ptx_mma_sm70 ldg32 ldg64 ldg128 ldg256 stg32 stg64 stg128 stg256""".split()


def test_every_seed_004_function_is_a_script_method():
    assert len(SEED_004) == 52 and len(set(SEED_004)) == 52
    missing = [n for n in SEED_004 if not callable(getattr(tilus.Script, n, None))]
    assert missing == []


# --- access_ptr ---------------------------------------------------------------------------------------

class AccessPtr(tilus.Script):
    """y[0:4] = x[1, 2 + 3 : 2 + 3 + 4] read through access_ptr(x[1, 2], offset=3); y[4:8] = the head of
    row 2 through ignore_last_ndim (x[2, 5] with the last dim's offset dropped: x[2, 0:4])."""

    def __call__(self, x: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        g = self.global_view(x, shape=[4, 16])
        gy = self.global_view(y, shape=[8])
        p = self.access_ptr(g[1, 2], "r", 4, offset=3)
        self.store_global(gy, self.load_global(self.global_view(p, shape=[4]), offsets=[0], shape=[4]), offsets=[0])
        q = self.access_ptr(g[2, 5], "r", extent=4, ignore_last_ndim=1)
        self.store_global(gy, self.load_global(self.global_view(q, shape=[4]), offsets=[0], shape=[4]), offsets=[4])


def test_access_ptr_reads_the_element_it_names(arrays):
    x = arrays.rand((4, 16))
    y = arrays.empty((8,))
    AccessPtr()(x, y)
    hx = arrays.host(x)
    np.testing.assert_array_equal(arrays.host(y), np.concatenate([hx[1, 5:9], hx[2, 0:4]]))


def _error(body, arch="sm_90a", warps=4, cluster=None):
    class Bad(tilus.Script):
        def __call__(self, out: ~float32):
            self.attrs.blocks = [2] if cluster else [1]
            if cluster:
                self.attrs.cluster_blocks = cluster
            self.attrs.warps = warps
            body(self, out)

    with pytest.raises(tilus.CompileError) as e:
        Bad().ir(np.zeros(64, np.float32), arch=arch)
    assert "test_seed_builtins.py:" in str(e.value), str(e.value)
    return str(e.value)


def test_access_ptr_errors():
    def outside(s, out):
        t = s.shared_tensor(dtype=float32, shape=[4, 8])
        s.access_ptr(t[3, 4], "w", 8)
    assert "access_ptr: elements [28, 36) lie outside shared float32[4, 8]" in _error(outside)
    assert "access_type must be 'r', 'w', 'rw' or 1, 2, 3, got str 'x'" in _error(
        lambda s, out: s.access_ptr(s.global_view(out, shape=[64]), "x"))
    assert "base must be a global or shared tensor" in _error(lambda s, out: s.access_ptr(3))


# --- create_tma_descriptor / tma_load -----------------------------------------------------------------

class DescriptorLoad(tilus.Script):
    """The box [8, 16] of x [rows, 40] at (row0, col0) through seed 004's descriptor and TMA load,
    completed on an mbarrier the kernel expects the bytes on; rows past the end are zeros."""

    def __call__(self, rows: int32, row0: int32, col0: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        # data_type, rank, global_addr, shape (innermost first), strides in bytes, box, element
        # strides, interleave, swizzle, l2 promotion, oob fill.
        desc = self.create_tma_descriptor(float32, 2, x, 40, rows, 4, 40 * 4, 16, 8, 1, 1, 0, 0, 0, 0)
        s = self.shared_tensor(dtype=float32, shape=[8, 16])
        bar = self.mbarrier.alloc(counts=[1])
        self.sync()
        with self.single_thread():
            self.mbarrier_expect_tx(bar[0], 8 * 16 * 4)
            self.tma_load(desc, bar[0], s, col0, row0)
            self.mbarrier_arrive(bar[0])
        self.mbarrier_wait_parity(bar[0], 0)
        self.store_global(self.global_view(y, shape=[8, 16]), self.load_shared(s), offsets=[0, 0])


@pytest.mark.parametrize("rows,row0,col0", [(20, 3, 8), (13, 9, 24)])
def test_tma_load_through_a_descriptor(arrays, rows, row0, col0):
    x = arrays.rand((rows, 40))
    y = arrays.empty((8, 16))
    DescriptorLoad()(rows, row0, col0, x, y)
    want = np.zeros((8, 16), np.float32)
    part = arrays.host(x)[row0:row0 + 8, col0:col0 + 16]
    want[:part.shape[0], :part.shape[1]] = part
    np.testing.assert_array_equal(arrays.host(y), want)


def test_tma_descriptor_errors():
    def count(s, out):
        s.create_tma_descriptor(float32, 2, out, 64, 1, 4)
    assert "create_tma_descriptor: rank 2 takes 7 + 4 * rank = 15 arguments (rank 1 to 5), got 6" in _error(count)

    def fill(s, out):
        s.create_tma_descriptor(float32, 1, out, 64, 4, 16, 1, 0, 0, 0, 1)
    assert "interleave and oob_fill must be 0" in _error(fill)

    def stride(s, out):
        s.create_tma_descriptor(float32, 1, out, 64, 2, 16, 1, 0, 0, 0, 0)
    assert "the innermost global_stride must be the element's size, 4 bytes for float32, got 2" in _error(stride)

    def box(s, out):
        d = s.create_tma_descriptor(float32, 1, out, 64, 4, 16, 1, 0, 0, 0, 0)
        t = s.shared_tensor(dtype=float32, shape=[8])
        bar = s.mbarrier.alloc(counts=[1])
        s.tma_load(d, bar[0], t, 0)
    assert "tma_load: smem shared float32[8] does not hold the descriptor's box [16]" in _error(box)


# --- register reallocation hints ----------------------------------------------------------------------

class Specialized(tilus.Script):
    def __init__(self, hints):
        super().__init__()
        self.hints = hints

    def __call__(self, out: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 8
        if self.hints:
            self.no_set_max_nreg()
            self.disable_warp_group_reg_alloc()
        with self.warp_group(warp_begin=0, num_warps=4):
            if self.hints:
                self.annotate_producer_reg_dealloc()
        with self.warp_group(warp_begin=4, num_warps=4):
            if self.hints:
                self.annotate_consumer_reg_alloc(232)
            self.store_global(self.global_view(out, shape=[128]), self.register_tensor(dtype=float32, shape=[128],
                                                                                      init=1.0), offsets=[0])


def test_register_hints_in_cuda():
    out = np.zeros(128, np.float32)
    with_hints = Specialized(True).source(out, arch="sm_90a")
    assert "tilus::setmaxnreg_dec<24>()" in with_hints and "tilus::setmaxnreg_inc<232>()" in with_hints
    # no_set_max_nreg / disable_warp_group_reg_alloc: tilus adds no setmaxnreg of its own.
    assert "setmaxnreg" not in Specialized(False).source(out, arch="sm_90a")
    assert "reg_count 7 must be a multiple of 8 from 24 to 256" in _error(lambda s, out: s.annotate_consumer_reg_alloc(7))


def test_register_hints_run(arrays):
    out = arrays.empty((128,))
    Specialized(True)(out)
    np.testing.assert_array_equal(arrays.host(out), np.ones(128, np.float32))


# --- ptx_arrive_cluster_barrier ------------------------------------------------------------------------

class PeerArrive(tilus.Script):
    """Clusters of two: each block's first thread arrives on the other block's barrier and waits on
    its own, which only the peer completes; then writes its rank + 1."""

    def __call__(self, out: ~int32):
        self.attrs.blocks = [2]
        self.attrs.cluster_blocks = 2
        self.attrs.warps = 1
        bar = self.mbarrier.alloc(counts=[1])
        self.cluster.sync()
        rank = self.cluster.blockRank
        with self.single_thread():
            self.ptx_arrive_cluster_barrier(bar[0], 1 - rank)
        self.mbarrier_wait_parity(bar[0], 0)
        self.store_global(self.global_view(out, shape=[2]), self.register_tensor(dtype=int32, shape=[1],
                                                                                init=rank + 1), offsets=[rank])
        self.cluster.sync()


def test_ptx_arrive_cluster_barrier(arrays):
    out = arrays.put(np.zeros(2, np.int32))
    PeerArrive()(out)
    np.testing.assert_array_equal(arrays.host(out), [1, 2])
    text = str(tilus.trace(PeerArrive()))
    assert "mbarrier.arrive(" in text and "cta_id=" in text, text


# --- matrix descriptors ---------------------------------------------------------------------------------

def wgmma_bits(addr, layout, lbo, sbo):
    """PTX ISA "Matrix Descriptor Format" (wgmma): fields as the seed's bitfields hold them."""
    return ((addr & 0x3FFFF) >> 4) | (lbo << 16) | (sbo << 32) | (layout << 62)


def tcgen05_bits(addr, lbo, sbo, base, absolute, swizzle):
    """PTX ISA tcgen05 "Shared memory descriptor": version 1 at bit 46."""
    return (((addr & 0x3FFFF) >> 4) | (lbo << 16) | (sbo << 32) | (1 << 46) | ((base & 7) << 49) |
            (int(absolute) << 52) | ((swizzle & 7) << 61))


class Descriptors(tilus.Script):
    """Each descriptor from kernel scalars (the address a parameter), written to out as uint64."""

    def __call__(self, addr: uint32, lbo: uint32, sbo: uint32, step: uint32, out: ~uint64):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        g = self.global_view(out, shape=[4])
        w: uint64 = 0
        self.initialize_wgmma_descriptor(w, addr, 1, lbo, sbo)
        t: uint64 = 0
        self.initialize_tcgen05_descriptor(t, addr, lbo, sbo, base_offset=5, leading_is_absolute=True,
                                           swizzle_mode=2)
        self.store_global(g, self.register_tensor(dtype=uint64, shape=[1], init=w), offsets=[0])
        self.store_global(g, self.register_tensor(dtype=uint64, shape=[1], init=t), offsets=[1])
        self.increase_descriptor_offset(w, step)
        self.store_global(g, self.register_tensor(dtype=uint64, shape=[1], init=w), offsets=[2])
        moved = self.increase_descriptor_offset(t, 1024)
        self.store_global(g, self.register_tensor(dtype=uint64, shape=[1], init=moved), offsets=[3])


@pytest.mark.parametrize("addr,lbo,sbo,step", [(0x1230, 1, 64, 512), (0x3FFF0, 0x3FFF, 0x2A5, 0x40)])
def test_matrix_descriptors(arrays, addr, lbo, sbo, step):
    out = arrays.put(np.zeros(4, np.uint64))
    Descriptors()(addr, lbo, sbo, step, out)
    w = wgmma_bits(addr, 1, lbo, sbo)
    t = tcgen05_bits(addr, lbo, sbo, 5, True, 2)

    def moved(d, by):  # the low 32 bits advance by by >> 4, the high ones stay
        return (d & ~0xFFFFFFFF) | (((d & 0xFFFFFFFF) + (by >> 4)) & 0xFFFFFFFF)
    np.testing.assert_array_equal(arrays.host(out).astype(np.uint64),
                                  np.array([w, t, moved(w, step), moved(t, 1024)], dtype=np.uint64))


def test_matrix_descriptors_of_constants_fold():
    s = tilus.Script()
    assert s.initialize_wgmma_descriptor(None, 0x400, 2, 1, 32) == wgmma_bits(0x400, 2, 1, 32)
    assert s.initialize_tcgen05_descriptor(None, 0x800, 1, 64, swizzle_mode=6) == tcgen05_bits(0x800, 1, 64, 0,
                                                                                               False, 6)
    assert s.increase_descriptor_offset(0xFFFFFFFF, 32) == 1


def test_matrix_descriptor_errors():
    def shared(s, out):
        t = s.shared_tensor(dtype=float16, shape=[64, 64])
        s.initialize_wgmma_descriptor(None, t)
    assert "start_address must be a byte address in the shared window" in _error(shared)
    assert "layout_type_ must be in [0, 4) (a 2-bit field), got 4" in _error(
        lambda s, out: s.initialize_wgmma_descriptor(None, 0, 4))
    assert "descriptor must be a mutable uint64 kernel variable" in _error(
        lambda s, out: s.initialize_tcgen05_descriptor(3, 0, 1, 1))


# --- ptx_mma_sm70 ----------------------------------------------------------------------------------------

class Volta(tilus.Script):
    def __init__(self, a_layout, b_layout, c_dtype):
        super().__init__()
        self.a_layout, self.b_layout, self.c_dtype = a_layout, b_layout, c_dtype

    def __call__(self, a: ~float16, b: ~float16, c: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        sa = [16, 4] if self.a_layout == "row" else [4, 16]
        sb = [4, 16] if self.b_layout == "row" else [16, 4]
        ra = self.load_global(self.global_view(a, shape=sa), offsets=[0, 0], shape=sa)
        rb = self.load_global(self.global_view(b, shape=sb), offsets=[0, 0], shape=sb)
        gc = self.global_view(c, shape=[16, 16])
        acc = self.load_global(gc, offsets=[0, 0], shape=[16, 16]).to(self.c_dtype)
        cd = "fp32" if self.c_dtype == float32 else "fp16"
        self.ptx_mma_sm70("m16n16k4", self.a_layout, self.b_layout, "fp16", "fp16", cd, ra, 0, rb, 0, acc, 0)
        self.store_global(gc, acc.to(float32), offsets=[0, 0])


@pytest.mark.parametrize("a_layout,b_layout,c_dtype", [("row", "col", float32), ("col", "row", float32),
                                                       ("row", "row", float16)])
def test_ptx_mma_sm70(arrays, a_layout, b_layout, c_dtype):
    rng = np.random.default_rng(7)
    ha = rng.uniform(-1, 1, (16, 4) if a_layout == "row" else (4, 16)).astype(np.float16)
    hb = rng.uniform(-1, 1, (4, 16) if b_layout == "row" else (16, 4)).astype(np.float16)
    hc = rng.uniform(-1, 1, (16, 16)).astype(np.float32)
    if c_dtype == float16:
        hc = hc.astype(np.float16).astype(np.float32)
    c = arrays.put(hc.copy())  # (on the CPU the kernel writes the array put passes)
    Volta(a_layout, b_layout, c_dtype)(arrays.put(ha), arrays.put(hb), c)
    fa = ha.astype(np.float64) if a_layout == "row" else ha.astype(np.float64).T
    fb = hb.astype(np.float64) if b_layout == "row" else hb.astype(np.float64).T
    tol = 1e-2 if c_dtype == float16 else 1e-5
    np.testing.assert_allclose(arrays.host(c), hc + fa @ fb, rtol=tol, atol=tol)


def test_ptx_mma_sm70_errors():
    def call(a_shape, c_dtype_name):
        def body(s, out):
            a = s.register_tensor(dtype=float16, shape=a_shape, init=0.0)
            b = s.register_tensor(dtype=float16, shape=[4, 16], init=0.0)
            c = s.register_tensor(dtype=float32, shape=[16, 16], init=0.0)
            s.ptx_mma_sm70("m16n16k4", "row", "row", "fp16", "fp16", c_dtype_name, a, 0, b, 0, c, 0)
        return _error(body, warps=1)
    assert "multiplicand_a must be a register tensor [16, 4] at index 0" in call([16, 8], "fp32")
    assert "C_dtype is float16 but the tensor is" in call([16, 4], "fp16")
    assert "shape must be 'm16n16k4', got str 'm8n8k4'" in _error(
        lambda s, out: s.ptx_mma_sm70("m8n8k4", "row", "row", "fp16", "fp16", "fp16", None, 0, None, 0, None, 0))
