"""Stores of mma / wgmma accumulators from registers (select_instructions' lane exchange): a lane
holds pairs of float16 columns (4 bytes), so a warp-wide store fills half of every 32-byte sector
it touches; the quad of lanes that shares a row first transposes 4 x 4 blocks of pairs, and each
lane stores 8 contiguous columns (16 bytes). The IR record, the PTX and SASS for sm_90a (NVIDIA
Tilus's matmul v5 shape), and the results on ragged sizes against numpy (CPU backend and GPU)."""
import re

import numpy as np
import pytest

import tilus
from tilus import float16, float32, int32
from conftest import HAS_GPU


class DotStore(tilus.Script):
    """c = a @ b by `dot` in bm x bn tiles; the float32 accumulator is cast to float16 and stored
    from registers."""

    def __init__(self, bm=64, bn=64, bk=32):
        super().__init__()
        self.bm, self.bn, self.bk = bm, bn, bk

    def __call__(self, m: int32, n: int32, k: int32, a: ~float16, b: ~float16, c: ~float16):
        bm, bn, bk = self.bm, self.bn, self.bk
        self.attrs.blocks = [tilus.cdiv(m, bm), tilus.cdiv(n, bn)]
        self.attrs.warps = 4
        ga = self.global_view(a, shape=[m, k])
        gb = self.global_view(b, shape=[k, n])
        gc = self.global_view(c, shape=[m, n])
        row, col = self.blockIdx.x * bm, self.blockIdx.y * bn
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        for ko in range(tilus.cdiv(k, bk)):
            ta = self.load_global(ga, offsets=[row, ko * bk], shape=[bm, bk])
            tb = self.load_global(gb, offsets=[ko * bk, col], shape=[bk, bn])
            acc = self.dot(ta, tb, acc)
        self.store_global(gc, acc.to(float16), offsets=[row, col])


def arrays(m, n, k):
    return np.zeros((m, k), np.float16), np.zeros((k, n), np.float16), np.zeros((m, n), np.float16)


def store_record(ir):
    stage = ir["select_instructions"].splitlines()
    at = next(i for i, line in enumerate(stage) if "store_global(" in line)
    return stage[at + 1].strip()


def test_the_store_records_its_lane_exchange():
    # n a multiple of 16 (the launch specializes on it): 16-byte vectors cannot cross its end.
    rec = store_record(DotStore().ir(300, 208, 70, *arrays(300, 208, 70), arch="sm_90a"))
    assert re.search(r"simt vector=8 exchange=lanes4/stride1/unit2x\d+ .*mapping=", rec), rec
    # n = 200: nothing is known of its end, each element is checked alone: no exchange.
    rec = store_record(DotStore().ir(300, 200, 70, *arrays(300, 200, 70), arch="sm_90a"))
    assert "exchange" not in rec and "vector=1" in rec, rec
    # The CPU backend stores tiles, not lanes.
    assert "exchange" not in store_record(DotStore().ir(300, 208, 70, *arrays(300, 208, 70), arch="cpu"))


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
def test_the_ptx_shuffles_then_stores_sixteen_bytes():
    ptx = DotStore().ptx(300, 208, 70, *arrays(300, 208, 70), arch="sm_90a")
    assert "shfl.sync.bfly.b32" in ptx
    stores = re.findall(r"st\.global(?:\.[a-z0-9]+)*", ptx)
    assert stores and all(".v4" in s for s in stores), stores  # 8 columns of float16 per store


@pytest.mark.parametrize("m,n,k", [(300, 208, 70), (77, 200, 33), (64, 64, 32), (130, 48, 16)])
def test_stored_products_on_ragged_sizes(device, m, n, k):
    from conftest import Arrays
    arr = Arrays(device)
    rng = np.random.default_rng(m * n + k)
    ha = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    hb = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    c = arr.put(np.full((m, n), 7, np.float16))
    DotStore()(m, n, k, arr.put(ha), arr.put(hb), c)
    want = ha.astype(np.float64) @ hb.astype(np.float64)
    np.testing.assert_allclose(arr.host(c).astype(np.float64), want, atol=2e-2, rtol=1e-2)


# NVIDIA Tilus's matmul v5 shape (two consumer warp groups, each storing its [64, 128] wgmma
# accumulator from registers), at its tuned 128 x 128 x 64 tiles in 4 stages.
def v5_like():
    from test_wgmma import PeeledTwoGroupMatmul
    return PeeledTwoGroupMatmul(bm=128, bn=128, bk=64, stages=4)


def _have_cuobjdump():
    from tilus.artifacts import _cuobjdump
    return _cuobjdump() is not None


@pytest.mark.skipif(not tilus._C.nvrtc_available() or not _have_cuobjdump(), reason="NVRTC or cuobjdump missing")
def test_the_v5_epilogue_stores_whole_sectors_in_sass():
    x = np.zeros((16, 16), np.float16)
    args = (8192, 8192, 8192, x, x, x)
    compiled = v5_like().compiled(*args, arch="sm_90a")
    if compiled.spill_store_bytes >= 0:  # ptxas's report kept
        assert compiled.spill_store_bytes == 0 and compiled.wgmma_serialized == "", compiled.wgmma_serialized
    sass = v5_like().sass(*args, arch="sm_90a")
    stg = re.findall(r"\bSTG\.E(?:\.[A-Z0-9]+)*", sass)
    # Each of the 256 consumer threads stores 64 float16 values: 8 STG.E.128, not 32 STG.E.
    assert sorted(set(stg)) == ["STG.E.128"] and len(stg) == 16, stg
    assert len(re.findall(r"\bSHFL\.BFLY", sass)) == 64  # 4 per block of 4 pairs, 8 blocks per group
    assert "LDL" not in sass and "STL" not in sass


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: warp-specialized kernels run only there")
@pytest.mark.parametrize("m,n,k", [(300, 392, 640), (1000, 390, 200), (128, 128, 64)])
def test_the_v5_shape_on_ragged_sizes_on_the_gpu(m, n, k):
    # n = 392: a multiple of 8, its ragged last tile still stores 16-byte vectors; n = 390 does not.
    from conftest import Arrays
    from test_wgmma import run_matmul
    run_matmul(Arrays("cuda"), v5_like(), m, n, k)
