"""Quantized matmul: c = a @ dequant(w).T, a f16 [m, k], w low-precision codes [n, k] (the
nn.Linear convention: a row per output) stored as bytes along k (two 4-bit codes per byte, low
nibble first), group-wise f16 scales [k / group, n] and, for unsigned codes, zero points
[k / group, n]: dequant(w)[j, i] = (w[j, i] - zero[i / group, j]) * scale[i / group, j].

Each k-step brings a tile of a, the tile's weight bytes and its scales into shared memory with
cp.async (`stages` in flight); the bytes are loaded straight into the registers of the
tensor-core operand (layout inference derives their layout from the dot's, back through the
transpose, the cast and the view), widened to f16 (the vectorized conversions for int4/uint4
and fp8), scaled and fed to mma. Small m splits k over blockIdx.z (split-K): each split stores
its partial sums and the last of a tile's splits to finish adds them up (MatmulA16WxStream deals
the k tiles of all output tiles out evenly to a grid of whole blocks per SM instead: stream-K);
for small m the weights are repacked once into fragment order so that each thread loads its
operand bytes as 16-byte vectors; for 4-bit integer codes under f16 a second repacking (magic_layout) lets the magic
decode widen whole words by one LOP3 and one HADD2/HFMA2 per pair (magic_step). From m = 33 on an sm_90a GPU, MatmulA16WxHopper runs the product transposed on wgmma
with the dequantized weights as its register operand (warp-specialized, TMA on an mbarrier
ring, persistent). QuantizedMatmul picks the kernel and its tiles by a rule measured on the H100 at
N = K = 8192, or, with tune=True, by timing its candidates once per shape."""
import os
import re
import sys

import numpy as np

import tilus
from tilus import bfloat16, float16, float32, int32, int64, uint8, uint32
from common import ArrivalCounters, last_to_arrive, reset_arrivals, timed_configs, to_numpy
from common import from_host_array, host_array, round_to  # noqa: F401 (the tests take them from here too)

WEIGHT_TYPES = ["int8", "int4", "uint4", "int3", "float8_e4m3", "float8_e5m2", "float6_e3m2", "float4_e2m1"]


class SplitK(tilus.Script):
    """The end of a split over k that both kernels share (a base class: its `if` on a kernel
    value is traced as the body's are)."""

    def add_up_splits(self, acc, gc, gp, arrivals, tile, split, splits, om, on, before):
        """The split's float32 partial sums acc [bm, bn] (rows om.., columns on.. of c) into
        gp[split] (gp: [splits, m, n] float32), its arrival counted in arrivals[tile], and the
        tile's last split to arrive adds gp[:] up into gc (16 rows at a time: a whole tile's
        partials may not fit in registers) and sets the counter back to zero
        (common.last_to_arrive: the stores before the arrival, the loads after; `before` its
        shared slot, allocated before any asynchronous copy's). (The last split adding the others'
        partial sums to its own registers instead measured slower on the H200: 25.0 against 21.3 us
        at 3584 x 18944, m = 16, the mid call of 2026-11-29 09:40; removed.)"""
        bm, bn = acc.shape
        self.store_global(gp, self.unsqueeze(acc, 0), offsets=[split, om, on])
        if last_to_arrive(self, arrivals, tile, splits, slot=before):
            rows = min(bm, 16)
            for r in range(bm // rows):
                p = self.load_global(gp, offsets=[0, om + r * rows, on], shape=[splits, rows, bn])
                self.store_global(gc, self.sum(p, dim=0).to(gc.dtype), offsets=[om + r * rows, on])
            reset_arrivals(self, arrivals, tile)  # ready for the next launch


class MatmulA16Wx(SplitK):
    """One split of the k range per blockIdx.z: `stages` tiles of a and of b's bytes in flight
    with cp.async (the passes insert the waits and barriers), dequantized in registers, the f16
    tile handed to `dot` through shared memory. With split_k == 1 the block writes c (f16 or bf16),
    else its float32 partial sums into partial[z], counts its arrival in counters[tile] (int32
    [m tiles, n tiles], zero before the launch), and the tile's last split sums partial[:] into c
    and sets the counter back to zero."""

    def __init__(self, wtype, group=128, block_m=16, block_n=128, block_k=64, stages=4, split_k=1, warps=4,
                 repacked=False, atype=float16, magic=False, late_scale=False, tma=False, unroll=False,
                 min_blocks=None, bounded=False, split_red=False, interleave=False, partials_only=False,
                 k_major=False, fixed_sums=False, two_sums=False, weights_a=False):
        super().__init__()
        # weights_a (magic decode with late_scale, 8-row tiles: m <= 8): the product run transposed,
        # c^T = w a^T, the weights mma's A operand (16 weight rows an mma, magic_a_layout's order:
        # repack_for_magic(weights_a=True)) and a's 8 rows its B operand: half the mma and half the
        # ldmatrix of a of the 16-row tile's, whose rows past m are zeros. (16-row tiles, block_m=16:
        # two mma an A fragment, the decode shared by a's 16 rows as the 16-row kernel's.)
        self.weights_a = weights_a
        # interleave: split z takes the k tiles z, z + s, z + 2 s, ... (s splits) instead of a run,
        # so that a tile's splits read neighbouring weight tiles at the same time (the repacked
        # weights are a run of k tiles per 128 rows): at any moment the grid reads s x 8 KB
        # contiguous per tile, not s streams per_split x 8 KB apart. (The H200 timed more
        # blocks an SM slower, not faster: 8192 x 28672 in 8 splits 54 us, in 4 45 us; the
        # streams' spacing and DRAM locality are the suspects; interleaved, 2-3 % faster at 3 of 4
        # shapes at m = 1.) Its copies past the split's last tile fall past the end of k: bounded
        # by construction.
        self.interleave = interleave
        # partials_only (a measuring aid, never offered by the tuner; c is not written): the
        # splits store their partial sums and end there, without the arrival counter and the
        # last split's sum, so that timing it against the same kernel with its ending gives the
        # ending's share of the time (an earlier probe put it at about 3 us at m = 1).
        assert not partials_only or split_k > 1 and not split_red, "partials_only: the counter ending of a split"
        self.partials_only = partials_only
        # k_major (magic decode by cp.async): the weights repacked k tile after k tile
        # (repack_for_magic(k_major=True)), so that the blocks that work on the same k step of
        # different output tiles read one contiguous run (the 64 tiles of 8192 x 8192: 512 KB)
        # instead of runs a tile's whole k range apart. (The H200 timed the splits of a tile reading
        # neighbouring k tiles, interleave=True, 2-3 % faster, and more blocks at once, more
        # runs apart, slower: 4 blocks an SM 20-30 % slower than 2 or 3.)
        self.k_major = k_major
        # fixed_sums (split_k > 1, one tile of rows: m <= block_m): the splits' ending in one atomic
        # per element and no fence, barrier or arrival counter. Each split adds its float32 sum in
        # fixed point (x 2^32, toward zero) plus 2^56 into a zeroed int64 per element of c (the
        # counters' memory, [m, n]; atom.add.u64) and reads the value before: where the count in
        # the top bits (the total's (t + 2^55) >> 56) reaches split_k the thread holds the whole
        # sum and stores it into c and the int64 back to zero. Exact to 2^-32 a split (float32
        # sums round at 2^-24 of their magnitude; below f16's smallest subnormal, 2^-24, either
        # way) while |sums| < 2^23 (f16 c: 65504 at most). The counter ending's chain after the last
        # tile (the partial sums' stores and the fence that waits for them, the counter's atomic,
        # two barriers, the last split's loads) is then one atomic's round trip.
        assert not fixed_sums or split_k > 1 and not split_red and not partials_only, \
            "fixed_sums: an ending of a split over k"
        self.fixed_sums = fixed_sums
        self.bounded = bounded  # no copies past the split's k range (see load_stage)
        # split_red: a tile's 2 to 8 splits run as one cluster (blockIdx.z its rank; sm_90, f16 c):
        # the last split (the shortest k range where the splits do not divide k) stores its f16
        # tile of c before the cluster's barrier, the others add theirs into c after it by
        # red.global.add (f16 pairs), fire and forget: no partial sums, no arrival counter. It
        # trades precision: c is rounded to f16 2 s - 1 times for s splits (each split's sum and
        # each add: up to (2 s - 1) 2^-11 of c's largest partial magnitude, where the counter
        # ending sums in float32 and rounds once); so only QuantizedMatmul(f16_split_sums=True)
        # offers it. (The same cluster ending with float32 partial sums measured 10-25 % slower
        # than the counter on the H200, the clusters' placement costing more than the atomic.)
        assert not split_red or 2 <= split_k <= 8 and block_m == 16 and atype == float16, \
            "split_red: 2 to 8 splits (one cluster, the portable most) of 16-row tiles, f16 c"
        self.split_red = split_red
        # unroll: the k loop (cp.async) unrolled by the stage count, so that each copy's stage is a
        # constant and ptxas keeps no per-step shared address work (SASS, 16 x 128 x 128 magic
        # late-scale: 277-284 instructions a k tile for int4 against 313-365 rolled, whose count
        # ptxas varied by split); it takes more registers (168-191), so min_blocks (attrs.min_blocks:
        # blocks an SM must hold at once) caps them: 4 -> 128, spilling only outside the loop.
        self.unroll, self.min_blocks = unroll, min_blocks
        # A k tile within one scale group, or (weights_a, late_scale) two whole groups: each group's
        # product late-scaled by its own scales (twice the weights a stage: the loop's fixed work, its
        # copies' address work, wait and barrier, over twice the weights).
        assert group % block_k == 0 or weights_a and late_scale and block_k == 2 * group, \
            "a k tile must not straddle two scale groups (weights_a: two whole ones)"
        assert block_k * wtype.bits % 32 == 0, "a k tile's weight bytes must be whole 4-byte words (cp.async)"
        self.wtype, self.group, self.stages, self.split_k, self.warps = wtype, group, stages, split_k, warps
        self.atype = atype  # of a, c, the scales and the zero points: float16 or bfloat16
        self.block_m, self.block_n, self.block_k = block_m, block_n, block_k
        # repacked: b holds the weights in fragment order (repack_weights), so each thread loads
        # its operand bytes as 16-byte vectors.
        self.repacked = repacked
        if repacked:
            assert repackable(wtype.bits, 16 if weights_a else block_m, block_n, block_k, warps), \
                "no fragment order for this tile"
        # magic: b holds 4-bit codes in magic_layout's order (repack_for_magic), widened to f16 by
        # bit tricks on whole 32-bit words (magic_step) instead of the general conversion.
        self.magic, self.late_scale = magic, late_scale
        assert magic or not late_scale, "late_scale is an option of the magic decode"
        # two_sums (late_scale): the tile's product in two float32 sums, the k quarters 0, 2 and 1, 3,
        # added before the scale: each sum's chain of dependent mma is half the tile's (ncu on the
        # H200, 8192^2 at m = 1: a warp issued once in 6 cycles, stalled on fixed-latency
        # dependencies, the math pipe and the barrier, not on memory).
        assert not two_sums or late_scale, "two_sums: an option of late_scale"
        self.two_sums = two_sums
        if magic:
            assert repacked and magic_applies(wtype, atype, block_k), "the magic decode takes 4-bit codes to f16 in k tiles of 64s"
        assert not weights_a or late_scale and block_m in (8, 16) and not two_sums and not tma and not split_red, \
            "weights_a: the late-scaled magic decode on 8-row tiles"
        # tma (sm_90, with magic): each stage's tiles (a, the weights as rows of 128 bytes, the
        # scales and zero points) are TMA boxes one thread issues on the stage's mbarrier, in
        # place of every thread's cp.async (their address and predicate work); a k tile's box
        # past the split's range is not issued. Needs 16-byte rows: k and n multiples of 8.
        self.by_tma = tma
        if tma:
            assert magic, "the TMA copies are an option of the magic decode"
        assert not k_major or magic and not tma, "k_major: the magic decode's weights by cp.async"

    def finish(self, m, n, bm, bn, om, on, c, partial, counters, acc, before):
        """The block's tile acc [bm, bn] of c (blocks over (m tiles, n tiles, splits)), or with
        split_k > 1 its partial sums and, in the tile's last split, their sum (weights_a: acc^T)."""
        at = self.atype
        if self.weights_a:
            acc = self.transpose(acc)
        gc = self.global_view(c, dtype=at, shape=[m, n])
        if self.split_k == 1:
            self.store_global(gc, acc.to(at), offsets=[om, on])
        elif self.split_red:  # the last split (the shortest k range) stores, the others add
            tile = acc.to(at)
            if self.blockIdx.z == self.split_k - 1:
                self.store_global(gc, tile, offsets=[om, on])
            self.cluster.sync()
            if self.blockIdx.z < self.split_k - 1:
                self.atomic.global_add(gc, tile, offsets=[om, on])
        elif self.partials_only:
            self.store_global(self.global_view(partial, shape=[self.split_k, m, n]), self.unsqueeze(acc, 0),
                              offsets=[self.blockIdx.z, om, on])
        elif self.fixed_sums:  # (om = 0: one tile of rows; see __init__)
            splits = self.split_k
            sums = self.global_view(counters, dtype=int64, shape=[m, n])
            mine = (acc * 4294967296.0).to(int64) + (1 << 56)
            total = self.atomic.global_add(sums, mine, offsets=[om, on]) + mine  # (rows past m: skipped, 0)
            last = ((total + (1 << 55)) >> 56) == splits
            value = ((total - (splits << 56)).to(float32) * (1.0 / 4294967296.0)).to(at)
            # The element's column where this thread's add was the last, else n (past c: not written).
            column = self.where(last, self.register_tensor(dtype=int32, shape=[bm, bn], init=lambda i, j: on + j), n)
            self.store_global_scatter(gc, dim=1, indices=column, values=value)
            self.store_global_scatter(sums, dim=1, indices=column,
                                      values=self.register_tensor(dtype=int64, shape=[bm, bn], init=0))
        else:
            gp = self.global_view(partial, shape=[self.split_k, m, n])
            arrivals = self.global_view(counters, dtype=int32, shape=[tilus.cdiv(m, bm), tilus.cdiv(n, bn)])
            self.add_up_splits(acc, gc, gp, arrivals, [self.blockIdx.x, self.blockIdx.y], self.blockIdx.z,
                               self.split_k, om, on, before)

    def __call__(self, m: int32, n: int32, k: int32, a: tilus.void_p, b: tilus.void_p, scales: tilus.void_p,
                 zeros: tilus.void_p, c: tilus.void_p, partial: ~float32, counters: tilus.void_p):
        # (counters: int32 arrival counters, or fixed_sums' int64 sums)
        bm, bn, bk, stages = self.block_m, self.block_n, self.block_k, self.stages
        bits = self.wtype.bits
        self.attrs.blocks = [tilus.cdiv(m, bm), tilus.cdiv(n, bn), self.split_k]
        self.attrs.warps = self.warps
        if self.split_red:
            self.attrs.cluster_blocks = [1, 1, self.split_k]
        if self.min_blocks:
            self.attrs.min_blocks = self.min_blocks
        om, on = self.blockIdx.x * bm, self.blockIdx.y * bn
        per_split = tilus.cdiv(tilus.cdiv(k, bk), self.split_k)
        if self.interleave:  # split z: k tiles z, z + s, z + 2 s, ...
            first, stride = self.blockIdx.z, self.split_k
            steps = tilus.max(tilus.cdiv(tilus.cdiv(k, bk) - first, stride), 0)
        else:  # split z: a run of per_split k tiles
            first, stride = self.blockIdx.z * per_split, 1
            steps = tilus.max(tilus.min(per_split, tilus.cdiv(k, bk) - first), 0)
        at = self.atype
        ga = self.global_view(a, dtype=at, shape=[m, k])
        rows = bn * bk * bits // 8 // 16  # 16-byte rows of one repacked tile
        # Codes of 1, 2, 4 or 8 bits go through registers as bytes (a thread's bytes hold whole
        # codes); 3-, 5-, 6- and 7-bit codes straddle bytes, so their tiles are typed in shared
        # memory and each code is loaded by itself.
        as_bytes = self.repacked or 8 % bits == 0
        if self.k_major:
            gb = self.global_view(b, dtype=uint8, shape=[tilus.cdiv(k, bk), tilus.cdiv(n, bn), rows, 16])
        elif self.repacked:
            gb = self.global_view(b, dtype=uint8, shape=[tilus.cdiv(n, bn), tilus.cdiv(k, bk), rows, 16])
        elif as_bytes:
            gb = self.global_view(b, dtype=uint8, shape=[n, k * bits // 8])
        else:
            gb = self.global_view(b, dtype=self.wtype, shape=[n, k])
        gs = self.global_view(scales, dtype=at, shape=[tilus.cdiv(k, self.group), n])
        gz = self.global_view(zeros, dtype=at, shape=[tilus.cdiv(k, self.group), n])
        sa = self.shared_tensor(dtype=at, shape=[stages, bm, bk])
        if self.repacked:
            sb = self.shared_tensor(dtype=uint8, shape=[stages, rows, 16])
        elif as_bytes:
            sb = self.shared_tensor(dtype=uint8, shape=[stages, bn, bk * bits // 8])
        else:
            sb = self.shared_tensor(dtype=self.wtype, shape=[stages, bn, bk])
        # The k tile's scales (and zero points) travel with its operands: a synchronous load in
        # the loop would cost a memory latency per step.
        groups = max(1, bk // self.group)  # the scale groups of a k tile (its scales' and zero points' rows)
        ss = self.shared_tensor(dtype=at, shape=[stages, groups, bn])
        sz = self.shared_tensor(dtype=at, shape=[stages, groups, bn])
        acc = self.register_tensor(dtype=float32, shape=[bn, bm] if self.weights_a else [bm, bn], init=0.0)
        unsigned = not self.wtype.is_signed()  # unsigned codes carry a zero point
        # The split-K arrival's old count, handed to the block's threads (allocated before the
        # ring: no copy in flight may target its bytes).
        before = (self.shared_tensor(dtype=int32, shape=[1, 1])
                  if self.split_k > 1 and not self.split_red and not self.fixed_sums else None)

        if self.by_tma:
            ktiles = tilus.cdiv(k, bk)
            lines = rows // 8  # 128-byte rows of one weight tile: one box ([lines, 128] bytes)
            gw = self.global_view(b, dtype=uint8, shape=[tilus.cdiv(n, bn) * ktiles * lines, 128])
            sw = self.shared_tensor(dtype=uint8, shape=[stages, lines, 128])
            sb = self.reshape_shared(sw, [stages, rows, 16])
            full = self.mbarrier.alloc(counts=[1] * stages)
            stage_bytes = bm * bk * 2 + rows * 16 + bn * 2 * (2 if unsigned else 1)

            def tma_stage(step, stage):  # one thread
                kt = first + step * stride
                self.mbarrier.arrive_and_expect_tx(full[stage], transaction_bytes=stage_bytes)
                self.tma.global_to_shared(src=ga, dst=sa[stage], offsets=[om, kt * bk], mbarrier=full[stage])
                self.tma.global_to_shared(src=gw, dst=sw[stage], offsets=[(self.blockIdx.y * ktiles + kt) * lines, 0],
                                          mbarrier=full[stage])
                self.tma.global_to_shared(src=gs, dst=ss[stage], offsets=[kt * bk // self.group, on],
                                          mbarrier=full[stage])
                if unsigned:
                    self.tma.global_to_shared(src=gz, dst=sz[stage], offsets=[kt * bk // self.group, on],
                                              mbarrier=full[stage])

            for s in tilus.static_range(stages - 1):
                with self.single_thread():
                    if s < steps:
                        tma_stage(s, s)
            for step in range(steps):
                stage = step % stages
                self.mbarrier.wait(full[stage], phase=step // stages % 2)
                acc = self.magic_step(k, sa[stage], sb[stage], ss[stage], sz[stage], acc)
                # The passes' barrier before the boxes (this tile's reads before any TMA write)
                # also orders the last tile's reads before its stage is refilled.
                with self.single_thread():
                    if step + stages - 1 < steps:
                        tma_stage(step + stages - 1, (step + stages - 1) % stages)
            self.finish(m, n, bm, bn, om, on, c, partial, counters, acc, before)
            return

        ktiles = tilus.cdiv(k, bk)

        def load_stage(step, stage):
            # bounded: a k tile past the split's range is copied from past the end of k, so that the
            # bounds predicates zero-fill it with no read (else the last stages - 1 steps copy the
            # next split's first tiles, which its own block reads too: 3 of 16 tiles more at split
            # 4 of k = 8192); the copies stay unconditional, so the waits and barriers do not change.
            # (interleaved, a tile past the split's last is past the end of k: bounded as it is)
            kt = first + step * stride
            kt = tilus.select(step < steps, kt, ktiles) if self.bounded and not self.interleave else kt
            self.copy_async(ga, sa[stage], offsets=[om, kt * bk])
            if self.k_major:
                self.copy_async(gb, sb[stage], offsets=[kt, self.blockIdx.y, 0, 0], dims=[2, 3])
            elif self.repacked:
                self.copy_async(gb, sb[stage], offsets=[self.blockIdx.y, kt, 0, 0], dims=[2, 3])
            else:
                kb = kt * bk
                self.copy_async(gb, sb[stage], offsets=[on, kb * bits // 8 if as_bytes else kb])
            self.copy_async(gs, ss[stage], offsets=[kt * bk // self.group, on])
            if unsigned:
                self.copy_async(gz, sz[stage], offsets=[kt * bk // self.group, on])
            self.copy_async_commit_group()

        for s in tilus.static_range(stages - 1):  # the prologue, unrolled while tracing
            load_stage(s, s)
        for step in self.range(steps, unroll=stages if self.unroll else None):
            if self.magic:
                # The next stage's copies after this tile's shared reads: the barrier after the
                # wait for this tile also orders the last tile's reads before them (one barrier a
                # tile, not two).
                acc = self.magic_step(k, sa[step % stages], sb[step % stages], ss[step % stages], sz[step % stages], acc)
                load_stage(step + stages - 1, (step + stages - 1) % stages)
            else:
                load_stage(step + stages - 1, (step + stages - 1) % stages)
                acc = self.plain_step(sa[step % stages], sb[step % stages], ss[step % stages], sz[step % stages], acc)
        self.finish(m, n, bm, bn, om, on, c, partial, counters, acc, before)

    def plain_step(self, sa, sb, ss, sz, acc):
        """One k tile: the weight codes widened by the general conversion, scaled, multiplied."""
        bn, bk, at = self.block_n, self.block_k, self.atype
        raw = self.load_shared(sb)
        if self.repacked:  # thread t's 16-byte rows t, t + threads, ... are its operand slots, in order
            threads, rows = 32 * self.warps, bn * bk * self.wtype.bits // 8 // 16
            self.annotate_layout(raw, tilus.local(rows // threads, 1) * tilus.spatial(threads, 1) * tilus.local(1, 16))
            codes = self.view(raw, dtype=self.wtype, layout=fragment_layout(bn, bk, self.warps))
        elif 8 % self.wtype.bits == 0:
            codes = self.view(raw, dtype=self.wtype)
        else:
            codes = raw
        w = self.transpose(codes.to(at))  # [bk, bn]
        if not self.wtype.is_signed():
            w = w - self.load_shared(sz)
        # (Scaling each k tile's product instead, per column, measured no faster at small m
        # and slower at large m on the H100.)
        return self.dot(self.load_shared(sa), w * self.load_shared(ss), acc)

    def magic_step(self, k, sa, sb, ss, sz, acc):
        """One k tile on magic-ordered weights (magic_layout): each 32-bit word of a thread's bytes
        holds 8 codes, nibble 4 e + r the element e of its f16 pair in the k quarter r of the tile.
        An AND with 0x000f000f (of the word, or of the word shifted right by 8 for r = 2, 3) ORed
        into the exponent of 1024 (0x6400) gives the pair as f16 1024 + code (r even) or
        1024 + 16 code (r odd, the nibble 4 bits higher): one LOP3 (the XOR of signed codes' sign
        bit folds into its constant), then one HADD2 or HFMA2 per pair exact to the code, as
        Marlin's dequantization, with no PRMT. Each quarter's pairs are the mma.sync fragment of a
        [bn, bk / 4] tile, multiplied with its quarter of a's tile."""
        bn, bk, threads, at = self.block_n, self.block_k, 32 * self.warps, self.atype
        rows = bn * bk // 2 // 16
        raw = self.load_shared(sb)
        self.annotate_layout(raw, tilus.local(rows // threads, 1) * tilus.spatial(threads, 1) * tilus.local(1, 16))
        words = self.view(raw, dtype=uint32, layout=tilus.local(rows // threads, 1) * tilus.spatial(threads, 1) *
                          tilus.local(1, 4))
        signed = self.wtype.is_signed()
        flip = 0x00080008 if signed else 0  # signed codes: code ^ 8 is the code + 8, unsigned
        quarter = fragment_layout(bn, bk // 4, self.warps)
        # (A constant the compiler cannot see through, zero as k >= 0, so that the word's XOR
        # constant sits in a register and each AND-XOR is one LOP3: with two immediates the
        # compiler splits it in two.)
        opaque = self.register_tensor(dtype=uint32, shape=[1, 1], init=0) + (k >> 31)
        if self.weights_a:  # (its scales per scale group of the k tile: one or two)
            return self.magic_step_a(words, signed, flip, opaque, ss, sz, sa, acc)
        scale = self.load_shared(ss)
        zero = None if signed else self.load_shared(sz)
        # late_scale: the tile's product on unscaled weights, scaled per column in float32 (16
        # FFMA a thread instead of 64 HMUL2 at 16 x 128 x 128; the product of exact small integers
        # and a's halves, then one float32 rounding more than the reference's).
        part = self.register_tensor(dtype=float32, shape=[self.block_m, bn], init=0.0) if self.late_scale else acc
        other = self.register_tensor(dtype=float32, shape=[self.block_m, bn], init=0.0) if self.two_sums else None
        for r in tilus.static_range(4):
            src = words if r < 2 else words >> 8
            mask = 0x000F000F if r % 2 == 0 else 0x00F000F0
            bits = (src & mask) ^ (opaque + (0x64006400 | (flip if r % 2 == 0 else flip << 4)))
            v = self.transpose(self.view(bits, dtype=at, layout=quarter))  # [bk / 4, bn]: 1024 + code (x 16)
            if r % 2 == 1:
                v = v * 0.0625  # exact: 64 + code
            base = 1024.0 if r % 2 == 0 else 64.0
            w = v - (base + 8.0) if signed else v - (zero + base)
            a_r = self.load_shared(self.slice_shared(sa, [0, r * (bk // 4)], [0, 1], [self.block_m, bk // 4]))
            if self.two_sums and r % 2 == 1:
                other = self.dot(a_r, w, other)
            else:
                part = self.dot(a_r, w if self.late_scale else w * scale, part)
        if self.two_sums:
            part = part + other
        return acc + part * scale.to(float32) if self.late_scale else part

    def magic_step_a(self, words, signed, flip, opaque, ss, sz, sa, acc):
        """magic_step with the weights as mma's A operand (weights_a): each quarter's pairs are the
        A fragments of a [bn, bk / 4] tile (magic_a_layout), times the quarter of a's rows
        transposed, into acc^T [bn, bm]. On a k tile of two scale groups (block_k = 2 group) the
        quarters 0, 1 are the first group's k, 2, 3 the second's (the words' low and high bytes),
        each group's product scaled by its own scales (ss, sz: the stage's [groups, bn])."""
        bn, bk, at, bm = self.block_n, self.block_k, self.atype, self.block_m
        quarter = mma_a_layout(bn, bk // 4, self.warps)
        groups = 2 if bk > self.group else 1
        for g in tilus.static_range(groups):
            rows = (lambda t: t) if groups == 1 else (lambda t: self.slice_shared(t, [g, 0], [0, 1], [1, bn]))
            scale = self.load_shared(rows(ss))
            zero = None if signed else self.load_shared(rows(sz))
            part = self.register_tensor(dtype=float32, shape=[bn, bm], init=0.0)
            for r in tilus.static_range(4 // groups * g, 4 // groups * (g + 1)):
                src = words if r < 2 else words >> 8
                mask = 0x000F000F if r % 2 == 0 else 0x00F000F0
                bits = (src & mask) ^ (opaque + (0x64006400 | (flip if r % 2 == 0 else flip << 4)))
                v = self.view(bits, dtype=at, layout=quarter)  # [bn, bk / 4]: 1024 + code (x 16)
                if r % 2 == 1:
                    v = v * 0.0625
                base = 1024.0 if r % 2 == 0 else 64.0
                w = v - (base + 8.0) if signed else v - self.transpose(zero + base)
                a_r = self.load_shared(self.slice_shared(sa, [0, r * (bk // 4)], [0, 1], [bm, bk // 4]))
                part = self.dot(w, self.transpose(a_r), part)
            acc = acc + part * self.transpose(scale.to(float32))
        return acc


class MatmulA16WxStream(MatmulA16Wx):
    """The small-m kernel on the magic decode with the k tiles of all output tiles dealt out evenly:
    `blocks` blocks (a whole number of them an SM: one wave), block b taking the run b T / G to
    (b + 1) T / G of the T = tiles x k tiles, output tile after output tile (stream-K). A split
    by blockIdx.z gives every block a whole split, so where the blocks are not a whole number a
    SM some SMs run one block more than others to the end (28672 x 8192 at m = 1: 224 tiles in 2
    splits, 448 blocks on 132 SMs, 52 SMs with 4 and 80 with 3, the kernel bound by the SMs' work
    as the H200's 1.3x slower run at ncu's locked clocks says). A block's run crosses output
    tiles: where a tile has one block, that block writes c; else each of its blocks stores its
    float32 partial sums in partial[2 b + (not its first tile)] ([2 G, min(m, bm), bn]) and counts
    its arrival in counters[tile]; the last to arrive adds them up into c (as SplitK's ending).
    A ring of `stages` per output tile of the run (its k loop as the split kernel's, 333 SASS
    instructions a k tile against bounded=True's 317); between two tiles the ring drains and
    fills again. (One ring over the whole run, each tile's ending while the next tile's copies
    flew, took 377 instructions a k tile and never won on the H200: removed.)"""

    def __init__(self, wtype, group=128, blocks=396, **options):
        super().__init__(wtype, group, **dict(options, split_k=1))
        assert self.magic and not self.by_tma and not self.unroll and not self.k_major and not self.weights_a, \
            "stream-K: the magic decode by cp.async, rolled, the weights n tile after n tile, not transposed"
        self.blocks = blocks

    def __call__(self, m: int32, n: int32, k: int32, a: tilus.void_p, b: tilus.void_p, scales: tilus.void_p,
                 zeros: tilus.void_p, c: tilus.void_p, partial: ~float32, counters: ~int32):
        bm, bn, bk, stages, grid = self.block_m, self.block_n, self.block_k, self.stages, self.blocks
        self.attrs.blocks = [grid, 1, 1]
        self.attrs.warps = self.warps
        at, unsigned = self.atype, not self.wtype.is_signed()
        ktiles, tiles_n = tilus.cdiv(k, bk), tilus.cdiv(n, bn)
        total = tilus.cdiv(m, bm) * tiles_n * ktiles  # k tiles of every output tile, tile after tile
        me = self.blockIdx.x
        lo, hi = me * total // grid, (me + 1) * total // grid  # this block's run
        first_tile = lo // ktiles

        rows = bn * bk // 2 // 16
        ga = self.global_view(a, dtype=at, shape=[m, k])
        gb = self.global_view(b, dtype=uint8, shape=[tiles_n, ktiles, rows, 16])
        gs = self.global_view(scales, dtype=at, shape=[tilus.cdiv(k, self.group), n])
        gz = self.global_view(zeros, dtype=at, shape=[tilus.cdiv(k, self.group), n])
        gc = self.global_view(c, dtype=at, shape=[m, n])
        gp = self.global_view(partial, shape=[2 * grid, tilus.min(m, bm), bn])  # (m = 1: rows of one, not 16)
        arrivals = self.global_view(counters, shape=[tilus.cdiv(m, bm) * tiles_n])
        before = self.shared_tensor(dtype=int32, shape=[1])  # (before the ring: no copy may target it)
        sa = self.shared_tensor(dtype=at, shape=[stages, bm, bk])
        sb = self.shared_tensor(dtype=uint8, shape=[stages, rows, 16])
        ss = self.shared_tensor(dtype=at, shape=[stages, 1, bn])
        sz = self.shared_tensor(dtype=at, shape=[stages, 1, bn])
        ends = dict(m=m, n=n, k=k, c=c, gp=gp, arrivals=arrivals, before=before, me=me, first_tile=first_tile,
                    total=total)

        def load_stage(tm, tn, kt, valid, stage):
            # k tile kt of output tile (tm, tn); not valid: from past the end of k (zero-filled, no read)
            om, on, kt = tm * bm, tn * bn, tilus.select(valid, kt, ktiles)
            self.copy_async(ga, sa[stage], offsets=[om, kt * bk])
            self.copy_async(gb, sb[stage], offsets=[tn, kt, 0, 0], dims=[2, 3])
            self.copy_async(gs, ss[stage], offsets=[kt * bk // self.group, on])
            if unsigned:
                self.copy_async(gz, sz[stage], offsets=[kt * bk // self.group, on])
            self.copy_async_commit_group()

        def step(i, acc):
            return self.magic_step(k, sa[i % stages], sb[i % stages], ss[i % stages], sz[i % stages], acc)

        runs = tilus.select(hi > lo, (hi - 1) // ktiles - first_tile + 1, 0)  # the output tiles it works on
        for t in range(first_tile, first_tile + runs):
            # (kernel variables: ptxas then keeps them in registers through the k loop, where the
            # expressions inlined cost it 4 instructions more a k tile)
            kfirst = self.declare("kfirst", int32, tilus.max(lo, t * ktiles) - t * ktiles)  # the run's k tiles of t
            steps = self.declare("steps", int32, tilus.min(hi, t * ktiles + ktiles) - t * ktiles - kfirst)
            tn = self.declare("tn", int32, t % tiles_n)
            acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
            for s in tilus.static_range(stages - 1):
                load_stage(t // tiles_n, tn, kfirst + s, s < steps, s)
            for i in range(steps):
                acc = step(i, acc)
                load_stage(t // tiles_n, tn, kfirst + i + stages - 1, i + stages - 1 < steps, (i + stages - 1) % stages)
            # The copies past the run (zero fills) land before the next tile's reuse their stages.
            self.copy_async_wait_all()
            self.sync()
            self.tile_ending(t, acc, ends)

    def tile_ending(self, t, acc, ends):
        """The run's part of output tile t done (acc): into c where the tile has one block, else its
        partial sums stored and, by the last of the tile's blocks to arrive, added up into c."""
        bm, bn, bk, grid, at = self.block_m, self.block_n, self.block_k, self.blocks, self.atype
        m, n, k, me, total = ends["m"], ends["n"], ends["k"], ends["me"], ends["total"]
        gp, arrivals = ends["gp"], ends["arrivals"]
        ktiles, tiles_n = tilus.cdiv(k, bk), tilus.cdiv(n, bn)
        gc = self.global_view(ends["c"], dtype=at, shape=[m, n])
        tm = t // tiles_n
        om, on = tm * bm, (t - tm * tiles_n) * bn
        first, last = self.block_of(t * ktiles, total), self.block_of(t * ktiles + ktiles - 1, total)
        if first == last:
            self.store_global(gc, acc.to(at), offsets=[om, on])
        else:
            self.store_global(gp, self.unsqueeze(acc, 0), offsets=[2 * me + tilus.select(t > ends["first_tile"], 1, 0), 0, 0])
            if last_to_arrive(self, arrivals, [t], last - first + 1, slot=ends["before"]):
                sums = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
                for j in range(first, last + 1):  # block j's slot of tile t: its first tile's or its later one's
                    slot = 2 * j + tilus.select(t > j * total // grid // ktiles, 1, 0)
                    sums = sums + self.sum(self.load_global(gp, offsets=[slot, 0, 0], shape=[1, bm, bn]), dim=0)
                self.store_global(gc, sums.to(at), offsets=[om, on])
                reset_arrivals(self, arrivals, [t])

    def block_of(self, x, total):
        """The block whose run holds k tile x of the whole (total k tiles)."""
        return ((x + 1) * self.blocks - 1) // total

def magic_applies(wtype, atype, bk):
    """Whether MatmulA16Wx(magic=True) takes these codes: 4-bit integers to f16 activations (bf16's
    7-bit mantissa cannot hold 16 x a code under its exponent), k tiles of whole 64s."""
    return wtype.bits == 4 and not wtype.is_float() and atype == float16 and bk % 64 == 0


def magic_registers(script, words, wtype, k, threads):
    """The f16 fragment registers of 32-bit words whose nibbles r and r + 4 are register r's pair
    (wgmma_magic_layout's order): words [rows, 4] (thread t's rows t, t +
    threads, ... in slot order) to [rows, 16] (slot 4 j + r: word j's register r), each
    register's pair masked into f16's exponent of 1024 (one LOP3 a pair, word >> 8 for r = 2, 3;
    the sign flip of signed codes in its constant): 1024 + code, or 1024 + 16 code for odd r."""
    rows = words.shape[0]
    flip = 0x00080008 if wtype.is_signed() else 0
    # Per fragment register r: shift, mask and magic (Python constants per slot: the emitter's
    # unrolled slots fold them into immediates), broadcast over the words j.
    shift = script.register_tensor(dtype=uint32, shape=[1, 1, 4], init=lambda i, j, r: (r // 2) * 8)
    mask = script.register_tensor(dtype=uint32, shape=[1, 1, 4],
                                  init=lambda i, j, r: 0x000F000F + (r % 2) * (0x00F000F0 - 0x000F000F))
    magic = script.register_tensor(dtype=uint32, shape=[1, 1, 4],
                                   init=lambda i, j, r: 0x64006400 + flip + (r % 2) * (flip * 15))
    opaque = script.register_tensor(dtype=uint32, shape=[1, 1, 1], init=0) + (k >> 31)  # see MatmulA16Wx.magic_step
    bits = ((script.unsqueeze(words, 2) >> shift) & mask) ^ (opaque + magic)  # [rows, 4 words j, 4 registers r]
    # The view of the result takes a thread's words in slot order: slot 4 j + r must hold (j, r).
    # (The layout inference may order the broadcast's slots otherwise: so did repeat_interleave's,
    # r outermost, the wrong operand the H200 computed with.)
    script.annotate_layout(bits, tilus.local(rows // threads, 1, 1) * tilus.spatial(threads, 1, 1) *
                           tilus.local(1, 4, 4))
    return script.reshape(bits, [rows, 16])


def magic_layout(bn, bk, warps=4):
    """The register layout of a [bn, bk] weight tile (n, k) whose 8-slot words are magic_step's:
    slot 8 j + 4 e + r is the slot 2 j + e of fragment_layout(bn, bk / 4) shifted to the k quarter
    r of the tile. Modes: n = (n block, warp, lane / 4), k = (quarter r, k / 64 within it, h,
    lane % 4, e); slots (k / 64, n block, h, e, r), most significant first."""
    return tilus.RegisterLayout([bn, bk], [bn // (8 * warps), warps, 8, 4, bk // 64, 2, 4, 2], [1, 2, 6],
                                [4, 0, 5, 7, 3])


def mma_a_layout(bn, bk, warps=4):
    """The register layout of a [bn, bk] weight tile (n, k) as the mma.sync A operand (m16n8k16)
    of a dot on `warps` warps along n (weights_a): warp w holds the rows 16 (warps i + w) + 8 h +
    lane / 4 and k = 16 j + 8 g + 2 (lane % 4) + e, slots (i, j, g, h, e)."""
    return (tilus.local(bn // (16 * warps), bk // 16) * tilus.spatial(warps, 1) * tilus.column_local(2, 2) *
            tilus.spatial(8, 4) * tilus.local(1, 2))


def magic_a_layout(bn, bk, warps=4):
    """magic_layout for weights_a: slot 8 j + 4 e + r is the slot 2 j + e of mma_a_layout(bn, bk / 4)
    shifted to the k quarter r. Modes: n = (i, warp, h, lane / 4), k = (quarter r, j, g, lane % 4,
    e); slots (i, j, g, h, e, r), most significant first."""
    return tilus.RegisterLayout([bn, bk], [bn // (16 * warps), warps, 2, 8, 4, bk // 64, 2, 4, 2], [1, 3, 7],
                                [0, 5, 6, 2, 8, 4])


def fragment_layout(bn, bk, warps=4):
    """The register layout of a [bn, bk] weight tile (n, k) that the mma.sync operand of a
    16-row tile on `warps` warps needs, before its transpose: thread t holds n = 8 warps i + t / 4
    and k = 16 j + 8 h + 2 (t % 4) + e for every (j, i, h, e), slots in that order."""
    return (tilus.column_local(bn // (8 * warps), bk // 16) * tilus.local(1, 2) * tilus.spatial(8 * warps, 4) *
            tilus.local(1, 2))


def repackable(bits, bm, bn, bk, warps):
    """Whether a tile has a fragment order: 16-row tiles whose n spans the warps, and whose
    per-thread weight bits fill whole 16-byte vectors."""
    return bm == 16 and bn % (8 * warps) == 0 and bk % 16 == 0 and (bn * bk // (32 * warps)) * bits % 128 == 0


def pack_codes(codes, bits):
    """Codes [rows, k] (the low `bits` bits used) to bytes [rows, k * bits / 8]: each row a
    little-endian bit stream, element i at bits [i * bits, (i + 1) * bits)."""
    rows, k = codes.shape
    stream = ((np.asarray(codes, np.int64)[:, :, None] >> np.arange(bits)) & 1).astype(np.uint8)
    return np.packbits(stream.reshape(rows, k * bits), axis=1, bitorder="little")


def unpack_codes(data, bits):
    """pack_codes' inverse: bytes [rows, k * bits / 8] to codes [rows, k] (int64)."""
    rows = data.shape[0]
    stream = np.unpackbits(np.asarray(data, np.uint8), axis=1, bitorder="little").reshape(rows, -1, bits)
    return (stream.astype(np.int64) << np.arange(bits)).sum(axis=-1)


class RepackWeights(tilus.Script):
    """The offline repacking kernel: weight codes [n, k] (bytes along k, as the matmul's plain
    weights) to tiles of bn x bk, tile (n / bn, k / bk) after tile, each holding thread t's codes
    of the register `layout` of a [bn, bk] tile on `threads` threads in slot order, as a bit
    stream cut into 16-byte rows (row = threads * (byte / 16) + t). Each block loads its tile
    straight into that layout and stores the same registers seen as rows of bytes; n and k are
    padded with zero codes to whole tiles."""

    def __init__(self, wtype, bn, bk, layout, threads, k_major=False):
        super().__init__()
        assert threads % 32 == 0 and layout.local_size * wtype.bits % 128 == 0, "a thread's codes must fill 16-byte rows"
        self.wtype, self.bn, self.bk, self.layout, self.threads = wtype, bn, bk, layout, threads
        self.k_major = k_major  # tiles (k / bk, n / bn) after tile instead of (n / bn, k / bk)

    def __call__(self, n: int32, k: int32, src: tilus.void_p, dst: ~uint8):
        bn, bk, threads = self.bn, self.bk, self.threads
        rows = bn * bk * self.wtype.bits // 8 // 16
        tiles_k = tilus.cdiv(k, bk)
        self.attrs.blocks = [tilus.cdiv(n, bn), tiles_k]
        self.attrs.warps = threads // 32
        codes = self.load_global(self.global_view(src, dtype=self.wtype, shape=[n, k]),
                                 offsets=[self.blockIdx.x * bn, self.blockIdx.y * bk], shape=[bn, bk])
        self.annotate_layout(codes, self.layout)
        out = self.view(codes, dtype=uint8, layout=tilus.local(rows // threads, 1) * tilus.spatial(threads, 1) *
                        tilus.local(1, 16))
        gout = self.global_view(dst, shape=[tilus.cdiv(n, bn) * tiles_k * rows, 16])
        tile = (self.blockIdx.y * tilus.cdiv(n, bn) + self.blockIdx.x if self.k_major else
                self.blockIdx.x * tiles_k + self.blockIdx.y)
        self.store_global(gout, out, offsets=[tile * rows, 0])


def repack(b, wtype, n, k, bn, bk, layout, threads, k_major=False):
    """The plain weight bytes b [n, k * bits / 8] (numpy, or a CUDA torch tensor) repacked by
    RepackWeights: [tiles, rows, 16] uint8 where b lives."""
    rows = bn * bk * wtype.bits // 8 // 16
    shape = (-(-n // bn) * -(-k // bk) * rows, 16)
    if hasattr(b, "cpu"):
        import torch
        out = torch.empty(shape, dtype=torch.uint8, device=b.device)
    else:
        out = np.empty(shape, np.uint8)
    RepackWeights(wtype, bn, bk, layout, threads, k_major)(n, k, b, out)
    return out


def repack_for_magic(b, wtype, n, k, bn, bk, warps=4, k_major=False, weights_a=False):
    """The bytes MatmulA16Wx(magic=True) loads: magic_layout's order of 16-row tiles on `warps` warps
    (k_major: the tiles k tile after k tile, each k tile's n tiles together, for k_major=True;
    weights_a: magic_a_layout's, for weights_a=True)."""
    assert repackable(wtype.bits, 16, bn, bk, warps) and bk % 64 == 0, f"no magic order for {bn}x{bk} tiles"
    layout = (magic_a_layout if weights_a else magic_layout)(bn, bk, warps)
    return repack(b, wtype, n, k, bn, bk, layout, 32 * warps, k_major)


def repack_weights(b, wtype, n, k, bn, bk, warps=4):
    """The bytes MatmulA16Wx(repacked=True) loads: the mma.sync fragment order of 16-row tiles
    (fragment_layout) on `warps` warps."""
    assert repackable(wtype.bits, 16, bn, bk, warps), f"no fragment order for {wtype.bits}-bit {bn}x{bk} tiles on {warps} warps"
    return repack(b, wtype, n, k, bn, bk, fragment_layout(bn, bk, warps), 32 * warps)


def wgmma_a_layout(bn, bk, groups):
    """The register layout wgmma needs of its a operand [bn, bk] on `groups` warp groups (block
    g of 64 rows on group g; per m64 x k16 instruction warp w holds rows 16 w .. 16 w + 15 as
    mma.sync's m16n8k16 A fragment)."""
    return (tilus.spatial(groups, 1) * tilus.local(bn // (64 * groups), bk // 16) * tilus.spatial(4, 1) *
            tilus.column_local(2, 2) * tilus.spatial(8, 4) * tilus.local(1, 2))


def wgmma_accumulator_layout(bn, bm, groups):
    """The register layout of wgmma's float32 accumulator [bn, bm] on `groups` warp groups (64
    rows each): per m64 x n8 block, lane l of warp w holds rows 16 w + l / 4 (+ 8) at columns
    2 (l % 4) and the next, register 4 j + 2 half + e for the block j of 8 columns."""
    return (tilus.spatial(groups, 1) * tilus.spatial(4, 1) * tilus.local(1, bm // 8) * tilus.local(2, 1) *
            tilus.spatial(8, 4) * tilus.local(1, 2))


def wgmma_magic_layout(bn, groups):
    """The register layout of a [bn, 64] weight tile (n, k) whose words are the wgmma kernel's
    magic decode (MatmulA16WxHopper(magic=True)): slot 8 j + 4 e + r (word j, nibble 4 e + r) is
    the slot 8 j + 2 r + e of wgmma_a_layout(bn, 64, groups): word j holds the k step j's four
    fragment registers r, element e of register r in nibble 4 e + r, so masking nibbles r and
    r + 4 of each word gives register r of its k step. Modes: n = (group, n block, warp, row
    half, lane / 4), k = (k step, k half, lane % 4, e); slots (n block, k step, e, k half, row
    half), most significant first (register r = 2 k half + row half)."""
    return tilus.RegisterLayout([bn, 64], [groups, bn // (64 * groups), 4, 2, 8, 4, 2, 4, 2], [0, 2, 4, 7],
                                [1, 5, 8, 6, 3])


def hopper_repackable(bits, bk):
    """Whether MatmulA16WxHopper has a fragment order for k tiles of bk: a thread's bits of the
    wgmma a operand fill whole 16-byte rows."""
    return bk % 16 == 0 and (bk // 2) * bits % 128 == 0


def repack_for_hopper(b, wtype, n, k, bk, magic=False):
    """The bytes MatmulA16WxHopper loads: tiles of 128 rows of n (two warp groups' wgmma a
    operand) by bk, each thread's slots in one 16-byte row (magic: in wgmma_magic_layout's order,
    for MatmulA16WxHopper(magic=True)). Its first 64 rows are the tile of one warp group in the
    same order, so kernels on 64-row tiles read half tiles of the same bytes."""
    return repack(b, wtype, n, k, 128, bk, wgmma_magic_layout(128, 2) if magic else wgmma_a_layout(128, bk, 2), 256)


class MatmulA16WxHopper(SplitK):
    """Large m on sm_90a: c^T = dequant(w) @ a^T on wgmma with the weights as its register
    operand. A producer warp brings each k tile of a (the wgmma b operand, K-major, by TMA), the
    tile's weight bytes (repacked into the wgmma a fragment order: one 16-byte row per thread)
    and its scales into a ring of `stages` shared buffers on mbarriers; `consumers` warp groups
    (64 weight rows each; block_n 64 or 128 of the 128-row repacked tiles) widen, scale and
    multiply. Two register tiles of weights alternate, so the next k tile's decode overlaps the
    previous wgmma. Persistent: one block per SM walks the output tiles in a grouped order, as
    examples/python/hopper_matmul_v3.py does. Each output tile leaves through shared memory as TMA
    stores (c's rows a multiple of 16 bytes: n a multiple of 8, as QuantizedMatmul requires for
    this kernel), completing while the next tile multiplies.

    cluster=2: blocks in clusters of two that take the two neighbouring weight tiles of the same
    rows of a (as cuBLAS's 2 x 1 clusters): each loads its own weights and scales and half of the
    tile of a, multicast into the shared memory of both (TMA multicast: each block reads a from L2
    half as often); a stage is free again when the consumers of both blocks have released it, as
    in examples/python/hopper_matmul_v5.py.

    split_k > 1: the units of work are the output tiles' k ranges, split_k of them per tile (whole
    pairs of k tiles; the last may be short or empty), so that few output tiles (n = 3584 at
    small m) still keep every SM busy; each split stores its float32 partial sums into `partial`
    as its threads hold them (partial_shape, partial_elements) and the tile's last split to arrive
    adds the others' to its registers and stores c as unsplit tiles do (add_up_split_registers;
    `counters`: one per output tile, zero before the launch, as it leaves them).
    In clusters of two both blocks take the same split of their two tiles (a's multicast tile
    serves both).

    magic=True (4-bit integer codes, f16, 64-long k tiles): the weights in wgmma_magic_layout's
    order, each k tile's register operand made by masking whole words (magic_product) instead of
    the general conversion."""

    def __init__(self, wtype, group=128, block_n=128, block_m=256, block_k=64, stages=4, consumers=2,
                 tile_group=8, blocks=132, atype=float16, cluster=1, split_k=1, magic=False, tail_split=1,
                 lead=0, peek_sums=False):
        super().__init__()
        assert group % (2 * block_k) == 0, "two k tiles (the two register buffers) share a scale group"
        assert block_n == 64 * consumers and consumers in (1, 2), "each consumer warp group takes 64 weight rows"
        assert hopper_repackable(wtype.bits, block_k), "no wgmma fragment order for this k tile"
        assert block_n * block_k * wtype.bits // 8 // 16 <= 256, "a k tile's weights must be one TMA box (256 rows)"
        assert cluster in (1, 2) and blocks % cluster == 0, "blocks alone or in clusters of two"
        assert 1 <= split_k <= 16 and 1 <= tail_split <= 16, "split-K: 1 to 16 ways"
        assert split_k == 1 or tail_split == 1, "every tile split, or the last round's tiles only"
        # peek_sums: a split tile's first split reads the tile's counter before storing its partial
        # sums, and where the others have all arrived adds theirs without storing its own
        # (add_up_split_registers); else, and without it, every split stores and the last to arrive adds.
        self.peek_sums = peek_sums
        # lead (split_k > 1): the first split takes `lead` pairs of k tiles beyond an even share and
        # the others share the rest, so that with peek_sums the others' partial sums are stored
        # while the first still multiplies, and it finds them there.
        assert lead == 0 or split_k > 1 and tail_split == 1, "lead: split_k's first split"
        self.lead = lead
        # tail_split: only the tiles of the grid's last, partly filled round split over k, that
        # many ways (the whole rounds before it unsplit): at m = 4096, n = 3584 the 52 tiles left
        # after 3 rounds of 132 take half a round in two splits instead of a whole one.
        self.tail_split = tail_split
        self.wtype, self.group, self.atype, self.cluster_size, self.split_k = wtype, group, atype, cluster, split_k
        # magic: the weights in wgmma_magic_layout's order (repack_for_hopper(magic=True)), widened
        # by masking whole words (magic_product) instead of the general conversion.
        assert not magic or magic_applies(wtype, atype, block_k) and block_k == 64, \
            "the magic decode takes 4-bit integer codes to f16 in 64-long k tiles"
        self.magic = magic
        self.block_n, self.block_m, self.block_k = block_n, block_m, block_k
        self.stages, self.consumers, self.tile_group, self.blocks = stages, consumers, tile_group, blocks

    def tile_origin(self, t, tiles_m, tiles_n):
        """The (row of a, row of w) of output tile t: `tile_group` tiles of a down before the next
        tile of w, so that the blocks running together share both in L2."""
        span = self.tile_group * tiles_n
        first_m = t // span * self.tile_group
        rows = tilus.min(tiles_m - first_m, self.tile_group)
        return (first_m + t % rows) * self.block_m, t % span // rows

    def unit(self, u, tiles_m, tiles_n, steps, rank, whole):
        """Unit of work u: (its output tile, its split, its tile's number of splits, the tile's row
        of a, its weight tile, the split's first k tile, its number of k tiles). A tile's splits are
        neighbouring units (run at once by neighbouring blocks) of whole pairs of k tiles each.
        whole: with tail_split, the units of the whole rounds (unsplit tiles); the tiles after them
        are split."""
        if self.tail_split > 1:
            ways = self.tail_split
            tail = u >= whole
            t = tilus.select(tail, whole + (u - whole) // ways, u)
            split, splits = tilus.select(tail, (u - whole) % ways, 0), tilus.select(tail, ways, 1)
        else:
            t, split = (u // self.split_k, u % self.split_k) if self.split_k > 1 else (u, 0)
            splits = self.split_k
        offset_m, tile_n = self.tile_origin(t, tiles_m, tiles_n)
        tile_n = tile_n * self.cluster_size + rank
        if self.split_k == 1 and self.tail_split == 1:
            return t, split, splits, offset_m, tile_n, 0, steps
        per = 2 * tilus.cdiv(steps, 2 * splits)
        if self.lead:  # the first split `lead` pairs of k tiles more, the others the rest evenly
            first = tilus.min(per + 2 * self.lead, steps)
            rest = 2 * tilus.cdiv(steps - first, 2 * (splits - 1))
            k0 = tilus.select(split == 0, 0, first + (split - 1) * rest)
            return (t, split, splits, offset_m, tile_n, k0,
                    tilus.select(split == 0, first, tilus.max(tilus.min(rest, steps - k0), 0)))
        return t, split, splits, offset_m, tile_n, split * per, tilus.max(tilus.min(per, steps - split * per), 0)

    def magic_product(self, k, raw, sa, ss, sz, acc):
        """One k tile on weights in wgmma_magic_layout's order (magic=True): each word repeated
        for its four fragment registers r, masked at nibbles r and r + 4 (shifted right by 8 for
        r = 2, 3) into f16's exponent of 1024 (one LOP3 a pair, the sign flip of signed codes in
        its constant, as MatmulA16Wx.magic_step) is the whole tile's wgmma a operand, 1024 + code,
        or 1024 + 16 code for odd r (the fragment's rows 8 to 15 of each 16): one HFMA2 takes
        them to code - zero (x 1 / 16 where odd: exact), one HMUL2 scales them. One wgmma call
        for the four k steps (one fence: four calls each fenced would end ptxas's wgmma group at
        each, and the next tile's decode would wait for this tile's first three products)."""
        bn, at, workers = self.block_n, self.atype, 128 * self.consumers
        rows = bn * 64 // 2 // 16
        words = self.view(raw, dtype=uint32, layout=tilus.local(rows // workers, 1) * tilus.spatial(workers, 1) *
                          tilus.local(1, 4))
        signed = self.wtype.is_signed()
        bits = magic_registers(self, words, self.wtype, k, workers)
        v = self.view(bits, dtype=at, layout=wgmma_a_layout(bn, 64, self.consumers))  # [bn, 64]
        odd = self.register_tensor(dtype=at, shape=[bn, 1], init=lambda i, j: i % 16 // 8)  # register r odd
        unit = 1.0 - odd * 0.9375  # 1 / 16 on odd r
        base = 1024.0 - odd * 960.0  # 64 on odd r
        offset = base + 8.0 if signed else base + self.transpose(self.load_shared(sz))
        w = (v * unit - offset) * self.transpose(self.load_shared(ss))
        self.wgmma.fence()
        self.wgmma.mma(w, sa.transpose(), acc)
        return acc

    def store_tile(self, acc, sc, gc, offset_m, offset_n):
        """The accumulator acc [bn, bm] (c transposed) into c's tile at (offset_m, offset_n) through
        shared memory (sc) and TMA stores (the transposed accumulator gives each thread single
        elements of c's rows); the consumers go on to the next tile while the stores complete."""
        bn, bm = acc.shape
        with self.single_thread():  # the last tile's stores have read sc
            self.tma.wait_group(0, read=True)
        self.store_shared(sc.permute([1, 0, 2]), self.reshape(self.transpose(acc).to(self.atype), [bm, bn // 64, 64]))
        with self.single_thread():
            for j in tilus.static_range(bn // 64):
                self.tma.shared_to_global(sc[j], gc, offsets=[offset_m, offset_n + j * 64])
            self.tma.commit_group()

    def partial_shape(self, slots):
        """The float32 partial sums of `slots` split units (in clusters, per block): each one's
        accumulator [block_n, block_m] as its threads hold it, 16 bytes per thread side by side."""
        workers = 128 * self.consumers
        return [slots, self.block_n * self.block_m // workers // 4, workers, 4]

    def partial_elements(self, m, n):
        """The float32 elements of the `partial` argument at m x n (none unsplit)."""
        tiles = -(-m // self.block_m) * -(-(-(-n // self.block_n)) // self.cluster_size)
        units = self.blocks // self.cluster_size
        slots = tiles * self.split_k if self.tail_split == 1 else tiles % units * self.tail_split
        return slots * self.cluster_size * self.block_n * self.block_m if max(self.split_k, self.tail_split) > 1 else 0

    def add_up_split_registers(self, acc, sc, gc, gp, arrivals, counter, slot, split, splits, offset_m, offset_n,
                               before):
        """The end of a split unit: its float32 accumulator acc [bn, bm] stored into gp[slot] as the
        threads hold it (partial_shape: each warp's 16-byte vectors side by side, whole lines),
        its arrival counted in arrivals[counter], and the tile's last split to arrive adds the
        other splits' (at slot + (s - split) x cluster) to its registers, thread by thread, and
        stores the sum as unsplit tiles leave (store_tile). With peek_sums the tile's first split
        first reads the counter (an acquire at GPU scope): where the others have all arrived it is
        the last and adds without storing its own. No block ever waits for another (a wait for a
        block that is not resident could hang: nothing guarantees the persistent grid all
        resident). (The mma.sync kernel's ending, add_up_splits, goes through c's rows 16 at a
        time, an L2 round trip each: on the H200, 128 x 256 in 4 splits at n = 3584, m = 256 took
        71.1 us with it, 60.6 with this one; in 2 splits at 8192 x 8192 63.8 and 54.2.)"""
        bn, bm = acc.shape
        _, vectors, workers, _ = self.partial_shape(1)
        order = tilus.local(vectors, 1, 1) * tilus.spatial(1, workers, 1) * tilus.local(1, 1, 4)
        mine = self.view(acc, layout=order)
        if self.peek_sums:
            with self.single_thread():  # the lead's count seen (the others: none)
                if split == 0:
                    self.store_shared(before, self.atomic.global_add(
                        arrivals, self.register_tensor(dtype=int32, shape=[1], init=0), offsets=[counter],
                        sem="acquire"))
                else:
                    self.store_shared(before, self.register_tensor(dtype=int32, shape=[1], init=-1))
            self.sync()
            if self.load_shared(before).item() != splits - 1:  # not the last yet: store and arrive
                self.store_global(gp, self.unsqueeze(mine, 0), offsets=[slot, 0, 0, 0])
                last_to_arrive(self, arrivals, [counter], splits, slot=before)
        else:
            self.store_global(gp, self.unsqueeze(mine, 0), offsets=[slot, 0, 0, 0])
            last_to_arrive(self, arrivals, [counter], splits, slot=before)
        if self.load_shared(before).item() == splits - 1:  # the last (its count seen, in `before`)
            for j in range(1, splits):
                other = self.load_global(gp, offsets=[self.other_slot(slot, split, splits, j), 0, 0, 0],
                                         shape=[vectors, workers, 4])
                self.annotate_layout(other, order)
                mine = mine + other
            self.store_tile(self.view(mine, layout=wgmma_accumulator_layout(bn, bm, self.consumers)), sc, gc,
                            offset_m, offset_n)
            reset_arrivals(self, arrivals, [counter])

    def other_slot(self, slot, split, splits, j):
        """The partial-sum slot of the split j after this one (of slot `slot`) among a tile's
        `splits` (neighbouring units; a cluster's blocks interleaved)."""
        return slot + ((split + j) % splits - split) * self.cluster_size

    def release(self, barrier, peer=None):
        """One arrival per consumer warp group on this block's barrier (and on the peer block's)."""
        for wg in tilus.static_range(self.consumers):
            with self.thread_group(thread_begin=wg * 128, num_threads=1):
                self.mbarrier.arrive(barrier)
                if peer is not None:
                    self.mbarrier_arrive(barrier, cta_id=peer)

    def __call__(self, m: int32, n: int32, k: int32, a: tilus.void_p, b: tilus.void_p, scales: tilus.void_p,
                 zeros: tilus.void_p, c: tilus.void_p, partial: ~float32, counters: ~int32):
        bn, bm, bk, stages, blocks, at = self.block_n, self.block_m, self.block_k, self.stages, self.blocks, self.atype
        workers = 128 * self.consumers
        rows = bn * bk * self.wtype.bits // 8 // 16  # 16-byte rows of one repacked weight tile
        self.attrs.blocks = [blocks]
        self.attrs.warps = 4 * self.consumers + 4  # the producer's warp group gives its registers away
        clustered = self.cluster_size == 2
        if clustered:
            self.attrs.cluster_blocks = [2, 1, 1]
            rank = self.cluster.blockRank
            peer = rank ^ 1
        else:
            rank, peer = 0, None
        first_unit, units_step = (self.blockIdx.x // 2, blocks // 2) if clustered else (self.blockIdx.x, blocks)
        # The units of work (self.unit): output tiles, with clusters pairs of neighbouring weight
        # tiles, with split-K a tile's k ranges.
        tiles_m, tiles_n = tilus.cdiv(m, bm), tilus.cdiv(tilus.cdiv(n, bn), self.cluster_size)
        units, whole = tiles_m * tiles_n * self.split_k, 0
        if self.tail_split > 1:  # the tiles of whole rounds, then the last round's tiles split
            whole = tiles_m * tiles_n // units_step * units_step
            units = whole + (tiles_m * tiles_n - whole) * self.tail_split
        ways = max(self.split_k, self.tail_split)  # the most splits of a tile
        steps = tilus.cdiv(k, bk)  # even: k is a whole number of scale groups
        ga = self.global_view(a, dtype=at, shape=[m, k])
        packed_rows = 128 * bk * self.wtype.bits // 8 // 16  # of one 128 x bk tile of repack_for_hopper
        gw = self.global_view(b, dtype=uint8, shape=[tilus.cdiv(n, 128) * steps * packed_rows, 16])
        gs = self.global_view(scales, dtype=at, shape=[tilus.cdiv(k, self.group), n])
        gz = self.global_view(zeros, dtype=at, shape=[tilus.cdiv(k, self.group), n])
        gc = self.global_view(c, dtype=at, shape=[m, n])
        sa = self.shared_tensor(dtype=at, shape=[stages, bm, bk])
        sw = self.shared_tensor(dtype=uint8, shape=[stages, rows, 16])
        ss = self.shared_tensor(dtype=at, shape=[stages, 1, bn])
        sz = self.shared_tensor(dtype=at, shape=[stages, 1, bn])
        sc = self.shared_tensor(dtype=at, shape=[bn // 64, bm, 64])  # c's tile as TMA store boxes of 64 columns
        if ways > 1:  # the split-K arrival's old count (allocated before the ring, as MatmulA16Wx's)
            before = self.shared_tensor(dtype=int32, shape=[1])
            # the partial sums of each split unit (and block of a cluster), as its threads hold them
            gp = self.global_view(partial, shape=self.partial_shape((units - whole) * self.cluster_size))
            # (a counter per output tile: in clusters, per tile of each block of the pair)
            arrivals = self.global_view(counters, shape=[tiles_m * tiles_n * self.cluster_size])
        unsigned = not self.wtype.is_signed()
        stage_bytes = bm * bk * 2 + rows * 16 + bn * 2 * (2 if unsigned else 1)
        full = self.mbarrier.alloc(counts=[1] * stages)
        empty = self.mbarrier.alloc(counts=[self.consumers * self.cluster_size] * stages)  # both blocks' consumers
        if clustered:
            self.cluster.sync()  # the peer's barriers are initialized before anything arrives on them
        # The consumers hold a 64 x block_m float32 accumulator and two weight tiles per thread:
        # more registers than an even split of the file gives (168 at 12 warps), so the producer's
        # warp group (one warp of it issues the copies) gives most of its registers to them.
        with self.thread_group(thread_begin=workers, num_threads=128):
            self.dec_max_nreg(40)
            with self.thread_group(thread_begin=0, num_threads=32):  # the producer warp (nested: relative)
                issued = self.declare("issued", int32, 0)  # k tiles through the ring
                for u in range(first_unit, units, units_step):
                    _, _, _, offset_m, tile_n, k0, count = self.unit(u, tiles_m, tiles_n, steps, rank, whole)
                    for step in range(count):
                        g = issued + step
                        stage = g % stages
                        kt = k0 + step
                        self.mbarrier.wait(empty[stage], phase=g // stages % 2 ^ 1)
                        with self.single_thread():
                            self.mbarrier.arrive_and_expect_tx(full[stage], transaction_bytes=stage_bytes)
                            if clustered:  # this block's half of a into both blocks
                                self.tma.global_to_shared(src=ga, dst=self.slice_shared(sa[stage], [rank * (bm // 2), 0],
                                                                                       [0, 1], [bm // 2, bk]),
                                                          offsets=[offset_m + rank * (bm // 2), kt * bk],
                                                          mbarrier=full[stage], multicast_mask=3)
                            else:
                                self.tma.global_to_shared(src=ga, dst=sa[stage], offsets=[offset_m, kt * bk],
                                                          mbarrier=full[stage])
                            self.tma.global_to_shared(src=gw, dst=sw[stage], mbarrier=full[stage],
                                                      offsets=[(tile_n * bn // 128 * steps + kt) * packed_rows +
                                                               tile_n * bn % 128 // bn * rows, 0])
                            self.tma.global_to_shared(src=gs, dst=ss[stage], mbarrier=full[stage],
                                                      offsets=[kt * bk // self.group, tile_n * bn])
                            if unsigned:
                                self.tma.global_to_shared(src=gz, dst=sz[stage], mbarrier=full[stage],
                                                          offsets=[kt * bk // self.group, tile_n * bn])
                    issued = issued + count
        with self.thread_group(thread_begin=0, num_threads=workers):  # the consumer warp groups
            self.inc_max_nreg(232 if self.consumers == 2 else 240)
            fragment = wgmma_a_layout(bn, bk, self.consumers)
            taken = self.declare("taken", int32, 0)  # k tiles through the ring
            for u in range(first_unit, units, units_step):
                t, split, splits, offset_m, tile_n, _, count = self.unit(u, tiles_m, tiles_n, steps, rank, whole)
                acc = self.register_tensor(dtype=float32, shape=[bn, bm], init=0.0)
                if ways > 1:  # (the split ending views its registers in this order)
                    self.annotate_layout(acc, wgmma_accumulator_layout(bn, bm, self.consumers))
                for pair in range(count // 2):
                    for h in tilus.static_range(2):  # two weight tiles in registers, alternating
                        g = taken + 2 * pair + h
                        stage = g % stages
                        self.mbarrier.wait(full[stage], phase=g // stages % 2)
                        raw = self.load_shared(sw[stage])
                        self.annotate_layout(raw, tilus.local(rows // workers, 1) * tilus.spatial(workers, 1) *
                                             tilus.local(1, 16))
                        if self.magic:
                            acc = self.magic_product(k, raw, sa[stage], ss[stage], sz[stage], acc)
                        else:
                            w = self.view(raw, dtype=self.wtype, layout=fragment).to(at)
                            if unsigned:
                                w = w - self.transpose(self.load_shared(sz[stage]))
                            w = w * self.transpose(self.load_shared(ss[stage]))
                            self.wgmma.fence()
                            self.wgmma.mma(w, sa[stage].transpose(), acc)
                        self.wgmma.commit_group()
                        self.wgmma.wait_group(1)  # the previous k tile's wgmma retired: release its stage
                        if h == 1:
                            self.release(empty[(g + stages - 1) % stages], peer)
                        else:
                            if pair > 0:
                                self.release(empty[(g + stages - 1) % stages], peer)
                self.wgmma.wait_group(0)
                if ways == 1:
                    self.release(empty[(taken + count - 1) % stages], peer)
                else:
                    if count > 0:  # (a tile's last split may have no k tiles)
                        self.release(empty[(taken + count - 1) % stages], peer)
                taken = taken + count
                if splits > 1:  # (a Python or a kernel condition)
                    slot = (u - whole) * self.cluster_size + rank
                    self.add_up_split_registers(acc, sc, gc, gp, arrivals, t * self.cluster_size + rank, slot, split,
                                                splits, offset_m, tile_n * bn, before)
                else:
                    self.store_tile(acc, sc, gc, offset_m, tile_n * bn)
        if clustered:
            self.cluster.sync()  # no block leaves while its peer may still write to it


class QuantizedMatmul:
    """c = a @ dequant(w).T with a configuration per size (measured on an H100, bench/w4a16.py):
    16-row tiles with long k tiles for small m (LLM decoding) on weights repacked once into
    fragment order (prepare), split over k when the m x n tiles alone would leave most SMs idle
    (the last split of a tile adds the partial sums up); 64- and 128-row tiles on the plain weights
    for larger m, or, on an sm_90a GPU from m = 33, MatmulA16WxHopper (wgmma) on weights repacked
    into its fragment order. The split-K arrival counters belong to the object: one launch at a time (a
    launch on another stream while one runs would share them).

    With tune=True (CUDA tensors only) the first call at each size (m rounded up to a power of
    two, n, k) times every configuration of `candidates` on the call's own arguments and keeps the
    fastest for the process: split-K, tile shape, wgmma or mma.sync and stages are then chosen per
    shape by measurement, not by the rule, which was measured at N = K = 8192 only."""

    HOPPER_MIN_M = 33  # from this m on, the wgmma kernel where it applies

    def __init__(self, wtype, group=128, sms=None, atype=float16, tune=False, wide=False, f16_split_sums=False,
                 extra=()):
        # sms: the GPU's SM count (the split-K choice, the wgmma kernel's persistent grid);
        # None: torch's count for CUDA weights at prepare, else an H100's 132. wide: tune over
        # candidates(wide=True), the whole space, instead of its short list.
        self.wtype, self.group, self.sms, self.atype, self.tune, self.wide = wtype, group, sms, atype, tune, wide
        # f16_split_sums: the tuner may also time MatmulA16Wx(split_red=True) at m <= 32, whose
        # splits add their sums into c in f16 (c rounded 2 s - 1 times for s splits, not once; 2-3 %
        # faster at 28672 x 8192 and 3584 x 18944 on the H200). Off: every ending sums in float32.
        self.f16_split_sums = f16_split_sums
        # extra: MatmulA16WxHopper parameters (dicts) over the 128 x 256 tile's, timed beside the
        # short list wherever the wgmma kernel applies (bench/w4a16.py --extra: trials, not the list).
        self.extra = [dict(x) for x in extra]
        self.kernels = {}
        self.arrival_counters = ArrivalCounters()  # split-K's, zero between launches
        self.own_partials = None  # the wgmma kernel's partial sums where the caller's workspace is short (partials)
        self.tuned = {}  # (m bucket, n, k, wgmma weights, magic weights) -> the fastest configuration measured
        self.plans = {}  # (m, n, k, id(weights), CUDA) -> (weights, plan_of's kernel, weights, counters, partials)
        self.timings = {}  # the same key -> [(ms, configuration)] of every candidate, fastest first

    def hopper_tile(self, m):
        """MatmulA16WxHopper's parameters at m (measured on the H100 at N = K = 8192): up to
        m = 256 one consumer warp group on 64 weight rows (twice the blocks of 128-row tiles)
        times 64, 128 or 256 rows of a; beyond, two warp groups on 128 weight rows times 256 rows
        of a. k tiles of 4 KB of weights (one TMA box); 8 stages where they fit (a power of two:
        6 and 12 stages measured slower than 8 and 16 at m = 64)."""
        bk = 64 if self.wtype.bits <= 4 else 32
        if m <= 256:
            bm = 64 if m <= 64 else 128 if m <= 128 else 256
            return dict(block_n=64, consumers=1, block_m=bm, block_k=bk, stages=8 if bm <= 128 else 4)
        return dict(block_n=128, consumers=2, block_m=256, block_k=bk, stages=4)

    def config(self, m, n, k, hopper=False):
        """The kernel for m x n x k: {"hopper": True, MatmulA16WxHopper's parameters} where
        `hopper` (prepare made its weights) allows it, else MatmulA16Wx's parameters."""
        # (TMA reads the scales' rows: n * 2 bytes must be whole 16-byte units.)
        if self.hopper_allowed(m, n, k, hopper):
            return dict(hopper=True, **self.hopper_tile(m))
        return self.mma_config(m, n, k)

    def hopper_allowed(self, m, n, k, hopper):
        # (TMA reads the scales' rows: n * 2 bytes must be whole 16-byte units.)
        return hopper and m >= self.HOPPER_MIN_M and k % self.group == 0 and n % 8 == 0

    def mma_config(self, m, n, k, block_m=None):
        """MatmulA16Wx's parameters at m (its tile rows block_m, default by m), split-K by the rule."""
        block_m = block_m or (16 if m <= 32 else 64 if m < 128 else 128)
        small = block_m == 16
        # 64-row tiles (32 < m < 128) measured 10 % faster with 64-long k tiles in 4 stages than
        # with 32-long ones in 3 (m = 64 on the H100); 128-row tiles the same either way.
        bk = min(128 if small else 64 if block_m == 64 else 32, self.group)
        cfg = dict(block_m=block_m, block_n=128, block_k=bk, stages=4 if block_m < 128 else 3)
        cfg["repacked"] = small and repackable(self.wtype.bits, 16, 128, bk, 4)
        tiles = -(-m // cfg["block_m"]) * -(-n // cfg["block_n"])
        s = 1
        while s < 16 and tiles * s * 2 <= 2 * (self.sms or 132) and k // (bk * s * 2) >= 4:
            s *= 2
        cfg["split_k"] = s
        return cfg

    def candidates(self, m, n, k, hopper=False, magic=False, tma=False, wide=False):
        """The configurations tune=True times at m x n x k, the rule's first. By default a short
        list per m (a few compiles and timings per shape, so that a sweep over shapes and m fits
        in a couple of minutes), from what won on the H100 and H200 at N = K = 8192:

        - m <= 32, the 16-row mma.sync kernel: the rule's split s (mma_config: a power of two,
          the m x n tiles times s about two blocks per SM), 2 s, and the splits that fill one wave
          of 2 and 3 blocks per SM (any split up to 16: the last one takes the k tiles left), in
          4 stages, on the magic decode with late_scale where its weights exist (`magic`, else the
          plain decode); each split also interleaved (split z on the k tiles z, z + s, ...), and
          on the magic decode each also on the weights k tile after k tile (k_major); with
          f16_split_sums=True on sm_90 (`tma`) with 2 to 8 splits also split_red
          (the splits' sums added into f16 c; its k loop unrolled in the registers of 4 blocks an
          SM: unroll, min_blocks=4); up to m = 4 the splits that fill a wave, interleaved (k_major
          on the magic decode), also ending by fixed_sums; on the magic decode also stream-K
          (MatmulA16WxStream, every SM the same k tiles) in 3 blocks an SM, where each block gets
          two k tiles; on the magic decode from m = 9 also in 8-warp blocks (warps=8, the "magic8"
          weight orders): the splits that fill a wave of 2 and 3 blocks an SM, interleaved, on
          both orders (also unrolled in 3 blocks' registers), and stream-K; up to m = 8 the product transposed (weights_a, 8-row tiles of
          8 warps, the "magica8" orders) at the splits that fill 3 and 4 blocks an SM, interleaved,
          both orders (up to m = 4 also by fixed_sums; split 1 not interleaved);
        - from m = 33 with the wgmma kernel's weights (`hopper`): up to m = 256 its tiles of 64
          weight rows by 64, 128 or 256 rows of a (from m / 2 to fewer than 2 m; beyond m = 128 only
          256), beyond m = 128
          also 128 x 256 (4 stages); up to m = 256 128 weight rows by the rule's rows of a and by
          128 of them, split over k (wave_split) where unsplit they fill less than 90 % of the
          persistent grid's last round (the fullest split within 16 MB of partial sums; up to m = 64
          also unsplit where no split is offered, and 4 ways beside a split beyond 4; 128 x 256
          unsplit only where it does not split; each split also
          on the magic decode; 128 x 256's splits ending by peek_sums with lead 2 instead of the
          plain ending: split_endings), and the rule's tile on the
          magic decode where its weights
          exist (`magic`); beyond m = 256 128 x 256 also in clusters of two sharing a
          (cluster=2), in L2 groups of 4, on the magic decode (alone and in clusters), and in
          clusters with the last round's tiles split (tail_split; also on the magic decode) where
          that saves time;
        - the mma.sync kernel's rule, with splits 2 and 4, where the wgmma kernel does not apply,
          and there up to m = 64 the 16-row kernel (magic decode where its weights exist) split
          to fill a wave of 3 blocks per SM.

        wide=True: the whole space measured to make that list (every split 1 to 16 in 4 and 8
        stages, with and without late_scale (and with it two_sums, not yet timed
        against it), every wgmma tile and L2 group, the mma.sync kernel's
        64- and 128-row tiles split 1, 2 or 4 ways)."""
        if wide:
            return self.wide_candidates(m, n, k, hopper, magic, tma)
        out = [self.config(m, n, k, hopper)]

        def add(cfg):
            if cfg not in out:
                out.append(cfg)

        sms = self.sms or 132
        if m <= 32:
            base = self.mma_config(m, n, k, 16)
            s = base["split_k"]
            magic = magic and self.magic_tile(base["block_k"])
            decode = dict(magic=True, late_scale=True) if magic else {}
            tiles = -(-m // 16) * -(-n // base["block_n"])
            # (The magic decode in 4 stages: 51 KB of shared memory a block and 121 registers a
            # thread, 128 for uint4, since its scales come by cp.async: 4 blocks an SM. On the
            # H200 the time fell with each block more an SM up to 3: split 6 of 8192 x 8192 at 3
            # blocks an SM, 18.8 us; split 4, 18.9; split 8, 512 blocks, 22.8 (the mid call of
            # 02:30, 2026-11-29): the split that fills 4 blocks an SM never won and left the list.)
            splits = [x for x in (s, 2 * s, 2 * sms // tiles, 3 * sms // tiles)
                      if 1 <= x <= 16 and k // (base["block_k"] * x) >= 2]
            # Each split also interleaved (split z on the k tiles z, z + s, ...: the splits of a
            # tile read neighbouring tiles), and on the magic decode each on the weights k tile
            # after k tile (k_major: the blocks at one k step read one contiguous run); with
            # f16_split_sums (an opt-in: f16 sums of the splits) on sm_90 (where TMA applies) with 2
            # to 8 splits also split_red, its k loop unrolled (rolled, ptxas gave it 341 SASS
            # instructions a k tile, the others 317; unrolled 285). (The H200, session of 22:52:
            # split_red won at 28672 x 8192 and 3584 x 18944 by 2-3 %, 45.6 against 47.0 us; the
            # cluster ending with float32 partial sums, unsplit in 8 stages, 8 stages split and the
            # counter ending's unrolled loop never won and left the list; bounded=True, never the
            # pick in the mid call of 02:30, 2026-11-29, too.)
            for split in splits:
                for order in ({}, dict(k_major=True)) if magic else ({},):
                    add(dict(base, split_k=split, **decode, **order))
                    if split > 1:
                        add(dict(base, split_k=split, interleave=True, **decode, **order))  # (bounded as it is)
                # Up to m = 4 the splits that fill a wave, interleaved on the weights k tile after k
                # tile, also ending in one 64-bit atomic per element (fixed_sums: at m = 1 on 8192^2
                # 18.3 against 18.5 us for the counter ending on the H200; at m = 16, 2048 atomics a
                # block, 23.3 against 21.1 at 3584 x 18944, the mid call of 05:43, 2026-11-29; the
                # tuner's pick at m = 1 on 8192^2 and 3584 x 18944 in the call of 06:22, where split 14
                # took 18.9 us with it and more than 20.6 without).
                if m <= 4 and split > 1 and split in (2 * sms // tiles, 3 * sms // tiles):
                    add(dict(base, split_k=split, interleave=True, fixed_sums=True, **decode,
                             **(dict(k_major=True) if magic else {})))
                if self.f16_split_sums and tma and 2 <= split <= 8 and self.atype == float16:
                    add(dict(base, split_k=split, bounded=True, split_red=True, unroll=True, min_blocks=4, **decode))
            # Stream-K (MatmulA16WxStream): every SM the same k tiles, in 3 blocks an SM (the
            # splits above leave SMs a block more than others where the blocks are not a whole
            # number an SM). (Both mid calls of the session of 01:55 on the H200: it won at 28672 x
            # 8192 int4 m = 1, 46.4 against 47.1 us and 46.2 against 46.5, and lost by 15-25 %
            # elsewhere; 2 and 4 blocks an SM and one ring over a block's run never won.)
            if magic and tiles * -(-k // base["block_k"]) >= 2 * 3 * sms:  # (two k tiles a block at least)
                add(dict(base, split_k=1, blocks=3 * sms, **decode))
            # From m = 9, 8-warp blocks on the magic decode (each warp half the columns of a 4-warp
            # block's: 69-79 registers, so 3 blocks an SM hold 24 warps where 4-warp blocks held 12; ncu
            # had the 4-warp kernel's warps issue once in 6 cycles on fixed-latency, math-pipe and
            # barrier stalls): the splits that fill a wave of 2 and 3 blocks an SM, interleaved, on both
            # weight orders, and stream-K. (The H200, mid call of 2026-11-29 09:00: at 3584 x 18944, m =
            # 16, split 9, 20.2 us against 21.2 for 4 warps; at m = 1 the transposed product below won
            # at both shapes timed, 8-warp splits no faster than 4-warp ones: 19.2 against 18.8 us.)
            if magic and m > 8 and repackable(self.wtype.bits, 16, base["block_n"], base["block_k"], 8):
                for split in splits:
                    if split > 1 and split in (2 * sms // tiles, 3 * sms // tiles):
                        for order in ({}, dict(k_major=True)):
                            add(dict(base, split_k=split, interleave=True, warps=8, **decode, **order))
                        # (unrolled in 3 blocks' registers, 80: the mid call of 09:40 timed it the fastest
                        # 8-warp loop at m = 16, 19.2 against 19.9 us rolled and 19.6 for 4 warps at 8192^2,
                        # 20.2 against 20.3 and 21.3 at 3584 x 18944)
                        add(dict(base, split_k=split, interleave=True, warps=8, unroll=True, min_blocks=3, **decode))
                if tiles * -(-k // base["block_k"]) >= 2 * 3 * sms:
                    add(dict(base, split_k=1, blocks=3 * sms, warps=8, **decode))
            # Up to m = 8 the product transposed on 8-row tiles of 8 warps (weights_a: half the mma and
            # the ldmatrix of a; 62 registers, 4 blocks an SM): the splits that fill a wave of 3 and 4
            # blocks an SM, interleaved, on both weight orders (up to m = 4 also by fixed_sums). (The
            # H200, mid call of 2026-11-29 09:00, m = 1: 8192^2 17.1 us, split 6 by fixed_sums, against
            # 18.8 for the best 4-warp 16-row split; 3584 x 18944 17.3, split 14, against 18.8.)
            if magic and m <= 8 and repackable(self.wtype.bits, 16, base["block_n"], base["block_k"], 8):
                # (Split 1 where that fills 3 blocks an SM: 28672 x 8192 at m = 1, 43.8 us against 44.7
                # split 2 and 46.6 for 4-warp stream-K in the mid call of 09:40. The k loop unrolled in 4
                # blocks' registers, 165 SASS instructions a k tile against 180, timed no faster there:
                # 17.1 against 17.0 us at 8192^2.)
                for split in sorted({min(16, x * sms // tiles) for x in (3, 4)}):
                    if split >= 1 and k // (base["block_k"] * split) >= 2:
                        tile = dict(base, block_m=8, split_k=split, warps=8, weights_a=True, **decode,
                                    **(dict(interleave=True) if split > 1 else {}))
                        add(tile)
                        add(dict(tile, k_major=True))
                        if m <= 4 and split > 1:
                            add(dict(tile, k_major=True, fixed_sums=True))
                # The same on 4-warp blocks (each thread twice the weights a k tile: 286 SASS instructions
                # for 16 words against 185 for 8; 80 registers), k tile after k tile, at the split that
                # fills 3 blocks an SM (the mid call of 2026-11-29 11:46: 14.37 against 14.88 us for
                # 8 warps at 8192^2, m = 1, split 6 by fixed_sums).
                if repackable(self.wtype.bits, 16, base["block_n"], base["block_k"], 4):
                    split = min(16, 3 * sms // tiles)
                    if split >= 1 and k // (base["block_k"] * split) >= 2:
                        tile = dict(base, block_m=8, split_k=split, weights_a=True, k_major=True, **decode,
                                    **(dict(interleave=True) if split > 1 else {}))
                        add(tile)
                        if m <= 4 and split > 1:
                            add(dict(tile, fixed_sums=True))
            # Up to m = 16 the product transposed on k tiles of two scale groups (block_k = 256 of group
            # 128, 3 stages: 61 KB of shared memory, 80 registers, 3 blocks an SM; 8 rows of a up to m =
            # 8, else 16), the weights k tile after k tile: the loop's fixed work (copies' addresses,
            # wait, barrier, a's tile) over twice the weights, 289 SASS instructions a k tile against
            # 2 x 185 for int4 at m = 1; the splits that fill a wave of 2 and 3 blocks an SM,
            # interleaved, up to m = 4 also by fixed_sums. (The mid call of 2026-11-29 11:46: 8192^2
            # m = 1 split 4 14.66 against 14.88 us for 128-long tiles; 28672 x 8192 int4 split 1 37.9
            # against 39.8, uint4 38.0 against 40.6; 8192^2 m = 16 split 4 18.4 against 18.8 for the
            # 16-row 8-warp kernel.)
            long_k = 2 * self.group
            if magic and m <= 16 and self.group == 128 and k % long_k == 0 and repackable(self.wtype.bits, 16, 128, long_k, 8):
                for split in sorted({min(16, x * sms // tiles) for x in (2, 3)}):
                    if split >= 1 and k // (long_k * split) >= 2:
                        tile = dict(base, block_m=8 if m <= 8 else 16, block_k=long_k, stages=3, split_k=split, warps=8,
                                    weights_a=True, k_major=True, **decode, **(dict(interleave=True) if split > 1 else {}))
                        add(tile)
                        if m <= 4 and split > 1:
                            add(dict(tile, fixed_sums=True))
                # (Stream-K on them, 396 or 264 blocks, measured 1.08-1.39x the unsplit kernel's time at
                # 28672 x 8192, m = 1, in the mid call of 2026-11-29 12:27, though the split leaves 92 SMs
                # two blocks and 40 one: removed.)
            # (The TMA copies and 8 stages split, slower than 4 stages by cp.async at every shape
            # on the H200, are in the wide space only.)
            return out
        if self.hopper_allowed(m, n, k, hopper):
            rule = self.config(m, n, k, hopper)
            big = dict(hopper=True, block_n=128, consumers=2, block_m=256, block_k=rule["block_k"], stages=4)
            for bm in (64, 128, 256):
                # (Beyond m = 256 they were 1.3-1.8 times as slow as 128 x 256 on the H200, at n = 3584 too;
                # at m = 256, 64 x 128 was the pick at none of the 8 sizes of the call of 2026-11-28 22:10.)
                if m // 2 <= bm < 2 * m and m <= 256 and not (m > 128 and bm == 128):
                    add(dict(big, block_n=64, consumers=1, block_m=bm, stages=8 if bm <= 128 else 4))
            if m > 256:  # (unsplit clusters never won at m = 256 on the H200)
                add(big)
                add(dict(big, cluster=2))
                add(dict(big, tile_group=4))
                # (clusters in L2 groups of 4 ran within 0.3 % of clusters alone at every m >= 1024 size
                # of the mid H200 call of 2026-11-29 02:30: not offered)
                # (192 and 240 rows of a, which fill the grid's rounds better than 256 at m = 4096,
                # n = 3584, measured 2 % and 6 % slower than 256 on the H200.)
                if magic and self.hopper_magic():  # the magic decode: fewer instructions beside the wgmma
                    add(dict(big, magic=True))
                    add(dict(big, cluster=2, magic=True))
                tail = self.tail_split(-(-n // 128) * -(-m // 256), k // rule["block_k"])
                if tail > 1:  # the last round's tiles split over k, in clusters (alone it never won on the
                    # H200: 761.8 against 734.6 us at n = 3584, m = 4096 in the mid call of 2026-11-29
                    # 02:30, 754.8 against 729.6 at uint4 in the next), also on the magic decode (the
                    # clusters' pick where no tile splits: 726.0 against 737.8 us at 8192^2, m = 4096)
                    add(dict(big, tail_split=tail, cluster=2))
                    if magic and self.hopper_magic():
                        add(dict(big, tail_split=tail, cluster=2, magic=True))
            else:
                # On 128 weight rows (two consumer warp groups), split over k where their tiles leave
                # the persistent grid's last round under 90 % full (wave_split; n = 3584, and most
                # shapes at m = 64: 0.69-0.98x cuBLAS unsplit on the H200, 1.13-1.72x split at m =
                # 64). The H200 measured no gain from splits on 64 weight rows or beyond m = 256.
                # (Their splits in clusters of two, the last round's tiles split alone, and 128 x
                # 128 in clusters, never won up to m = 256 in the mid H200 call of 2026-11-28.)
                # 128 x 256 unsplit (beyond m = 128) only where it does not split: split, it fills
                # the rounds better (at m = 256 the H200 timed it split 1.3-1.6 times as fast).
                for bm in sorted({rule["block_m"], min(rule["block_m"], 128)}):
                    tile = dict(big, block_m=bm, stages=8 if bm <= 128 else 4)
                    tiles = -(-n // 128) * -(-m // bm)
                    split = self.wave_split(tiles, k // rule["block_k"], 128 * bm * 4)
                    # Where no split fills the rounds better, up to m = 64 the tile unsplit too, with
                    # two consumer warp groups an SM where 64 x 64 tiles have one (28672 x 8192, m = 64:
                    # 81.2 us on the magic decode against 102.1 for 64 x 64; where a split is offered, it
                    # lost to it: the mid H200 call of 2026-11-29 12:27); a split beyond 4 ways also 4 ways
                    # (n = 3584, m = 64: 4 ways 31.6 us, 9 ways 40.9, the same call).
                    ways = [split] + ([4] if split > 4 and m <= 64 else [])
                    # (128 x 128 unsplit at m = 256 never won on the H200 and left the list: 58.9 us at
                    # 8192^2 against 52.4 for the pick in the mid call of 2026-11-29 14:41, 223.8 against
                    # 175.5 at 28672 x 8192 in the figures call before.)
                    if split > 1 or m <= 64 or bm == 256:
                        for x in ways:
                            for cfg in self.split_endings(dict(tile, **({"split_k": x} if x > 1 else {}))):
                                add(cfg)
                    if magic and self.hopper_magic() and (split > 1 or m <= 64):  # (fewer instructions beside the wgmma)
                        for x in ways:
                            for cfg in self.split_endings(dict(tile, **({"split_k": x} if x > 1 else {}), magic=True)):
                                add(cfg)
                if magic and self.hopper_magic():  # (2-5 % faster at m = 64-256 before the splits)
                    add(dict(rule, magic=True))
            for cfg in self.extra:
                add(dict(big, **cfg))
            # The wgmma kernel's splits stand in for the mma.sync kernel's (whose 16-row tiles at m
            # = 64 were 1.2-2x slower than them on the H200).
            mma_tiles, small = False, False
        else:
            mma_tiles, small = True, m <= 64
        if mma_tiles:
            base = self.mma_config(m, n, k)
            add(base)
            tiles = -(-m // base["block_m"]) * -(-n // base["block_n"])
            for split in (2, 4):
                if k // (base["block_k"] * split) >= 2 and tiles * split <= 4 * sms:
                    add(dict(base, split_k=split))
        if small:  # the 16-row kernel on each 16 rows of a, split to fill a wave of 3 blocks per SM
            small = self.mma_config(m, n, k, 16)
            tiles = -(-m // 16) * -(-n // small["block_n"])
            split = max(1, min(16, 3 * sms // tiles, k // (2 * small["block_k"])))  # two k tiles a split
            magic = magic and self.magic_tile(small["block_k"])
            add(dict(small, split_k=split, **(dict(magic=True, late_scale=True) if magic else {})))
        return out

    @staticmethod
    def split_endings(cfg):
        """The ending the short list times a wgmma split candidate with: on 256 rows of a,
        peek_sums with lead=2 in place of the plain ending; else cfg itself. (The mid H200 call of
        2026-11-29 14:41, 128 x 256 in 2 splits at m = 256, 7 rounds launch by launch: at 8192^2
        52.6 us against 54.1 for the plain ending, int4 and uint4 on the magic decode, 164.1 against
        164.7 at 8192 x 28672. wait_sums (the first split waiting for the others' sums) timed
        52.4 and spread_sums (every split adding a slice, once all have stored) 53.7-53.9: both
        spun on other blocks, which nothing guarantees resident, and were removed. The mid call of
        15:21, `bench/w4a16.py --ms 256 --extra ...`: at 8192^2 peek_sums with lead 1 54.8 us, lead 0
        54.7-55.2 and in clusters of two 54.1-54.2, against 52.9-53.1 for lead 2; at 3584 x 18944,
        4 splits, 62.0-62.1 us, where spread_sums had taken 58.8-59.6 in the figures call before.)"""
        split = cfg.get("split_k", 1)
        if split == 1 or cfg["block_m"] != 256:
            return [cfg]
        return [dict(cfg, peek_sums=True, lead=2)]

    def hopper_magic(self):
        """Whether MatmulA16WxHopper(magic=True) takes these codes (4-bit integers, f16)."""
        return magic_applies(self.wtype, self.atype, 64) and self.hopper_tile(256)["block_k"] == 64

    def wave_split(self, tiles, ktiles, tile_bytes):
        """The split-K of the wgmma kernel for `tiles` output tiles of `ktiles` k tiles each: the
        fewest ways (1 to 16, 8 k tiles a split at least, PARTIALS_BYTES of partial sums at most,
        tile_bytes a tile a split) whose units fill the persistent grid's rounds (units / (rounds x
        SMs)) to 90 %, else the fullest (n = 3584 at m = 256: 56 tiles of 128 x 128 in 2 splits,
        85 %, where the 7 that fill 99 % would write 26 MB: 67.9 us on the H200, 79.6 the best
        unsplit tile; it offered no split there before; the mid H200 call of 2026-11-29 02:30 timed
        7 splits 86.9 us against 62.4 for 2, 128 x 256 in 9 splits 90.9 against 62.0 for 4)."""
        sms = self.sms or 132
        fill = {s: tiles * s / (-(-tiles * s // sms) * sms) for s in range(1, 17)
                if s == 1 or ktiles // s >= 8 and s * tiles * tile_bytes <= self.PARTIALS_BYTES}
        return next((s for s in sorted(fill) if fill[s] >= 0.9), max(fill, key=lambda s: (fill[s], -s)))

    # The most float32 partial sums a split kernel may write (and its last splits read back):
    # 16 MB, a third of the H200's L2. The mid H200 call of 2026-11-28 timed splits of 68-118 MB
    # 1.15-3.4 times as long as the unsplit kernel (m = 1024: 112 tiles of 128 x 256 split 7,
    # 664 against 194 us; 104 split 5, 882 against 623), one of 15 MB 8 % faster (m = 4096,
    # 28672 x 8192: 20 tiles split 6).
    PARTIALS_BYTES = 16 << 20

    def tail_split(self, tiles, ktiles, tile_bytes=128 * 256 * 4):
        """MatmulA16WxHopper's tail_split for `tiles` output tiles (of tile_bytes float32 partial
        sums) of `ktiles` k tiles each, a whole round of the persistent grid at least: the ways (2
        to 16, 8 k tiles a split at least, PARTIALS_BYTES at most) that the tiles of the grid's last
        round split into to take the least time, where that saves 2 % of the whole at least; else
        1. A way's time: the rounds its splits fill, each 1 / ways of a round, and the last split's
        reading of each split's partial sums (at about 150 GB/s an SM: 1.5 k tiles' time each)."""
        sms = self.sms or 132
        whole, tail = tiles // sms, tiles % sms
        if whole == 0 or tail == 0:
            return 1
        cost = {s: -(-tail * s // sms) / s + 1.5 * s / ktiles for s in range(2, 17)
                if ktiles // s >= 8 and tail * s * tile_bytes <= self.PARTIALS_BYTES}
        best = min(cost, key=lambda s: (cost[s], s), default=1)
        return best if best > 1 and whole + cost[best] <= 0.98 * (whole + 1) else 1

    def wide_candidates(self, m, n, k, hopper=False, magic=False, tma=False):
        """candidates(wide=True), the rule's first: for m <= 32 the 16-row kernel split over k 1 to
        16 ways, in 4 or 8 stages, and where its weights exist (`magic`: prepare made them) the
        same on the magic decode, with and without late_scale (`tma`: TMA copies apply, see
        tma_applies: with late_scale, by cp.async and by TMA); from m = 33 the wgmma kernel's
        tiles (64 weight rows times 64, 128 or 256 rows of a, and 128 x 256 in 4 stages, 128 x 128
        in 8, 128 x 256 walking its tiles in groups of 4 or 16 and in clusters of two) where its
        weights exist, and the mma.sync kernel's 64- and 128-row tiles split 1, 2 or 4 ways (the
        wgmma kernel's split-K is the short list's: wave_split)."""
        out = [self.config(m, n, k, hopper)]

        def add(cfg):
            if cfg not in out:
                out.append(cfg)

        if self.hopper_allowed(m, n, k, hopper):
            bk = self.hopper_tile(m)["block_k"]
            for bm in (64, 128, 256):
                if bm < 2 * m:
                    add(dict(hopper=True, block_n=64, consumers=1, block_m=bm, block_k=bk, stages=8 if bm <= 128 else 4))
            if m > 128:
                add(dict(hopper=True, block_n=128, consumers=2, block_m=256, block_k=bk, stages=4))
                # Twice the stages on half the rows of a (the ring of 256-row tiles fills shared
                # memory at 4), and the tile walk's group (which tiles share a and w in L2).
                add(dict(hopper=True, block_n=128, consumers=2, block_m=128, block_k=bk, stages=8))
                for group in (4, 16):
                    add(dict(hopper=True, block_n=128, consumers=2, block_m=256, block_k=bk, stages=4, tile_group=group))
                add(dict(hopper=True, block_n=128, consumers=2, block_m=256, block_k=bk, stages=4, cluster=2))
        for bm in ((16,) if m <= 32 else (64, 128) if m > 64 else (64,)):
            base = self.mma_config(m, n, k, bm)
            tiles = -(-m // bm) * -(-n // base["block_n"])
            for split in ((1, 2, 4, 8, 16) if bm == 16 else (1, 2, 4)):
                # Splits only where the tiles alone leave SMs idle, and two k tiles per split at least.
                if k // (base["block_k"] * split) >= 2 and (split == 1 or tiles * split <= 4 * (self.sms or 132)):
                    # Small m streams the weights: twice the stages keep twice the bytes in flight.
                    for stages in ((base["stages"], 2 * base["stages"]) if bm == 16 else (base["stages"],)):
                        add(dict(base, split_k=split, stages=stages))
                        if bm == 16 and magic and self.magic_tile(base["block_k"]):
                            # (late_scale measured faster at every m <= 16 on the H200: with TMA, the
                            # scales in the product give way to the copies by TMA.)
                            for late, by_tma in ((True, False), (True, True)) if tma else ((False, False), (True, False)):
                                add(dict(base, split_k=split, stages=stages, magic=True, late_scale=late,
                                         **({"tma": True} if by_tma else {})))
                                if late and not by_tma:  # (not yet timed against the above: wide only)
                                    add(dict(base, split_k=split, stages=stages, magic=True, late_scale=True,
                                             two_sums=True))
        return out

    @staticmethod
    def tma_applies(n, k, c):
        """Whether MatmulA16Wx(tma=True) can run: c a CUDA tensor on sm_90 or later (TMA), rows of a
        and of the scales whole 16-byte units (k and n multiples of 8)."""
        return (getattr(c, "is_cuda", False) and n % 8 == 0 and k % 8 == 0 and
                tilus._C.device_info()["arch"].startswith(("sm_90", "sm_100")))

    def magic_tile(self, bk):
        """Whether the small-m kernel's tile of k length bk has the magic decode (16 x 128 on 4 warps)."""
        return magic_applies(self.wtype, self.atype, bk) and repackable(self.wtype.bits, 16, 128, bk, 4)

    def tuning_key(self, m, n, k, weights, c):
        """The key of self.tuned and self.timings for a call: (m rounded up to a power of two, n, k,
        wgmma weights, magic weights, TMA copies apply)."""
        return (1 << max(m - 1, 0).bit_length(), n, k, "wgmma" in weights, "magic" in weights or "magic_k" in weights,
                self.tma_applies(n, k, c))

    def tuned_config(self, key, call, m, n, k, have=None):
        """The fastest of `candidates` at this size (key: tuning_key) whose result agrees with the
        general kernel's, timed and checked once per process (call(cfg): the kernel of a
        configuration and its arguments, at the call's own m, n, k); the candidates compile in
        parallel first, and those within 3 % of the fastest are timed again, 45 times each. have: the
        weight orders there are (prepare's keys; None: all), the candidates that read another left out."""
        if key not in self.tuned:
            hopper, magic, tma = key[3:]
            candidates = [cfg for cfg in self.candidates(key[0], n, k, hopper, magic, tma, self.wide)
                          if have is None or self.layout_of(cfg) in have]
            # (15 timings each: with 7, one H200 run picked at m = 16 a configuration of two
            # waves that ran 1.4 times as long under ncu as its pick at m = 1.)
            timings = timed_configs(candidates or [dict(self.mma_config(m, n, k), repacked=False)],
                                    call, repeat=15)
            # Those within 3 % of the fastest timed again, 3 times as often, in rounds of their own:
            # one sweep's pick at m = 1024, 3584 x 18944 ran 0.92x cuBLAS where both mid calls' ran
            # 0.99x (H200, 2026-11-29).
            close = [cfg for ms, cfg in timings if ms <= 1.03 * timings[0][0]]
            if len(close) > 1:
                timings = timed_configs(close, call, repeat=45) + timings[len(close):]
            self.timings[key] = timings
            self.tuned[key] = self.checked_fastest(self.timings[key], call, m, n, k)
        return self.tuned[key]

    def checked_fastest(self, timings, call, m, n, k):
        """The first configuration of timings ([(ms, cfg)], fastest first) whose c is within 1 % of
        the largest value of the c of the general mma.sync kernel on the plain weights (a wrong
        configuration once won a sweep, caught only by the bench); one that is not is reported
        on stderr and passed over."""
        reference = dict(self.mma_config(m, n, k), repacked=False)
        kernel, args = call(reference)
        kernel(*args)
        want = to_numpy(args[7])  # c, of either kernel's arguments
        scale = max(float(np.abs(want).max()), 1e-30)
        for _, cfg in timings:
            kernel, args = call(cfg)
            kernel(*args)
            err = float(np.abs(to_numpy(args[7]) - want).max()) / scale
            if err < 1e-2:
                return cfg
            print(f"QuantizedMatmul: {cfg} at m={m}, n={n}, k={k} is off the general kernel by {err:.3g} of its "
                  "largest value: passed over", file=sys.stderr, flush=True)
        return reference

    def hopper_applies(self, b):
        """Whether MatmulA16WxHopper can run on these weights: a torch tensor on an sm_90a GPU,
        codes whose wgmma fragment order exists, scale groups of two 64-long k tiles."""
        bk = self.hopper_tile(256)["block_k"]
        return (hasattr(b, "is_cuda") and b.is_cuda and tilus._C.device_info()["arch"] == "sm_90a" and
                self.group % (2 * bk) == 0 and hopper_repackable(self.wtype.bits, bk))

    # The weight orders prepare makes (its dict's keys; each configuration reads one: layout_of);
    # magic8 and magic8_k: the magic decode's orders for the 8-warp small-m blocks (warps=8); magica8
    # and magica8_k the same for weights_a=True (magic_a_layout's; magica_k on 4 warps), magica8k256_k for its k tiles of
    # two scale groups (block_k=256); (a name's nR: tiles of R weight rows, block_n=R, where not 128;
    # kD: k tiles of D, where longer than 128).
    LAYOUTS = ("plain", "repacked", "magic", "magic_k", "magic8", "magic8_k", "magica8", "magica8_k",
               "magica_k", "magica8k256_k", "wgmma", "wgmma_magic")
    RULE_LAYOUTS = ("plain", "repacked", "wgmma")  # the orders the rule (config) reads

    @staticmethod
    def layout_of(cfg):
        """The weight order (a key of prepare's dict) that configuration cfg reads."""
        if cfg.get("hopper"):
            return "wgmma_magic" if cfg.get("magic") else "wgmma"
        if cfg.get("magic"):
            warps = cfg.get("warps", 4)
            rows, depth = cfg.get("block_n", 128), cfg.get("block_k", 128)
            return (f"magic{'a' if cfg.get('weights_a') else ''}{warps if warps != 4 else ''}" +
                    (f"n{rows}" if rows != 128 else "") + (f"k{depth}" if depth > 128 else "") +
                    ("_k" if cfg.get("k_major") else ""))
        return "repacked" if cfg.get("repacked") else "plain"

    def tuned_layouts(self):
        """The weight orders the configurations tuned so far read (with "plain"): prepare(b,
        layouts=q.tuned_layouts()) after the tuning keeps only those copies."""
        return sorted({"plain"} | {self.layout_of(cfg) for cfg in self.tuned.values()})

    def prepare(self, b, layouts=None):
        """The weight bytes [n, k * bits / 8] (numpy or torch) in the orders the kernels load, a
        dict by LAYOUTS' names: "plain" (b as it is, no copy: the fallback and the tuner's check
        read it), "repacked" for the small-m kernel where its tile has a fragment order, "magic"
        and "magic_k" (the magic decode's order, n tile after n tile or k tile after k tile)
        where that applies (4-bit integer codes, f16), "wgmma" and "wgmma_magic" for the wgmma
        kernel where it applies (once, by RepackWeights where b lives). Each copy costs memory
        (the int4 bytes again): `layouts` names the orders to make (those that do not apply are
        left out); None: the orders the kernel choice may read, with tune=True every one that
        applies (the candidates read them all), else the rule's (RULE_LAYOUTS). A call then
        chooses among the configurations whose order is there (the plain weights' kernel where
        none is)."""
        bits, bk = self.wtype.bits, min(128, self.group)
        if self.sms is None and hasattr(b, "is_cuda") and b.is_cuda:
            import torch
            self.sms = torch.cuda.get_device_properties(b.device).multi_processor_count
        wanted = set(self.LAYOUTS if layouts is None and self.tune else self.RULE_LAYOUTS if layouts is None
                     else layouts)
        assert wanted <= set(self.LAYOUTS), f"layouts: some of {self.LAYOUTS}"
        out = {"plain": b}
        small, hopper = repackable(bits, 16, 128, bk, 4), self.hopper_applies(b)
        if not small and not hopper:
            return out
        n, k = b.shape[0], b.shape[1] * 8 // bits
        if small and "repacked" in wanted:
            out["repacked"] = repack_weights(b, self.wtype, n, k, 128, bk)
        if small and self.magic_tile(bk):
            for order in self.LAYOUTS:  # magic[a][W][nR][kD][_k]: weights_a's order, blocks of W warps (4), R
                # weight rows a tile (128), k tiles of D (bk; weights_a: 2 groups where bk is one), k-major
                name = re.fullmatch(r"magic(a?)(\d*)(?:n(\d+))?(?:k(\d+))?(_k)?", order)
                warps, rows, depth = ((int(name.group(2) or 4), int(name.group(3) or 128), int(name.group(4) or bk))
                                      if name else (0, 0, 0))
                if (warps and order in wanted and repackable(bits, 16, rows, depth, warps) and
                        (depth == bk or name.group(1) and depth == 2 * self.group and k % depth == 0)):
                    out[order] = repack_for_magic(b, self.wtype, n, k, rows, depth, warps=warps,
                                                  k_major=bool(name.group(5)), weights_a=bool(name.group(1)))
        if hopper and "wgmma" in wanted:
            out["wgmma"] = repack_for_hopper(b, self.wtype, n, k, self.hopper_tile(256)["block_k"])
        if hopper and self.hopper_magic() and "wgmma_magic" in wanted:
            out["wgmma_magic"] = repack_for_hopper(b, self.wtype, n, k, 64, magic=True)
        return out

    def __call__(self, m, n, k, a, weights, scales, zeros, c, workspace):
        # A size met before with these weights (the same dict) launches its plan: no tuning key, no
        # configuration's name or kernel looked up again (host time a call on the H200, 8192^2 at m = 1:
        # 10.5-11.3 us against 19.3-20.0 without, mid call of 2026-11-29 15:21).
        cuda = getattr(c, "is_cuda", False)
        plan = self.plans.get((m, n, k, id(weights), cuda))
        if plan is not None and plan[0] is weights:
            kernel, args = self.plan_call(plan[1:], m, n, k, a, scales, zeros, c, workspace)
            kernel(*args)
            return
        hopper = "wgmma" in weights
        if self.tune and cuda:
            cfg = self.tuned_config(self.tuning_key(m, n, k, weights, c),
                                    lambda cfg: self.kernel_call(cfg, m, n, k, a, weights, scales, zeros, c, workspace),
                                    m, n, k, have=weights)
        else:
            cfg = self.config(m, n, k, hopper)
        if self.layout_of(cfg) not in weights:  # an order prepare was not asked for: the plain weights
            cfg = dict(self.mma_config(m, n, k), repacked=False)
        plan = self.plan_of(cfg, m, n, weights)
        self.plans[(m, n, k, id(weights), cuda)] = (weights,) + plan
        kernel, args = self.plan_call(plan, m, n, k, a, scales, zeros, c, workspace)
        kernel(*args)

    def launch(self, cfg, m, n, k, a, weights, scales, zeros, c, workspace):
        kernel, args = self.kernel_call(cfg, m, n, k, a, weights, scales, zeros, c, workspace)
        kernel(*args)

    def partials(self, workspace, need):
        """workspace where it holds `need` float32 elements, else a buffer of the object's own of
        that size (MatmulA16WxHopper's partial sums of whole tiles: past 16 x m x n where m or n is
        ragged and the split deep)."""
        size = workspace.numel() if hasattr(workspace, "numel") else workspace.size
        if size >= need:
            return workspace
        own = self.own_partials
        if own is None or (own.numel() if hasattr(own, "numel") else own.size) < need or type(own) is not type(workspace):
            if hasattr(workspace, "numel"):
                import torch
                own = torch.empty(need, dtype=torch.float32, device=workspace.device)
            else:
                own = np.empty(need, np.float32)
            self.own_partials = own
        return own

    def kernel_call(self, cfg, m, n, k, a, weights, scales, zeros, c, workspace):
        """The kernel object of configuration cfg (made once) and the arguments of its call."""
        return self.plan_call(self.plan_of(cfg, m, n, weights), m, n, k, a, scales, zeros, c, workspace)

    def plan_call(self, plan, m, n, k, a, scales, zeros, c, workspace):
        """The kernel of plan_of's plan and the arguments of its call."""
        kernel, w, size, need = plan
        return kernel, (m, n, k, a, w, scales, zeros, c, workspace if need is None else self.partials(workspace, need),
                        self.arrival_counters(c, size))

    def plan_of(self, cfg, m, n, weights):
        """(the kernel of configuration cfg, made once; its weights; the arrival counters it needs; the
        float32 partial sums it needs, None where the caller's workspace serves as it is)."""
        key = tuple(sorted(cfg.items()))
        if cfg.get("hopper"):
            if key not in self.kernels:
                params = {name: v for name, v in cfg.items() if name != "hopper"}
                blocks = (self.sms or 132) // cfg.get("cluster", 1) * cfg.get("cluster", 1)
                self.kernels[key] = MatmulA16WxHopper(self.wtype, self.group, blocks=blocks, atype=self.atype, **params)
        elif key not in self.kernels:
            script = MatmulA16WxStream if cfg.get("blocks") else MatmulA16Wx
            self.kernels[key] = script(self.wtype, self.group, atype=self.atype, **cfg)
        cl, tiles_n = cfg.get("cluster", 1), -(-n // cfg["block_n"])
        tiles = -(-m // cfg["block_m"]) * -(-tiles_n // cl) * cl  # (clusters: whole pairs of weight tiles)
        # (fixed_sums: an int64 per element of c, zero between launches as the counters are)
        size = max(tiles, 2 * m * n) if cfg.get("fixed_sums") else tiles
        need = None
        if cfg.get("hopper"):
            need = self.kernels[key].partial_elements(m, n)  # (its split tiles' partial sums, whole tiles)
        elif cfg.get("blocks"):  # stream-K's partial sums: two slots a block of min(m, 16) x 128
            need = 2 * cfg["blocks"] * min(m, cfg["block_m"]) * cfg["block_n"]
        return self.kernels[key], weights[self.layout_of(cfg)], size, need


def quantized_operands(wtype, k, n, group, rng, atype=float16):
    """Random codes of wtype [n, k] packed to bytes along k (pack_codes), with scales, zeros
    (float64, representable in atype) and the dequantized weights [k, n] (float64, transposed:
    c = a @ w) as the kernel computes them."""
    bits = wtype.bits
    if wtype.is_float():
        table = np.array([wtype.decode_float(c) for c in range(1 << bits)])
        finite = np.nonzero(np.isfinite(table))[0]
        codes = rng.choice(finite, size=(n, k))
        values = table[codes]
    else:
        lo = -(1 << (bits - 1)) if wtype.is_signed() else 0
        values = rng.integers(lo, lo + (1 << bits), size=(n, k))
        codes = values & ((1 << bits) - 1)
    scales = round_to(rng.random((k // group, n)) * 0.02 + 0.005, atype)
    zeros = (rng.integers(0, 1 << bits, (k // group, n)) if not wtype.is_signed() else np.zeros((k // group, n)))
    zeros = zeros.astype(np.float64)
    # The kernel computes in atype: (code - zero) exactly, then one rounding of the product.
    w = round_to(round_to(values.T - np.repeat(zeros, group, axis=0), atype) * np.repeat(scales, group, axis=0), atype)
    return pack_codes(codes, bits), scales, zeros, w


def run(name, wtype, m, n, k, group=128, atype=float16, timing=False, cfg=None, tune=False):
    """Checks QuantizedMatmul at m x n x k against float64 (its rule's kernel, or configuration
    cfg where its weights exist: the wgmma kernel's on an sm_90a GPU;
    tune: QuantizedMatmul(tune=True) on the GPU, every candidate launched and the winner checked,
    the rule elsewhere)."""
    from common import check, on_gpu, timed
    rng = np.random.default_rng(0)
    a = round_to(rng.uniform(-1, 1, (m, k)), atype)
    packed, scales, zeros, w = quantized_operands(wtype, k, n, group, rng, atype)
    kernel = QuantizedMatmul(wtype, group, atype=atype, tune=tune)
    args = [host_array(a, atype), packed, host_array(scales, atype), host_array(zeros, atype),
            host_array(np.zeros((m, n)), atype), np.zeros((16, m, n), np.float32)]
    device = "cpu"
    if on_gpu():
        import torch
        args = [torch.from_numpy(x.view(np.int16) if x.dtype == np.uint16 else x).cuda() for x in args]
        device = "cuda"
    args[1] = kernel.prepare(args[1], layouts=None if cfg is None else ("plain", kernel.layout_of(cfg)))
    if cfg is not None and kernel.layout_of(cfg) not in args[1]:
        print(f"{name} {wtype.name} {m}x{n}x{k} {cfg}: skipped (the wgmma kernel runs on sm_90a GPUs)")
        return
    if cfg is None:
        kernel(m, n, k, *args)
        cfg = next(iter(kernel.tuned.values()), None) or kernel.config(m, n, k, hopper="wgmma" in args[1])
    else:
        kernel.launch(cfg, m, n, k, *args)
    got = args[4].cpu().numpy() if device == "cuda" else args[4]
    how = (f"wgmma{' split ' + str(cfg['split_k']) if cfg.get('split_k', 1) > 1 else ''}"
           f"{' magic' if cfg.get('magic') else ''}" if cfg.get("hopper") else
           f"stream-K {cfg['blocks']} blocks" if cfg.get("blocks") else
           f"split_k {cfg['split_k']}{' k-major' if cfg.get('k_major') else ''}"
           f"{' 8 warps' if cfg.get('warps', 4) == 8 else ''}{' weights-a' if cfg.get('weights_a') else ''}"
           f"{' fixed-sums' if cfg.get('fixed_sums') else ''}")
    how += ", tuned" if kernel.tuned else ""
    check(f"{name} {wtype.name} x {atype.name} {m}x{n}x{k} ({how})",
          from_host_array(got, atype), a @ w, 2e-2, 1e-2)
    if timing:
        ms = timed(lambda: kernel(m, n, k, *args), device)
        weight_bytes = k * n * wtype.bits / 8
        print(f"{name} {wtype.name} x {atype.name}: {m}x{n}x{k} in {ms * 1e3:.1f} us "
              f"({weight_bytes / ms / 1e6:.1f} GB/s of weights) on {device}")


if __name__ == "__main__":
    # TILUS_EXAMPLES_QUICK=1 (the sanitizers' runs, e.g. racecheck): each kernel family once at a
    # small size, one launch each (the tuner's runs, which launch every candidate 60 times and
    # more, left out); the full run adds every weight type by the rule, more tile shapes and the tuner.
    quick = os.environ.get("TILUS_EXAMPLES_QUICK")
    run("matmul_a16wx", tilus.int4, 37, 192, 1024)  # the rule: wgmma 64 x 64 on sm_90a, else mma.sync 64-row tiles
    run("matmul_a16wx", tilus.int4, 5, 200, 1024)  # small m: the repacked weights
    run("matmul_a16wx", tilus.int3, 37, 128, 256)  # mma.sync 64-row tiles and the general decode (no wgmma order)
    run("matmul_a16wx", tilus.float8_e4m3, 37, 192, 1024, atype=bfloat16)
    wgmma = dict(hopper=True, block_n=128, consumers=2, block_m=128, block_k=64, stages=8)
    big = dict(wgmma, block_m=256, stages=4)
    run("matmul_a16wx", tilus.uint4, 130, 200, 1024, cfg=dict(wgmma, split_k=3, magic=True))  # (sm_90a GPUs only)
    run("matmul_a16wx", tilus.int4, 300, 520, 1024, cfg=dict(big, split_k=3, cluster=2))
    # the first split adding without storing where it finds the other arrived, 2 pairs of k tiles
    # ahead (peek_sums, lead), alone and in clusters
    run("matmul_a16wx", tilus.int4, 300, 392, 1024, cfg=dict(big, split_k=2, peek_sums=True, lead=2))
    run("matmul_a16wx", tilus.uint4, 300, 520, 1024, cfg=dict(big, split_k=2, cluster=2, peek_sums=True))
    # stream-K: 4 tiles of 16 k tiles dealt out to 7 blocks (runs across tiles, the last to arrive adding up)
    small = dict(block_m=16, block_n=128, block_k=128, stages=4, repacked=True, split_k=1, magic=True, late_scale=True)
    run("matmul_a16wx", tilus.uint4, 5, 400, 2048, cfg=dict(small, blocks=7))
    run("matmul_a16wx", tilus.int4, 5, 400, 2048, cfg=dict(small, split_k=3, interleave=True, k_major=True))  # k tile after k tile
    # 8-warp blocks ending by 64-bit atomics (fixed_sums); the product transposed on 8-row tiles (weights_a)
    run("matmul_a16wx", tilus.uint4, 12, 400, 2048, cfg=dict(small, split_k=3, interleave=True, warps=8, fixed_sums=True))
    run("matmul_a16wx", tilus.int4, 5, 400, 2048, cfg=dict(small, block_m=8, split_k=2, interleave=True, warps=8,
                                                           weights_a=True))
    if not quick:
        for t in (t for t in WEIGHT_TYPES if t != "int4"):  # (int4's above)
            run("matmul_a16wx", getattr(tilus, t), 37, 192, 1024)
            run("matmul_a16wx", getattr(tilus, t), 5, 200, 1024)
        run("matmul_a16wx", tilus.int4, 5, 200, 1024, atype=bfloat16)
        for t in ["int4", "uint4", "int8", "float8_e4m3"]:  # on an sm_90a GPU: MatmulA16WxHopper
            run("matmul_a16wx", getattr(tilus, t), 300, 200, 1024)
        run("matmul_a16wx", tilus.int4, 130, 392, 512, atype=bfloat16)
        run("matmul_a16wx", tilus.uint4, 128, 136, 512)
        run("matmul_a16wx", tilus.int4, 300, 264, 1024, cfg=dict(big, block_m=192))
        for t in ["int4", "uint4"]:  # on a GPU every small-m candidate (magic, unrolled, splits)
            run("matmul_a16wx", getattr(tilus, t), 5, 200, 1024, tune=True)
        from common import on_gpu
        s = 8192 if on_gpu() else 512
        run("matmul_a16wx", tilus.int4, 16, s, s, timing=True)
