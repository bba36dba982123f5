"""Attention forward on Hopper (sm_90a), FlashAttention-3's design in tilus:
o = softmax(scale * q @ k.T [+ causal mask]) @ v, and the log-sum-exp of each row for a backward pass.

Shapes, as flash-attn's varlen interface takes them: q [total_q, heads, d], k and v
[total_k, kv_heads, d] (GQA / MQA: query head h reads kv head h // (heads // kv_heads)), the
sequences of the batch packed one after another and delimited by cu_seqlens_q / cu_seqlens_k
(int32 [batch + 1]); o like q; lse float32 [heads, total_q] (natural log). A dense batch
[batch, seqlen, heads, d] is the packed form with equal lengths (`flash_attention` below does
that). f16 or bf16; d = 64, 128 or 256. Causal masking is bottom-right aligned, as flash-attn
does when seqlen_q != seqlen_k: query i sees keys j <= i + seqlen_k - seqlen_q (a row that sees
no key gives o = 0 and lse = -inf).

The kernel (`FlashAttention`, specialized=True; one compiled kernel per dtype, d and causal: the
batch, heads and lengths are launch arguments): one block per (block_m rows of one sequence, one
query head), 3 warp groups:
  - a producer warp group that gives its registers away (setmaxnreg 24) and from one thread
    issues the TMA loads: its query rows once, then K and V tiles of block_n keys into a ring of
    `stages` slots (full / empty mbarriers per slot, K and V apart so that Q K^T can start before
    V lands), in the consumers' order;
  - two consumer warp groups (setmaxnreg 240; `consumers=3`: three, 160 registers each, at d = 64),
    64 query rows each. Per key block j, with S_j =
    Q K_j^T and P_j its row-wise exp2:
        issue S_j = Q K_j^T (wgmma, a zeroed accumulator);  issue O += P_(j-1) V_(j-1) (wgmma with
        P from registers);  wait for S_j only;  softmax of S_j (max, exp2 with the scale folded in,
        row sums) while P V runs;  wait for P V;  rescale O;  P_j in registers for the next step.
    (`rescale_between`: O's rescale waits for the next step, between its two issues.)
    so the next block's Q K^T is issued before this block's softmax finishes (FA3's intra-warpgroup
    overlap), and with `pingpong` the two warp groups take turns issuing their GEMMs (an mbarrier
    per warp group, each handing the turn to the other after it issued): one's softmax runs while
    the other's GEMMs keep the tensor cores busy (FA3's ping-pong schedule). `named_turns`: the
    turns are named barriers instead, as FA3 takes them (a warp group waits at its own with
    bar.sync, then arrives at the next one's with bar.arrive, neither polling an mbarrier).
Key blocks run from the last to the first, so the blocks that need the mask (the causal diagonal,
the ragged end of the keys) come first and the rest run without it. The query tiles of a causal
launch run longest first over the whole grid, in sections of heads whose K/V fit in L2
(`longest_first`). Each warp group's o leaves through its query tile in shared memory by TMA
stores (`finish`).

The key and value tiles are stored as d / 64 column blocks of 64 elements (one 128-byte swizzled
row each, what TMA writes): K^T's blocks are K-major operands of Q K^T (summed over the blocks),
V's are MN-major operands of P V (one accumulator per block of 64 output columns; with pv_n = 128
or 256 one wgmma takes that many columns, V's blocks side by side as one operand). What the
compiler adds (docs/gpu.md, "Attention on Hopper"): the wait for P V stays after the softmax
(order_wgmma_waits), and setmaxnreg takes effect (launch bounds with one block per SM).

`specialized=False` is the same math in one warp group with no producer (the loads issued by one
of its threads one block ahead, every wait in program order): it runs on the CPU backend, which
checks the math against numpy there.

Where the pipelining pass of issue 39 (`self.range(n, stages=S)`) could write this: the producer
ring (the K/V loads of block j + S - 1 issued while block j is consumed, their full/empty
barriers and phases) is its pattern; the cross-iteration overlap of the consumers (S_j's GEMM
issued before P_(j-1) V_(j-1), the softmax between two waits) and the ping-pong turns are not a
ring of loads and stay written by hand."""
import math

import tilus
from tilus import bfloat16, boolean, float16, float32, int32

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
TURN_BARRIER = 1  # named_turns: consumer warp group w takes its turns at named barrier TURN_BARRIER + w


class FlashAttention(tilus.Script):
    def __init__(self, dtype=float16, head_dim=128, causal=False, block_n=None, stages=2, specialized=True,
                 pingpong=True, l2_bytes=32 << 20, consumers=2, persistent=0, rescale_between=False,
                 named_turns=False, pv_n=None, quad_sums=False):
        super().__init__()
        assert dtype in (float16, bfloat16), "f16 or bf16"
        assert head_dim in (64, 128, 256), "head dims 64, 128, 256"
        block_n = block_n or (128 if head_dim <= 128 else 64)
        assert block_n % 16 == 0 and block_n <= 256, "block_n a multiple of 16, at most 256"
        self.dtype, self.head_dim = dtype, head_dim
        self.causal, self.block_n, self.stages = causal, block_n, stages
        self.specialized = specialized
        assert consumers in (2, 3), "2 or 3 consumer warp groups"
        self.consumers = consumers if specialized else 1  # warp groups of 64 query rows
        self.pingpong = pingpong and specialized
        # the ping-pong turns at named barriers (bar.sync / bar.arrive) rather than mbarriers
        self.named_turns = named_turns and self.pingpong
        # o's rescale by a key block's alpha issued in the next step, between its Q K^T and the P V
        # that adds the block (FA3's order): it runs while the tensor cores run Q K^T, not between
        # the softmax and the next GEMMs
        self.rescale_between = rescale_between and specialized
        self.l2_bytes = l2_bytes  # causal: the K/V bytes the blocks running at once should share (longest_first)
        # The columns of o per P V wgmma (and per accumulator): 64, one n = 64 wgmma per 64-column
        # block of V; 128 or 256, one wgmma over that many of V's columns (its 64-column blocks side
        # by side, an MN-major operand of several swizzle atoms), as FA3 issues P V. None: 128 at
        # d >= 128 (H200, the rule, f16; d = 128 in the mid call of 2026-11-29 05:43 at S 4096 /
        # 8192 / 16384: 579 / 626 / 630 TFLOP/s against 560 / 593 / 594 with 64 without causal,
        # 600 / 600 / 600 against 582 / 570 / 583 with it, bf16 3-7 % faster alike; in the mid
        # call of 06:22 593 / 603 against 594 / 603 at 4096 / 16384 without causal, 563 / 596
        # against 565 / 566 with it; d = 256, S 4096, 06:22: 631 against 628 without causal, 630
        # against 593 with it, 256 columns 636 and 622), else 64
        pv_n = pv_n or (128 if head_dim >= 128 else 64)
        assert pv_n in (64, 128, 256) and head_dim % pv_n == 0, "pv_n 64, 128 or 256, dividing head_dim"
        self.pv_n = pv_n
        # quad_sums: the row sums l kept as [64, 4] partial sums, one per thread of a row's quad (the
        # wgmma accumulator gives thread t of a quad the columns 8c + 2t, 8c + 2t + 1), added up
        # across the quad once in finish() instead of by two shuffles and adds per row every step
        self.quad_sums = quad_sums
        # persistent > 0: that many blocks (the SMs) loop over the tiles, each one's producer loading
        # the next tile's Q, K and V while its consumers finish the last one
        self.persistent = persistent if specialized else 0
        self.block_m = 64 * self.consumers
        self.producer_warps = 4  # a warp group (setmaxnreg counts whole warp groups); decoding uses 1

    # --- the math shared by both variants (and by flash_decoding.py) --------------------------

    def qk(self, s, sq, sk):
        """s += q @ k.T over the 64-column blocks of d (q [64, 64] and k [block_n, 64] per block)."""
        for c in tilus.static_range(self.head_dim // 64):
            self.wgmma.mma(sq[c], sk[c].transpose(), s)

    def pv(self, p, sv, o):
        """o[c] += p @ v[:, c * pv_n:(c + 1) * pv_n] for each accumulator c (v's 64-column blocks
        MN-major; with pv_n > 64 one wgmma reads pv_n / 64 of them side by side)."""
        g = self.pv_n // 64
        for c in tilus.static_range(len(o)):
            if g == 1:
                self.wgmma.mma(p, sv[c], o[c])
            else:  # v's blocks c * g .. (c + 1) * g - 1 (all of them: sv itself)
                self.wgmma.mma(p, sv if len(o) == 1 else self.slice_shared(sv, [c * g, 0, 0], [0, 1, 2],
                                                                             [g, self.block_n, 64]), o[c])

    def output(self):
        """o's accumulators ([64, pv_n] float32 each, zeroed) for d's columns."""
        return [self.register_tensor(dtype=float32, shape=[64, self.pv_n], init=0.0)
                for _ in range(self.head_dim // self.pv_n)]

    def mask(self, s, tile_row, col0):
        """Scores of keys past seqlen_k, and with causal of keys after a row's diagonal, to -inf
        (s: 64 rows from row `tile_row` of the sequence, keys from `col0`)."""
        seqlen_k = self.seqlen_k
        if self.causal:
            shift = seqlen_k - self.seqlen_q
            keep = self.register_tensor(dtype=boolean, shape=[64, self.block_n],
                                        init=lambda i, j: (col0 + j < seqlen_k) & (col0 + j <= tile_row + i + shift))
        else:
            keep = self.register_tensor(dtype=boolean, shape=[64, self.block_n], init=lambda i, j: col0 + j < seqlen_k)
        return self.where(keep, s, float("-inf"))

    def softmax(self, s, m, l):
        """The online softmax step of scores s [64, block_n] (float32): updates the row max m (in
        log2 units of the scaled scores) and row sum l, returns (p, alpha): p = exp2(s * scale *
        log2(e) - m) and the factor alpha by which the running output is rescaled."""
        m_new = self.maximum(m, self.max(s, dim=1, keepdim=True) * self.scale_log2)
        base = self.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: no NaN
        alpha = self.exp2(m - base)
        p = self.exp2(s * self.scale_log2 - base)
        if l.shape[1] == 1:
            self.assign(l, l * alpha + self.sum(p, dim=1, keepdim=True))
        else:  # quad_sums: column t of l adds up the columns 8c + 2t + e of p
            self.assign(l, l * alpha + self.sum(self.reshape(p, [64, p.shape[1] // 8, 4, 2]), dims=[1, 3]))
        self.assign(m, m_new)
        return p, alpha

    def row_sums(self, l):
        """l's rows as [64, 1] (quad_sums: the partial sums added up)."""
        return l if l.shape[1] == 1 else self.sum(l, dim=1, keepdim=True)

    def new_row_sums(self):
        """The zeroed row sums of a tile: [64, 1], or [64, 4] partial sums with quad_sums."""
        return self.register_tensor(dtype=float32, shape=[64, 4 if self.quad_sums else 1], init=0.0)

    def normalized(self, o, l):
        """o / l per accumulator (a row that saw no key: 0)."""
        inv = 1.0 / self.where(l == 0.0, 1.0, l)
        return [x * inv for x in o]

    def log_sum_exp(self, m, l):
        """The row's log-sum-exp of scale * scores (natural log; -inf for a row that saw no key)."""
        return (m + self.log2(l)) * LN2

    def key_blocks(self, m_block):
        """(blocks, masked): how many key blocks the query tile needs and how many of them (the
        last ones, processed first) need the mask."""
        bm, bn, seqlen_q, seqlen_k = self.block_m, self.block_n, self.seqlen_q, self.seqlen_k
        if self.causal:
            shift = seqlen_k - seqlen_q
            need = tilus.max(tilus.min(seqlen_k, (m_block + 1) * bm + shift), 0)
            free = tilus.max(tilus.min(seqlen_k, m_block * bm + shift + 1), 0)
        else:
            need = seqlen_k
            free = seqlen_k
        blocks = (need + bn - 1) // bn
        return blocks, blocks - tilus.min(free // bn, blocks)

    # --- the launch: prefill -------------------------------------------------------------------

    def __call__(self, batch: int32, heads: int32, kv_heads: int32, max_seqlen_q: int32, total_q: int32,
                 total_k: int32, scale: float32, q: tilus.void_p, k: tilus.void_p, v: tilus.void_p, o: tilus.void_p,
                 lse: tilus.void_p, cu_seqlens_q: ~int32, cu_seqlens_k: ~int32):
        dt, d, bm = self.dtype, self.head_dim, self.block_m
        tiles_m = (max_seqlen_q + bm - 1) // bm
        self.attrs.warps = 4 * self.consumers + (self.producer_warps if self.specialized else 0)
        self.scale_log2 = scale * LOG2E
        self.gq = self.global_view(q, dtype=dt, shape=[total_q, heads * d])
        self.gk = self.global_view(k, dtype=dt, shape=[total_k, kv_heads * d])
        self.gv = self.global_view(v, dtype=dt, shape=[total_k, kv_heads * d])
        self.go_all = self.global_view(o, dtype=dt, shape=[total_q, heads * d])  # TMA's map: parameters only
        self.launch = (batch, heads, kv_heads, tiles_m, total_q, total_k, o, lse,
                       self.global_view(cu_seqlens_q, shape=[batch + 1]), self.global_view(cu_seqlens_k, shape=[batch + 1]))
        sq = self.shared_tensor(dtype=dt, shape=[self.consumers, d // 64, 64, 64])
        if self.persistent:
            self.attrs.blocks = [tilus.min(tiles_m * heads * batch, self.persistent)]
            self.attention([sq[w] for w in range(self.consumers)], None, None, None, None)
            return
        if self.causal:
            self.attrs.blocks = [tiles_m * heads * batch]
            index = self.blockIdx.x
        else:  # every tile as long: a head's tiles side by side, sharing its K and V in L2
            self.attrs.blocks = [tiles_m, heads, batch]
            index = (self.blockIdx.z * heads + self.blockIdx.y) * tiles_m + self.blockIdx.x
        m_block, blocks, masked, runs = self.tile(index)
        if not runs:
            return
        self.attention([sq[w] for w in range(self.consumers)], blocks, masked, blocks - 1, m_block * bm)

    def tile(self, index):
        """Tile `index` of the launch: sets the head, kv head, the sequence's bounds and views, and
        returns (query tile, key blocks, masked key blocks, whether the tile has rows). Causal
        launches take the tiles longest first (longest_first), others a head's tiles side by side."""
        batch, heads, kv_heads, tiles_m, total_q, total_k, o, lse, gcq, gck = self.launch
        dt, d, bm = self.dtype, self.head_dim, self.block_m
        if self.causal:
            m_block, self.h, b = self.longest_first(tiles_m, heads, batch, total_k, index)
        else:
            pair = index // tiles_m
            m_block, self.h, b = index - pair * tiles_m, pair % heads, pair // heads
        # GQA / MQA: the query heads of a kv head are consecutive. A variable, computed once: as an
        # expression it was recomputed (two integer divisions, ~60 instructions of one thread) by
        # every TMA load the producer issued. A new one at each call (each thread group's tiles;
        # assigning the attribute would assign the variable of the last call, out of scope here)
        vars(self).pop("hk", None)
        self.hk = self.declare("hk", int32, self.h // (heads // kv_heads))
        q_start = gcq[b].item()
        q_end = gcq[b + 1].item()
        self.k_start = gck[b].item()
        k_end = gck[b + 1].item()
        self.seqlen_q = q_end - q_start
        self.seqlen_k = k_end - self.k_start
        self.go = self.global_view(o, dtype=dt, shape=[q_end, heads * d])  # this sequence's rows, no further
        self.q_end = q_end
        self.glse = self.global_view(lse, dtype=float32, shape=[heads, q_end], strides=[total_q, 1])
        self.row0 = q_start + m_block * bm  # the tile's first row in q
        blocks, masked = self.key_blocks(m_block)
        return m_block, blocks, masked, m_block * bm < self.seqlen_q

    def longest_first(self, tiles_m, heads, batch, total_k, index):
        """(query tile, head, sequence) of this block of a causal launch, whose tiles need from 1 to
        tiles_m key blocks: the blocks start in the order of their index, so the longest tiles go
        first and the short ones fill the last wave in (FA3's order). The (head, sequence) pairs
        are taken in sections whose keys and values fit in l2_bytes (the average sequence's): a
        section's tiles run longest first, head fastest, so the blocks running at once read the
        K/V of few heads."""
        hb = heads * batch
        width = self.section_width(hb, batch, total_k)
        span = width * tiles_m
        section = index // span
        first = section * width
        here = tilus.min(width, hb - first)  # the last section may be narrower
        r = index - section * span
        pair = first + r % here
        return tiles_m - 1 - r // here, pair % heads, pair // heads

    def section_width(self, hb, batch, total_k):
        """The (head, sequence) pairs of an L2 section of longest_first: as many as the average
        sequence's K and V fit in l2_bytes, at least 1, at most all hb."""
        per_head = tilus.max(total_k // batch, 1) * (4 * self.head_dim)  # bytes of K and V
        return tilus.max(tilus.min(self.l2_bytes // per_head, hb), 1)

    def q_tile(self, sq, barrier, w):
        """TMA loads of consumer w's 64 query rows into sq ([d / 64][64, 64]), completing on barrier."""
        for c in tilus.static_range(self.head_dim // 64):
            self.tma.global_to_shared(src=self.gq, dst=sq[c], mbarrier=barrier,
                                      offsets=[self.row0 + 64 * w, self.h * self.head_dim + 64 * c])

    def kv_tile(self, g, dst, barrier, n):
        """TMA loads of key block n (keys n * block_n on of this sequence) of the kv head from g (K
        or V) into dst ([d / 64][block_n, 64]), completing on barrier."""
        for c in tilus.static_range(self.head_dim // 64):
            self.tma.global_to_shared(src=g, dst=dst[c], mbarrier=barrier,
                                      offsets=[self.k_start + n * self.block_n, self.hk * self.head_dim + 64 * c])

    def finish(self, o, m, l, w, sq):
        """Consumer w's rows of o / l to the output (rows past the sequence are not written) and their lse.
        o goes through the warp group's query tile sq (its last reader, Q K^T, has completed) and
        leaves by TMA stores of whole 128-byte rows: stored from the accumulators' registers, each
        32-byte sector of o got two 16-byte halves from two instructions. A tensor map is encoded
        on the host, so its bounds are o's (total_q rows), not the sequence's: the last tile of a
        sequence that ends inside it is stored from registers, masked at the sequence's end."""
        row = self.row0 + 64 * w
        l = self.row_sums(l)
        out = self.normalized(o, l)
        g = self.pv_n // 64
        if row + 64 <= self.q_end:
            for c, x in enumerate(out):
                if g == 1:
                    self.store_shared(sq[c], x.to(self.dtype))
                else:  # the accumulator's 64-column blocks into g of the tile's [64, 64] blocks
                    blocks = self.slice_shared(sq, [c * g, 0, 0], [0, 1, 2], [g, 64, 64]).permute([1, 0, 2])
                    self.store_shared(blocks, self.reshape(x.to(self.dtype), [64, g, 64]))
            with self.single_thread():
                for c in tilus.static_range(self.head_dim // 64):
                    self.tma.shared_to_global(sq[c], self.go_all, offsets=[row, self.h * self.head_dim + 64 * c])
                self.tma.commit_group()
        else:  # a tile past the sequence's end: the rows after it are the next sequence's (the map's bounds are o's)
            for c, x in enumerate(out):
                self.store_global(self.go, x.to(self.dtype), offsets=[row, self.h * self.head_dim + self.pv_n * c])
        self.store_global(self.glse, self.transpose(self.log_sum_exp(m, l)), offsets=[self.h, row])
        with self.single_thread():
            self.tma.wait_group(0, read=True)  # the tile stays in shared memory until the stores have read it

    # --- the body shared with flash_decoding.py ------------------------------------------------

    def attention(self, sq, blocks, masked, last, tile_row):
        """Key blocks last, last - 1, ..., last - blocks + 1 (the first `masked` of them masked)
        against the query rows from `tile_row` of the sequence; sq[w]: consumer w's query tile."""
        bn, stages = self.block_n, self.stages
        sk = self.shared_tensor(dtype=self.dtype, shape=[stages, self.head_dim // 64, bn, 64])
        sv = self.shared_tensor(dtype=self.dtype, shape=[stages, self.head_dim // 64, bn, 64])
        # persistent: o's own staging tiles where shared memory has room, so that the query tiles
        # are released for the next tile's Q as soon as the last Q K^T has read them
        tile_bytes = 64 * self.head_dim * 2
        room = 227 * 1024 - 1024 - 2 * self.consumers * tile_bytes - 2 * stages * bn * self.head_dim * 2
        so = (self.shared_tensor(dtype=self.dtype, shape=[self.consumers, self.head_dim // 64, 64, 64])
              if self.persistent and room >= 0 else None)
        if not self.specialized:
            self.simple(sq[0], sk, sv, blocks, masked, last, tile_row)
            return
        q_full = self.mbarrier.alloc(counts=[1] * self.consumers)
        q_empty = self.mbarrier.alloc(counts=[1] * self.consumers) if self.persistent else None
        k_full = self.mbarrier.alloc(counts=[1] * stages)
        v_full = self.mbarrier.alloc(counts=[1] * stages)
        k_empty = self.mbarrier.alloc(counts=[self.consumers] * stages)
        v_empty = self.mbarrier.alloc(counts=[self.consumers] * stages)
        # ping-pong: warp group w waits on turn[w] before issuing its GEMMs, then passes the turn on
        turn = self.mbarrier.alloc(counts=[128] * self.consumers) if self.pingpong and not self.named_turns else None
        many = self.consumers > 1  # the consumers need more registers than an even split gives
        with self.thread_group(thread_begin=128 * self.consumers, num_threads=32 * self.producer_warps):  # the producer
            if many:
                self.dec_max_nreg(24)
            with self.thread_group(thread_begin=0, num_threads=32):
                if self.persistent:
                    self.each_tile(lambda *tile: self.produce_tile(sq, sk, sv, q_full, q_empty, k_full, v_full, k_empty,
                                                                   v_empty, *tile))
                else:
                    with self.single_thread():
                        for w in tilus.static_range(self.consumers):
                            self.mbarrier.arrive_and_expect_tx(q_full[w], transaction_bytes=64 * self.head_dim * 2)
                            self.q_tile(sq[w], q_full[w], w)
                    self.produce(sk, sv, k_full, v_full, k_empty, v_empty, blocks, last, 0)
        for w in tilus.static_range(self.consumers):
            with self.thread_group(thread_begin=128 * w, num_threads=128):
                if many:
                    self.inc_max_nreg(self.consumer_registers())
                if self.pingpong and w == self.consumers - 1:
                    self.pass_turn(turn, 0)  # the first warp group starts
                if self.persistent:
                    self.each_tile(lambda *tile: self.consume_tile(w, sq[w], sk, sv, q_full[w], q_empty[w], k_full,
                                                                   v_full, k_empty, v_empty, turn,
                                                                   so[w] if so is not None else None, *tile))
                else:
                    self.consume(w, sq[w], sk, sv, q_full[w], k_full, v_full, k_empty, v_empty, turn, blocks, masked,
                                 last * bn, tile_row + 64 * w)
                if self.named_turns and w == 0:
                    # its barrier got one handing over more than it waited for (the start's): one
                    # wait more, and every named barrier ends empty
                    self.sync_threads(TURN_BARRIER, 256)

    def wait_turn(self, turn, w, g):
        """Ping-pong: warp group w waits for its turn to issue its GEMMs (the ring's g-th)."""
        if self.named_turns:  # warp group w's barrier completes with the one before handing over
            self.sync_threads(TURN_BARRIER + w, 256)
        elif self.pingpong:
            self.mbarrier.wait(turn[w], phase=g % 2)

    def pass_turn(self, turn, nxt):
        """Ping-pong: hands the turn to warp group nxt, without waiting."""
        if self.named_turns:
            self.named_barrier_arrive(TURN_BARRIER + nxt, 256)
        elif self.pingpong:
            self.mbarrier.arrive(turn[nxt])

    def produce(self, sk, sv, k_full, v_full, k_empty, v_empty, blocks, last, done, start=0):
        """K of block j (key block last - j), then V of block j - 1: the order the consumers take
        them in (the ring's count runs on from `done`; from j = start: the caller loaded K_0)."""
        for j in range(start, blocks + 1):
            if j < blocks:
                self.load_kv(self.gk, sk, k_full, k_empty, done + j, last - j)
            if j > 0:
                self.load_kv(self.gv, sv, v_full, v_empty, done + j - 1, last - (j - 1))

    def each_tile(self, body):
        """body(m_block, blocks, masked, done, tiles) for every tile with rows of this block of a
        persistent launch: `done` key blocks went through the K/V ring and the ping-pong turns
        before it, in `tiles` tiles. The launch's order is taken in rounds of one tile per block,
        a causal launch's L2 sections (longest_first) one after the other, and with causal every
        other round goes to the blocks in reverse order (a snake), so a block that took one of a
        round's longer tiles takes one of the next round's shorter ones. Dealt every persistent-th
        over the whole order, the first blocks got the longest tile of each round: the busiest
        block had 15 % more key blocks to run than the average on 132 SMs at the goal's causal
        shapes (d 128, S 4096 to 16384), the snake 0.1 to 0.4 % (makespans computed on paper; ncu
        of the old order, S 4096: the SMs active 79 % of the kernel's cycles, cuDNN's 84 %). A
        section's rounds start at the block its first tile has in one round robin over the launch
        (started at block 0 each, sections of fewer tiles than blocks would all go to the first
        blocks: 1.06 to 1.77 times the average where 0 gave 3.8 to 14 on paper)."""
        done = self.declare("done", int32, 0)
        tiles = self.declare("tiles_done", int32, 0)
        batch, heads, kv_heads, tiles_m, total_q, total_k = self.launch[:6]
        hb = heads * batch
        n = tilus.min(tiles_m * hb, self.persistent)  # the grid's blocks
        width = self.section_width(hb, batch, total_k) if self.causal else hb
        for first in range(0, hb, width):
            span = tilus.min(width, hb - first) * tiles_m  # the section's tiles
            # blocks counted from the one the section's first tile has in a round robin over the
            # launch, so that the sections' last, partial rounds go to different blocks
            i = (self.blockIdx.x + n - first * tiles_m % n) % n
            for r in range(0, span, n):  # a round: tile r + i to block i (causal: every other to n - 1 - i)
                t = r + i + (r // n % 2) * (n - 1 - 2 * i) if self.causal else r + i
                if t < span:
                    m_block, blocks, masked, runs = self.tile(first * tiles_m + t)
                    if runs:
                        body(m_block, blocks, masked, done, tiles)
                        done = done + blocks
                        tiles = tiles + 1

    def produce_tile(self, sq, sk, sv, q_full, q_empty, k_full, v_full, k_empty, v_empty, m_block, blocks, masked, done,
                     tiles):
        """The producer warp of a persistent launch, one tile: its first K, the consumers' query
        tiles once each released its last one (q_empty), then the rest of its K and V blocks."""
        if blocks > 0:  # the tile's first K loads while the consumers still finish the last tile
            self.load_kv(self.gk, sk, k_full, k_empty, done, blocks - 1)
        for w in tilus.static_range(self.consumers):
            self.mbarrier.wait(q_empty[w], phase=tiles % 2 ^ 1)
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(q_full[w], transaction_bytes=64 * self.head_dim * 2)
                self.q_tile(sq[w], q_full[w], w)
        self.produce(sk, sv, k_full, v_full, k_empty, v_empty, blocks, blocks - 1, done, 1)

    def consume_tile(self, w, sq, sk, sv, q_full, q_empty, k_full, v_full, k_empty, v_empty, turn, so, m_block, blocks,
                     masked, done, tiles):
        """Consumer warp group w of a persistent launch, one tile: consume() with the ring's slots and
        phases, the turns and the query tile's phase running on over the tiles; q_empty tells the
        producer that sq is free: after the tile's last Q K^T where o has its own staging tile so,
        else once o's TMA stores have read sq."""
        self.consume(w, sq, sk, sv, q_full, k_full, v_full, k_empty, v_empty, turn, blocks, masked,
                     (blocks - 1) * self.block_n, m_block * self.block_m + 64 * w, done, tiles % 2,
                     q_empty if so is not None else None, so)
        if so is None:
            with self.single_thread():  # the thread that issued o's TMA stores and waited for their reads
                self.mbarrier.arrive(q_empty)

    def consumer_registers(self):
        """What setmaxnreg gives each consumer thread: the SM's 64K registers less the producer warp
        group's 24 a thread, shared by the consumer warp groups (240 for two, 160 for three)."""
        return min(240, (65536 - 128 * 24) // (128 * self.consumers) // 8 * 8)

    def load_kv(self, g, s, full, empty, j, n):
        """The producer's TMA loads of one K or V tile (the j-th block processed, key block n) into
        slot j % stages."""
        stage = j % self.stages
        self.mbarrier.wait(empty[stage], phase=j // self.stages % 2 ^ 1)
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(full[stage], transaction_bytes=self.block_n * self.head_dim * 2)
            self.kv_tile(g, s[stage], full[stage], n)

    def release(self, barrier):
        with self.single_thread():  # the warp group's wgmma that read the slot have completed
            self.mbarrier.arrive(barrier)

    def consume(self, w, sq, sk, sv, q_full, k_full, v_full, k_empty, v_empty, turn, blocks, masked, last_col,
                tile_row, done=0, q_phase=0, q_empty=None, so=None):
        """One consumer warp group: 64 query rows from row `tile_row` of the sequence, key blocks
        from the one at key `last_col` down; `done` key blocks went through the ring (and the
        ping-pong turns) before, the query tile's barrier is at phase q_phase. With q_empty, sq is
        released once its last reader completed, and o leaves through `so`."""
        bn, stages = self.block_n, self.stages
        nxt = (w + 1) % self.consumers
        o = self.output()
        m = self.register_tensor(dtype=float32, shape=[64, 1], init=float("-inf"))
        l = self.new_row_sums()
        p16 = self.register_tensor(dtype=self.dtype, shape=[64, bn])
        # One score accumulator for every block: each wgmma accumulator is kept in registers
        # from its first use to the end of its scope, so one per step would hold registers the
        # output needs (with d = 256 ptxas then ignored setmaxnreg and spilled).
        s = self.register_tensor(dtype=float32, shape=[64, bn])
        alpha = self.register_tensor(dtype=float32, shape=[64, 1]) if self.rescale_between else None
        self.mbarrier.wait(q_full, phase=q_phase)  # also with no key block: finish() stores o through sq
        if blocks > 0:
            first = done % stages
            self.mbarrier.wait(k_full[first], phase=done // stages % 2)
            self.wait_turn(turn, w, done)
            self.assign(s, self.register_tensor(dtype=float32, shape=[64, bn], init=0.0))
            self.wgmma.fence()
            self.qk(s, sq, sk[first])
            self.wgmma.commit_group()
            self.pass_turn(turn, nxt)
            self.wgmma.wait_group(0)
            self.release(k_empty[first])
            p, a = self.softmax(self.mask(s, tile_row, last_col), m, l)
            if alpha is not None:  # o is still 0: no rescale before the first P V either
                self.assign(alpha, a)
            self.assign(p16, p.to(self.dtype))
            # Key blocks 1 .. masked - 1 need the mask, the rest do not (the same step traced twice).
            for j in range(1, masked):
                self.step(j, sq, sk, sv, k_full, v_full, k_empty, v_empty, turn, w, nxt, s, o, m, l, p16, alpha,
                          True, tile_row, last_col - j * bn, done)
            for j in range(tilus.max(masked, 1), blocks):
                self.step(j, sq, sk, sv, k_full, v_full, k_empty, v_empty, turn, w, nxt, s, o, m, l, p16, alpha,
                          False, tile_row, last_col - j * bn, done)
            if q_empty is not None:
                self.release(q_empty)  # every Q K^T of the tile has completed
            final = (done + blocks - 1) % stages
            self.mbarrier.wait(v_full[final], phase=(done + blocks - 1) // stages % 2)
            if alpha is not None:
                self.rescale(o, alpha)
            self.wgmma.fence()
            self.pv(p16, sv[final], o)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.release(v_empty[final])
        if q_empty is not None:
            if blocks == 0:
                self.release(q_empty)
        self.finish(o, m, l, w, sq if so is None else so)

    def step(self, j, sq, sk, sv, k_full, v_full, k_empty, v_empty, turn, w, nxt, s, o, m, l, p16, alpha, masked,
             tile_row, col0, done=0):
        """Key block j > 0: S_j's GEMM, then P_(j-1) V_(j-1)'s, then S_j's softmax while the latter runs
        (the ring's and the turns' count: done + j). With `alpha` (rescale_between), o is rescaled by
        block j - 1's factor between the two GEMMs, and block j's factor is kept for the next step."""
        stages = self.stages
        g = done + j
        stage, prev = g % stages, (g - 1) % stages
        self.mbarrier.wait(k_full[stage], phase=g // stages % 2)
        self.wait_turn(turn, w, g)
        self.assign(s, self.register_tensor(dtype=float32, shape=[64, self.block_n], init=0.0))
        self.wgmma.fence()
        self.qk(s, sq, sk[stage])
        self.wgmma.commit_group()
        if alpha is not None:  # while Q K^T runs (the compiler fences o's new values before P V)
            self.rescale(o, alpha)
        self.mbarrier.wait(v_full[prev], phase=(g - 1) // stages % 2)
        self.pv(p16, sv[prev], o)
        self.wgmma.commit_group()
        self.pass_turn(turn, nxt)
        self.wgmma.wait_group(1)  # S_j is ready; P V still runs
        self.release(k_empty[stage])
        p, a = self.softmax(self.mask(s, tile_row, col0) if masked else s, m, l)
        self.wgmma.wait_group(0)  # the compiler keeps it after the softmax (order_wgmma_waits)
        self.release(v_empty[prev])
        if alpha is None:
            self.rescale(o, a)
        else:
            self.assign(alpha, a)
        self.assign(p16, p.to(self.dtype))

    def rescale(self, o, alpha):
        """o[c] *= alpha (per row) for each accumulator."""
        for c in tilus.static_range(len(o)):
            self.assign(o[c], o[c] * alpha)

    # --- the variant without warp specialization (runs on the CPU backend too) ----------------

    def simple(self, sq, sk, sv, blocks, masked, last, tile_row):
        d = self.head_dim
        q_full = self.mbarrier.alloc(counts=[1])
        full = self.mbarrier.alloc(counts=[1] * self.stages)
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(q_full[0], transaction_bytes=64 * d * 2)
            self.q_tile(sq, q_full[0], 0)
        o = self.output()
        m = self.register_tensor(dtype=float32, shape=[64, 1], init=float("-inf"))
        l = self.new_row_sums()
        s = self.register_tensor(dtype=float32, shape=[64, self.block_n])
        if blocks > 0:
            self.simple_load(sk, sv, full, 0, last)
        self.mbarrier.wait(q_full[0], phase=0)
        for j in range(masked):
            self.simple_step(j, sq, sk, sv, full, s, o, m, l, True, tile_row, last, blocks)
        for j in range(masked, blocks):
            self.simple_step(j, sq, sk, sv, full, s, o, m, l, False, tile_row, last, blocks)
        self.finish(o, m, l, 0, sq)

    def simple_load(self, sk, sv, full, j, n):
        stage = j % self.stages
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(full[stage], transaction_bytes=2 * self.block_n * self.head_dim * 2)
            self.kv_tile(self.gk, sk[stage], full[stage], n)
            self.kv_tile(self.gv, sv[stage], full[stage], n)

    def simple_step(self, j, sq, sk, sv, full, s, o, m, l, masked, tile_row, last, blocks):
        stage = j % self.stages
        self.mbarrier.wait(full[stage], phase=j // self.stages % 2)
        if j + 1 < blocks:  # the next block's tiles load while this one is computed
            self.simple_load(sk, sv, full, j + 1, last - j - 1)
        self.assign(s, self.register_tensor(dtype=float32, shape=[64, self.block_n], init=0.0))
        self.wgmma.fence()
        self.qk(s, sq, sk[stage])
        self.wgmma.commit_group()
        self.wgmma.wait_group(0)
        p, alpha = self.softmax(self.mask(s, tile_row, (last - j) * self.block_n) if masked else s, m, l)
        self.rescale(o, alpha)
        self.wgmma.fence()
        self.pv(p.to(self.dtype), sv[stage], o)
        self.wgmma.commit_group()
        self.wgmma.wait_group(0)
        self.sync()  # every warp is done with the slot before the next load into it is issued


# --- host side ---------------------------------------------------------------------------------

_TILUS_DT = {"float16": float16, "bfloat16": bfloat16}
_KERNELS = {}


def _dtype_name(x):
    return str(x.dtype).replace("torch.", "")


def _kernel(dt, d, causal, specialized, **cfg):
    key = (dt, d, causal, specialized, tuple(sorted(kernel_config(cfg).items())))
    if key not in _KERNELS:
        _KERNELS[key] = FlashAttention(dt, d, causal, specialized=specialized, **cfg)
    return _KERNELS[key]


def flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, causal=False, scale=None,
                           specialized=None, out=None, lse=None, **cfg):
    """o, lse for packed sequences: q [total_q, heads, d], k/v [total_k, kv_heads, d], cu_seqlens int32
    [batch + 1]. torch CUDA tensors run the warp-specialized kernel, numpy arrays the simple one on
    the CPU backend (specialized=False forces the simple one); cfg: FlashAttention's parameters (the
    warp-specialized kernel on the GPU takes prefill_config's rule for those not given)."""
    kern, args, out, lse = prefill_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, causal, scale, specialized,
                                        out, lse, **cfg)
    kern(*args)
    return out, lse


def prefill_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, causal=False, scale=None, specialized=None,
                 out=None, lse=None, **cfg):
    """(kernel, its arguments, o, lse) of flash_attention_varlen's launch, not launched."""
    on_cpu = not hasattr(q, "is_cuda") or not q.is_cuda
    if specialized is None:
        specialized = not on_cpu
    total_q, heads, d = q.shape
    total_k, kv_heads, _ = k.shape
    batch = len(cu_seqlens_q) - 1
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    if on_cpu:
        import numpy as np
        out = np.empty_like(q) if out is None else out
        lse = np.empty((heads, total_q), np.float32) if lse is None else lse
        dt = float16 if q.dtype == np.float16 else bfloat16
    else:
        import torch
        out = torch.empty_like(q) if out is None else out
        lse = torch.empty((heads, total_q), dtype=torch.float32, device=q.device) if lse is None else lse
        dt = _TILUS_DT[_dtype_name(q)]
    if heads % kv_heads:
        raise ValueError(f"flash_attention: {heads} query heads do not share {kv_heads} kv heads evenly")
    if specialized and not on_cpu:  # the rule's parameters, under the caller's
        cfg = {**prefill_config(d, causal, _multiprocessors(q), max_seqlen_q, dt), **cfg}
    kern = _kernel(dt, d, causal, specialized, **cfg)
    return (kern, (batch, heads, kv_heads, max_seqlen_q, total_q, total_k, scale, q, k, v, out, lse, cu_seqlens_q,
                   cu_seqlens_k), out, lse)


SHORT_SEQLEN = 8192  # d 128 without causal: below this query length, the persistent 176-key kernel with quad_sums


def prefill_config(head_dim, causal, sms=0, seqlen=0, dtype="float16"):
    """The rule for a launch on the GPU (`sms` multiprocessors, queries of at most `seqlen`, 0 if
    not known, `dtype` tilus's or its name; no rule differs by it now): FlashAttention's
    parameters that differ from its defaults, each the fastest of `bench/attention.py
    --candidates` at the goal's shapes on the H200 (the calls and their figures: docs/gpu.md,
    "Attention on Hopper"). d = 64: without causal FA3's 192 x 128 tile in three consumer warp
    groups without ping-pong, with causal the persistent kernel in 3 stages. d = 128: without
    causal 176-key blocks, below SHORT_SEQLEN queries the persistent kernel (f16 and bf16: ahead of
    the kernels without persistent blocks and of the persistent one on 128-key blocks in the mid2
    and figures calls of 2026-11-29, 1.026 / 1.033 and 1.024 / 1.028x cuDNN against the rule's
    1.009 / 1.010 and 1.010 / 1.017) with the row sums as quad partial sums (quad_sums; ahead at
    S 4096 in both mid calls of 2026-11-29 ~11:45 / ~12:30, f16 +1.0 / +2.4 %, bf16 +2.7 / +0.3 %);
    with causal the persistent kernel without ping-pong (at 16384 queries too since the mid calls
    of 2026-11-29 ~09:00 / ~09:40: 1.6-3 % ahead of the kernel without persistent blocks, f16 in
    both, bf16 in the second). d = 256: 80-key blocks. At d >= 128 o's rescale between the GEMMs.
    Without `sms` the persistent kernel is left out."""
    persistent = dict(persistent=sms) if sms else {}
    if head_dim == 64:
        return {**persistent, "stages": 3} if causal else dict(consumers=3, block_n=128, pingpong=False)
    if head_dim == 128:
        if causal:
            return {**persistent, "rescale_between": True, "pingpong": False}
        if 0 < seqlen < SHORT_SEQLEN:
            return {**persistent, "block_n": 176, "rescale_between": True, "quad_sums": True}
        return dict(block_n=176, rescale_between=True)
    return dict(block_n=80, rescale_between=True)


def prefill_candidates(head_dim, causal, sms=0, seqlen=0, dtype="float16"):
    """The changes to prefill_config's choice that `bench/attention.py --candidates` times against it
    at a prefill shape (launches take them on top of the rule; the rule and its candidates of a
    launch with queries of at most `seqlen` of `dtype`); each fits the registers and shared memory
    (no spills). With `sms`, the persistent kernel of one block per SM where the rule runs without it,
    else the kernel without (d <= 128: at d = 256 its loop state spilled 4 bytes); the rule's
    ping-pong, o's rescale between the GEMMs and (with ping-pong) the turns at named barriers
    turned the other way, except at d = 128 without causal (no flip ever won there); the other
    stage count where it fits, FA3's tile at d = 64 with causal, the default 64-key blocks at
    d = 256, and at d = 128 without causal, with `sms`, the other two of 176-key blocks with and
    without persistent blocks and the persistent kernel on 128-key blocks (176-key blocks compute
    4224 keys at seqlen 4096). What was dropped as never the fastest: docs/gpu.md,
    "Attention on Hopper"."""
    rule = prefill_config(head_dim, causal, sms, seqlen, dtype)
    no_flips = not causal and head_dim == 128  # there no flip of ping-pong, the turns or the rescale ever won
    out = [dict(persistent=0 if rule.get("persistent") else sms)] if sms and head_dim <= 128 and not no_flips else []
    out += [] if no_flips else [dict(pingpong=not rule.get("pingpong", True)), dict(
        rescale_between=not rule.get("rescale_between", False))]
    if rule.get("pingpong", True) and not no_flips:  # the turns at named barriers (FA3's) or at mbarriers, the other way
        out.append(dict(named_turns=not rule.get("named_turns", False)))
    if head_dim == 64:
        out += [dict(stages=2), dict(consumers=3, block_n=128)] if causal else [dict(stages=3)]
    if head_dim == 128 and causal:
        out.append(dict(stages=3))
    if no_flips:
        out.append(dict(quad_sums=not rule.get("quad_sums", False)))
    if no_flips and sms:  # the rule's kernel is one of these three
        out += [c for c in (dict(persistent=0, block_n=176), dict(persistent=sms, block_n=176),
                            dict(persistent=sms, block_n=128))
                if (c["persistent"], c["block_n"]) != (rule.get("persistent", 0), rule["block_n"])]
    if head_dim == 256:
        out.append(dict(block_n=64))
    return out


def kernel_config(cfg):
    """cfg without what equals no parameter (persistent=0: the kernel without persistent blocks,
    as without it), so that one kernel is compiled once under either spelling."""
    return {k: v for k, v in cfg.items() if not (k == "persistent" and not v)}


def config_name(cfg):
    return " ".join(f"{k}={v}" for k, v in sorted(cfg.items())) or "default"


_SMS = {}


def _multiprocessors(x):
    """The multiprocessors of the GPU that torch tensor x lives on."""
    import torch
    if x.device not in _SMS:
        _SMS[x.device] = torch.cuda.get_device_properties(x.device).multi_processor_count
    return _SMS[x.device]


_OFFSETS = {}


def _uniform_offsets(batch, seqlen, like):
    """cu_seqlens of `batch` sequences of `seqlen` where `like` lives (made once per shape and
    device: a launch should not pay for them)."""
    gpu = hasattr(like, "is_cuda") and like.is_cuda
    key = (batch, seqlen, str(like.device) if gpu else "cpu")
    if key not in _OFFSETS:
        if gpu:
            import torch
            _OFFSETS[key] = torch.arange(0, (batch + 1) * seqlen, seqlen, dtype=torch.int32, device=like.device)
        else:
            import numpy as np
            _OFFSETS[key] = np.arange(0, (batch + 1) * seqlen, seqlen, dtype=np.int32)
    return _OFFSETS[key]


def flash_attention(q, k, v, causal=False, scale=None, **kw):
    """o, lse for a dense batch: q [batch, seqlen_q, heads, d], k/v [batch, seqlen_k, kv_heads, d];
    o like q, lse [batch, heads, seqlen_q]."""
    batch, sq, heads, d = q.shape
    sk, kv_heads = k.shape[1], k.shape[2]
    cq, ck = _uniform_offsets(batch, sq, q), _uniform_offsets(batch, sk, q)
    o, lse = flash_attention_varlen(q.reshape(batch * sq, heads, d), k.reshape(batch * sk, kv_heads, d),
                                    v.reshape(batch * sk, kv_heads, d), cq, ck, sq, causal, scale, **kw)
    return o.reshape(batch, sq, heads, d), lse.reshape(heads, batch, sq).transpose(1, 0, 2) \
        if not hasattr(lse, "permute") else lse.reshape(heads, batch, sq).permute(1, 0, 2)


def reference(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, scale=None):
    """float64 numpy o [total_q, heads, d] and lse [heads, total_q] of the packed layout."""
    import numpy as np
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    total_q, heads, d = q.shape
    group = heads // k.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    o = np.zeros_like(q)
    lse = np.full((heads, total_q), -np.inf)
    for b in range(len(cu_seqlens_q) - 1):
        q0, q1, k0, k1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]), int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        for h in range(heads):
            s = q[q0:q1, h] @ k[k0:k1, h // group].T * scale
            if causal:
                i = np.arange(q1 - q0)[:, None]
                j = np.arange(k1 - k0)[None, :]
                s = np.where(j <= i + (k1 - k0) - (q1 - q0), s, -np.inf)
            mx = s.max(axis=1, keepdims=True) if s.shape[1] else np.full((s.shape[0], 1), -np.inf)
            seen = np.isfinite(mx[:, 0])
            e = np.exp(s - np.where(np.isfinite(mx), mx, 0))
            tot = e.sum(axis=1, keepdims=True)
            o[q0:q1, h] = np.where(seen[:, None], (e / np.where(tot > 0, tot, 1)) @ v[k0:k1, h // group], 0)
            lse[h, q0:q1] = np.where(seen, np.log(np.where(tot[:, 0] > 0, tot[:, 0], 1)) + mx[:, 0], -np.inf)
    return o, lse


def random_packed(lens_q, lens_k, heads, kv_heads, d, seed=0):
    """numpy cu_seqlens_q, cu_seqlens_k, q, k, v (float16 in [-1, 1]) of sequences of these lengths."""
    import numpy as np
    rng = np.random.default_rng(seed)
    cq = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    ck = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q = rng.uniform(-1, 1, (cq[-1], heads, d)).astype(np.float16)
    k = rng.uniform(-1, 1, (ck[-1], kv_heads, d)).astype(np.float16)
    v = rng.uniform(-1, 1, (ck[-1], kv_heads, d)).astype(np.float16)
    return cq, ck, q, k, v


if __name__ == "__main__":
    import os
    import numpy as np
    from common import on_gpu, timed
    gpu = on_gpu()
    check_only = os.environ.get("TILUS_EXAMPLES_QUICK")  # correctness only (sanitizer runs)
    cases = [((100, 37), (100, 200), 4, 2, 64, True), ((130,), (130,), 2, 2, 128, False),
             ((300, 77), (300, 200), 4, 2, 128, True), ((65, 1), (300, 64), 2, 1, 256, True)]
    for lens_q, lens_k, heads, kv_heads, d, causal in cases:
        cq, ck, q, k, v = random_packed(lens_q, lens_k, heads, kv_heads, d)
        want_o, want_lse = reference(q, k, v, cq, ck, causal)
        if gpu:
            import torch
            args = [torch.from_numpy(x).cuda() for x in (q, k, v, cq, ck)]
            o, lse = flash_attention_varlen(*args[:3], args[3], args[4], max(lens_q), causal)
            o, lse = o.float().cpu().numpy(), lse.cpu().numpy()
        else:
            o, lse = flash_attention_varlen(q, k, v, cq, ck, max(lens_q), causal)
        err = np.abs(o - want_o).max()
        finite = np.isfinite(want_lse)
        lerr = np.abs(np.where(finite, lse - want_lse, 0)).max()
        ok = err < 2e-2 and lerr < 1e-3 and (np.isfinite(lse) == finite).all()
        print(f"flash_attention q {lens_q} k {lens_k} heads {heads}/{kv_heads} d {d} causal {causal}: "
              f"{'PASS' if ok else 'FAIL'} (max abs err o {err:.3g}, lse {lerr:.3g})")
        if not ok:
            raise SystemExit(1)
    if gpu and not check_only:
        import torch
        for causal in (False, True):
            b, s, h, d = 4, 4096, 16, 128
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.float16) for _ in range(3))
            ms = timed(lambda: flash_attention(q, k, v, causal=causal), "cuda")
            flops = 4 * b * s * s * h * d / (2 if causal else 1)
            print(f"flash_attention b {b} s {s} h {h} d {d} causal {causal}: {ms:.3f} ms, {flops / ms / 1e9:.0f} TFLOP/s")
