"""Every Python example on each backend present, against numpy; and each example's traced IR
(golden text, TILUS_UPDATE_GOLDEN=1 rewrites it) and its CUDA compile with NVRTC for sm_90a
(no GPU needed)."""
import os

import numpy as np
import pytest

import tilus
from conftest import HAS_GPU, Arrays

from conv2d import Conv2d, reference as conv2d_reference
from conv2d_auto import Conv2dAuto
from conv2d_wgmma import Conv2dWgmma, Conv2dWgmmaPersistent
from flash_attention import FlashAttention
from flash_decoding import FlashDecoding
from hopper_matmul_v0 import HopperMatmulV0
from hopper_matmul_v1 import HopperMatmulV1
from hopper_matmul_v2 import HopperMatmulV2
from hopper_matmul_v3 import HopperMatmulV3
from hopper_matmul_v4 import HopperMatmulV4
from hopper_matmul_v5 import HopperMatmulV5
from hopper_matmul_v6 import HopperMatmulV6
from layer_norm import LayerNorm
from matmul_v0 import MatmulV0
from matmul_v1 import MatmulV1
from matmul_v2 import MatmulV2
from matmul_v3 import MatmulV3
from matmul_auto import MatmulAuto
from matmul_tma import MatmulTma
from matmul_fp8 import MatmulFp8, MatmulFp8Ring
from per_token_cast import PerTokenCast
from swiglu_per_token_cast import SwiGLUPerTokenCast
from softmax import Softmax
from tma_copy import TmaCopy
from vector_add import VectorAdd

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")
EXAMPLES = {"vector_add": VectorAdd, "matmul_v0": MatmulV0, "matmul_v1": MatmulV1, "matmul_v2": MatmulV2,
            "matmul_v3": MatmulV3, "softmax": Softmax, "layer_norm": LayerNorm, "matmul_tma": MatmulTma,
            "tma_copy": TmaCopy, "conv2d": Conv2d, "hopper_matmul_v0": HopperMatmulV0,
            "hopper_matmul_v1": HopperMatmulV1, "hopper_matmul_v2": HopperMatmulV2, "hopper_matmul_v3": HopperMatmulV3,
            "hopper_matmul_v4": HopperMatmulV4, "hopper_matmul_v5": HopperMatmulV5,
            "hopper_matmul_v6": HopperMatmulV6, "matmul_fp8": MatmulFp8,
            "matmul_fp8_block": lambda: MatmulFp8("block"), "matmul_fp8_ring_block": lambda: MatmulFp8Ring("block"),
            "per_token_cast": PerTokenCast, "swiglu_per_token_cast": lambda: SwiGLUPerTokenCast(clamp=7.0),
            "flash_attention": FlashAttention, "flash_decoding": FlashDecoding,
            "matmul_auto": MatmulAuto, "conv2d_auto": Conv2dAuto}


def test_vector_add(arrays):
    n = 100003
    a, b = arrays.rand((n,)), arrays.rand((n,))
    c = arrays.empty((n,))
    VectorAdd()(n, a, b, c)
    np.testing.assert_array_equal(arrays.host(c), arrays.host(a) + arrays.host(b))


@pytest.mark.parametrize("cls", [MatmulV0, MatmulV1, MatmulV2, MatmulV3])
def test_matmuls(arrays, cls):
    m, n, k = 301, 517, 203
    a = arrays.put(arrays.rng.uniform(-1, 1, (m, k)).astype(np.float16))
    b = arrays.put(arrays.rng.uniform(-1, 1, (k, n)).astype(np.float16))
    c = arrays.empty((m, n), "float16")
    cls()(m, n, k, a, b, c)
    want = arrays.host(a).astype(np.float64) @ arrays.host(b).astype(np.float64)
    np.testing.assert_allclose(arrays.host(c).astype(np.float64), want, rtol=1e-2, atol=1e-2)


def test_matmul_tma(arrays):
    m, n, k = 296, 520, 200  # ragged tiles; rows of multiples of 16 bytes, as TMA needs
    a = arrays.put(arrays.rng.uniform(-1, 1, (m, k)).astype(np.float16))
    b = arrays.put(arrays.rng.uniform(-1, 1, (k, n)).astype(np.float16))
    c = arrays.empty((m, n), "float16")
    MatmulTma()(m, n, k, a, b, c)
    want = arrays.host(a).astype(np.float64) @ arrays.host(b).astype(np.float64)
    np.testing.assert_allclose(arrays.host(c).astype(np.float64), want, rtol=1e-2, atol=1e-2)


def test_tma_copy(arrays):
    m, n = 300, 1000
    x = arrays.rand((m, n))
    y = arrays.empty((m, n))
    TmaCopy()(m, n, x, y)
    np.testing.assert_array_equal(arrays.host(y), arrays.host(x))


# The last two assume C is a multiple of block_k: on sm_90 c2d_im2col is a TMA im2col load.
@pytest.mark.parametrize("n,h,w,c,f,ks,s,d,p,cm", [(2, 13, 11, 24, 40, 3, 1, 1, 1, None), (1, 17, 19, 8, 16, 5, 2, 2, 3, None),
                                                    (3, 7, 9, 3, 5, 1, 1, 1, 0, None), (2, 13, 11, 64, 40, 3, 2, 1, 1, 32),
                                                    (1, 9, 10, 32, 24, 3, 1, 2, 2, 32)])
def test_conv2d(arrays, n, h, w, c, f, ks, s, d, p, cm):
    img = arrays.put(arrays.rng.uniform(-1, 1, (n, h, w, c)).astype(np.float16))
    weight = arrays.put(arrays.rng.uniform(-1, 1, (f, ks, ks, c)).astype(np.float16))
    want = conv2d_reference(arrays.host(img), arrays.host(weight), s, d, p)
    out = arrays.put(np.full(want.shape, 7, np.float16))
    Conv2d(ks, s, d, p, c_multiple=cm)(n, h, w, c, f, img, weight, out)
    np.testing.assert_allclose(arrays.host(out).astype(np.float64), want, rtol=2e-2, atol=2e-2)


# Ragged pixel tiles and filter tiles; strides, dilations and pads; C of 1 and 2 k tiles per kernel position.
@pytest.mark.parametrize("n,h,w,c,f,ks,s,d,p", [(2, 13, 11, 64, 40, 3, 1, 1, 1), (1, 17, 19, 128, 72, 5, 2, 2, 3)])
def test_conv2d_wgmma(arrays, n, h, w, c, f, ks, s, d, p):
    img = arrays.put(arrays.rng.uniform(-1, 1, (n, h, w, c)).astype(np.float16))
    weight = arrays.put(arrays.rng.uniform(-1, 1, (f, ks, ks, c)).astype(np.float16))
    want = conv2d_reference(arrays.host(img), arrays.host(weight), s, d, p)
    out = arrays.put(np.full(want.shape, 7, np.float16))
    Conv2dWgmma(ks, s, d, p)(n, h, w, c, f, img, weight, out)
    np.testing.assert_allclose(arrays.host(out).astype(np.float64), want, rtol=2e-2, atol=3e-2)


# The persistent, warp-specialized version on the GPU (its thread groups wait on each other):
# several tiles per block (the ring's phases carry across tiles), ragged pixel and filter
# tiles, and a long k loop (50 steps).
@pytest.mark.skipif(not HAS_GPU, reason="no GPU: warp-specialized kernels run only there")
@pytest.mark.parametrize("n,h,w,c,f,ks,s,d,p", [(4, 30, 29, 64, 136, 3, 1, 1, 1), (2, 13, 11, 64, 40, 3, 1, 1, 1),
                                                (1, 17, 19, 128, 72, 5, 2, 2, 3)])
def test_conv2d_wgmma_persistent_on_the_gpu(n, h, w, c, f, ks, s, d, p):
    arrays = Arrays("cuda")
    img = arrays.put(arrays.rng.uniform(-1, 1, (n, h, w, c)).astype(np.float16))
    weight = arrays.put(arrays.rng.uniform(-1, 1, (f, ks, ks, c)).astype(np.float16))
    want = conv2d_reference(arrays.host(img), arrays.host(weight), s, d, p)
    out = arrays.put(np.full(want.shape, 7, np.float16))
    Conv2dWgmmaPersistent(ks, s, d, p, blocks=4)(n, h, w, c, f, img, weight, out)
    np.testing.assert_allclose(arrays.host(out).astype(np.float64), want, rtol=2e-2, atol=3e-2)


def test_split_phase_im2col_needs_tma():
    x, wt = np.zeros((2, 13, 11, 64), np.float16), np.zeros((40, 3, 3, 64), np.float16)
    o = np.zeros((2, 13, 11, 40), np.float16)
    ir = list(Conv2dWgmma().ir(2, 13, 11, 64, 40, x, wt, o, arch="sm_90a").values())[-1]
    assert ir.count("c2d_im2col(") == 4 and "lowering: tma.load tensor_map=0 completion=mbarrier-tx" in ir, ir
    # The weights' view is [f, depth] with depth a local (a let): its tensor map names the parameters.
    assert "tensor_map 1: weight + 0_int64 bytes, float16[f, c * 9] strides [c * 9, 1]" in ir, ir
    with pytest.raises(tilus.CompileError, match=r"conv2d_wgmma.py:\d+: error: c2d_im2col with a barrier is a TMA "
                                                 r"im2col load, and this one cannot be: not legal on this target "
                                                 r"\(sm_80 has no TMA\)"):
        Conv2dWgmma().ir(2, 13, 11, 64, 40, x, wt, o, arch="sm_80")


def test_conv2d_uses_tma_im2col_when_c_is_a_multiple_of_block_k():
    x, wt = np.zeros((2, 13, 11, 64), np.float16), np.zeros((40, 3, 3, 64), np.float16)
    args = (2, 13, 11, 64, 40, x, wt, np.zeros((2, 13, 11, 40), np.float16))
    ir = list(Conv2d(c_multiple=32).ir(*args, arch="sm_90a").values())[-1]
    assert "im2col pixel_box [-1, -1] stride 1" in ir and "tma.load tensor_map=0" in ir, ir
    ir = list(Conv2d().ir(*args, arch="sm_90a").values())[-1]
    assert "tma.load" not in ir and "tma im2col: not legal: C (c)" in ir, ir


def test_softmax(arrays):
    m, n = 37, 1000
    x = arrays.rand((m, n), lo=-4, hi=4)
    y = arrays.empty((m, n))
    Softmax()(m, n, x, y)
    h = arrays.host(x).astype(np.float64)
    e = np.exp(h - h.max(1, keepdims=True))
    np.testing.assert_allclose(arrays.host(y), e / e.sum(1, keepdims=True), rtol=1e-4, atol=1e-6)


def test_layer_norm(arrays):
    m, n = 45, 771
    x, w, b = arrays.rand((m, n), lo=-3, hi=3), arrays.rand((n,)), arrays.rand((n,))
    y = arrays.empty((m, n))
    LayerNorm()(m, n, x, w, b, y)
    h = arrays.host(x).astype(np.float64)
    mu = h.mean(1, keepdims=True)
    var = ((h - mu) ** 2).mean(1, keepdims=True)
    want = (h - mu) / np.sqrt(var + 1e-5) * arrays.host(w) + arrays.host(b)
    np.testing.assert_allclose(arrays.host(y), want, rtol=1e-4, atol=1e-4)


def _strip_paths(text):
    # locations are not printed by default; nothing machine-specific remains
    return text


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_traced_ir_is_golden(name):
    text = _strip_paths(str(tilus.trace(EXAMPLES[name]())))
    path = os.path.join(GOLDEN, f"{name}.tir")
    if os.environ.get("TILUS_UPDATE_GOLDEN") == "1":
        os.makedirs(GOLDEN, exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    with open(path) as f:
        assert text == f.read(), f"{path} differs (TILUS_UPDATE_GOLDEN=1 rewrites it)"


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_compiles_with_nvrtc_for_sm90a(name):
    src = tilus._C.compile_cuda_source(tilus.trace(EXAMPLES[name]()), "sm_90a")
    assert '#include "tilus/device.h"' in src and "__global__" in src
