"""mbarriers, TMA copies and proxy fences (issue 14): on the CPU backend (numpy) and the GPU
(torch, sm_90), against numpy on random data with ragged shapes; the IR and CUDA source they
compile to for sm_90a; and the errors of bad or unsynchronized use."""
import re

import numpy as np
import pytest

import tilus
from tilus import float16, float32, int8, int32, uint8
from conftest import HAS_CPU, HAS_GPU, line_in


def tma_tile(dt, bm, bn, cluster=None):
    """y = x + 1, each [bm, bn] tile loaded with tma.global_to_shared on an mbarrier (in clusters
    of `cluster` blocks when given)."""

    class TmaTile(tilus.Script):
        def __call__(self, m: int32, n: int32, x: ~dt, y: ~dt):
            self.attrs.blocks = [tilus.cdiv(m, bm), tilus.cdiv(n, bn)]
            self.attrs.warps = 4
            if cluster:
                self.attrs.cluster_blocks = cluster
            gx = self.global_view(x, shape=[m, n])
            gy = self.global_view(y, shape=[m, n])
            s = self.shared_tensor(dtype=dt, shape=[bm, bn])
            bar = self.mbarrier.alloc(counts=[1])
            o = [self.blockIdx.x * bm, self.blockIdx.y * bn]
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(bar, transaction_bytes=bm * bn * (dt.bits // 8))
                self.tma.global_to_shared(src=gx, dst=s, offsets=o, mbarrier=bar)
            self.mbarrier.wait(bar, phase=0)
            self.store_global(gy, self.load_shared(s) + 1, offsets=o)

    return TmaTile()


NP = {float16: np.float16, float32: np.float32, int8: np.int8, uint8: np.uint8}


# Swizzles: 128B (rows of 128 bytes), 64B (f16 [32, 32]), 32B (f16 [64, 16]); 4-, 2- and 1-byte dtypes.
@pytest.mark.parametrize("dt,bm,bn", [(float32, 16, 32), (float16, 32, 64), (int8, 8, 128), (float16, 64, 16),
                                      (float16, 32, 32)])
def test_tma_load_tile(arrays, dt, bm, bn):
    m, n = 45, 208  # ragged: boxes cross the tensor's edge (zero-filled, never written back)
    h = (np.random.default_rng(1).uniform(-20, 20, size=(m, n))).astype(NP[dt])
    x = arrays.put(h)
    y = arrays.put(np.zeros((m, n), NP[dt]))
    tma_tile(dt, bm, bn)(m, n, x, y)
    np.testing.assert_array_equal(arrays.host(y), (h + np.array(1, NP[dt])).astype(NP[dt]))


class TmaStore(tilus.Script):
    """y = 2 x: registers -> shared (generic stores) -> tma.shared_to_global; the passes add the
    proxy fence and the barrier the TMA store needs."""

    def __call__(self, m: int32, n: int32, x: ~float16, y: ~float16):
        self.attrs.blocks = [tilus.cdiv(m, 64), tilus.cdiv(n, 64)]
        self.attrs.warps = 4
        o = [self.blockIdx.x * 64, self.blockIdx.y * 64]
        v = self.load_global(self.global_view(x, shape=[m, n]), offsets=o, shape=[64, 64])
        s = self.shared_tensor(dtype=float16, shape=[64, 64])
        self.store_shared(s, v + v)
        self.tma.shared_to_global(s, self.global_view(y, shape=[m, n]), offsets=o)
        self.tma.commit_group()
        self.tma.wait_group(0)


def test_tma_loads_in_clusters_of_two(arrays):
    m, n = 45, 256  # 4 column blocks: clusters of 2 along them
    h = np.random.default_rng(7).uniform(-20, 20, size=(m, n)).astype(np.float16)
    y = arrays.put(np.zeros((m, n), np.float16))
    tma_tile(float16, 32, 64, cluster=[1, 2])(m, n, arrays.put(h), y)
    np.testing.assert_array_equal(arrays.host(y), h + np.float16(1))


def test_swizzle_spans_match_the_rows():
    x = np.zeros((64, 64), np.float16)
    for bn, span in ((64, 128), (32, 64), (16, 32)):
        ir = final_ir(tma_tile(float16, 32, bn), 64, 64, x, x, arch="sm_90a")
        assert f"swizzle {span}" in ir, (bn, ir)


def test_tma_store_tile(arrays):
    m, n = 70, 136  # rows of 272 bytes: TMA strides are multiples of 16 bytes
    h = np.random.default_rng(2).uniform(-4, 4, size=(m, n)).astype(np.float16)
    y = arrays.put(np.full((m, n), 7, np.float16))
    TmaStore()(m, n, arrays.put(h), y)
    np.testing.assert_array_equal(arrays.host(y), h + h)


class Pipelined(tilus.Script):
    """Row sums of x [m, k] over k tiles in a 2-stage TMA pipeline (seed names: tma_copy,
    mbarrier_wait_parity), one mbarrier per stage; the phase alternates per use."""

    def __call__(self, m: int32, k: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(m, 32)]
        self.attrs.warps = 4
        gx = self.global_view(x, shape=[m, k])
        s = self.shared_tensor(dtype=float32, shape=[2, 32, 32])
        bars = self.mbarrier.alloc(counts=[1, 1])
        acc = self.register_tensor(dtype=float32, shape=[32, 32], init=0.0)
        row = self.blockIdx.x * 32
        tiles = tilus.cdiv(k, 32)
        with self.single_thread():
            self.tma_copy(gx[row:row + 32, 0:32], s[0], barrier=bars[0])
        for t in range(tiles):
            with self.single_thread():
                if t + 1 < tiles:
                    self.tma_copy(gx[row:row + 32, (t + 1) * 32:(t + 2) * 32], s[(t + 1) % 2], barrier=bars[(t + 1) % 2])
            self.mbarrier_wait_parity(bars[t % 2], (t // 2) % 2)
            acc = acc + self.load_shared(s[t % 2])
            self.sync()
        self.store_global(self.global_view(y, shape=[m, 1]), self.sum(acc, dim=1, keepdim=True), offsets=[row, 0])


def test_pipelined_tma_copy_with_seed_names(arrays):
    m, k = 75, 200
    h = np.random.default_rng(3).uniform(-1, 1, size=(m, k)).astype(np.float32)
    y = arrays.put(np.zeros((m, 1), np.float32))
    Pipelined()(m, k, arrays.put(h), y)
    np.testing.assert_allclose(arrays.host(y)[:, 0], h.sum(axis=1), rtol=1e-5, atol=1e-4)


class Prologue(tilus.Script):
    """Row sums over k tiles in a 3-stage TMA ring whose prologue is a kernel loop of two trips
    (stages 0 and 1, as NVIDIA Tilus's Blackwell v2 fills its ring); iteration t preloads stage
    (t + 2) % 3 before waiting on stage t % 3. The async-wait pass must see that the prologue never
    loads stage 2: a third trip that never runs would meet iteration 0's preload."""

    def __call__(self, m: int32, k: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(m, 32)]
        self.attrs.warps = 4
        gx = self.global_view(x, shape=[m, k])
        s = self.shared_tensor(dtype=float32, shape=[3, 32, 32])
        bars = self.mbarrier.alloc(counts=[1, 1, 1])
        acc = self.register_tensor(dtype=float32, shape=[32, 32], init=0.0)
        row = self.blockIdx.x * 32
        tiles = tilus.cdiv(k, 32)
        for i in range(2):
            with self.single_thread():
                self.tma_copy(gx[row:row + 32, i * 32:(i + 1) * 32], s[i], barrier=bars[i])
        for t in range(tiles):
            with self.single_thread():
                if t + 2 < tiles:
                    self.tma_copy(gx[row:row + 32, (t + 2) * 32:(t + 3) * 32], s[(t + 2) % 3], barrier=bars[(t + 2) % 3])
            self.mbarrier_wait_parity(bars[t % 3], (t // 3) % 2)
            acc = acc + self.load_shared(s[t % 3])
            self.sync()
        self.store_global(self.global_view(y, shape=[m, 1]), self.sum(acc, dim=1, keepdim=True), offsets=[row, 0])


def test_a_prologue_loop_meets_the_ring_only_at_its_own_stages(arrays):
    # k ragged against the 32-wide tiles, but a row of x a multiple of 16 bytes: TMA's stride rule
    m, k = 40, 228
    h = np.random.default_rng(4).uniform(-1, 1, size=(m, k)).astype(np.float32)
    y = arrays.put(np.zeros((m, 1), np.float32))
    Prologue()(m, k, arrays.put(h), y)
    np.testing.assert_allclose(arrays.host(y)[:, 0], h.sum(axis=1), rtol=1e-5, atol=1e-4)


class AutoCopy(tilus.Script):
    """A synchronous copy global -> shared that sm_90 lowers to TMA on its own."""

    def __call__(self, m: int32, n: int32, x: ~float16, y: ~float16):
        self.attrs.blocks = [tilus.cdiv(m, 64), tilus.cdiv(n, 64)]
        self.attrs.warps = 4
        o = [self.blockIdx.x * 64, self.blockIdx.y * 64]
        gx = self.global_view(x, shape=[m, n])
        s = self.shared_tensor(dtype=float16, shape=[64, 64])
        self.copy(gx[o[0]:o[0] + 64, o[1]:o[1] + 64], s)
        self.store_global(self.global_view(y, shape=[m, n]), self.load_shared(s), offsets=o)


def final_ir(script, *args, arch):
    return list(script.ir(*args, arch=arch).values())[-1]


def test_copy_becomes_tma_on_sm90_when_legal():
    ir = final_ir(AutoCopy(), 128, 256, np.zeros((128, 256), np.float16), np.zeros((128, 256), np.float16), arch="sm_90a")
    assert "tma.load tensor_map=0 copy_barrier=0 completion=synchronous" in ir
    assert "tensor_map 0:" in ir and "swizzle 128" in ir
    # Sizes not known to keep 16-byte rows: cp.async / SIMT, and the note says why.
    ir = final_ir(AutoCopy(), 127, 255, np.zeros((127, 255), np.float16), np.zeros((127, 255), np.float16), arch="sm_90a")
    assert "tma.load" not in ir and "not a known multiple of 16 bytes" in ir
    ir = final_ir(AutoCopy(), 128, 256, np.zeros((128, 256), np.float16), np.zeros((128, 256), np.float16), arch="sm_80")
    assert "tma.load" not in ir and "has no TMA" in ir


def test_auto_tma_copy_runs(arrays):
    m, n = 128, 192
    h = np.random.default_rng(4).uniform(-4, 4, size=(m, n)).astype(np.float16)
    y = arrays.put(np.zeros((m, n), np.float16))
    AutoCopy()(m, n, arrays.put(h), y)
    np.testing.assert_array_equal(arrays.host(y), h)


def test_tma_cuda_source_for_sm90a():
    x = np.zeros((45, 208), np.float32)
    src = tma_tile(float32, 16, 32).source(45, 208, x, x, arch="sm_90a")
    assert "const __grid_constant__ tilus::TensorMap tilus_tensor_map_0" in src
    assert "tilus::tma_load<2>" in src and "tilus::mbarrier_wait" in src and "tilus::mbarrier_init" in src
    ptx = tma_tile(float32, 16, 32).ptx(45, 208, x, x, arch="sm_90a")
    assert "cp.async.bulk.tensor.2d" in ptx and "mbarrier.try_wait.parity" in ptx
    store = TmaStore().source(70, 136, np.zeros((70, 136), np.float16), np.zeros((70, 136), np.float16), arch="sm_90a")
    assert store.index("fence_proxy_async_shared") < store.index("tilus::tma_store<2>")


class HintedTma(tilus.Script):
    """y = x through shared memory by TMA with L2 hints: a tma_copy load that evicts first and a copy
    back (TMA store by annotation) that evicts last."""

    def __call__(self, m: int32, n: int32, x: ~float16, y: ~float16):
        self.attrs.blocks = [tilus.cdiv(m, 64), tilus.cdiv(n, 64)]
        self.attrs.warps = 4
        o = [self.blockIdx.x * 64, self.blockIdx.y * 64]
        gx, gy = self.global_view(x, shape=[m, n]), self.global_view(y, shape=[m, n])
        s = self.shared_tensor(dtype=float16, shape=[64, 64])
        bar = self.mbarrier.alloc(counts=[1])
        with self.single_thread():
            self.tma_copy(gx[o[0]:o[0] + 64, o[1]:o[1] + 64], s, barrier=bar, eviction_policy="evict_first")
        self.mbarrier.wait(bar, phase=0)
        self.copy(s, gy[o[0]:o[0] + 64, o[1]:o[1] + 64], eviction_policy="evict_last", annotations={"use_tma": True})


def test_tma_copies_apply_their_l2_hints(arrays):
    m, n = 128, 192
    x = np.zeros((m, n), np.float16)
    src = HintedTma().source(m, n, x, x, arch="sm_90a")
    assert "tilus::policy_evict_first()" in src and "tilus::policy_evict_last()" in src
    assert re.search(r"tilus::tma_load<2>\([^;]*, policy[_0-9]*\);", src), src
    assert re.search(r"tilus::tma_store<2>\([^;]*, policy[_0-9]*\);", src), src
    ptx = HintedTma().ptx(m, n, x, x, arch="sm_90a")
    assert "createpolicy.fractional.L2::evict_first" in ptx and "createpolicy.fractional.L2::evict_last" in ptx
    assert ".global.tile.mbarrier::complete_tx::bytes.L2::cache_hint" in ptx
    assert ".global.shared::cta.bulk_group.L2::cache_hint" in ptx
    assert len(HintedTma().compiled(m, n, x, x, arch="sm_90a").cubin) > 0  # ptxas takes the hinted forms
    h = np.random.default_rng(5).uniform(-4, 4, size=(m, n)).astype(np.float16)
    y = arrays.put(np.zeros((m, n), np.float16))
    HintedTma()(m, n, arrays.put(h), y)
    np.testing.assert_array_equal(arrays.host(y), h)


class NeverArrives(tilus.Script):
    def __call__(self, n: int32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        bar = self.mbarrier.alloc(counts=[32])
        self.mbarrier.arrive(bar[0])
        self.mbarrier.wait(bar[0], phase=0)  # the warp's 32 threads arrived: completes
        with self.single_thread():
            self.mbarrier.arrive(bar[0])
        self.mbarrier.wait(bar[0], phase=1)  # one arrival of 32: never completes


@pytest.mark.skipif(not tilus.cpu_backend_available(), reason="no CPU backend (tilus built without LLVM)")
def test_a_wait_that_never_completes_is_an_error_on_the_cpu():
    with pytest.raises(tilus.CpuCheckError, match=r"test_hopper_copies.py:\d+: mbarrier.wait: waits for the phase of "
                                                 r"parity 1 .* 31 of its 32 arrivals"):
        NeverArrives()(1, np.zeros(1, np.float32))


class MissingWait(tilus.Script):
    def __call__(self, n: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        s = self.shared_tensor(dtype=float32, shape=[32, 32])
        bar = self.mbarrier.alloc(counts=[1])
        with self.single_thread():
            self.tma.global_to_shared(src=self.global_view(x, shape=[n, 32]), dst=s, offsets=[0, 0], mbarrier=bar)
        self.store_global(self.global_view(y, shape=[n, 32]), self.load_shared(s), offsets=[0, 0])


def test_reading_a_tma_load_without_its_wait_names_both_lines():
    x = np.zeros((32, 32), np.float32)
    with pytest.raises(tilus.CompileError, match=r"load_shared at .*test_hopper_copies.py:\d+ touches shared memory that "
                                                 r"tma.global_to_shared at .*:\d+ may still be writing; .*mbarrier.wait"):
        MissingWait().ir(32, x, x, arch="sm_90a")


@pytest.mark.parametrize("body,match", [
    (lambda self, s, bar: self.mbarrier.wait(bar, phase=2), r"mbarrier.wait: phase is a parity, 0 or 1, got 2"),
    (lambda self, s, bar: self.mbarrier.arrive(s, 1), r"the barrier must be one mbarrier .* got shared float32\[32, 32\]"),
    (lambda self, s, bar: self.mbarrier.arrive(bar, sem="acquire"), r"mbarrier.arrive: sem='acquire' is not one of"),
    (lambda self, s, bar: self.tma.wait_group(-1), r"tma.wait_group: n must be >= 0"),
    (lambda self, s, bar: self.mbarrier.arrive_and_expect_tx_remote(bar, 16, 1.5),
     r"mbarrier.arrive_and_expect_tx: the peer block \(cta_id / target_rank\) must be an integer, got 1.5"),
    (lambda self, s, bar: self.mbarrier.arrive_and_expect_tx_multicast(bar, 16, 0),
     r"arrive_and_expect_tx_multicast: multicast_mask must name 1 to 16 blocks .* got 0"),
    (lambda self, s, bar: self.fence.proxy_async("local"), r"fence.proxy_async: space='local' is not one of"),
    (lambda self, s, bar: self.tma_copy(s, s, barrier=bar), r"tma_copy: TMA copies global to shared or shared to global"),
    (lambda self, s, bar: self.c2d_im2col(self.global_view(self.x, shape=[4]), s, 0, 0, 3, 1, 1, 1),
     r"c2d_im2col: img must be a global NHWC tensor of rank 4, got global float32\[4\]"),
    (lambda self, s, bar: self.c2d_im2col(self.global_view(self.x, shape=[1, 2, 2, 1]), s, 0, 0, 3, 0, 1, 1),
     r"c2d_im2col: kernel, stride and dilation must be positive and pad non-negative, got kernel=3, stride=0"),
    (lambda self, s, bar: self.tma.global_to_shared(src=self.global_view(self.x, shape=[32, 32]), dst=s, offsets=[0, 0],
                                                    mbarrier=bar, cache_policy=1 << 64),
     r"tma.global_to_shared: cache_policy=0x10000000000000000 does not fit in 64 bits"),
    (lambda self, s, bar: self.tma.global_to_shared(src=self.global_view(self.x, shape=[32, 32]), dst=s, offsets=[0, 0],
                                                    mbarrier=bar, cache_policy=1.5),
     r"tma.global_to_shared: cache_policy is a 64-bit L2 cache policy \(an integer\), got 1.5 of type float32"),
    # A box start proven misaligned (the hardware faults on it): a constant, or an offset the simplifier decides.
    (lambda self, s, bar: self.tma.global_to_shared(src=self.global_view(self.x, shape=[32, 64]), dst=s, offsets=[0, 2],
                                                    mbarrier=bar),
     r"tma.global_to_shared: this TMA copy is not legal: the box starts at innermost offset 2, not a multiple of 4 "
     r"elements of float32 \(16 bytes\)"),
    (lambda self, s, bar: self.tma.shared_to_global(s, self.global_view(self.x, shape=[32, 64]), offsets=[3, 33]),
     r"tma.shared_to_global: this TMA copy is not legal: the box starts at innermost offset 33, not a multiple of 4 "),
    (lambda self, s, bar: self.tma_copy(self.global_view(self.x, shape=[32, 64])[0:32, 6:38], s, barrier=bar),
     r"tma_copy: this TMA copy is not legal: the box starts at innermost offset 6, not a multiple of 4 "),
    (lambda self, s, bar: self.tma.global_to_shared(src=self.global_view(self.x, shape=[32, 64]), dst=s,
                                                    offsets=[0, self.n * 8 + 2], mbarrier=bar),
     r"tma.global_to_shared: this TMA copy is not legal: the box starts at innermost offset \(?n \* 8\)? \+ 2, not a "
     r"multiple of 4 elements of float32"),
])
def test_bad_calls_name_the_instruction_and_line(body, match):
    class Bad(tilus.Script):
        def __call__(self, n: int32, x: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            s = self.shared_tensor(dtype=float32, shape=[32, 32])
            bar = self.mbarrier.alloc(counts=[1])
            self.x, self.n = x, n
            body(self, s, bar)

    with pytest.raises(tilus.CompileError, match=match) as e:
        Bad().ir(4, np.zeros(4, np.float32), arch="sm_90a")
    assert "test_hopper_copies.py:" in str(e.value)


def test_tma_on_sm80_is_an_error_naming_why():
    x = np.zeros((45, 208), np.float32)
    with pytest.raises(tilus.CompileError, match=r"tma.global_to_shared: this TMA copy is not legal on this target "
                                                 r"\(sm_80 has no TMA\)"):
        tma_tile(float32, 16, 32).ir(45, 208, x, x, arch="sm_80")


class TmaStoreToLoadedRows(tilus.Script):
    """A TMA store to a view whose rows end where the kernel read they do: its tensor map cannot be
    encoded on the host (flash attention's per-sequence o did this)."""

    def __call__(self, n: int32, ends: ~int32, y: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        end = self.global_view(ends, shape=[1])[0].item()
        s = self.shared_tensor(dtype=float16, shape=[64, 64])
        self.store_shared(s, self.register_tensor(dtype=float16, shape=[64, 64], init=1.0))
        self.tma.shared_to_global(s, self.global_view(y, shape=[end, n]), offsets=[0, 0])
        self.tma.commit_group()
        self.tma.wait_group(0)


def test_a_tensor_map_of_loaded_extents_is_an_error_naming_the_copy():
    with pytest.raises(tilus.CompileError, match=r"test_hopper_copies.py:\d+: error: tma.shared_to_global: this TMA copy "
                                                 r"is not legal: the global view's shape \S+ uses '\S+', which is not a "
                                                 r"kernel parameter"):
        TmaStoreToLoadedRows().ir(64, np.array([64], np.int32), np.zeros((64, 64), np.float16), arch="sm_90a")


@pytest.mark.skipif(not tilus.gpu_available(), reason="no GPU: tensor maps are encoded at GPU launches")
def test_rows_tma_cannot_stride_are_an_argument_error_naming_the_copy():
    import torch
    x = torch.zeros((70, 130), dtype=torch.float16, device="cuda")
    with pytest.raises(tilus.ArgumentError, match=r"tma.shared_to_global at .*test_hopper_copies.py:\d+: parameter 'y' "
                                                  r"cannot be copied by TMA: the stride of dim 0 is 260 bytes"):
        TmaStore()(70, 130, x, x.clone())


class Im2colTile(tilus.Script):
    """The (nhw_step, c_step) tile of the im2col matrix, written back to global memory as is."""

    def __init__(self, bm, bk, kernel, stride, dilation, pad, c_multiple=None):
        super().__init__()
        self.bm, self.bk, self.geometry, self.c_multiple = bm, bk, (kernel, stride, dilation, pad), c_multiple

    def __call__(self, n: int32, h: int32, w: int32, c: int32, rows: int32, cols: int32, img: ~float16,
                 out: ~float16):
        if self.c_multiple:
            self.assume(c % self.c_multiple == 0)  # lets sm_90 use TMA's im2col mode
        self.attrs.blocks = [tilus.cdiv(rows, self.bm), tilus.cdiv(cols, self.bk)]
        self.attrs.warps = 2
        col = self.shared_tensor(dtype=float16, shape=[self.bm, self.bk])
        self.c2d_im2col(self.global_view(img, shape=[n, h, w, c]), col, self.blockIdx.x, self.blockIdx.y,
                        *self.geometry)
        self.store_global(self.global_view(out, shape=[rows, cols]), self.load_shared(col),
                          offsets=[self.blockIdx.x * self.bm, self.blockIdx.y * self.bk])


def im2col_reference(img, kernel, stride, dilation, pad):
    n, h, w, c = img.shape
    oh = (h + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    out = np.zeros((n * oh * ow, kernel * kernel * c), img.dtype)
    for m in range(n * oh * ow):
        b, y, x = m // (oh * ow), m // ow % oh, m % ow
        for kh in range(kernel):
            for kw in range(kernel):
                iy, ix = y * stride + kh * dilation - pad, x * stride + kw * dilation - pad
                if 0 <= iy < h and 0 <= ix < w:
                    out[m, (kh * kernel + kw) * c:(kh * kernel + kw + 1) * c] = img[b, iy, ix]
    return out


@pytest.mark.parametrize("shape,geometry,tile", [((2, 9, 7, 16), (3, 1, 1, 1), (32, 32)),
                                                 ((1, 11, 13, 3), (5, 2, 2, 3), (16, 8)),
                                                 ((3, 6, 5, 8), (2, 3, 1, 0), (64, 16))])
def test_c2d_im2col_matches_numpy(arrays, shape, geometry, tile):
    h = np.random.default_rng(5).uniform(-8, 8, size=shape).astype(np.float16)
    want = im2col_reference(h, *geometry)
    out = arrays.put(np.full(want.shape, 7, np.float16))
    Im2colTile(*tile, *geometry)(*shape, *want.shape, arrays.put(h), out)
    np.testing.assert_array_equal(arrays.host(out), want)


# TMA's im2col mode (sm_90, C a known multiple of the tile's channels): 128-, 64- and 32-byte rows
# (every swizzle), strides, dilations and pads, tiles crossing the image's edges and the matrix's end.
@pytest.mark.parametrize("shape,geometry,tile", [((2, 9, 7, 64), (3, 1, 1, 1), (64, 64)),
                                                 ((1, 11, 13, 32), (5, 2, 2, 3), (32, 32)),
                                                 ((3, 6, 5, 16), (2, 3, 1, 0), (64, 16)),
                                                 ((2, 10, 12, 32), (3, 2, 1, 0), (128, 32))])
def test_c2d_im2col_by_tma_matches_numpy(arrays, shape, geometry, tile):
    h = np.random.default_rng(6).uniform(-8, 8, size=shape).astype(np.float16)
    want = im2col_reference(h, *geometry)
    x = np.zeros(shape, np.float16)
    ir = final_ir(Im2colTile(*tile, *geometry, c_multiple=tile[1]), *shape, *want.shape, x, want, arch="sm_90a")
    assert "lowering: tma.load tensor_map=0 copy_barrier=0 completion=synchronous" in ir, ir
    k, s, d, p = geometry
    assert f"im2col pixel_box [{-p}, {p - d * (k - 1)}] stride {s}" in ir, ir
    ptx = Im2colTile(*tile, *geometry, c_multiple=tile[1]).ptx(*shape, *want.shape, x, want, arch="sm_90a")
    assert "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes" in ptx
    out = arrays.put(np.full(want.shape, 7, np.float16))
    Im2colTile(*tile, *geometry, c_multiple=tile[1])(*shape, *want.shape, arrays.put(h), out)
    np.testing.assert_array_equal(arrays.host(out), want)


def test_c2d_im2col_says_why_it_is_not_tma():
    x = np.zeros((2, 9, 7, 64), np.float16)
    ir = final_ir(Im2colTile(64, 64, 3, 1, 1, 1), 2, 9, 7, 64, 126, 576, x, x, arch="sm_90a")
    assert "tma im2col: not legal: C (c) is not a known multiple of the tile's 64 channels" in ir, ir
    ir = final_ir(Im2colTile(64, 64, 3, 9, 1, 1, c_multiple=64), 2, 9, 7, 64, 126, 576, x, x, arch="sm_90a")
    assert "tma im2col: not legal: stride 9 exceeds TMA's traversal stride of 8" in ir, ir


def test_a_broken_assumption_is_an_argument_error(arrays):
    h = np.zeros((1, 4, 4, 48), np.float16)
    out = arrays.put(np.zeros((16, 432), np.float16))
    with pytest.raises(tilus.ArgumentError, match=r"assume\(floor_mod\(c, 32\) == 0\) at .*test_hopper_copies.py:\d+ does not "
                                                  r"hold for these arguments \(c = 48\)"):
        Im2colTile(32, 32, 3, 1, 1, 1, c_multiple=32)(1, 4, 4, 48, 16, 432, arrays.put(h), out)


def test_c2d_im2col_vectorizes_along_channels():
    x = np.zeros((2, 9, 7, 16), np.float16)
    ir = final_ir(Im2colTile(32, 32, 3, 1, 1, 1), 2, 9, 7, 16, 126, 144, x, np.zeros((126, 144), np.float16),
                  arch="sm_90a")
    assert "c2d_im2col(" in ir and "lowering: simt vector=8" in ir
    x = np.zeros((1, 11, 13, 3), np.float16)
    ir = final_ir(Im2colTile(16, 8, 5, 2, 2, 3), 1, 11, 13, 3, 24, 75, x, np.zeros((24, 75), np.float16), arch="sm_90a")
    assert "lowering: simt vector=1" in ir


class StoreAt(tilus.Script):
    """A TMA load then a TMA store of the same box, at run-time offsets."""

    def __call__(self, m: int32, n: int32, x: ~float16, y: ~float16, off_m: int32, off_n: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        s = self.shared_tensor(dtype=float16, shape=[32, 64])
        bars = self.mbarrier.alloc(counts=[1])
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(bars[0], 32 * 64 * 2)
            self.tma.global_to_shared(src=self.global_view(x, shape=[m, n]), dst=s, offsets=[off_m, off_n],
                                      mbarrier=bars[0])
        self.mbarrier.wait(bars[0], 0)
        with self.single_thread():
            self.tma.shared_to_global(s, self.global_view(y, shape=[m, n]), offsets=[off_m, off_n])
            self.tma.commit_group()
            self.tma.wait_group(0)


def test_store_boxes_crossing_the_far_edges(arrays):
    m, n = 61, 96
    h = np.random.default_rng(6).uniform(-4, 4, size=(m, n)).astype(np.float16)
    for om, on in [(0, 0), (40, 56), (13, 24)]:
        y = arrays.put(np.full((m, n), 7, np.float16))
        StoreAt()(m, n, arrays.put(h), y, om, on)
        want = np.full((m, n), 7, np.float16)
        want[om:om + 32, on:on + 64] = h[om:om + 32, on:on + 64]
        np.testing.assert_array_equal(arrays.host(y), want)


def test_store_source_names_the_negative_coordinate_check():
    x = np.zeros((61, 96), np.float16)
    src = StoreAt().source(61, 96, x, x, 0, 0, arch="sm_90a")
    assert "a TMA store box cannot start at a negative coordinate" in src and "__trap();" in src


@pytest.mark.skipif(not tilus.gpu_available(), reason="no GPU")
def test_a_store_box_at_a_negative_coordinate_traps_with_its_line():
    # The trap ends the CUDA context: run it in its own process.
    import os
    import subprocess
    import sys
    code = ("import torch, test_hopper_copies as t; x = torch.zeros(61, 96, dtype=torch.float16, device='cuda'); "
            "t.StoreAt()(61, 96, x, x.clone(), -5, 0); torch.cuda.synchronize()")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(__file__)] + sys.path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode != 0
    assert re.search(r"test_hopper_copies.py:\d+: tma.shared_to_global: a TMA store box cannot start at a negative "
                     r"coordinate", r.stdout + r.stderr), r.stdout + r.stderr


def multicast_tile(bm, bn, cluster, sync=True, remote_expect=False):
    """out[r] = x + r + 1 for each [bm, bn] tile of x, by both blocks r of a cluster of `cluster`
    (1 or 2) blocks along dim 0: each block loads 1/cluster of the tile's rows and multicasts them
    into every block of the cluster, so each block sees the whole tile only if the multicast
    reached it. (`sync=False` leaves out the cluster barriers.)
    `remote_expect`: block 0 sets the expected bytes of every block's barrier
    (mbarrier.arrive_and_expect_tx_multicast), the others only load."""

    class MulticastTile(tilus.Script):
        def __call__(self, m: int32, n: int32, x: ~float16, out: ~float16):
            self.attrs.blocks = [tilus.cdiv(m, bm) * cluster, tilus.cdiv(n, bn)]
            self.attrs.cluster_blocks = [cluster, 1]
            self.attrs.warps = 4
            rank = self.cluster.blockRank
            part = bm // cluster
            gx = self.global_view(x, shape=[m, n])
            go = self.global_view(out, shape=[2, m, n])
            s = self.shared_tensor(dtype=float16, shape=[bm, bn])
            bar = self.mbarrier.alloc(counts=[1])
            if sync:
                self.cluster.sync()
            o = [self.blockIdx.x // cluster * bm, self.blockIdx.y * bn]
            if remote_expect:
                if rank == 0:
                    self.mbarrier.arrive_and_expect_tx_multicast(bar, bm * bn * 2, multicast_mask=(1 << cluster) - 1)
            with self.single_thread():
                if not remote_expect:
                    self.mbarrier.arrive_and_expect_tx(bar, transaction_bytes=bm * bn * 2)
                self.tma.global_to_shared(src=gx, dst=self.slice_shared(s, [rank * part, 0], [0, 1], [part, bn]),
                                         offsets=[o[0] + rank * part, o[1]], mbarrier=bar,
                                         multicast_mask=(1 << cluster) - 1)
            self.mbarrier.wait(bar, phase=0)
            self.store_global(go, self.load_shared(s) + (rank + 1), offsets=[rank, o[0], o[1]], dims=[1, 2])
            if sync:
                self.cluster.sync()

    return MulticastTile()


def run_multicast(arrays, cluster, remote_expect=False):
    m, n = 45, 200  # ragged: boxes cross the far edges
    h = np.random.default_rng(5).uniform(-20, 20, size=(m, n)).astype(np.float16)
    out = arrays.put(np.zeros((2, m, n), np.float16))
    multicast_tile(32, 64, cluster, remote_expect=remote_expect)(m, n, arrays.put(h), out)
    got = arrays.host(out)
    for r in range(cluster):
        np.testing.assert_array_equal(got[r], (h + np.float16(r + 1)).astype(np.float16))


@pytest.mark.parametrize("remote_expect", [False, True])
def test_multicast_to_a_cluster_of_one_block_is_its_own_load(arrays, remote_expect):
    run_multicast(arrays, 1, remote_expect)


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: clusters of several blocks run only there")
@pytest.mark.parametrize("remote_expect", [False, True])
def test_multicast_reaches_both_blocks_of_a_cluster(remote_expect):
    from conftest import Arrays
    run_multicast(Arrays("cuda"), 2, remote_expect)


def test_remote_expectations_compile_to_peer_arrivals():
    x = np.zeros((64, 64), np.float16)
    ptx = multicast_tile(32, 64, 2, remote_expect=True).ptx(64, 64, x, np.zeros((2, 64, 64), np.float16), arch="sm_90a")
    assert len(re.findall(r"mbarrier\.arrive\.expect_tx\.release\.cluster\.shared::cluster\.b64", ptx)) == 2, ptx
    assert "mapa.shared::cluster" in ptx


def test_multicast_compiles_to_the_cluster_form_and_its_ir_shows_the_mask():
    x = np.zeros((64, 64), np.float16)
    k = multicast_tile(32, 64, 2)
    ir = final_ir(k, 64, 64, x, np.zeros((2, 64, 64), np.float16), arch="sm_90a")
    assert "multicast_mask=3" in ir, ir
    ptx = k.ptx(64, 64, x, np.zeros((2, 64, 64), np.float16), arch="sm_90a")
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.tile\.mbarrier::complete_tx::bytes"
                     r"\.multicast::cluster", ptx), ptx


@pytest.mark.skipif(not HAS_CPU, reason="the CPU backend is not built (no LLVM)")


def test_multicast_mask_must_be_an_integer():
    class Bad(tilus.Script):
        def __call__(self, n: int32, x: ~float16):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            s = self.shared_tensor(dtype=float16, shape=[32, 64])
            bar = self.mbarrier.alloc(counts=[1])
            self.tma.global_to_shared(src=self.global_view(x, shape=[n, 64]), dst=s, offsets=[0, 0], mbarrier=bar,
                                     multicast_mask=1.5)

    with pytest.raises(tilus.CompileError, match=r"multicast_mask is an integer mask of the cluster's blocks") as e:
        Bad().ir(32, np.zeros((32, 64), np.float16), arch="sm_90a")
    assert "test_hopper_copies.py:" in str(e.value)


class CpAsyncOnBarrier(tilus.Script):
    """y = 2 x, a [64, 64] tile per block: cp.async into shared, then every thread hands its copies
    to an mbarrier (cp_async_barrier_noinc) and waits on it, in two stages of one barrier each."""

    def __call__(self, m: int32, n: int32, x: ~float16, y: ~float16):
        self.attrs.blocks = [tilus.cdiv(m, 64), tilus.cdiv(n, 64)]
        self.attrs.warps = 4
        gx, gy = self.global_view(x, shape=[m, n]), self.global_view(y, shape=[m, n])
        s = self.shared_tensor(dtype=float16, shape=[2, 32, 64])
        bars = self.mbarrier.alloc(counts=[128, 128])  # one arrival per thread
        o = [self.blockIdx.x * 64, self.blockIdx.y * 64]
        for half in range(2):
            self.copy_async(gx, s[half], offsets=[o[0] + half * 32, o[1]])
            self.cp_async_barrier_noinc(bars[half])
        for half in range(2):
            self.mbarrier.wait(bars[half], phase=0)
            v = self.load_shared(s[half])
            self.store_global(gy, v + v, offsets=[o[0] + half * 32, o[1]])


def test_cp_async_barrier_noinc_covers_the_copies(arrays):
    m, n = 90, 136  # ragged: the last tiles cross the tensor's edge
    h = np.random.default_rng(11).uniform(-4, 4, size=(m, n)).astype(np.float16)
    y = arrays.put(np.zeros((m, n), np.float16))
    CpAsyncOnBarrier()(m, n, arrays.put(h), y)
    np.testing.assert_array_equal(arrays.host(y), h + h)


def test_cp_async_barrier_noinc_needs_no_inserted_wait():
    x = np.zeros((128, 128), np.float16)
    ir = final_ir(CpAsyncOnBarrier(), 128, 128, x, x, arch="sm_90a")
    assert ir.count("cp_async_barrier_noinc(") == 1 and "copy_async_wait" not in ir, ir
    src = CpAsyncOnBarrier().source(128, 128, x, x, arch="sm_80")
    assert src.count("tilus::cp_async_mbarrier_arrive_noinc(") == 1
    assert "cp.async.mbarrier.arrive.noinc.shared.b64" in CpAsyncOnBarrier().ptx(128, 128, x, x, arch="sm_80")


EVICT_FIRST, EVICT_LAST = 0x12F0000000000000, 0x14F0000000000000  # createpolicy's encodings (as CUTLASS's)


class RawPolicyTma(tilus.Script):
    """y = x + 1 through shared memory: tma.global_to_shared with a constant raw L2 policy, and
    tma.shared_to_global with the policy passed as a uint64 parameter."""

    def __call__(self, m: int32, n: int32, policy: tilus.uint64, x: ~float16, y: ~float16):
        self.attrs.blocks = [tilus.cdiv(m, 32), tilus.cdiv(n, 64)]
        self.attrs.warps = 4
        o = [self.blockIdx.x * 32, self.blockIdx.y * 64]
        s = self.shared_tensor(dtype=float16, shape=[32, 64])
        bar = self.mbarrier.alloc(counts=[1])
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(bar, transaction_bytes=32 * 64 * 2)
            self.tma.global_to_shared(src=self.global_view(x, shape=[m, n]), dst=s, offsets=o, mbarrier=bar,
                                      cache_policy=EVICT_FIRST)
        self.mbarrier.wait(bar, phase=0)
        self.store_shared(s, self.load_shared(s) + 1)
        self.tma.shared_to_global(s, self.global_view(y, shape=[m, n]), offsets=o, cache_policy=policy)
        self.tma.commit_group()
        self.tma.wait_group(0)


def test_tma_raw_cache_policies(arrays):
    m, n = 75, 200  # ragged: boxes cross the tensor's far edges
    x = np.zeros((m, n), np.float16)
    ir = final_ir(RawPolicyTma(), m, n, EVICT_LAST, x, x, arch="sm_90a")
    assert f"cache_policy={EVICT_FIRST}" in ir.replace("_uint64", ""), ir
    src = RawPolicyTma().source(m, n, EVICT_LAST, x, x, arch="sm_90a")
    assert re.search(r"tilus::tma_load<2>\([^;]*, policy[_0-9]*\);", src), src
    assert re.search(r"tilus::tma_store<2>\([^;]*, policy[_0-9]*\);", src), src
    ptx = RawPolicyTma().ptx(m, n, EVICT_LAST, x, x, arch="sm_90a")
    assert "createpolicy" not in ptx
    assert ".global.tile.mbarrier::complete_tx::bytes.L2::cache_hint" in ptx
    assert ".global.shared::cta.bulk_group.L2::cache_hint" in ptx
    h = np.random.default_rng(12).uniform(-4, 4, size=(m, n)).astype(np.float16)
    y = arrays.put(np.zeros((m, n), np.float16))
    RawPolicyTma()(m, n, EVICT_LAST, arrays.put(h), y)
    np.testing.assert_array_equal(arrays.host(y), h + np.float16(1))


class PeerHandshake(tilus.Script):
    """Clusters of two blocks: every thread arrives on the other block's barrier (found with
    cluster.map_shared_addr, NVIDIA Tilus's way), each block waits on its own, then writes 1."""

    def __call__(self, n: int32, y: ~int32):
        self.attrs.blocks = [n]
        self.attrs.warps = 1
        self.attrs.cluster_blocks = [2]
        bar = self.mbarrier.alloc(counts=[32])  # the peer's 32 threads
        self.cluster.sync()  # both blocks' barriers are initialized before any remote arrival
        peer = self.cluster.map_shared_addr(bar[0], target_rank=1 - self.cluster.blockRank)
        self.mbarrier.arrive(peer)
        self.mbarrier.wait(bar[0], phase=0)
        self.store_global(self.global_view(y, shape=[n]), self.register_tensor(dtype=int32, shape=[1], init=1),
                          offsets=[self.blockIdx.x])
        self.cluster.sync()  # no block leaves while its peer may still arrive


def test_map_shared_addr_arrives_on_the_peer_block():
    y = np.zeros(4, np.int32)
    ir = final_ir(PeerHandshake(), 4, y, arch="sm_90a")
    assert re.search(r"mbarrier.arrive\(barrier=\w+, count=1, cta_id=1 - clusterBlockRank\)", ir), ir
    assert "mapa.shared::cluster" in PeerHandshake().ptx(4, y, arch="sm_90a")
    if HAS_GPU:
        import torch
        t = torch.zeros(4, dtype=torch.int32, device="cuda")
        PeerHandshake()(4, t)
        assert t.tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize("body,match", [
    (lambda self, bar, r: self.cluster.map_shared_addr(r, 1),
     r"cluster.map_shared_addr: addr must be a barrier \(bars\[i\] of mbarrier.alloc\), got register uint32\[4\]"),
    (lambda self, bar, r: self.mbarrier.wait(self.cluster.map_shared_addr(bar[0], 1), phase=0),
     r"mbarrier.wait: barrier: a barrier of another block \(cluster.map_shared_addr\) can only be arrived at"),
    (lambda self, bar, r: self.mbarrier_arrive(self.cluster.map_shared_addr(bar[0], 1), cta_id=0),
     r"mbarrier_arrive: the barrier is already another block's \(map_shared_addr\); give the block once"),
])
def test_map_shared_addr_misuse_names_the_call(body, match):
    class Bad(tilus.Script):
        def __call__(self, n: int32, y: ~int32):
            self.attrs.blocks = [2]
            self.attrs.warps = 1
            self.attrs.cluster_blocks = [2]
            bar = self.mbarrier.alloc(counts=[1])
            body(self, bar, self.register_tensor(dtype=tilus.uint32, shape=[4], init=0))

    with pytest.raises(tilus.CompileError, match=match) as e:
        Bad().ir(2, np.zeros(2, np.int32), arch="sm_90a")
    assert "test_hopper_copies.py:" in str(e.value)


class SplitIm2col(tilus.Script):
    """The tile by a split-phase c2d_im2col; `wait` says whether the kernel waits on its barrier."""

    def __init__(self, wait):
        super().__init__()
        self.wait = wait

    def __call__(self, n: int32, h: int32, w: int32, c: int32, rows: int32, cols: int32, img: ~float16,
                 out: ~float16):
        self.assume(c % 32 == 0)
        self.attrs.blocks = [tilus.cdiv(rows, 64), tilus.cdiv(cols, 32)]
        self.attrs.warps = 4
        col = self.shared_tensor(dtype=float16, shape=[64, 32])
        bar = self.mbarrier.alloc(counts=[1])
        self.c2d_im2col(self.global_view(img, shape=[n, h, w, c]), col, self.blockIdx.x, self.blockIdx.y, 3, 1, 1, 1,
                        barrier=bar)
        if self.wait:
            self.mbarrier.wait(bar, phase=0)
        self.store_global(self.global_view(out, shape=[rows, cols]), self.load_shared(col),
                          offsets=[self.blockIdx.x * 64, self.blockIdx.y * 32])


def test_split_phase_c2d_im2col(arrays):
    shape, geometry = (2, 9, 7, 32), (3, 1, 1, 1)
    h = np.random.default_rng(8).uniform(-8, 8, size=shape).astype(np.float16)
    want = im2col_reference(h, *geometry)
    out = arrays.put(np.full(want.shape, 7, np.float16))
    SplitIm2col(True)(*shape, *want.shape, arrays.put(h), out)
    np.testing.assert_array_equal(arrays.host(out), want)


def test_reading_a_split_phase_im2col_without_its_wait_names_both_lines():
    x = np.zeros((2, 9, 7, 32), np.float16)
    with pytest.raises(tilus.CompileError, match=r"load_shared at .*test_hopper_copies.py:\d+ touches shared memory that "
                                                 r"c2d_im2col at .*:\d+ may still be writing; c2d_im2col completes on its "
                                                 r"mbarrier"):
        SplitIm2col(False).ir(2, 9, 7, 32, 126, 288, x, np.zeros((126, 288), np.float16), arch="sm_90a")


# --- the 16-byte alignment of a TMA box's start ---------------------------------------------------
# The hardware faults ("CUDA error: an illegal instruction") on a box whose innermost coordinate
# is not a multiple of 16 bytes' worth of elements (matmul_fp8.py's scales at k step 1 did).

def line_of(marker):
    return line_in(__file__, marker)


class TmaAt(tilus.Script):
    """y[:, so:so + 32] = x[:, lo:lo + 32] over 16 rows: a TMA load box at column `lo` and a TMA
    store box at column `so`, both run-time offsets."""

    def __call__(self, n: int32, lo: int32, so: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        s = self.shared_tensor(dtype=float32, shape=[16, 32])
        bar = self.mbarrier.alloc(counts=[1])
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(bar, 16 * 32 * 4)
            self.tma.global_to_shared(src=self.global_view(x, shape=[16, n]), dst=s, offsets=[0, lo],  # TMA-AT-LOAD
                                      mbarrier=bar)
        self.mbarrier.wait(bar, 0)
        with self.single_thread():
            self.tma.shared_to_global(s, self.global_view(y, shape=[16, n]), offsets=[0, so])  # TMA-AT-STORE
            self.tma.commit_group()
            self.tma.wait_group(0)


def tma_at_want(h, lo, so):
    n = h.shape[1]
    box = np.zeros((16, 32), h.dtype)  # the load zero-fills past the tensor's end
    box[:, :min(32, n - lo)] = h[:, lo:lo + 32]
    want = np.full_like(h, 7)
    want[:, so:so + 32] = box[:, :min(32, n - so)]  # the store writes only inside
    return want


@pytest.mark.parametrize("lo,so", [(4, 4), (100, 36), (0, 168)])  # multiples of 4 float32, not of the box's 32
def test_tma_boxes_at_aligned_run_time_offsets(arrays, lo, so):
    n = 200
    h = np.random.default_rng(8).uniform(-4, 4, size=(16, n)).astype(np.float32)
    y = arrays.put(np.full((16, n), 7, np.float32))
    TmaAt()(n, lo, so, arrays.put(h), y)
    np.testing.assert_array_equal(arrays.host(y), tma_at_want(h, lo, so))


@pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
@pytest.mark.parametrize("lo,so,inst,marker,coords,offset", [
    (1, 4, "tma.global_to_shared", "TMA-AT-LOAD", "0, 1", 1),
    (-2, 4, "tma.global_to_shared", "TMA-AT-LOAD", "0, -2", -2),
    (8, 6, "tma.shared_to_global", "TMA-AT-STORE", "0, 6", 6),
])
def test_a_misaligned_tma_box_is_an_error_on_the_cpu(lo, so, inst, marker, coords, offset):
    # Outside checked mode too: before, the CPU backend copied such a box and the GPU faulted.
    x, y = np.ones((16, 200), np.float32), np.zeros((16, 200), np.float32)
    with pytest.raises(tilus.CpuCheckError) as e:
        TmaAt()(200, lo, so, x, y)
    assert (f"test_hopper_copies.py:{line_of(marker)}: {inst}: the TMA box of global float32[16, n] (from parameter "
            f"'{'x' if inst.endswith('shared') else 'y'}') starts at [{coords}]: innermost offset {offset} is not a "
            f"multiple of 4 elements of float32 (16 bytes)") in str(e.value), str(e.value)
    assert "illegal instruction" in str(e.value)


def test_tma_boxes_at_run_time_offsets_compile():
    # Not provable either way: no compile error (the CPU backend and TILUS_DEBUG_BOUNDS check them).
    x = np.zeros((16, 200), np.float32)
    ir = final_ir(TmaAt(), 200, 1, 6, x, x, arch="sm_90a")
    assert ir.count("tensor_map=") >= 2, ir


class AutoAt(tilus.Script):
    """copy of a [16, 64] float16 tile at column `c0` (a run-time offset) or at a multiple of 8."""

    def __init__(self, aligned):
        super().__init__()
        self.aligned = aligned

    def __call__(self, n: int32, c0: int32, x: ~float16, y: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        c = c0 * 8 if self.aligned else c0
        s = self.shared_tensor(dtype=float16, shape=[16, 64])
        self.copy(self.global_view(x, shape=[16, n])[0:16, c:c + 64], s)
        self.store_global(self.global_view(y, shape=[16, 64]), self.load_shared(s), offsets=[0, 0])


def test_automatic_tma_needs_a_start_proven_aligned():
    x, y = np.zeros((16, 256), np.float16), np.zeros((16, 64), np.float16)
    assert "tma.load" in final_ir(AutoAt(True), 256, 3, x, y, arch="sm_90a")
    ir = final_ir(AutoAt(False), 256, 3, x, y, arch="sm_90a")
    assert "tma.load" not in ir and "the box starts at innermost offset c0, not known to be a multiple of 8 elements " \
                                    "of float16" in ir, ir


@pytest.mark.parametrize("aligned,c0", [(True, 3), (False, 5)])
def test_automatic_copies_at_run_time_offsets_run(arrays, aligned, c0):
    n = 256
    h = np.random.default_rng(9).uniform(-4, 4, size=(16, n)).astype(np.float16)
    y = arrays.put(np.zeros((16, 64), np.float16))
    AutoAt(aligned)(n, c0, arrays.put(h), y)
    c = c0 * 8 if aligned else c0
    np.testing.assert_array_equal(arrays.host(y), h[:, c:c + 64])


def test_debug_bounds_source_checks_unproven_tma_starts(monkeypatch):
    x = np.zeros((16, 200), np.float32)
    check = "the TMA box starts at innermost offset %d, not a multiple of 4 elements of float32 (16 bytes)"
    monkeypatch.delenv("TILUS_DEBUG_BOUNDS", raising=False)
    assert check not in TmaAt().source(200, 4, 4, x, x, arch="sm_90a")
    monkeypatch.setenv("TILUS_DEBUG_BOUNDS", "1")
    src = TmaAt().source(200, 4, 4, x, x, arch="sm_90a")
    assert src.count(check) == 2 and f"test_hopper_copies.py:{line_of('TMA-AT-LOAD')}: tma.global_to_shared" in src, src
    assert "% 4 != 0)" in src
    # A start proven aligned has no check.
    assert check.replace("float32", "float16").replace(" 4 ", " 8 ") not in AutoAt(True).source(
        256, 3, np.zeros((16, 256), np.float16), np.zeros((16, 64), np.float16), arch="sm_90a")


@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
@pytest.mark.parametrize("lo,so,marker,inst", [(1, 4, "TMA-AT-LOAD", "tma.global_to_shared"),
                                               (4, 6, "TMA-AT-STORE", "tma.shared_to_global")])
def test_debug_bounds_traps_a_misaligned_tma_box_with_its_line(tmp_path, lo, so, marker, inst):
    # The trap ends the CUDA context: run it in its own process.
    import os
    import subprocess
    import sys
    code = (f"import torch, test_hopper_copies as t; x = torch.ones(16, 200, device='cuda'); y = torch.zeros_like(x); "
            f"t.TmaAt()(200, 4, 4, x, y); torch.cuda.synchronize(); print('aligned ok', flush=True); "
            f"t.TmaAt()(200, {lo}, {so}, x, y); torch.cuda.synchronize(); print('not trapped', flush=True)")
    env = dict(os.environ, TILUS_DEBUG_BOUNDS="1", TILUS_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([os.path.dirname(__file__)] + sys.path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    out = r.stdout + r.stderr
    assert "aligned ok" in out and "not trapped" not in out and r.returncode != 0, out
    assert f"test_hopper_copies.py:{line_of(marker)}: {inst}: the TMA box starts at innermost offset " \
           f"{lo if marker.endswith('LOAD') else so}, not a multiple of 4 elements of float32 (16 bytes)" in out, out
