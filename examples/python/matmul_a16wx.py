"""Quantized matmul: c = a @ dequant(w).T, a f16 [m, k], w low-precision codes [n, k] (the
nn.Linear convention: a row per output) stored as bytes along k (two 4-bit codes per byte, low
nibble first), group-wise f16 scales [k / group, n] and, for unsigned codes, zero points
[k / group, n]: dequant(w)[j, i] = (w[j, i] - zero[i / group, j]) * scale[i / group, j].

Each k-step brings a tile of a, the tile's weight bytes and its scales into shared memory with
cp.async (`stages` in flight); the bytes are loaded straight into the registers of the
tensor-core operand (layout inference derives their layout from the dot's, back through the
transpose, the cast and the view), widened to f16 (the vectorized conversions for int4/uint4
and fp8), scaled and fed to mma. Small m splits k over blockIdx.z (split-K) and sums the
partial results in a second kernel. Not yet: weights repacked into fragment order for 16-byte
loads, wgmma for large m, autotuning (issue 16)."""
import os

import numpy as np

import tilus
from tilus import float16, float32, int32, uint8

WEIGHT_TYPES = ["int4", "uint4", "int8", "float8_e4m3", "float8_e5m2", "float4_e2m1"]


class MatmulA16Wx(tilus.Script):
    """One split of the k range per blockIdx.z: `stages` tiles of a and of b's bytes in flight
    with cp.async (the passes insert the waits and barriers), dequantized in registers, the f16
    tile handed to `dot` through shared memory. With split_k == 1 the block writes c (f16), else
    its float32 partial sums into partial[z] (SumSplits adds them)."""

    def __init__(self, wtype, group=128, block_m=16, block_n=128, block_k=64, stages=4, split_k=1, warps=4,
                 repacked=False):
        super().__init__()
        assert group % block_k == 0, "a k tile must not straddle two scale groups"
        self.wtype, self.group, self.stages, self.split_k, self.warps = wtype, group, stages, split_k, warps
        self.block_m, self.block_n, self.block_k = block_m, block_n, block_k
        # repacked: b holds the weights in fragment order (repack_weights), so each thread loads
        # its operand bytes as 16-byte vectors.
        self.repacked = repacked
        if repacked:
            assert block_m == 16 and warps == 4, "the fragment order is that of 16-row tiles on 4 warps"

    def __call__(self, m: int32, n: int32, k: int32, a: ~float16, b: ~uint8, scales: ~float16, zeros: ~float16,
                 c: ~float16, partial: ~float32):
        bm, bn, bk, stages = self.block_m, self.block_n, self.block_k, self.stages
        bits = self.wtype.bits
        self.attrs.blocks = [tilus.cdiv(m, bm), tilus.cdiv(n, bn), self.split_k]
        self.attrs.warps = self.warps
        om, on = self.blockIdx.x * bm, self.blockIdx.y * bn
        per_split = tilus.cdiv(tilus.cdiv(k, bk), self.split_k)
        first = self.blockIdx.z * per_split
        steps = tilus.max(tilus.min(per_split, tilus.cdiv(k, bk) - first), 0)
        ga = self.global_view(a, shape=[m, k])
        rows = bn * bk * bits // 8 // 16  # 16-byte rows of one repacked tile
        if self.repacked:
            gb = self.global_view(b, shape=[tilus.cdiv(n, bn), tilus.cdiv(k, bk), rows, 16])
        else:
            gb = self.global_view(b, shape=[n, k * bits // 8])
        gs = self.global_view(scales, shape=[tilus.cdiv(k, self.group), n])
        gz = self.global_view(zeros, shape=[tilus.cdiv(k, self.group), n])
        sa = self.shared_tensor(dtype=float16, shape=[stages, bm, bk])
        sb = self.shared_tensor(dtype=uint8, shape=[stages, rows, 16] if self.repacked else [stages, bn, bk * bits // 8])
        # The k tile's scales (and zero points) travel with its operands: a synchronous load in
        # the loop would cost a memory latency per step.
        ss = self.shared_tensor(dtype=float16, shape=[stages, 1, bn])
        sz = self.shared_tensor(dtype=float16, shape=[stages, 1, bn])
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        unsigned = not self.wtype.is_signed  # unsigned codes carry a zero point

        def load_stage(step, stage):
            self.copy_async(ga, sa[stage], offsets=[om, (first + step) * bk])
            if self.repacked:
                self.copy_async(gb, sb[stage], offsets=[self.blockIdx.y, first + step, 0, 0], dims=[2, 3])
            else:
                self.copy_async(gb, sb[stage], offsets=[on, (first + step) * bk * bits // 8])
            self.copy_async(gs, ss[stage], offsets=[(first + step) * bk // self.group, on])
            if unsigned:
                self.copy_async(gz, sz[stage], offsets=[(first + step) * bk // self.group, on])
            self.copy_async_commit_group()

        for s in tilus.static_range(stages - 1):  # the prologue, unrolled while tracing
            load_stage(s, s)
        for step in range(steps):
            load_stage(step + stages - 1, (step + stages - 1) % stages)
            raw = self.load_shared(sb[step % stages])
            if self.repacked:  # each thread's bytes are its operand slots, in order
                codes = self.view(raw, dtype=self.wtype, layout=fragment_layout(bn, bk))
            else:
                codes = self.view(raw, dtype=self.wtype)
            w = self.transpose(codes.to(float16))  # [bk, bn]
            if unsigned:
                w = w - self.load_shared(sz[step % stages])
            acc = self.dot(self.load_shared(sa[step % stages]), w * self.load_shared(ss[step % stages]), acc)
        if self.split_k == 1:
            self.store_global(self.global_view(c, shape=[m, n]), acc.to(float16), offsets=[om, on])
        else:
            gp = self.global_view(partial, shape=[self.split_k, m, n])
            self.store_global(gp, self.unsqueeze(acc, 0), offsets=[self.blockIdx.z, om, on])


def fragment_layout(bn, bk):
    """The register layout of a [bn, bk] weight tile (n, k) that the mma.sync operand of a
    16-row tile on 4 warps needs, before its transpose: thread t holds n = 32 i + t / 4 and
    k = 16 j + 8 h + 2 (t % 4) + e for every (j, i, h, e), slots in that order."""
    return (tilus.column_local(bn // 32, bk // 16) * tilus.local(1, 2) * tilus.spatial(32, 4) *
            tilus.local(1, 2))


def repack_weights(codes, bits, bn, bk):
    """Codes [n, k] (integers, the low `bits` bits used) to the bytes MatmulA16Wx(repacked=True)
    loads: tile (n / bn, k / bk) after tile, each tile's bytes in the order thread t reads its
    slots (16 bytes per row, row = 128 * (byte / 16) + t), n and k padded with zeros to whole
    tiles."""
    n, k = codes.shape
    tn, tk = -(-n // bn), -(-k // bk)
    padded = np.zeros((tn * bn, tk * bk), np.uint8)
    padded[:n, :k] = codes & ((1 << bits) - 1)
    tiles = padded.reshape(tn, bn, tk, bk).transpose(0, 2, 1, 3).reshape(tn, tk, bn * bk)
    layout = fragment_layout(bn, bk)
    per_byte = 8 // bits
    nbytes = layout.local_size * bits // 8
    order = np.zeros((128 * nbytes, per_byte), np.int64)  # element of each (byte, part)
    for t in range(128):
        for slot in range(layout.local_size):
            i, j = layout.map(t, slot)
            byte = slot // per_byte
            order[(byte // 16 * 128 + t) * 16 + byte % 16, slot % per_byte] = i * bk + j
    out = np.zeros((tn, tk, 128 * nbytes), np.uint8)
    for part in range(per_byte):
        out |= tiles[:, :, order[:, part]] << np.uint8(bits * part)
    return out.reshape(tn, tk, 128 * nbytes // 16, 16)


class SumSplits(tilus.Script):
    """c (f16 [m, n]) = the sum of partial[0 .. split_k) (float32 [split_k, m, n])."""

    def __init__(self, split_k, block_m=16, block_n=128):
        super().__init__()
        self.split_k, self.block_m, self.block_n = split_k, block_m, block_n

    def __call__(self, m: int32, n: int32, partial: ~float32, c: ~float16):
        self.attrs.blocks = [tilus.cdiv(m, self.block_m), tilus.cdiv(n, self.block_n)]
        self.attrs.warps = 4
        o = [self.blockIdx.x * self.block_m, self.blockIdx.y * self.block_n]
        p = self.load_global(self.global_view(partial, shape=[self.split_k, m, n]), offsets=[0, o[0], o[1]],
                             shape=[self.split_k, self.block_m, self.block_n])
        self.store_global(self.global_view(c, shape=[m, n]), self.sum(p, dim=0).to(float16), offsets=o)


class QuantizedMatmul:
    """c = a @ dequant(w).T with a configuration per size (measured on an H100, bench/w4a16.py):
    16-row tiles with long k tiles for small m (LLM decoding) on weights repacked once into
    fragment order (prepare), split over k when the m x n tiles alone would leave most SMs idle,
    then one SumSplits launch; 128-row tiles on the plain weights for large m."""

    def __init__(self, wtype, group=128, sms=132):
        self.wtype, self.group, self.sms = wtype, group, sms
        self.kernels = {}

    def config(self, m, n, k):
        small = m <= 32
        bk = min(128, self.group) if small else min(32, self.group)
        cfg = dict(block_m=16 if small else 64 if m < 128 else 128, block_n=128, block_k=bk, stages=4 if small else 3,
                   repacked=small)
        tiles = -(-m // cfg["block_m"]) * -(-n // cfg["block_n"])
        s = 1
        while s < 16 and tiles * s * 2 <= 2 * self.sms and k // (bk * s * 2) >= 4:
            s *= 2
        cfg["split_k"] = s
        return cfg

    def prepare(self, b):
        """The weight bytes [n, k * bits / 8] (numpy or torch) in both orders: as they are, and
        repacked for the small-m kernel (done once, on the host)."""
        bits = self.wtype.bits
        host = b.cpu().numpy() if hasattr(b, "cpu") else b
        codes = np.stack([host & 15, host >> 4], axis=-1).reshape(host.shape[0], -1) if bits == 4 else host
        repacked = repack_weights(codes.astype(np.int64), bits, 128, min(128, self.group))
        if hasattr(b, "cpu"):
            import torch
            repacked = torch.from_numpy(repacked).to(b.device)
        return {"plain": b, "repacked": repacked}

    def __call__(self, m, n, k, a, weights, scales, zeros, c, workspace):
        cfg = self.config(m, n, k)
        key = tuple(sorted(cfg.items()))
        if key not in self.kernels:
            self.kernels[key] = (MatmulA16Wx(self.wtype, self.group, **cfg), SumSplits(cfg["split_k"]))
        matmul, reduce = self.kernels[key]
        matmul(m, n, k, a, weights["repacked" if cfg["repacked"] else "plain"], scales, zeros, c, workspace)
        if cfg["split_k"] > 1:
            reduce(m, n, workspace, c)


def quantized_operands(wtype, k, n, group, rng):
    """Random codes of wtype [n, k] packed to bytes along k, with scales, zeros and the
    dequantized weights [k, n] (float64, transposed: c = a @ w) as the reference uses them."""
    bits = wtype.bits
    if wtype.is_float:
        table = np.array([wtype.decode_float(c) for c in range(1 << bits)])
        finite = np.nonzero(np.isfinite(table))[0]
        codes = rng.choice(finite, size=(n, k))
        values = table[codes]
    else:
        lo = -(1 << (bits - 1)) if wtype.is_signed else 0
        values = rng.integers(lo, lo + (1 << bits), size=(n, k))
        codes = values & ((1 << bits) - 1)
    packed = ((codes[:, 0::2] | (codes[:, 1::2] << 4)) if bits == 4 else codes).astype(np.uint8)
    scales = (rng.random((k // group, n)) * 0.02 + 0.005).astype(np.float16)
    zeros = (rng.integers(0, 1 << bits, (k // group, n)) if not wtype.is_signed else np.zeros((k // group, n)))
    zeros = zeros.astype(np.float16)
    # The kernel computes in f16: (code - zero) exactly, then one rounding of the product.
    w = ((values.T - np.repeat(zeros, group, axis=0)).astype(np.float16) *
         np.repeat(scales, group, axis=0)).astype(np.float16)
    return packed, scales, zeros, w.astype(np.float64)


def run(name, wtype, m, n, k, group=128, timing=False):
    from common import check, on_gpu, timed
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    packed, scales, zeros, w = quantized_operands(wtype, k, n, group, rng)
    c = np.zeros((m, n), np.float16)
    kernel = QuantizedMatmul(wtype, group)
    args = [a, packed, scales, zeros, c, np.zeros((16, m, n), np.float32)]
    device = "cpu"
    if on_gpu():
        import torch
        args = [torch.from_numpy(x).cuda() for x in args]
        device = "cuda"
    args[1] = kernel.prepare(args[1])
    kernel(m, n, k, *args)
    check(f"{name} {wtype.name} {m}x{n}x{k} (split_k {kernel.config(m, n, k)['split_k']})", args[4],
          a.astype(np.float64) @ w, 2e-2, 1e-2)
    if timing:
        ms = timed(lambda: kernel(m, n, k, *args), device)
        weight_bytes = k * n * wtype.bits / 8
        print(f"{name} {wtype.name}: {m}x{n}x{k} in {ms * 1e3:.1f} us "
              f"({weight_bytes / ms / 1e6:.1f} GB/s of weights) on {device}")


if __name__ == "__main__":
    quick = os.environ.get("TILUS_EXAMPLES_QUICK")
    for t in WEIGHT_TYPES:
        run("matmul_a16wx", getattr(tilus, t), 37, 192, 1024)
        run("matmul_a16wx", getattr(tilus, t), 5, 200, 1024)  # small m: the repacked weights
    if not quick:
        from common import on_gpu
        s = 8192 if on_gpu() else 512
        run("matmul_a16wx", tilus.int4, 16, s, s, timing=True)
