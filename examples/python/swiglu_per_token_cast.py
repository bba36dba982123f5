"""SwiGLU fused with the per-token FP8 quantization of examples/python/per_token_cast.py (the job
of NVIDIA Tilus's examples/quantization/swiglu_forward_and_per_token_cast.py): x [m, 2 hidden]
(bfloat16 or float16) holds the gate and up projections side by side, and

    y = silu(gate) * up = gate / (1 + exp(-gate)) * up          (float32)

optionally with DeepSeek's clamp first (gate <= clamp, -clamp <= up <= clamp), goes out as e4m3
codes [m, hidden] with one float32 scale per token and 128-element group, exactly as
per_token_cast quantizes: y never touches global memory.

The division g / b is the reciprocal and one correction, q = g rcp(b), q - (b q - g) rcp(b),
with b kept below 2^126 and an infinite gate passed through (div="newton", six instructions an
element: MUFU.RCP, FMUL, two FFMA, a min and a select): on the GPU, where b q - g is one FFMA (exact),
this is the IEEE quotient for every finite gate with exp(-g) below 2^126 (g > -87.3; below, a
quotient under 2^-120 in magnitude where IEEE's is as small or 0); the CPU backend rounds b q first.
div="ieee" is CUDA's `/` (MUFU.RCP, five FFMA, a range check and a branch to a slow path: 10
executed). H200 mid1 call of 2026-11-29 (bench/fp8.py --only quant --no-tune --cast-tiles ...):
0.87 / 0.92x of the floor at m 4096 (ieee / newton, 1 x 8 groups, 2 warps, vec 16), 0.90 / 0.96x at
16384, 0.88 / 0.92x at 128 (4 warps); mid2 call, with the emitter's byte copies: 0.89 / 0.95x at
4096, 0.91 / 0.99x at 16384, 0.87 / 0.91x at 128, and newton == ieee bit for bit in 10 of 10 runs
of 64 x 7168. Gate times rcp(b) alone (1 ulp) was faster still (0.95 /
0.99x) but missed the scale tolerance on more inputs (gate -0.25, up 7) and was removed."""
import numpy as np

import tilus
from tilus import bfloat16, float32, int32
from common import from_host_array, host_array
from per_token_cast import CAST_CONFIGS, GROUP, cast_kernel, cast_tiles, check_codes_within, hard_values


class SwiGLUPerTokenCast(tilus.Script):
    def __init__(self, block_m=1, groups=8, warps=4, vec=None, clamp=None, dtype=bfloat16, cols_first=False,
                 div="newton"):
        super().__init__()
        if div not in ("newton", "ieee"):
            raise ValueError(f"div must be 'newton' or 'ieee', got {div!r}")
        self.block_m, self.groups, self.warps, self.vec = block_m, groups, warps, vec
        self.clamp, self.dtype, self.cols_first, self.div = clamp, dtype, cols_first, div

    def __call__(self, m: int32, hidden: int32, x: tilus.void_p, out: tilus.void_p, scales: ~float32):
        gx = self.global_view(x, dtype=self.dtype, shape=[m, 2 * hidden])

        def swiglu(row, col, shape):
            gate = self.load_global(gx, offsets=[row, col], shape=shape).to(float32)
            up = self.load_global(gx, offsets=[row, hidden + col], shape=shape).to(float32)
            if self.clamp is not None:
                gate = self.minimum(gate, self.clamp)
                up = self.maximum(self.minimum(up, self.clamp), -self.clamp)
            b = self.exp(-gate) + 1.0
            if self.div == "newton":
                b = self.minimum(b, 2.0 ** 126)
                r = self.rcp(b)
                q = gate * r
                q = q - (b * q - gate) * r  # not q + (gate - b q) r: a gate of -0 stays -0
                return self.where(gate < float("inf"), x=q, y=gate) * up
            return gate / b * up

        cast_tiles(self, m, hidden, out, scales, swiglu)


@tilus.autotune("block_m, groups, warps, vec", CAST_CONFIGS)
class SwiGLUPerTokenCastTuned(SwiGLUPerTokenCast):
    """SwiGLUPerTokenCast with its tile timed among CAST_CONFIGS at the first call of a size bucket."""


def swiglu_per_token_cast(x, out, scales, clamp=None, dtype=bfloat16, tune=False):
    """SwiGLUPerTokenCast on x [m, 2 hidden] with cast_config's rule (swiglu=True), or with tune
    the autotuner's (SwiGLUPerTokenCastTuned)."""
    m, hidden = x.shape[0], x.shape[1] // 2
    cast_kernel(SwiGLUPerTokenCast, SwiGLUPerTokenCastTuned, m, hidden, tune, swiglu=True, clamp=clamp,
                dtype=dtype)(m, hidden, x, out, scales)


def swiglu_reference(x, clamp=None):
    """y (float32) of x [m, 2 hidden] (float64 values), in numpy float32 as the kernel computes it."""
    hidden = x.shape[1] // 2
    gate, up = np.asarray(x[:, :hidden], np.float32), np.asarray(x[:, hidden:], np.float32)
    if clamp is not None:
        gate = np.fmin(gate, np.float32(clamp))
        up = np.fmax(np.fmin(up, np.float32(clamp)), np.float32(-clamp))
    with np.errstate(over="ignore", invalid="ignore"):
        return (gate / (np.exp(-gate) + np.float32(1)) * up).astype(np.float32)


def run(m, hidden, rng, device, clamp=None, dtype=bfloat16, tune=False, kernel=None):
    """Checks one cast of m x hidden random values: swiglu_per_token_cast's rule (or tuned), or the Script `kernel`."""
    x = hard_values(rng, m, 2 * hidden, dtype) if clamp is not None else from_host_array(
        host_array(rng.standard_normal((m, 2 * hidden)) * 3, dtype), dtype)
    hx = host_array(x, dtype)
    out, scales = np.zeros((m, hidden), np.uint8), np.zeros((m, hidden // GROUP), np.float32)
    if device == "cuda":
        import torch
        hx = torch.from_numpy(hx.view(np.int16) if hx.dtype == np.uint16 else hx).cuda()
        out, scales = torch.from_numpy(out).cuda(), torch.from_numpy(scales).cuda()
    if kernel is not None:
        kernel(m, hidden, hx, out, scales)
    else:
        swiglu_per_token_cast(hx, out, scales, clamp, dtype, tune)
    if device == "cuda":
        out, scales = out.cpu().numpy(), scales.cpu().numpy()
    # exp differs from numpy's by an ulp here and there: y, and so a group's amax, may differ in
    # its last bit, and a code sitting on a rounding boundary by one step.
    check_codes_within(out, scales, swiglu_reference(x, clamp),
                       f"swiglu_per_token_cast {m}x{hidden} clamp={clamp}{' tuned' if tune else ''}")
    return out, scales


if __name__ == "__main__":
    from common import on_gpu
    rng = np.random.default_rng(0)
    device = "cuda" if on_gpu() else "cpu"
    for m, hidden, clamp in [(5, 1024, None), (33, 640, 7.0), (3, 7168, None)]:
        run(m, hidden, rng, device, clamp)
