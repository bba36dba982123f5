"""NVIDIA Tilus's flash-attention examples annotate their dots with resolve_dot_config's layouts,
the warps split along the rows, and call one attention step from two loops (its files cannot be
copied: CausalAttention below is a Script of our own with that shape). Layout inference finds the
split the annotations need; the splits Tilus itself refuses (no split of the warps fits the tile,
or its fragments take too many registers) are refused with a clear error."""
import math

import numpy as np
import pytest

import tilus
from tilus import boolean, float16, float32, int32
from conftest import HAS_CPU, HAS_GPU, Arrays


class CausalAttention(tilus.Script):
    """Causal attention, o = softmax(q k^T / sqrt(d)) v per (batch, head), block_q query rows per
    block, K/V heads shared by heads / kv_heads query heads. The score and p @ v are mma.sync dots
    whose layouts the Script annotates from resolve_dot_config with the warps split along the rows
    (p stays in registers, the score's fragments being the a operand's), and one step is written
    once and called from two loops: the key blocks below the diagonal, then the masked ones."""

    def __init__(self, heads, kv_heads, d, warps, block_q, block_kv):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, d
        self.warps, self.block_q, self.block_kv = warps, block_q, block_kv
        self.qk = self.cuda.resolve_dot_config(float16, float32, m=block_q, n=block_kv, k=d, warp_m=warps, warp_n=1)
        self.pv = self.cuda.resolve_dot_config(float16, float32, m=block_q, n=d, k=block_kv, warp_m=warps, warp_n=1)

    def step(self, gk, gv, q, o, m, l, b, h, q0, kv0, masked):
        bq, bkv = self.block_q, self.block_kv
        k = self.load_global(gk, offsets=[b, kv0, h, 0], shape=[bkv, self.d], dims=[1, 3])
        v = self.load_global(gv, offsets=[b, kv0, h, 0], shape=[bkv, self.d], dims=[1, 3])
        s = self.dot(q, k.transpose(), acc_dtype=float32)
        self.annotate_layout(s, self.qk.lc)
        s = s * (1.0 / math.sqrt(self.d))
        if masked:
            keep = self.register_tensor(dtype=boolean, shape=[bq, bkv], init=lambda i, j: i + q0 >= j + kv0)
            s = self.where(keep, s, -1.0e30)
        new_m = self.maximum(m, self.max(s, dim=1, keepdim=True))
        p = self.exp(s - new_m)
        alpha = self.exp(m - new_m)
        self.assign(l, l * alpha + self.sum(p, dim=1, keepdim=True))
        self.assign(m, new_m)
        pv = self.dot(p.to(float16), v, acc_dtype=float32)
        self.annotate_layout(pv, self.pv.lc)
        self.assign(o, o * alpha + pv)

    def __call__(self, batch: int32, seq: int32, q_ptr: ~float16, k_ptr: ~float16, v_ptr: ~float16,
                 o_ptr: ~float16):
        bq, bkv, d = self.block_q, self.block_kv, self.d
        self.attrs.warps = self.warps
        self.attrs.blocks = [tilus.cdiv(seq, bq), self.heads, batch]
        q0 = self.blockIdx.x * bq
        h, b = self.blockIdx.y, self.blockIdx.z
        kvh = h // (self.heads // self.kv_heads)
        gq = self.global_view(q_ptr, shape=[batch, seq, self.heads, d])
        gk = self.global_view(k_ptr, shape=[batch, seq, self.kv_heads, d])
        gv = self.global_view(v_ptr, shape=[batch, seq, self.kv_heads, d])
        go = self.global_view(o_ptr, shape=[batch, seq, self.heads, d])
        q = self.load_global(gq, offsets=[b, q0, h, 0], shape=[bq, d], dims=[1, 3])
        o = self.register_tensor(dtype=float32, shape=[bq, d], init=0.0)
        m = self.register_tensor(dtype=float32, shape=[bq, 1], init=-1.0e30)
        l = self.register_tensor(dtype=float32, shape=[bq, 1], init=0.0)
        diagonal = q0 // bkv * bkv
        for kv0 in range(0, diagonal, bkv):
            self.step(gk, gv, q, o, m, l, b, kvh, q0, kv0, masked=False)
        for kv0 in range(diagonal, q0 + bq, bkv):
            self.step(gk, gv, q, o, m, l, b, kvh, q0, kv0, masked=True)
        self.store_global(go, (o / l).to(float16), offsets=[b, q0, h, 0], dims=[1, 3])


def attention_reference(q, k, v):
    """float64 causal attention of [batch, seq, heads, d] arrays (K/V heads shared)."""
    seq, heads, kv_heads, d = q.shape[1], q.shape[2], k.shape[2], q.shape[3]
    kk = np.repeat(k.astype(np.float64), heads // kv_heads, axis=2)
    vv = np.repeat(v.astype(np.float64), heads // kv_heads, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q.astype(np.float64), kk) / math.sqrt(d)
    s = np.where(np.tril(np.ones((seq, seq), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhqk,bkhd->bqhd", p / p.sum(-1, keepdims=True), vv)


# The CPU backend runs one config (its compile dominates the suite's time), the GPU both.
@pytest.mark.parametrize("device,warps,block_q,block_kv", [("cpu", 4, 64, 32), ("cuda", 4, 64, 32), ("cuda", 8, 128, 64)])
def test_annotated_attention_steps(device, warps, block_q, block_kv):
    """Four dots (two lines, each called from two loops) of 4 and 5 splits each: more
    combinations than layout inference lists one by one, so these configs (which NVIDIA Tilus
    accepts) were refused until the dots of one line were tried together. Ragged sequence
    length (77), two batches, K/V heads shared by two query heads; on the CPU backend and the
    GPU."""
    if device == "cpu" and not HAS_CPU:
        pytest.skip("no CPU backend (tilus built without LLVM)")
    if device == "cuda" and not HAS_GPU:
        pytest.skip("no GPU")
    arrays = Arrays(device)
    rng = np.random.default_rng(0)
    batch, seq, heads, kv_heads, d = 2, 77, 4, 2, 32
    q = rng.uniform(-1, 1, (batch, seq, heads, d)).astype(np.float16)
    k = rng.uniform(-1, 1, (batch, seq, kv_heads, d)).astype(np.float16)
    v = rng.uniform(-1, 1, (batch, seq, kv_heads, d)).astype(np.float16)
    o = arrays.put(np.zeros_like(q))
    CausalAttention(heads, kv_heads, d, warps, block_q, block_kv)(batch, seq, arrays.put(q), arrays.put(k),
                                                                     arrays.put(v), o)
    np.testing.assert_allclose(arrays.host(o).astype(np.float64), attention_reference(q, k, v), atol=2e-3, rtol=0)


def test_a_split_no_warps_fit_is_refused_at_the_config():
    """32 rows are two m16 tiles: 4 warps cannot split them 4 x 1 (NVIDIA Tilus refuses it too);
    the error names the tile and lists each split that fits once."""
    with pytest.raises(ValueError) as e:
        CausalAttention(4, 2, 32, 4, 32, 32)
    msg = str(e.value)
    assert "no split of 4 warps into warp_m=4 x warp_n=1 fits m=32, n=32, k=32" in msg, msg
    splits = msg[msg.index("(the splits that fit: ") + 22:msg.rindex(")")].split(", ")
    assert sorted(splits) == ["1x4", "2x2"], msg


def test_a_split_whose_fragments_need_too_many_registers_is_refused():
    """NVIDIA Tilus refuses a split whose fragments it estimates at 224 registers per thread or
    more (it would spill, and compile for minutes), and its examples' autotune spaces count on it:
    128 x 64 x 128 on a 4 x 1 split holds a 2 x 8 grid of A fragments, 8 x 8 of B and 2 x 8 of C
    (256 + 512 + 256 bytes: 256 registers)."""
    with pytest.raises(ValueError) as e:
        CausalAttention(4, 2, 128, 4, 128, 64)
    msg = str(e.value)
    assert "the 4x1 split of m=128, n=64, k=128 on 4 warps holds about 256 registers" in msg, msg
    assert "224 or more" in msg, msg
    CausalAttention(4, 2, 128, 4, 64, 64)  # 64 rows: 128 + 512 + 128 bytes, 192 registers
