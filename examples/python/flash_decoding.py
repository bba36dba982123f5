"""Decode attention on Hopper (sm_90a): a few new query tokens per sequence against a long paged
KV cache, split along the keys across blocks, the splits merged by the last of them to finish
(flash-decoding in one kernel).

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
  - the producer, one warp (the registers it leaves let two blocks share an SM), looks each key
    block's pages up in the block table (one TMA box per page, or the part of a page a block
    covers) and runs `stages` blocks ahead of one consumer warp group;
  - each split writes its rows normalized, with their lse, to a float32 workspace, then counts
    its arrival per (sequence, kv head) (common.last_to_arrive, as matmul_a16wx's split-K does);
    the last split to arrive merges them: o = sum_s exp(lse_s - lse) o_s, lse = log sum_s
    exp(lse_s), `merge_splits` splits per load so that a merge of many costs a few memory
    latencies, and puts the counter back to zero. With one split the kernel writes o and lse
    itself.
`specialized=False` is the same math in one warp group without the producer: it runs on the CPU
backend (the merge too).

How the keys are split (`decode_config`; `bench/attention.py --sweep goal --only decode
--candidates` times it against the other candidates on the GPU, and `flash_decode(tune=True)`
picks among them at run time): in one wave of blocks. With few (sequence, kv head) pairs the
splits multiply them up to the SMs' slots (sms * blocks_per_sm // pairs splits), so that every
block pays the pipeline's fill (the query tile, the first TMA's latency) once and streams many
key blocks after it; with as many pairs as slots, one split each. Where a split would stream at
least LONG_SPLIT keys at two blocks per SM (batch 8 at 16k keys and more, on the H200), 64-key
blocks in 3 stages at two blocks per SM (one block's fill, merge and serial GEMM-softmax chain
hidden behind the other's stream: the fastest candidate at batch 8 in each of five H200 calls,
1-3 % ahead of one block per SM, and in the two runs of a sixth as the rule); with shorter splits (batch 1: 1024 keys a split at 16k) the
second fill costs more than it hides, and 128-key blocks in 3 stages at one block per SM (192 KB
of K/V in flight per SM) take them. `decode_candidates` lists what the bench and the tuner time:
the rule's, 128-key blocks at one block per SM, 64-key blocks in 6 stages at one (the same bytes
in finer steps, a shorter fill) and in 3 at two, each in one wave (a second wave of splits never
won on the H200).

A decode step calls flash_decode once per token: its launch at a shape (the kernel, its scalars,
the splits' workspace) is made at the first call and kept (`_PLANS`), so a call costs a look-up,
o's and lse's allocations and the launch."""
import math

import tilus
from tilus import bfloat16, boolean, float16, float32, int32

from common import ArrivalCounters, last_to_arrive, reset_arrivals, timed_configs
from flash_attention import FlashAttention, LOG2E, _TILUS_DT, _dtype_name

SMEM_PER_SM = 233472  # bytes of shared memory per SM on Hopper (228 KB), 1 KB of it reserved per block


def decode_stages(head_dim, block_n, blocks_per_sm=1):
    """K/V slots that fit beside the query tile when `blocks_per_sm` blocks share an SM (2 to 6)."""
    budget = SMEM_PER_SM // blocks_per_sm - 1024 - 64 * head_dim * 2 - 256  # the query tile, the barriers
    return max(2, min(6, budget // (4 * block_n * head_dim)))


class FlashDecoding(FlashAttention):
    def __init__(self, dtype=float16, heads=32, kv_heads=8, head_dim=128, page_size=64, q_len=1, block_n=None,
                 stages=None, split=True, specialized=True, blocks_per_sm=1, merge_splits=None):
        group = heads // kv_heads
        assert 64 % group == 0 and q_len * group <= 64, "the query tokens times the group fill at most 64 rows"
        block_n = block_n or (128 if head_dim <= 128 else 64)
        # As many K/V slots as the shared memory holds beside the query tile: the bytes in flight
        # per SM are what a cache-bound kernel's speed comes from.
        stages = stages or decode_stages(head_dim, block_n, blocks_per_sm)
        assert block_n % page_size == 0 or page_size % block_n == 0, "key blocks of whole pages or within one"
        assert min(block_n, page_size) % 8 == 0, "TMA boxes of whole 8-row swizzle atoms"
        assert heads % kv_heads == 0, "GQA: heads a multiple of kv_heads"
        super().__init__(dtype, head_dim, causal=q_len > 1, block_n=block_n, stages=stages, specialized=specialized,
                         pingpong=False, pv_n=64)  # finish() and the merge take o in 64-column accumulators
        self.heads, self.kv_heads = heads, kv_heads
        self.consumers, self.block_m = 1, 64  # one consumer warp group: decoding is bound by the cache's bytes
        self.producer_warps = 1  # one thread issues the loads: a warp group would hold registers for nothing
        self.group, self.page_size, self.q_len, self.split = group, page_size, q_len, split
        # The merge: the real rows (q_len tokens, rounded up to a power of two) of `merge_splits`
        # splits per load, about 32 float32 registers of the warp group's for o.
        self.merge_rows = min(64 // group, 1 << (q_len - 1).bit_length())
        self.merge_splits = merge_splits or max(1, min(16, 4096 // (self.merge_rows * group * head_dim)))

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
                 seqlens_k: ~int32, o: tilus.void_p, lse: ~float32, o_part: ~float32, lse_part: ~float32,
                 counters: ~int32):
        """o_part [splits, batch * q_len, heads, d], lse_part [splits, batch * q_len, heads]: the
        splits' workspace; counters int32 [batch, kv_heads], zero before the launch and after it
        (unused with split=False)."""
        dt, d, g, bn, ql = self.dtype, self.head_dim, self.group, self.block_n, self.q_len
        splits = (max_pages * self.page_size + bn * blocks_per_split - 1) // (bn * blocks_per_split)
        self.attrs.blocks = [splits, self.kv_heads, batch]
        self.attrs.warps = 4 + self.producer_warps if self.specialized else 4
        self.splits = splits
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
        end = (self.b + 1) * ql  # the views end after this sequence's tokens: later rows are not written
        self.go = self.global_view(o, dtype=dt, shape=[end, self.heads, d])
        self.glse = self.global_view(lse, shape=[end, self.heads, 1], strides=[self.heads, 1, 1])
        if self.split:
            rows = batch * ql
            self.gop = self.global_view(o_part, shape=[splits, end, self.heads, d],
                                        strides=[rows * self.heads * d, self.heads * d, d, 1])
            self.glp = self.global_view(lse_part, shape=[splits, end, self.heads, 1],
                                        strides=[rows * self.heads, self.heads, 1, 1])
            # The merge reads each row's lse once per column and writes it so (a stride of 0):
            # every tile of the merge then has o's shape and layout, and no layout conversion
            # (through shared memory, where the K/V ring was) is needed.
            self.glp_wide = self.global_view(lse_part, shape=[splits, end, self.heads, d],
                                             strides=[rows * self.heads, self.heads, 1, 0])
            self.glse_wide = self.global_view(lse, shape=[end, self.heads, d], strides=[self.heads, 1, 0])
            self.arrivals = self.global_view(counters, shape=[batch, self.kv_heads])
            self.arrived = self.shared_tensor(dtype=int32, shape=[1, 1])  # apart from the K/V ring
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

    def finish(self, o, m, l, w, sq):
        """The rows to o and lse (one split), or to the workspace, the last split to arrive merging
        (from registers: a row group's tokens are scattered over heads, no TMA box; sq unused)."""
        g = self.group
        row = self.b * self.q_len
        lse = self.reshape(self.log_sum_exp(m, l), [64 // g, g, 1])
        for c, x in enumerate(self.normalized(o, l)):
            tile = self.reshape(x if self.split else x.to(self.dtype), [64 // g, g, 64])
            if self.split:
                self.store_global(self.gop, tile, offsets=[self.split_index, row, self.hk * g, 64 * c], dims=[1, 2, 3])
            else:
                self.store_global(self.go, tile, offsets=[row, self.hk * g, 64 * c])
        if not self.split:
            self.store_global(self.glse, lse, offsets=[row, self.hk * g, 0])
            return
        self.store_global(self.glp, lse, offsets=[self.split_index, row, self.hk * g, 0], dims=[1, 2, 3])
        pair = [self.b, self.hk]
        if last_to_arrive(self, self.arrivals, pair, self.splits, self.arrived):
            self.merge(row)
            reset_arrivals(self, self.arrivals, pair)

    def merge(self, row):
        """o and lse of the rows from every split's normalized o and lse, online over chunks of
        merge_splits splits: a chunk's loads are issued together (one memory latency a chunk),
        then each split's update is elementwise (no reduction across threads)."""
        g, d, tq, sc = self.group, self.head_dim, self.merge_rows, self.merge_splits
        h0 = self.hk * g
        top = self.register_tensor(dtype=float32, shape=[tq, g, d], init=float("-inf"))
        total = self.register_tensor(dtype=float32, shape=[tq, g, d], init=0.0)
        acc = self.register_tensor(dtype=float32, shape=[tq, g, d], init=0.0)
        splits = self.splits
        for chunk in range((splits + sc - 1) // sc):
            s0 = chunk * sc
            parts = [(self.load_global(self.glp_wide, offsets=[s0 + i, row, h0, 0], shape=[tq, g, d], dims=[1, 2, 3]),
                      self.load_global(self.gop, offsets=[s0 + i, row, h0, 0], shape=[tq, g, d], dims=[1, 2, 3]))
                     for i in range(sc)]
            for i, (part_lse, part_o) in enumerate(parts):
                real = self.register_tensor(dtype=boolean, shape=[tq, g, d], init=lambda a, b, c: s0 + i < splits)
                part_lse = self.where(real, part_lse, float("-inf"))  # past the last split
                new_top = self.maximum(top, part_lse)
                base = self.where(new_top == float("-inf"), 0.0, new_top)  # rows no split saw a key of: no NaN
                alpha = self.exp(top - base)
                wgt = self.exp(part_lse - base)
                self.assign(acc, acc * alpha + wgt * part_o)
                self.assign(total, total * alpha + wgt)
                self.assign(top, new_top)
        out = acc / self.where(total == 0.0, 1.0, total)
        self.store_global(self.go, out.to(self.dtype), offsets=[row, h0, 0])
        self.store_global(self.glse_wide, self.where(top == float("-inf"), 0.0, top) + self.log(total),
                          offsets=[row, h0, 0])


# --- host side ---------------------------------------------------------------------------------

_KERNELS = {}
_COUNTERS = ArrivalCounters()  # the merge's, per (sequence, kv head): one launch at a time


def _cached(cls, *args, **kw):
    key = (cls, args, tuple(sorted(kw.items())))
    if key not in _KERNELS:
        _KERNELS[key] = cls(*args, **kw)
    return _KERNELS[key]


_SMS = {}


def _sms(device):
    """The SM count of a CUDA device (asked once: a decode step should not pay for it)."""
    if device not in _SMS:
        import torch
        _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SMS[device]


def _splits(key_blocks, want):
    """(key blocks per split, splits) of `want` splits at most, balanced."""
    per_split = -(-key_blocks // max(1, min(want, key_blocks)))
    return per_split, -(-key_blocks // per_split)


LONG_SPLIT = 4096  # keys a split streams at two blocks per SM from which the rule takes two (d <= 128)


def decode_config(batch, kv_heads, max_seqlen_k, head_dim=128, sms=132, block_n=None, blocks_per_sm=None):
    """The launch: dict(block_n, stages, blocks_per_sm, num_splits). The rule (module docstring):
    the keys split so that the blocks fill the SMs' slots once, at least 2 key blocks per split;
    64-key blocks in 3 stages at two blocks per SM where each split then streams at least
    LONG_SPLIT keys (d <= 128: two blocks of d 256 do not fit an SM), else 128-key blocks (64 at
    d = 256) in as many stages as fit at one block per SM."""
    pairs = batch * kv_heads
    if blocks_per_sm is None:
        long = head_dim <= 128 and max_seqlen_k >= LONG_SPLIT * max(1, 2 * sms // pairs)
        blocks_per_sm = 2 if long and block_n in (None, 64) else 1
        block_n = block_n or (64 if long else None)
    block_n = block_n or (128 if head_dim <= 128 else 64)
    key_blocks = max(1, -(-max_seqlen_k // block_n))
    want = max(1, min(sms * blocks_per_sm // pairs, key_blocks // 2))
    return dict(block_n=block_n, stages=decode_stages(head_dim, block_n, blocks_per_sm), blocks_per_sm=blocks_per_sm,
                num_splits=_splits(key_blocks, want)[1])


def decode_candidates(batch, kv_heads, max_seqlen_k, head_dim=128, sms=132):
    """The configurations bench/attention.py --candidates and flash_decode(tune=True) time at a
    shape, decode_config's first: 128- and 64-key blocks at one block per SM, 64-key blocks at
    two (d <= 128), each in one wave."""
    out = [decode_config(batch, kv_heads, max_seqlen_k, head_dim, sms)]
    for block_n, per_sm in ((128, 1), (64, 1), (64, 2)):
        if head_dim > 128 and (block_n > 64 or per_sm > 1):
            continue
        cfg = decode_config(batch, kv_heads, max_seqlen_k, head_dim, sms, block_n, per_sm)
        if cfg not in out:
            out.append(cfg)
    return out


def config_name(cfg):
    return f"{cfg['block_n']}x{cfg['stages']}/{cfg['blocks_per_sm']} {cfg['num_splits']} splits"


_TUNED = {}  # (shape, dtype, max_pages rounded up to a power of two) -> the fastest configuration


_PLANS = {}  # (shapes, dtype, device, scale, config, specialized) -> _Plan


class _Plan:
    """What a launch at one shape and configuration needs besides o and lse, made at its first
    call: the kernel, its leading scalars and the splits' workspace (reused by the next launch,
    as the arrival counters are: one launch at a time). A decode step calls flash_decode once per
    token, so its host cost is a dict look-up, two allocations and the launch."""

    def __init__(self, q, k_cache, block_table, scale, config, specialized):
        batch, q_len, heads, d = q.shape
        num_pages, page_size, kv_heads, _ = k_cache.shape
        max_pages = block_table.shape[1]
        on_cpu = not getattr(q, "is_cuda", False)
        specialized = (not on_cpu) if specialized is None else specialized
        if config is None:
            config = decode_config(batch, kv_heads, max_pages * page_size, d, 132 if on_cpu else _sms(q.device))
        bn = config["block_n"]
        per_split, splits = _splits(max(1, -(-max_pages * page_size // bn)), config["num_splits"])
        qdt = q.dtype
        if on_cpu:
            import numpy as np
            dt = float16 if qdt == np.float16 else bfloat16
            self.new = lambda shape, f32: np.empty(shape, np.float32 if f32 else qdt)  # noqa: E731
        else:
            import torch
            dt = _TILUS_DT[_dtype_name(q)]
            dev = q.device
            self.new = lambda shape, f32: torch.empty(shape, dtype=torch.float32 if f32 else qdt, device=dev)  # noqa: E731
        self.kernel = _cached(FlashDecoding, dt, heads, kv_heads, d, page_size, q_len, bn, config["stages"],
                              splits > 1, specialized, config["blocks_per_sm"], config.get("merge_splits"))
        self.head = (batch, max_pages, num_pages, per_split, 1.0 / math.sqrt(d) if scale is None else scale)
        self.o_shape, self.lse_shape, self.rows = (batch, q_len, heads, d), (batch, q_len, heads), (batch * q_len, heads)
        self.work = None
        if splits > 1:
            self.work = (self.new((splits, batch * q_len, heads, d), True), self.new((splits, batch * q_len, heads), True),
                         _COUNTERS(q, batch * kv_heads))

    def call(self, q, k_cache, v_cache, block_table, seqlens_k):
        out, lse = self.new(self.o_shape, False), self.new(self.lse_shape, True)
        # (lse as [rows, heads]: the kernel's views of it, of another rank, read it as a dense buffer)
        lse2 = lse.reshape(self.rows)
        work = self.work or (lse2, lse2, seqlens_k)  # one split: not read
        return self.kernel, self.head + (q, k_cache, v_cache, block_table, seqlens_k, out, lse2) + work, out, lse


def decode_call(q, k_cache, v_cache, block_table, seqlens_k, scale=None, config=None, specialized=None):
    """(kernel, its arguments, o, lse) of one decode launch at `config` (decode_config's dict, None:
    the rule; a "merge_splits" entry sets the merge's splits per load)."""
    key = (q.shape, q.dtype, getattr(q, "device", None), getattr(q, "is_cuda", False), k_cache.shape,
           block_table.shape, scale, specialized, config and tuple(sorted(config.items())))
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= 64:  # a table that widens as sequences grow makes a plan per width: keep the newest
            del _PLANS[next(iter(_PLANS))]
        plan = _PLANS[key] = _Plan(q, k_cache, block_table, scale, config, specialized)
    return plan.call(q, k_cache, v_cache, block_table, seqlens_k)


def flash_decode(q, k_cache, v_cache, block_table, seqlens_k, scale=None, num_splits=None, specialized=None,
                 config=None, tune=False):
    """o, lse (see the module's docstring). torch CUDA tensors run the warp-specialized kernel,
    numpy arrays the simple one on the CPU backend. config: decode_config's dict (None: the rule,
    from the table's width, whose pages bound the keys, and the GPU's SMs); num_splits overrides
    its splits. tune=True (CUDA tensors): the first call at each shape (the table's width rounded
    up to a power of two) times decode_candidates on its own arguments (common.timed_configs)
    and keeps the fastest for the process."""
    if tune and config is None and hasattr(q, "is_cuda") and q.is_cuda:
        batch, q_len, heads, d = q.shape
        _, page_size, kv_heads, _ = k_cache.shape
        width = 1 << max(block_table.shape[1] - 1, 0).bit_length()
        key = (batch, q_len, heads, kv_heads, d, page_size, width, str(q.dtype), q.device)
        if key not in _TUNED:
            cands = decode_candidates(batch, kv_heads, block_table.shape[1] * page_size, d, _sms(q.device))
            _TUNED[key] = timed_configs(cands, lambda cfg: decode_call(q, k_cache, v_cache, block_table, seqlens_k,
                                                                       scale, cfg, specialized)[:2])[0][1]
        config = _TUNED[key]
    if num_splits is not None:
        config = dict(config or decode_config(q.shape[0], k_cache.shape[2], block_table.shape[1] * k_cache.shape[1],
                                              q.shape[3], 132 if not getattr(q, "is_cuda", False) else _sms(q.device)),
                      num_splits=num_splits)
    kern, args, out, lse = decode_call(q, k_cache, v_cache, block_table, seqlens_k, scale, config, specialized)
    kern(*args)
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
