"""Decode attention on Hopper (sm_90a): a few new query tokens per sequence against a long paged
KV cache, split along the keys across blocks and combined by a second kernel (flash-decoding).

Shapes, as vLLM and FlashInfer lay out a paged cache ("NHD"): q [batch, q_len, heads, d] (q_len
new tokens: 1 for plain decoding, a few for speculative decoding, causal among themselves and
after the cache, bottom-right aligned); k_cache and v_cache [num_pages, page_size, kv_heads, d];
block_table int32 [batch, max_pages] (sequence b's keys t live in page block_table[b, t //
page_size] at row t % page_size); seqlens_k int32 [batch] (keys per sequence, the new tokens'
included). o like q, lse float32 [batch, q_len, heads] (natural log).

`FlashDecoding` is `FlashAttention`'s body (flash_attention.py: TMA ring, S = Q K^T and O += P V
as wgmma with P from registers, the online softmax in exp2, the masked blocks first) with what
decoding changes:
  - one block per (split of the keys, kv head, sequence); its 64 query rows are the q_len tokens
    times the heads of its kv head's group (GQA packed into M: row r = token r // group, head
    r % group; group * q_len <= 64), loaded as one TMA box [64 / group, group, 64] per 64 columns;
  - the producer looks each key block's pages up in the block table (one TMA box per page, or
    the part of a page a block covers) and runs `stages` blocks ahead of one consumer warp group;
  - each split writes its rows normalized, with their lse, to a float32 workspace, and
    `DecodeCombine` merges the splits: o = sum_s exp(lse_s - lse) o_s, lse = log sum_s exp(lse_s).
    With one split the kernel writes o and lse itself.
`specialized=False` is the same math in one warp group without the producer: it runs on the CPU
backend."""
import math

import tilus
from tilus import bfloat16, boolean, float16, float32, int32

from flash_attention import FlashAttention, LOG2E, _TILUS_DT, _dtype_name


class FlashDecoding(FlashAttention):
    def __init__(self, dtype=float16, heads=32, kv_heads=8, head_dim=128, page_size=64, q_len=1, block_n=None,
                 stages=None, split=True, specialized=True):
        group = heads // kv_heads
        assert 64 % group == 0 and q_len * group <= 64, "the query tokens times the group fill at most 64 rows"
        block_n = block_n or (128 if head_dim <= 128 else 64)
        # As many K/V slots as the shared memory holds beside the query tile (up to 6): the bytes
        # in flight per SM are what a cache-bound kernel's speed comes from.
        stages = stages or max(2, min(6, (227 * 1024 - 128 * head_dim - 1024) // (4 * block_n * head_dim)))
        assert block_n % page_size == 0 or page_size % block_n == 0, "key blocks of whole pages or within one"
        assert min(block_n, page_size) % 8 == 0, "TMA boxes of whole 8-row swizzle atoms"
        assert heads % kv_heads == 0, "GQA: heads a multiple of kv_heads"
        super().__init__(dtype, head_dim, causal=q_len > 1, block_n=block_n, stages=stages, specialized=specialized,
                         pingpong=False)
        self.heads, self.kv_heads = heads, kv_heads
        self.consumers, self.block_m = 1, 64  # one consumer warp group: decoding is bound by the cache's bytes
        self.group, self.page_size, self.q_len, self.split = group, page_size, q_len, split

    def mask(self, s, tile_row, col0):
        """Row r is token r // group (queries sit at the end of the keys)."""
        seqlen_k, g = self.seqlen_k, self.group
        if self.causal:
            shift = seqlen_k - self.q_len
            keep = self.register_tensor(dtype=boolean, shape=[64, self.block_n],
                                        init=lambda i, j: (col0 + j < seqlen_k) & (col0 + j <= i // g + shift))
        else:
            keep = self.register_tensor(dtype=boolean, shape=[64, self.block_n], init=lambda i, j: col0 + j < seqlen_k)
        return self.where(keep, s, float("-inf"))

    def __call__(self, batch: int32, max_pages: int32, num_pages: int32, blocks_per_split: int32, scale: float32,
                 q: tilus.void_p, k_cache: tilus.void_p, v_cache: tilus.void_p, block_table: ~int32,
                 seqlens_k: ~int32, o: tilus.void_p, lse: ~float32):
        dt, d, g, bn, ql = self.dtype, self.head_dim, self.group, self.block_n, self.q_len
        splits = (max_pages * self.page_size + bn * blocks_per_split - 1) // (bn * blocks_per_split)
        self.attrs.blocks = [splits, self.kv_heads, batch]
        self.attrs.warps = 8 if self.specialized else 4
        self.split_index = self.blockIdx.x
        self.hk = self.blockIdx.y
        self.b = self.blockIdx.z
        self.seqlen_q = ql
        self.seqlen_k = self.global_view(seqlens_k, shape=[batch])[self.b].item()
        self.scale_log2 = scale * LOG2E
        self.k_start = 0
        self.gbt = self.global_view(block_table, shape=[batch, max_pages])
        self.gq = self.global_view(q, dtype=dt, shape=[batch * ql, self.heads, d])
        self.gk = self.global_view(k_cache, dtype=dt, shape=[num_pages * self.page_size, self.kv_heads * d])
        self.gv = self.global_view(v_cache, dtype=dt, shape=[num_pages * self.page_size, self.kv_heads * d])
        end = (self.b + 1) * ql  # the view ends after this sequence's tokens: later rows are not written
        if self.split:  # o: the float32 workspace [splits, rows, heads, d], lse [splits, rows, heads]
            rows = batch * ql
            self.go = self.global_view(o, dtype=float32, shape=[splits, end, self.heads, d],
                                       strides=[rows * self.heads * d, self.heads * d, d, 1])
            self.glse = self.global_view(lse, shape=[splits, end, self.heads], strides=[rows * self.heads, self.heads, 1])
        else:
            self.go = self.global_view(o, dtype=dt, shape=[end, self.heads, d])
            self.glse = self.global_view(lse, shape=[end, self.heads])
        # This split's key blocks [first, first + blocks), the last one processed first.
        first = self.split_index * blocks_per_split
        blocks = tilus.max(tilus.min(first + blocks_per_split, (self.seqlen_k + bn - 1) // bn) - first, 0)
        free = self.seqlen_k - ql + 1 if self.causal else self.seqlen_k  # keys every row sees
        unmasked = tilus.min(tilus.max(tilus.max(free, 0) // bn - first, 0), blocks)
        sq = [self.shared_tensor(dtype=dt, shape=[64 // g, g, 64]) for _ in range(d // 64)]
        self.q_boxes = sq
        self.attention([[self.reshape_shared(x, [64, 64]) for x in sq]], blocks, blocks - unmasked,
                       first + blocks - 1, 0)

    def q_tile(self, sq, barrier, w):
        """Rows (token t, head i of the group) of q: one box [64 / group, group, 64] per 64 columns
        (tokens past q_len belong to the next sequence or past the end: computed, not stored)."""
        for c in tilus.static_range(self.head_dim // 64):
            self.tma.global_to_shared(src=self.gq, dst=self.q_boxes[c], mbarrier=barrier,
                                      offsets=[self.b * self.q_len, self.hk * self.group, 64 * c])

    def kv_tile(self, g, dst, barrier, n):
        """Key block n through the block table: a box per page (or per part of one page)."""
        ps, bn = self.page_size, self.block_n
        rows = min(ps, bn)
        for i in tilus.static_range(bn // rows):
            key = n * bn + i * rows
            page = self.gbt[self.b, key // ps].item()  # past the table: page 0, masked out
            for c in tilus.static_range(self.head_dim // 64):
                box = dst[c] if rows == bn else self.slice_shared(dst[c], [i * rows, 0], [0, 1], [rows, 64])
                self.tma.global_to_shared(src=g, dst=box, mbarrier=barrier,
                                          offsets=[page * ps + key % ps, self.hk * self.head_dim + 64 * c])

    def finish(self, o, m, l, w):
        g, d = self.group, self.head_dim
        row = self.b * self.q_len
        for c, x in enumerate(self.normalized(o, l)):
            tile = self.reshape(x if self.split else x.to(self.dtype), [64 // g, g, 64])
            if self.split:
                self.store_global(self.go, tile, offsets=[self.split_index, row, self.hk * g, 64 * c], dims=[1, 2, 3])
            else:
                self.store_global(self.go, tile, offsets=[row, self.hk * g, 64 * c])
        lse = self.reshape(self.log_sum_exp(m, l), [64 // g, g])
        if self.split:
            self.store_global(self.glse, lse, offsets=[self.split_index, row, self.hk * g], dims=[1, 2])
        else:
            self.store_global(self.glse, lse, offsets=[row, self.hk * g])


class DecodeCombine(tilus.Script):
    """o and lse of each (token, head) from the splits' normalized outputs and lse."""

    def __init__(self, dtype=float16, heads=32, head_dim=128, heads_per_block=8):
        super().__init__()
        assert heads % heads_per_block == 0
        self.dtype, self.heads, self.head_dim, self.hb = dtype, heads, head_dim, heads_per_block

    def __call__(self, rows: int32, splits: int32, o_part: ~float32, lse_part: ~float32, o: tilus.void_p,
                 lse: ~float32):
        hb, d = self.hb, self.head_dim
        self.attrs.blocks = [rows, self.heads // hb]
        self.attrs.warps = 4
        r = self.blockIdx.x
        h0 = self.blockIdx.y * hb
        gop = self.global_view(o_part, shape=[splits, rows, self.heads, d])
        glp = self.global_view(lse_part, shape=[splits, rows, self.heads, 1])
        top = self.register_tensor(dtype=float32, shape=[hb, 1], init=float("-inf"))
        for s in range(splits):
            self.assign(top, self.maximum(top, self.load_global(glp, offsets=[s, r, h0, 0], shape=[hb, 1], dims=[2, 3])))
        base = self.where(top == float("-inf"), 0.0, top)
        acc = self.register_tensor(dtype=float32, shape=[hb, d], init=0.0)
        total = self.register_tensor(dtype=float32, shape=[hb, 1], init=0.0)
        for s in range(splits):
            wgt = self.exp(self.load_global(glp, offsets=[s, r, h0, 0], shape=[hb, 1], dims=[2, 3]) - base)
            self.assign(total, total + wgt)
            self.assign(acc, acc + wgt * self.load_global(gop, offsets=[s, r, h0, 0], shape=[hb, d], dims=[2, 3]))
        out = acc / self.where(total == 0.0, 1.0, total)
        self.store_global(self.global_view(o, dtype=self.dtype, shape=[rows, self.heads, d]), out.to(self.dtype),
                          offsets=[r, h0, 0], dims=[1, 2])
        self.store_global(self.global_view(lse, shape=[rows, self.heads, 1]), base + self.log(total),
                          offsets=[r, h0, 0], dims=[1, 2])


# --- host side ---------------------------------------------------------------------------------

_KERNELS = {}


def _cached(cls, *args, **kw):
    key = (cls, args, tuple(sorted(kw.items())))
    if key not in _KERNELS:
        _KERNELS[key] = cls(*args, **kw)
    return _KERNELS[key]


def num_splits_for(batch, kv_heads, max_seqlen_k, block_n, sms=132):
    """Splits so that the blocks fill the GPU about twice, each split at least 4 key blocks."""
    blocks = -(-max_seqlen_k // block_n)
    want = -(-2 * sms // (batch * kv_heads))
    return max(1, min(want, blocks // 4))


def flash_decode(q, k_cache, v_cache, block_table, seqlens_k, scale=None, num_splits=None, specialized=None,
                 block_n=None, stages=None):
    """o, lse (see the module's docstring). torch CUDA tensors run the warp-specialized kernel,
    numpy arrays the simple one on the CPU backend. num_splits: None chooses from the table's
    width (its pages bound the keys) and the GPU's SMs."""
    batch, q_len, heads, d = q.shape
    num_pages, page_size, kv_heads, _ = k_cache.shape
    max_pages = block_table.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    on_cpu = not hasattr(q, "is_cuda") or not q.is_cuda
    specialized = (not on_cpu) if specialized is None else specialized
    bn = block_n or (128 if d <= 128 else 64)
    if num_splits is None:
        sms = 132
        if not on_cpu:
            import torch
            sms = torch.cuda.get_device_properties(q.device).multi_processor_count
        num_splits = num_splits_for(batch, kv_heads, max_pages * page_size, bn, sms)
    blocks = -(-max_pages * page_size // bn)
    per_split = -(-blocks // num_splits)
    splits = -(-blocks // per_split)
    if on_cpu:
        import numpy as np
        dt = float16 if q.dtype == np.float16 else bfloat16
        new = lambda shape, f32: np.empty(shape, np.float32 if f32 else q.dtype)  # noqa: E731
    else:
        import torch
        dt = _TILUS_DT[_dtype_name(q)]
        new = lambda shape, f32: torch.empty(shape, dtype=torch.float32 if f32 else q.dtype, device=q.device)  # noqa: E731
    out, lse = new((batch, q_len, heads, d), False), new((batch, q_len, heads), True)
    args = (batch, max_pages, num_pages, per_split, scale, q, k_cache, v_cache, block_table, seqlens_k)
    split = splits > 1
    kern = _cached(FlashDecoding, dt, heads, kv_heads, d, page_size, q_len, bn, stages, split, specialized)
    if not split:
        kern(*args, out, lse)
        return out, lse
    o_part, lse_part = new((splits, batch * q_len, heads, d), True), new((splits, batch * q_len, heads), True)
    kern(*args, o_part, lse_part)
    _cached(DecodeCombine, dt, heads, d, 8 if heads % 8 == 0 else heads)(batch * q_len, splits, o_part, lse_part,
                                                                          out, lse)
    return out, lse


def reference(q, k_cache, v_cache, block_table, seqlens_k, scale=None):
    """float64 numpy o [batch, q_len, heads, d] and lse [batch, q_len, heads]."""
    import numpy as np
    q, kc, vc = (np.asarray(x, dtype=np.float64) for x in (q, k_cache, v_cache))
    batch, q_len, heads, d = q.shape
    page_size, kv_heads = kc.shape[1], kc.shape[2]
    group = heads // kv_heads
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    o = np.zeros_like(q)
    lse = np.full((batch, q_len, heads), -np.inf)
    for b in range(batch):
        n = int(seqlens_k[b])
        t = np.arange(n)
        pages = np.asarray(block_table[b])[t // page_size]
        k, v = kc[pages, t % page_size], vc[pages, t % page_size]  # [n, kv_heads, d]
        for h in range(heads):
            s = q[b, :, h] @ k[:, h // group].T * scale  # [q_len, n]
            s = np.where(t[None, :] <= np.arange(q_len)[:, None] + n - q_len, s, -np.inf)
            mx = s.max(axis=1, keepdims=True) if n else np.full((q_len, 1), -np.inf)
            seen = np.isfinite(mx[:, 0])
            e = np.exp(s - np.where(np.isfinite(mx), mx, 0))
            tot = e.sum(axis=1)
            o[b, :, h] = np.where(seen[:, None], (e / np.where(tot > 0, tot, 1)[:, None]) @ v[:, h // group], 0)
            lse[b, :, h] = np.where(seen, np.log(np.where(tot > 0, tot, 1)) + mx[:, 0], -np.inf)
    return o, lse


def random_cache(batch, q_len, heads, kv_heads, d, page_size, seqlens, seed=0):
    """numpy q, k_cache, v_cache, block_table, seqlens_k: each sequence's pages scattered at random
    over a pool with spare pages."""
    import numpy as np
    rng = np.random.default_rng(seed)
    max_pages = max(1, max(-(-s // page_size) for s in seqlens))
    num_pages = batch * max_pages + 3
    q = rng.uniform(-1, 1, (batch, q_len, heads, d)).astype(np.float16)
    kc = rng.uniform(-1, 1, (num_pages, page_size, kv_heads, d)).astype(np.float16)
    vc = rng.uniform(-1, 1, (num_pages, page_size, kv_heads, d)).astype(np.float16)
    table = rng.permutation(num_pages)[:batch * max_pages].reshape(batch, max_pages).astype(np.int32)
    return q, kc, vc, table, np.asarray(seqlens, np.int32)


def random_cache_gpu(batch, n, heads=32, kv_heads=8, d=128, page_size=64):
    """torch CUDA f16 q [batch, 1, heads, d], k_cache, v_cache, block_table, seqlens_k: `batch`
    sequences of n keys (a multiple of page_size) in pages permuted at random (the timing shape)."""
    import torch
    pages = n // page_size
    q = torch.randn(batch, 1, heads, d, device="cuda", dtype=torch.float16)
    kc = torch.randn(batch * pages, page_size, kv_heads, d, device="cuda", dtype=torch.float16)
    vc = torch.randn_like(kc)
    table = torch.randperm(batch * pages, device="cuda", dtype=torch.int32).reshape(batch, pages)
    return q, kc, vc, table, torch.full((batch,), n, dtype=torch.int32, device="cuda")


if __name__ == "__main__":
    import os
    import numpy as np
    from common import on_gpu, timed
    gpu = on_gpu()
    check_only = os.environ.get("TILUS_EXAMPLES_QUICK")  # correctness only (sanitizer runs)
    for batch, q_len, heads, kv_heads, d, ps, lens, splits in [(2, 1, 8, 2, 128, 64, (300, 77), None),
                                                               (3, 2, 4, 1, 64, 16, (5, 200, 129), 2),
                                                               (1, 1, 4, 4, 256, 64, (1000,), 3)]:
        q, kc, vc, table, sl = random_cache(batch, q_len, heads, kv_heads, d, ps, lens)
        want_o, want_lse = reference(q, kc, vc, table, sl)
        if gpu:
            import torch
            o, lse = flash_decode(*[torch.from_numpy(x).cuda() for x in (q, kc, vc, table, sl)], num_splits=splits)
            o, lse = o.float().cpu().numpy(), lse.cpu().numpy()
        else:
            o, lse = flash_decode(q, kc, vc, table, sl, num_splits=splits)
        err = np.abs(o - want_o).max()
        lerr = np.abs(lse - want_lse).max()
        ok = err < 2e-2 and lerr < 1e-3
        print(f"flash_decode batch {batch} q_len {q_len} heads {heads}/{kv_heads} d {d} page {ps} keys {lens}: "
              f"{'PASS' if ok else 'FAIL'} (max abs err o {err:.3g}, lse {lerr:.3g})")
        if not ok:
            raise SystemExit(1)
    if gpu and not check_only:
        batch, heads, kv_heads, d, n = 8, 32, 8, 128, 32768
        q, kc, vc, table, sl = random_cache_gpu(batch, n, heads, kv_heads, d)
        ms = timed(lambda: flash_decode(q, kc, vc, table, sl), "cuda")
        gb = 2 * kc.numel() * 2 / 1e9
        print(f"flash_decode batch {batch} keys {n} heads {heads}/{kv_heads} d {d}: {ms * 1e3:.1f} us, "
              f"{gb / ms * 1e3:.0f} GB/s of the cache")
