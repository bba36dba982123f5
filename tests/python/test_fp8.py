"""FP8 (issue 44): the FP8 matmul of examples/python/matmul_fp8.py (per-tensor, per-row and
DeepSeek-V3 block scales; e4m3 and e5m2 operands in every pairing wgmma allows) and the per-token
quantization kernels of per_token_cast.py / swiglu_per_token_cast.py, against float64 / numpy
references built from the formats' definitions (each fp8 code's value; round to nearest even with
e4m3's saturation and NaN rule). MatmulFp8Ring and the quantization kernels run on the CPU backend
and the GPU; the warp-specialized MatmulFp8 on the GPU only. Without a GPU, the CUDA path is
checked by what NVRTC makes of it: the wgmma kinds in the PTX, no spills, no serialized wgmma, and
the SASS (QGMMA, TMA) where cuobjdump is installed."""
import re

import numpy as np
import pytest

import tilus
from tilus import bfloat16, float16, float32, float8_e4m3, float8_e5m2
from conftest import HAS_GPU, Arrays

from common import from_host_array, round_to
from matmul_fp8 import (BLOCK_TILES, TILES, MatmulFp8, MatmulFp8Auto, MatmulFp8Block, MatmulFp8BlockTuned,
                        MatmulFp8Ring, MatmulFp8Tuned, block_config, block_scales, operands, reference, tensor_config)
import per_token_cast
import swiglu_per_token_cast


def check_matmul(arrays, kernel, m, n, k, seed=0, limit=4.0, spec=None):
    """kernel on random codes (values within +-limit) against the float64 reference rounded to c's
    dtype: within c's rounding plus the fp8 tensor cores' summation error (they sum with fewer
    bits than float32), as a fraction of the result's largest magnitude. spec: what has the
    kernel's scaling, out, atype and btype (an autotuned instance has none until tuned)."""
    rng = np.random.default_rng(seed)
    spec = spec or kernel
    a, av, b, bv, sa, sb = operands(spec.scaling, m, n, k, rng, spec.atype, spec.btype)
    if limit != 4.0:  # the codes near the format's largest values
        from matmul_fp8 import random_codes
        a, av = random_codes(spec.atype, (m, k), rng, limit)
        b, bv = random_codes(spec.btype, (n, k), rng, limit)
    ka, kb = block_scales(sa, sb) if spec.scaling == "block" else (sa, sb)
    c = arrays.put(np.full((m, n), 7, {float16: np.float16, float32: np.float32, bfloat16: np.uint16}[spec.out]))
    if arrays.device == "cuda":
        import torch
        c = torch.full((m, n), 7.0, dtype={float16: torch.float16, float32: torch.float32,
                                           bfloat16: torch.bfloat16}[spec.out], device="cuda")
    kernel(m, n, k, arrays.put(a), arrays.put(b), arrays.put(ka), arrays.put(kb), c)
    got = from_host_array(c, spec.out)
    want = reference(spec.scaling, av, bv, sa, sb)
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, round_to(want, spec.out), atol=1e-3 * scale, rtol=8e-3)


# Ragged m and n; k a multiple of 16 that is not one of 128 (a partial last k step and scale block).
@pytest.mark.parametrize("scaling,atype,btype,out,m,n,k", [
    ("tensor", float8_e4m3, float8_e4m3, bfloat16, 150, 200, 400),
    ("tensor", float8_e5m2, float8_e5m2, float32, 70, 130, 256),
    ("row", float8_e5m2, float8_e4m3, float16, 129, 77, 272),
    ("block", float8_e4m3, float8_e4m3, bfloat16, 150, 200, 400),
    ("block", float8_e4m3, float8_e5m2, float32, 65, 136, 128),
])
def test_ring_matmul(arrays, scaling, atype, btype, out, m, n, k):
    check_matmul(arrays, MatmulFp8Ring(scaling, out=out, atype=atype, btype=btype), m, n, k)


# Block scales with 192-column tiles: tiles that start on a block of b's scales (0, 384) and half
# way into one (192, 576: their middle third takes the second block), a ragged last one.
@pytest.mark.parametrize("btype,out,m,n,k", [(float8_e4m3, bfloat16, 150, 600, 400),
                                             (float8_e5m2, float32, 70, 392, 256)])
def test_ring_matmul_block_scaled_192_column_tiles(arrays, btype, out, m, n, k):
    check_matmul(arrays, MatmulFp8Ring("block", out=out, btype=btype, block_n=192), m, n, k)


def test_block_scaled_192_column_tiles_need_the_whole_tile_buffer():
    with pytest.raises(AssertionError, match="192-column tiles: c's buffer must hold the whole tile"):
        MatmulFp8("block", block_n=192, out=float32)


@pytest.mark.parametrize("dt,limit", [(float8_e4m3, 448.0), (float8_e5m2, 57344.0)])
def test_ring_matmul_with_the_largest_codes(arrays, dt, limit):
    check_matmul(arrays, MatmulFp8Ring("tensor", out=float32, atype=dt, btype=dt), 64, 64, 128, limit=limit)


# Several tiles per block (8 blocks: the ring's phases carry across tiles), ragged tiles, a pair
# whose second block has no rows; e5m2 mixes, float32 c, three consumer warp groups.
@pytest.mark.skipif(not HAS_GPU, reason="no GPU: warp-specialized kernels run only there")
@pytest.mark.parametrize("kw,m,n,k", [
    (dict(scaling="tensor"), 301, 520, 1040), (dict(scaling="tensor"), 1000, 3000, 208),
    (dict(scaling="tensor", out=float32), 200, 260, 512),
    (dict(scaling="tensor", atype=float8_e5m2, btype=float8_e4m3, out=float16), 129, 136, 384),
    (dict(scaling="row"), 301, 520, 1040), (dict(scaling="row", atype=float8_e4m3, btype=float8_e5m2), 700, 264, 640),
    (dict(scaling="block"), 301, 520, 1040), (dict(scaling="block", block_m=192), 1000, 1000, 2048),
    # 192-column tiles with block scales: tiles on and half way into a block of b's scales, ragged.
    (dict(scaling="block", block_n=192), 301, 1000, 1040),
    (dict(scaling="block", block_n=192, btype=float8_e5m2, out=float16), 700, 584, 400),
    (dict(scaling="block", out=float32), 130, 260, 272), (dict(scaling="block", block_n=128), 301, 520, 1040),
    (dict(scaling="block", block_m=64, block_n=128), 130, 264, 1040), (dict(scaling="block", block_m=64), 100, 600, 272),
    # Two products in turn: odd and even step counts (9, 2, 1, 4: the loop's tail either way), 2 or
    # 1 consumer warp groups, several tiles a block.
    (dict(scaling="block", block_n=128, products=2), 301, 520, 1040),
    (dict(scaling="block", block_n=128, products=2, out=float32), 700, 264, 256),
    (dict(scaling="block", block_n=128, products=2), 130, 1000, 128),
    (dict(scaling="block", block_m=64, block_n=128, products=2, atype=float8_e4m3, btype=float8_e5m2), 130, 264, 512),
    # 192-column tiles (16-bit c: c's buffer the whole tile and one 192-wide wgmma; float32: a
    # 128- and a 64-column piece), a ragged last one; 256-column tiles with 3 stages (the whole
    # tile's buffer, one 256-wide wgmma).
    (dict(scaling="tensor", block_n=192), 301, 520, 1040), (dict(scaling="row", block_n=192, out=float32), 200, 400, 512),
    (dict(scaling="tensor", stages=3), 301, 520, 1040), (dict(scaling="row", stages=3, out=float16), 700, 1000, 272),
])
def test_warp_specialized_matmul_on_the_gpu(kw, m, n, k):
    check_matmul(Arrays("cuda"), MatmulFp8(blocks=8, **kw), m, n, k)


def test_block_scaled_tile_rule():
    """block_config: 64 x 128 with two products for a few tokens, 128 x 256 where its pairs fill
    the clusters, 128 x 192 where its rounds of pairs hold fewer columns (16-bit c), else 128 x 128
    (66 clusters, as on an H100 / H200)."""
    assert [block_config(m, 8192, 66) for m in (1, 16, 128)] == [(64, 128, 2)] * 3
    assert block_config(4096, 4096, 66) == (128, 256, 1)  # 4 rounds of 256 columns against 6 of 192
    assert block_config(8192, 8192, 66) == (128, 192, 1)  # 21 rounds of 192 columns against 16 of 256
    assert block_config(8192, 8192, 66, float32) == (128, 256, 1)  # 192 columns: 16-bit c only
    assert block_config(256, 8192, 66) == (128, 128, 1)  # 32 pairs of 128 x 256 tiles would leave half idle


def test_per_tensor_tile_rule():
    """tensor_config: 256 columns where its rounds of tile pairs hold the fewest columns, 192
    where 192's do (16-bit c), and MatmulFp8Auto takes that tile (66 clusters)."""
    assert tensor_config(4096, 4096, 66) == 256  # 4 rounds of 256 columns against 6 of 192
    assert tensor_config(8192, 8192, 66) == 192  # 21 rounds of 192 columns against 16 of 256
    assert tensor_config(8192, 8192, 66, float32) == 256
    assert MatmulFp8Auto("row", blocks=132).config(8192, 8192) == (128, 192, 1)
    assert MatmulFp8Auto("tensor", blocks=132).kernel(4096, 4096).block_n == 256


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: warp-specialized kernels run only there")
@pytest.mark.parametrize("m", [16, 300])
@pytest.mark.parametrize("tune", [False, True])
def test_block_scaled_matmul_with_its_chosen_tile_on_the_gpu(m, tune):
    kernel = MatmulFp8Block(blocks=8, tune=tune)
    check_matmul(Arrays("cuda"), kernel, m, 1000, 1040)


def test_the_block_scaled_tuner_offers_every_tile():
    """MatmulFp8BlockTuned's space is BLOCK_TILES, each a MatmulFp8 with block scaling."""
    from tilus.tuning import space_of
    configs = space_of(MatmulFp8BlockTuned, {"blocks": 132})
    assert [(c["block_m"], c["block_n"], c["products"]) for c in configs] == BLOCK_TILES
    for c in configs:
        kernel = MatmulFp8BlockTuned(blocks=132, **c)
        assert (kernel.scaling, kernel.block_m, kernel.block_n, kernel.products) == ("block", *BLOCK_TILES[configs.index(c)])


def test_the_per_tensor_tuner_offers_every_width():
    """MatmulFp8Tuned's space is TILES, each a MatmulFp8 of 128 rows with the scaling asked for
    and the stages named (None: as many as fit)."""
    from tilus.tuning import space_of
    configs = space_of(MatmulFp8Tuned, {"scaling": "row", "blocks": 132})
    assert [(c["block_n"], c["stages"]) for c in configs] == TILES
    for c in configs:
        kernel = MatmulFp8Tuned("row", blocks=132, **c)
        assert (kernel.scaling, kernel.block_m, kernel.block_n) == ("row", 128, c["block_n"])
        assert kernel.stages == (c["stages"] or MatmulFp8("row", block_n=c["block_n"]).stages)


@pytest.mark.parametrize("kw,stages,whole", [
    (dict(scaling="tensor"), 4, False), (dict(scaling="tensor", stages=3), 3, True),
    (dict(scaling="tensor", block_n=192), 4, True), (dict(scaling="tensor", block_n=192, out=float32), 4, False),
    (dict(scaling="block"), 4, False), (dict(scaling="block", block_n=128), 5, True)])
def test_c_buffer_holds_the_whole_tile_where_it_costs_no_stage(kw, stages, whole):
    """c's shared buffer holds the whole tile where the stages (as many as fit beside a 128-column
    piece's buffer, or those asked for) still fit beside it, else one 128-column piece; the
    buffer, stages and barriers fit an sm_90 block's shared memory."""
    kernel = MatmulFp8(**kw)
    assert (kernel.stages, kernel.whole_store) == (stages, whole)
    cols = kernel.block_n if whole else 128
    assert kernel.store_bytes == kernel.block_m * cols * kernel.out.bits // 8
    assert kernel.stages * kernel.stage_bytes + kernel.store_bytes + 256 <= 232448


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: warp-specialized kernels run only there")
@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_tuned_per_tensor_and_per_row_matmul_on_the_gpu(scaling):
    check_matmul(Arrays("cuda"), MatmulFp8Tuned(scaling, blocks=8), 500, 1000, 512, spec=MatmulFp8(scaling))
    check_matmul(Arrays("cuda"), MatmulFp8Auto(scaling, blocks=8, tune=True), 300, 1000, 512)
    check_matmul(Arrays("cuda"), MatmulFp8Auto(scaling, blocks=8), 300, 1000, 512)


@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
def test_per_tensor_matmul_matches_torch_scaled_mm():
    import torch
    m, n, k = 256, 512, 1024
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    sa, sb = torch.tensor([0.5], device="cuda"), torch.tensor([2.0], device="cuda")
    c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    MatmulFp8(blocks=8)(m, n, k, a, b, sa, sb, c)
    want = torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16).float()
    # Both round a float32 sum to bfloat16 (a relative step of 2**-7, rtol: one step apart where
    # the sums fall on either side of a rounding boundary), and Hopper's FP8 wgmma adds with fewer
    # mantissa bits than float32, in an order of each library's own (atol: 2**-8 of the largest
    # result, about 0.1 here; a wrong tile is off by the result's own size).
    torch.testing.assert_close(c.float(), want, atol=want.abs().max().item() * 2**-8, rtol=2**-7)


def _args(scaling, m, n, k, out=bfloat16):
    a = np.zeros((m, k), np.uint8)
    kb = -(-k // 128)
    sa = {"tensor": np.ones(1, np.float32), "row": np.ones(m, np.float32),
          "block": np.zeros((kb, -(-m // 4) * 4), np.float32)}[scaling]
    sb = {"tensor": np.ones(1, np.float32), "row": np.ones(n, np.float32),
          "block": np.zeros((-(-n // 128), -(-kb // 4) * 4), np.float32)}[scaling]
    c = np.zeros((m, n), np.float32 if out == float32 else np.uint16)
    return (m, n, k, a, np.zeros((n, k), np.uint8), sa, sb, c)


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
@pytest.mark.parametrize("atype,btype", [(float8_e4m3, float8_e4m3), (float8_e5m2, float8_e4m3),
                                         (float8_e4m3, float8_e5m2), (float8_e5m2, float8_e5m2)])
def test_the_ptx_names_each_fp8_kind(atype, btype):
    ptx = MatmulFp8Ring(atype=atype, btype=btype).ptx(*_args("tensor", 256, 256, 256), arch="sm_90a")
    kind = f"wgmma.mma_async.sync.aligned.m64n128k32.f32.{atype.name[-4:]}.{btype.name[-4:]}"
    assert kind in ptx, f"no {kind} in the PTX"


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
@pytest.mark.parametrize("kw", [dict(scaling="tensor"), dict(scaling="tensor", out=float32), dict(scaling="row"),
                                dict(scaling="tensor", block_n=192), dict(scaling="row", block_n=192),
                                dict(scaling="tensor", stages=3), dict(scaling="row", stages=3)] +
                         [dict(scaling="block", block_m=bm, block_n=bn, products=p)
                          for bm, bn, p in BLOCK_TILES + [(192, 128, 1)]])
def test_warp_specialized_matmul_compiles_without_spills_or_serialized_wgmma(kw):
    """ptxas's report for sm_90a: nothing spilled, the wgmma not serialized (a block-scaled k
    step zeroes its accumulator before its wgmma, which ptxas serializes unless the zeroed
    registers are pinned before the wgmma.fence)."""
    kernel = MatmulFp8(**kw)
    compiled = kernel.compiled(*_args(kw["scaling"], 4096, 4096, 4096, kw.get("out", bfloat16)), arch="sm_90a")
    assert compiled.spill_store_bytes == 0 and compiled.spill_load_bytes == 0, \
        f"{kw}: {compiled.spill_store_bytes} bytes spilled"
    assert not compiled.wgmma_serialized, f"{kw}: ptxas serialized the wgmma: {compiled.wgmma_serialized}"
    from tilus.artifacts import _cuobjdump
    if _cuobjdump() is None:
        return  # the SASS needs cuobjdump; the rest was checked
    sass = kernel.sass(*_args(kw["scaling"], 4096, 4096, 4096, kw.get("out", bfloat16)), arch="sm_90a")
    ops = set(re.findall(r"\b(QGMMA|HGMMA|UTMALDG|UTMASTG)\b", sass))
    assert ops == {"QGMMA", "UTMALDG", "UTMASTG"}, f"{kw}: {sorted(ops)}"


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
@pytest.mark.parametrize("kw,shapes", [(dict(scaling="tensor", block_n=192), {"64x192x32"}),
                                       (dict(scaling="row", stages=3), {"64x256x32"}),
                                       (dict(scaling="tensor"), {"64x128x32"}),
                                       (dict(scaling="tensor", block_n=192, out=float32), {"64x128x32", "64x64x32"})])
def test_a_whole_tile_store_buffer_makes_one_wgmma_of_the_tile_width(kw, shapes):
    """Without block scales, a kernel whose c buffer holds the whole tile multiplies each k32 step
    in one wgmma of the tile's width (a's rows read from shared memory once); with a 128-column
    piece's buffer, one wgmma a piece."""
    from tilus.artifacts import _cuobjdump
    if _cuobjdump() is None:
        pytest.skip("no cuobjdump: the SASS cannot be read")
    sass = MatmulFp8(**kw).sass(*_args(kw["scaling"], 4096, 4096, 4096, kw.get("out", bfloat16)), arch="sm_90a")
    assert set(re.findall(r"QGMMA\.(\d+x\d+x\d+)\.", sass)) == shapes


def test_block_scaled_steps_overwrite_one_accumulator_without_zeroing_it():
    """The k step's products of the two 128-column pieces go in turn into one [64, 128]
    accumulator per warp group, each overwriting it (wgmma.mma with enable_input_d=False: scale-d
    0 on its first k32 instruction), so nothing zeroes it in the k loop, and the emitter pins it
    before each wgmma.fence (a value materialized between the fence and the mma makes ptxas
    serialize every wgmma). No NVRTC needed: the CUDA source."""
    src = MatmulFp8("block").source(*_args("block", 4096, 4096, 4096), arch="sm_90a")
    assert src.count("float part[64];") == 1
    loop = src[src.index("for (int32_t step = 0;"):]
    loop = loop[:loop.index("tilus::tma_wait_group")]
    assert "part[tilus_s] = 0.0f" not in loop
    assert re.findall(r'"r"\(([01])\)\);', loop) == ["0", "1", "1", "1"] * 2
    for fence in re.finditer(r"tilus::wgmma_fence\(\);", loop):
        assert loop[:fence.start()].rstrip().endswith("tilus::wgmma_fence_operand<64>(part);")


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
def test_block_scaled_pieces_take_turns_in_the_sass():
    """ptxas keeps each warp group's two pieces in turn: the first piece's 64 promotion FFMAs lie
    between the wait for its wgmma and the second piece's warpgroup arrive (a second fresh
    accumulator would let ptxas start the second piece's wgmma under the promotion, 256
    registers a thread, and spill), and each piece's first QGMMA reads no accumulator (RZ)."""
    from tilus.artifacts import _cuobjdump
    if _cuobjdump() is None:
        pytest.skip("no cuobjdump: the SASS cannot be read")
    sass = MatmulFp8("block").sass(*_args("block", 4096, 4096, 4096), arch="sm_90a")
    ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9._]*)([^;]*);", sass)
    names = [o for o, _ in ops]
    first = names.index("QGMMA.64x128x32.F32.E4M3.E4M3")
    wait = names.index("WARPGROUP.DEPBAR.LE", first)
    arrive = names.index("WARPGROUP.ARRIVE", wait)
    between = names[wait:arrive]
    assert between.count("FFMA") >= 64 and not any(n.startswith("QGMMA") for n in between), between
    qgmma = [args for o, args in ops if o.startswith("QGMMA")]
    reads = [args.split(",")[2].strip() for args in qgmma[:8]]  # the accumulator input
    assert reads == ["RZ", "R24", "R24", "R24"] * 2 or (reads[0] == reads[4] == "RZ" and "RZ" not in reads[1:4]), qgmma[:8]


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
@pytest.mark.parametrize("block_m", [128, 64])
def test_two_block_scaled_products_promote_under_the_next_wgmma_in_the_sass(block_m):
    """With two products in turn, each k step's wgmma is issued before the wait for the step
    before it (a WARPGROUP.DEPBAR that leaves one group in flight), and that step's 64 promotion
    FFMAs follow the wait with no wait for every group (DEPBAR 0x0) before the next issue: the
    warp group's tensor work stays queued while it promotes. The k loop holds two such steps."""
    from tilus.artifacts import _cuobjdump
    if _cuobjdump() is None:
        pytest.skip("no cuobjdump: the SASS cannot be read")
    sass = MatmulFp8("block", block_m=block_m, block_n=128, products=2).sass(
        *_args("block", 4096, 4096, 4096), arch="sm_90a")
    ops = re.findall(r"/\*([0-9a-f]{4})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9._]*)([^;]*);", sass)
    waits = [i for i, (_, o, a) in enumerate(ops) if o == "WARPGROUP.DEPBAR.LE" and a.strip().endswith("0x1")]
    assert len(waits) >= 3, "fewer waits that leave a group in flight than the loop's two and the tail's one"
    # The k loop: from the target of the first backward branch after the second such wait.
    addr = lambda i: int(ops[i][0], 16)  # noqa: E731
    loop_end = next(i for i in range(waits[1], len(ops)) if ops[i][1] == "BRA" and
                    int(ops[i][2].split()[-1], 16) < addr(waits[0]))
    loop_start = next(i for i in range(len(ops)) if addr(i) >= int(ops[loop_end][2].split()[-1], 16))
    inside = [w for w in waits if loop_start <= w < loop_end]
    assert len(inside) == 2, f"{len(inside)} waits leaving a group in flight in the k loop"
    for w in inside:
        issued = next(o for _, o, _ in reversed(ops[:w]) if o.startswith(("QGMMA", "WARPGROUP")))
        assert issued.startswith("QGMMA"), f"the wait at {ops[w][0]} does not follow a wgmma issue"
        arrive = next(i for i in range(w + 1, len(ops)) if ops[i][1] in ("WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR.LE"))
        between = [o for _, o, _ in ops[w:arrive]]
        assert between.count("FFMA") >= 64, f"{between.count('FFMA')} FFMAs after the wait at {ops[w][0]}"
    assert not any(o == "WARPGROUP.DEPBAR.LE" and a.strip().endswith("0x0") for _, o, a in ops[loop_start:loop_end])


def bad_mma(at, bt, dt, k=64, a_registers=False):
    class Bad(tilus.Script):
        def __call__(self, c: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            a = (self.register_tensor(dtype=at, shape=[64, k], init=0.0) if a_registers else
                 self.shared_tensor(dtype=at, shape=[64, k]))
            b = self.shared_tensor(dtype=bt, shape=[64, k])
            d = self.register_tensor(dtype=dt, shape=[64, 64], init=0.0)
            self.wgmma.mma(a, b.transpose(), d)

    return Bad()


@pytest.mark.parametrize("at,bt,dt,k,regs,match", [
    (float16, float8_e4m3, float32, 64, False, r"a and b must have one dtype \(only the fp8 types e4m3 and e5m2 mix\)"),
    (float8_e4m3, bfloat16, float32, 64, False, r"a and b must have one dtype"),
    (float8_e4m3, float8_e5m2, bfloat16, 64, False, r"d must be float32 or float16"),
    (float8_e5m2, float8_e4m3, float32, 48, False, r"k \(a is .*\) must be a multiple of 32"),
    (float8_e4m3, float8_e4m3, float32, 64, True, r"a in registers must be float16 or bfloat16"),
])
def test_illegal_fp8_wgmma_is_an_error_at_its_line(at, bt, dt, k, regs, match):
    with pytest.raises(tilus.CompileError, match=r"test_fp8.py:\d+: error: wgmma.mma: .*" + match):
        bad_mma(at, bt, dt, k, regs).ir(np.zeros(4, np.float32), arch="sm_90a")


def test_mixed_fp8_wgmma_is_accepted():
    ir = bad_mma(float8_e5m2, float8_e4m3, float16).ir(np.zeros(4, np.float32), arch="sm_90a")
    assert "wgmma m64n64k32" in ir["select_instructions"]


# --- the quantization kernels ------------------------------------------------------------------

# hidden of 1, 5 and 56 groups (one 128-column block, a block of 128 columns per group, 1024-column
# blocks), ragged m; bfloat16 and float16 input.
@pytest.mark.parametrize("m,hidden,dtype", [(5, 128, bfloat16), (33, 640, bfloat16), (3, 7168, bfloat16),
                                            (7, 384, float16)])
def test_per_token_cast_is_bit_exact(device, m, hidden, dtype):
    per_token_cast.run(m, hidden, np.random.default_rng(m), device, dtype)


@pytest.mark.parametrize("m,hidden,clamp", [(5, 1024, None), (33, 640, 7.0), (3, 7168, None)])
def test_swiglu_per_token_cast(device, m, hidden, clamp):
    swiglu_per_token_cast.run(m, hidden, np.random.default_rng(m), device, clamp)


# Explicit tiles: each thread holding 16 or 32 adjacent elements of a token (vec; a group over 8 or
# 4 threads), blocks numbered along the columns first: the codes stay bit-exact (the SwiGLU within
# its tolerance), ragged m and a hidden of 5 groups included.
@pytest.mark.parametrize("tile", [(1, 8, 2, 16, True), (2, 8, 2, 16, False), (4, 8, 4, 16, True), (1, 8, 1, 32, False),
                                  (2, 4, 2, 8, True)])
def test_cast_tiles(device, tile):
    bm, g, w, vec, cols_first = tile
    kw = dict(block_m=bm, groups=g, warps=w, vec=vec, cols_first=cols_first)
    for m, hidden in [(33, 640), (9, 7168)]:
        rng = np.random.default_rng(m)
        per_token_cast.run(m, hidden, rng, device, kernel=per_token_cast.PerTokenCast(**kw))
        swiglu_per_token_cast.run(m, hidden, rng, device, 7.0,
                                  kernel=swiglu_per_token_cast.SwiGLUPerTokenCast(**kw, clamp=7.0))


# The SwiGLU's division (the reciprocal and one correction) gives the IEEE division's codes and
# scales exactly on the GPU (where b q - gate is one exact FFMA), within the tolerance on the CPU;
# hard values (infinities, NaNs, zeros of either sign, gates far below -88) included with the clamp.
def test_swiglu_division_is_ieee(device):
    for m, hidden, clamp in [(33, 640, 7.0), (9, 7168, None), (9, 7168, 7.0)]:
        kw = dict(per_token_cast.cast_config(m, hidden, swiglu=True), clamp=clamp)
        got = swiglu_per_token_cast.run(m, hidden, np.random.default_rng(m), device, clamp,
                                        kernel=swiglu_per_token_cast.SwiGLUPerTokenCast(**kw))
        if device == "cuda":
            want = swiglu_per_token_cast.run(m, hidden, np.random.default_rng(m), device, clamp,
                                             kernel=swiglu_per_token_cast.SwiGLUPerTokenCast(**kw, div="ieee"))
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])


# The rule's configurations: 16 adjacent elements a thread on the columns-first grid where hidden
# is a multiple of 1024 (the SwiGLU's small grids excepted), the compiler's layout otherwise.
def test_cast_config_rule():
    big = per_token_cast.cast_config(4096, 7168)
    assert big == dict(block_m=1, groups=8, warps=2, vec=16, cols_first=True)
    assert per_token_cast.cast_config(128, 7168) == big
    assert per_token_cast.cast_config(4096, 7168, swiglu=True) == big
    assert per_token_cast.cast_config(128, 7168, swiglu=True)["vec"] is None
    assert per_token_cast.cast_config(33, 640)["vec"] is None and per_token_cast.cast_config(33, 640)["groups"] == 1


# The autotuned casts (each of CAST_CONFIGS is timed, the fastest kept): whichever tile wins, the
# codes are bit-exact; a hidden that is not a multiple of every tile's width (640: 5 groups), and
# on the GPU DeepSeek-V3's 7168.
def test_tuned_per_token_casts(device):
    for m, hidden in [(33, 640)] + ([(9, 7168)] if device == "cuda" else []):
        per_token_cast.run(m, hidden, np.random.default_rng(m), device, tune=True)
        swiglu_per_token_cast.run(m, hidden, np.random.default_rng(m), device, 7.0, tune=True)


def test_e4m3_reference_encoder_agrees_with_the_format():
    """The examples' numpy encoder: every code's value maps back to its code (NaN to 0x7f), ties go
    to the even code, values past 448 (and infinities) saturate."""
    values = per_token_cast.e4m3_values()
    codes = np.arange(256)
    finite = np.isfinite(values)
    np.testing.assert_array_equal(per_token_cast.e4m3_encode(values[finite]), codes[finite])
    assert per_token_cast.e4m3_encode(np.array([np.nan, -np.nan]))[0] == 0x7f
    assert list(per_token_cast.e4m3_encode(np.array([464.0, 1e9, -np.inf, 1.0625, 1.1875]))) == \
        [0x7e, 0x7e, 0xfe, 0x38, 0x3a]  # 464 is the tie above 448: saturates; 1 + 1/16 ties to 1.0
