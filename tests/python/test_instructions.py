"""Every instruction against numpy on random data with ragged shapes, on each backend present:
the CPU backend with numpy arrays, the GPU with torch tensors (`device` fixture)."""
import math

import numpy as np
import pytest

import tilus
from tilus import bfloat16, float16, float32, int8, int32

BM, BN = 16, 64


def tile(self, m, n):
    self.attrs.blocks = [tilus.cdiv(m, BM), tilus.cdiv(n, BN)]
    self.attrs.warps = 4
    return [self.blockIdx.x * BM, self.blockIdx.y * BN]


class Unary(tilus.Script):
    def __init__(self, op, dt=float32):
        super().__init__()
        self.op, self.dt = op, dt

    def __call__(self, m: int32, n: int32, x: ~float32, y: ~float32):
        o = tile(self, m, n)
        v = self.load_global(self.global_view(x, shape=[m, n]), offsets=o, shape=[BM, BN])
        if self.op == "neg":
            r = -v
        elif self.op == "clip":
            r = self.clip(v, -0.5, 0.75)
        elif self.op == "cast16":
            r = v.to(self.dt).to(float32)
        elif self.op == "rcp_of_x":
            r = self.rcp(v)
        elif self.op == "gelu_tanh":
            r = self.gelu(v, approximate="tanh")
        else:
            r = getattr(self, self.op)(v if self.op not in ("sqrt", "log", "rsqrt", "rcp") else abs(v) + 1.0)
        self.store_global(self.global_view(y, shape=[m, n]), r, offsets=o)


def _gelu(v, approximate):
    v = v.astype(np.float64)
    if approximate == "tanh":
        return 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    return 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))


UNARY = {
    "erf": np.vectorize(math.erf), "sigmoid": lambda v: 1 / (1 + np.exp(-v.astype(np.float64))),
    "gelu": lambda v: _gelu(v, "none"), "gelu_tanh": lambda v: _gelu(v, "tanh"),
    "exp": np.exp, "abs": np.abs, "sqrt": lambda v: np.sqrt(np.abs(v) + 1), "rsqrt": lambda v: 1 / np.sqrt(np.abs(v) + 1),
    "log": lambda v: np.log(np.abs(v) + 1), "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "round": np.round,
    "floor": np.floor, "ceil": np.ceil, "square": np.square, "exp2": np.exp2, "neg": np.negative,
    "clip": lambda v: np.clip(v, -0.5, 0.75), "rcp": lambda v: 1 / (np.abs(v) + 1),
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(arrays, op):
    m, n = 37, 150
    x = arrays.rand((m, n))
    y = arrays.empty((m, n))
    Unary(op)(m, n, x, y)
    np.testing.assert_allclose(arrays.host(y), UNARY[op](arrays.host(x)), rtol=2e-6, atol=2e-6)


def test_rcp_flushes_results_below_the_normal_range(arrays):
    """float32 rcp is the GPU's rcp.approx.ftz (within an ulp; exact on these powers of two), whose
    results below 2^-126 are 0 of the input's sign; the CPU backend flushes the same results."""
    x = np.array([2.0 ** 127, -2.0 ** 127, 2.0 ** 126, np.inf, -np.inf, 2.0, -0.25, 1.0], np.float32)
    want = np.array([0.0, -0.0, 2.0 ** -126, 0.0, -0.0, 0.5, -4.0, 1.0], np.float32)
    y = arrays.empty((3, 8))
    Unary("rcp_of_x")(3, 8, arrays.put(np.tile(x, (3, 1))), y)
    got = arrays.host(y)
    np.testing.assert_array_equal(got, np.tile(want, (3, 1)))
    np.testing.assert_array_equal(np.signbit(got), np.tile(np.signbit(want), (3, 1)))


def test_exp2_flushes_results_below_the_normal_range(arrays):
    """float32 exp2 is the GPU's ex2.approx.ftz (no denormal results, none of exp2f's range fix-up
    around it); the CPU backend flushes the same results, so both give these exactly."""
    x = np.array([-130.0, -126.5, -126.0, -1.0, 0.0, 3.0, -np.inf, 100.0], np.float32)
    want = np.array([0.0, 0.0, 2.0 ** -126, 0.5, 1.0, 8.0, 0.0, 2.0 ** 100], np.float32)
    y = arrays.empty((3, 8))
    Unary("exp2")(3, 8, arrays.put(np.tile(x, (3, 1))), y)
    np.testing.assert_array_equal(arrays.host(y), np.tile(want, (3, 1)))


class HalfActivations(tilus.Script):
    """sigmoid and both gelu forms of a float16 tile (computed in float32, rounded once)."""

    def __call__(self, n: int32, x: ~float16, y: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        v = self.load_global(self.global_view(x, shape=[n]), offsets=[0], shape=[256])
        g = self.global_view(y, shape=[3, n])
        for i, r in enumerate([self.sigmoid(v), self.gelu(v), self.gelu(v, approximate="tanh")]):
            self.store_global(g, self.unsqueeze(r, [0]), offsets=[i, 0])


def test_half_activations_round_once(arrays):
    n = 200
    x = arrays.rand((n,), "float16", lo=-5, hi=5)
    y = arrays.empty((3, n), "float16")
    HalfActivations()(n, x, y)
    h = arrays.host(x).astype(np.float64)
    for i, want in enumerate([1 / (1 + np.exp(-h)), _gelu(h, "none"), _gelu(h, "tanh")]):
        np.testing.assert_allclose(arrays.host(y)[i].astype(np.float64), want.astype(np.float16), rtol=1e-3,
                                   atol=1e-3)


def test_gelu_approximate_must_be_torchs():
    class Bad(tilus.Script):
        def __call__(self, x: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            v = self.load_global(self.global_view(x, shape=[4]), offsets=[0], shape=[4])
            self.gelu(v, approximate="erf")  # BAD-GELU

    with pytest.raises(tilus.CompileError, match=r'test_instructions.py:\d+: error: gelu: approximate must be "none" '
                                                 r'or "tanh" \(torch\'s\), got "erf"'):
        tilus.trace(Bad())


class PaddedRowSoftmax(tilus.Script):
    """Softmax of each row of an [m, n] matrix, one row per block in a 1024-wide tile: the padded
    columns must not count, so they read as -inf (exp(-inf) = 0), Triton's masking idiom."""

    def __init__(self, other=-math.inf):
        super().__init__()
        self.other = other

    def __call__(self, m: int32, n: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [m]
        self.attrs.warps = 4
        row = self.load_global(self.global_view(x, shape=[m, n]), offsets=[self.blockIdx.x, 0], shape=[1, 1024],
                               other=self.other)
        e = self.exp(row - self.max(row, dim=1, keepdim=True))
        self.store_global(self.global_view(y, shape=[m, n]), e / self.sum(e, dim=1, keepdim=True),
                          offsets=[self.blockIdx.x, 0])


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_softmax_over_a_padded_tile_with_other(arrays):
    m, n = 5, 777
    x = arrays.rand((m, n))
    y = arrays.empty((m, n))
    PaddedRowSoftmax()(m, n, x, y)
    np.testing.assert_allclose(arrays.host(y), _softmax(arrays.host(x)), rtol=1e-5, atol=1e-7)
    # The default fill, zero, puts 247 columns of exp(0 - max) into every row's sum.
    PaddedRowSoftmax(other=None)(m, n, x, y)
    assert not np.allclose(arrays.host(y), _softmax(arrays.host(x)), rtol=1e-2)


class FillValues(tilus.Script):
    """A ragged int32 tile filled with a constant and a float tile filled with a kernel scalar."""

    def __call__(self, n: int32, fill: float32, a: ~int32, b: ~float32, out_a: ~int32, out_b: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 2
        ta = self.load_global(self.global_view(a, shape=[n]), offsets=[0], shape=[64], other=-7)
        tb = self.load_global(self.global_view(b, shape=[n]), offsets=[0], shape=[64], other=fill * 2.0)
        self.store_global(self.global_view(out_a, shape=[64]), ta, offsets=[0])
        self.store_global(self.global_view(out_b, shape=[64]), tb, offsets=[0])


def test_load_global_other_of_ints_and_of_a_kernel_scalar(arrays):
    n = 45
    a = arrays.put(np.arange(n, dtype=np.int32))
    b = arrays.rand((n,))
    out_a, out_b = arrays.empty((64,), "int32"), arrays.empty((64,))
    FillValues()(n, 1.25, a, b, out_a, out_b)
    assert arrays.host(out_a).tolist() == list(range(n)) + [-7] * (64 - n)
    np.testing.assert_array_equal(arrays.host(out_b), np.concatenate([arrays.host(b), np.full(64 - n, 2.5, np.float32)]))


def test_load_global_other_in_the_ir_and_its_errors():
    ir = str(tilus.trace(PaddedRowSoftmax()))
    assert "other=-inf" in ir, ir
    # The CUDA emitter fills the vectors outside with it (compiled here without a GPU).
    x, y = np.zeros((5, 777), np.float32), np.zeros((5, 777), np.float32)
    src = PaddedRowSoftmax().source(5, 777, x, y, arch="sm_90a")
    assert "= (-tilus::inf<float>());" in src, src
    if tilus._C.nvrtc_available():
        assert ".entry PaddedRowSoftmax" in PaddedRowSoftmax().ptx(5, 777, x, y, arch="sm_90a")

    class IntFill(tilus.Script):
        def __call__(self, x: ~int32):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            self.load_global(self.global_view(x, shape=[4]), offsets=[0], shape=[8], other=0.5)  # BAD-OTHER

    with pytest.raises(tilus.CompileError, match=r"test_instructions.py:\d+: error: load_global: other 0.5 is "
                                                 r"float32, out is register int32\[8\]: .* \(an int number\)"):
        tilus.trace(IntFill())


@pytest.mark.parametrize("dt,npdt", [(float16, np.float16)])
def test_casts_round_like_numpy(arrays, dt, npdt):
    m, n = 21, 100
    x = arrays.rand((m, n), lo=-70000, hi=70000)
    y = arrays.empty((m, n))
    Unary("cast16", dt)(m, n, x, y)
    with np.errstate(over="ignore"):  # values past float16's range become inf on both sides
        want = arrays.host(x).astype(npdt).astype(np.float32)
    np.testing.assert_array_equal(arrays.host(y), want)


class Binary(tilus.Script):
    def __call__(self, m: int32, n: int32, a: ~float32, b: ~float32, out: ~float32):
        o = tile(self, m, n)
        va = self.load_global(self.global_view(a, shape=[m, n]), offsets=o, shape=[BM, BN])
        vb = self.load_global(self.global_view(b, shape=[n]), offsets=[o[1]], shape=[BN])  # broadcast row
        g = self.global_view(out, shape=[8, m, n])
        results = [va + vb, va - vb, va * vb, va / (abs(vb) + 1.0), self.maximum(va, vb), self.minimum(va, 0.25),
                   self.where(va > vb, va, vb * 2.0), (va >= 0.0).to(float32) + (vb < 0.5).to(float32)]
        for i in tilus.static_range(8):
            self.store_global(g, self.unsqueeze(results[i], [0]), offsets=[i] + o)


def test_binary_ops_and_broadcasts(arrays):
    m, n = 29, 130
    a, b = arrays.rand((m, n)), arrays.rand((n,))
    out = arrays.empty((8, m, n))
    Binary()(m, n, a, b, out)
    A, B = arrays.host(a), arrays.host(b)[None, :]
    want = [A + B, A - B, A * B, A / (np.abs(B) + 1), np.maximum(A, B), np.minimum(A, 0.25), np.where(A > B, A, B * 2),
            (A >= 0).astype(np.float32) + (B < 0.5).astype(np.float32)]
    np.testing.assert_allclose(arrays.host(out), np.stack(want), rtol=1e-6, atol=1e-6)


class IntOps(tilus.Script):
    def __call__(self, n: int32, a: ~int32, b: ~int32, out: ~int32):
        self.attrs.blocks = [tilus.cdiv(n, 128)]
        self.attrs.warps = 4
        o = self.blockIdx.x * 128
        va = self.load_global(self.global_view(a, shape=[n]), offsets=[o], shape=[128])
        vb = self.load_global(self.global_view(b, shape=[n]), offsets=[o], shape=[128])
        g = self.global_view(out, shape=[6, n])
        rs = [va // vb, va % vb, va & vb, va | vb, va ^ vb, (va << 2) + (vb >> 1)]
        for i in tilus.static_range(6):
            self.store_global(g, self.unsqueeze(rs[i], [0]), offsets=[i, o])


def test_integer_ops_follow_python_floor_semantics(arrays):
    n = 1000
    a = arrays.rand((n,), "int32", -1000, 1000)
    b = arrays.rand((n,), "int32", 1, 50)
    bh = arrays.host(b).copy()
    bh[::3] *= -1
    b = arrays.put(bh)
    out = arrays.empty((6, n), "int32")
    IntOps()(n, a, b, out)
    A, B = arrays.host(a).astype(np.int64), bh.astype(np.int64)
    want = np.stack([A // B, A % B, A & B, A | B, A ^ B, (A << 2) + (B >> 1)])
    np.testing.assert_array_equal(arrays.host(out), want)


class Reductions(tilus.Script):
    def __call__(self, m: int32, n: int32, x: ~float32, out: ~float32):
        self.attrs.blocks = [tilus.cdiv(m, 8)]
        self.attrs.warps = 4
        o = self.blockIdx.x * 8
        v = self.load_global(self.global_view(x, shape=[m, n]), offsets=[o, 0], shape=[8, 128])
        g = self.global_view(out, shape=[m, 4])
        self.store_global(g, self.sum(v, dim=1, keepdim=True), offsets=[o, 0])
        self.store_global(g, self.max(v, dim=1, keepdim=True), offsets=[o, 1])
        self.store_global(g, self.min(v, dim=1, keepdim=True), offsets=[o, 2])
        anyneg = self.any(v < -1.9, dim=1, keepdim=True).to(float32)
        self.store_global(g, anyneg, offsets=[o, 3])


def test_reductions(arrays):
    m, n = 19, 128
    x = arrays.rand((m, n))
    out = arrays.empty((m, 4))
    Reductions()(m, n, x, out)
    X = arrays.host(x)
    want = np.stack([X.sum(1), X.max(1), X.min(1), (X < -1.9).any(1).astype(np.float32)], axis=1)
    np.testing.assert_allclose(arrays.host(out), want, rtol=1e-5, atol=1e-5)


class Reductions64(tilus.Script):
    """Every reduction of a 64-bit integer tile along `dim`, `warps` warps."""

    def __init__(self, rows, cols, warps, dim):
        super().__init__()
        self.rows, self.cols, self.warps, self.dim = rows, cols, warps, dim

    def body(self, dtype, x, out):
        self.attrs.blocks = [1]
        self.attrs.warps = self.warps
        r, c, d = self.rows, self.cols, self.dim
        v = self.load_global(self.global_view(x, shape=[r, c]), offsets=[0, 0], shape=[r, c])
        g = self.global_view(out, shape=[5, c if d == 0 else r])
        outs = [self.sum(v, dim=d), self.max(v, dim=d), self.min(v, dim=d),
                self.any(v > 0, dim=d).to(dtype), self.all(v > 0, dim=d).to(dtype)]
        for k, o in enumerate(outs):
            self.store_global(g, self.unsqueeze(o, dims=[0]), offsets=[k, 0])


class Reductions64Signed(Reductions64):
    def __call__(self, x: ~tilus.int64, out: ~tilus.int64):
        self.body(tilus.int64, x, out)


class Reductions64Unsigned(Reductions64):
    def __call__(self, x: ~tilus.uint64, out: ~tilus.uint64):
        self.body(tilus.uint64, x, out)


@pytest.mark.parametrize("dtype", ["int64", "uint64"])
@pytest.mark.parametrize("rows, cols, warps", [(2, 4, 2), (16, 16, 1), (16, 16, 4)])
@pytest.mark.parametrize("dim", [0, 1])
def test_reductions_64_bit_integers(arrays, dtype, rows, cols, warps, dim):
    info = np.iinfo(dtype)
    h = arrays.rng.integers(info.min, info.max, size=(rows, cols), dtype=dtype, endpoint=True)
    h.flat[0], h.flat[-1] = info.max, info.min  # where a rounded identity would win
    x = arrays.put(h)
    out = arrays.put(np.zeros((5, cols if dim == 0 else rows), dtype=dtype))
    script = Reductions64Signed if dtype == "int64" else Reductions64Unsigned
    script(rows, cols, warps, dim)(x, out)
    with np.errstate(over="ignore"):
        want = np.stack([h.sum(dim, dtype=dtype), h.max(dim), h.min(dim), (h > 0).any(dim).astype(dtype),
                         (h > 0).all(dim).astype(dtype)])
    np.testing.assert_array_equal(arrays.host(out), want)


class Dot(tilus.Script):
    def __init__(self, dt, via_shared):
        super().__init__()
        self.dt, self.via_shared = dt, via_shared

    def __call__(self, m: int32, n: int32, k: int32, a: ~float32, b: ~float32, c: ~float32):
        self.attrs.blocks = [tilus.cdiv(m, 32), tilus.cdiv(n, 32)]
        self.attrs.warps = 4
        om, on = self.blockIdx.x * 32, self.blockIdx.y * 32
        ga, gb = self.global_view(a, shape=[m, k]), self.global_view(b, shape=[k, n])
        acc = self.register_tensor(dtype=float32, shape=[32, 32], init=0.0)
        for k0 in range(0, k, 32):
            ta = self.load_global(ga, offsets=[om, k0], shape=[32, 32]).to(self.dt)
            tb = self.load_global(gb, offsets=[k0, on], shape=[32, 32]).to(self.dt)
            if self.via_shared:
                sa = self.shared_tensor(dtype=self.dt, shape=[32, 32])
                self.store_shared(sa, ta)
                ta = self.load_shared(sa)
            acc = self.dot(ta, tb, acc)
        self.store_global(self.global_view(c, shape=[m, n]), acc, offsets=[om, on])


@pytest.mark.parametrize("dt,via_shared", [(float32, False), (float16, False), (bfloat16, True), (float16, True)])
def test_dot(arrays, dt, via_shared):
    m, n, k = 45, 77, 70
    a, b = arrays.rand((m, k)), arrays.rand((k, n))
    c = arrays.empty((m, n))
    Dot(dt, via_shared)(m, n, k, a, b, c)
    A, B = arrays.host(a), arrays.host(b)
    if dt == float16:
        A, B = A.astype(np.float16).astype(np.float64), B.astype(np.float16).astype(np.float64)
    tol = 1e-4 if dt == float32 else 0.25 if dt == bfloat16 else 1e-2
    np.testing.assert_allclose(arrays.host(c), A @ B, rtol=tol, atol=tol)


class DotDefaults(tilus.Script):
    def __call__(self, x: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        a = self.register_tensor(dtype=float16, shape=[16, 32], init=0.0)
        b = self.register_tensor(dtype=float16, shape=[32, 8], init=0.0)
        self.dot(a, b)
        self.dot(a, b, acc_dtype=float16)
        i = self.register_tensor(dtype=int8, shape=[16, 32], init=0)
        self.dot(i, self.register_tensor(dtype=int8, shape=[32, 8], init=0))


@pytest.mark.filterwarnings("ignore::tilus.TilusWarning")  # the results are discarded on purpose
def test_dot_without_an_accumulator_takes_the_cores_default():
    # The C++ Builder builds it for both front ends: a zero "acc" of [a.shape[0], b.shape[1]],
    # float32 for float inputs and int32 otherwise unless acc_dtype says.
    text = str(tilus.trace(DotDefaults()))
    assert "acc = register_tensor(init=0.0) : register float32[16, 8]" in text
    assert "acc_1 = register_tensor(init=0.0_float16) : register float16[16, 8]" in text
    assert "acc_2 = register_tensor(init=0) : register int32[16, 8]" in text
    assert "dot(a=a, b=b, c=acc)" in text, text


class Copies(tilus.Script):
    """x [m, n] int8 -> shared (copy_async, dims swapped) -> registers -> transposed -> y [n, m];
    and x -> shared (copy of a region) -> global z (copy)."""

    def __call__(self, m: int32, n: int32, x: ~int8, y: ~int8, z: ~int8):
        self.attrs.blocks = [tilus.cdiv(m, 32), tilus.cdiv(n, 64)]
        self.attrs.warps = 4
        om, on = self.blockIdx.x * 32, self.blockIdx.y * 64
        gx = self.global_view(x, shape=[m, n])
        s = self.shared_tensor(dtype=int8, shape=[64, 32])
        self.copy_async(gx, s, offsets=[om, on], dims=[1, 0])
        self.copy_async_wait_all()
        self.sync()
        self.store_global(self.global_view(y, shape=[n, m]), self.load_shared(s), offsets=[on, om])
        s2 = self.shared_tensor(dtype=int8, shape=[32, 64])
        self.copy(gx[om:om + 32, on:on + 64], s2)
        self.copy(s2, self.global_view(z, shape=[m, n])[om:om + 32, on:on + 64])


def test_copy_family(arrays):
    m, n = 77, 150
    x = arrays.rand((m, n), "int8", -100, 100)
    y, z = arrays.empty((n, m), "int8"), arrays.empty((m, n), "int8")
    Copies()(m, n, x, y, z)
    X = arrays.host(x)
    np.testing.assert_array_equal(arrays.host(y), X.T)
    np.testing.assert_array_equal(arrays.host(z), X)


class RaggedCopyAsync(tilus.Script):
    """x [m, n] float16 -> shared by copy_async -> y, blocks of 32 x 128; the row stride is
    `ld` (a multiple of 16 here, so the rows are aligned) and n is ragged."""

    def __call__(self, m: int32, n: int32, ld: int32, x: ~float16, y: ~float16):
        self.attrs.blocks = [tilus.cdiv(m, 32), tilus.cdiv(n, 128)]
        self.attrs.warps = 4
        om, on = self.blockIdx.x * 32, self.blockIdx.y * 128
        s = self.shared_tensor(dtype=float16, shape=[32, 128])
        self.copy_async(self.global_view(x, shape=[m, n], strides=[ld, 1]), s, offsets=[om, on])
        self.copy_async_wait_all()
        self.sync()
        self.store_global(self.global_view(y, shape=[m, n]), self.load_shared(s), offsets=[om, on])


def test_copy_async_over_a_ragged_extent(arrays):
    # n = 301: the vectors straddling the end of a row copy its in-bounds part and zero the rest.
    m, n, ld = 45, 301, 320
    x = arrays.rand((m, ld), "float16")
    y = arrays.empty((m, n), "float16")
    RaggedCopyAsync()(m, n, ld, x, y)
    np.testing.assert_array_equal(arrays.host(y), arrays.host(x)[:, :n])


class RowCopyAsync(tilus.Script):
    """Row `r` of x [rows, n] float16 (n a multiple of 128) -> shared by copy_async, a tile of
    1 x 128 (a k group's scales in the W4A16 kernel) per block of 4 warps -> y [n]; min_blocks:
    attrs.min_blocks."""

    def __init__(self, min_blocks=None):
        super().__init__()
        self.min_blocks = min_blocks

    def __call__(self, rows: int32, n: int32, r: int32, x: ~float16, y: ~float16):
        self.attrs.blocks = [tilus.cdiv(n, 128)]
        self.attrs.warps = 4
        if self.min_blocks:
            self.attrs.min_blocks = self.min_blocks
        s = self.shared_tensor(dtype=float16, shape=[1, 128])
        self.copy_async(self.global_view(x, shape=[rows, n]), s, offsets=[r, self.blockIdx.x * 128])
        self.copy_async_wait_all()
        self.sync()
        self.store_global(self.global_view(y, shape=[1, n]), self.load_shared(s), offsets=[0, self.blockIdx.x * 128])


def test_copy_async_of_a_small_tile_takes_16_byte_vectors(arrays, capfd):
    # 256 bytes on 128 threads: 16 threads' 16-byte cp.async, not a synchronous 2-byte load per
    # thread (the register default spreads a small tile over the threads; a copy holds no registers).
    x = np.zeros((3, 256), np.float16)
    capfd.readouterr()
    ir = RowCopyAsync().ir(3, 256, 1, x, x[0].copy(), arch="sm_90a")["select_instructions"]
    lines = ir.splitlines()
    line = lines[next(i for i, l in enumerate(lines) if "copy_async(" in l) + 1]
    assert "lowering: cp.async.cg vector=8" in line and "completion=cp.async-group" in line, line
    assert "runs synchronously" not in capfd.readouterr().err
    xs = arrays.rand((3, 384), "float16")
    y = arrays.empty((384,), "float16")
    RowCopyAsync()(3, 384, 2, xs, y)
    np.testing.assert_array_equal(arrays.host(y), arrays.host(xs)[2])


def test_min_blocks_bounds_the_registers_for_occupancy(arrays):
    """attrs.min_blocks: printed with the kernel, the CUDA source's __launch_bounds__(threads,
    min_blocks) (ptxas keeps the registers a thread within 64K / (4 x 128) = 128), and the kernel
    runs as without it."""
    x = np.zeros((3, 256), np.float16)
    assert "min_blocks 4" in RowCopyAsync(4).ir(3, 256, 1, x, x[0].copy(), arch="sm_90a")["traced"]
    assert "__launch_bounds__(128, 4)" in RowCopyAsync(4).source(3, 256, 1, x, x[0].copy(), arch="sm_90a")
    assert "__launch_bounds__(128)" in RowCopyAsync().source(3, 256, 1, x, x[0].copy(), arch="sm_90a")
    xs = arrays.rand((3, 384), "float16")
    y = arrays.empty((384,), "float16")
    RowCopyAsync(4)(3, 384, 2, xs, y)
    np.testing.assert_array_equal(arrays.host(y), arrays.host(xs)[2])


def test_copy_async_vectors_straddle_a_ragged_end_and_a_synchronous_one_says_why(capfd):
    # For the GPU: 16-byte cp.async although n is ragged (n = 301, ld = 320 aligned), the tail
    # vectors reading only their in-bounds bytes; with ld = 301 no 4-byte vector is aligned.
    x, y = np.zeros((45, 320), np.float16), np.zeros((45, 301), np.float16)
    capfd.readouterr()
    ir = RaggedCopyAsync().ir(45, 301, 320, x, y, arch="sm_90a")["select_instructions"]
    lines = ir.splitlines()
    line = lines[next(i for i, l in enumerate(lines) if "copy_async(" in l) + 1]
    assert "lowering: cp.async.cg vector=8 tail_dim=1 completion=cp.async-group" in line, line
    assert "tilus: kernel RaggedCopyAsync" not in capfd.readouterr().err
    if tilus._C.nvrtc_available():
        assert "cp.async.cg.shared.global [%r" in RaggedCopyAsync().ptx(45, 301, 320, x, y, arch="sm_90a")
    ir = RaggedCopyAsync().ir(45, 301, 301, y.copy(), y, arch="sm_90a")["select_instructions"]
    lines = ir.splitlines()
    line = lines[next(i for i, l in enumerate(lines) if "copy_async(" in l) + 1]
    assert "lowering: simt vector=1" in line and "the stride ld of global dim 0 is not known to be a multiple of 2" \
        in line, line
    err = capfd.readouterr().err
    assert err.count("tilus: kernel RaggedCopyAsync: 1 copy_async call of it runs synchronously") == 1, err
    assert "test_instructions.py:" in err and "the stride ld of global dim 0" in err and "2-byte vectors" in err, err
    if tilus.cpu_backend_available():  # the CPU backend says it among its GPU warnings
        RaggedCopyAsync()(45, 301, 301, y.copy(), y)
        err = capfd.readouterr().err
        assert "runs on the CPU backend, but on the GPU: kernel RaggedCopyAsync: copy_async at " in err, err


class Shapes(tilus.Script):
    def __call__(self, x: ~float32, out: ~float32, bits: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        v = self.load_global(self.global_view(x, shape=[8, 16]), offsets=[0, 0], shape=[8, 16])
        g = self.global_view(out, shape=[4, 128])
        self.store_global(g, self.reshape(v, [1, 128]), offsets=[0, 0])
        self.store_global(g, self.reshape(self.transpose(v), [1, 128]), offsets=[1, 0])
        self.store_global(g, self.reshape(self.repeat(self.sum(v, dim=0, keepdim=True), [8, 1]), [1, 128]),
                          offsets=[2, 0])
        self.store_global(g, self.unsqueeze(self.squeeze(self.reshape(v, [1, 128]), [0]), [0]) * 2.0, offsets=[3, 0])
        self.store_global(self.global_view(bits, shape=[8, 16]), self.view(v, dtype=int32), offsets=[0, 0])


def test_shapes_and_views(arrays):
    x = arrays.rand((8, 16))
    out, bits = arrays.empty((4, 128)), arrays.empty((8, 16), "int32")
    Shapes()(x, out, bits)
    X = arrays.host(x)
    want = np.stack([X.reshape(-1), X.T.reshape(-1), np.tile(X.sum(0), (8, 1)).reshape(-1), X.reshape(-1) * 2])
    np.testing.assert_allclose(arrays.host(out), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(arrays.host(bits), X.view(np.int32))


class TwoPassRowScale(tilus.Script):
    """y = x / rowmax(x) in two passes over the columns: the max is taken on float32 tiles in the
    first loop and applied to float16 loads in the second. Nothing fixes the tiles' layouts, so
    the second loop's tile must take the first's (the row statistic's threads must match)."""

    def __init__(self, block_m, block_n, warps):
        super().__init__()
        self.block_m, self.block_n, self.warps = block_m, block_n, warps

    def __call__(self, m: int32, n: int32, x: ~float16, y: ~float16):
        bm, bn = self.block_m, self.block_n
        self.attrs.blocks = [tilus.cdiv(m, bm)]
        self.attrs.warps = self.warps
        om = self.blockIdx.x * bm
        gx, gy = self.global_view(x, shape=[m, n]), self.global_view(y, shape=[m, n])
        best = self.register_tensor(dtype=float32, shape=[bm, bn], init=-1e30)
        for on in range(0, n, bn):
            best = self.maximum(best, self.load_global(gx, offsets=[om, on], shape=[bm, bn]).to(float32))
        row = self.max(best, dim=1, keepdim=True)
        for on in range(0, n, bn):
            tile = self.load_global(gx, offsets=[om, on], shape=[bm, bn])
            self.store_global(gy, (tile.to(float32) / row).to(float16), offsets=[om, on])


@pytest.mark.parametrize("bm,bn,warps", [(4, 128, 4), (8, 128, 2), (8, 256, 8), (1, 512, 4)])
def test_unconstrained_tiles_of_one_shape_share_a_layout(arrays, bm, bn, warps):
    m, n = 37, 700
    x = (np.random.default_rng(8).uniform(0.5, 2.0, (m, n))).astype(np.float16)
    y = arrays.put(np.zeros((m, n), np.float16))
    TwoPassRowScale(bm, bn, warps)(m, n, arrays.put(x), y)
    xr = x.astype(np.float32)
    np.testing.assert_allclose(arrays.host(y).astype(np.float32), xr / xr.max(axis=1, keepdims=True), rtol=2e-3)


class ChainedDots(tilus.Script):
    """o = exp(q @ k.T * scale) @ v with the operand layouts NVIDIA Tilus's flash attention asks
    for (self.cuda.resolve_dot_config with warp_m = warps, warp_n = 1): the first product feeds
    the second as its `a`, and neither split is the default one."""

    def __init__(self, bq, bkv, d, warps):
        super().__init__()
        self.bq, self.bkv, self.d, self.warps = bq, bkv, d, warps
        self.qk = self.cuda.resolve_dot_config(float16, float32, m=bq, n=bkv, k=d, warp_m=warps, warp_n=1)
        self.sv = self.cuda.resolve_dot_config(float16, float32, m=bq, n=d, k=bkv, warp_m=warps, warp_n=1)

    def __call__(self, q: ~float16, k: ~float16, v: ~float16, o: ~float32):
        self.chain(q, k, v, o)

    def chain(self, q, k, v, o):
        self.attrs.blocks = [1]
        self.attrs.warps = self.warps
        bq, bkv, d = self.bq, self.bkv, self.d
        rq = self.load_global(self.global_view(q, shape=[bq, d]), offsets=[0, 0], shape=[bq, d])
        rk = self.load_global(self.global_view(k, shape=[bkv, d]), offsets=[0, 0], shape=[bkv, d])
        rv = self.load_global(self.global_view(v, shape=[bkv, d]), offsets=[0, 0], shape=[bkv, d])
        s = self.dot(rq, rk.transpose(), acc_dtype=float32) * 0.125
        self.annotate_layout(s, self.qk.lc)
        out = self.dot(self.exp(s).to(float16), rv, acc_dtype=float32)
        self.annotate_layout(out, self.sv.lc)
        self.store_global(self.global_view(o, shape=[bq, d]), out, offsets=[0, 0])


@pytest.mark.parametrize("bq,bkv,d,warps", [(64, 64, 64, 4), (64, 32, 64, 4), (128, 64, 32, 8)])
def test_annotated_dot_configs_choose_the_warp_split(arrays, bq, bkv, d, warps):
    kernel = ChainedDots(bq, bkv, d, warps)
    assert (kernel.qk.warp_m, kernel.qk.warp_n) == (warps, 1)
    assert kernel.qk.lc == kernel.sv.la  # what Tilus's flash attention asserts
    rng = np.random.default_rng(9)
    q, k, v = (rng.uniform(-1, 1, shape).astype(np.float16) for shape in ((bq, d), (bkv, d), (bkv, d)))
    o = arrays.put(np.zeros((bq, d), np.float32))
    kernel(arrays.put(q), arrays.put(k), arrays.put(v), o)
    p = np.exp((q.astype(np.float32) @ k.T.astype(np.float32)) * 0.125).astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(arrays.host(o), p @ v.astype(np.float32), rtol=2e-3, atol=2e-3)


class ThreeAnnotatedDots(ChainedDots):
    """ChainedDots plus a third product, s2 = q @ k.T again with its own annotation: with 8 warps
    the three dots have more than 256 combinations of plans, which are searched fewest changes
    first (no conversion is needed: each annotation is a plan's)."""

    def __call__(self, q: ~float16, k: ~float16, v: ~float16, o: ~float32, o2: ~float32):
        self.chain(q, k, v, o)
        bq, bkv, d = self.bq, self.bkv, self.d
        rq = self.load_global(self.global_view(q, shape=[bq, d]), offsets=[0, 0], shape=[bq, d])
        rk = self.load_global(self.global_view(k, shape=[bkv, d]), offsets=[0, 0], shape=[bkv, d])
        s2 = self.dot(rq, rk.transpose(), acc_dtype=float32)
        self.annotate_layout(s2, self.qk.lc)
        self.store_global(self.global_view(o2, shape=[bq, bkv]), s2, offsets=[0, 0])


def test_more_than_256_plan_combinations_are_searched(arrays):
    bq, bkv, d, warps = 128, 128, 64, 8
    kernel = ThreeAnnotatedDots(bq, bkv, d, warps)
    rng = np.random.default_rng(10)
    q, k, v = (rng.uniform(-1, 1, shape).astype(np.float16) for shape in ((bq, d), (bkv, d), (bkv, d)))
    sizes = [len(tilus._C.dot_plans(float16, float32, m, n, kk, 32 * warps)) for m, n, kk in
             ((bq, bkv, d), (bq, d, bkv), (bq, bkv, d))]
    assert sizes[0] * sizes[1] * sizes[2] > 256, sizes
    o, o2 = arrays.put(np.zeros((bq, d), np.float32)), arrays.put(np.zeros((bq, bkv), np.float32))
    kernel(arrays.put(q), arrays.put(k), arrays.put(v), o, o2)
    qk = q.astype(np.float32) @ k.T.astype(np.float32)
    np.testing.assert_allclose(arrays.host(o2), qk, rtol=2e-3, atol=2e-3)
    p = np.exp(qk * 0.125).astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(arrays.host(o), p @ v.astype(np.float32), rtol=2e-3, atol=2e-3)
    if tilus._C.nvrtc_available():
        ir = kernel.ir(q, k, v, np.zeros((bq, d), np.float32), np.zeros((bq, bkv), np.float32),
                       arch="sm_90a")["infer_layouts"]
        assert "_convert" not in ir, ir


def test_resolve_dot_config_errors_and_default_split():
    cuda = tilus.Script().cuda
    default = cuda.resolve_dot_config(float16, float32, m=64, n=64, k=32, num_warps=4)
    plans = tilus._C.dot_plans(float16, float32, 64, 64, 32, 128)
    assert (default.warp_m, default.warp_n) == (plans[0]["warps_m"], plans[0]["warps_n"])
    with pytest.raises(ValueError, match="no split of 4 warps into warp_m=3"):
        cuda.resolve_dot_config(float16, float32, m=64, n=64, k=32, warp_m=3, num_warps=4)
    with pytest.raises(ValueError, match="give num_warps"):
        cuda.resolve_dot_config(float16, float32, m=64, n=64, k=32, warp_m=2)
    layout = cuda.default_register_layout(4, float32, [8, 64])
    assert layout.shape == [8, 64] and layout.num_threads == 128


class PagedGather(tilus.Script):
    """y[b] = pages[table[b]] (a paged KV cache's block table): the page index is read from global
    memory as a scalar (.item()) and used as a load offset; a register tile's element as a scale."""

    def __call__(self, blocks: int32, pages: int32, table: ~int32, src: ~float32, y: ~float32):
        self.attrs.blocks = [blocks]
        self.attrs.warps = 2
        b = self.blockIdx.x
        page = self.global_view(table, shape=[blocks])[b].item()
        gs = self.global_view(src, shape=[pages, 64])
        row = self.load_global(gs, offsets=[page, 0], shape=[1, 64])
        first = self.load_global(gs, offsets=[page, 0], shape=[1, 1])
        scale = first.item() + 1.0
        self.store_global(self.global_view(y, shape=[blocks, 64]), row * scale, offsets=[b, 0])


def test_item_reads_scalars_from_global_and_register_tensors(arrays):
    rng = np.random.default_rng(10)
    pages, blocks = 9, 13
    table = rng.integers(0, pages, blocks).astype(np.int32)
    table[3] = pages + 4  # out of bounds: item() reads 0, the load of that page reads zeros
    src = rng.uniform(-1, 1, (pages, 64)).astype(np.float32)
    y = arrays.put(np.full((blocks, 64), 7, np.float32))
    PagedGather()(blocks, pages, arrays.put(table), arrays.put(src), y)
    padded = np.concatenate([src, np.zeros((8, 64), np.float32)])
    want = padded[table] * (padded[table][:, :1] + 1.0)
    np.testing.assert_allclose(arrays.host(y), want, rtol=1e-6)


def test_item_errors():
    class Bad(tilus.Script):
        def __call__(self, x: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            g = self.global_view(x, shape=[8, 8])
            self.store_global(g, self.register_tensor(dtype=float32, shape=[1, 8], init=g[0].item()), offsets=[0, 0])

    with pytest.raises(tilus.CompileError, match=r"test_instructions.py:\d+: .*item\(\): the region .* has extents"):
        Bad().source(np.zeros((8, 8), np.float32), arch="sm_90a")


class LetsBeforeLoads(tilus.Script):
    """Views whose strides fold (16 * 2 * t) used after lets the simplifier substitutes (NVIDIA
    Tilus's flash_attention_decode): every use must keep the view its definition made."""

    def __call__(self, t: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [t, 2]
        self.attrs.warps = 1
        gx = self.global_view(x, dtype=float32, shape=[1, t, 2, 16])
        gy = self.global_view(y, dtype=float32, shape=[1, t, 2, 16])
        i_t, i_h = self.blockIdx.x, self.blockIdx.y
        v = self.load_global(gx, offsets=[0, i_t, i_h, 0], shape=[16], dims=[3])
        self.store_global(gy, v + 1.0, offsets=[0, i_t, i_h, 0], dims=[3])


def test_views_keep_their_identity_when_lets_are_substituted(arrays):
    x = np.random.default_rng(12).standard_normal((1, 5, 2, 16)).astype(np.float32)
    y = arrays.put(np.zeros_like(x))
    LetsBeforeLoads()(5, arrays.put(x), y)
    np.testing.assert_array_equal(arrays.host(y), x + 1.0)


class EarlyReturn(tilus.Script):
    """`return` under run-time conditions (NVIDIA Tilus's meaning: the threads leave the kernel):
    in a helper, as flash_attention_v3 writes it, and inside a loop."""

    def skip_tail_blocks(self, n):
        if self.blockIdx.x * 32 >= n - 40:
            return

    def __call__(self, n: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, 32)]
        self.attrs.warps = 1
        gx = self.global_view(x, shape=[n])
        gy = self.global_view(y, shape=[n])
        self.skip_tail_blocks(n)
        for i in range(4):  # block b stores 8-element pieces 0..(b % 4)
            if i > self.blockIdx.x % 4:
                return
            v = self.load_global(gx, offsets=[self.blockIdx.x * 32 + i * 8], shape=[8])
            self.store_global(gy, v + 1.0, offsets=[self.blockIdx.x * 32 + i * 8])


def test_return_leaves_the_kernel(arrays):
    n = 300
    x = np.random.default_rng(13).standard_normal(n).astype(np.float32)
    y = arrays.put(np.full(n, -7.0, np.float32))
    EarlyReturn()(n, arrays.put(x), y)
    want = np.full(n, -7.0, np.float32)
    for b in range(-(-n // 32)):
        if b * 32 >= n - 40:
            continue
        for i in range(b % 4 + 1):
            lo, hi = b * 32 + i * 8, min(b * 32 + i * 8 + 8, n)
            want[lo:hi] = x[lo:hi] + 1.0
    np.testing.assert_array_equal(arrays.host(y), want)
    src = EarlyReturn().source(n, x, np.zeros(n, np.float32), arch="sm_90a")
    assert src.count("return;") == 2, src


class TensorReshapeMethods(tilus.Script):
    """x.unsqueeze(1) / y.squeeze(-1) as NVIDIA Tilus's flash_attention_v3 writes them."""

    def __call__(self, x: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        v = self.load_global(self.global_view(x, shape=[16]), offsets=[0], shape=[16])
        col = v.unsqueeze(1)  # [16, 1]
        row = col.squeeze(-1) * 4.0  # [16]
        self.store_global(self.global_view(y, shape=[16]), row + 4.0, offsets=[0])


class ScalarFromTile(tilus.Script):
    """`alpha: float32 = self.exp(r)` of a one-element tile declares its element (NVIDIA Tilus's
    flash_attention_decode)."""

    def __call__(self, x: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        r = self.load_global(self.global_view(x, shape=[4]), offsets=[3], shape=[1])
        alpha: float32 = self.exp(r)
        v = self.load_global(self.global_view(x, shape=[4]), offsets=[0], shape=[4])
        self.store_global(self.global_view(y, shape=[4]), v * alpha, offsets=[0])


def test_an_annotated_declaration_takes_a_one_element_tile(arrays):
    x = np.array([1, 2, 3, 0.5], np.float32)
    y = arrays.put(np.zeros(4, np.float32))
    ScalarFromTile()(arrays.put(x), y)
    np.testing.assert_allclose(arrays.host(y), x * np.exp(np.float32(0.5)), rtol=1e-6)


def test_register_tensor_squeeze_and_unsqueeze_methods(arrays):
    x = np.arange(16, dtype=np.float32)
    y = arrays.put(np.zeros(16, np.float32))
    TensorReshapeMethods()(arrays.put(x), y)
    np.testing.assert_array_equal(arrays.host(y), 4 * (x + 1))


class PrintTensors(tilus.Script):
    """print_tensor of a register tile and of a shared tensor (one block: prints of several blocks
    may interleave), and one whose cond is false."""

    def __call__(self, x: ~int32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 2
        r = self.load_global(self.global_view(x, shape=[3, 4]), offsets=[0, 0], shape=[3, 4])
        self.print_tensor("r of block 0:", r, cond=self.blockIdx.x == 0)
        self.print_tensor("never", r, cond=self.blockIdx.x == 1)
        s = self.shared_tensor(dtype=float32, shape=[5])
        self.store_shared(s, self.load_global(self.global_view(y, shape=[5]), offsets=[0], shape=[5]))
        self.print_tensor("s", s, fmt="%.2f")


def test_print_tensor(arrays, capfd):
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    y = np.linspace(0, 1, 5).astype(np.float32)
    PrintTensors()(arrays.put(x), arrays.put(y))
    arrays.host(arrays.put(np.zeros(1, np.float32)))  # synchronizes: the GPU's printf buffer is flushed
    out = capfd.readouterr().out
    rows = "r of block 0:\n[    0     1     2     3 ]\n[    4     5     6     7 ]\n[    8     9    10    11 ]\n"
    assert out.count(rows) == 1, out
    assert out.count("s\n[0.00 0.25 0.50 0.75 1.00 ]\n") == 1 and "never" not in out, out


class MathOfScalars(tilus.Script):
    """Python's math functions of kernel scalars (as NVIDIA Tilus's kernels write them)."""

    def __call__(self, x: ~float32, n: int32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        g = self.global_view(x, shape=[4])
        a: float32 = math.exp(g[1].item())
        b = math.sqrt(g[2].item()) + math.log2(8.0) + math.fabs(g[3].item()) + math.pow(g[0].item(), 2.0)
        c = math.tanh(g[0].item()) + math.erf(g[0].item())
        out = self.register_tensor(dtype=float32, shape=[32], init=a + b + c + math.exp(n))
        self.store_global(self.global_view(y, shape=[32]), out, offsets=[0])


def test_python_math_of_kernel_scalars(arrays):
    x = np.array([0.5, 1.5, 9.0, -2.0], np.float32)
    y = arrays.put(np.zeros(32, np.float32))
    MathOfScalars()(arrays.put(x), 3, y)
    want = math.exp(1.5) + 3.0 + 3.0 + 2.0 + 0.25 + math.tanh(0.5) + math.erf(0.5) + math.exp(3)
    np.testing.assert_allclose(arrays.host(y), np.full(32, want, np.float32), rtol=1e-5)


def test_squeeze_and_unsqueeze_take_tilus_dim_keyword(arrays):
    class Dims(tilus.Script):
        def __call__(self, y: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            r = self.register_tensor(dtype=float32, shape=[8], init=lambda i: i * 1.0)
            u = self.unsqueeze(r, dim=0)              # NVIDIA Tilus's keyword
            s = self.squeeze(self.unsqueeze(u, dims=2), 2)  # tilus's keyword, and positional
            self.store_global(self.global_view(y, shape=[1, 8]), s, offsets=[0, 0])

    y = arrays.put(np.zeros((1, 8), np.float32))
    Dims()(y)
    np.testing.assert_array_equal(arrays.host(y), np.arange(8, dtype=np.float32)[None])
    with pytest.raises(tilus.CompileError, match="give the dims to unsqueeze once"):
        class Twice(tilus.Script):
            def __call__(self, y: ~float32):
                self.attrs.blocks = [1]
                self.unsqueeze(self.register_tensor(dtype=float32, shape=[8], init=0.0), 0, dims=0)

        Twice().source(np.zeros(8, np.float32), arch="sm_90a")


def test_a_dtype_called_on_a_scalar_converts_it(arrays):
    """float32(x) of a kernel scalar is a conversion, of a number a typed constant (NVIDIA Tilus)."""

    class Convert(tilus.Script):
        def __call__(self, x: ~float32, y: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            beta: float32 = float32(self.global_view(x, shape=[2])[1].item())
            k = int32(self.global_view(x, shape=[2])[0].item())  # truncates toward zero
            out = self.register_tensor(dtype=float32, shape=[32], init=beta * float32(2) + k)
            self.store_global(self.global_view(y, shape=[32]), out, offsets=[0])

    y = arrays.put(np.zeros(32, np.float32))
    Convert()(arrays.put(np.array([-2.75, 1.25], np.float32)), y)
    np.testing.assert_array_equal(arrays.host(y), np.full(32, 1.25 * 2 - 2, np.float32))
    with pytest.raises(tilus.CompileError, match=r"float32\(...\) takes a number or a kernel scalar, got str"):
        float32("1")


class Int64MinMax(tilus.Script):
    """y = [max(n, 1), min(n, 7)] for an int64 n: the CUDA text names the integer type (int64_t and
    a long long literal would not deduce one template argument)."""

    def __call__(self, n: tilus.int64, y: ~tilus.int64):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        gy = self.global_view(y, shape=[2])
        self.store_global(gy, self.register_tensor(dtype=tilus.int64, shape=[1], init=max(n, 1)), offsets=[0])
        self.store_global(gy, self.register_tensor(dtype=tilus.int64, shape=[1], init=min(n, 7)), offsets=[1])


def test_int64_min_max_compile_and_run(arrays):
    y = np.zeros(2, np.int64)
    assert "tilus::max_<int64_t>(" in Int64MinMax().source(-5, y, arch="sm_90a")
    assert len(Int64MinMax().compiled(-5, y, arch="sm_90a").cubin) > 0
    for n, want in ((-5, [1, -5]), (12, [12, 7])):
        out = arrays.put(np.zeros(2, np.int64))
        Int64MinMax()(n, out)
        assert arrays.host(out).tolist() == want
