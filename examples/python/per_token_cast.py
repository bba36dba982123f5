"""Per-token FP8 quantization (the job of NVIDIA Tilus's examples/quantization/per_token_cast.py,
after DeepSeek's TileKernels): x [m, hidden] (bfloat16 or float16) to e4m3 codes [m, hidden] and
one float32 scale per token and 128-element group [m, hidden / 128], as the activations of a
block-scaled FP8 matmul (examples/python/matmul_fp8.py, scaling="block") take them:

    amax  = max |x[i, 128 g : 128 (g + 1)]|        (NaNs ignored, as fmaxf does)
    scale[i, g] = amax / 448 if amax > 0 else 1     (float32)
    out[i, j]   = e4m3(x[i, j] * (448 / amax))      (float32 product, then round to nearest
                                                      even, saturating at +-448, NaN to NaN)

Each block takes block_m tokens by `groups` groups of 128: `vec` adjacent elements of a token
per thread (16-byte loads; without vec the compiler's layout, one 16-byte vector), the group's
amax by shuffles over its 128 / vec threads, the codes converted four to a word (two per
hardware conversion on sm_89+) and written as vec-byte vectors. hidden is a multiple of 128 (a
partial last group would read as zeros and is not written past hidden)."""
import numpy as np

import tilus
from tilus import bfloat16, float8_e4m3, float32, int32
from common import from_host_array, host_array

GROUP = 128
E4M3_MAX = 448.0


def quantize_groups(s, x, rows, groups):
    """x [rows, groups * 128] (float32 registers) to (codes [rows, groups * 128] e4m3,
    scales [rows, groups] float32)."""
    xg = s.reshape(x, [rows, groups, GROUP])
    amax = s.max(s.abs(xg), dim=2, keepdim=True)
    scale = s.where(amax > 0.0, x=amax / E4M3_MAX, y=1.0)
    inv = s.where(amax > 0.0, x=E4M3_MAX / amax, y=1.0)
    codes = s.reshape((xg * inv).to(float8_e4m3), [rows, groups * GROUP])
    return codes, s.reshape(scale, [rows, groups])


def cast_config(m, hidden, swiglu=False):
    """block_m, groups, warps, vec, cols_first for m tokens of `hidden` (H200, mid2 call of
    2026-11-29, `bench/fp8.py --only quant --no-tune --cast-tiles ...`, hidden 7168): where hidden
    is a multiple of 1024, 1 token by 8 groups on 2 warps with 16 adjacent elements a thread and the
    blocks along the columns first (per_token_cast 0.97 / 0.99 / 0.99x its read+write floor at
    m = 128 / 4096 / 16384, against 0.96 / 0.91 / 0.89x for the compiler's layout on 4 warps; the
    SwiGLU 0.87 / 0.89x at 4096 / 16384), except the SwiGLU on a grid of fewer than 4 x 132 x 8
    blocks, where 4 warps of one 16-byte vector a thread keep more threads per element in flight
    (0.85x at m = 128 against 0.80x; with its division by reciprocal and correction, mid1 call of
    the same day: 0.92x against 0.87x, and 0.91-0.92x for 8 or 4 adjacent elements a thread on 4 or
    2 warps; mid2: 0.91x against 0.86x, at m = 512 0.90x against 0.89x). Other hidden: 1024-column blocks halved until they divide
    it, one vector a thread, 2 tokens per block once the grid fills the GPU several times over."""
    groups = 8
    while groups > 1 and hidden % (groups * GROUP):
        groups //= 2
    many = m * (hidden // (groups * GROUP)) >= 4 * 132 * 8
    if groups == 8 and (many or not swiglu):
        return dict(block_m=1, groups=8, warps=2, vec=16, cols_first=True)
    return dict(block_m=2 if many else 1, groups=groups, warps=groups // 2 if groups >= 2 else 1, vec=None,
                cols_first=False)


class PerTokenCast(tilus.Script):
    def __init__(self, block_m=1, groups=8, warps=4, vec=None, dtype=bfloat16, cols_first=False):
        super().__init__()
        self.block_m, self.groups, self.warps, self.vec, self.dtype = block_m, groups, warps, vec, dtype
        self.cols_first = cols_first

    def __call__(self, m: int32, hidden: int32, x: tilus.void_p, out: tilus.void_p, scales: ~float32):
        gx = self.global_view(x, dtype=self.dtype, shape=[m, hidden])
        cast_tiles(self, m, hidden, out, scales,
                   lambda row, col, shape: self.load_global(gx, offsets=[row, col], shape=shape).to(float32))


def tile_layout(block_m, width, warps, vec):
    """The register layout of a [block_m, width] tile in which each thread holds `vec` adjacent
    elements of a token (and block_m / down tokens): width / vec threads along a token, the
    block's other threads down the tokens. None where the tile does not split so."""
    across = width // vec
    if width % vec or (32 * warps) % across or block_m % ((32 * warps) // across):
        return None
    down = 32 * warps // across
    return tilus.local(block_m // down, 1) * tilus.spatial(down, across) * tilus.local(1, vec)


def cast_tiles(s, m, hidden, out, scales, load):
    """The body of the per-token casts: a block quantizes the tile of block_m tokens by `groups`
    groups at (block_m i, 128 groups j), whose float32 values load(row, col, shape) gives. With
    vec, each thread holds vec adjacent elements of a token (tile_layout): a group is 128 / vec
    threads, whose amax takes log2 of that many shuffles, and each thread's two divisions of a
    group (scale and its inverse) serve vec elements instead of the compiler's 8. cols_first
    numbers the blocks along the tokens' columns first (blockIdx.x), so that blocks launched
    together read adjacent memory."""
    bm, width = s.block_m, s.groups * GROUP
    row_blocks, col_blocks = tilus.cdiv(m, bm), tilus.cdiv(hidden, width)
    s.attrs.blocks = [col_blocks, row_blocks] if s.cols_first else [row_blocks, col_blocks]
    s.attrs.warps = s.warps
    s.assume(hidden % GROUP == 0)
    bi, bj = (s.blockIdx.y, s.blockIdx.x) if s.cols_first else (s.blockIdx.x, s.blockIdx.y)
    row, col = bi * bm, bj * width
    x = load(row, col, [bm, width])
    if s.vec:
        layout = tile_layout(bm, width, s.warps, s.vec)
        if layout is None:
            raise ValueError(f"block_m {bm}, groups {s.groups}, warps {s.warps}: vec {s.vec} does not split the tile")
        s.annotate_layout(x, layout)
    codes, sc = quantize_groups(s, x, bm, s.groups)
    s.store_global(s.global_view(out, dtype=float8_e4m3, shape=[m, hidden]), codes, offsets=[row, col])
    s.store_global(s.global_view(scales, shape=[m, hidden // GROUP]), sc, offsets=[row, col // GROUP])


# (block_m, groups, warps, vec) the autotuner times: tokens per block, 128-element groups per
# block, warps, and adjacent elements of a token per thread (None: the compiler's layout, one
# 16-byte vector of a token per thread).
CAST_CONFIGS = [(1, 8, 4, None), (2, 8, 4, None), (4, 8, 4, None), (2, 8, 8, None), (4, 8, 8, None),
                (2, 4, 2, None), (4, 4, 2, None), (8, 4, 2, None), (1, 8, 2, 16), (2, 8, 2, 16)]


@tilus.autotune("block_m, groups, warps, vec", CAST_CONFIGS)
class PerTokenCastTuned(PerTokenCast):
    """PerTokenCast with its tile timed among CAST_CONFIGS at the first call of a size bucket."""


_KERNELS = {}


def cast_kernel(cls, tuned_cls, m, hidden, tune, swiglu=False, **kw):
    """The kernel object (kept) for m tokens of `hidden`: tuned_cls (autotuned) with tune, else cls
    with the configuration of cast_config (its SwiGLU rule with swiglu)."""
    cfg = {} if tune else cast_config(m, hidden, swiglu)
    key = (cls.__name__, tune, tuple(sorted((k, repr(v)) for k, v in {**kw, **cfg}.items())))
    if key not in _KERNELS:
        _KERNELS[key] = (tuned_cls if tune else cls)(**kw, **cfg)
    return _KERNELS[key]


def tuned_config(kernel, *args):
    """(block_m, groups, warps, vec) the autotuned `kernel` runs with for these arguments (None: not tuned yet)."""
    winner = kernel._tilus_tuner.winner_for(args, {})
    return None if winner is None else (winner.block_m, winner.groups, winner.warps, winner.vec)


def per_token_cast(x, out, scales, dtype=bfloat16, tune=False):
    """Runs PerTokenCast on x [m, hidden] with the configuration of cast_config, or with tune the
    one the autotuner picks (PerTokenCastTuned)."""
    m, hidden = x.shape
    cast_kernel(PerTokenCast, PerTokenCastTuned, m, hidden, tune, dtype=dtype)(m, hidden, x, out, scales)


# --- the reference (numpy, from the format's definition) -------------------------------------------

def e4m3_values():
    """float64 value of each e4m3 code 0..255 (NaN for S.1111.111)."""
    c = np.arange(256)
    sign, exp, man = c >> 7, (c >> 3) & 15, c & 7
    v = np.where(exp == 0, np.ldexp(man.astype(np.float64), -9), np.ldexp((8 | man).astype(np.float64), exp - 10))
    v = np.where((exp == 15) & (man == 7), np.nan, v)
    return np.where(sign == 1, -v, v)


def e4m3_encode(x):
    """float64 values to e4m3 codes (uint8): round to nearest, ties to the even code; above 448
    (and infinities) saturate to +-448; NaN to 0x7f."""
    x = np.asarray(x, np.float64)
    mags = e4m3_values()[:127]  # codes 0..126 of sign 0, increasing; 126 is 448
    a = np.abs(x)
    i = np.clip(np.searchsorted(mags, a, side="right") - 1, 0, 126)
    lo, hi = mags[i], np.where(i == 126, np.inf, mags[np.minimum(i + 1, 126)])
    with np.errstate(invalid="ignore"):  # inf - inf: an infinity saturates below
        up = (a - lo > hi - a) | ((a - lo == hi - a) & (i % 2 == 1))
    code = np.minimum(np.where(up, i + 1, i), 126)
    code = np.where(np.signbit(x), code | 0x80, code)
    return np.where(np.isnan(x), 0x7f, code).astype(np.uint8)


def reference(x):
    """The codes (uint8) and scales (float32) of x [m, hidden] (float64 values of x's dtype), with
    the kernel's float32 arithmetic done in numpy float32 (IEEE, round to nearest even)."""
    m, hidden = x.shape
    xg = np.asarray(x, np.float32).reshape(m, -1, GROUP)
    amax = np.fmax.reduce(np.abs(xg), axis=2, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(amax > 0, amax / np.float32(E4M3_MAX), np.float32(1)).astype(np.float32)
        inv = np.where(amax > 0, np.float32(E4M3_MAX) / amax, np.float32(1)).astype(np.float32)
        y = (xg * inv).astype(np.float32)
    return e4m3_encode(y).reshape(m, hidden), scale.reshape(m, -1)


def hard_values(rng, m, hidden, dtype=bfloat16):
    """Random values with the cases that matter: groups of zeros, one huge element among small
    ones (codes flush to zero), NaNs, infinities, exact e4m3 values, ties, values whose scaled
    form rounds past 448 (saturation)."""
    x = rng.standard_normal((m, hidden)) * np.exp(rng.uniform(-8, 8, (m, 1)))
    flat = x.reshape(-1)
    n = flat.size
    pick = lambda count: rng.choice(n, size=min(count, n), replace=False)  # noqa: E731
    flat[pick(n // 50)] = np.nan
    flat[pick(n // 100)] = np.inf
    flat[pick(n // 100)] = -np.inf
    flat[pick(n // 20)] = rng.choice(e4m3_values()[np.isfinite(e4m3_values())], size=min(n // 20, n))
    if m > 1:
        x[0, :GROUP] = 0.0  # a group of zeros: scale 1
    if m > 2:
        x[1, :GROUP] = 1e-3
        x[1, 5] = 3e4
    return from_host_array(host_array(x, dtype), dtype)


def check_cast(codes, scales, x, name):
    want_codes, want_scales = reference(x)
    got_s = np.asarray(scales, np.float32)
    same = (got_s == want_scales) | (np.isnan(got_s) & np.isnan(want_scales))
    if not same.all():
        i = tuple(np.argwhere(~same)[0])
        raise AssertionError(f"{name}: scale {i}: got {got_s[i]} want {want_scales[i]}")
    bad = np.asarray(codes, np.uint8) != want_codes
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{name}: code {i}: got {int(codes[i]):#04x} want {int(want_codes[i]):#04x} "
                             f"(x {x[i]!r}, {int(bad.sum())} codes differ)")
    print(f"{name}: PASS ({codes.size} codes, {scales.size} scales bit-exact)")


def check_codes_within(codes, scales, y, name):
    """For a y computed with transcendental functions (whose last bit may differ from numpy's):
    the scales within 2 ulp of the reference's and each code at most one step from it (NaN where
    it is NaN), 99 % of them exact."""
    want_codes, want_scales = reference(y)
    got_s = np.asarray(scales, np.float32)
    close = np.isclose(got_s, want_scales, rtol=2.5e-7, atol=0) | (np.isnan(got_s) & np.isnan(want_scales))
    if not close.all():
        i = tuple(np.argwhere(~close)[0])
        raise AssertionError(f"{name}: scale {i}: got {got_s[i]} want {want_scales[i]}")
    got, want = np.asarray(codes, np.int64), want_codes.astype(np.int64)
    nan_got, nan_want = (got & 0x7f) == 0x7f, (want & 0x7f) == 0x7f
    step = np.where((got ^ want) & 0x80, (got & 0x7f) + (want & 0x7f), np.abs(got - want))  # across zero: sum
    bad = (nan_got != nan_want) | (~nan_want & (step > 1))
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{name}: code {i}: got {int(got[i]):#04x} want {int(want[i]):#04x} (y {y[i]!r})")
    exact = (got == want).mean()
    if exact < 0.99:
        raise AssertionError(f"{name}: only {exact:.2%} of the codes are exact")
    print(f"{name}: PASS ({exact:.4%} of {codes.size} codes exact, the rest one step off)")


def run(m, hidden, rng, device, dtype=bfloat16, tune=False, kernel=None):
    """Checks one cast of m x hidden random values: per_token_cast's rule (or tuned), or the Script `kernel`."""
    x = hard_values(rng, m, hidden, dtype)
    hx = host_array(x, dtype)
    out, scales = np.zeros((m, hidden), np.uint8), np.zeros((m, hidden // GROUP), np.float32)
    if device == "cuda":
        import torch
        hx = torch.from_numpy(hx.view(np.int16) if hx.dtype == np.uint16 else hx).cuda()
        out, scales = torch.from_numpy(out).cuda(), torch.from_numpy(scales).cuda()
    if kernel is not None:
        kernel(m, hidden, hx, out, scales)
    else:
        per_token_cast(hx, out, scales, dtype, tune)
    if device == "cuda":
        out, scales = out.cpu().numpy(), scales.cpu().numpy()
    check_cast(out, scales, x, f"per_token_cast {dtype.name} {m}x{hidden}{' tuned' if tune else ''}")


if __name__ == "__main__":
    from common import on_gpu
    rng = np.random.default_rng(0)
    device = "cuda" if on_gpu() else "cpu"
    for m, hidden in [(5, 1024), (33, 640), (3, 7168)]:
        run(m, hidden, rng, device)
    run(7, 384, rng, device, tilus.float16)
