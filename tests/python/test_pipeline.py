"""The pipelining pass (issue 39): plain tile Scripts whose k loop says `num_stages` run on every
backend against numpy on ragged sizes; the IR records the ring (TMA or cp.async), the wgmma kept
in flight, warp specialization and persistence (or why they were not taken); the PTX for sm_80
and sm_90a has the instructions the ring chose; loops the pass cannot rewrite are errors at the
loop's line."""
import os

import numpy as np
import pytest

import tilus
from tilus import float16, float32, int32
from conftest import HAS_GPU

from conv2d import check_conv
from conv2d_auto import Conv2dAuto
from matmul_auto import MatmulAuto, MatmulAutoBf16

needs_nvrtc = pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="tilus was built without NVRTC")
HERE = os.path.basename(__file__)


def run_matmul(arrays, kernel, m, n, k, dtype=np.float16, k_used=None, scale=1):
    """c = a @ b.T for a [m, k], b [n, k], against float64 numpy (`scale` * the product of the first
    `k_used` columns where the kernel is to read only those)."""
    ha = arrays.rng.uniform(-1, 1, (m, k)).astype(np.float32)
    hb = arrays.rng.uniform(-1, 1, (n, k)).astype(np.float32)
    if dtype == "bfloat16":
        import torch  # bf16 arrays only on the GPU
        a, b = (torch.tensor(x, device="cuda").to(torch.bfloat16) for x in (ha, hb))
        c = torch.full((m, n), 7, dtype=torch.bfloat16, device="cuda")
        ha, hb = (x.float().cpu().numpy() for x in (a, b))
    else:
        ha, hb = ha.astype(dtype), hb.astype(dtype)
        a, b = arrays.put(ha), arrays.put(hb)
        c = arrays.put(np.full((m, n), 7, dtype))
    kernel(m, n, k, a, b, c)
    got = c.float().cpu().numpy() if dtype == "bfloat16" else arrays.host(c).astype(np.float64)
    kk = k if k_used is None else k_used
    want = scale * ha[:, :kk].astype(np.float64) @ hb[:, :kk].astype(np.float64).T
    np.testing.assert_allclose(got, want, atol=3e-2 * scale, rtol=2e-2)


# Ragged in every dim; k a multiple of 8 (TMA rows of 16-byte multiples) and not (cp.async);
# trip counts below the stages (k = 8, 64), and tiles more than the persistent grid's blocks.
@pytest.mark.parametrize("m,n,k", [(301, 520, 200), (150, 70, 8), (130, 260, 203), (64, 256, 64)])
@pytest.mark.parametrize("cfg", [dict(), dict(stages=2, warp_specialize=False, persistent=False),
                                 dict(block_m=64, block_n=64, warps=4, stages=3)],
                         ids=["default", "plain-two-stages", "small-tiles"])
def test_matmul_auto(arrays, cfg, m, n, k):
    run_matmul(arrays, MatmulAuto(**cfg), m, n, k)


def test_persistent_blocks_walk_several_tiles(arrays):
    # 16 x 18 tiles of 64 x 64 over 132 blocks: each block's ring runs on across 2 or 3 tiles.
    run_matmul(arrays, MatmulAuto(block_m=64, block_n=64, warps=4, warp_specialize=False), 1000, 1100, 72)


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: bf16 arrays come from torch")
def test_matmul_auto_bf16_on_the_gpu(arrays):
    run_matmul(arrays, MatmulAutoBf16(), 301, 520, 1000, "bfloat16")


class Forms(tilus.Script):
    """The k loop of a matmul with its tiles moved in by one of the forms the pass takes (`form`),
    and what else the body does (`then`): "staged" stages twice the a tile in a shared tile of
    its own and reads it back (the dot then gives 2 a @ b.T), "tile" writes the pipelined tile
    after its copy, "global" writes the global rows later iterations' copies read. `shrink`:
    the body counts the trip count down while the loop runs."""

    def __init__(self, form="copy_async", stages=3, then=None, shrink=False):
        super().__init__()
        self.form, self.stages, self.then, self.shrink = form, stages, then, shrink

    def __call__(self, m: int32, n: int32, k: int32, a: ~float16, b: ~float16, c: ~float16):
        self.body(m, n, k, a, b, c, tilus.cdiv(k, 32))

    def body(self, m, n, k, a, b, c, steps):
        bm, bn, bk = 64, 64, 32
        self.attrs.blocks = [tilus.cdiv(m, bm), tilus.cdiv(n, bn)]
        self.attrs.warps = 4
        ga = self.global_view(a, shape=[m, k])
        gb = self.global_view(b, shape=[n, k])
        sa = self.shared_tensor(dtype=float16, shape=[bm, bk])
        sb = self.shared_tensor(dtype=float16, shape=[bn, bk])
        st = self.shared_tensor(dtype=float16, shape=[bm, bk])
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        left: int32 = steps
        for ko in self.range(left, num_stages=self.stages):
            k0 = ko * bk
            if self.form == "copy_async":
                self.copy_async(ga, sa, offsets=[self.blockIdx.x * bm, k0])
                self.copy_async(gb, sb, offsets=[self.blockIdx.y * bn, k0])
            elif self.form == "evict":  # L2 hints on copies in the ring (a cache policy each)
                self.copy_async(ga, sa, offsets=[self.blockIdx.x * bm, k0], evict="evict_first")
                self.copy_async(gb, sb, offsets=[self.blockIdx.y * bn, k0], evict="evict_last")
            elif self.form == "copy":
                self.copy(ga[self.blockIdx.x * bm:self.blockIdx.x * bm + bm, k0:k0 + bk], sa)
                self.copy(gb[self.blockIdx.y * bn, k0], sb)
            elif self.form == "halves":  # two copies, each of half of the tile
                for h in tilus.static_range(2):
                    self.copy_async(ga, self.slice_shared(sa, [h * bm // 2, 0], [0, 1], [bm // 2, bk]),
                                    offsets=[self.blockIdx.x * bm + h * bm // 2, k0])
                self.copy_async(gb, sb, offsets=[self.blockIdx.y * bn, k0])
            else:
                self.store_shared(sa, self.load_global(ga, offsets=[self.blockIdx.x * bm, k0], shape=[bm, bk]))
                self.store_shared(sb, self.load_global(gb, offsets=[self.blockIdx.y * bn, k0], shape=[bn, bk]))
            x = self.load_shared(sa)
            if self.then == "staged":
                self.store_shared(st, x + x)
                x = self.load_shared(st)
            elif self.then == "tile":
                self.store_shared(sa, x + x)
            acc = self.dot(x, self.load_shared(sb).transpose(), acc)
            if self.then == "global":
                self.store_global(ga, x, offsets=[self.blockIdx.x * bm, k0 + bk])
            if self.shrink:
                left = left - 1
        self.store_global(self.global_view(c, shape=[m, n]), acc.to(float16),
                          offsets=[self.blockIdx.x * bm, self.blockIdx.y * bn])


class Steps(Forms):
    """Forms whose trip count is read from memory by the kernel (`counts[0]`): a data-dependent
    trip count, known when the loop starts; c = a[:, :steps * 32] @ b[:, :steps * 32].T."""

    def __call__(self, m: int32, n: int32, k: int32, a: ~float16, b: ~float16, c: ~float16, counts: ~int32):
        self.body(m, n, k, a, b, c, self.global_view(counts, shape=[1])[0].item())


@pytest.mark.parametrize("form", ["copy_async", "copy", "halves", "load_store", "evict"])
@pytest.mark.parametrize("stages", [2, 4])
def test_every_copy_form_is_pipelined(arrays, form, stages):
    run_matmul(arrays, Forms(form, stages), 150, 100, 200)
    run_matmul(arrays, Forms(form, stages), 70, 130, 37)  # an odd k: no TMA box (rows of 74 bytes)


def test_conv2d_auto(device):
    for (n, h, w, c, f, ks, s, d, p) in ((2, 13, 11, 64, 40, 3, 1, 1, 1), (1, 17, 19, 128, 72, 5, 2, 2, 3)):
        assert check_conv("conv2d_auto", Conv2dAuto(ks, s, d, p), n, h, w, c, f, ks, s, d, p) in ("cpu", "cuda")


def _ir(kernel, arch, stage="pipeline_loops", m=4096, n=4096, k=4096):
    a = np.zeros((m, k), np.float16)
    b = np.zeros((n, k), np.float16)
    return kernel.ir(m, n, k, a, b, np.zeros((m, n), np.float16), arch=arch)[stage]


def test_the_ir_shows_the_ring_and_the_schedule():
    traced = _ir(MatmulAuto(), "sm_90a", "traced")
    assert "num_stages=3 warp_specialize persistent {" in traced
    ir = _ir(MatmulAuto(), "sm_90a")
    assert "ring=tma wgmma_in_flight=1" in ir
    assert 'schedule="warp-specialized: warps 8-11 load (setmaxnreg 40), warps 0-7 compute (setmaxnreg 232); ' \
           'persistent: 132 blocks' in ir
    assert "warps 12" in ir and "grid [min((m + 127) / 128 * ((n + 255) / 256), 132)]" in ir
    assert "shared float16[3, 128, 64]" in ir and "shared float16[3, 256, 64]" in ir
    # The tile's store after the loop: through a shared tile of four 64-column boxes and TMA stores.
    assert "epilogue: registers -> shared [4, 128, 64] -> 4 TMA stores of [128, 64]" in ir
    assert "tma.shared_to_global" in ir and "tma.wait_group(n=0, read=true)" in ir, ir
    # Four stages leave no room for it: the store stays, and the note says why.
    four = _ir(MatmulAuto(stages=4), "sm_90a")
    assert "epilogue: registers: the output tile's 65536 bytes and the ring's 196608 exceed" in four
    assert "tma.shared_to_global" not in four
    # The barriers the ring derived: a full and an empty mbarrier per stage, waited on and arrived at.
    for op in ("mbarrier.alloc(barriers=full, counts=[", "mbarrier.alloc(barriers=empty, counts=[",
               "mbarrier.wait(barrier=full", "mbarrier.wait(barrier=empty", "mbarrier.arrive(barrier=empty"):
        assert op in ir, op
    # The loop as written, one stage in flight less: no producer warp group, the refill in the loop.
    plain = _ir(MatmulAuto(warp_specialize=False, persistent=False), "sm_90a")
    assert "warps 8" in plain and "schedule" not in plain and "wgmma.wait_group(n=1)" in plain
    # sm_80: cp.async groups; the options that need TMA say why they were not taken. Four
    # stages of these tiles are more shared memory than a block has there.
    with pytest.raises(tilus.CompileError, match=r"matmul_auto.py:\d+: error: range\(num_stages=4\) at .*the ring's "
                                                 r"stages take 196608 bytes of shared memory .* more than the 166912 "
                                                 r"bytes a block has on sm_80; use fewer stages"):
        _ir(MatmulAuto(stages=4), "sm_80")
    ampere = _ir(MatmulAuto(stages=3), "sm_80")
    assert 'ring=cp.async' in ampere and "tma: sm_80 has no TMA" in ampere
    assert "copy_async_commit_group()" in ampere  # one group per stage; insert_async_waits derives the waits
    assert "warp_specialize: the ring is not TMA loads" in ampere and "persistent: 108 blocks" in ampere
    assert "epilogue: registers: sm_80 has no TMA" in ampere
    # The CPU backend runs a block's threads in order: no warp specialization.
    cpu = _ir(MatmulAuto(), "cpu")
    assert "warp_specialize: the CPU backend runs a block's threads in order" in cpu and "ring=tma" in cpu
    # A k that is not a multiple of 8: rows of a and b that TMA cannot take.
    odd = _ir(MatmulAuto(), "sm_90a", k=4001)
    assert "ring=cp.async" in odd and "tma: not legal" in odd


@needs_nvrtc
def test_ptx_has_the_chosen_instructions():
    m = n = k = 1024
    args = (m, n, k, np.zeros((m, k), np.float16), np.zeros((n, k), np.float16), np.zeros((m, n), np.float16))
    hopper = MatmulAuto().ptx(*args, arch="sm_90a")
    for op in ("cp.async.bulk.tensor", "wgmma.mma_async", "wgmma.wait_group.sync.aligned 1", "setmaxnreg.inc",
               "setmaxnreg.dec", "mbarrier.try_wait", "stmatrix.sync.aligned", "cp.async.bulk.tensor.2d.global.shared",
               "cp.async.bulk.commit_group", "cp.async.bulk.wait_group.read 0"):
        assert op in hopper, op
    ampere = MatmulAuto(stages=3).ptx(*args, arch="sm_80")
    for op in ("cp.async.cg.shared.global", "cp.async.wait_group 1", "mma.sync.aligned.m16n8k16"):
        assert op in ampere, op
    assert "cp.async.bulk" not in ampere
    conv_args = (2, 16, 16, 64, 64, np.zeros((2, 16, 16, 64), np.float16), np.zeros((64, 3, 3, 64), np.float16),
                 np.zeros((2, 16, 16, 64), np.float16))
    conv = Conv2dAuto().ptx(*conv_args, arch="sm_90a")
    assert "cp.async.bulk.tensor.4d.shared::cluster.global.im2col" in conv and "wgmma.mma_async" in conv
    # The same conv2d Script on sm_80: a cp.async ring (no TMA im2col there) feeding mma.sync.
    conv = Conv2dAuto().ptx(*conv_args, arch="sm_80")
    assert "cp.async.cg.shared.global" in conv and "mma.sync.aligned.m16n8k16" in conv
    assert "cp.async.bulk" not in conv and "wgmma" not in conv


def test_bad_marks_are_errors_at_the_loop():
    class Bad(tilus.Script):
        def __init__(self, **kw):
            super().__init__()
            self.kw = kw

        def __call__(self, n: int32, p: ~float16):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            for i in self.range(n, **self.kw):
                pass

    x = np.zeros(16, np.float16)
    with pytest.raises(tilus.CompileError, match="num_stages must be a Python int"):
        Bad(num_stages=2.5).ir(4, x)
    with pytest.raises(tilus.CompileError, match="num_stages must be 1 to 16"):
        Bad(num_stages=40).ir(4, x)
    with pytest.raises(tilus.CompileError, match="warp_specialize is an option of the pipelined loop"):
        Bad(warp_specialize=True).ir(4, x)


class CarriedTile(tilus.Script):
    """Reads its tile before copying it: each iteration uses the previous iteration's tile."""

    def __call__(self, n: int32, p: ~float16, q: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        g = self.global_view(p, shape=[n * 16, 64])
        s = self.shared_tensor(dtype=float16, shape=[16, 64])
        acc = self.register_tensor(dtype=float32, shape=[16, 64], init=0.0)
        for i in self.range(n, num_stages=3):
            acc = acc + self.load_shared(s).to(float32)
            self.copy_async(g, s, offsets=[i * 16, 0])
        self.store_global(self.global_view(q, shape=[16, 64]), acc, offsets=[0, 0])


def test_loops_it_cannot_rewrite_are_errors_naming_the_line():
    n = 4
    with pytest.raises(tilus.CompileError) as e:
        CarriedTile().ir(n, np.zeros((n * 16, 64), np.float16), np.zeros((16, 64), np.float32), arch="sm_90a")
    msg = str(e.value)
    assert "cannot pipeline this loop" in msg and "dependence through shared memory" in msg
    assert f"{HERE}:" in msg and "reads `s` before" in msg


@pytest.mark.parametrize("steps", [0, 1, 5])
def test_a_trip_count_read_from_memory_is_pipelined(arrays, steps):
    # Fewer steps than the stages, and more; k = 200 leaves columns past steps * 32 unread.
    m, n, k = 150, 100, 200
    counts = arrays.put(np.array([steps], np.int32))
    run_matmul(arrays, lambda *args: Steps()(*args, counts), m, n, k, k_used=steps * 32)
    x = np.zeros((m, k), np.float16)
    ir = Steps().ir(m, n, k, x, np.zeros((n, k), np.float16), np.zeros((m, n), np.float16), np.zeros(1, np.int32),
                    arch="sm_90a")["pipeline_loops"]
    assert "num_stages=3 ring=" in ir


def _refusal(kernel, *args):
    with pytest.raises(tilus.CompileError) as e:
        kernel.ir(*args, arch="sm_90a")
    msg = str(e.value)
    assert "cannot pipeline this loop" in msg and f"{HERE}:" in msg, msg
    return msg


def _line_of(cls, text):
    """The line of this file where `text` first appears in the source of `cls`."""
    import inspect
    lines, first = inspect.getsourcelines(cls)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_a_trip_count_the_body_changes_is_an_error_naming_the_line():
    m, n, k = 150, 100, 200
    msg = _refusal(Steps(shrink=True), m, n, k, np.zeros((m, k), np.float16), np.zeros((n, k), np.float16),
                   np.zeros((m, n), np.float16), np.zeros(1, np.int32))
    assert "its bounds name `left`, which the body assigns" in msg, msg
    assert f"{HERE}:{_line_of(Forms, 'num_stages=')}" in msg, msg


def test_a_tile_the_iteration_writes_and_reads_back_is_pipelined(arrays):
    run_matmul(arrays, Forms(then="staged"), 150, 100, 200, scale=2)


@pytest.mark.parametrize("form,why,line", [
    ("tile", "writes the pipelined tile `sa`, which only copies from global memory may fill",
     "self.store_shared(sa, x + x)"),
    ("global", "writes global memory that", "self.store_global(ga, x"),
])
def test_a_body_that_writes_what_the_ring_reads_is_an_error_naming_the_line(form, why, line):
    m, n, k = 150, 100, 200
    msg = _refusal(Forms(then=form), m, n, k, np.zeros((m, k), np.float16), np.zeros((n, k), np.float16),
                   np.zeros((m, n), np.float16))
    assert why in msg, msg
    assert f"{HERE}:{_line_of(Forms, 'num_stages=')}" in msg, msg
    assert f"{HERE}:{_line_of(Forms, line)}" in msg, msg


# A k not divisible by 16 (launches specialize on 16 only) makes the ring's copies synchronous
# (threads' st.shared, 2 bytes at a time): the stages a wgmma reads were written through the
# generic proxy by other threads, near the end of the loop with no refill (and its barrier) between them.
# MatmulAuto read wrong values there under racecheck's timing (issue 39's race); every iteration
# now fences and synchronizes before its wgmma. Steps below the stages (k = 100, 40) too; each
# case runs three times on fresh outputs.
@pytest.mark.skipif(not HAS_GPU, reason="no GPU: the race of the ring's stages shows only on one")
@pytest.mark.parametrize("m,n,k", [(301, 520, 200), (301, 520, 100), (257, 130, 40), (130, 260, 203)])
@pytest.mark.parametrize("cfg", [dict(), dict(stages=2, warp_specialize=False, persistent=False),
                                 dict(block_m=64, block_n=64, warps=4, stages=3),
                                 dict(block_m=64, block_n=128, warps=4, stages=6, persistent=False)],
                         ids=["default", "plain-two-stages", "small-tiles", "six-stages"])
def test_matmul_auto_ragged_k_against_torch(cfg, m, n, k):
    import torch
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    a = torch.rand((m, k), generator=gen, device="cuda").sub_(0.5).half()
    b = torch.rand((n, k), generator=gen, device="cuda").sub_(0.5).half()
    want = a.float() @ b.float().T
    kernel = MatmulAuto(**cfg)
    for _ in range(3):
        c = torch.full((m, n), 7, dtype=torch.float16, device="cuda")
        kernel(m, n, k, a, b, c)
        torch.cuda.synchronize()
        bad = ((c.float() - want).abs() > 2e-2 + 1e-2 * want.abs()).sum().item()
        assert bad == 0, f"{bad} of {m * n} elements off (max {(c.float() - want).abs().max().item():.3g})"


# The TMA-store epilogue of persistent rings on ragged sizes: where n is a multiple of 16 (c's rows
# 16-byte aligned) the tile goes through shared memory and TMA stores, clipped at m and n (a last
# tile of 16 columns at n = 528, rows past m); where it is not, TMA's rules refuse the store and
# the Script's store stays, as it does behind a ring of cp.async copies (k not a multiple of 16:
# ptxas serialized the wgmma there). Tiles of 64 x 64: each block's ring runs across several
# tiles, the stores of one overlapping the next one's loop.
@pytest.mark.parametrize("m,n,k", [(301, 528, 80), (150, 80, 16), (130, 200, 64), (1000, 1104, 48), (301, 528, 72)])
@pytest.mark.parametrize("cfg", [dict(), dict(block_m=64, block_n=64, warps=4, warp_specialize=False)],
                         ids=["default", "small-tiles"])
def test_tma_epilogue_on_ragged_sizes(arrays, cfg, m, n, k):
    ir = _ir(MatmulAuto(**cfg), "sm_90a", m=m, n=n, k=k)
    taken = "epilogue: registers -> shared" in ir
    assert taken == (n % 16 == 0 and k % 16 == 0), ir
    if n % 16:
        assert "epilogue: registers: the TMA store is not legal" in ir
    elif k % 16:
        assert "epilogue: registers: the ring's loads are not TMA loads" in ir
    run_matmul(arrays, MatmulAuto(**cfg), m, n, k)
    run_matmul(arrays, MatmulAuto(**cfg, epilogue="registers"), m, n, k)
