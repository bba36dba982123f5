"""Low-precision types end to end (issue 16): fp8, the sub-byte floats and the sub-byte integers
in registers and in global memory, and the casts between them and float32, on every backend
present (the CPU backend with numpy arrays, the GPU with torch tensors).

The reference is written here in numpy from the formats' definitions (not from tilus's own
encoder): every code's value, and round-to-nearest-even with each format's overflow rule."""
import re

import numpy as np
import pytest

import tilus
from tilus import float32, int32
from conftest import HAS_CPU, HAS_GPU

B = 128
FLOATS = ["float8_e4m3", "float8_e5m2", "float6_e3m2", "float6_e2m3", "float4_e2m1", "float5_e2m2", "float3_e1m1",
          "float7_e3m3"]
INTS = ["int4", "uint4", "int3", "uint2", "int1", "uint7", "int6"]


class Encode(tilus.Script):
    """y (codes of dt, packed) = x (float32) converted to dt."""

    def __init__(self, dt):
        super().__init__()
        self.dt = dt

    def __call__(self, n: int32, x: ~float32, codes: tilus.void_p):
        # 4 elements per thread (the hardware conversion takes float32 pairs; a tile of fewer
        # elements than threads spreads them one per thread)
        self.attrs.blocks = [tilus.cdiv(n, 4 * B)]
        self.attrs.warps = 4
        o = [self.blockIdx.x * 4 * B]
        v = self.load_global(self.global_view(x, shape=[n]), offsets=o, shape=[4 * B])
        self.store_global(self.global_view(codes, dtype=self.dt, shape=[n]), v.to(self.dt), offsets=o)


class Decode(tilus.Script):
    """y (float32) = codes (dt, packed, starting at element `start`) converted to float32."""

    def __init__(self, dt, start=0):
        super().__init__()
        self.dt, self.start = dt, start

    def __call__(self, n: int32, codes: tilus.void_p, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, B)]
        self.attrs.warps = 4
        o = self.blockIdx.x * B
        v = self.load_global(self.global_view(codes, dtype=self.dt, shape=[n + self.start]), offsets=[o + self.start],
                             shape=[B])
        self.store_global(self.global_view(y, shape=[n]), v.to(float32), offsets=[o])


class IntCast(tilus.Script):
    """codes (dt) = x (int32 or float32) converted; y (int32) = the codes read back."""

    def __init__(self, dt, src):
        super().__init__()
        self.dt, self.src = dt, src

    def __call__(self, n: int32, x: tilus.void_p, codes: tilus.void_p):
        self.attrs.blocks = [tilus.cdiv(n, B)]
        self.attrs.warps = 4
        o = [self.blockIdx.x * B]
        v = self.load_global(self.global_view(x, dtype=self.src, shape=[n]), offsets=o, shape=[B])
        self.store_global(self.global_view(codes, dtype=self.dt, shape=[n]), v.to(self.dt), offsets=o)


# --- the numpy reference ------------------------------------------------------------------------

def float_format(name):
    bits, e, m = map(int, re.fullmatch(r"float(\d)_e(\d)m(\d)", name).groups())
    style = "ieee" if name == "float8_e5m2" else "fn" if name == "float8_e4m3" else "finite"
    return bits, e, m, style


def code_values(name):
    """float64 value of every code 0 .. 2^bits - 1 (NaN where the code is NaN)."""
    bits, e, m, style = float_format(name)
    c = np.arange(1 << bits, dtype=np.int64)
    sign = (c >> (e + m)) & 1
    exp = (c >> m) & ((1 << e) - 1)
    man = c & ((1 << m) - 1)
    bias = (1 << (e - 1)) - 1
    v = np.where(exp == 0, np.ldexp(man.astype(np.float64), 1 - bias - m),
                 np.ldexp(((1 << m) | man).astype(np.float64), exp - bias - m))
    all_ones = exp == (1 << e) - 1
    if style == "ieee":
        v = np.where(all_ones, np.where(man == 0, np.inf, np.nan), v)
    elif style == "fn":
        v = np.where(all_ones & (man == (1 << m) - 1), np.nan, v)
    return np.where(sign == 1, -v, v)


def reference_encode(name, x):
    """Round x (float64) to the nearest code, ties to the even code; overflow as the style says."""
    bits, e, m, style = float_format(name)
    values = code_values(name)
    half = 1 << (bits - 1)
    pos = values[:half]  # sign 0: increasing with the code
    finite = np.isfinite(pos)
    mags, codes = pos[finite], np.arange(half)[finite]
    a = np.abs(x)
    i = np.clip(np.searchsorted(mags, a, side="right") - 1, 0, len(mags) - 1)
    lo, hi = mags[i], mags[np.minimum(i + 1, len(mags) - 1)]
    top = len(mags) - 1
    # Above the largest finite value the next step is one ulp up (where IEEE's infinity lives).
    ulp_top = mags[top] - mags[top - 1]
    hi = np.where(i == top, mags[top] + ulp_top, hi)
    up = (a - lo > hi - a) | ((a - lo == hi - a) & (codes[i] % 2 == 1))
    code = np.where(up, codes[i] + 1, codes[i])
    overflow = code > codes[top]
    sat = codes[top]
    inf_code = (((1 << e) - 1) << m) if style == "ieee" else sat
    code = np.where(overflow, inf_code, code)
    code = np.where(np.isinf(a), inf_code, code)
    code = np.where(np.signbit(x), code | half, code)
    nan_code = {"ieee": (((1 << e) - 1) << m) | (1 << (m - 1)), "fn": (1 << (bits - 1)) - 1, "finite": sat}[style]
    return np.where(np.isnan(x), nan_code, code).astype(np.int64)


def pack(codes, bits):
    """Little-endian dense packing: element i at bits [i*bits, (i+1)*bits)."""
    bitstream = ((codes[:, None] >> np.arange(bits)) & 1).astype(np.uint8).reshape(-1)
    bitstream = np.concatenate([bitstream, np.zeros((-len(bitstream)) % 8, np.uint8)])
    return np.packbits(bitstream.reshape(-1, 8), axis=1, bitorder="little").reshape(-1)


def unpack(data, bits, n):
    bitstream = np.unpackbits(np.asarray(data, np.uint8), bitorder="little")[: n * bits].reshape(n, bits)
    return (bitstream.astype(np.int64) << np.arange(bits)).sum(axis=1)


def probe_values(name, rng):
    """Every value, every midpoint (the ties), their float32 neighbours, specials, random values."""
    v = code_values(name)
    f = np.sort(np.unique(v[np.isfinite(v)]))
    mids = (f[1:] + f[:-1]) / 2
    top = f[-1] + (f[-1] - f[-2]) / 2
    pts = np.concatenate([f, mids, [top, 2 * f[-1], 1e30]]).astype(np.float32)
    near = np.concatenate([np.nextafter(pts, np.float32(np.inf)), np.nextafter(pts, np.float32(-np.inf))])
    rand = rng.uniform(-1.5 * f[-1], 1.5 * f[-1], 500).astype(np.float32)
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30, -1e-30], np.float32)
    return np.concatenate([pts, near, rand, special]).astype(np.float32)


# --- tests --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FLOATS)
def test_float_encode_rounds_like_the_reference(arrays, name):
    dt = getattr(tilus, name)
    x = probe_values(name, np.random.default_rng(1))
    n = len(x)
    codes = arrays.put(np.zeros(dt.storage_bytes(n), np.uint8))
    Encode(dt)(n, arrays.put(x), codes)
    got = unpack(arrays.host(codes), dt.bits, n)
    want = reference_encode(name, x.astype(np.float64))
    bad = np.nonzero(got != want)[0]
    assert not len(bad), f"{name}: {len(bad)} of {n} codes differ, e.g. x={x[bad[:5]]} got {got[bad[:5]]} want {want[bad[:5]]}"


@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("start", [0, 3])
def test_float_decode_every_code(arrays, name, start):
    dt = getattr(tilus, name)
    values = code_values(name)
    n = len(values)
    codes = np.concatenate([np.zeros(start, np.int64), np.arange(n)])  # elements before `start` are skipped
    y = arrays.empty((n,))
    Decode(dt, start)(n, arrays.put(pack(codes, dt.bits)), y)
    np.testing.assert_array_equal(arrays.host(y), values.astype(np.float32))


def int_range(name):
    bits = int(name.lstrip("uint"))
    return (0, (1 << bits) - 1) if name.startswith("u") else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


@pytest.mark.parametrize("name", INTS)
def test_int_casts_wrap_from_integers_and_saturate_from_floats(arrays, name):
    dt = getattr(tilus, name)
    lo, hi = int_range(name)
    bits = dt.bits
    rng = np.random.default_rng(2)
    n = 301  # ragged: not a multiple of the block or of a byte's elements
    xi = rng.integers(-300, 300, n).astype(np.int32)
    codes = arrays.put(np.zeros(dt.storage_bytes(n), np.uint8))
    IntCast(dt, tilus.int32)(n, arrays.put(xi), codes)
    np.testing.assert_array_equal(unpack(arrays.host(codes), bits, n), xi.astype(np.int64) & ((1 << bits) - 1))
    xf = rng.uniform(lo - 5, hi + 5, n).astype(np.float32)
    xf[:3] = [np.nan, np.inf, -np.inf]
    codes = arrays.put(np.zeros(dt.storage_bytes(n), np.uint8))
    IntCast(dt, tilus.float32)(n, arrays.put(xf), codes)
    want = np.clip(np.trunc(np.nan_to_num(xf, nan=0.0, posinf=hi, neginf=lo)), lo, hi).astype(np.int64)
    np.testing.assert_array_equal(unpack(arrays.host(codes), bits, n), want & ((1 << bits) - 1))
    # And back to int32, sign-extended for the signed types.
    y = arrays.empty((n,), dtype="int32")
    back = IntCast(tilus.int32, dt)
    back(n, codes, y)
    np.testing.assert_array_equal(arrays.host(y), want)


def test_packed_stores_leave_neighbours_alone(arrays):
    """A store of 37 int4 starting at element 1 changes those nibbles only."""
    class Fill(tilus.Script):
        def __call__(self, n: int32, codes: tilus.void_p):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            v = self.register_tensor(dtype=tilus.int4, shape=[64], init=lambda i: i % 8 - 3)
            self.store_global(self.global_view(codes, dtype=tilus.int4, shape=[n + 1]), v, offsets=[1])

    n = 37
    before = np.random.default_rng(3).integers(0, 256, 32).astype(np.uint8)
    codes = arrays.put(before.copy())
    Fill()(n, codes)
    got = unpack(arrays.host(codes), 4, 64)
    want = unpack(before, 4, 64)
    want[1:n + 1] = (np.arange(n) % 8 - 3) & 15
    np.testing.assert_array_equal(got, want)


class ViewBytes(tilus.Script):
    """y (float32) = the bytes of `data` viewed in registers as dt (4-bit), converted to float32:
    the way quantized kernels unpack weights they load as bytes."""

    def __init__(self, dt):
        super().__init__()
        self.dt = dt

    def __call__(self, n: int32, data: ~tilus.uint8, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, 2 * B)]
        self.attrs.warps = 4
        o = self.blockIdx.x * B
        raw = self.load_global(self.global_view(data, shape=[tilus.cdiv(n, 2)]), offsets=[o], shape=[B])
        v = self.view(raw, dtype=self.dt)  # [2B] elements, each thread's bits unchanged
        self.store_global(self.global_view(y, shape=[n]), v.to(float32), offsets=[2 * o])


@pytest.mark.parametrize("name", ["int4", "uint4", "float4_e2m1"])
def test_view_bytes_as_4_bit_elements(arrays, name):
    dt = getattr(tilus, name)
    n = 2 * 300 - 1  # ragged: the last byte's high nibble is past n
    data = np.random.default_rng(4).integers(0, 256, (n + 1) // 2).astype(np.uint8)
    codes = unpack(data, 4, n)
    if name == "int4":
        want = np.where(codes >= 8, codes - 16, codes)
    elif name == "uint4":
        want = codes
    else:
        want = code_values(name)[codes]
    y = arrays.empty((n,))
    ViewBytes(dt)(n, arrays.put(data), y)
    np.testing.assert_array_equal(arrays.host(y), want.astype(np.float32))


class ViewStraddling(tilus.Script):
    """y (float32) = bytes viewed as `bits`-bit codes that straddle bytes: each thread holds
    `bits` consecutive bytes (annotated), which are its 8 codes in slot order."""

    def __init__(self, dt):
        super().__init__()
        self.dt = dt

    def __call__(self, data: ~tilus.uint8, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        bits = self.dt.bits
        raw = self.load_global(self.global_view(data, shape=[128 * bits]), offsets=[0], shape=[128 * bits])
        self.annotate_layout(raw, tilus.spatial(128) * tilus.local(bits))
        v = self.view(raw, dtype=self.dt, layout=tilus.spatial(128) * tilus.local(8))
        self.store_global(self.global_view(y, shape=[1024]), v.to(float32), offsets=[0])


@pytest.mark.parametrize("name", ["int3", "uint5", "float6_e3m2", "int7"])
def test_view_bytes_as_codes_that_straddle_bytes(arrays, name):
    dt = getattr(tilus, name)
    codes = np.random.default_rng(7).integers(0, 1 << dt.bits, 1024)
    if dt.is_float():
        want = code_values(name)[codes]
    else:
        want = np.where(codes >= (1 << (dt.bits - 1)), codes - (1 << dt.bits), codes) if dt.is_signed() else codes
    y = arrays.empty((1024,))
    ViewStraddling(dt)(arrays.put(pack(codes, dt.bits)), y)
    np.testing.assert_array_equal(arrays.host(y), want.astype(np.float32))


class Widen16(tilus.Script):
    """y (float32) = codes (dt) -> float16 / bfloat16 (the vectorized conversions) -> float32."""

    def __init__(self, dt, mid):
        super().__init__()
        self.dt, self.mid = dt, mid

    def __call__(self, n: int32, codes: tilus.void_p, y: ~float32):
        # 8 elements per thread: the vectorized conversions take 2 (fp8) or 8 (4-bit) at a time
        # (a tile of fewer elements than threads spreads them one per thread).
        self.attrs.blocks = [tilus.cdiv(n, 8 * B)]
        self.attrs.warps = 4
        o = [self.blockIdx.x * 8 * B]
        v = self.load_global(self.global_view(codes, dtype=self.dt, shape=[n]), offsets=o, shape=[8 * B])
        self.store_global(self.global_view(y, shape=[n]), v.to(self.mid).to(float32), offsets=o)


@pytest.mark.parametrize("name", ["int4", "uint4", "float8_e4m3", "float8_e5m2", "float4_e2m1"])
@pytest.mark.parametrize("mid", ["float16", "bfloat16"])
def test_widening_to_16_bit_floats_is_exact(arrays, name, mid):
    dt = getattr(tilus, name)
    n = 1000 + 13
    codes = np.random.default_rng(5).integers(0, 1 << dt.bits, n)
    codes[: 1 << dt.bits] = np.arange(1 << dt.bits)  # every code
    if name.startswith("float"):
        want = code_values(name)[codes]
    else:
        want = np.where(codes >= 8, codes - 16, codes) if name == "int4" else codes
    want = want.astype(np.float16 if mid == "float16" else np.float32)
    y = arrays.empty((n,))
    Widen16(dt, getattr(tilus, mid))(n, arrays.put(pack(codes, dt.bits)), y)
    got = arrays.host(y)
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan], want.astype(np.float32)[~nan])


@pytest.mark.parametrize("name,mid,helper", [("int4", "float16", "cvt_4bit_x8<true>"),
                                             ("uint4", "bfloat16", "cvt_4bit_x8<false>"),
                                             ("float8_e4m3", "float16", "cvt_fp8_x2<true>"),
                                             ("float8_e5m2", "bfloat16", "cvt_fp8_x2<false>"),
                                             ("float4_e2m1", "float16", "cvt_fp4_x8"),
                                             ("float4_e2m1", "bfloat16", "cvt_fp4_x8")])
def test_widening_uses_the_vectorized_conversion(name, mid, helper):
    src = Widen16(getattr(tilus, name), getattr(tilus, mid)).source(64, np.zeros(64, np.uint8),
                                                                      np.zeros(64, np.float32), arch="sm_90a")
    assert f"tilus::{helper}(" in src


def test_e4m3_encoding_of_float32_pairs_uses_the_hardware_conversion():
    """A thread's float32 slots go to e4m3 four at a time through cvt_f32x4_e4m3 (two
    cvt.rn.satfinite.e4m3x2.f32 on sm_89+ and one word; two at a time, cvt_f32x2_e4m3, where the
    slots come in pairs only; test_float_encode_rounds_like_the_reference holds it to the
    reference, NaNs, infinities, ties and saturation included). e5m2 overflows to infinity,
    which the saturating hardware conversion does not do: it keeps the element-wise encoder."""
    f32, u8 = np.zeros(64, np.float32), np.zeros(64, np.uint8)
    assert "tilus::cvt_f32x4_e4m3(" in Encode(tilus.float8_e4m3).source(64, f32, u8, arch="sm_90a")
    assert "tilus::cvt_f32x" not in Encode(tilus.float8_e5m2).source(64, f32, u8, arch="sm_90a")
    ptx = Encode(tilus.float8_e4m3).ptx(64, f32, u8, arch="sm_90a")
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_cuda_code_compiles(arch):
    """The CUDA path of every family (fp8, sub-byte float, sub-byte int, 4-bit views), with NVRTC
    and no GPU."""
    f32, u8 = np.zeros(64, np.float32), np.zeros(64, np.uint8)
    kernels = [(Encode(tilus.float8_e4m3), (10, f32, u8)), (Decode(tilus.float6_e3m2, 3), (10, u8, f32)),
               (IntCast(tilus.int3, tilus.float32), (10, f32, u8)), (IntCast(tilus.int32, tilus.uint4), (10, u8, f32)),
               (ViewBytes(tilus.float4_e2m1), (10, u8, f32)), (Widen16(tilus.int4, tilus.float16), (10, u8, f32)),
               (Widen16(tilus.uint4, tilus.bfloat16), (10, u8, f32)),
               (Widen16(tilus.float8_e5m2, tilus.float16), (10, u8, f32)),
               (Widen16(tilus.float4_e2m1, tilus.float16), (10, u8, f32)),
               (Widen16(tilus.float4_e2m1, tilus.bfloat16), (10, u8, f32))]
    for k, args in kernels:
        c = k.compiled(*args, arch=arch)
        assert c.spill_store_bytes == 0, f"{type(k).__name__}: {c.spill_store_bytes} bytes spilled"


@pytest.mark.parametrize("wtype,split_k,repacked,warps,atype", [
    ("int4", 1, False, 4, "float16"), ("int4", 4, False, 4, "float16"), ("uint4", 3, False, 4, "float16"),
    ("int8", 2, False, 4, "float16"), ("float8_e4m3", 1, False, 4, "bfloat16"), ("float4_e2m1", 2, False, 4, "float16"),
    ("int3", 2, False, 4, "float16"), ("float6_e3m2", 1, False, 4, "bfloat16"), ("int4", 1, True, 4, "float16"),
    ("uint4", 3, True, 4, "bfloat16"), ("float8_e5m2", 2, True, 4, "float16"), ("int4", 2, True, 8, "float16"),
    ("int3", 1, True, 4, "float16"), ("float6_e3m2", 2, True, 4, "float16")])
def test_quantized_matmul_example(arrays, wtype, split_k, repacked, warps, atype):
    """examples/python/matmul_a16wx.py against dequantize-then-matmul, on ragged sizes, f16 and
    bf16 activations, with and without split-K (3 splits of 5 k tiles leave the last split one
    tile), on plain weights (3- and 6-bit codes straddle bytes) and on weights repacked into
    fragment order (n and k padded to whole tiles) for 4 and 8 warps."""
    from matmul_a16wx import MatmulA16Wx, from_host_array, host_array, quantized_operands, repack_weights, round_to
    dt, at = getattr(tilus, wtype), getattr(tilus, atype)
    # A repacked 3- or 6-bit tile needs 128-long k tiles (a thread's bits in whole 16-byte rows).
    bk = 128 if repacked and dt.bits % 2 else 64
    m, n, k, group = (16, 200, 5 * bk, bk) if repacked else (37, 192, 320, 64)
    rng = np.random.default_rng(6)
    a = round_to(rng.uniform(-1, 1, (m, k)), at)
    packed, scales, zeros, w = quantized_operands(dt, k, n, group, rng, at)
    weights = repack_weights(arrays.put(packed), dt, n, k, 128, bk, warps) if repacked else arrays.put(packed)
    c = arrays.put(host_array(np.zeros((m, n)), at))
    work = arrays.put(np.zeros((split_k, m, n), np.float32))
    counters = arrays.put(np.zeros(16, np.int32))  # one per (m, n) tile: 3 x 2 at most
    kernel = MatmulA16Wx(dt, group, block_k=bk, split_k=split_k, warps=warps, repacked=repacked, atype=at)
    kernel(m, n, k, arrays.put(host_array(a, at)), weights, arrays.put(host_array(scales, at)),
           arrays.put(host_array(zeros, at)), c, work, counters)
    np.testing.assert_allclose(from_host_array(arrays.host(c), at), a @ w, atol=2e-2, rtol=1e-2)
    # the last split of each tile set its counter back to zero, ready for the next launch
    np.testing.assert_array_equal(arrays.host(counters), 0)


def test_quantized_matmul_driver_reuses_its_split_k_counters(arrays):
    """QuantizedMatmul (the example's driver) at a ragged size where it splits k 4 ways over
    64-row tiles (the last split sums the partials 16 rows at a time): two launches with
    different activations both match the reference, so the first left its arrival counters at
    zero for the second."""
    from matmul_a16wx import QuantizedMatmul, from_host_array, host_array, quantized_operands, round_to
    m, n, k, group = 37, 192, 1024, 128
    rng = np.random.default_rng(9)
    packed, scales, zeros, w = quantized_operands(tilus.int4, k, n, group, rng)
    q = QuantizedMatmul(tilus.int4, group)
    assert q.config(m, n, k)["split_k"] == 4 and q.config(m, n, k)["block_m"] == 64
    weights = q.prepare(arrays.put(packed))
    weights.pop("wgmma", None)  # the split-K kernel: on an sm_90a GPU this m would take the wgmma one
    work = arrays.put(np.zeros((16, m, n), np.float32))
    for launch in range(2):
        a = round_to(rng.uniform(-1, 1, (m, k)), tilus.float16)
        c = arrays.put(host_array(np.zeros((m, n)), tilus.float16))
        q(m, n, k, arrays.put(host_array(a, tilus.float16)), weights, arrays.put(host_array(scales, tilus.float16)),
          arrays.put(host_array(zeros, tilus.float16)), c, work)
        np.testing.assert_allclose(from_host_array(arrays.host(c), tilus.float16), a @ w, atol=2e-2, rtol=1e-2,
                                   err_msg=f"launch {launch}")
    np.testing.assert_array_equal(arrays.host(q.arrival_counters.counters), 0)


def test_quantized_matmul_prepare_keeps_the_layouts_asked_for(arrays):
    """QuantizedMatmul.prepare makes only the weight orders asked for (each a copy of the
    weights' bytes): by default the rule's without tuning and every one that applies with
    tune=True; a call whose configuration reads an order not made runs the plain weights'
    kernel, right either way."""
    from matmul_a16wx import QuantizedMatmul, from_host_array, host_array, quantized_operands, round_to
    m, n, k, group = 5, 200, 1024, 128
    rng = np.random.default_rng(21)
    packed, scales, zeros, w = quantized_operands(tilus.int4, k, n, group, rng)
    b = arrays.put(packed)
    q = QuantizedMatmul(tilus.int4, group)
    assert "repacked" in q.prepare(b) and set(q.prepare(b)) <= set(q.RULE_LAYOUTS)
    assert {"magic", "magic_k"} <= set(QuantizedMatmul(tilus.int4, group, tune=True).prepare(b))
    assert q.layout_of(dict(q.mma_config(m, n, k), magic=True, k_major=True)) == "magic_k"
    a = round_to(rng.uniform(-1, 1, (m, k)), tilus.float16)
    operands = [arrays.put(host_array(x, tilus.float16)) for x in (a, scales, zeros)]
    for layouts in (("magic_k",), ("plain", "repacked"), ()):
        weights = q.prepare(b, layouts=layouts)
        assert set(weights) == {"plain", *layouts}
        c = arrays.put(host_array(np.zeros((m, n)), tilus.float16))
        q(m, n, k, operands[0], weights, operands[1], operands[2], c, arrays.put(np.zeros((16, m, n), np.float32)))
        np.testing.assert_allclose(from_host_array(arrays.host(c), tilus.float16), a @ w, atol=2e-2, rtol=1e-2,
                                   err_msg=str(layouts))


def test_quantized_matmul_tuning_passes_over_a_wrong_winner(arrays, capfd):
    """The tuner's check of its winner (QuantizedMatmul.checked_fastest): a configuration whose c
    is off the general kernel's is reported and passed over for the next fastest; with none
    right, the general kernel itself."""
    from matmul_a16wx import QuantizedMatmul, from_host_array, host_array, quantized_operands, round_to
    m, n, k, group = 5, 136, 512, 128
    rng = np.random.default_rng(12)
    packed, scales, zeros, w = quantized_operands(tilus.int4, k, n, group, rng)
    q = QuantizedMatmul(tilus.int4, group)
    weights = q.prepare(arrays.put(packed))
    a = round_to(rng.uniform(-1, 1, (m, k)), tilus.float16)
    c = arrays.put(host_array(np.zeros((m, n)), tilus.float16))
    operands = (arrays.put(host_array(a, tilus.float16)), weights, arrays.put(host_array(scales, tilus.float16)), arrays.put(host_array(zeros, tilus.float16)),
                c, arrays.put(np.zeros((16, m, n), np.float32)))
    calls = []

    def call(cfg):  # "broken": a kernel that writes a wrong c
        calls.append(cfg)
        kernel, args = q.kernel_call({x: v for x, v in cfg.items() if x != "broken"}, m, n, k, *operands)
        if cfg.get("broken"):
            def kernel(*args):
                args[7][...] = 3.0
        return kernel, args

    good = q.mma_config(m, n, k, 16)
    capfd.readouterr()
    assert q.checked_fastest([(1.0, dict(good, broken=True)), (2.0, good)], call, m, n, k) == good
    assert "passed over" in capfd.readouterr().err
    assert calls == [dict(q.mma_config(m, n, k), repacked=False), dict(good, broken=True), good]  # the reference first
    np.testing.assert_allclose(from_host_array(arrays.host(c), tilus.float16), a @ w, atol=2e-2, rtol=1e-2)
    assert q.checked_fastest([(1.0, dict(good, broken=True))], call, m, n, k) == dict(q.mma_config(m, n, k), repacked=False)


UNROLL = dict(unroll=True, min_blocks=4)  # the k loop unrolled by the stages, in the registers of 4 blocks an SM


@pytest.mark.parametrize("wtype,split_k,bk,options", [
    ("int4", 2, 64, dict(late_scale=True)), ("uint4", 3, 128, {}), ("int4", 3, 128, dict(late_scale=True, tma=True)),
    ("uint4", 2, 64, dict(late_scale=True, tma=True)), ("uint4", 1, 64, dict(tma=True)),
    ("int4", 3, 128, dict(late_scale=True, **UNROLL)), ("uint4", 2, 64, dict(late_scale=True, **UNROLL)),
    ("int4", 3, 128, dict(late_scale=True, bounded=True)), ("uint4", 4, 64, dict(late_scale=True, bounded=True)),
    ("int4", 4, 64, dict(late_scale=True, bounded=True, **UNROLL)),
    ("uint4", 3, 128, dict(late_scale=True, bounded=True, stages=8)),
    ("uint4", 2, 128, dict(late_scale=True, interleave=True)), ("int4", 3, 64, dict(late_scale=True, interleave=True)),
    ("uint4", 4, 64, dict(late_scale=True, interleave=True, stages=8)),
    ("int4", 2, 64, dict(late_scale=True, k_major=True)), ("uint4", 3, 128, dict(late_scale=True, interleave=True, k_major=True)),
    ("int4", 3, 128, dict(late_scale=True, bounded=True, split_red=True, n=208)),
    ("uint4", 4, 64, dict(late_scale=True, bounded=True, split_red=True, interleave=True, **UNROLL)),
    ("int4", 3, 128, dict(late_scale=True, fixed_sums=True)), ("int4", 2, 64, dict(fixed_sums=True)),
    ("uint4", 4, 64, dict(late_scale=True, interleave=True, k_major=True, fixed_sums=True)),
    ("int4", 3, 128, dict(late_scale=True, two_sums=True)), ("uint4", 2, 64, dict(late_scale=True, two_sums=True, k_major=True)),
    ("int4", 3, 128, dict(late_scale=True, warps=8)), ("uint4", 2, 64, dict(late_scale=True, interleave=True, warps=8)),
    ("uint4", 4, 128, dict(late_scale=True, interleave=True, k_major=True, fixed_sums=True, warps=8)),
    ("int4", 3, 128, dict(late_scale=True, weights_a=True, block_m=8, warps=8)),
    ("uint4", 2, 64, dict(late_scale=True, weights_a=True, block_m=8, interleave=True, k_major=True)),
    ("int4", 4, 64, dict(late_scale=True, weights_a=True, block_m=8, fixed_sums=True, warps=8)),
    ("uint4", 3, 256, dict(late_scale=True, weights_a=True, block_m=8, warps=8, groups=2)),
    ("int4", 3, 256, dict(late_scale=True, weights_a=True, block_m=16, warps=8, groups=2, interleave=True)),
    ("int4", 4, 256, dict(late_scale=True, weights_a=True, block_m=8, interleave=True, k_major=True, fixed_sums=True,
                          warps=8, groups=2))])
def test_quantized_matmul_magic_decode(arrays, wtype, split_k, bk, options):
    """MatmulA16Wx(magic=True) (4-bit codes widened by masking whole words into f16's magic
    exponent, on weights repacked into magic_layout) against the float64 dequantize-then-matmul
    on ragged m, n and split k (5 k tiles: in 3 splits of 2, 2 and 1; in 4 splits of 2 the last
    two short and empty), signed codes and unsigned ones with zero points, the scales in the
    product or (late_scale) on each k tile's float32 product; with tma=True each stage's tiles
    come as TMA boxes on an mbarrier ring (the ragged rows of a zero-filled, no box issued past a
    split's last tile); the k loop unrolled; bounded=True (a split copies none of the next
    split's k tiles: past its range the copies zero-fill), also in 8 stages (7 tiles copied ahead
    of splits of 2 or 1); interleave=True (split z on the k tiles z, z + s, ...: 5 tiles in 4
    splits leave split 0 two, the others one; in 8 stages 7 copies ahead past the end of k);
    split_red=True (a tile's splits in one cluster: the last stores its tile of c and the others
    add theirs into c by red after the cluster's barrier, by f16 pairs where n is a multiple of
    16, element by element where not; also interleaved and unrolled); k_major=True (the weights
    k tile after k tile; split, and interleaved); fixed_sums=True (the splits' sums added in
    fixed point into an int64 per element with the count in its top bits, the last add's thread
    storing c; 16 rows and 5, ragged n, 2 to 4 splits, one of them empty); two_sums=True (a tile's
    late-scaled product in two float32 sums); 8-warp blocks (warps=8, on weights in the 8-warp magic order;
    interleaved, and k tile after k tile with fixed_sums); weights_a=True (the product transposed,
    the weights mma's A operand, on 8-row tiles: 16 rows in two tiles, 5 rows, with fixed_sums; k tiles of two scale groups, groups=2,
    each group's product scaled by its own scales; also on 16-row tiles).
    Each launched twice on
    one set of counters (back at zero after each launch; split_red does not touch them)."""
    from matmul_a16wx import MatmulA16Wx, from_host_array, host_array, quantized_operands, repack_for_magic, round_to
    dt, at = getattr(tilus, wtype), tilus.float16
    options = dict(options)
    m, n, k = (5, 200, 5 * bk) if split_k != 3 else (16, options.pop("n", 136), 5 * bk)
    group = bk // options.pop("groups", 1)
    rng = np.random.default_rng(11)
    a = round_to(rng.uniform(-1, 1, (m, k)), at)
    packed, scales, zeros, w = quantized_operands(dt, k, n, group, rng, at)
    counters = arrays.put(np.zeros(max(16, 2 * m * n), np.int32))  # (fixed_sums: an int64 per element of c)
    kernel = MatmulA16Wx(dt, group, block_k=bk, split_k=split_k, repacked=True, magic=True, **{"stages": 3, **options})
    weights = repack_for_magic(arrays.put(packed), dt, n, k, 128, bk, warps=options.get("warps", 4),
                               k_major=options.get("k_major", False), weights_a=options.get("weights_a", False))
    for launch in range(2):
        c = arrays.put(host_array(np.zeros((m, n)), at))
        kernel(m, n, k, arrays.put(host_array(a, at)), weights, arrays.put(host_array(scales, at)),
               arrays.put(host_array(zeros, at)), c, arrays.put(np.zeros((split_k, m, n), np.float32)), counters)
        np.testing.assert_allclose(from_host_array(arrays.host(c), at), a @ w, atol=2e-2, rtol=1e-2,
                                   err_msg=f"launch {launch}")
        np.testing.assert_array_equal(arrays.host(counters), 0)


@pytest.mark.parametrize("wtype,m,n,k,blocks,bk,warps", [
    ("int4", 1, 520, 640, 7, 128, 4), ("uint4", 5, 200, 1280, 3, 64, 4), ("int4", 20, 136, 384, 5, 64, 4),
    ("uint4", 16, 384, 896, 13, 128, 4), ("int4", 3, 136, 128, 6, 64, 4), ("uint4", 5, 520, 640, 7, 128, 8)])
def test_stream_k_deals_k_tiles_across_output_tiles(arrays, wtype, m, n, k, blocks, bk, warps):
    """MatmulA16WxStream (the magic decode, the k tiles of every output tile dealt out evenly to
    `blocks` blocks, a block's run crossing output tiles) against the float64 reference on ragged
    m, n: runs within one tile and across two or more (520 x 640 in 7 blocks: 5 tiles of 5 k tiles,
    25 in runs of 3 or 4), tiles of one block (written straight into c) and of several (partial
    sums, the last to arrive adding them up), two row tiles (m = 20), more blocks than k tiles
    (some with empty runs: 136 x 128 in 6 blocks, 4 k tiles), 8-warp blocks; launched twice on one
    set of counters, back at zero after each launch."""
    from matmul_a16wx import MatmulA16WxStream, from_host_array, host_array, quantized_operands, repack_for_magic, round_to
    dt, at = getattr(tilus, wtype), tilus.float16
    rng = np.random.default_rng(5)
    a = round_to(rng.uniform(-1, 1, (m, k)), at)
    packed, scales, zeros, w = quantized_operands(dt, k, n, bk, rng, at)
    counters = arrays.put(np.zeros(16, np.int32))
    kernel = MatmulA16WxStream(dt, bk, blocks=blocks, block_k=bk, stages=3, repacked=True, magic=True, late_scale=True,
                               warps=warps)
    weights = repack_for_magic(arrays.put(packed), dt, n, k, 128, bk, warps=warps)
    for launch in range(2):
        c = arrays.put(host_array(np.zeros((m, n)), at))
        partial = arrays.put(np.full((2 * blocks, min(m, 16), 128), np.nan, np.float32))  # (no slot read unwritten)
        kernel(m, n, k, arrays.put(host_array(a, at)), weights, arrays.put(host_array(scales, at)),
               arrays.put(host_array(zeros, at)), c, partial, counters)
        np.testing.assert_allclose(from_host_array(arrays.host(c), at), a @ w, atol=2e-2, rtol=1e-2,
                                   err_msg=f"launch {launch}")
        np.testing.assert_array_equal(arrays.host(counters), 0)


def test_partials_only_stores_the_splits_sums_and_ends(arrays):
    """MatmulA16Wx(partials_only=True), the measuring aid that times a split kernel without its
    ending: each split's float32 partial sums are stored (their sum is the product, against
    float64), c and the arrival counters are left as they were; only a counter ending's split takes it."""
    from matmul_a16wx import MatmulA16Wx, host_array, quantized_operands, repack_for_magic, round_to
    dt, at, bk, split = tilus.int4, tilus.float16, 64, 3
    m, n, k = 5, 200, 5 * bk
    rng = np.random.default_rng(8)
    a = round_to(rng.uniform(-1, 1, (m, k)), at)
    packed, scales, zeros, w = quantized_operands(dt, k, n, bk, rng, at)
    kernel = MatmulA16Wx(dt, bk, block_k=bk, split_k=split, stages=3, repacked=True, magic=True, late_scale=True,
                         partials_only=True)
    c = arrays.put(host_array(np.full((m, n), 7.0), at))
    partial, counters = arrays.put(np.zeros((split, m, n), np.float32)), arrays.put(np.full(16, 3, np.int32))
    kernel(m, n, k, arrays.put(host_array(a, at)), repack_for_magic(arrays.put(packed), dt, n, k, 128, bk),
           arrays.put(host_array(scales, at)), arrays.put(host_array(zeros, at)), c, partial, counters)
    np.testing.assert_allclose(arrays.host(partial).sum(axis=0), a @ w, atol=2e-2, rtol=1e-2)
    assert (np.abs(arrays.host(partial)).reshape(split, -1).max(axis=1) > 0).all()  # every split stored its part
    np.testing.assert_array_equal(arrays.host(c), host_array(np.full((m, n), 7.0), at))
    np.testing.assert_array_equal(arrays.host(counters), 3)
    for bad in (dict(split_k=1), dict(split_k=2, split_red=True, bounded=True)):
        with pytest.raises(AssertionError, match="partials_only"):
            MatmulA16Wx(dt, bk, block_k=bk, repacked=True, magic=True, late_scale=True, partials_only=True, **bad)


def test_split_red_wants_2_to_8_splits_of_16_rows_to_f16():
    """split_red=True puts a tile's splits in one cluster: 2 to 8 of them (the portable most), of
    16-row tiles, adding into f16 c (red .f16x2)."""
    from matmul_a16wx import MatmulA16Wx
    for split, rows, at in ((1, 16, tilus.float16), (9, 16, tilus.float16), (4, 64, tilus.float16), (4, 16, tilus.bfloat16)):
        with pytest.raises(AssertionError, match="2 to 8 splits"):
            MatmulA16Wx(tilus.int4, 128, block_m=rows, block_k=128, split_k=split, repacked=rows == 16, atype=at,
                        split_red=True)
    MatmulA16Wx(tilus.int4, 128, block_k=128, split_k=8, repacked=True, split_red=True)


def test_magic_layout_is_the_quarters_fragments():
    """magic_layout's slot 8 j + 4 e + r (word j, nibble 4 e + r) is the slot 2 j + e of the
    mma.sync fragment of a [bn, bk / 4] tile, in the k quarter r: so masking nibbles r and r + 4
    of each word gives that quarter's f16 pairs in fragment order."""
    from matmul_a16wx import fragment_layout, magic_layout
    for bn, bk, warps in [(128, 128, 4), (128, 64, 4), (256, 128, 8)]:
        magic, quarter = magic_layout(bn, bk, warps), fragment_layout(bn, bk // 4, warps)
        assert magic.local_size == 4 * quarter.local_size and magic.num_threads == 32 * warps
        for t in (0, 5, 37, 32 * warps - 1):
            for slot in range(magic.local_size):
                word, nibble = divmod(slot, 8)
                e, r = divmod(nibble, 4)
                row, col = quarter.map(t, 2 * word + e)
                assert magic.map(t, slot) == [row, r * (bk // 4) + col], (bn, bk, t, slot)


def loop_ops(sass, unrolled=False):
    """The opcodes of the k loop in cuobjdump's SASS: the shortest backward branch's body that
    holds a tensor-core instruction (HMMA), else the longest backward branch's body (an
    out-of-line mbarrier retry may branch back over more than the loop); unrolled: the body with
    the most HMMA (not the remainder loop's)."""
    code = [(int(a, 16), op) for a, op in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9]*)[^;]*;", sass)]
    branches = [(int(t, 16), int(a, 16)) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?P\w+\s+)?BRA (0x[0-9a-f]+)", sass)]
    loops = [(t, a) for t, a in branches if t < a]
    mma = {b: sum(1 for a, op in code if b[0] <= a <= b[1] and op == "HMMA") for b in loops}
    with_mma = [b for b in loops if mma[b]]
    if unrolled and with_mma:
        lo, hi = max(with_mma, key=lambda b: (mma[b], -(b[1] - b[0])))
    else:
        lo, hi = min(with_mma, key=lambda b: b[1] - b[0]) if with_mma else max(loops, key=lambda b: b[1] - b[0])
    return [op for a, op in code if lo <= a <= hi]


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
@pytest.mark.parametrize("wtype", ["int4", "uint4"])
def test_magic_decode_takes_fewer_instructions_per_k_tile(wtype):
    """The small-m kernel's k loop in SASS (sm_90a, 16 x 128 x 128 tiles, split 4): the magic
    decode has no byte permute per pair (one LOP3 per f16 pair: the XOR constant in a register) and no
    more than 90 % of the general conversion's instructions, late_scale no more than 80 % (16
    FFMA for 64 HMUL2), and with tma no cp.async and no more than late_scale (the boxes' issue
    included, one thread's); one barrier a k tile; no synchronous global load (the scales come
    by cp.async with the weights); nothing spilled; the unrolled loop of the tuner's candidates
    in the registers of 4 blocks an SM."""
    from tilus.artifacts import _cuobjdump
    from matmul_a16wx import MatmulA16Wx
    if _cuobjdump() is None:
        pytest.skip("no cuobjdump: the SASS cannot be read")
    dt = getattr(tilus, wtype)
    m, n, k = 16, 8192, 8192
    args = (m, n, k, np.zeros((m, k), np.float16), np.zeros((n * k // 32, 16), np.uint8), np.zeros((64, n), np.float16),
            np.zeros((64, n), np.float16), np.zeros((m, n), np.float16), np.zeros((4, m, n), np.float32),
            np.zeros(64, np.int32))
    loops = {}
    for name, kw in [("plain", {}), ("magic", dict(magic=True)), ("late", dict(magic=True, late_scale=True)),
                     ("tma", dict(magic=True, late_scale=True, tma=True))]:
        kernel = MatmulA16Wx(dt, 128, block_k=128, split_k=4, repacked=True, **kw)
        assert kernel.compiled(*args, arch="sm_90a").spill_store_bytes == 0, name
        loops[name] = loop_ops(kernel.sass(*args, arch="sm_90a"))
    for name in ("magic", "late"):
        assert loops[name].count("PRMT") <= 4, name  # (the general conversion: one per pair, 64; here a scale pair's)
        # 16 words of 4 pairs, one LOP3 each, and a few of the copies' address and predicate work
        assert loops[name].count("LOP3") <= 16 * 4 + 12, (name, loops[name].count("LOP3"))
        assert loops[name].count("BAR") == 1, name
    for name, ops in loops.items():  # the scales (and zero points) by cp.async too: no load waits on memory
        assert ops.count("LDG") == 0, (name, ops.count("LDG"))
    assert len(loops["magic"]) <= 0.9 * len(loops["plain"]), {x: len(v) for x, v in loops.items()}
    assert len(loops["late"]) <= 0.8 * len(loops["plain"]), {x: len(v) for x, v in loops.items()}
    assert loops["late"].count("HMUL2") == 0 and loops["late"].count("FFMA") == 16
    # tma: one thread's boxes (a, weights, scales, zero points) in place of every thread's cp.async,
    # one barrier a tile, the same decode and product.
    tma = loops["tma"]
    assert tma.count("LDGSTS") == 0 and tma.count("UTMALDG") == (3 if dt.is_signed() else 4), tma.count("UTMALDG")
    assert tma.count("BAR") == 1 and tma.count("HMMA") == loops["late"].count("HMMA") and tma.count("FFMA") == 16
    assert len(tma) <= len(loops["late"]), {x: len(v) for x, v in loops.items()}
    # unroll=True, min_blocks=4 (the tuner's candidates at the 3- and 4-block splits): the k loop
    # unrolled by the 4 stages in at most 128 registers (4 blocks an SM), fewer instructions a k
    # tile than rolled, the same HMMA and decode per tile, nothing spilled inside the loop (ptxas
    # keeps a few values of the epilogue in local memory around it).
    for split in (2, 6, 16):
        kernel = MatmulA16Wx(dt, 128, block_k=128, split_k=split, repacked=True, magic=True, late_scale=True,
                             unroll=True, min_blocks=4)
        args16 = args[:8] + (np.zeros((16, m, n), np.float32), args[9])
        assert kernel.compiled(*args16, arch="sm_90a").registers <= 128, split
        ops = loop_ops(kernel.sass(*args16, arch="sm_90a"), unrolled=True)
        tiles = ops.count("HMMA") // 32
        assert tiles == 4 and ops.count("STL") + ops.count("LDL") == 0, (split, tiles)
        assert len(ops) <= tiles * len(loops["late"]) and ops.count("LOP3") <= tiles * (16 * 4 + 12), (split, len(ops))


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
def test_split_endings_in_sass():
    """SASS (sm_90a, int4, 16 x 128 x 128 tiles, magic decode with late_scale, split 4): bounded=True,
    interleave=True and interleaved on the weights k tile after k tile (k_major) keep the k loop's
    one barrier, its copies and its products, at most 4 instructions more a k tile (the choice of
    the tile to copy; k_major 6); split_red=True (as offered: its k
    loop unrolled in the registers of 4 blocks an SM, whose k tiles take no more instructions than
    the rolled loop's) ends without the arrival counter's atomic, on the cluster's barrier, adding
    into c by f16-pair REDG (n a multiple of 16), with no compare-and-swap loop and no load of
    partial sums, where the counter's ending has the atomic and no cluster barrier; nothing
    spilled."""
    from tilus.artifacts import _cuobjdump
    from matmul_a16wx import MatmulA16Wx
    if _cuobjdump() is None:
        pytest.skip("no cuobjdump: the SASS cannot be read")
    m, n, k = 1, 8192, 8192
    args = (m, n, k, np.zeros((m, k), np.float16), np.zeros((n * k // 32, 16), np.uint8), np.zeros((64, n), np.float16),
            np.zeros((64, n), np.float16), np.zeros((m, n), np.float16), np.zeros((4, m, n), np.float32),
            np.zeros(64, np.int32))
    sass, loops = {}, {}
    for name, kw in [("plain", {}), ("bounded", dict(bounded=True)), ("interleave", dict(interleave=True)),
                     ("k_major", dict(interleave=True, k_major=True)), ("red", dict(bounded=True, split_red=True, **UNROLL))]:
        kernel = MatmulA16Wx(tilus.int4, 128, block_k=128, split_k=4, repacked=True, magic=True, late_scale=True, **kw)
        assert kernel.compiled(*args, arch="sm_90a").spill_store_bytes == 0, name
        sass[name] = kernel.sass(*args, arch="sm_90a")
        loops[name] = loop_ops(sass[name], unrolled=name == "red")
    unrolled = loops.pop("red")
    assert unrolled.count("HMMA") == 4 * loops["plain"].count("HMMA") and len(unrolled) <= 4 * len(loops["bounded"])
    for name in ("bounded", "interleave", "k_major"):
        assert loops[name].count("BAR") == 1 and loops[name].count("LDGSTS") == loops["plain"].count("LDGSTS"), name
        assert loops[name].count("HMMA") == loops["plain"].count("HMMA"), name
        assert len(loops[name]) <= len(loops["plain"]) + (6 if name == "k_major" else 4), (name, len(loops[name]), len(loops["plain"]))
    assert "ATOMG" in sass["bounded"] and "UCGABAR" not in sass["bounded"]
    red = sass["red"]
    assert "ATOMG" not in red and "CAS" not in red and "UCGABAR_WAIT" in red and "REDG.E.ADD.F16x2" in red
    assert not re.search(r"\bLDG\.", red)  # (no partial sums read back)


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
def test_stream_k_loop_in_sass():
    """SASS (sm_90a, int4, 16 x 128 x 128 tiles, magic decode with late_scale, m = 1): the
    stream-K kernel's k loop has the split kernel's one barrier, copies and products, at most 16
    instructions more a k tile than bounded=True's (the run's tile and its past-the-end choice),
    in the registers of 4 blocks an SM (its candidates go up to 4), nothing spilled."""
    from tilus.artifacts import _cuobjdump
    from matmul_a16wx import MatmulA16Wx, MatmulA16WxStream
    if _cuobjdump() is None:
        pytest.skip("no cuobjdump: the SASS cannot be read")
    m, n, k = 1, 8192, 8192
    args = (m, n, k, np.zeros((m, k), np.float16), np.zeros((n * k // 32, 16), np.uint8), np.zeros((64, n), np.float16),
            np.zeros((64, n), np.float16), np.zeros((m, n), np.float16), np.zeros((2 * 528, m, 128), np.float32),
            np.zeros(64, np.int32))
    decode = dict(block_k=128, repacked=True, magic=True, late_scale=True)
    split = MatmulA16Wx(tilus.int4, 128, split_k=4, bounded=True, **decode)
    stream = MatmulA16WxStream(tilus.int4, 128, blocks=528, stages=4, **decode)
    compiled = stream.compiled(*args, arch="sm_90a")
    assert compiled.spill_store_bytes == 0 and compiled.registers <= 128, compiled.registers
    ours, theirs = loop_ops(stream.sass(*args, arch="sm_90a")), loop_ops(split.sass(*args, arch="sm_90a"))
    assert ours.count("BAR") == 1 and ours.count("LDGSTS") == theirs.count("LDGSTS")
    assert ours.count("HMMA") == theirs.count("HMMA") == 32
    assert len(ours) <= len(theirs) + 16, (len(ours), len(theirs))


HOPPER_CASES = [("int4", "float16", 300, 200, 1024, 256, 128), ("uint4", "bfloat16", 130, 392, 512, 256, 64),
                ("int8", "float16", 257, 136, 768, 128, 128), ("float8_e4m3", "float16", 64, 128, 256, 128, 64),
                ("float4_e2m1", "bfloat16", 513, 264, 640, 256, 128), ("int4", "float16", 129, 200, 1024, 128, 64),
                # clusters of two sharing a's tile: 5 weight tiles (the last pair's second out of range), and bf16
                ("int4", "float16", 300, 520, 1024, 256, 128, 2), ("uint4", "bfloat16", 130, 392, 512, 256, 128, 2),
                # split-K: 20 k tiles in splits of 8, 8 and 4; 8 in splits of 2 (the fifth split empty);
                # 128 x 256 tiles in two splits of 4 pairs
                ("int4", "float16", 100, 392, 1280, 128, 64, 1, 3), ("uint4", "bfloat16", 130, 200, 512, 64, 128, 1, 5),
                ("int8", "float16", 300, 264, 1024, 256, 128, 1, 2),
                # the magic decode: 64 and 128 weight rows, signed and zero points, split
                ("int4", "float16", 100, 136, 384, 64, 64, 1, 1, True), ("uint4", "float16", 130, 200, 512, 128, 128, 1, 3, True),
                # 192 rows of a (wgmma n = 192), the last tile of a a third full
                ("uint4", "float16", 448, 264, 512, 192, 128),
                # split-K in clusters of two (the last pair's second tile out of range); the last
                # round's tiles split (8 tiles on 5 blocks: 3 tiles split 3 ways after 5 whole),
                # alone and in clusters on the magic decode (4 pairs on 3 pairs of blocks)
                ("uint4", "float16", 300, 520, 1024, 256, 128, 2, 3), ("int4", "float16", 300, 392, 1024, 256, 128, 1, 1, False, 3),
                ("uint4", "float16", 300, 904, 1024, 256, 128, 2, 1, True, 2),
                # 240 rows of a (wgmma n = 240; the tuner's tile where it fills the rounds better than 256)
                ("int4", "float16", 500, 264, 512, 240, 128),
                # 128 x 128 in clusters of two on the magic decode (ragged m)
                ("int4", "float16", 250, 520, 512, 128, 128, 2, 1, True),
                # clusters of two walking the tiles in L2 groups of 2 rows of a (5 rows: the last group
                # of one), on the magic decode (the tuner's candidate beyond m = 256 in groups of 4)
                ("int4", "float16", 600, 520, 512, 128, 128, 2, 1, True, 1, 2),
                # 64 weight rows in clusters of two on the magic decode (7 tiles: the last pair's second out of range)
                ("int4", "float16", 200, 392, 512, 256, 64, 2, 1, True),
                # the first split adding once the others have stored (wait_sums): split 3 (20 k tiles:
                # 8, 8, 4), the last round's tiles split (GPU only: its blocks
                # wait for blocks that the CPU backend, a few at a time in order, may not have started)
                ("int4", "float16", 100, 392, 1280, 128, 64, 1, 3, False, 1, 8, True),
                ("int4", "float16", 300, 392, 1024, 256, 128, 1, 1, False, 3, 8, True),
                # every split adding a slice of the tile (spread_sums; GPU only, as wait_sums): split 2,
                # split 4 on the magic decode (one pair of k tiles each), in clusters, the last round's tiles
                ("int4", "float16", 300, 392, 1024, 256, 128, 1, 2, False, 1, 8, False, True),
                ("uint4", "float16", 130, 200, 512, 128, 128, 1, 4, True, 1, 8, False, True),
                ("uint4", "float16", 300, 520, 1024, 256, 128, 2, 2, False, 1, 8, False, True),
                ("int4", "float16", 300, 392, 1024, 256, 128, 1, 1, False, 2, 8, False, True),
                # the first split 2 pairs of k tiles beyond its share (lead; 10 pairs: 4 + 2, then 2 and
                # 2 for the other two), alone (on the CPU too) and with wait_sums
                ("uint4", "float16", 130, 392, 1280, 128, 128, 1, 3, True, 1, 8, False, False, 2),
                ("uint4", "float16", 130, 392, 1280, 128, 128, 1, 3, True, 1, 8, True, False, 2)]


def hopper_case(wtype, atype, m, n, k, block_m, block_n, cluster=1, split_k=1, magic=False, tail_split=1, tile_group=8,
                wait_sums=False, spread_sums=False, lead=0, *, seed, arrays=None, blocks=None):
    """MatmulA16WxHopper for a case (block_n 64: one consumer warp group reading half tiles of
    the repacked weights; cluster 2: blocks in pairs multicasting a; split_k: the k range of each
    output tile split that many ways; magic: the magic decode on its weight order; tail_split: the
    last round's tiles split; tile_group: rows of a per L2 group of the tile walk; wait_sums: a
    tile's first split adds; lead: its pairs of k tiles beyond an even share; spread_sums:
    each split adds a slice; blocks: the persistent grid, 5 or 6 by default), its arguments (on `arrays`' device; host arrays and unset weights
    without it) and the reference c."""
    from matmul_a16wx import MatmulA16WxHopper, host_array, quantized_operands, repack_for_hopper, round_to
    dt, at = getattr(tilus, wtype), getattr(tilus, atype)
    bk = 64 if dt.bits <= 4 else 32
    rng = np.random.default_rng(seed)
    a = round_to(rng.uniform(-1, 1, (m, k)), at)
    packed, scales, zeros, w = quantized_operands(dt, k, n, 128, rng, at)
    if arrays is None:
        weights = np.zeros((-(-n // 128) * -(-k // bk) * 128 * bk * dt.bits // 128, 16), np.uint8)
    else:
        weights = repack_for_hopper(arrays.put(packed), dt, n, k, bk, magic=magic)
    # 5 blocks (6 in clusters of 2): each walks several output tiles, so the ring's phases carry across tiles.
    kernel = MatmulA16WxHopper(dt, 128, block_m=block_m, block_n=block_n, consumers=block_n // 64, block_k=bk,
                               stages=6 if block_m == 128 else 4, blocks=blocks or (5 if cluster == 1 else 6), atype=at,
                               cluster=cluster, split_k=split_k, magic=magic, tail_split=tail_split,
                               tile_group=tile_group, wait_sums=wait_sums,
                               spread_sums=spread_sums, lead=lead)
    tiles = -(-m // block_m) * -(-(-(-n // block_n)) // cluster) * cluster  # (clusters: whole pairs)
    args = [host_array(a, at), weights, host_array(scales, at), host_array(zeros, at), host_array(np.zeros((m, n)), at),
            np.full(max(kernel.partial_elements(m, n), 1), np.nan, np.float32),
            np.zeros(tiles * (2 if spread_sums else 1), np.int32)]
    if arrays is not None:
        args = [x if i == 1 else arrays.put(x) for i, x in enumerate(args)]
    return kernel, args, a @ w


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
def hopper_id(c):
    return (f"{c[0]}-{c[1]}-{c[2]}x{c[3]}x{c[4]}-n{c[6]}" + ("-cluster" if c[7:8] == (2,) else "") +
            (f"-split{c[8]}" if c[8:9] > (1,) else "") + ("-magic" if c[9:10] == (True,) else "") +
            (f"-tail{c[10]}" if c[10:11] > (1,) else "") + (f"-group{c[11]}" if c[11:12] not in ((), (8,)) else "") +
            ("-wait" if c[12:13] == (True,) else "") + ("-spread" if c[13:14] == (True,) else "") +
            (f"-lead{c[14]}" if c[14:] else ""))


@pytest.mark.parametrize("case", HOPPER_CASES[:2] + HOPPER_CASES[6:7] + HOPPER_CASES[12:13] + HOPPER_CASES[14:17] +
                         HOPPER_CASES[25:26],
                         ids=hopper_id)
def test_hopper_quantized_matmul_compiles_to_register_a_wgmma_without_spills(case):
    """The wgmma kernel of the example (compile-only, sm_90a): its wgmma take the dequantized
    weights from registers, and the consumers' accumulator and two weight tiles fit in the
    registers the producer's warp group gives away; in clusters of two, a's tile comes by one
    multicast TMA load per block, half the rows each; the magic decode (split over k) builds its
    operand in registers, with no layout conversion through shared memory; split over k, the
    partial sums leave as the threads hold them, in 16-byte vectors."""
    kernel, args, _ = hopper_case(*case, seed=0)
    m, n, k = case[2:5]
    ir = kernel.ir(m, n, k, *args, arch="sm_90a")
    assert "a=regs" in ir["select_instructions"]
    assert "_convert = shared_tensor" not in list(ir.values())[-1]
    compiled = kernel.compiled(m, n, k, *args, arch="sm_90a")
    # (The split ending, the accumulator and another split's partial sums in registers at once,
    # may keep a few loop-invariant words in local memory: none of them inside the k loop.)
    assert compiled.spill_store_bytes <= (16 if case[8:9] > (1,) or case[10:] else 0), \
        f"{compiled.spill_store_bytes} bytes spilled"
    ptx = kernel.ptx(m, n, k, *args, arch="sm_90a")
    assert "wgmma.mma_async.sync.aligned.m64n" in ptx
    assert (".multicast::cluster" in ptx) == (case[7:8] == (2,))
    from tilus.artifacts import _cuobjdump
    if _cuobjdump() is None:
        pytest.skip("no cuobjdump: the SASS cannot be read (the IR, PTX and spill checks above ran)")
    sass = kernel.sass(m, n, k, *args, arch="sm_90a").splitlines()
    products = [i for i, line in enumerate(sass) if "HGMMA" in line]
    assert not [line for line in sass[products[0]:products[-1]] if "LDL" in line or "STL" in line]
    if case[8:9] > (1,) or case[10:]:  # split: the partial sums leave in 16-byte vectors (one STG: the counter's
        # reset; spread_sums two)
        resets = 2 if case[13:] == (True,) else 1
        assert len([line for line in sass if "STG.E " in line]) <= resets and any("STG.E.128" in line for line in sass)


@pytest.mark.skipif(not HAS_GPU, reason="no GPU (test_hopper_quantized_matmul_on_the_cpu runs some of these cases on the CPU backend)")
@pytest.mark.parametrize("case", HOPPER_CASES, ids=hopper_id)
def test_hopper_quantized_matmul_on_the_gpu(case):
    """MatmulA16WxHopper (wgmma, weights dequantized in registers) against dequantize-then-matmul
    on ragged m and n (n padded to whole 128-row weight tiles by the repacking), signed and
    unsigned codes (zero points), 4- and 8-bit ints and floats, f16 and bf16 activations, 128 and
    256 rows of a (and 192 and 240) and 64 (one consumer warp group, half tiles of the weights) and 128 weight rows
    per tile, alone and in clusters of two that multicast a (an odd number of weight tiles: the
    last pair's second tile loads zeros and stores nothing), and split over k (uneven and empty
    splits, alone and in clusters, every tile or the last round's only; the partial sums start
    as NaN, the counters end at zero, so a second launch computes the same)."""
    from conftest import Arrays
    from matmul_a16wx import from_host_array
    arrays = Arrays("cuda")
    kernel, dev, want = hopper_case(*case, seed=3, arrays=arrays)
    m, n, k, at = case[2], case[3], case[4], getattr(tilus, case[1])
    for launch in range(2 if case[8:9] > (1,) or case[10:] else 1):
        dev[4].zero_()
        kernel(m, n, k, *dev)
        np.testing.assert_allclose(from_host_array(arrays.host(dev[4]), at), want, atol=2e-2, rtol=1e-2,
                                   err_msg=f"launch {launch}")
        assert not arrays.host(dev[6]).any(), "the split-K counters are left at zero"


@pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
@pytest.mark.parametrize("case", [HOPPER_CASES[5]] + HOPPER_CASES[8:10] + HOPPER_CASES[11:18] + HOPPER_CASES[19:21] +
                         HOPPER_CASES[27:28],
                         ids=hopper_id)
def test_hopper_quantized_matmul_on_the_cpu(case):
    """The wgmma kernel on the CPU backend (its warp roles, mbarrier ring, TMA boxes and wgmma as
    the GPU runs them, checked), against dequantize-then-matmul: one output tile per unit, split
    over k (uneven splits, an empty one; partial sums start as NaN; the counters back at zero;
    in clusters of two, also walking the tiles in L2 groups of 2; only the last round's tiles), and the magic decode (whose register operand was once built from words in the wrong slot
    order: relative errors of 12-20 on the H200, and here)."""
    from conftest import Arrays
    from matmul_a16wx import from_host_array
    arrays = Arrays("cpu")
    kernel, args, want = hopper_case(*case, seed=3, arrays=arrays)
    m, n, k, at = case[2], case[3], case[4], getattr(tilus, case[1])
    kernel(m, n, k, *args)
    np.testing.assert_allclose(from_host_array(args[4], at), want, atol=2e-2, rtol=1e-2)
    assert not args[6].any(), "the split-K counters are left at zero"


@pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
@pytest.mark.parametrize("case", [HOPPER_CASES[23], HOPPER_CASES[24][:8] + (2,) + HOPPER_CASES[24][9:]], ids=hopper_id)
def test_hopper_spread_sums_on_the_cpu(case):
    """spread_sums on the CPU backend, in a grid of 2 blocks (the splits of a tile wait for each
    other: the backend runs two blocks at once at least): each split adds up and stores its slice
    of the tile's rows of a; the counts end at zero, so a second launch computes the same."""
    from conftest import Arrays
    from matmul_a16wx import from_host_array
    arrays = Arrays("cpu")
    kernel, args, want = hopper_case(*case, seed=3, arrays=arrays, blocks=2)
    m, n, k, at = case[2], case[3], case[4], getattr(tilus, case[1])
    for launch in range(2):
        args[4][...] = 0
        kernel(m, n, k, *args)
        np.testing.assert_allclose(from_host_array(args[4], at), want, atol=2e-2, rtol=1e-2, err_msg=f"launch {launch}")
        assert not args[6].any(), "the counts are left at zero"


def test_quantized_matmul_picks_its_kernel_by_size():
    """QuantizedMatmul's choice where the wgmma kernel's weights exist: the split-K mma.sync kernel
    up to m = 32, the wgmma one from m = 33 with 64 weight rows per tile up to m = 256 and 128
    beyond; the mma.sync one where TMA cannot read the scales' rows (n * 2 bytes not a multiple of
    16) or k is not a whole number of scale groups."""
    from matmul_a16wx import QuantizedMatmul
    q = QuantizedMatmul(tilus.int4, 128)
    assert "hopper" not in q.config(32, 8192, 8192, hopper=True)
    assert q.config(33, 8192, 8192, hopper=True) == dict(hopper=True, block_n=64, consumers=1, block_m=64,
                                                          block_k=64, stages=8)
    assert q.config(256, 8192, 8192, hopper=True)["block_m"] == 256
    assert q.config(257, 8192, 8192, hopper=True)["block_n"] == 128
    assert "hopper" not in q.config(300, 196, 1024, hopper=True)  # 392-byte scale rows
    assert "hopper" not in q.config(300, 200, 1000, hopper=True)  # k not whole groups
    assert "hopper" not in q.config(4096, 8192, 8192)  # no wgmma weights prepared
    assert QuantizedMatmul(tilus.int8, 128).config(300, 200, 1024, hopper=True)["block_k"] == 32


@pytest.mark.parametrize("n,k", [(8192, 8192), (28672, 8192), (8192, 28672), (3584, 18944), (200, 1000)])
def test_quantized_matmul_short_list_per_m(n, k):
    """tune=True's default candidates (the short list a sweep of shapes and m can afford): the
    rule's choice first, no repeats, each a kernel that can be made;
    up to m = 32 the 16-row kernel at the rule's split s, at 2 s and at the splits that fill one
    wave of 2 and 3 blocks per SM (within 1 to 16 and two k tiles per split), on the magic
    decode with late_scale where its weights exist, in 4 stages, the k loop rolled;
    every split also interleaved (where split), and on the magic decode each also on the weights k
    tile after k tile (k_major); up to m = 4 the splits that fill a wave of 2 or 3 blocks an SM,
    interleaved (k_major on the magic decode), also with fixed_sums; on the magic decode also
    stream-K in 3 blocks an SM (where that leaves
    two k tiles a block); with f16_split_sums=True (an opt-in), where TMA
    applies (sm_90) with 2 to 8 splits, also adding into c by red (unrolled in the registers of 4
    blocks an SM), and nothing else changed; on the magic decode from m = 9 also 8-warp blocks
    (the splits filling a wave of 2 and 3 blocks an SM, interleaved, both weight orders, also
    unrolled in 3 blocks' registers; stream-K), reading the magic8 orders; up to m = 8 the product transposed
    (weights_a, 8-row tiles of 8 warps: the splits filling 3 and 4 blocks an SM, interleaved, both
    orders, up to m = 4 also by fixed_sums; split 1 not interleaved), reading the magica8 orders;
    the same on 4-warp blocks at the split filling 3 blocks an SM, k tile after k tile (magica_k); up to m = 16 also on k tiles of two scale groups (the splits filling 2 and 3 blocks an SM, k tile
    after k tile, interleaved, up to m = 4 also by fixed_sums; magica8k256_k);
    the TMA copies in the wide space only; at most 33 up to m = 32, 8 beyond; from m = 33
    wgmma tiles where its weights exist and TMA reads the scales, fewer than 2 m rows of a per
    tile (and m / 2 at least on 64 weight rows up to m = 256), the splits and the magic decode
    where they are offered (below); the mma.sync kernel only where the wgmma kernel cannot run."""
    from matmul_a16wx import MatmulA16Wx, MatmulA16WxHopper, MatmulA16WxStream, QuantizedMatmul
    for wtype in (tilus.int4, tilus.uint4):
        q = QuantizedMatmul(wtype, 128, sms=132)
        for m in (1, 4, 16, 64, 256, 1024, 4096):
            for magic, tma in ((False, False), (True, False), (True, True)):
                got = q.candidates(m, n, k, hopper=True, magic=magic, tma=tma)
                assert got[0] == q.config(m, n, k, hopper=True), (m, got)
                assert all(c not in got[:i] for i, c in enumerate(got)) and len(got) <= (33 if m <= 32 else 8), (m, got)
                for c in got:
                    params = {name: v for name, v in c.items() if name != "hopper"}
                    (MatmulA16WxHopper if c.get("hopper") else MatmulA16WxStream if c.get("blocks") else
                     MatmulA16Wx)(wtype, 128, **params)
                hopper = [c for c in got if c.get("hopper")]
                long = [c for c in got if c.get("block_k") == 256]  # k tiles of two scale groups: m <= 16
                trans4 = [c for c in got if c.get("weights_a") and c.get("warps", 4) == 4]  # 4 warps: m <= 8
                trans = [c for c in got if c.get("weights_a") and c not in long + trans4]  # the product transposed: m <= 8
                wide = [c for c in got if c.get("warps") == 8 and c not in trans + long]  # 8-warp blocks: m <= 32
                got4 = [c for c in got if c not in wide + trans + long + trans4]
                streams = [c for c in got4 if c.get("blocks")]
                mma = [c for c in got4 if not c.get("hopper") and not c.get("blocks")]
                if m <= 32:
                    s, tiles = q.mma_config(m, n, k, 16)["split_k"], -(-m // 16) * -(-n // 128)
                    splits = {x for x in (s, 2 * s, 264 // tiles, 396 // tiles) if 1 <= x <= 16 and k // (128 * x) >= 2}
                    assert not hopper and {c["split_k"] for c in mma} == splits, (m, got)
                    assert all(c.get("magic") and c["late_scale"] for c in mma[1:]) == magic, (m, got)
                    assert not any(c.get("unroll") or c.get("split_red") for c in mma), (m, got)
                    # every split also interleaved (where split), each also k_major on the magic decode, 4 stages
                    rolled = [c for c in mma[1:] if c["stages"] == 4 and not c.get("fixed_sums")]
                    template = dict(q.mma_config(m, n, k, 16), **(dict(magic=True, late_scale=True) if magic else {}))
                    # up to m = 4 the wave-filling splits, interleaved (k_major on the magic decode), also
                    # ending by fixed_sums
                    fixed = [c for c in mma if c.get("fixed_sums")]
                    assert fixed == [dict(template, split_k=x, interleave=True, fixed_sums=True,
                                          **(dict(k_major=True) if magic else {}))
                                     for x in sorted(splits, key=[s, 2 * s, 264 // tiles, 396 // tiles].index)
                                     if m <= 4 and x > 1 and x in (264 // tiles, 396 // tiles)], (m, got)
                    want = []
                    for x in splits:
                        for order in ({}, dict(k_major=True)) if magic else ({},):
                            want.append(dict(template, split_k=x, **order))
                            want += [dict(template, split_k=x, interleave=True, **order)] if x > 1 else []
                    assert sorted(sorted(c.items()) for c in rolled) == \
                        sorted(sorted(c.items()) for c in want if c != got[0]), (m, got)
                    assert all(c["stages"] == 4 for c in mma), (m, got)
                    # stream-K on the magic decode: 3 blocks an SM, two k tiles a block at least
                    assert streams == ([dict(template, split_k=1, blocks=396)]
                                       if magic and tiles * -(-k // 128) >= 2 * 396 else []), (m, got)
                    # 8-warp blocks on the magic decode: the splits filling a wave of 2 and 3 blocks an SM,
                    # interleaved, on both weight orders (up to m = 4 also by fixed_sums), and stream-K
                    waves = [x for x in (264 // tiles, 396 // tiles) if x > 1 and x in splits]
                    want8 = [dict(template, split_k=x, interleave=True, warps=8, **o)
                             for x in waves for o in ({}, dict(k_major=True), dict(unroll=True, min_blocks=3))]
                    want8 += [dict(template, split_k=1, blocks=396, warps=8)] if streams else []
                    assert sorted(sorted(c.items()) for c in wide) == \
                        (sorted(sorted(c.items()) for c in want8) if magic and m > 8 else []), (m, got)
                    assert all(q.layout_of(c) == "magic8" + ("_k" if c.get("k_major") else "") for c in wide)
                    # up to m = 8 the product transposed on 8-row tiles of 8 warps: the splits filling a
                    # wave of 3 and 4 blocks an SM, interleaved, both orders (up to m = 4 also by fixed_sums)
                    want_a = [dict(template, block_m=8, split_k=x, warps=8, weights_a=True, **o,
                                   **(dict(interleave=True) if x > 1 else {}))
                              for x in sorted({min(16, 396 // tiles), min(16, 528 // tiles)})
                              if x >= 1 and k // (128 * x) >= 2
                              for o in ({}, dict(k_major=True), dict(k_major=True, fixed_sums=True))
                              if m <= 4 and x > 1 or not o.get("fixed_sums")]
                    assert sorted(sorted(c.items()) for c in trans) == \
                        (sorted(sorted(c.items()) for c in want_a) if magic and m <= 8 else []), (m, got)
                    assert all(q.layout_of(c) == "magica8" + ("_k" if c.get("k_major") else "") for c in trans)
                    # the same on 4-warp blocks, k tile after k tile (up to m = 4 also by fixed_sums)
                    want_4 = [dict(template, block_m=8, split_k=x, weights_a=True, k_major=True, **o,
                                   **(dict(interleave=True) if x > 1 else {}))
                              for x in [min(16, 396 // tiles)]
                              if x >= 1 and k // (128 * x) >= 2 for o in ({}, dict(fixed_sums=True))
                              if m <= 4 and x > 1 or not o]
                    assert sorted(sorted(c.items()) for c in trans4) == \
                        (sorted(sorted(c.items()) for c in want_4) if magic and m <= 8 else []), (m, got)
                    assert all(q.layout_of(c) == "magica_k" for c in trans4)
                    # up to m = 16 the product transposed on k tiles of two scale groups (3 stages, 8 rows
                    # of a up to m = 8, else 16), k tile after k tile: the splits filling a wave of 2 and 3
                    # blocks an SM, interleaved (up to m = 4 also by fixed_sums)
                    want_l = [dict(template, block_m=8 if m <= 8 else 16, block_k=256, stages=3, split_k=x, warps=8,
                                   weights_a=True, k_major=True, **o, **(dict(interleave=True) if x > 1 else {}))
                              for x in sorted({min(16, 264 // tiles), min(16, 396 // tiles)})
                              if x >= 1 and k // (256 * x) >= 2 for o in ({}, dict(fixed_sums=True))
                              if m <= 4 and x > 1 or not o]
                    assert sorted(sorted(c.items()) for c in long) == \
                        (sorted(sorted(c.items()) for c in want_l) if magic and m <= 16 and k % 256 == 0 else []), \
                        (m, got)
                    assert all(q.layout_of(c) == "magica8k256_k" for c in long)
                    # f16_split_sums=True (an opt-in): on sm_90 each split of 2 to 8 also adding into c
                    # by red, its k loop unrolled in the registers of 4 blocks an SM
                    opt = QuantizedMatmul(wtype, 128, sms=132, f16_split_sums=True).candidates(m, n, k, True, magic, tma)
                    red = [c for c in opt if c.get("split_red")]
                    assert [c for c in opt if not c.get("split_red")] == got, (m, opt)
                    assert sorted(c["split_k"] for c in red) == (sorted(x for x in splits if 2 <= x <= 8) if tma else []), \
                        (m, opt)
                    assert all(c["bounded"] and c["unroll"] and c["min_blocks"] == 4 for c in red), (m, opt)
                    assert not any(c.get("tma") for c in got)
                    continue
                assert bool(hopper) == (k % 128 == 0 and n % 8 == 0), (m, got)
                assert all(c["block_m"] < 2 * m and (c["block_m"] >= m // 2 or c["block_n"] == 128 or m > 256)
                           for c in hopper), (m, got)
                # the mma.sync kernel only where the wgmma kernel cannot run (its 16 rows of a then up
                # to m = 64, on the magic decode where its weights exist)
                small = [c for c in mma if c["block_m"] == 16]
                assert bool(mma) == (not hopper) and len(small) == (not hopper and m <= 64), (m, got)
                assert all(c.get("magic", False) == magic for c in small), (m, got)
                # with the magic decode's weights the rule's tile on it too (up to m = 256 also each
                # split tile), beyond m = 256 also in clusters of two (and each clustered last-round split)
                split_tiles = [dict(c, magic=True) for c in hopper
                               if (c.get("split_k", 1) > 1 or m <= 64 and c["block_n"] == 128) and not c.get("magic")]
                tail_tiles = [dict(c, magic=True) for c in hopper if c.get("tail_split", 1) > 1 and not c.get("magic")]
                want_magic = [] if not (hopper and magic) else [dict(got[0], magic=True)] + split_tiles \
                    if m <= 256 else [dict(got[0], magic=True), dict(got[0], cluster=2, magic=True)] + tail_tiles
                assert sorted(sorted(c.items()) for c in hopper if c.get("magic")) == \
                    sorted(sorted(c.items()) for c in want_magic), (m, got)
                # up to m = 256, 128 weight rows by the rule's rows of a (and by 128 of them) split
                # over k where their tiles fill less than 90 % of the grid's last round, 8 k tiles
                # a split at least, filling the rounds better; no splits beyond m = 256
                rule = q.config(m, n, k, hopper=True)
                split_of = {(c["block_m"], c["block_n"]): c["split_k"] for c in hopper if c.get("split_k", 1) > 1}
                assert all(bn == 128 for _, bn in split_of) and (m <= 256 or not split_of), (m, got)

                def fill(units):
                    return units / (-(-units // 132) * 132)
                for bm in {rule["block_m"], min(rule["block_m"], 128)} if hopper and m <= 256 else ():
                    tiles = -(-n // 128) * -(-m // bm)
                    # (at most 16 MB of partial sums: none at 28672 x 8192, whose splits that fill the
                    # rounds better write more; at n = 3584 and m = 256 the fullest within 16 MB, 85 %,
                    # where 7 and 9 ways would fill 99 and 95 %)
                    split = (bm, 128) in split_of
                    better = [s for s in range(2, 17) if k // 64 // s >= 8 and s * tiles * 128 * bm * 4 <= 16 << 20
                              and fill(tiles * s) > fill(tiles)]
                    assert split == (fill(tiles) < 0.9 and bool(better)), (m, bm, got)
                    assert split or (m, n) != (256, 3584), (m, bm, got)
                    x = split_of.get((bm, 128), 1)
                    assert x == 1 or fill(tiles * x) > fill(tiles) and k // 64 // x >= 8, (m, got)
                    assert x == 1 or x * tiles * 128 * bm * 4 <= 16 << 20, (m, got)
                # up to m = 64, 128 weight rows unsplit where they are not offered split (28672 x 8192),
                # and split 4 ways beside a split beyond 4 (n = 3584: 9 and 4)
                if hopper and m == 64:
                    ways = sorted({c.get("split_k", 1) for c in hopper if c["block_n"] == 128})
                    assert ways == {28672: [1], 3584: [4, 9]}.get(n, [2] if n == 8192 else ways), (m, got)
                # 128 x 256 from m = 129 to 256 unsplit only where it is not offered split
                big = [c.get("split_k", 1) for c in hopper if (c["block_n"], c["block_m"]) == (128, 256) and not c.get("magic")]
                assert not hopper or not 128 < m <= 256 or len(set(big)) == 1, (m, got)
                # 128 x 256 split (m = 256) with the two measured endings instead of the plain one:
                # wait_sums with lead 2, and spread_sums (QuantizedMatmul.split_endings)
                split_big = [c for c in hopper if (c["block_n"], c["block_m"]) == (128, 256) and c.get("split_k", 1) > 1]
                assert all(c.get("wait_sums") or c.get("spread_sums") for c in split_big), (m, got)
                assert len(split_big) == 2 * (1 + (magic and bool(split_big))) * bool(split_big), (m, got)
                assert all(not c.get("wait_sums") and not c.get("spread_sums") for c in hopper if c["block_m"] != 256), \
                    (m, got)
                # up to m = 256 nothing in clusters, no last round's split
                assert not [c for c in hopper if m <= 256 and (c.get("cluster") or c.get("tail_split"))], (m, got)
                # beyond m = 256, only the last round's tiles split where that shortens the whole by
                # 2 % counting the last split's reads, in at most 16 MB of partial sums (among these
                # shapes: m = 4096 at n = 3584 and 28672 x 8192), in clusters (also on the magic decode)
                tails = [c for c in hopper if c.get("tail_split", 1) > 1 and m > 256]
                tiles = -(-n // 128) * -(-m // 256)
                assert len(tails) == (1 + magic) * ((m, n, k) in {(4096, 3584, 18944), (4096, 28672, 8192)}), (m, got)
                assert all(c["cluster"] == 2 and c.get("magic", False) == (i == 1) for i, c in enumerate(tails)), (m, got)
                for c in tails:
                    x, whole, tail = c["tail_split"], tiles // 132, tiles % 132
                    assert whole and -(-tail * x // 132) < x and k // 64 // x >= 8, (m, got)
                    assert tail * x * 128 * 256 * 4 <= 16 << 20, (m, got)
                # no 192 or 240 rows of a (slower than 256 where they fill the rounds better)
                assert not [c for c in hopper if c["block_m"] in (192, 240)], (m, got)


def test_quantized_matmul_extra_candidates():
    """QuantizedMatmul(extra=): wgmma configurations over the 128 x 256 tile's parameters, timed
    after the short list's wherever the wgmma kernel applies (and with wait_sums beside its
    other splits); nowhere else; the list is unchanged otherwise."""
    from matmul_a16wx import MatmulA16WxHopper, QuantizedMatmul
    extra = [dict(block_m=120, stages=8), dict(block_m=64, stages=8, split_k=4, magic=True)]
    q, plain = QuantizedMatmul(tilus.int4, 128, sms=132, extra=extra), QuantizedMatmul(tilus.int4, 128, sms=132)
    big = dict(hopper=True, block_n=128, consumers=2, block_m=256, block_k=64, stages=4)
    for m, n, k in [(64, 28672, 8192), (1024, 3584, 18944), (4096, 8192, 8192)]:
        got, short = q.candidates(m, n, k, hopper=True, magic=True), plain.candidates(m, n, k, hopper=True, magic=True)
        assert got == short + [dict(big, **x) for x in extra if dict(big, **x) not in short], (m, got)
        for c in got[len(short):]:
            MatmulA16WxHopper(tilus.int4, 128, **{name: v for name, v in c.items() if name != "hopper"})
    assert q.candidates(16, 8192, 8192, hopper=True, magic=True) == plain.candidates(16, 8192, 8192, hopper=True,
                                                                                    magic=True)
    assert q.candidates(1024, 8192, 8192) == plain.candidates(1024, 8192, 8192)  # no wgmma weights
    waits = QuantizedMatmul(tilus.int4, 128, sms=132, extra=extra, wait_sums=True).candidates(1024, 3584, 18944,
                                                                                              hopper=True)
    assert dict(big, **extra[1], wait_sums=True) in waits


@pytest.mark.parametrize("m,n,k", [(1, 8192, 8192), (16, 3584, 18944), (64, 3584, 18944), (1024, 28672, 8192),
                                   (300, 200, 1000)])
def test_quantized_matmul_wide_tuning_spans_kernels_tiles_and_splits(m, n, k):
    """tune=True's whole space (candidates(wide=True)) at a shape: the rule's choice first, no
    repeats, each a kernel that can be made; split-K where the tiles alone leave SMs idle (up to
    16 ways for m <= 32), the wgmma kernel's tiles where its weights exist, always an mma.sync
    choice (the wgmma kernel cannot split k)."""
    from matmul_a16wx import MatmulA16Wx, MatmulA16WxHopper, QuantizedMatmul
    for wtype in (tilus.int4, tilus.uint4):
        q = QuantizedMatmul(wtype, 128, sms=132)
        got = q.candidates(m, n, k, hopper=True, wide=True)
        assert got[0] == q.config(m, n, k, hopper=True)
        assert all(c not in got[:i] for i, c in enumerate(got))
        for c in got:
            params = {name: v for name, v in c.items() if name != "hopper"}
            (MatmulA16WxHopper if c.get("hopper") else MatmulA16Wx)(wtype, 128, **params)
        mma = [c for c in got if not c.get("hopper")]
        assert mma, got
        hopper = [c for c in got if c.get("hopper")]
        assert bool(hopper) == (m >= 33 and k % 128 == 0 and n % 8 == 0), got
        if m <= 32:  # 16-row tiles: up to 4 blocks per SM of an H100 (132)
            tiles = -(-n // 128)
            assert sorted(c["split_k"] for c in mma) == [s for s in (1, 2, 4, 8, 16) for _ in (4, 8)
                                                         if k // (128 * s) >= 2 and (s == 1 or tiles * s <= 528)]
            assert {c["stages"] for c in mma} == {4, 8}
        if (m, n) == (64, 3584):  # 28 tiles of 64 x 128: split up to 4 ways
            assert sorted(c["split_k"] for c in mma) == [1, 2, 4]
        if m == 1024:  # enough tiles: no split
            assert {c["split_k"] for c in mma} == {1}
        assert not any(c.get("magic") for c in got)  # no magic weights given
        # With the magic decode's weights: each 16-row configuration also on the magic decode,
        # with and without late_scale, and with late_scale also in two sums (two_sums: the wide space
        # only); nothing else changes.
        with_magic = q.candidates(m, n, k, hopper=True, magic=True, wide=True)
        magic = [c for c in with_magic if c.get("magic")]
        small = [c for c in mma if c["block_m"] == 16]
        untimed = [dict(c, magic=True, late_scale=True, two_sums=True) for c in small]
        plain = [dict(c, magic=True, late_scale=late) for c in small for late in (False, True)] + untimed
        assert sorted(map(str, magic)) == sorted(map(str, plain)) and bool(magic) == (m <= 32), magic
        assert [c for c in with_magic if not c.get("magic")] == got
        for c in magic:
            MatmulA16Wx(wtype, 128, **c)
        # Where TMA applies: each of them with late_scale, by cp.async and by TMA (and the untimed ones).
        with_tma = q.candidates(m, n, k, hopper=True, magic=True, tma=True, wide=True)
        by_tma = [c for c in with_tma if c.get("magic")]
        want = [dict(c, magic=True, late_scale=True, **t) for c in small for t in ({}, {"tma": True})] + untimed
        assert sorted(map(str, by_tma)) == sorted(map(str, want)) and [c for c in with_tma if not c.get("magic")] == got
        for c in by_tma:
            MatmulA16Wx(wtype, 128, **c)
    # bf16 activations and 8-bit codes have no magic decode
    assert not any(c.get("magic") for c in QuantizedMatmul(tilus.int4, 128, atype=tilus.bfloat16).candidates(
        m, n, k, magic=True, wide=True))
    assert not any(c.get("magic") for c in QuantizedMatmul(tilus.int8, 128).candidates(m, n, k, magic=True, wide=True))


@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
def test_tuned_quantized_matmul_on_the_gpu():
    """QuantizedMatmul(tune=True) times its candidates at the first call of a shape, keeps the
    fastest (one of the candidates) and computes the same product with it; so does every
    candidate (the magic decode's among them at m = 5, the wgmma kernel's at m = 80; on a grid of
    8 SMs its splits at m = 200 and its last round's tiles split, alone and in clusters of two, at
    m = 300; as if on 4 SMs at m = 5, stream-K in 12 blocks and the splits on the weights k tile
    after k tile, the product transposed among them; each run twice: the split
    counters and partial sums reused)."""
    import torch
    from matmul_a16wx import QuantizedMatmul, from_host_array, host_array, quantized_operands
    rng = np.random.default_rng(5)
    for m, n, k, sms in [(5, 392, 1024, None), (80, 256, 1024, None), (200, 520, 2048, 8), (300, 1160, 2048, 8),
                         (5, 392, 2048, 4)]:
        a = rng.uniform(-1, 1, (m, k))
        packed, scales, zeros, w = quantized_operands(tilus.uint4, k, n, 128, rng)
        q = QuantizedMatmul(tilus.uint4, 128, tune=True, sms=sms)
        args = [torch.from_numpy(x).cuda() for x in (host_array(a, tilus.float16), packed,
                                                        host_array(scales, tilus.float16),
                                                        host_array(zeros, tilus.float16),
                                                        np.zeros((m, n), np.float16), np.zeros((16, m, n), np.float32))]
        args[1] = q.prepare(args[1])
        q(m, n, k, *args)
        (key, cfg), = q.tuned.items()
        assert q.tuned_layouts() == sorted({"plain", q.layout_of(cfg)})  # the copies a re-prepare would keep
        assert "magic" in args[1]  # uint4 codes, f16: prepare made the magic decode's weights too
        assert key == q.tuning_key(m, n, k, args[1], args[4]) and key[4]  # magic weights in the key
        candidates = q.candidates(*key)  # (m's bucket, n, k, wgmma, magic, TMA applies)
        assert cfg in candidates, cfg
        if sms and m <= 32:
            assert any(c.get("weights_a") for c in candidates), candidates
            assert [c["blocks"] for c in candidates if c.get("blocks")] == [12], candidates
            assert any(c.get("k_major") for c in candidates), candidates
        elif sms:
            assert any(c.get("split_k", 1) > 1 for c in candidates) == (m == 200), candidates
            assert any(c.get("tail_split", 1) > 1 and c.get("cluster") == 2 for c in candidates) == (m == 300), \
                candidates
        np.testing.assert_allclose(from_host_array(args[4].cpu().numpy(), tilus.float16), a @ w, atol=2e-2, rtol=1e-2)
        for cfg in candidates:  # every candidate (compiled by the tuning) computes the product
            for launch in range(2 if sms else 1):
                args[4].zero_()
                q.launch(cfg, m, n, k, *args)
                np.testing.assert_allclose(from_host_array(args[4].cpu().numpy(), tilus.float16), a @ w, atol=2e-2,
                                           rtol=1e-2, err_msg=f"{cfg}, launch {launch}")


def reference_repack(codes, bits, bn, bk, layout, threads):
    """numpy's RepackWeights: codes [n, k] to tiles of bn x bk (n and k padded with zeros), thread
    t's slots of `layout` in slot order as a bit stream cut into 16-byte rows (row = threads *
    (byte / 16) + t)."""
    from matmul_a16wx import pack_codes
    n, k = codes.shape
    tn, tk = -(-n // bn), -(-k // bk)
    padded = np.zeros((tn * bn, tk * bk), np.int64)
    padded[:n, :k] = codes
    tiles = padded.reshape(tn, bn, tk, bk).transpose(0, 2, 1, 3).reshape(tn, tk, bn * bk)
    size = layout.local_size
    index = np.array([[layout.map(t, s)[0] * bk + layout.map(t, s)[1] for s in range(size)] for t in range(threads)])
    nbytes = size * bits // 8
    data = pack_codes(tiles[:, :, index].reshape(-1, size), bits).reshape(tn, tk, threads, nbytes // 16, 16)
    return data.transpose(0, 1, 3, 2, 4).reshape(-1, 16)


@pytest.mark.parametrize("wtype,order,bk", [("int4", "mma", 128), ("int3", "mma", 128), ("float6_e3m2", "mma", 128),
                                            ("int8", "mma", 64), ("uint4", "wgmma", 64), ("float8_e4m3", "wgmma", 32),
                                            ("int4", "magic", 64), ("uint4", "magic_k", 128)])
def test_repacking_kernel_matches_numpy(arrays, wtype, order, bk):
    """RepackWeights (the example's offline repacking, a tilus kernel) against the repacking
    written in numpy, into the mma.sync fragment order of the small-m kernel, its magic decode's
    order (tile after tile along k, or along n: k_major), and the wgmma one of the Hopper kernel,
    on ragged n and k (padded with zero codes to whole tiles)."""
    from matmul_a16wx import (fragment_layout, magic_layout, pack_codes, repack_for_hopper, repack_for_magic,
                              repack_weights, wgmma_a_layout)
    dt = getattr(tilus, wtype)
    n, k = 200, 3 * bk + (bk // 2 if dt.bits % 2 == 0 else 40)  # whole bytes of 3- and 6-bit codes
    codes = np.random.default_rng(4).integers(0, 1 << dt.bits, (n, k))
    b = arrays.put(pack_codes(codes, dt.bits))
    if order == "mma":
        got, want = repack_weights(b, dt, n, k, 128, bk), reference_repack(codes, dt.bits, 128, bk,
                                                                           fragment_layout(128, bk), 128)
    elif order == "magic":
        got, want = repack_for_magic(b, dt, n, k, 128, bk), reference_repack(codes, dt.bits, 128, bk,
                                                                             magic_layout(128, bk), 128)
    elif order == "magic_k":  # the same tiles, k tile after k tile
        got = repack_for_magic(b, dt, n, k, 128, bk, k_major=True)
        want = reference_repack(codes, dt.bits, 128, bk, magic_layout(128, bk), 128)
        tn, tk = -(-n // 128), -(-k // bk)
        want = want.reshape(tn, tk, -1, 16).transpose(1, 0, 2, 3).reshape(-1, 16)
    else:
        got, want = repack_for_hopper(b, dt, n, k, bk), reference_repack(codes, dt.bits, 128, bk,
                                                                         wgmma_a_layout(128, bk, 2), 256)
    np.testing.assert_array_equal(arrays.host(got), want)


def test_packing_helpers_round_trip():
    """pack_codes / unpack_codes are inverse on every width, and 3-bit codes straddle bytes."""
    from matmul_a16wx import pack_codes, unpack_codes
    rng = np.random.default_rng(1)
    for bits in range(1, 9):
        codes = rng.integers(0, 1 << bits, (5, 64))
        data = pack_codes(codes, bits)
        assert data.shape == (5, 64 * bits // 8)
        np.testing.assert_array_equal(unpack_codes(data, bits), codes)
    assert pack_codes(np.array([[0b101, 0b011, 0b110, 0, 0, 0, 0, 0]]), 3)[0, 0] == 0b10011101
