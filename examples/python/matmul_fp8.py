"""FP8 matmul on wgmma: c = scaled(a @ b.T) with a [m, k] and b [n, k] of fp8 codes (float8_e4m3
or float8_e5m2, either pair: wgmma's fp8 kinds mix them), both K-major as those kinds require,
products summed in float32, c float16, bfloat16 or float32. Three ways to scale (`scaling`):

- "tensor": one float32 scale per operand (scale_a, scale_b: float32 [1] on the device, as
  torch._scaled_mm takes them): c = (a @ b.T) * (scale_a * scale_b).
- "row": a scale per row of a and one per row of b (scale_a float32 [m], scale_b [n]):
  c[i, j] = (a @ b.T)[i, j] * scale_a[i] * scale_b[j].
- "block": DeepSeek-V3's fine-grained scales, one per 1 x 128 piece of a (a row of a k block) and
  one per 128 x 128 block of b. Each k block of 128 is multiplied into an accumulator of its own,
  which is then promoted into the float32 result times its two scales (fine-grained scales do
  not factor out of the sum over k; fp8 wgmma also sums with fewer bits than float32, which the
  promotion every k block bounds, as DeepGEMM does). The scales come laid out for TMA
  (block_scales): scale_a [ceil(k / 128), m rounded up to 4] (transposed: the tile's rows are
  contiguous) and scale_b [ceil(n / 128), ceil(k / 128) rounded up to 4].

k is a multiple of 16 (TMA's rows of a and b are whole 16-byte units); the tiles' k steps are 128
codes (128 bytes: one swizzled row, and one scale block).

MatmulFp8 is examples/python/hopper_matmul_v6.py for fp8 (sm_90a): persistent, a producer warp
filling a ring of stages by TMA (b shared by the two blocks of a cluster by multicast), consumer
warp groups on wgmma, each output tile out through shared memory as TMA stores (c's rows a
multiple of 16 bytes: n a multiple of 8, 4 for float32). MatmulFp8Ring is the same product in one
warp group (examples/python/hopper_matmul_v1.py's TMA ring), without warp specialization, so it
also runs on the CPU backend."""
import numpy as np

import tilus
from tilus import bfloat16, boolean, float16, float32, float8_e4m3, float8_e5m2, int32
from common import from_host_array, round_to
from hopper_matmul_v6 import HopperMatmulV6

SCALINGS = ("tensor", "row", "block")
BLOCK_K = 128  # codes per k step: a 128-byte swizzled row of fp8, and DeepSeek-V3's scale block
SHARED_BYTES = 232448  # an sm_90 block's shared memory (227 KB)


def out_bytes(dt):
    return dt.bits // 8


def scale_views(s, scaling, m, n, k, scale_a, scale_b):
    """The global views of the two scale arrays (see the module's docstring)."""
    if scaling == "tensor":
        return s.global_view(scale_a, shape=[1, 1]), s.global_view(scale_b, shape=[1, 1])
    if scaling == "row":
        return s.global_view(scale_a, shape=[m, 1]), s.global_view(scale_b, shape=[1, n])
    kb = tilus.cdiv(k, BLOCK_K)
    return (s.global_view(scale_a, shape=[kb, tilus.cdiv(m, 4) * 4]),
            s.global_view(scale_b, shape=[tilus.cdiv(n, BLOCK_K), tilus.cdiv(kb, 4) * 4]))


def scaled(s, scaling, acc, gsa, gsb, row, col):
    """The float32 tile acc [r, c] of c at (row, col) times its per-tensor or per-row scales
    (block scales were applied in the k loop)."""
    r, c = acc.shape
    if scaling == "tensor":
        return acc * (s.load_global(gsa, offsets=[0, 0], shape=[1, 1]) * s.load_global(gsb, offsets=[0, 0], shape=[1, 1]))
    if scaling == "row":
        return acc * s.load_global(gsa, offsets=[row, 0], shape=[r, 1]) * s.load_global(gsb, offsets=[0, col], shape=[1, c])
    return acc


def stage_tensors(s, stages, bm, bn):
    """The ring's shared buffers: a's and b's tiles, and with block scaling a's row scales and
    b's block scales of each stage: one row per 128-column block of b's scales the tile touches
    (ceil(bn / 128): a 192-column tile starts at a multiple of 64 columns and touches two), 128
    bytes in all (a TMA box lands on 128 bytes)."""
    sa = s.shared_tensor(dtype=s.atype, shape=[stages, bm, BLOCK_K])
    sb = s.shared_tensor(dtype=s.btype, shape=[stages, bn, BLOCK_K])
    if s.scaling != "block":
        return sa, sb, None, None
    blocks_n = -(-bn // BLOCK_K)
    ssb = s.shared_tensor(dtype=float32, shape=[stages, blocks_n, 32 // blocks_n])
    # Unswizzled: a stage's box is 128 bytes, less than a swizzle atom; a few broadcast loads read it.
    s.annotate_layout(ssb, tilus.SharedLayout.row_major([stages, blocks_n, 32 // blocks_n]))
    return sa, sb, s.shared_tensor(dtype=float32, shape=[stages, 1, bm]), ssb


def block_scales_of_step(s, ssa, ssb, step):
    """A k step's scales from its stage, one [rows, 1] tensor per 128-column block of the tile
    (a's rows times that block's scale). b's box starts at the k step rounded down to 4 (TMA
    faults on a box whose first element is not 16-byte aligned in global memory), so the step's
    scale is its element step % 4."""
    rows = s.transpose(s.load_shared(ssa))
    return [rows * s.load_shared(s.slice_shared(ssb, [j, step % 4], [0, 1], [1, 1])) for j in range(ssb.shape[0])]


def promoted(s, acc, part, scales, offset_n):
    """acc + part times its scales (the promotion of a k step's product), part [rows, w] the
    product of c's columns from offset_n, scales as block_scales_of_step gives them for the tile
    (a piece of 128 columns or less: scales[0]). A 192-column tile starts at a multiple of 64
    columns: its 64-column thirds take the first block of b's scales it touches, the first or the
    second (as the tile starts on a 128-column block or half way), and the second."""
    r, w = part.shape
    if w <= BLOCK_K:
        return acc + part * scales[0]
    second = s.register_tensor(dtype=boolean, shape=[1, 3, 1],
                               init=lambda i, j, e: offset_n % BLOCK_K + 64 * j >= BLOCK_K)
    scale = s.where(second, s.reshape(scales[1], [r, 1, 1]), s.reshape(scales[0], [r, 1, 1]))
    return s.reshape(s.reshape(acc, [r, 3, 64]) + s.reshape(part, [r, 3, 64]) * scale, [r, w])


class MatmulFp8(tilus.Script):
    """Warp-specialized and persistent, in clusters of two (sm_90a). 128 x 256 tiles by default:
    two consumer warp groups of 64 rows, the accumulator as two 128-column pieces, 4 stages for
    16-bit c. "tensor" and "row" scaling apply the scales in the epilogue. "block" scaling gives
    each 128-column piece (one block of b's scales) its share of a k step in turn: its wgmma into
    the warp group's [64, 128] product (overwritten: enable_input_d=False), a wait, and the
    promotion into the piece's result, while the other warp group's wgmma keep the tensor cores
    busy. The two pieces' results and the product are 192 registers a thread; a product of each
    piece's own would let ptxas start the second piece's wgmma under the first one's promotion,
    256 registers, and spill. The k step's scales are read before its first wgmma. block_m =
    64 * consumers rows (block scaling: 64 for small m, see block_config). products=2 (block
    scaling, 128-column tiles): two products in turn, each k step's wgmma issued before the wait
    for the step before, which is promoted under it (the warp group's tensor work never drains).
    block_n=192: a 128- and a 64-column piece, or with c's buffer holding the whole tile one piece
    (block scales: its 64-column thirds take the scales of the block of b's scales each lies in,
    see promoted)."""

    def __init__(self, scaling="tensor", out=bfloat16, atype=float8_e4m3, btype=float8_e4m3, block_m=128,
                 block_n=None, stages=None, group=8, blocks=132, products=1):
        super().__init__()
        assert scaling in SCALINGS, f"scaling must be one of {SCALINGS}"
        assert products in (1, 2), "one product a warp group, or two in turn"
        assert blocks % 2 == 0, "blocks come in clusters of two"
        assert block_m % 64 == 0 and block_m <= 256, "each consumer warp group takes 64 rows of the tile"
        assert scaling == "block" or block_m == 128, "tensor and row scaling: two consumer warp groups"
        # Three consumer warp groups share the registers three ways: one 128-column piece each.
        block_n = block_n or (256 if block_m <= 128 and products == 1 else 128)
        assert block_n in (128, 192, 256), \
            "one or two 128-column pieces (a block of b's scales each), or 192 columns (a 128- and a 64-column " \
            "piece; with block scales one piece whose thirds take their scales)"
        assert products == 1 or (scaling == "block" and block_n == 128), \
            "two products in turn: block scaling with one 128-column piece (the registers hold no more)"
        self.scaling, self.out, self.atype, self.btype = scaling, out, atype, btype
        self.block_m, self.block_n, self.group, self.blocks = block_m, block_n, group, blocks
        self.products = products
        self.consumers = block_m // 64
        # Per-tensor scaling fits v6's 9 warps (ptxas gives them 168 registers: it counts whole
        # warp groups). The row scales' columns and the block scaling's second accumulator do
        # not: there the producer is a whole warp group that gives its registers to the
        # consumers (setmaxnreg), as examples/python/matmul_a16wx.py's wgmma kernel does.
        self.consumer_regs = None if scaling == "tensor" else min(248, (65536 - 128 * 40) // (128 * self.consumers) // 8 * 8)
        self.box = 128 // out_bytes(out)  # columns of one TMA store box: a 128-byte swizzled row
        self.stage_bytes = (block_m + block_n) * BLOCK_K + (block_m * 4 + 128 if scaling == "block" else 0)
        # What the stages leave: c's store buffer, and 256 bytes for the barriers (16 a stage).
        # The buffer holds one 128-column piece of the tile, or the whole tile where that leaves
        # as many stages (or the stages asked for): then each tile's epilogue waits once for the
        # stores of the tile before (long done) instead of once a piece for those of the piece
        # before, which are just issued (tensor cores idle meanwhile).
        piece_bytes, tile_bytes = (block_m * w * out_bytes(out) for w in (128, block_n))
        self.stages = stages or min(8, (SHARED_BYTES - 256 - piece_bytes) // self.stage_bytes)
        self.whole_store = SHARED_BYTES - 256 - tile_bytes >= self.stages * self.stage_bytes
        self.store_bytes = tile_bytes if self.whole_store else piece_bytes
        assert not (scaling == "block" and block_n == 192) or self.whole_store, \
            "block scales with 192-column tiles: c's buffer must hold the whole tile (16-bit c)"

    pair_origin = HopperMatmulV6.pair_origin  # the grouped order of tile pairs (block_m, block_n, group)

    def release(self, barrier, peer, read_shared=False):
        """One arrival per consumer warp group on this block's barrier and one on the peer's. One
        thread's arrival releases what that thread has read: where the warp group's threads read
        the stage themselves (read_shared: the block scales), not only its wgmma (complete for the
        whole warp group at its wait_group), the warp group meets at a barrier first."""
        for wg in tilus.static_range(self.consumers):
            with self.thread_group(thread_begin=wg * 128, num_threads=128):
                if read_shared:
                    self.sync()
                with self.thread_group(thread_begin=0, num_threads=1):
                    self.mbarrier.arrive(barrier)
                    self.mbarrier_arrive(barrier, cta_id=peer)

    def __call__(self, m: int32, n: int32, k: int32, a: tilus.void_p, b: tilus.void_p, scale_a: ~float32,
                 scale_b: ~float32, c: tilus.void_p):
        bm, bn, bk, stages, blocks = self.block_m, self.block_n, BLOCK_K, self.stages, self.blocks
        block = self.scaling == "block"
        share = bn // 2  # the rows of b's tile each block of the pair loads (and multicasts)
        # The accumulator's column pieces: 128 wide (a block of b's scales; the store buffer's
        # width when it holds a piece), and what is left of a 192-column tile. Without block
        # scales and with the whole tile's store buffer, one piece: one wgmma of the tile's width
        # per k32 step, which reads a's rows from shared memory once, not once a piece.
        one = self.whole_store and (not block or bn % 128)
        widths = [bn] if one else [128] * (bn // 128) + ([bn % 128] if bn % 128 else [])
        pieces, box = len(widths), self.box
        workers = 128 * self.consumers
        clusters = blocks // 2
        self.attrs.blocks = [blocks]
        self.attrs.cluster_blocks = [2, 1, 1]
        split = self.consumer_regs is not None
        self.attrs.warps = 4 * self.consumers + (4 if split else 1)  # the consumer warp groups and the producer
        rank = self.cluster.blockRank
        peer = rank ^ 1
        cluster = self.blockIdx.x // 2
        pairs_m, tiles_n = tilus.cdiv(m, 2 * bm), tilus.cdiv(n, bn)
        pairs = pairs_m * tiles_n
        steps = tilus.cdiv(k, bk)
        ga = self.global_view(a, dtype=self.atype, shape=[m, k])
        gb = self.global_view(b, dtype=self.btype, shape=[n, k])
        gc = self.global_view(c, dtype=self.out, shape=[m, n])
        gsa, gsb = scale_views(self, self.scaling, m, n, k, scale_a, scale_b)
        sa, sb, ssa, ssb = stage_tensors(self, stages, bm, bn)
        # The boxes of one 128-column piece of c's tile, or of the whole tile.
        sc = self.shared_tensor(dtype=self.out, shape=[(bn if self.whole_store else 128) // box, bm, box])
        full = self.mbarrier.alloc(counts=[1] * stages)
        empty = self.mbarrier.alloc(counts=[2 * self.consumers] * stages)  # both blocks' consumer warp groups
        self.cluster.sync()  # the peer's barriers are initialized before anything arrives on them
        with self.thread_group(thread_begin=workers, num_threads=128 if split else 32):
            if split:
                self.dec_max_nreg(40)
            with self.thread_group(thread_begin=0, num_threads=32):  # the producer warp (nested: relative)
                for t in range(cluster, pairs, clusters):
                    pair_m, offset_n = self.pair_origin(t, pairs_m, tiles_n)
                    first = (t - cluster) // clusters * steps
                    for step in range(steps):
                        g = first + step
                        stage = g % stages
                        self.mbarrier.wait(empty[stage], phase=g // stages % 2 ^ 1)
                        with self.single_thread():
                            self.mbarrier.arrive_and_expect_tx(full[stage], transaction_bytes=self.stage_bytes)
                            self.tma.global_to_shared(src=ga, dst=sa[stage], offsets=[pair_m + rank * bm, step * bk],
                                                      mbarrier=full[stage])
                            self.tma.global_to_shared(src=gb, dst=self.slice_shared(sb[stage], [rank * share, 0],
                                                                                    [0, 1], [share, bk]),
                                                      offsets=[offset_n + rank * share, step * bk],
                                                      mbarrier=full[stage], multicast_mask=3)
                            if block:
                                self.tma.global_to_shared(src=gsa, dst=ssa[stage], offsets=[step, pair_m + rank * bm],
                                                          mbarrier=full[stage])
                                self.tma.global_to_shared(src=gsb, dst=ssb[stage],
                                                          offsets=[offset_n // bk, step // 4 * 4], mbarrier=full[stage])
        with self.thread_group(thread_begin=0, num_threads=workers):  # the consumer warp groups
            if split:
                self.inc_max_nreg(self.consumer_regs)
            if block and self.products == 2:  # each k step's product (enable_input_d=False: d = a @ b)
                parts = [self.register_tensor(dtype=float32, shape=[bm, 128]) for _ in range(2)]
            for t in range(cluster, pairs, clusters):
                pair_m, offset_n = self.pair_origin(t, pairs_m, tiles_n)
                offset_m = pair_m + rank * bm
                first = (t - cluster) // clusters * steps
                accs = [self.register_tensor(dtype=float32, shape=[bm, w], init=0.0) for w in widths]
                if block and self.products == 2:
                    # Two products in turn: the k step after this one is issued into the other
                    # product before this one's wait, so each warp group always has a wgmma queued
                    # (as with per-tensor scaling) and promotes under it. The loop takes the steps
                    # that have a next one two at a time (the products' registers are fixed), with
                    # no branch around a wgmma (ptxas serializes them there); the last one or two
                    # steps follow it.
                    def issue(now, part):
                        there = (first + now) % stages
                        self.mbarrier.wait(full[there], phase=(first + now) // stages % 2)
                        self.wgmma.fence()
                        self.wgmma.mma(sa[there], sb[there].transpose(), part, enable_input_d=False)
                        self.wgmma.commit_group()

                    def promote(now, part):
                        here = (first + now) % stages
                        scale = block_scales_of_step(self, ssa[here], ssb[here], now)[0]
                        self.release(empty[here], peer, read_shared=True)
                        self.assign(accs[0], accs[0] + part * scale)  # the promotion

                    issue(0, parts[0])
                    for pair in range((steps - 1) // 2):
                        issue(pair * 2 + 1, parts[1])
                        self.wgmma.wait_group(1)
                        promote(pair * 2, parts[0])
                        issue(pair * 2 + 2, parts[0])
                        self.wgmma.wait_group(1)
                        promote(pair * 2 + 1, parts[1])
                    if steps % 2 == 0:  # the last two steps: steps - 2 in parts[0], steps - 1 issued here
                        issue(steps - 1, parts[1])
                        self.wgmma.wait_group(1)
                        promote(steps - 2, parts[0])
                        self.wgmma.wait_group(0)
                        promote(steps - 1, parts[1])
                    else:  # the last step, in parts[0]
                        self.wgmma.wait_group(0)
                        promote(steps - 1, parts[0])
                else:
                    if block:  # each piece's product of a k step in turn (enable_input_d=False: d = a @ b)
                        part = self.register_tensor(dtype=float32, shape=[bm, widths[0]], init=0.0)
                    for step in range(steps):
                        g = first + step
                        stage = g % stages
                        self.mbarrier.wait(full[stage], phase=g // stages % 2)
                        if block:
                            # The scales first: their shared loads are not on the path from the
                            # wgmma's wait to the promotion.
                            scales = block_scales_of_step(self, ssa[stage], ssb[stage], step)
                            for p in tilus.static_range(pieces):
                                self.wgmma.fence()
                                self.wgmma.mma(sa[stage], self.slice_shared(sb[stage], [p * 128, 0], [0, 1],
                                                                            [widths[p], bk]).transpose(), part,
                                               enable_input_d=False)
                                self.wgmma.commit_group()
                                self.wgmma.wait_group(0)
                                if p == pieces - 1:
                                    self.release(empty[stage], peer, read_shared=True)
                                self.assign(accs[p], promoted(self, accs[p], part, scales[p:], offset_n))
                        else:
                            self.wgmma.fence()
                            for p in tilus.static_range(pieces):
                                self.wgmma.mma(sa[stage], self.slice_shared(sb[stage], [p * 128, 0], [0, 1],
                                                                            [widths[p], bk]).transpose(), accs[p])
                            self.wgmma.commit_group()
                            self.wgmma.wait_group(1)
                            if step > 0:
                                self.release(empty[(g + stages - 1) % stages], peer)
                    if not block:
                        self.wgmma.wait_group(0)
                        self.release(empty[(first + steps - 1) % stages], peer)
                whole = self.whole_store
                for h in tilus.static_range(pieces):
                    if h == 0 or not whole:
                        with self.single_thread():  # the stores before have read sc
                            self.tma.wait_group(0, read=True)
                    out = scaled(self, self.scaling, accs[h], gsa, gsb, offset_m, offset_n + h * 128).to(self.out)
                    box0, boxes = (h * 128 // box if whole else 0), widths[h] // box  # the piece's boxes in sc
                    dst = sc if boxes == sc.shape[0] else \
                        self.slice_shared(sc, [box0, 0, 0], [0, 1, 2], [boxes, bm, box])
                    self.store_shared(dst.permute([1, 0, 2]), self.reshape(out, [bm, boxes, box]))
                    if h == pieces - 1 or not whole:
                        start = 0 if whole else h * 128  # the tile's column of sc's first box
                        with self.single_thread():
                            for j in tilus.static_range(box0 + boxes):
                                self.tma.shared_to_global(sc[j], gc, offsets=[offset_m, offset_n + start + j * box])
                            self.tma.commit_group()
        self.cluster.sync()  # no block leaves while its peer may still write to it


class MatmulFp8Ring(tilus.Script):
    """One warp group per block_m x block_n tile: a ring of `stages` shared buffers filled by TMA
    ahead of the wgmma that read them (hopper_matmul_v1.py), c stored from registers (any n)."""

    def __init__(self, scaling="tensor", out=bfloat16, atype=float8_e4m3, btype=float8_e4m3, block_m=64,
                 block_n=128, stages=3):
        super().__init__()
        assert scaling in SCALINGS, f"scaling must be one of {SCALINGS}"
        assert scaling != "block" or block_n <= BLOCK_K or block_n == 192, \
            "block scaling: one block of b's scales per tile, or 192 columns"
        self.scaling, self.out, self.atype, self.btype = scaling, out, atype, btype
        self.block_m, self.block_n, self.stages = block_m, block_n, stages

    def __call__(self, m: int32, n: int32, k: int32, a: tilus.void_p, b: tilus.void_p, scale_a: ~float32,
                 scale_b: ~float32, c: tilus.void_p):
        bm, bn, bk, stages = self.block_m, self.block_n, BLOCK_K, self.stages
        block = self.scaling == "block"
        self.attrs.blocks = [tilus.cdiv(m, bm), tilus.cdiv(n, bn)]
        self.attrs.warps = 4
        offset_m, offset_n = self.blockIdx.x * bm, self.blockIdx.y * bn
        ga = self.global_view(a, dtype=self.atype, shape=[m, k])
        gb = self.global_view(b, dtype=self.btype, shape=[n, k])
        gsa, gsb = scale_views(self, self.scaling, m, n, k, scale_a, scale_b)
        sa, sb, ssa, ssb = stage_tensors(self, stages, bm, bn)
        loaded = self.mbarrier.alloc(counts=[1] * stages)
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        steps = tilus.cdiv(k, bk)
        stage_bytes = (bm + bn) * bk + (bm * 4 + 128 if block else 0)

        def load(step, stage):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(loaded[stage], transaction_bytes=stage_bytes)
                self.tma.global_to_shared(src=ga, dst=sa[stage], offsets=[offset_m, step * bk], mbarrier=loaded[stage])
                self.tma.global_to_shared(src=gb, dst=sb[stage], offsets=[offset_n, step * bk], mbarrier=loaded[stage])
                if block:
                    self.tma.global_to_shared(src=gsa, dst=ssa[stage], offsets=[step, offset_m], mbarrier=loaded[stage])
                    self.tma.global_to_shared(src=gsb, dst=ssb[stage], offsets=[offset_n // bk, step // 4 * 4],
                                              mbarrier=loaded[stage])

        for s in tilus.static_range(stages - 1):  # the prologue: stages - 1 tiles in flight
            load(s, s)
        for step in range(steps):
            stage = step % stages
            self.mbarrier.wait(loaded[stage], phase=step // stages % 2)
            if block:
                part = self.register_tensor(dtype=float32, shape=[bm, bn])
                self.wgmma.fence()
                self.wgmma.mma(sa[stage], sb[stage].transpose(), part, enable_input_d=False)
                self.wgmma.commit_group()
                self.wgmma.wait_group(0)
                acc = promoted(self, acc, part, block_scales_of_step(self, ssa[stage], ssb[stage], step), offset_n)
            else:
                self.wgmma.fence()
                self.wgmma.mma(sa[stage], sb[stage].transpose(), acc)
                self.wgmma.commit_group()
                self.wgmma.wait_group(1)  # the previous step's group retired: its stage is refilled next
            load(step + stages - 1, (step + stages - 1) % stages)
        self.wgmma.wait_group(0)
        for s in tilus.static_range(stages - 1):  # the loads past the last step complete before the block exits
            self.mbarrier.wait(loaded[(steps + s) % stages], phase=(steps + s) // stages % 2)
        out = scaled(self, self.scaling, acc, gsa, gsb, offset_m, offset_n).to(self.out)
        self.store_global(self.global_view(c, dtype=self.out, shape=[m, n]), out, offsets=[offset_m, offset_n])


def block_config(m, n, clusters, out=bfloat16):
    """The block-scaled kernel (block_m, block_n, products) MatmulFp8Block takes for an m x n
    product into c of dtype `out` on `clusters` clusters of two blocks. m <= 128 (a few tokens): 64 x 128, the smallest
    tile: one consumer warp group (its tensor work per k step half a 128-row tile's, 8 stages
    deep), the most tiles along n (N = 8192: 64 pairs, one a cluster), and for m <= 128 both blocks
    of a pair have rows; with two products in turn, as the lone warp group's wgmma otherwise idle
    while it promotes (H200, m = 128 on 8192 x 8192: 29.4 us against 30.3). Otherwise 128 x 256
    (each k step's a and b bytes serve twice the products of a 128 x 128 tile) where its tile pairs
    fill every cluster at least once, or 128 x 192 (16-bit c) where its rounds of tile pairs over
    the clusters hold fewer columns in all (rounds x 192 < rounds x 256: a fuller last round),
    else 128 x 128. H200, one run (bench/fp8.py, interleaved): 4096^3 128 x 256 113.9 us, 128 x 192
    128.5 (4 rounds of 256 columns against 6 of 192); 8192^3 128 x 256 1004.6 us, 128 x 192 914.8
    (16 rounds against 21)."""
    if m <= 128:
        return 64, 128, 2
    if tilus.cdiv(m, 256) * tilus.cdiv(n, 256) >= clusters:
        return (128, 192, 1) if narrower(m, n, clusters, out) else (128, 256, 1)
    return 128, 128, 1


def narrower(m, n, clusters, out):
    """Whether 128 x 192 tiles (16-bit c) do an m x n product in fewer columns of work a cluster
    than 128 x 256 ones: a cluster takes a pair of tiles (256 rows) a round, every cluster as many
    rounds as the busiest, so the work of each width is its rounds times its columns
    (ceil(pairs / clusters) x width; 8192^3 on 66 clusters: 21 x 192 = 4032 against 16 x 256 =
    4096, whose last round is half empty; 4096^3: 6 x 192 = 1152 against 4 x 256 = 1024)."""
    rounds = lambda bn: tilus.cdiv(tilus.cdiv(m, 256) * tilus.cdiv(n, bn), clusters)  # noqa: E731
    return out.bits == 16 and rounds(192) * 192 < rounds(256) * 256


def tensor_config(m, n, clusters, out=bfloat16):
    """The per-tensor / per-row kernel's block_n (128 rows, stages as many as fit) for an m x n
    product on `clusters` clusters of two blocks: 192 where narrower says its rounds of tile pairs
    hold fewer columns, else 256. The rule replaces run-time tuning noise (MatmulFp8Tuned, still
    offered: MatmulFp8Auto(tune=True)) with the reason one width wins: 4 rounds against 6 at 4096^3,
    21 against 16 (the last half empty) at 8192^3. H200, one run (bench/fp8.py --tensor-tiles
    256,192), per-tensor against torch._scaled_mm: 4096^3 256 1.04x, 192 0.94x; 8192^3 256 1.03x,
    192 1.02x (the rule's 1.02x; the two widths tie there). A second run over the LLM shapes too
    (256 / 192): 4096^3 1.05x / 0.95x, 1024x8192x8192 1.04x / 0.94x, 8192x3584x18944 1.01x / 0.96x
    (the rule: 256), 4096x28672x8192 1.02x / 1.05x, 8192^3 1.01x / 1.03x (the rule: 192),
    4096x8192x8192 0.99x / 0.98x and 8192x28672x8192 1.12x / 1.09x (ties within the 3-5 % that
    one kernel measures apart in one run)."""
    return 192 if narrower(m, n, clusters, out) else 256


# The per-tensor and per-row tiles the autotuner times (block_n, stages; 128 rows): 128 x 256 (the
# most products per byte loaded) with 4 stages and c's buffer one 128-column piece, and 128 x 192
# (4 stages and the whole tile's buffer, one 192-wide wgmma), whose tile pairs split a wave more
# evenly where the 256-column ones leave a last round half empty (8192^3 on 66 clusters: 1024
# pairs of 128 x 256, 15.5 a cluster; 1376 pairs of 128 x 192, 20.8 a cluster, three quarters of
# the work each; H200: 776.6 us against 833.0, while 128 x 256 is the faster at 4096^3). 128 x 256
# with 3 stages and the whole tile's buffer (MatmulFp8(stages=3)) was a candidate too and never
# won in 14 tuned H200 runs (256/4 10 times, 192/4 4 times): no longer timed.
TILES = [(256, None), (192, None)]


@tilus.autotune("block_n, stages", TILES)
class MatmulFp8Tuned(MatmulFp8):
    """MatmulFp8 with per-tensor or per-row scales whose tile width and stages (None: as many as
    fit) the autotuner picks among TILES at the first call of a size bucket (GPU only), the winner
    kept on disk."""

    def __init__(self, scaling="tensor", out=bfloat16, atype=float8_e4m3, btype=float8_e4m3, block_n=256, stages=None,
                 blocks=132):
        assert scaling != "block", "block scaling: MatmulFp8BlockTuned"
        super().__init__(scaling, out=out, atype=atype, btype=btype, block_n=block_n, stages=stages, blocks=blocks)


# The block-scaled kernels the autotuner times, as (block_m, block_n, products): 128 x 256 (two
# consumer warp groups, each k step's bytes serving the most products; no registers for a second
# product), 128 x 128 with one product or two in turn (each warp group's next wgmma queued while it
# promotes), and 64 x 128 (the most tiles, for a few tokens) with two. On the H200 (bench/fp8.py,
# cuBLAS per-tensor = 1): 128 x 256 0.90x / 0.78x at 4096^3 / 8192^3, 128 x 128 with two products
# 0.75x / 0.64x (as with one: 0.75x at 4096^3; the tile's bytes per product, not the wait before
# each promotion, bound it), 64 x 128 with two 1.00x at m = 128 on 8192 x 8192 where one product
# ran 0.96x (0.59x / 0.55x against 0.60x / 0.51x at the large shapes). 192 x 128 (three consumer
# warp groups) measured 0.52-0.57x: not offered. The consumer warp groups issuing their pieces'
# wgmma in turns (an mbarrier each, handed on after each commit: one promotes while the other's
# piece runs) measured slower (H200, one run: 128 x 256 114.6 -> 127.6 us at 4096^3, 956 -> 1136
# us at 8192^3; 128 x 128 0.74x / 0.69x): not kept. 128 x 192 (DeepGEMM's widest tile for
# 128 x 128 weight scales): one 192-wide wgmma a k step and one wait (128 x 256: two of each), its
# promotion 96 FFMA a thread with the thirds' scales chosen once a tile (SASS), and 8192^3's tile
# pairs 20.8 a cluster (a last round 85 % full; 128 x 256: 15.5, half empty); c's buffer the
# whole tile (16-bit c): on the H200 (one run, interleaved) 0.79x / 0.86x at 4096^3 / 8192^3
# against 128 x 256's 0.90x / 0.78x, so block_config takes it where its rounds hold fewer columns;
# the tuner kept 128 x 256 at 8192^3 (its one-after-another timing disagreed with the bench's).
# Consumer warp groups in turns on the tensor cores, handed on once 3 (or 2) of a piece's four k32
# wgmma were complete (an mbarrier each, one arrival), measured slower (same run: 128 x 256 0.78x /
# 0.67x with 3, 0.82x / 0.75x with 2; 128 x 192 0.75x / 0.75-0.76x; ncu at 8192^3: tensor pipe 61 %
# and 69 % against 75 % without): removed. 128 x 192 as a 128- and a 64-column piece with a
# product each, both issued before the first was promoted under the second's wgmma (a read twice
# from shared memory), measured slower (H200, one run: 0.75x / 0.75x against one product's 0.80x /
# 0.80x): removed. Each warp releasing a stage (a warp-wide sync and one arrival a warp, here and
# on the peer, instead of a warp group's 128-thread barrier and one arrival), alone or with the
# scales read under the first wgmma, measured slower (H200, one run: 128 x 256 0.79x / 0.66x and
# 0.80x / 0.71x against 0.89x / 0.76x; 128 x 192 0.68x / 0.65-0.67x against 0.79x / 0.82x): removed.
# Each warp group's pieces in a pipeline of two products (each piece promoted under the next one's
# wgmma: 128 x 192 as 128 + 64 columns, 128 x 256 as four 64-column pieces), every wgmma group
# retired in the trip of 1-4 k steps that issued it (ptxas serialized all wgmma, C7514, when a group
# in flight across the k loop's back edge was read after the next trip's wait_group 1): slower in two
# H200 runs (0.71x-0.83x against 128 x 256's 0.85x-0.89x; ncu at 4096^3: tensor pipe 60 % busy
# against 69 %), removed. cuBLASLt's own 1 x 128 / 128 x 128 block scaling (torch._scaled_mm) ran
# 0.91x / 0.90x of its per-tensor speed at 4096^3 / 8192^3 in the same run (bench/fp8.py "cuBLAS block").
# The promotion's FFMA yielding the warp (the first 9/16 of each run given the yield hint and no
# operand reuse, the cubin rewritten after ptxas: DeepGEMM's finding) measured slower (H200, one
# run: 128 x 256 116.2 / 1041.8 us against 114.1 / 1027.2 at 4096^3 / 8192^3, 128 x 192 130.7 /
# 1042.5 against 130.8 / 1015.3): removed. What 8192^3 loses is the k loop's idle tensor cores, not
# L2 or the tile order (ncu, same run, 128 x 256 at 8192^3: block-scaled 857 us, tensor pipe 74.8 %
# busy, L2 hit 76.6 %, 607 MB read from DRAM; per-tensor 731 us, 90.7 %, 72.1 %, 598 MB): twice the
# k steps spread the per-tensor kernel's tile overhead (82 % busy at 4096^3) but not the promotion
# that holds the block-scaled loop (69 % at 4096^3). A %clock64 timeline of the k loop (H200, probes
# patched into the emitted CUDA, 128 x 256 at 4096^3 and 128 x 192 at 8192^3) shows the two consumer
# warp groups not in lockstep: one group's commit 200-290 cycles after the other's, both with a wgmma
# group in flight 1-6 % of the loop, neither 41-45 % of it. Each piece runs about 200-300 cycles
# alone; the loss is a group's path from its step's last wait to its next step's first commit (740
# cycles at 128 x 256: promotion and release 190-275, back edge 75, stage wait 120-170, scales and
# wgmma issue 263), which the other group's last piece covers only in part. Taking the stage wait
# and scales of the next step under the step's last wgmma, and the release under the next step's
# first, measured no faster (H200, one run: 128 x 256 116.3 / 977.6 us against 113.9 / 975.4 at
# 4096^3 / 8192^3) and slower at 128 x 192 (138.8 / 1078.1 against 128.5 / 960.9: the two groups fell
# into lockstep, both in flight 44 % of the loop): removed. Clusters of four blocks (a multicast
# to both columns as b is to both rows, so that a 128 x 128 tile with two products loads the bytes
# per block of a 128 x 256 one) ran about half as fast as clusters of two (H200, one run: 128 x 128
# with two products 257.3 / 2207.9 us on 32 clusters of four against 132.7 / 1022.7 on 66 of two;
# per-tensor 128 x 128 on clusters of two 0.87x / 0.82x cuBLAS where 128 x 256 ran 1.05x / 1.11x):
# removed.
BLOCK_TILES = [(128, 256, 1), (128, 192, 1), (128, 128, 2), (128, 128, 1), (64, 128, 2)]


@tilus.autotune("block_m, block_n, products", BLOCK_TILES)
class MatmulFp8BlockTuned(MatmulFp8):
    """MatmulFp8 with block scales whose tile the autotuner picks among BLOCK_TILES: each timed on
    the GPU at the first call of a size bucket (m, n, k rounded up to powers of two), the winner
    kept on disk."""

    def __init__(self, out=bfloat16, atype=float8_e4m3, btype=float8_e4m3, block_m=128, block_n=256, products=1,
                 blocks=132):
        super().__init__("block", out=out, atype=atype, btype=btype, block_m=block_m, block_n=block_n, blocks=blocks,
                         products=products)


class MatmulFp8Auto:
    """MatmulFp8 with its tile chosen per call: by tensor_config (per-tensor and per-row scales)
    or block_config (block scales), one kernel per tile built on first use; or with tune=True by
    the autotuner (MatmulFp8Tuned, MatmulFp8BlockTuned; GPU only). Called as MatmulFp8."""

    def __init__(self, scaling="tensor", out=bfloat16, atype=float8_e4m3, btype=float8_e4m3, blocks=132, tune=False):
        assert scaling in SCALINGS, f"scaling must be one of {SCALINGS}"
        self.scaling, self.out, self.atype, self.btype, self.blocks = scaling, out, atype, btype, blocks
        self.kernels = {}
        self.tuned = None
        if tune:
            kw = dict(out=out, atype=atype, btype=btype, blocks=blocks)
            self.tuned = MatmulFp8BlockTuned(**kw) if scaling == "block" else MatmulFp8Tuned(scaling, **kw)

    def config(self, m, n):
        """(block_m, block_n, products) by the rule."""
        if self.scaling == "block":
            return block_config(m, n, self.blocks // 2, self.out)
        return 128, tensor_config(m, n, self.blocks // 2, self.out), 1

    def kernel(self, m, n):
        tile = self.config(m, n)
        if tile not in self.kernels:
            self.kernels[tile] = MatmulFp8(self.scaling, out=self.out, atype=self.atype, btype=self.btype,
                                           block_m=tile[0], block_n=tile[1], products=tile[2], blocks=self.blocks)
        return self.kernels[tile]

    def tile(self, m, n, k, a, b, scale_a, scale_b, c):
        """The (block_m, block_n, products) a call with these arguments takes (tuned: None until tuned)."""
        if self.tuned is None:
            return self.config(m, n)
        winner = self.tuned._tilus_tuner.winner_for((m, n, k, a, b, scale_a, scale_b, c), {})
        return None if winner is None else (winner.block_m, winner.block_n, winner.products)

    def __call__(self, m, n, k, a, b, scale_a, scale_b, c):
        kernel = self.tuned if self.tuned is not None else self.kernel(m, n)
        return kernel(m, n, k, a, b, scale_a, scale_b, c)


class MatmulFp8Block(MatmulFp8Auto):
    """MatmulFp8Auto with DeepSeek-V3 block scales."""

    def __init__(self, out=bfloat16, atype=float8_e4m3, btype=float8_e4m3, blocks=132, tune=False):
        super().__init__("block", out=out, atype=atype, btype=btype, blocks=blocks, tune=tune)


# --- host side: scales laid out for the kernels, the reference ------------------------------------

def block_scales(scale_a, scale_b):
    """DeepSeek-V3 scales, scale_a [m, ceil(k / 128)] (a row of a k block) and scale_b
    [ceil(n / 128), ceil(k / 128)], laid out as the kernels read them by TMA: scale_a transposed
    to [ceil(k / 128), m4] and scale_b as [ceil(n / 128), kb4], m4 and kb4 rounded up to multiples
    of 4 (rows of 16 bytes) with zeros. numpy or torch, as given."""
    m, kb = scale_a.shape
    nb = scale_b.shape[0]
    m4, kb4 = -(-m // 4) * 4, -(-kb // 4) * 4
    if hasattr(scale_a, "new_zeros"):  # torch
        ta = scale_a.new_zeros((kb, m4))
        tb = scale_b.new_zeros((nb, kb4))
    else:
        ta, tb = np.zeros((kb, m4), np.float32), np.zeros((nb, kb4), np.float32)
    ta[:, :m] = scale_a.T
    tb[:, :kb] = scale_b
    return ta, tb


def fp8_values(dt):
    """float64 value of each of the 256 codes of dt (NaN where the code is NaN), from the format."""
    e, mbits = (4, 3) if dt == float8_e4m3 else (5, 2)
    c = np.arange(256)
    sign, exp, man = c >> 7, (c >> mbits) & ((1 << e) - 1), c & ((1 << mbits) - 1)
    bias = (1 << (e - 1)) - 1
    v = np.where(exp == 0, np.ldexp(man.astype(np.float64), 1 - bias - mbits),
                 np.ldexp(((1 << mbits) | man).astype(np.float64), exp - bias - mbits))
    if dt == float8_e4m3:  # no infinities; S.1111.111 is NaN
        v = np.where((exp == 15) & (man == 7), np.nan, v)
    else:  # IEEE
        v = np.where(exp == 31, np.where(man == 0, np.inf, np.nan), v)
    return np.where(sign == 1, -v, v)


def random_codes(dt, shape, rng, limit=4.0):
    """Random finite codes of dt [shape] (uint8) whose values lie in [-limit, limit], and the values (float64)."""
    table = fp8_values(dt)
    ok = np.nonzero(np.isfinite(table) & (np.abs(table) <= limit))[0]
    codes = rng.choice(ok, size=shape).astype(np.uint8)
    return codes, table[codes]


def reference(scaling, av, bv, sa, sb):
    """float64 c before rounding to c's dtype: av [m, k], bv [n, k] the operands' values; sa, sb
    the scales as the caller has them (block: [m, kb] and [nb, kb], before block_scales)."""
    if scaling == "tensor":
        return av @ bv.T * (float(sa[0]) * float(sb[0]))
    if scaling == "row":
        return av @ bv.T * np.asarray(sa, np.float64)[:, None] * np.asarray(sb, np.float64)[None, :]
    m, k = av.shape
    n = bv.shape[0]
    out = np.zeros((m, n))
    for kb in range(-(-k // BLOCK_K)):
        ks = slice(kb * BLOCK_K, (kb + 1) * BLOCK_K)
        part = av[:, ks] @ bv[:, ks].T
        out += part * np.asarray(sa, np.float64)[:, kb:kb + 1] * np.repeat(np.asarray(sb, np.float64)[:, kb],
                                                                              BLOCK_K)[None, :n]
    return out


def operands(scaling, m, n, k, rng, atype=float8_e4m3, btype=float8_e4m3):
    """Random codes of a [m, k] and b [n, k], their values, and scales (float32, as the caller
    has them) for `scaling`."""
    a, av = random_codes(atype, (m, k), rng)
    b, bv = random_codes(btype, (n, k), rng)
    kb, nb = -(-k // BLOCK_K), -(-n // BLOCK_K)
    shapes = {"tensor": ((1,), (1,)), "row": ((m,), (n,)), "block": ((m, kb), (nb, kb))}[scaling]
    sa = (rng.random(shapes[0]) * 0.5 + 0.25).astype(np.float32)
    sb = (rng.random(shapes[1]) * 0.5 + 0.25).astype(np.float32)
    return a, av, b, bv, sa, sb


def run(kernel, m, n, k, rng, device):
    """kernel (a MatmulFp8 or MatmulFp8Ring) on random operands against the float64 reference;
    returns the largest error relative to the result's largest magnitude."""
    a, av, b, bv, sa, sb = operands(kernel.scaling, m, n, k, rng, kernel.atype, kernel.btype)
    ka, kb = block_scales(sa, sb) if kernel.scaling == "block" else (sa, sb)
    args = [a, b, ka, kb]
    c = np.zeros((m, n), {float16: np.float16, float32: np.float32, bfloat16: np.uint16}[kernel.out])
    if device == "cuda":
        import torch
        args = [torch.from_numpy(np.ascontiguousarray(x)).cuda() for x in args]
        c = torch.zeros((m, n), dtype={float16: torch.float16, float32: torch.float32,
                                        bfloat16: torch.bfloat16}[kernel.out], device="cuda")
    kernel(m, n, k, args[0], args[1], args[2], args[3], c)
    got = from_host_array(c, kernel.out)
    want = reference(kernel.scaling, av, bv, sa, sb)
    return got, want


if __name__ == "__main__":
    import os
    from common import check, on_gpu, timed
    rng = np.random.default_rng(0)
    device = "cuda" if on_gpu() else "cpu"
    quick = os.environ.get("TILUS_EXAMPLES_QUICK")  # small ragged sizes only (sanitizer runs)
    cases = [(MatmulFp8Ring(s), 150, 200, 384) for s in SCALINGS]
    cases += [(MatmulFp8Ring("tensor", out=float32, atype=float8_e5m2), 70, 130, 256),
              (MatmulFp8Ring("block", atype=float8_e4m3, btype=float8_e5m2), 65, 136, 272)]
    if device == "cuda":
        import torch
        sms = torch.cuda.get_device_properties(0).multi_processor_count // 2 * 2
        # Few blocks when quick: each walks several tiles (the ring's phases carry across them).
        blocks = 4 if quick else sms
        cases += [(MatmulFp8(s, blocks=blocks), 301, 520, 1040 if not quick else 272) for s in SCALINGS]
        cases += [(MatmulFp8("tensor", out=float32, blocks=blocks), 200, 260, 512),
                  (MatmulFp8("block", block_m=192, blocks=blocks), 1000 if not quick else 200, 1000 if not quick else 264,
                   2048 if not quick else 400),
                  (MatmulFp8("block", block_n=128, blocks=blocks), 301, 520, 1040 if not quick else 272),
                  (MatmulFp8("block", block_n=128, products=2, blocks=blocks), 301, 520, 1040 if not quick else 400),
                  (MatmulFp8("block", block_n=192, blocks=blocks), 301, 1000 if not quick else 400,
                   1040 if not quick else 272),
                  (MatmulFp8("tensor", block_n=192, blocks=blocks), 301, 520, 1040 if not quick else 272),
                  (MatmulFp8Block(blocks=blocks), 16, 1000 if not quick else 264, 1040 if not quick else 272)]
    for kernel, m, n, k in cases:
        got, want = run(kernel, m, n, k, rng, device)
        name = (f"matmul_fp8 {type(kernel).__name__} {kernel.scaling} {kernel.atype.name} x {kernel.btype.name} -> "
                f"{kernel.out.name} {m}x{n}x{k}")
        check(name, got, round_to(want, kernel.out), 1e-3 * np.abs(want).max(), 1e-2)
    if device == "cuda" and not quick:
        s = 4096
        x = torch.randint(0, 0x7e, (s, s), dtype=torch.uint8, device="cuda")
        one = torch.ones(1, device="cuda")
        c = torch.empty(s, s, dtype=torch.bfloat16, device="cuda")
        kernel = MatmulFp8(blocks=sms)
        ms = timed(lambda: kernel(s, s, s, x, x, one, one, c), device)
        print(f"matmul_fp8 per-tensor e4m3: {s}^3 in {ms:.3f} ms = {2 * s ** 3 / ms / 1e9:.1f} TFLOP/s")
