"""Attention (issue 40): examples/python/flash_attention.py (prefill) and flash_decoding.py
(paged decode, split-KV) against float64 references on ragged shapes — sequence lengths that are
not multiples of the blocks, seqlen_q != seqlen_k, head dims 64/128/256, causal and not,
GQA/MQA, packed varlen batches, rows that see no key — on the CPU backend (the variants without
warp specialization: the same math) and on the GPU (the warp-specialized kernels); and the
sm_90a compile of the warp-specialized kernels: wgmma from registers and with the MN-major V,
TMA, no local memory, no serialized wgmma, the softmax kept between the waits."""
import inspect
import itertools
import re

import numpy as np
import pytest

import tilus
from tilus import bfloat16, float16
from conftest import HAS_CPU, HAS_GPU

from flash_attention import (SHORT_SEQLEN, FlashAttention, config_name, flash_attention, flash_attention_varlen,
                             prefill_candidates, prefill_config, random_packed as packed, reference)
import flash_decoding
from flash_decoding import FlashDecoding, decode_candidates, decode_config, flash_decode, random_cache, reference as decode_reference


def check(o, lse, want_o, want_lse, atol=2e-2):
    o, lse = np.asarray(o, np.float64), np.asarray(lse, np.float64)
    np.testing.assert_allclose(o, want_o, atol=atol, rtol=1e-2)
    finite = np.isfinite(want_lse)
    assert (np.isfinite(lse) == finite).all(), "lse is -inf exactly where a row sees no key"
    np.testing.assert_allclose(np.where(finite, lse, 0), np.where(finite, want_lse, 0), atol=2e-3, rtol=1e-3)


def to_host(*xs):
    return [x.float().cpu().numpy() if hasattr(x, "cpu") else x for x in xs]


# (lengths of q, lengths of k, heads, kv_heads, d, causal): one block and a ragged tail; a packed
# batch of unequal lengths with seqlen_q != seqlen_k (bottom-right causal: rows that see no key);
# MQA; keys shorter than queries; an empty key sequence; a query tile past two key blocks.
PREFILL = [
    ((70,), (70,), 1, 1, 64, False),
    ((100, 37), (100, 200), 4, 2, 64, True),
    ((130,), (130,), 2, 2, 128, False),
    ((129, 3), (129, 300), 2, 1, 128, True),
    ((65, 1), (300, 64), 2, 1, 256, True),
    ((200,), (50,), 2, 2, 64, True),
    ((3, 40), (0, 40), 1, 1, 64, False),
]


@pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
@pytest.mark.parametrize("lens_q,lens_k,heads,kv_heads,d,causal", PREFILL)
def test_prefill_on_the_cpu_backend(lens_q, lens_k, heads, kv_heads, d, causal):
    """The variant without warp specialization: the kernel's math, checked on the CPU."""
    cq, ck, q, k, v = packed(lens_q, lens_k, heads, kv_heads, d)
    o, lse = flash_attention_varlen(q, k, v, cq, ck, max(lens_q), causal)
    check(o, lse, *reference(q, k, v, cq, ck, causal))


@pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
@pytest.mark.parametrize("d,causal,cfg", [(64, True, {}), (64, True, dict(persistent=3)), (128, False, dict(persistent=2)),
                                          (64, True, dict(consumers=3, block_n=96)), (64, False, dict(consumers=3, block_n=64)),
                                          (128, True, dict(pingpong=False)), (128, True, dict(stages=3)),
                                          (64, True, dict(block_n=192)), (128, True, dict(named_turns=True)),
                                          (64, False, dict(persistent=3, consumers=3, block_n=64, named_turns=True)),
                                          (128, False, dict(pv_n=128, persistent=2, rescale_between=True, block_n=176)),
                                          (128, True, dict(pv_n=128, pingpong=False, rescale_between=True)),
                                          (256, False, dict(pv_n=128, block_n=80)),
                                          (128, False, dict(pv_n=128, rescale_between=True, persistent=2, quad_sums=True)),
                                          (64, True, dict(quad_sums=True, consumers=3, block_n=96))],
                         ids=lambda x: config_name(x) if isinstance(x, dict) else str(x))
def test_specialized_prefill_on_the_cpu_backend(d, causal, cfg):
    """The warp-specialized kernel itself (producer warp group, mbarrier ring, ping-pong turns) on
    the CPU backend, with the configurations bench --candidates offers: persistent blocks taking
    many tiles of unequal lengths (some of a sequence's last rows, some with no key), three
    consumer warp groups, no ping-pong, three stages, 192-key blocks, the turns at named barriers
    (the fibers wait at them as the warp groups would; a turn handed to the wrong group would hang,
    reported as a CpuCheckError), also over many tiles in a ring of three warp groups; P V as one
    wgmma over 128 of V's columns (pv_n, o in [64, 128] accumulators) in the d 128 rules and at d 256;
    ping-pong or not, o rescaled between the GEMMs or not, persistent or not."""
    lens_q, lens_k = (300, 77, 1, 130), (300, 200, 64, 0)
    cq, ck, q, k, v = packed(lens_q, lens_k, 4, 2, d)
    o, lse = flash_attention_varlen(q, k, v, cq, ck, max(lens_q), causal, specialized=True, **cfg)
    check(o, lse, *reference(q, k, v, cq, ck, causal))


@pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
@pytest.mark.parametrize("d,pv_n", [(128, 128), (256, 256)])
def test_wide_pv_prefill_on_the_cpu_backend(d, pv_n):
    """The variant without warp specialization with P V as one wgmma over pv_n of V's columns."""
    lens_q, lens_k = (129, 3), (129, 300)
    cq, ck, q, k, v = packed(lens_q, lens_k, 2, 1, d)
    o, lse = flash_attention_varlen(q, k, v, cq, ck, max(lens_q), True, pv_n=pv_n)
    check(o, lse, *reference(q, k, v, cq, ck, True))


@pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
@pytest.mark.parametrize("d", [64, 256])
def test_quad_sums_prefill_on_the_cpu_backend(d):
    """quad_sums (the row sums as per-thread partial sums, added up in finish) in the variant
    without warp specialization, causal with rows that see no key."""
    lens_q, lens_k = (100, 37), (100, 200)
    cq, ck, q, k, v = packed(lens_q, lens_k, 4, 2, d)
    o, lse = flash_attention_varlen(q, k, v, cq, ck, max(lens_q), True, quad_sums=True)
    check(o, lse, *reference(q, k, v, cq, ck, True))


@pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
def test_causal_tiles_in_l2_sections_on_the_cpu_backend():
    """The causal grid's order (longest_first): with an L2 budget of two heads' K/V, 3 sequences x
    3 heads make sections of 2, 2, 2, 2 and 1 (head, sequence) pairs; every tile is computed once."""
    lens_q, lens_k = (100, 37, 70), (120, 37, 90)
    cq, ck, q, k, v = packed(lens_q, lens_k, 3, 1, 64)
    per_head = (sum(lens_k) // 3) * 4 * 64
    out, lse = np.full_like(q, np.nan), np.full((3, cq[-1]), np.nan, np.float32)  # a tile left out stays NaN
    o, lse = flash_attention_varlen(q, k, v, cq, ck, max(lens_q), True, out=out, lse=lse, l2_bytes=2 * per_head + 5)
    check(o, lse, *reference(q, k, v, cq, ck, True))


@pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
def test_persistent_causal_rounds_in_l2_sections_on_the_cpu_backend():
    """The persistent kernel's causal order (each_tile): 4 blocks over 3 sequences x 3 heads in L2
    sections of 2 (head, sequence) pairs, 3 query tiles a sequence at most, each section dealt in
    rounds of one tile per block, every other round in reverse; every tile is computed once (a
    tile left out stays NaN; one taken twice would run its key blocks twice through the ring)."""
    lens_q, lens_k = (300, 37, 200), (320, 37, 150)
    cq, ck, q, k, v = packed(lens_q, lens_k, 3, 1, 64)
    per_head = (sum(lens_k) // 3) * 4 * 64
    out, lse = np.full_like(q, np.nan), np.full((3, cq[-1]), np.nan, np.float32)
    o, lse = flash_attention_varlen(q, k, v, cq, ck, max(lens_q), True, out=out, lse=lse, specialized=True,
                                    persistent=4, l2_bytes=2 * per_head + 5)
    check(o, lse, *reference(q, k, v, cq, ck, True))


def to_bf16(x):
    """float32 values rounded to bfloat16 (nearest even), as the uint16 bits numpy holds them."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
def test_bf16_prefill_on_the_cpu_backend():
    """bf16 operands (uint16 bits in numpy): P is rounded to bf16 for P V, so a looser tolerance."""
    cq, ck, q, k, v = packed((50, 77), (90, 77), 2, 1, 64)
    qb, kb, vb = (to_bf16(x.astype(np.float32)) for x in (q, k, v))
    o, lse = flash_attention_varlen(qb, kb, vb, cq, ck, 77, True)
    check(from_bf16(o), lse, *reference(*(from_bf16(x) for x in (qb, kb, vb)), cq, ck, True), atol=4e-2)


def test_decode_call_keeps_its_launch_per_shape(monkeypatch):
    """A decode step calls flash_decode once per token: the second call at a shape reuses the first
    one's kernel, scalars and split workspace (the rule is not worked out again), with o and lse of
    its own; another configuration or shape gets a launch of its own."""
    q, kc, vc, table, sl = random_cache(2, 1, 8, 2, 128, 64, (300, 77))
    cfg = dict(block_n=64, stages=2, blocks_per_sm=1, num_splits=3)
    kern, args, o, lse = flash_decoding.decode_call(q, kc, vc, table, sl, config=cfg)
    rule_kern, rule_args, _, _ = flash_decoding.decode_call(q, kc, vc, table, sl)

    def no_rule(*a, **kw):
        raise AssertionError("decode_config called again at a shape already planned")

    monkeypatch.setattr(flash_decoding, "decode_config", no_rule)
    q2 = q + np.float16(1)
    kern2, args2, o2, lse2 = flash_decoding.decode_call(q2, kc, vc, table, sl, config=cfg)
    assert kern2 is kern and args2[5] is q2 and o2 is not o and lse2 is not lse
    assert all(a is b for a, b in zip(args[-3:], args2[-3:])), "the split workspace and counters are reused"
    assert flash_decoding.decode_call(q, kc, vc, table, sl)[0] is rule_kern
    assert rule_kern is not kern  # the rule's configuration differs from cfg (its own kernel)
    other = flash_decoding.decode_call(q[:1], kc, vc, table[:1], sl[:1], config=cfg)
    assert other[1][0] == 1 and other[1][-3] is not args[-3], "another batch: its own workspace"


def test_decode_rule_takes_two_blocks_per_sm_for_long_splits():
    """decode_config fills the SMs' slots once; where a split then streams at least LONG_SPLIT keys
    at two blocks per SM it takes two (64-key blocks, d <= 128), with short splits one."""
    sms = 132
    for batch, n, d in ((1, 16384, 128), (8, 16384, 128), (8, 65536, 128), (1, 65536, 128), (8, 65536, 256),
                        (4, 32768, 64)):
        cfg = decode_config(batch, 8, n, d, sms)
        per_sm, splits = cfg["blocks_per_sm"], cfg["num_splits"]
        assert splits * batch * 8 <= sms * per_sm, (batch, n, d, cfg)  # one wave
        two_fit = d <= 128
        long = two_fit and n >= flash_decoding.LONG_SPLIT * max(1, 2 * sms // (batch * 8))
        assert per_sm == (2 if long else 1) and (cfg["block_n"] == 64 or not long), (batch, n, d, cfg)
        if long:
            assert n / splits >= flash_decoding.LONG_SPLIT
        assert cfg in decode_candidates(batch, 8, n, d, sms)
    assert decode_config(8, 8, 16384, 128, sms)["blocks_per_sm"] == 2  # the shapes the H200 measured
    assert decode_config(1, 8, 16384, 128, sms)["blocks_per_sm"] == 1


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: the warp-specialized kernels run only there")
@pytest.mark.parametrize("specialized", [True, False], ids=["specialized", "simple"])
@pytest.mark.parametrize("lens_q,lens_k,heads,kv_heads,d,causal", PREFILL + [
    ((1000, 513, 64), (1000, 700, 64), 8, 2, 128, True),
    ((1000, 513), (1000, 513), 4, 4, 64, False),
    ((333,), (1027,), 2, 2, 256, False),
])
def test_prefill_on_the_gpu(lens_q, lens_k, heads, kv_heads, d, causal, specialized):
    import torch
    cq, ck, q, k, v = packed(lens_q, lens_k, heads, kv_heads, d)
    args = [torch.from_numpy(x).cuda() for x in (q, k, v, cq, ck)]
    o, lse = flash_attention_varlen(*args, max(lens_q), causal, specialized=specialized)
    check(*to_host(o, lse), *reference(q, k, v, cq, ck, causal))


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: the warp-specialized kernels run only there")
@pytest.mark.parametrize("causal", [True, False])
def test_prefill_candidates_on_the_gpu(causal):
    """Every configuration bench/attention.py --candidates times (compiled in parallel first), d 64,
    128 and 256, on a ragged GQA varlen batch (causal: the query tiles of 3 warp groups cross the
    diagonal over two key blocks); the persistent ones on 3 blocks (each takes many tiles)."""
    import torch
    from common import compile_all
    from flash_attention import prefill_call
    lens_q, lens_k = (300, 77, 1), (300, 200, 64)
    data = {d: packed(lens_q, lens_k, 4, 2, d) for d in (64, 128, 256)}
    gpu = {d: [torch.from_numpy(x).cuda() for x in (q, k, v, cq, ck)] for d, (cq, ck, q, k, v) in data.items()}
    work = [(d, cfg) for d in (64, 128, 256) for cfg in prefill_candidates(d, causal, 3)]  # persistent: 3 blocks
    compile_all(work, lambda item: prefill_call(*gpu[item[0]], max(lens_q), causal, **item[1])[:2])
    want = {d: reference(q, k, v, cq, ck, causal) for d, (cq, ck, q, k, v) in data.items()}
    for d, cfg in work:
        o, lse = flash_attention_varlen(*gpu[d], max(lens_q), causal, **cfg)
        try:
            check(*to_host(o, lse), *want[d])
        except AssertionError as e:
            raise AssertionError(f"d {d} {config_name(cfg)}: {e}") from None


def check_ragged_on_the_gpu(causal, dims, **cfg):
    """flash_attention_varlen(**cfg) against float64 at each head dim of `dims` on a ragged GQA
    varlen batch: a sequence's last query tile partial, keys ending inside a block, a sequence of
    one query row and one with no key (the kernels compiled in parallel first)."""
    import torch
    from common import compile_all
    from flash_attention import prefill_call
    lens_q, lens_k = (300, 77, 1, 130), (300, 200, 64, 0)
    data = {d: packed(lens_q, lens_k, 4, 2, d) for d in dims}
    gpu = {d: [torch.from_numpy(x).cuda() for x in (q, k, v, cq, ck)] for d, (cq, ck, q, k, v) in data.items()}
    compile_all(list(data), lambda d: prefill_call(*gpu[d], max(lens_q), causal, **cfg)[:2])
    for d, (cq, ck, q, k, v) in data.items():
        o, lse = flash_attention_varlen(*gpu[d], max(lens_q), causal, **cfg)
        try:
            check(*to_host(o, lse), *reference(q, k, v, cq, ck, causal))
        except AssertionError as e:
            raise AssertionError(f"d {d}: {e}") from None


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: the warp-specialized kernels run only there")
@pytest.mark.parametrize("blocks", [3, 132])
@pytest.mark.parametrize("causal", [True, False])
def test_persistent_prefill_on_the_gpu(causal, blocks):
    """persistent=N: N blocks loop over the tiles (3: each takes many, so the K/V ring's phases, the
    ping-pong turns and the query tile's barrier run on over tiles of unequal lengths, some of a
    sequence's last rows, some with no key), d 64 and 128 (where the rule and the candidates take
    it)."""
    check_ragged_on_the_gpu(causal, (64, 128), persistent=blocks)


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: the warp-specialized kernels run only there")
@pytest.mark.parametrize("causal", [True, False])
def test_rescale_between_on_the_gpu(causal):
    """rescale_between=True (o rescaled by the last block's factor in the next step, between its two
    GEMMs) on top of the rule, d 64, 128 and 256."""
    check_ragged_on_the_gpu(causal, (64, 128, 256), rescale_between=True)


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: the warp-specialized kernels run only there")
@pytest.mark.parametrize("causal", [True, False])
def test_named_turns_on_the_gpu(causal):
    """named_turns=True (the ping-pong turns at named barriers) on top of the rule, d 128 and 256,
    and in the persistent kernel over many tiles at d 64 and 128."""
    check_ragged_on_the_gpu(causal, (128, 256), named_turns=True)
    check_ragged_on_the_gpu(causal, (64, 128), named_turns=True, persistent=3)


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: the warp-specialized kernels run only there")
@pytest.mark.parametrize("causal", [False, True])
def test_quad_sums_on_the_gpu(causal):
    """quad_sums=True (per-thread partial row sums, added up in finish) on top of the rule at d 128
    (ragged f16), and bf16 against torch's SDPA."""
    import torch
    check_ragged_on_the_gpu(causal, (128,), quad_sums=True)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 1000, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o, _ = flash_attention(q, k, v, causal=causal, quad_sums=True)
    want = torch.nn.functional.scaled_dot_product_attention(*(x.transpose(1, 2).float() for x in (q, k, v)),
                                                            is_causal=causal)
    torch.testing.assert_close(o.float(), want.transpose(1, 2), atol=4e-2, rtol=1e-2)


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: the warp-specialized kernels run only there")
@pytest.mark.parametrize("causal", [True, False])
def test_wide_pv_on_the_gpu(causal):
    """pv_n=128 (P V as one m64n128 wgmma per k step over two of V's 64-column blocks) on top of the
    rule at d 128 and 256, and in the persistent kernel over many tiles at d 128."""
    check_ragged_on_the_gpu(causal, (128, 256), pv_n=128)
    check_ragged_on_the_gpu(causal, (128,), pv_n=128, persistent=3)


@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_dense_prefill_matches_torch_sdpa(dtype, causal, d):
    """The dense wrapper against torch's SDPA (GQA expanded), f16 and bf16, seqlen 1000."""
    import torch
    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    b, s, h, hk = 2, 1000, 4, 2
    q = torch.randn(b, s, h, d, device="cuda", dtype=dt)
    k = torch.randn(b, s, hk, d, device="cuda", dtype=dt)
    v = torch.randn(b, s, hk, d, device="cuda", dtype=dt)
    o, lse = flash_attention(q, k, v, causal=causal)
    ke, ve = (x.repeat_interleave(h // hk, dim=2) for x in (k, v))
    want = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2).float(), ke.transpose(1, 2).float(),
                                                            ve.transpose(1, 2).float(), is_causal=causal)
    torch.testing.assert_close(o.float(), want.transpose(1, 2), atol=2e-2 if dtype == "float16" else 4e-2, rtol=1e-2)
    scores = q.transpose(1, 2).float() @ ke.transpose(1, 2).float().transpose(-1, -2) / d ** 0.5
    if causal:
        scores = scores.masked_fill(torch.ones(s, s, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1), atol=2e-3, rtol=1e-3)


# (batch, q_len, heads, kv_heads, d, page_size, key lengths, splits): one split writing o itself;
# split keys with pages smaller than a block and speculative tokens (causal among themselves);
# pages larger than a block; an empty sequence; MHA with d 256; MHA with d 64 and one token (the
# merge's tile [1, 1, 64] smaller than its 128 threads). Every split case is merged in the kernel.
DECODE = [
    (2, 1, 8, 2, 128, 64, (300, 77), 1),
    (3, 2, 4, 1, 64, 16, (5, 200, 129), 2),
    (2, 1, 4, 2, 128, 256, (700, 0), 3),
    (1, 3, 4, 4, 256, 64, (1000,), 4),
    (2, 1, 2, 2, 64, 64, (900, 260), 3),
]


@pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
@pytest.mark.parametrize("batch,q_len,heads,kv_heads,d,page_size,lens,splits", DECODE)
def test_decode_on_the_cpu_backend(batch, q_len, heads, kv_heads, d, page_size, lens, splits):
    q, kc, vc, table, sl = random_cache(batch, q_len, heads, kv_heads, d, page_size, lens)
    o, lse = flash_decode(q, kc, vc, table, sl, num_splits=splits)
    check(o, lse, *decode_reference(q, kc, vc, table, sl))


def counters_at_zero():
    c = flash_decoding._COUNTERS.counters
    assert c is not None, "a split launch made its arrival counters"
    np.testing.assert_array_equal(c.cpu().numpy() if hasattr(c, "cpu") else c, 0)


@pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
def test_decode_merge_in_chunks_on_the_cpu_backend():
    """The fused merge over several chunks of splits (4 splits, 3 per load: a full chunk and a
    partial one), q_len 3 (the merge's rows rounded up to 4: the 4th is the next sequence's and
    is not written), GQA, a sequence whose later splits have no key; two launches with different
    queries both right, so the last split of each (sequence, kv head) put its counter back."""
    cfg = dict(block_n=64, stages=2, blocks_per_sm=1, num_splits=5, merge_splits=3)
    for seed in (1, 2):
        q, kc, vc, table, sl = random_cache(2, 3, 4, 2, 64, 16, (700, 100), seed=seed)
        o, lse = flash_decode(q, kc, vc, table, sl, config=cfg)
        check(o, lse, *decode_reference(q, kc, vc, table, sl))
        counters_at_zero()


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: the warp-specialized kernels run only there")
@pytest.mark.parametrize("specialized", [True, False], ids=["specialized", "simple"])
@pytest.mark.parametrize("batch,q_len,heads,kv_heads,d,page_size,lens,splits", DECODE + [
    (4, 1, 32, 8, 128, 16, (4096, 1, 3000, 2049), None),
    (2, 4, 16, 2, 64, 64, (5000, 777), None),
])
def test_decode_on_the_gpu(batch, q_len, heads, kv_heads, d, page_size, lens, splits, specialized):
    import torch
    q, kc, vc, table, sl = random_cache(batch, q_len, heads, kv_heads, d, page_size, lens)
    o, lse = flash_decode(*[torch.from_numpy(x).cuda() for x in (q, kc, vc, table, sl)], num_splits=splits,
                          specialized=specialized)
    check(*to_host(o, lse), *decode_reference(q, kc, vc, table, sl))


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: the warp-specialized kernels run only there")
def test_decode_candidates_on_the_gpu():
    """Every configuration the bench times (one and two blocks per SM, 64- and 128-key blocks) on
    ragged lengths, each launched twice (the counters back at zero in between)."""
    import torch
    lens = (4096, 1000, 17)
    q, kc, vc, table, sl = random_cache(3, 1, 32, 8, 128, 64, lens)
    args = [torch.from_numpy(x).cuda() for x in (q, kc, vc, table, sl)]
    want = decode_reference(q, kc, vc, table, sl)
    cands = decode_candidates(3, 8, max(lens), 128, torch.cuda.get_device_properties(0).multi_processor_count)
    assert {c["blocks_per_sm"] for c in cands} == {1, 2} and max(c["num_splits"] for c in cands) > 8
    for cfg in cands:
        for _ in range(2):
            o, lse = flash_decode(*args, config=cfg)
            check(*to_host(o, lse), *want)
        counters_at_zero()


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: the warp-specialized kernels run only there")
def test_tuned_decode_on_the_gpu():
    """tune=True times the candidates once per shape and keeps one of them; its result is right."""
    import torch
    q, kc, vc, table, sl = random_cache(2, 1, 32, 8, 128, 64, (3000, 2049), seed=5)
    args = [torch.from_numpy(x).cuda() for x in (q, kc, vc, table, sl)]
    flash_decoding._TUNED.clear()
    o, lse = flash_decode(*args, tune=True)
    check(*to_host(o, lse), *decode_reference(q, kc, vc, table, sl))
    (chosen,) = flash_decoding._TUNED.values()
    assert chosen in decode_candidates(2, 8, table.shape[1] * 64, 128, torch.cuda.get_device_properties(0).multi_processor_count)
    counters_at_zero()


@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
def test_bf16_decode_on_the_gpu():
    import torch
    q, kc, vc, table, sl = random_cache(3, 1, 8, 2, 128, 64, (1000, 64, 333))
    args = [torch.from_numpy(x).cuda() for x in (q, kc, vc, table, sl)]
    args[:3] = [x.to(torch.bfloat16) for x in args[:3]]
    o, lse = flash_decode(*args)
    ref = decode_reference(*to_host(*args[:3]), table, sl)
    check(*to_host(o, lse), *ref, atol=4e-2)


def test_bad_shapes_are_refused():
    with pytest.raises(AssertionError, match="head dims 64, 128, 256"):
        FlashAttention(float16, 96)
    cq, ck, q, k, v = packed((10,), (10,), 6, 4, 64)
    with pytest.raises(ValueError, match="6 query heads do not share 4 kv heads evenly"):
        flash_attention_varlen(q, k, v, cq, ck, 10)
    with pytest.raises(AssertionError, match="GQA: heads a multiple of kv_heads"):
        FlashDecoding(float16, 6, 4, 64)
    with pytest.raises(AssertionError, match="the query tokens times the group fill at most 64 rows"):
        FlashDecoding(float16, 32, 1, 128, q_len=3)


# --- the sm_90a compile of the warp-specialized kernels (NVRTC, no GPU) ---------------------------

def prefill_args(d, heads=8, kv_heads=2):
    q = np.zeros((1000, heads, d), np.float16)
    k = np.zeros((1000, kv_heads, d), np.float16)
    cu = np.array([0, 500, 1000], np.int32)
    return [2, heads, kv_heads, 500, 1000, 1000, 0.1, q, k, k, q, np.zeros((heads, 1000), np.float32), cu, cu]


def sass_or_none(kern, args):
    """cuobjdump's SASS of the kernel, or None where the toolkit has no cuobjdump."""
    from tilus.artifacts import _cuobjdump
    return kern.sass(*args, arch="sm_90a") if _cuobjdump() else None


@pytest.mark.parametrize("d,causal", [(128, True), (256, False)])
def test_prefill_source_issues_wgmma_from_registers_and_orders_its_waits(d, causal):
    """The CUDA the emitter writes (no compile): Q K^T with shared K-major operands, P V with P
    from registers and V MN-major, the waits for P V ordered after the softmax, and the launch
    bounds that let setmaxnreg take effect."""
    kern = FlashAttention(float16, d, causal=causal)
    bn, chunks, pv_n = kern.block_n, d // 64, kern.pv_n
    src = kern.source(*prefill_args(d), arch="sm_90a")
    qk = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{bn}k16\.f32\.f16\.f16 \{{[^}}]*\}}, %\d+, %\d+, p, 1, 1, 0, 0;",
                    src)
    pv = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{pv_n}k16\.f32\.f16\.f16 \{{[^}}]*\}}, "
                    r"\{%\d+, %\d+, %\d+, %\d+\}, %\d+, p, 1, 1, 1;", src)
    # Per consumer warp group (two): Q K^T in the first block and in the masked and unmasked
    # steps, over d's 64-column blocks in 4 k steps each; P V in both steps and after the loops,
    # one accumulator per pv_n columns (128 at d >= 128), block_n / 16 k steps.
    assert pv_n == 128
    assert len(qk) == 2 * 3 * chunks * 4, len(qk)
    assert len(pv) == 2 * 3 * (d // pv_n) * (bn // 16), len(pv)
    # The wait for P V in each step (two per warp group) comes after the softmax, fenced.
    assert src.count("tilus::wgmma_wait_group_ordered<0>();") == 2 * 2
    assert "__launch_bounds__(384, 1)" in src and "setmaxnreg_inc<240>" in src and "setmaxnreg_dec<24>" in src


@pytest.mark.parametrize("d,pv_n", [(128, 128), (256, 128), (256, 256)])
def test_prefill_source_issues_wide_pv(d, pv_n):
    """The CUDA the emitter writes (no compile) with pv_n: P V as d / pv_n wgmma of n = pv_n per k
    step, P from registers and V's 64-column blocks one MN-major operand (transposed b)."""
    kern = FlashAttention(float16, d, pv_n=pv_n)
    bn = kern.block_n
    src = kern.source(*prefill_args(d), arch="sm_90a")
    pv = {n: re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{n}k16\.f32\.f16\.f16 \{{[^}}]*\}}, "
                        r"\{%\d+, %\d+, %\d+, %\d+\}, %\d+, p, 1, 1, 1;", src) for n in (64, pv_n)}
    assert len(pv[pv_n]) == 2 * 3 * (d // pv_n) * (bn // 16), len(pv[pv_n])
    assert not pv[64]


@pytest.mark.parametrize("between", [False, True])
def test_prefill_rescale_between_the_two_gemms(between):
    """The CUDA the emitter writes (no compile): with rescale_between, o's rescale (one multiply per
    accumulator of o) follows a step's Q K^T wgmma and precedes its P V wgmma, where it runs
    while the tensor cores run Q K^T; without it every rescale follows a P V and none a Q K^T."""
    d = 128
    kern = FlashAttention(float16, d, rescale_between=between, block_n=176)  # Q K^T's n apart from P V's
    src = kern.source(*prefill_args(d), arch="sm_90a")
    lines, first = inspect.getsourcelines(FlashAttention.rescale)
    mul = first + next(i for i, t in enumerate(lines) if "o[c] * alpha" in t)
    qk, pv = f"m64n{kern.block_n}k16", f"m64n{kern.pv_n}k16"
    seq = [m.group() for m in re.finditer(rf"{qk}|{pv}|// mul \(flash_attention\.py:{mul}\)", src)]
    gemms = [i for i, t in enumerate(seq) if t in (qk, pv)]
    # (the wgmma before, the wgmma after) each rescale multiply
    around = [(next((seq[g] for g in reversed(gemms) if g < i), None), next((seq[g] for g in gemms if g > i), None))
              for i, t in enumerate(seq) if t not in (qk, pv)]
    assert len(around) >= 2 * (d // kern.pv_n), around  # each warp group's steps rescale every accumulator of o
    if between:
        assert (qk, pv) in around, around
    else:
        assert all(before == pv for before, _ in around), around


@pytest.mark.parametrize("consumers", [2, 3])
def test_prefill_named_turns_in_cuda(consumers):
    """The CUDA the emitter writes (no compile): with named_turns, consumer warp group w waits at
    named barrier 1 + w (bar.sync of 256 threads) before issuing its GEMMs of a step and hands the
    turn over at the next group's (bar.arrive) right after issuing them, before waiting for any;
    the last group hands the first turn to the first, and the first waits once more at the end
    (its barrier ends empty). With mbarrier turns none of this is there."""
    d, cfg = (64, dict(consumers=3, block_n=64)) if consumers == 3 else (128, {})
    src = FlashAttention(float16, d, named_turns=True, **cfg).source(*prefill_args(d), arch="sm_90a")
    toks = re.findall(r"named_barrier(?:_arrive)?\(\d+, \d+\)|wgmma_commit_group|wgmma_wait_group", src)
    turn = lambda w: f"named_barrier({1 + w}, 256)"  # noqa: E731
    for w in range(consumers):
        # waits and arrivals at group w's barrier: a turn in the first key block, the masked and the
        # unmasked steps; the first group's closing wait and the start's handing over
        assert toks.count(turn(w)) == 3 + (w == 0), (w, toks)
        assert toks.count(f"named_barrier_arrive({1 + w}, 256)") == 3 + (w == 0), (w, toks)
    waits = [i for i, t in enumerate(toks) if t.startswith("named_barrier(") and t.endswith(", 256)")]
    last_first = max(i for i in waits if toks[i] == turn(0))  # the first group's closing wait
    for i in waits:
        if i == last_first:
            continue
        j = next(k for k in range(i + 1, len(toks)) if toks[k].startswith("named_barrier"))
        between = toks[i + 1:j]
        assert toks[j].startswith("named_barrier_arrive"), (i, toks[i:j + 1])
        assert between and set(between) == {"wgmma_commit_group"}, (i, toks[i:j + 1])
    plain = FlashAttention(float16, d, **cfg).source(*prefill_args(d), arch="sm_90a")
    assert "named_barrier_arrive" not in plain and turn(0) not in plain


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
@pytest.mark.parametrize("d,causal", [(256, False), (128, True)])
def test_prefill_compiles_without_local_memory_or_serialized_wgmma(d, causal):
    """d = 256, the largest accumulator: within 240 registers only where setmaxnreg takes effect
    (with launch bounds of one block per SM; without them ptxas ignored it and spilled 2.8 KB);
    d = 128 causal, the goal's shape, with the masked steps."""
    kern = FlashAttention(float16, d, causal=causal)
    args = prefill_args(d)
    compiled = kern.compiled(*args, arch="sm_90a")
    assert compiled.wgmma_serialized == ""
    if compiled.spill_store_bytes >= 0:  # -1: a cubin from the disk cache
        assert compiled.spill_store_bytes == 0 and compiled.spill_load_bytes == 0 and compiled.stack_frame_bytes == 0
    sass = sass_or_none(kern, args)
    if sass is not None:
        assert f"HGMMA.64x{kern.pv_n}x16.F32" in sass and ".tnspB" in sass and "UTMALDG.2D" in sass
        assert "USETMAXREG" in sass and "LDL" not in sass and "STL" not in sass
        assert "UTMASTG.2D" in sass and "STSM" in sass  # o through shared memory and TMA stores
        # exp2 is one MUFU.EX2 (ex2.approx.ftz), no range fix-up (FSETP ... -126 and predicated FMULs)
        assert "-126" not in sass
        # the softmax's exp2 between the wait for S and the wait for P V
        between = sass.split("WARPGROUP.DEPBAR.LE gsb0, 0x1")[1].split("WARPGROUP.DEPBAR.LE gsb0, 0x0")[0]
        assert between.count("MUFU.EX2") >= 32, between.count("MUFU.EX2")


def fits_without_spills(kern, args):
    """Compiles kern for sm_90a and checks it fits the registers: no serialized wgmma, no local
    memory (ptxas's counts, and no LDL / STL in the SASS); returns the SASS (None without cuobjdump)."""
    compiled = kern.compiled(*args, arch="sm_90a")
    assert compiled.wgmma_serialized == ""
    if compiled.spill_store_bytes >= 0:  # -1: a cubin from the disk cache
        assert compiled.spill_store_bytes == 0 and compiled.spill_load_bytes == 0 and compiled.stack_frame_bytes == 0
    sass = sass_or_none(kern, args)
    assert sass is None or ("LDL" not in sass and "STL" not in sass)
    return sass


def launched_configs(sms=132):
    """(d, causal, parameters) of every prefill kernel the GPU launches at the bench's shapes: the
    rule's and each candidate on top of it (the L2 sections change no resource)."""
    out = []
    for seqlen in (4096, 16384):
        out += [(d, causal, {**prefill_config(d, causal, sms, seqlen, dt), **c}) for d in (64, 128, 256)
                for causal in (True, False) for dt in ("float16", "bfloat16")
                for c in [{}] + prefill_candidates(d, causal, sms, seqlen, dt) if "l2_bytes" not in c]
    return [x for i, x in enumerate(out) if x not in out[:i]]


@pytest.mark.parametrize("sms", [0, 132])
@pytest.mark.parametrize("seqlen", [0, 4096, 16384])
def test_prefill_candidates_each_change_the_rule(sms, seqlen):
    """Each candidate the bench times is another kernel than the rule's and than the other
    candidates' (a launch takes it on top of prefill_config), with and without the SM count, for
    short and long sequences."""
    for d, causal, dt in itertools.product((64, 128, 256), (False, True), (float16, bfloat16)):
        rule = prefill_config(d, causal, sms, seqlen, dt)
        kernels = [FlashAttention(dt, d, causal, **{**rule, **c}).__dict__
                   for c in [{}] + prefill_candidates(d, causal, sms, seqlen, dt)]
        assert all(k != kernels[0] for k in kernels[1:]), (d, causal, dt)
        assert len({repr(sorted(k.items())) for k in kernels}) == len(kernels), (d, causal, dt)


def test_prefill_rule_at_d128_without_causal():
    """d 128 without causal: 176-key blocks, below SHORT_SEQLEN queries the persistent kernel (given
    the SMs) with the row sums as quad partial sums (quad_sums), f16 and bf16 alike (measured faster
    in two H200 calls); from SHORT_SEQLEN on without persistent blocks and without quad_sums."""
    for dt in (float16, bfloat16, "float16", "bfloat16"):
        assert prefill_config(128, False, 132, 4096, dt) == dict(persistent=132, block_n=176, rescale_between=True,
                                                                 quad_sums=True)
        assert prefill_config(128, False, 0, 4096, dt) == dict(block_n=176, rescale_between=True, quad_sums=True)
    for sms, seqlen, dt in [(132, SHORT_SEQLEN, float16), (132, SHORT_SEQLEN, bfloat16), (132, 0, float16)]:
        assert prefill_config(128, False, sms, seqlen, dt) == dict(block_n=176, rescale_between=True)


def test_prefill_rule_at_d128_with_causal():
    """d 128 with causal: the persistent kernel without ping-pong at every length (at 16384 queries
    too: ahead of the kernel without persistent blocks in both H200 mid calls of 2026-11-29)."""
    for seqlen in (0, 4096, 16384, 65536):
        for dt in (float16, bfloat16):
            assert prefill_config(128, True, 132, seqlen, dt) == dict(persistent=132, rescale_between=True, pingpong=False)
    assert prefill_config(128, True, 0, 16384) == dict(rescale_between=True, pingpong=False)


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
@pytest.mark.parametrize("d,causal,cfg", launched_configs(),
                         ids=lambda x: config_name(x) if isinstance(x, dict) else str(x))
def test_prefill_candidates_compile_without_spills(d, causal, cfg):
    """Every prefill configuration the GPU launches (the rule's and what bench/attention.py
    --candidates times on top of it) fits the registers and shared memory: no local memory, no
    serialized wgmma, the TMA-store epilogue."""
    sass = fits_without_spills(FlashAttention(float16, d, causal=causal, **cfg), prefill_args(d))
    assert sass is None or "UTMASTG.2D" in sass


def decode_args(batch=4, d=128, splits=2):
    q = np.zeros((batch, 1, 32, d), np.uint16)
    kc = np.zeros((64, 16, 8, d), np.uint16)
    table = np.zeros((batch, 16), np.int32)
    return [batch, 16, 64, 4, 0.1, q, kc, kc, table, np.full(batch, 256, np.int32), q, np.zeros((batch, 32), np.float32),
            np.zeros((splits, batch, 32, d), np.float32), np.zeros((splits, batch, 32), np.float32),
            np.zeros(batch * 8, np.int32)]


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
def test_decode_compiles_to_paged_tma_loads_and_wgmma():
    kern = FlashDecoding(bfloat16, 32, 8, 128, page_size=16)
    args = decode_args()
    src = kern.source(*args, arch="sm_90a")
    assert re.search(r"m64n64k16\.f32\.bf16\.bf16 \{[^}]*\}, \{%\d+, %\d+, %\d+, %\d+\}, %\d+, p, 1, 1, 1;", src)
    assert "__launch_bounds__(160)" in src  # a consumer warp group and a producer warp
    compiled = kern.compiled(*args, arch="sm_90a")
    assert compiled.wgmma_serialized == ""
    if compiled.spill_store_bytes >= 0:
        assert compiled.spill_store_bytes == 0 and compiled.stack_frame_bytes == 0
    sass = sass_or_none(kern, args)
    if sass is not None:
        assert "HGMMA.64x128x16.F32.BF16" in sass and "HGMMA.64x64x16.F32.BF16" in sass and ".tnspB" in sass
        assert "UTMALDG.3D" in sass and "UTMALDG.2D" in sass  # q's [tokens, group, 64] boxes, the pages
        assert "LDL" not in sass and "STL" not in sass
        # the merge's arrival: release (a GPU-scope fence), the atomic add, acquire (L1 invalidated)
        fence, add = sass.find("MEMBAR.ALL.GPU"), sass.find("ATOMG.E.ADD.S32.STRONG.GPU")
        assert 0 <= fence < add < sass.find("CCTL.IVALL", add), "no release / atomic add / acquire for the arrival"


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
@pytest.mark.parametrize("cfg", [dict(block_n=bn, stages=st, blocks_per_sm=per_sm) for bn, st, per_sm in
                                 sorted({(c["block_n"], c["stages"], c["blocks_per_sm"])
                                         for c in decode_candidates(1, 8, 16384)})],
                         ids=lambda c: f"{c['block_n']}x{c['stages']}_{c['blocks_per_sm']}_per_sm")
def test_decode_candidates_fit_their_blocks_per_sm(cfg):
    """Each candidate the bench times compiles without spills, and its blocks_per_sm blocks fit an
    SM's registers (65536) and shared memory (decode_stages' budget: 228 KB less 1 KB a block)."""
    kern = FlashDecoding(float16, 32, 8, 128, 64, 1, cfg["block_n"], cfg["stages"], True, True, cfg["blocks_per_sm"])
    args = decode_args()
    args[5] = args[5].astype(np.float16)
    args[6] = args[7] = args[6].astype(np.float16)
    args[10] = args[10].astype(np.float16)
    compiled = kern.compiled(*args, arch="sm_90a")
    if compiled.spill_store_bytes >= 0:
        assert compiled.spill_store_bytes == 0 and compiled.stack_frame_bytes == 0
    assert -(-compiled.registers // 8) * 8 * 160 * cfg["blocks_per_sm"] <= 65536, compiled.registers
    smem = int(re.search(r"shared_memory (\d+)", kern.ir(*args, arch="sm_90a")["plan_shared_memory"]).group(1))
    assert (smem + 1024) * cfg["blocks_per_sm"] <= flash_decoding.SMEM_PER_SM, smem


# --- bench/attention.py's README tables (no torch, no GPU) ---------------------------------------

def bench_module():
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "attention.py")
    spec = importlib.util.spec_from_file_location("attention_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_tables_hold_every_shape_of_the_full_sweep():
    """README.md's attention block is what the bench writes (so the bench can fill it): a row per
    shape of the full sweep, in its order, whatever has been measured so far."""
    import os
    bench = bench_module()
    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")).read()
    block = readme.split(bench.BEGIN)[1].split(bench.END)[0].strip("\n")
    assert bench.readme_tables(old=block) == block
    pre, dec = bench.SWEEPS["full"]
    rows = [line for line in block.splitlines() if line.startswith("| ") and not line.startswith(("| dtype", "| batch"))]
    assert len(rows) == len(pre) + sum(1 for c in pre if c[0] == 128) + len(dec)


def test_bench_head_dims_keep_the_sweeps_shapes_of_those_dims():
    bench = bench_module()
    goal = bench.SWEEPS["goal"][0]
    assert bench.prefill_shapes("goal") == goal
    only = bench.prefill_shapes("goal", "128")
    assert only == [c for c in goal if c[0] == 128] and {s for _, s, _ in only} == {4096, 8192, 16384}
    assert bench.prefill_shapes("goal", "64,256") == [c for c in goal if c[0] != 128]
    with pytest.raises(SystemExit, match="--head-dims takes head dims separated by commas .* not 'd128'"):
        bench.prefill_shapes("goal", "d128")
    assert bench.prefill_shapes("goal", "128", "none") == [c for c in only if not c[2]]
    assert bench.prefill_shapes("goal", None, "causal") == [c for c in goal if c[2]]


def test_bench_reads_extra_candidates():
    bench = bench_module()
    assert bench.parse_config("persistent=sms block_n=128 pingpong=False", 132) == dict(persistent=132, block_n=128,
                                                                                        pingpong=False)
    with pytest.raises(SystemExit, match="key=value"):
        bench.parse_config("persistent", 132)
    with pytest.raises(SystemExit, match="an int, True, False or sms, not 'x'"):
        bench.parse_config("block_n=x", 132)


def test_bench_candidates_table_names_each_candidate_with_its_ratio():
    """The table the bench prints last with --candidates: a line per shape, the rule first, every
    candidate's short name, TFLOP/s and ratio to cuDNN, the fastest starred."""
    bench = bench_module()
    assert bench.short_config("persistent=0") == "np"
    assert bench.short_config("block_n=144 persistent=132") == "bn144+P"
    assert bench.short_config("pingpong=True rescale_between=False") == "pp1+rb0"
    rounds = {"rule": [590.0, 600.0, 602.0], "block_n=144": [612.0, 612.0, 612.0], "cuDNN": [600.0, 606.0, 610.0]}
    table = bench.candidates_table([("bfloat16", 128, 8192, False, [("rule", 600.0), ("block_n=144", 612.0)], 606.0,
                                     rounds)])
    # cuDNN's rounds' min-max; each candidate's spread over its rounds: (max - min) / median
    assert table.splitlines()[-1] == "bf16    8192  False | 606 (600-610) | rule 600 0.990 2.0% | bn144 612 1.010* 0.0%"


def test_bench_seqlens_keep_those_query_lengths():
    bench = bench_module()
    assert bench.prefill_shapes("goal", "128", "none", "4096") == [(128, 4096, False)]
    assert bench.prefill_shapes("goal", "128", None, "4096,16384") == [
        c for c in bench.prefill_shapes("goal", "128") if c[1] != 8192]
    with pytest.raises(SystemExit, match="--seqlens takes lengths"):
        bench.prefill_shapes("goal", "128", None, "4k")


def test_bench_fills_measured_rows_and_keeps_the_others(tmp_path):
    bench = bench_module()
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{bench.BEGIN}\nold\n{bench.END}\n\nafter\n")
    tf = {"tilus": 612.4, "cuDNN": 598.0, "flash": 340.2}
    bench.fill_readme(str(readme), [("float16", 128, 4096, True, tf, 612.4 / 598.0)], [], "GPU A, run 1")
    bench.fill_readme(str(readme), [], [(8, 16384, {"tilus": 0.3, "SDPA": 0.9, "read": 0.25}, 1.2)], "GPU A, run 2")
    text = readme.read_text()
    assert text.startswith("# x\n\n") and text.endswith(f"{bench.END}\n\nafter\n") and "\nold\n" not in text
    assert "Last filled: GPU A, run 2." in text
    assert "| float16 | 128 | 4096 | yes | 612 | 598 | 340 | - | 1.02x |" in text  # kept from run 1
    assert "| float16 | 128 | 4096 | no | - | - | - | - | - |" in text
    assert "| 8 | 16384 | 537 | 300.0 | 900.0 | 250.0 | 1.20x |" in text
    assert "| 1 | 16384 | 67 | - | - | - | - |" in text
    readme.write_text("no markers\n")
    with pytest.raises(SystemExit, match="has no single <!-- attention-bench --> ... <!-- /attention-bench --> block"):
        bench.fill_readme(str(readme), [], [], "x")
