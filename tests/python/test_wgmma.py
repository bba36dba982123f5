"""wgmma (issue 15): the hopper_matmul examples on the CPU backend (numpy) and the GPU (torch,
sm_90a) against numpy on random data with ragged shapes; the lowering record and the PTX for
sm_90a (f16, bf16, fp8, several warp groups); and the errors of bad or unsynchronized use."""
import re

import numpy as np
import pytest

import tilus
from tilus import bfloat16, float16, float32, float8_e4m3, int32, uint32
from conftest import HAS_GPU

VOID = tilus.DataType.from_name("void")
from hopper_matmul_v0 import HopperMatmulV0
from hopper_matmul_v1 import HopperMatmulV1
from hopper_matmul_v2 import HopperMatmulV2
from hopper_matmul_v4 import HopperMatmulV4
from hopper_matmul_v5 import HopperMatmulV5
from hopper_matmul_v6 import HopperMatmulV6


def run_matmul(arrays, kernel, m, n, k, seed=0, b_nk=True):
    """c = a @ b.T for b stored [n, k] (b_nk), else c = a @ b for b stored [k, n]."""
    rng = np.random.default_rng(seed)
    ha = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    hb = rng.uniform(-1, 1, (n, k) if b_nk else (k, n)).astype(np.float16)
    c = arrays.put(np.full((m, n), 7, np.float16))
    kernel(m, n, k, arrays.put(ha), arrays.put(hb), c)
    want = ha.astype(np.float64) @ (hb.astype(np.float64).T if b_nk else hb.astype(np.float64))
    np.testing.assert_allclose(arrays.host(c).astype(np.float64), want, atol=2e-2, rtol=1e-2)


# Ragged in every dim (zero-filled TMA boxes), k not a multiple of the block, one block exactly.
@pytest.mark.parametrize("m,n,k", [(301, 517, 200), (64, 128, 64), (150, 70, 8)])
@pytest.mark.parametrize("kernel", [HopperMatmulV0(), HopperMatmulV0(64, 64, 32), HopperMatmulV1(),
                                    HopperMatmulV1(128, 64, 16, 3)], ids=["v0", "v0-sw64", "v1", "v1-sw32"])
def test_wgmma_matmuls(arrays, kernel, m, n, k):
    run_matmul(arrays, kernel, m, n, k)


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: warp-specialized kernels run only there")
@pytest.mark.parametrize("cfg", [{}, dict(block_m=256, block_n=128), dict(block_n=128, consumers=1, stages=3)])
def test_warp_specialized_matmul_on_the_gpu(cfg):
    from conftest import Arrays
    run_matmul(Arrays("cuda"), HopperMatmulV2(**cfg), 301, 517, 1000)


# v4: the epilogue through shared memory and TMA stores; v5: clusters of two with b multicast
# (an odd number of row tiles: the second block of the last pair has no rows of c); v6: both.
@pytest.mark.skipif(not HAS_GPU, reason="no GPU: warp-specialized kernels run only there")
@pytest.mark.parametrize("kernel", [HopperMatmulV4(blocks=8), HopperMatmulV5(blocks=8), HopperMatmulV5(blocks=2, group=1),
                                    HopperMatmulV6(blocks=8), HopperMatmulV6(blocks=2, group=1)],
                         ids=["v4", "v5", "v5-one-cluster", "v6", "v6-one-cluster"])
@pytest.mark.parametrize("m,n,k", [(301, 520, 1000), (1000, 3000, 200)])  # TMA stores need rows of 16 bytes
def test_tma_store_and_multicast_matmuls_on_the_gpu(kernel, m, n, k):
    from conftest import Arrays
    run_matmul(Arrays("cuda"), kernel, m, n, k)


def test_multicast_matmul_compiles_to_multicast_loads_and_cheap_remote_arrivals():
    """v5's b halves go to both blocks of the cluster; a consumer hands a stage back to the peer
    with a remote arrival at block scope (a release at cluster scope would stall every step)."""
    x = np.zeros((256, 64), np.float16)
    ptx = HopperMatmulV5().ptx(256, 256, 64, x, x, np.zeros((256, 256), np.float16), arch="sm_90a")
    assert ".multicast::cluster" in ptx
    assert re.search(r"mbarrier\.arrive\.shared::cluster\.b64", ptx), ptx
    assert "mbarrier.arrive.release.cluster" not in ptx


@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
def test_bf16_wgmma_on_the_gpu():
    import torch
    k = mma_kernel(bfloat16, 64, 64, 64)
    a = torch.randn(64, 64, device="cuda").to(torch.bfloat16)
    b = torch.randn(64, 64, device="cuda").to(torch.bfloat16)
    c = torch.zeros(64, 64, device="cuda")
    k(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float().T, atol=1e-2, rtol=1e-2)


@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
@pytest.mark.parametrize("name", ["float8_e4m3", "float8_e5m2"])
def test_fp8_wgmma_on_the_gpu(name):
    import torch
    dt = getattr(tilus, name)
    tdt = {"float8_e4m3": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}[name]
    k = mma_kernel(dt, 64, 64, 128)
    a = torch.randn(64, 128, device="cuda").to(tdt)
    b = torch.randn(64, 128, device="cuda").to(tdt)
    c = torch.zeros(64, 64, device="cuda")
    k(a.view(torch.uint8), b.view(torch.uint8), c)
    # fp8 wgmma adds its products with fewer accumulator bits than float32 (a few 1e-4 relative).
    torch.testing.assert_close(c, a.float() @ b.float().T, atol=2e-2, rtol=1e-2)


def mma_kernel(dt, m, n, k, warps=4, a_in_registers=False, fence=True, b_kn=False):
    """c = a @ b.T for one [m, k] x [n, k] tile of dtype dt, b through shared memory (copy), a
    too or, with a_in_registers, loaded from global memory straight into registers (the wgmma
    A-fragment layout, which layout inference gives it); fence=False leaves wgmma.fence out.
    b_kn: b is stored [k, n] and read as it is (an MN-major operand): c = a @ b."""

    class Mma(tilus.Script):
        def __call__(self, a: ~VOID, b: ~VOID, c: ~float32):  # a and b: dt elements of any array
            self.attrs.blocks = [1]
            self.attrs.warps = warps
            ga = self.global_view(a, dtype=dt, shape=[m, k])
            if a_in_registers:
                ta = self.load_global(ga, offsets=[0, 0], shape=[m, k])
            else:
                ta = self.shared_tensor(dtype=dt, shape=[m, k])
                self.copy(ga, ta)
            sb = self.shared_tensor(dtype=dt, shape=[k, n] if b_kn else [n, k])
            self.copy(self.global_view(b, dtype=dt, shape=[k, n] if b_kn else [n, k]), sb)
            acc = self.register_tensor(dtype=float32, shape=[m, n], init=0.0)
            if fence:
                self.wgmma.fence()
            self.wgmma.mma(ta, sb if b_kn else sb.T, acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.store_global(self.global_view(c, shape=[m, n]), acc, offsets=[0, 0])

    return Mma()


# One m block, two m blocks and k steps, two warp groups with two n instructions.
@pytest.mark.parametrize("m,n,k,warps", [(64, 128, 64, 4), (128, 64, 16, 4), (128, 256, 32, 8)])
def test_wgmma_with_a_in_registers(arrays, m, n, k, warps):
    rng = np.random.default_rng(3)
    ha = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    hb = rng.uniform(-1, 1, (n, k)).astype(np.float16)
    c = arrays.put(np.zeros((m, n), np.float32))
    mma_kernel(float16, m, n, k, warps, a_in_registers=True)(arrays.put(ha), arrays.put(hb), c)
    np.testing.assert_allclose(arrays.host(c), ha.astype(np.float64) @ hb.astype(np.float64).T, atol=1e-3, rtol=1e-3)


@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
def test_bf16_wgmma_with_a_in_registers_on_the_gpu():
    import torch
    a = torch.randn(128, 64, device="cuda").to(torch.bfloat16)
    b = torch.randn(96, 64, device="cuda").to(torch.bfloat16)
    c = torch.zeros(128, 96, device="cuda")
    mma_kernel(bfloat16, 128, 96, 64, a_in_registers=True)(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float().T, atol=1e-2, rtol=1e-2)


def test_a_in_registers_lowers_to_the_register_form():
    """The record says a=regs; the PTX passes a's fragment as four registers and keeps only b's
    transpose flag."""
    kern = mma_kernel(float16, 128, 64, 32, a_in_registers=True)
    args = [np.zeros((128, 32), np.float16), np.zeros((64, 32), np.float16), np.zeros((128, 64), np.float32)]
    ir = kern.ir(*args, arch="sm_90a")
    assert any(r.startswith("lowering: wgmma m64n64k16 groups=1 tiles=2x1x2 a=regs b=sw64/sbo512")
               for r in lowering_of(ir)), lowering_of(ir)
    ptx = kern.ptx(*args, arch="sm_90a")
    insts = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.f16\.f16[^;]*;", ptx)
    assert len(insts) == 4, insts
    assert all(re.search(r"\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+, p, 1, 1, 0;", i) for i in insts), insts
    if tilus._C.nvrtc_available():  # ptxas takes the register form, with no local memory
        compiled = kern.compiled(*args, arch="sm_90a")
        assert compiled.cubin
        if compiled.spill_store_bytes >= 0:  # -1: a cubin from the disk cache, ptxas's report not kept
            assert compiled.spill_store_bytes == 0 and compiled.stack_frame_bytes == 0


# b MN-major (a row-major [k, n] tile, wgmma's transpose flag): one swizzle span wide (64, 32 or
# 16 f16 columns: 128-, 64- and 32-byte rows), a in shared memory or in registers, k steps of
# whole 8-row atom pairs.
@pytest.mark.parametrize("dt,m,n,k,a_regs", [(float16, 64, 64, 64, False), (float16, 128, 32, 48, True),
                                              (bfloat16, 64, 16, 32, False), (float16, 64, 64, 128, True)])
def test_wgmma_with_an_mn_major_b(arrays, dt, m, n, k, a_regs):
    if dt == bfloat16 and arrays.device == "cpu":
        pytest.skip("numpy has no bfloat16 (the bf16 case runs on the GPU)")
    rng = np.random.default_rng(7)
    ha = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    hb = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    c = arrays.put(np.zeros((m, n), np.float32))
    if dt == bfloat16:
        import torch
        a, b = (torch.from_numpy(x).cuda().to(torch.bfloat16) for x in (ha, hb))
        ha, hb = (x.float().cpu().numpy() for x in (a, b))
    else:
        a, b = arrays.put(ha), arrays.put(hb)
    mma_kernel(dt, m, n, k, a_in_registers=a_regs, b_kn=True)(a, b, c)
    np.testing.assert_allclose(arrays.host(c), ha.astype(np.float64) @ hb.astype(np.float64), atol=1e-3, rtol=1e-3)


def test_an_mn_major_b_sets_the_transpose_flag():
    """The record says b=.../mn; each instruction steps 16 rows (two 8-row atoms) down b and sets
    imm-trans-b, with a in shared memory (trans-a 0) and in registers (b's flag only)."""
    args = [np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float32)]
    for a_regs, flags in [(False, r"p, 1, 1, 0, 1;"), (True, r"p, 1, 1, 1;")]:
        kern = mma_kernel(float16, 64, 64, 64, a_in_registers=a_regs, b_kn=True)
        rec = lowering_of(kern.ir(*args, arch="sm_90a"))
        assert any("tiles=1x1x4" in r and "b=sw128/sbo1024/mn" in r for r in rec), rec
        ptx = kern.ptx(*args, arch="sm_90a")
        insts = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.f16\.f16[^;]*;", ptx)
        assert len(insts) == 4 and all(re.search(flags, i) for i in insts), insts


@pytest.mark.parametrize("dt,n,k,message", [
    (float16, 128, 64, r"b is MN-major and must be stored in rows of 32, 64 or 128 bytes along N with the matching "
                       r"swizzle"),
    (float8_e4m3, 128, 64, r"b is MN-major \(its N dim contiguous\), which wgmma reads only for 16-bit elements"),
])
def test_an_mn_major_b_wgmma_cannot_read_is_an_error(dt, n, k, message):
    eb = dt.bits // 8
    args = [np.zeros((64, k * eb), np.uint8), np.zeros((k, n * eb), np.uint8), np.zeros((64, n), np.float32)]
    with pytest.raises(tilus.CompileError, match=r"test_wgmma.py:\d+: (error: )?wgmma.mma: " + message):
        mma_kernel(dt, 64, n, k, b_kn=True).ir(*args, arch="sm_90a")


def test_an_mn_major_b_narrower_than_its_rows_is_an_error():
    """A [k, 32] slice of a [k, 64] f16 tile (128-byte rows): the instruction would read half a
    swizzled row."""
    class Narrow(tilus.Script):
        def __call__(self, a: ~float16, b: ~float16, c: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            sa = self.shared_tensor(dtype=float16, shape=[64, 32])
            sb = self.shared_tensor(dtype=float16, shape=[32, 64])
            self.copy(self.global_view(a, shape=[64, 32]), sa)
            self.copy(self.global_view(b, shape=[32, 64]), sb)
            acc = self.register_tensor(dtype=float32, shape=[64, 32], init=0.0)
            self.wgmma.mma(sa, self.slice_shared(sb, [0, 0], [0, 1], [32, 32]), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.store_global(self.global_view(c, shape=[64, 32]), acc, offsets=[0, 0])

    x = np.zeros((64, 32), np.float16)
    with pytest.raises(tilus.CompileError, match=r"wgmma.mma: b is MN-major and must be one swizzle span wide along N "
                                                 r"\(64 elements of its 128-byte rows\), but it has 32"):
        Narrow().ir(x, np.zeros((32, 64), np.float16), np.zeros((64, 32), np.float32), arch="sm_90a")


def blocked_mma_kernel(m, n, k, a_in_registers=True):
    """c = a @ b for a [m, k] (in registers, or shared) and b [k, n] stored as n / 64 column blocks
    [k, 64] side by side in one shared tensor [n / 64, k, 64]: one wgmma.mma reads all of them."""

    class Blocked(tilus.Script):
        def __call__(self, a: ~float16, b: ~float16, c: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            ga, gb = self.global_view(a, shape=[m, k]), self.global_view(b, shape=[k, n])
            if a_in_registers:
                ta = self.load_global(ga, offsets=[0, 0], shape=[m, k])
            else:
                ta = self.shared_tensor(dtype=float16, shape=[m, k])
                self.copy(ga, ta)
            sb = self.shared_tensor(dtype=float16, shape=[n // 64, k, 64])
            for j in range(n // 64):
                self.copy(gb[0:k, 64 * j:64 * j + 64], sb[j])
            acc = self.register_tensor(dtype=float32, shape=[m, n], init=0.0)
            self.wgmma.fence()
            self.wgmma.mma(ta, sb, acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.store_global(self.global_view(c, shape=[m, n]), acc, offsets=[0, 0])

    return Blocked()


# b in column blocks (P V of attention: V's 64-column blocks, each a 128-byte swizzled tile): one
# m64nN instruction over all of them, the blocks apart by the descriptor's leading byte offset.
@pytest.mark.parametrize("m,n,k,a_regs", [(64, 128, 64, True), (64, 256, 32, False), (128, 128, 128, True),
                                          (64, 192, 16, True)])
def test_wgmma_with_b_in_column_blocks(arrays, m, n, k, a_regs):
    rng = np.random.default_rng(11)
    ha = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    hb = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    c = arrays.put(np.zeros((m, n), np.float32))
    blocked_mma_kernel(m, n, k, a_regs)(arrays.put(ha), arrays.put(hb), c)
    np.testing.assert_allclose(arrays.host(c), ha.astype(np.float64) @ hb.astype(np.float64), atol=1e-3, rtol=1e-3)


def test_b_in_column_blocks_is_one_wide_instruction():
    """The record: one m64n128k16 per k step, b MN-major with lbo = the blocks' distance (k rows of
    128 bytes); the PTX: 4 such instructions, transposed b; the SASS (where cuobjdump is): HGMMA
    64x128x16 and no narrower one."""
    m, n, k = 64, 128, 64
    args = [np.zeros((m, k), np.float16), np.zeros((k, n), np.float16), np.zeros((m, n), np.float32)]
    kern = blocked_mma_kernel(m, n, k)
    rec = lowering_of(kern.ir(*args, arch="sm_90a"))
    assert any(r.startswith(f"lowering: wgmma m64n128k16 groups=1 tiles=1x1x4 a=regs b=sw128/sbo1024/lbo{k * 128}/mn")
               for r in rec), rec
    ptx = kern.ptx(*args, arch="sm_90a")
    insts = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m(\d+)n(\d+)k16\.f32\.f16\.f16[^;]*;", ptx)
    assert insts == [("64", "128")] * 4, insts
    from tilus.artifacts import _cuobjdump
    if tilus._C.nvrtc_available() and _cuobjdump():
        sass = kern.sass(*args, arch="sm_90a")
        shapes = re.findall(r"HGMMA\.(\d+x\d+x\d+)", sass)
        assert shapes and set(shapes) == {"64x128x16"}, shapes


@pytest.mark.parametrize("shape,message", [
    ([2, 32, 32], r"b is MN-major and must be one swizzle span wide along N in each column block \(64 elements of "
                  r"its 128-byte rows\), but it has 32"),
    ([2, 64, 32], r"b is \[blocks, k, n / blocks\] and must be MN-major"),
])
def test_b_in_column_blocks_wgmma_cannot_read_is_an_error(shape, message):
    """Column blocks narrower than a swizzled row (a slice of [2, 32, 64]), or K-major ones (a
    permuted [2, 32, 64] tile whose last dim runs along its rows)."""
    class Bad(tilus.Script):
        def __call__(self, a: ~float16, c: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            sa = self.shared_tensor(dtype=float16, shape=[64, shape[1]])
            sb = self.shared_tensor(dtype=float16, shape=[2, 32, 64])
            self.copy(self.global_view(a, shape=[64, shape[1]]), sa)
            b = self.slice_shared(sb, [0, 0, 0], [0, 1, 2], shape) if shape[1] == 32 else sb.permute([0, 2, 1])
            acc = self.register_tensor(dtype=float32, shape=[64, shape[0] * shape[2]], init=0.0)
            self.wgmma.mma(sa, b, acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.store_global(self.global_view(c, shape=[64, shape[0] * shape[2]]), acc, offsets=[0, 0])

    x = np.zeros((64, shape[1]), np.float16)
    with pytest.raises(tilus.CompileError, match=r"wgmma.mma: " + message):
        Bad().ir(x, np.zeros((64, shape[0] * shape[2]), np.float32), arch="sm_90a")


def lowering_of(ir):
    return [line.strip() for line in ir["select_instructions"].splitlines() if "lowering: wgmma" in line]


@pytest.mark.parametrize("dt,m,n,k,warps,want", [
    (float16, 64, 128, 64, 4, "wgmma m64n128k16 groups=1 tiles=1x1x4 a=sw128/sbo1024 b=sw128/sbo1024"),
    (float16, 128, 64, 32, 4, "wgmma m64n64k16 groups=1 tiles=2x1x2 a=sw64/sbo512 b=sw64/sbo512"),
    (float16, 128, 512, 16, 8, "wgmma m64n256k16 groups=2 tiles=1x2x1 a=sw32/sbo256 b=sw32/sbo256"),
    (bfloat16, 64, 64, 64, 4, "wgmma m64n64k16 groups=1 tiles=1x1x4"),
    (float8_e4m3, 64, 64, 128, 4, "wgmma m64n64k32 groups=1 tiles=1x1x4 a=sw128/sbo1024"),
])
def test_the_lowering_record_and_ptx(dt, m, n, k, warps, want):
    kern = mma_kernel(dt, m, n, k, warps)
    eb = dt.bits // 8
    args = [np.zeros((m, k * eb), np.uint8), np.zeros((n, k * eb), np.uint8), np.zeros((m, n), np.float32)]
    ir = kern.ir(*args, arch="sm_90a")
    assert any(r.startswith("lowering: " + want) for r in lowering_of(ir)), lowering_of(ir)
    ptx = kern.ptx(*args, arch="sm_90a")
    types = {float16: "f16", bfloat16: "bf16", float8_e4m3: "e4m3"}[dt]
    shape = want.split()[1]
    assert f"wgmma.mma_async.sync.aligned.{shape}.f32.{types}.{types}" in ptx
    assert "wgmma.commit_group.sync.aligned" in ptx and "wgmma.wait_group.sync.aligned" in ptx


def test_a_missing_fence_is_inserted_and_a_present_one_kept(arrays):
    """The insert_wgmma_fences pass: a kernel without wgmma.fence gets one before its mma (and
    computes the product); the examples, which fence where PTX asks, get nothing added."""
    x = np.zeros((64, 64), np.float16)
    ir = mma_kernel(float16, 64, 64, 64, fence=False).ir(x, x, np.zeros((64, 64), np.float32), arch="sm_90a")
    assert "wgmma.fence" not in ir["insert_barriers"]
    lines = [ln.strip() for ln in ir["insert_wgmma_fences"].splitlines()]
    mma = next(i for i, ln in enumerate(lines) if ln.startswith("wgmma.mma("))
    assert lines[mma - 1] == "wgmma.fence()", lines[mma - 3:mma + 1]
    rng = np.random.default_rng(5)
    ha, hb = (rng.uniform(-1, 1, (64, 64)).astype(np.float16) for _ in range(2))
    c = arrays.put(np.zeros((64, 64), np.float32))
    mma_kernel(float16, 64, 64, 64, fence=False)(arrays.put(ha), arrays.put(hb), c)
    np.testing.assert_allclose(arrays.host(c), ha.astype(np.float32) @ hb.astype(np.float32).T, rtol=1e-3, atol=1e-3)
    y = np.zeros((256, 256), np.float16)
    for kernel in [HopperMatmulV0(), HopperMatmulV1(), HopperMatmulV2(), HopperMatmulV4(), HopperMatmulV5(),
                   HopperMatmulV6()]:
        stages = kernel.ir(256, 256, 256, y, y, y, arch="sm_90a")
        assert stages["insert_wgmma_fences"] == stages["insert_barriers"], type(kernel).__name__


class Overwrite(tilus.Script):
    """c = a @ b.T twice over an accumulator that starts at 5: the first product overwrites it
    (enable_input_d=False), the second adds to it. 128 rows (two m64 blocks: the first k step of
    each overwrites) and k = 64 (four k16 steps: the later ones add)."""

    def __call__(self, a: ~float16, b: ~float16, c: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        sa = self.shared_tensor(dtype=float16, shape=[128, 64])
        sb = self.shared_tensor(dtype=float16, shape=[64, 64])
        self.copy(self.global_view(a, shape=[128, 64]), sa)
        self.copy(self.global_view(b, shape=[64, 64]), sb)
        acc = self.register_tensor(dtype=float32, shape=[128, 64], init=5.0)
        self.wgmma.fence()
        self.wgmma.mma(sa, sb.T, acc, enable_input_d=False)
        self.wgmma.mma(sa, sb.T, acc)
        self.wgmma.commit_group()
        self.wgmma.wait_group(0)
        self.store_global(self.global_view(c, shape=[128, 64]), acc, offsets=[0, 0])


def test_an_mma_without_input_d_overwrites_its_accumulator(arrays):
    rng = np.random.default_rng(3)
    ha, hb = rng.uniform(-1, 1, (128, 64)).astype(np.float16), rng.uniform(-1, 1, (64, 64)).astype(np.float16)
    c = arrays.put(np.zeros((128, 64), np.float32))
    Overwrite()(arrays.put(ha), arrays.put(hb), c)
    want = 2 * (ha.astype(np.float64) @ hb.astype(np.float64).T)
    np.testing.assert_allclose(arrays.host(c), want, rtol=1e-3, atol=1e-3)


def test_an_mma_without_input_d_sets_scale_d_on_its_first_k_steps():
    """The IR says enable_input_d=false; in the CUDA source the first k step of each m64 block of
    that mma has wgmma's scale-d 0 ("r"(0)), every other instruction 1."""
    x, y = np.zeros((128, 64), np.float16), np.zeros((128, 64), np.float32)
    ir = Overwrite().ir(x, x, y, arch="sm_90a")["select_instructions"]
    assert ir.count("enable_input_d=false") == 1, ir
    src = Overwrite().source(x, x, y, arch="sm_90a")
    scale_d = re.findall(r'"r"\(([01])\)\);', src)
    assert scale_d == ["0", "1", "1", "1"] * 2 + ["1"] * 8, scale_d


class MissingWait(tilus.Script):
    def __call__(self, c: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        sa = self.shared_tensor(dtype=float16, shape=[64, 64])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        self.wgmma.mma(sa, sa.T, acc)
        self.wgmma.commit_group()
        self.store_global(self.global_view(c, shape=[64, 64]), acc, offsets=[0, 0])


def test_reading_the_accumulator_before_the_wait_names_both_lines():
    with pytest.raises(tilus.CompileError, match=r"store_global at .*test_wgmma.py:\d+ touches .* wgmma.mma at "
                                                 r".*test_wgmma.py:\d+ .*wgmma.wait_group"):
        MissingWait().ir(np.zeros((64, 64), np.float32), arch="sm_90a")


class PrefetchIntoTheInFlightA(tilus.Script):
    """Loads the next a into the registers the previous wgmma.mma may still be reading (it waits
    with one group in flight)."""

    def __call__(self, a: ~float16, b: ~float16, c: ~float32, n: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        sb = self.shared_tensor(dtype=float16, shape=[64, 64])
        self.copy(self.global_view(b, shape=[64, 64]), sb)
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        ga = self.global_view(a, shape=[64, 64 * n])
        for i in range(n):
            ra = self.load_global(ga, offsets=[0, i * 64], shape=[64, 64])
            self.wgmma.fence()
            self.wgmma.mma(ra, sb.T, acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(1)
        self.wgmma.wait_group(0)
        self.store_global(self.global_view(c, shape=[64, 64]), acc, offsets=[0, 0])


def test_overwriting_a_register_a_still_being_read_names_both_lines():
    with pytest.raises(tilus.CompileError, match=r"load_global at .*test_wgmma.py:\d+ touches register tensor ra that "
                                                 r"wgmma.mma at .*test_wgmma.py:\d+ may still be reading"):
        PrefetchIntoTheInFlightA().ir(np.zeros((64, 128), np.float16), np.zeros((64, 64), np.float16),
                                      np.zeros((64, 64), np.float32), 2, arch="sm_90a")


def bad(body, warps=4):
    class Bad(tilus.Script):
        def __call__(self, c: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = warps
            body(self)

    return Bad()


def f16(s, *shape):
    return s.shared_tensor(dtype=float16, shape=list(shape))


def acc(s, m, n, dt=float32):
    return s.register_tensor(dtype=dt, shape=[m, n], init=0.0)


@pytest.mark.parametrize("body,match", [
    (lambda s: s.wgmma.mma(f16(s, 64, 64).T, f16(s, 64, 64).T, acc(s, 64, 64)), r"a must be K-major"),
    (lambda s: s.wgmma.mma(f16(s, 64, 64), f16(s, 64, 128), acc(s, 64, 128)), r"b is MN-major and must be stored in "
                                                                               r"rows of 32, 64 or 128 bytes along N"),
    (lambda s: s.wgmma.mma(f16(s, 64, 128), f16(s, 64, 128).T, acc(s, 64, 64)),
     r"rows of 32, 64 or 128 bytes"),
    (lambda s: s.wgmma.mma(f16(s, 32, 64), f16(s, 64, 64).T, acc(s, 32, 64)), r"multiple of 64"),
    (lambda s: s.wgmma.mma(f16(s, 64, 64), f16(s, 64, 64).T, acc(s, 64, 64, int32)), r"d must be float32"),
    (lambda s: s.wgmma.mma(f16(s, 64, 64), f16(s, 64, 64).T, acc(s, 64, 32)), r"so d must be \[64, 64\]"),
    (lambda s: s.wgmma.mma(acc(s, 64, 64, float8_e4m3), s.shared_tensor(dtype=float8_e4m3, shape=[64, 64]).T,
                           acc(s, 64, 64)), r"a in registers must be float16 or bfloat16"),
    (lambda s: s.wgmma.wait_group(8), r"n must be from 0 to 7"),
    (lambda s: s.wgmma.mma(f16(s, 64, 64), f16(s, 64, 64).T, acc(s, 64, 64), enable_input_d=s.blockIdx.x == 0),
     r"wgmma.mma: enable_input_d must be a Python bool"),
])
def test_bad_calls_name_the_instruction_and_line(body, match):
    with pytest.raises(tilus.CompileError, match=r"test_wgmma.py:\d+.*" + match):
        bad(body).ir(np.zeros(4, np.float32), arch="sm_90a")


def test_wgmma_needs_sm90a():
    with pytest.raises(tilus.CompileError, match=r"wgmma needs sm_90a, the target is sm_80"):
        mma_kernel(float16, 64, 64, 64).ir(np.zeros((64, 128), np.uint8), np.zeros((64, 128), np.uint8),
                                           np.zeros((64, 64), np.float32), arch="sm_80")


def test_seed_names_record_the_same_instructions():
    class Seed(tilus.Script):
        def __call__(self, c: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            sa = self.shared_tensor(dtype=float16, shape=[64, 64])
            d = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
            self.warpgroup_arrive()
            self.wgmma.mma(sa, sa.transpose(), d)
            self.warpgroup_commit_batch()
            self.warpgroup_wait(0)
            self.warpgroup_fence_operand(d)
            self.wait_wgmma(0)

    traced = Seed().ir(np.zeros((64, 64), np.float32), arch="sm_90a")["traced"]
    names = [ln.strip().split("(")[0] for ln in traced.splitlines() if ln.strip().startswith("wgmma.")]
    assert names == ["wgmma.fence", "wgmma.mma", "wgmma.commit_group", "wgmma.wait_group", "wgmma.wait_group"]


# --- dot -> wgmma (lower_dots_to_wgmma) ----------------------------------------------------------

from matmul_v3 import MatmulV3  # noqa: E402


def _fresh(cls, **cfg):
    """An instance of a subclass of its own: a process keeps compiled kernels per class and
    attributes, and TILUS_DOT_WGMMA only applies to compiles that start after it is set."""
    return type(cls.__name__ + "Fresh", (cls,), {})(**cfg)


# An Ampere-style Script (cp.async pipeline, load_shared, dot) unchanged: its dot runs as wgmma
# (TILUS_DOT_WGMMA=1 makes the CPU backend take the same IR), ragged in every dim; 8 warps split
# the transposed accumulator's rows over two warp groups.
@pytest.mark.parametrize("m,n,k", [(301, 517, 200), (128, 128, 32), (70, 150, 8)])
@pytest.mark.parametrize("cfg", [{}, dict(block_m=64, block_n=128, stages=4), dict(warps=8)],
                         ids=["128x128", "64x128-4stages", "8warps"])
def test_dot_runs_as_wgmma(arrays, monkeypatch, cfg, m, n, k):
    monkeypatch.setenv("TILUS_DOT_WGMMA", "1")
    kernel = _fresh(MatmulV3, **cfg)
    lowered = str(tilus.trace(kernel).lowered("sm_90a"))
    assert "wgmma.mma(" in lowered and "from_dot=true" in lowered and "dot(" not in lowered
    run_matmul(arrays, kernel, m, n, k, seed=1, b_nk=False)


@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
def test_dot_keeps_mma_sync_when_told_on_the_gpu(monkeypatch):
    from conftest import Arrays
    monkeypatch.setenv("TILUS_DOT_WGMMA", "0")
    kernel = _fresh(MatmulV3)
    x = np.zeros((128, 128), np.float16)
    src = kernel.compiled(128, 128, 128, x, x, x, arch="sm_90a").source
    assert "mma_m16n8k16" in src and "wgmma" not in src
    run_matmul(Arrays("cuda"), kernel, 301, 517, 200, seed=1, b_nk=False)


def test_dot_wgmma_setting_is_checked(monkeypatch):
    monkeypatch.setenv("TILUS_DOT_WGMMA", "yes")
    with pytest.raises(tilus.CompileError, match="TILUS_DOT_WGMMA must be 0, 1 or auto, got 'yes'"):
        tilus.trace(_fresh(MatmulV3)).lowered("sm_90a")


def dot_kernel(dt, acc_dt, b_nk, bm=64, bn=64, bk=32):
    """c = a @ b (b stored [k, n]) or a @ b.T (b stored [n, k], loaded through its transposed
    view) with load_shared + dot, one k tile per step, tiles of dt accumulated in acc_dt."""

    class Dot(tilus.Script):
        def __call__(self, m: int32, n: int32, k: int32, a: ~VOID, b: ~VOID, c: ~float32):
            self.attrs.blocks = [tilus.cdiv(m, bm), tilus.cdiv(n, bn)]
            self.attrs.warps = 4
            ga = self.global_view(a, dtype=dt, shape=[m, k])
            gb = self.global_view(b, dtype=dt, shape=[n, k] if b_nk else [k, n])
            sa = self.shared_tensor(dtype=dt, shape=[bm, bk])
            sb = self.shared_tensor(dtype=dt, shape=[bn, bk] if b_nk else [bk, bn])
            acc = self.register_tensor(dtype=acc_dt, shape=[bm, bn], init=0.0)
            for ko in range(tilus.cdiv(k, bk)):
                self.copy_async(ga, sa, offsets=[self.blockIdx.x * bm, ko * bk])
                self.copy_async(gb, sb, offsets=[self.blockIdx.y * bn, ko * bk] if b_nk else [ko * bk, self.blockIdx.y * bn])
                self.copy_async_wait_all()
                self.sync()
                tb = self.load_shared(sb.transpose()) if b_nk else self.load_shared(sb)
                acc = self.dot(self.load_shared(sa), tb, acc)
                self.sync()
            self.store_global(self.global_view(c, shape=[m, n]), acc.to(float32),
                              offsets=[self.blockIdx.x * bm, self.blockIdx.y * bn])

    return Dot()


# Both forms (b [k, n]: the transposed product; b [n, k]: both tiles by descriptor), bf16 and an
# f16 accumulator, ragged: on the GPU against torch.
@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
@pytest.mark.parametrize("dt,acc_dt,b_nk", [(bfloat16, float32, False), (bfloat16, float32, True),
                                             (float16, float16, False), (float16, float32, True)],
                         ids=["bf16", "bf16-b_nk", "f16-acc16", "f16-b_nk"])
def test_dot_as_wgmma_forms_on_the_gpu(dt, acc_dt, b_nk):
    import torch
    k = dot_kernel(dt, acc_dt, b_nk)
    assert "from_dot=true" in str(tilus.trace(k).lowered("sm_90a"))
    tdt = torch.bfloat16 if dt == bfloat16 else torch.float16
    m, n, kk = 150, 200, 72
    a = torch.randn(m, kk, device="cuda").to(tdt)
    b = torch.randn(n, kk, device="cuda").to(tdt) if b_nk else torch.randn(kk, n, device="cuda").to(tdt)
    c = torch.zeros(m, n, device="cuda")
    k(m, n, kk, a, b, c)
    want = a.float() @ (b.float().T if b_nk else b.float())
    torch.testing.assert_close(c, want, atol=0.1 if acc_dt == float16 else 2e-2, rtol=2e-2)


class PrintfInAWgmmaKernel(tilus.Script):
    def __call__(self, c: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        sa = self.shared_tensor(dtype=float16, shape=[64, 64])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        self.wgmma.fence()
        self.wgmma.mma(sa, sa.T, acc)
        self.wgmma.mma(sa, sa.T, acc)
        self.wgmma.commit_group()
        self.wgmma.wait_group(0)
        self.printf("done\n")
        self.store_global(self.global_view(c, shape=[64, 64]), acc, offsets=[0, 0])


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
def test_the_wgmma_examples_keep_their_wgmma_in_flight():
    """ptxas makes every wgmma of a kernel wait for the one before when the kernel calls a
    function (its C7510 remark): a device printf of a run-time check once cost hopper_matmul_v4 a
    sixth of its speed. The examples compile without it (and without the serialization ptxas
    chose for a producer group's loop of waits written before the consumers' wgmma), and a kernel
    that does call printf is reported (`wgmma_serialized`, and a warning at compile time)."""
    from hopper_matmul_v3 import HopperMatmulV3
    from matmul_v3 import MatmulV3
    x = np.zeros((512, 512), np.float16)
    # v2 (not persistent) was serialized with its producer group written first (C7514), until
    # order_thread_groups put the consumers first.
    kernels = [HopperMatmulV1(), HopperMatmulV2(), HopperMatmulV3(), HopperMatmulV4(), HopperMatmulV5(),
               HopperMatmulV6(), MatmulV3()]
    calls = [(kernel, (512, 512, 512, x, x, x)) for kernel in kernels]
    # conv2d_wgmma's in-loop im2col coordinates divide 64-bit values by the image's run-time
    # sizes: ptxas's division subroutine serialized its wgmma (C7515, "non wgmma instructions
    # defining accumulator registers") until the emitter divided without it (tilus::div64).
    from conv2d_wgmma import Conv2dWgmma, Conv2dWgmmaPersistent
    img, wt = np.zeros((2, 13, 11, 64), np.float16), np.zeros((40, 3, 3, 64), np.float16)
    for conv in (Conv2dWgmma(), Conv2dWgmmaPersistent()):
        calls.append((conv, (2, 13, 11, 64, 40, img, wt, np.zeros((2 * 13 * 11, 40), np.float16))))
    from test_low_precision import HOPPER_CASES, hopper_case
    # the quantized matmul's wgmma kernel (TMA-store epilogue, clusters)
    for case in HOPPER_CASES[:2] + HOPPER_CASES[6:7]:
        kernel, args, _ = hopper_case(*case, seed=0)
        calls.append((kernel, (*case[2:5], *args)))
    checked = 0
    for kernel, args in calls:
        compiled = kernel.compiled(*args, arch="sm_90a")
        if compiled.spill_store_bytes < 0:  # ptxas's report not kept (see docs/python.md)
            continue
        checked += 1
        assert compiled.wgmma_serialized == "", (type(kernel).__name__, compiled.wgmma_serialized)
        assert compiled.spill_store_bytes == 0, type(kernel).__name__
    compiled = PrintfInAWgmmaKernel().compiled(np.zeros((64, 64), np.float32), arch="sm_90a")
    if compiled.spill_store_bytes >= 0:
        assert "function call" in compiled.wgmma_serialized, compiled.wgmma_serialized
    elif checked == 0:
        pytest.skip("NVRTC kept no ptxas report in this run")


class PeeledTwoGroupMatmul(tilus.Script):
    """c = a @ b.T: a producer warp loads both operands by TMA into a ring of `stages` buffers,
    and two consumer warp groups, each with its own [bm/2, bn] accumulator, run their own k loop
    whose first step is peeled (the first wgmma before the loop); the ring's positions are kernel
    variables each thread steps. NVIDIA Tilus's hopper matmul v5 has this shape."""

    def __init__(self, bm=256, bn=128, bk=64, stages=3):
        super().__init__()
        self.bm, self.bn, self.bk, self.stages = bm, bn, bk, stages

    def __call__(self, m: int32, n: int, k: int, a: ~float16, b: ~float16, c: ~float16):
        bm, bn, bk, stages = self.bm, self.bn, self.bk, self.stages
        half = bm // 2
        steps = tilus.cdiv(k, bk)
        self.attrs.blocks = [tilus.cdiv(m, bm), tilus.cdiv(n, bn)]
        self.attrs.warps = 9
        ga = self.global_view(a, shape=[m, k])
        gb = self.global_view(b, shape=[n, k])
        gc = self.global_view(c, shape=[m, n])
        sa = self.shared_tensor(dtype=float16, shape=[stages, 2, half, bk])
        sb = self.shared_tensor(dtype=float16, shape=[stages, bn, bk])
        full = self.mbarrier.alloc(counts=[1] * stages)
        empty = self.mbarrier.alloc(counts=[256] * stages)
        row, col = self.blockIdx.x * bm, self.blockIdx.y * bn
        # Ring positions as kernel variables, each thread stepping its own copy.
        load_stage: int32 = 0
        load_phase: uint32 = 1
        use_stage: int32 = 0
        use_phase: uint32 = 0
        with self.thread_group(thread_begin=256, num_threads=32):
            for s in self.range(steps, unroll=stages):
                self.mbarrier.wait(empty[load_stage], phase=load_phase)
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(full[load_stage], transaction_bytes=(bm + bn) * bk * 2)
                for wg in tilus.static_range(2):
                    self.tma.global_to_shared(src=ga, dst=sa[load_stage, wg], offsets=[row + wg * half, s * bk],
                                             mbarrier=full[load_stage])
                self.tma.global_to_shared(src=gb, dst=sb[load_stage], offsets=[col, s * bk], mbarrier=full[load_stage])
                load_stage = (load_stage + 1) % stages
                load_phase = load_phase ^ (load_stage == 0)
        for wg in tilus.static_range(2):
            with self.thread_group(thread_begin=128 * wg, num_threads=128):
                acc = self.register_tensor(dtype=float32, shape=[half, bn], init=0.0)
                self.mbarrier.wait(full[use_stage], phase=use_phase)
                self.wgmma.fence()
                self.wgmma.mma(sa[use_stage, wg], sb[use_stage].transpose(), acc)
                self.wgmma.commit_group()
                use_stage = (use_stage + 1) % stages
                use_phase = use_phase ^ (use_stage == 0)
                for _ in self.range(1, steps, unroll=stages):
                    self.mbarrier.wait(full[use_stage], phase=use_phase)
                    self.wgmma.fence()
                    self.wgmma.mma(sa[use_stage, wg], sb[use_stage].transpose(), acc)
                    self.wgmma.commit_group()
                    self.wgmma.wait_group(1)
                    self.mbarrier.arrive(empty[(use_stage + stages - 1) % stages])
                    use_stage = (use_stage + 1) % stages
                    use_phase = use_phase ^ (use_stage == 0)
                self.wgmma.wait_group(0)
                self.mbarrier.arrive(empty[(use_stage + stages - 1) % stages])
                self.store_global(gc, acc.to(float16), offsets=[row + wg * half, col])


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
def test_two_consumer_groups_with_a_peeled_step_keep_their_wgmma_in_flight():
    """NVIDIA Tilus's matmul v5 shape (run unchanged it had every wgmma serialized at 256x128
    tiles in 3, 5 and 6 stages: "program dependence on compiler-inserted WG.AR in divergent
    path"): each group's zeroed accumulator was materialized between the peeled step's
    wgmma.fence and its mma, until the emitter pinned the accumulators before every fence. With a
    ring of 3 stages, as there, the kernel neither serializes nor spills."""
    x = np.zeros((512, 512), np.float16)
    compiled = PeeledTwoGroupMatmul(stages=3).compiled(1024, 1024, 1024, x, x, x, arch="sm_90a")
    if compiled.spill_store_bytes < 0:  # ptxas's report not kept (see docs/python.md)
        pytest.skip("NVRTC kept no ptxas report in this run")
    assert compiled.wgmma_serialized == "", compiled.wgmma_serialized
    assert compiled.spill_store_bytes == 0


def test_descriptors_are_shared_memorys_plus_16_byte_units():
    """The CUDA the emitter writes (no compile): every wgmma operand's descriptor is the kernel's
    shared memory's (loop invariant) plus the operand's start in 16-byte units, its k steps a
    constant more: no byte address masked and shifted per operand and step (the d 128 attention
    rule's step: 68 -> 52 uniform instructions f16, 56 -> 41 bf16)."""
    x = np.zeros((512, 512), np.float16)
    src = PeeledTwoGroupMatmul(stages=3).source(1024, 1024, 1024, x, x, x, arch="sm_90a")
    descs = [l.strip() for l in src.splitlines() if "tilus::wgmma_desc(" in l]
    assert len(descs) == 8, descs  # a and b of the peeled step and the loop, per consumer group
    for d in descs:
        # (a stage's start moves at run time: the sum opaque to NVVM, which would hoist a
        # descriptor per instruction out of the loop)
        assert re.fullmatch(r"const uint64_t wgmma_desc_[ab](_\d+)? = tilus::opaque_u64\(tilus::wgmma_desc\("
                            r"tilus::smem_addr\(tilus_smem\), 16u, 1024u, 1u\) \+ uint32_t\(.*use_stage.*\)\);", d), d
    # each instruction: the descriptor plus a constant in 16-byte units, a k step of 16 columns
    # 32 bytes, a's second m64 block 64 rows of 128 bytes on
    steps = re.findall(r'"l"\(wgmma_desc_([ab])(?:_\d+)? \+ (\d+)u\)', src)
    assert {(o, int(off)) for o, off in steps} == {("a", mb * 512 + 2 * ks) for mb in (0, 1) for ks in range(4)} | {
        ("b", 2 * ks) for ks in range(4)}, steps


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: warp-specialized kernels run only there")
@pytest.mark.parametrize("stages", [3, 4])
@pytest.mark.parametrize("m", [300, 512])
def test_two_consumer_groups_with_a_peeled_step_on_the_gpu(stages, m):
    from conftest import Arrays
    run_matmul(Arrays("cuda"), PeeledTwoGroupMatmul(stages=stages), m, 384, 640)


class WgmmaLoops(tilus.Script):
    """Three loops of wgmma: over a run-time k (not unrolled unless asked), the same with
    unroll=2, and a constant trip count (left to NVVM)."""

    def __call__(self, k: int32, a: ~float16, c: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        sa = self.shared_tensor(dtype=float16, shape=[64, 16])
        self.copy(self.global_view(a, shape=[64, 16]), sa)
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        for ko in range(k):
            self.wgmma.fence()
            self.wgmma.mma(sa, sa.T, acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
        for ki in self.range(k, unroll=2):
            self.wgmma.fence()
            self.wgmma.mma(sa, sa.T, acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
        for kc in range(3):
            self.wgmma.fence()
            self.wgmma.mma(sa, sa.T, acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
        self.store_global(self.global_view(c, shape=[64, 64]), acc, offsets=[0, 0])


def test_a_wgmma_main_loop_is_not_unrolled_unless_asked():
    """NVVM unrolled a run-time loop of wgmma four times plus a remainder loop (hopper_matmul_v0:
    40 HGMMA for its 8, twice the compile time) for no gain: the tensor cores run asynchronously.
    The emitter tells it not to; a Script's unroll= and constant trip counts keep their way."""
    program = tilus.trace(WgmmaLoops())
    src = tilus._C.compile_cuda_source(program, "sm_90a")
    lines = [l.strip() for l in src.splitlines()]
    before = {v: lines[i - 1] for i, l in enumerate(lines) for v in ("ko", "ki", "kc") if l.startswith(f"for (int32_t {v} = 0;")}
    assert before == {"ko": "#pragma unroll 1", "ki": "#pragma unroll 2", "kc": before["kc"]}, before
    assert not before["kc"].startswith("#pragma"), before
    program = tilus.trace(HopperMatmulV0())
    src = tilus._C.compile_cuda_source(program, "sm_90a")
    assert re.search(r"#pragma unroll 1\n\s*for \(int32_t ko = 0; ko < \(\(k \+ 63\) / 64\)", src), src
