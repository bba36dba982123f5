"""NVIDIA Tilus's Script members and Python forms (issue 17) against numpy, on each backend present
(`device` fixture): fast_divmod, static_assert, gridDim, the current thread group's bounds,
SharedTensor.nbytes, assign, add, flatten, repeat_interleave; `x: int32 = 0` declarations,
Python's min / max of kernel scalars, `a, b, c = self.blockIdx`; tilus.Class and tilus.Pipeline."""
import numpy as np
import pytest

import tilus
from tilus import float16, float32, int4, int32, uint32


# --- Script members -------------------------------------------------------------------------------

class DivMod(tilus.Script):
    """out[i] = divmod(a + 13 i, b + i % 3) by fast_divmod of kernel scalars (block i)."""

    def __call__(self, n: int32, a: int32, b: int32, out: ~int32):
        self.attrs.blocks = [n]
        self.attrs.warps = 1
        i = self.blockIdx.x
        q, r = self.fast_divmod(a + i * 13, b + i % 3)
        pq, pr = self.fast_divmod(17, 5)  # Python ints: Python ints
        assert (pq, pr) == (3, 2) and isinstance(pq, int)
        self.store_global(self.global_view(out, shape=[n, 2]), self.register_tensor(
            dtype=int32, shape=[2], init=lambda j: tilus.select(j == 0, q, r)), offsets=[i, 0])


@pytest.mark.parametrize("a, b", [(0, 1), (5, 4), (1000, 7), (123456, 1000)])
def test_fast_divmod(arrays, a, b):
    n = 37
    out = arrays.empty([n, 2], "int32")
    DivMod()(n, a, b, out)
    i = np.arange(n)
    ref = np.stack([(a + i * 13) // (b + i % 3), (a + i * 13) % (b + i % 3)], axis=1)
    np.testing.assert_array_equal(arrays.host(out), ref)


def test_fast_divmod_of_floats_is_an_error(arrays):
    class FloatDivMod(tilus.Script):
        def __call__(self, x: ~int32):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            self.fast_divmod(tilus.cast(3, float32), 2)

    with pytest.raises(tilus.CompileError, match=r"fast_divmod: expects integers"):
        FloatDivMod()(arrays.empty([1], "int32"))


class StaticAssert(tilus.Script):
    def __init__(self, cond):
        super().__init__()
        self.cond = cond

    def __call__(self, x: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        self.static_assert(self.cond, "block_m must divide by 16")
        self.store_global(self.global_view(x, shape=[4]), self.register_tensor(dtype=int32, shape=[4], init=5),
                          offsets=[0])


def test_static_assert(arrays):
    x = arrays.empty([4], "int32")
    StaticAssert(True)(x)
    assert (arrays.host(x) == 5).all()
    StaticAssert(tilus.Expr(True))(x)  # a constant expression
    with pytest.raises(tilus.CompileError, match=r"test_compat_script.py:\d+: AssertionError: block_m must divide by 16"):
        StaticAssert(False)(x)


class SymbolicStaticAssert(tilus.Script):
    def __call__(self, n: int32, x: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        self.static_assert(n > 2, "n")


def test_static_assert_of_a_run_time_value_is_an_error(arrays):
    with pytest.raises(tilus.CompileError, match=r"static_assert: the condition must be known while tracing"):
        SymbolicStaticAssert()(3, arrays.empty([4], "int32"))


class GridDim(tilus.Script):
    """out[bx, by] = (gridDim.x, gridDim.y, gridDim.z, bx * 100 + by) with a, b, c = self.blockIdx."""

    def __call__(self, m: int32, out: ~int32):
        self.attrs.blocks = [tilus.cdiv(m, 4), 3]
        self.attrs.warps = 1
        gx, gy, gz = self.gridDim
        bx, by, bz = self.blockIdx
        g = self.global_view(out, shape=[self.gridDim.x, 3, 4])
        v = self.register_tensor(dtype=int32, shape=[4], init=lambda i: tilus.select(
            i == 0, gx, tilus.select(i == 1, gy, tilus.select(i == 2, gz + bz, bx * 100 + by))))
        self.store_global(g, v, offsets=[bx, by, 0])


def test_grid_dim_and_block_idx_unpacking(arrays):
    m = 10
    out = arrays.empty([3, 3, 4], "int32")
    GridDim()(m, out)
    got = arrays.host(out)
    for bx in range(3):
        for by in range(3):
            assert got[bx, by].tolist() == [3, 3, 1, bx * 100 + by]


class GridDimTooEarly(tilus.Script):
    def __call__(self, x: ~int32):
        n = self.gridDim.x
        self.attrs.blocks = [n]


def test_grid_dim_before_blocks_is_an_error(arrays):
    with pytest.raises(tilus.CompileError, match=r"test_compat_script.py:\d+: gridDim: set self.attrs.blocks before"):
        GridDimTooEarly()(arrays.empty([4], "int32"))


class GroupBounds(tilus.Script):
    """Writes (current_thread_begin, end, num_threads) at each nesting level, as the kernel sees them."""

    def __call__(self, x: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 8
        g = self.global_view(x, shape=[5, 3])
        seen = [(self.current_thread_begin, self.current_thread_end, self.current_num_threads)]
        with self.thread_group(thread_begin=128, num_threads=128):
            seen.append((self.current_thread_begin, self.current_thread_end, self.current_num_threads))
            with self.thread_group(32, 64):
                seen.append((self.current_thread_begin, self.current_thread_end, self.current_num_threads))
                with self.single_thread():
                    seen.append((self.current_thread_begin, self.current_thread_end, self.current_num_threads))
            with self.single_warp(3):
                seen.append((self.current_thread_begin, self.current_thread_end, self.current_num_threads))
        assert self.current_thread_begin == 0
        for k, (b, e, n) in enumerate(seen):
            self.store_global(g, self.register_tensor(dtype=int32, shape=[3], init=lambda i: tilus.select(
                i == 0, b, tilus.select(i == 1, e, n))), offsets=[k, 0])


def test_current_thread_group_bounds(arrays):
    x = arrays.empty([5, 3], "int32")
    GroupBounds()(x)
    assert arrays.host(x).tolist() == [[0, 256, 256], [128, 256, 128], [160, 224, 64], [160, 161, 1],
                                       [224, 256, 32]]


class Nbytes(tilus.Script):
    def __call__(self, x: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        a = self.shared_tensor(dtype=float16, shape=[3, 64, 32])
        b = self.shared_tensor(dtype=int4, shape=[5, 3])
        sizes = [a.nbytes, a[1].nbytes, b.nbytes, b[2].nbytes]
        self.store_global(self.global_view(x, shape=[4]), self.register_tensor(
            dtype=int32, shape=[4], init=lambda i: tilus.select(i == 0, sizes[0], tilus.select(
                i == 1, sizes[1], tilus.select(i == 2, sizes[2], sizes[3])))), offsets=[0])


def test_shared_tensor_nbytes(arrays):
    x = arrays.empty([4], "int32")
    Nbytes()(x)
    assert arrays.host(x).tolist() == [3 * 64 * 32 * 2, 64 * 32 * 2, 8, 2]


class AssignAddFlatten(tilus.Script):
    """y = [assign(a, x * 2), add(x, 1.5), add(x, x, out=c), flatten(x)] of a [4, 8] tile."""

    def __call__(self, x: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        v = self.load_global(self.global_view(x, shape=[4, 8]), offsets=[0, 0], shape=[4, 8])
        gy = self.global_view(y, shape=[4, 32])
        a = self.register_tensor(dtype=float32, shape=[4, 8], init=0.0)
        self.assign(a, v * 2.0)
        b = self.add(v, 1.5)
        c = self.register_tensor(dtype=float32, shape=[4, 8])
        c2 = self.add(v, v, out=c)
        assert c2 is c
        f = self.flatten(v)
        assert f.shape == [32]
        self.store_global(gy, a, offsets=[0, 0])
        self.store_global(gy, b, offsets=[0, 8])
        self.store_global(gy, c, offsets=[0, 16])
        self.store_global(gy, self.reshape(f, [4, 8]), offsets=[0, 24])


def test_assign_add_flatten(arrays):
    x = arrays.rand([4, 8])
    y = arrays.empty([4, 32])
    AssignAddFlatten()(x, y)
    hx, hy = arrays.host(x), arrays.host(y)
    np.testing.assert_allclose(hy[:, 0:8], hx * 2)
    np.testing.assert_allclose(hy[:, 8:16], hx + 1.5)
    np.testing.assert_allclose(hy[:, 16:24], hx + hx)
    np.testing.assert_allclose(hy[:, 24:32], hx)


class AssignMismatch(tilus.Script):
    def __call__(self, x: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        a = self.register_tensor(dtype=float32, shape=[4], init=0.0)
        self.assign(a, self.register_tensor(dtype=int32, shape=[4], init=1))


def test_assign_of_another_dtype_is_an_error(arrays):
    with pytest.raises(tilus.CompileError, match=r"assign: dst and src must have one dtype"):
        AssignMismatch()(arrays.empty([4]))


class RepeatInterleave(tilus.Script):
    def __init__(self, shape, repeats):
        super().__init__()
        self.shape, self.repeats = shape, repeats

    def __call__(self, x: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        n = len(self.shape)
        v = self.load_global(self.global_view(x, shape=self.shape), offsets=[0] * n, shape=self.shape)
        r = self.repeat_interleave(v, self.repeats)
        self.store_global(self.global_view(y, shape=r.shape), r, offsets=[0] * len(r.shape))


@pytest.mark.parametrize("shape, repeats", [([4], [2]), ([2, 3], [2, 3]), ([2, 4], [3]), ([4], [2, 2])])
def test_repeat_interleave(arrays, shape, repeats):
    x = arrays.rand(shape)
    hx = arrays.host(x).copy()
    ref = hx.reshape([1] * (len(repeats) - len(shape)) + list(shape))
    full = [1] * (ref.ndim - len(repeats)) + list(repeats)
    for d, r in enumerate(full):
        ref = np.repeat(ref, r, axis=d)
    y = arrays.empty(list(ref.shape))
    RepeatInterleave(shape, repeats)(x, y)
    np.testing.assert_array_equal(arrays.host(y), ref)


# --- Python forms -----------------------------------------------------------------------------------

class Declarations(tilus.Script):
    """Annotated declarations, Python's min / max of kernel scalars."""

    def __call__(self, n: int32, k: int32, out: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        total: int32 = 0                 # a kernel variable, although assigned only in the loop
        count: int32 = 0
        for i in range(n):
            total = total + i
            if i % 3 == 0:
                count += 1
        lo = min(n, k)
        hi = max(n, k, 7)
        mid = min([n + k, 50])
        small = min(3, 4)                # Python values stay Python
        assert small == 3 and isinstance(small, int)
        self.big: int32 = 1              # an attribute holding a kernel variable
        for i in range(k):
            self.big = self.big * 2
        plain: int = 5                   # a Python annotation: a plain assignment
        assert plain == 5
        vals = [total, count, lo, hi, mid, self.big]
        self.store_global(self.global_view(out, shape=[6]), self.register_tensor(
            dtype=int32, shape=[6], init=lambda i: tilus.select(i == 0, vals[0], tilus.select(
                i == 1, vals[1], tilus.select(i == 2, vals[2], tilus.select(
                    i == 3, vals[3], tilus.select(i == 4, vals[4], vals[5])))))), offsets=[0])


@pytest.mark.parametrize("n, k", [(10, 4), (3, 9), (0, 0)])
def test_annotated_declarations_and_min_max(arrays, n, k):
    out = arrays.empty([6], "int32")
    Declarations()(n, k, out)
    assert arrays.host(out).tolist() == [sum(range(n)), len(range(0, n, 3)), min(n, k), max(n, k, 7),
                                         min(n + k, 50), 2 ** k]


class DeclaredFloat(tilus.Script):
    def __call__(self, n: int32, out: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        x: float32 = 1                   # the int converts to the declared type
        for i in range(n):
            x = x * 1.5
        self.store_global(self.global_view(out, shape=[1]), self.register_tensor(dtype=float32, shape=[1], init=x),
                          offsets=[0])


def test_annotated_declaration_takes_its_type(arrays):
    out = arrays.empty([1])
    DeclaredFloat()(4, out)
    np.testing.assert_allclose(arrays.host(out), [1.5 ** 4])


# --- tilus.Class --------------------------------------------------------------------------------------

class Accumulator(tilus.Class):
    """A kernel variable and a register tile kept in attributes; a method with a symbolic branch."""

    def __init__(self, width):
        self.width = width
        self.steps: int32 = 0
        self.acc = self.register_tensor(dtype=float32, shape=[width], init=0.0)

    def add(self, tile, i):
        if i % 2 == 0:                   # a branch on a kernel value, in a method
            self.acc = self.acc + tile
        else:
            self.acc = self.acc - tile
        self.steps = self.steps + 1

    def bounded(self, v):
        return min(v, self.width)        # Python's min of a kernel scalar, in a method


class UsesClass(tilus.Script):
    def __call__(self, n: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        gx = self.global_view(x, shape=[n, 8])
        acc = Accumulator(8)
        for i in range(n):
            acc.add(self.load_global(gx, offsets=[i, 0], shape=[8]), i)
        gy = self.global_view(y, shape=[10])
        self.store_global(gy, acc.acc, offsets=[0])
        info = self.register_tensor(dtype=float32, shape=[2], init=lambda j: tilus.select(
            j == 0, tilus.cast(acc.steps, float32), tilus.cast(acc.bounded(n), float32)))
        self.store_global(gy, info, offsets=[8])


@pytest.mark.parametrize("n", [5, 12])
def test_class_methods_are_traced_into_the_script(arrays, n):
    x = arrays.rand([n, 8])
    y = arrays.empty([10])
    UsesClass()(n, x, y)
    hx, hy = arrays.host(x), arrays.host(y)
    signs = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    np.testing.assert_allclose(hy[:8], (hx * signs[:, None]).sum(axis=0), rtol=1e-5, atol=1e-5)
    assert hy[8:].tolist() == [n, min(n, 8)]


def test_a_class_outside_a_trace_is_an_error():
    with pytest.raises(tilus.CompileError, match=r"a tilus.Class is made and used only while a Script's body is traced"):
        Accumulator(8)


class Staged(tilus.Script):
    """tilus.Pipeline in one thread group: each tile of x goes through a ring of 2 shared buffers
    (the producer stores it and arrives, the consumer waits, reads, releases)."""

    def __call__(self, n: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        gx = self.global_view(x, shape=[n, 32])
        bufs = self.shared_tensor(dtype=float32, shape=[2, 32])
        pipe = tilus.Pipeline(2, producer_arrive_count=32, consumer_arrive_count=32)
        acc = self.register_tensor(dtype=float32, shape=[32], init=0.0)
        for i in range(n):
            pipe.producer_acquire()
            self.store_shared(bufs[pipe.producer_stage], self.load_global(gx, offsets=[i, 0], shape=[32]))
            self.mbarrier.arrive(pipe.producer_release_barrier())
            pipe.producer_advance()
            pipe.consumer_acquire()
            acc = acc + self.load_shared(bufs[pipe.consumer_stage]) * (i + 1)
            self.sync()
            self.mbarrier.arrive(pipe.consumer_release_barrier())
            pipe.consumer_advance()
        self.store_global(self.global_view(y, shape=[33]), acc, offsets=[0])
        self.store_global(self.global_view(y, shape=[33]), self.register_tensor(
            dtype=float32, shape=[1], init=tilus.cast(pipe.consumer_stage, float32)), offsets=[32])


@pytest.mark.parametrize("n", [1, 2, 7])
def test_pipeline(arrays, n):
    x = arrays.rand([n, 32])
    y = arrays.empty([33])
    Staged()(n, x, y)
    hx, hy = arrays.host(x), arrays.host(y)
    np.testing.assert_allclose(hy[:32], (hx * (np.arange(n) + 1)[:, None]).sum(axis=0), rtol=1e-5, atol=1e-5)
    assert hy[32] == n % 2


def test_pipeline_has_nvidia_tilus_members():
    for name in ("producer_acquire", "producer_advance", "producer_release_barrier", "consumer_acquire",
                 "consumer_advance", "consumer_release_barrier"):
        assert callable(getattr(tilus.Pipeline, name)), name
    assert issubclass(tilus.Pipeline, tilus.Class)
    assert uint32 is tilus.u32


# --- NVIDIA Tilus's layout functions and mma configs ---------------------------------------------

def test_layout_functions_of_tilus_ir_layout_ops():
    from tilus.ir.layout.ops import concat, local, permute, reduce, reshape, spatial
    # ranks order the dims: rank 0 the most significant.
    assert spatial(4, 8, ranks=[1, 0]) == tilus.column_spatial(4, 8)
    assert local(2, 3, ranks=[1, 0]) == tilus.column_local(2, 3)
    t = spatial(2, 1, 4, ranks=[1, 0, 2])
    assert [t.map(th, 0) for th in range(8)] == [[th // 4, 0, th % 4] for th in range(8)]
    # reduce: the threads that held the reduced dims hold replicas.
    r = reduce(spatial(2, 4), dims=[1])
    assert r.shape == [2] and r.num_threads == 8 and r.owners([1]) == [(t, 0) for t in range(4, 8)]
    assert reduce(spatial(2, 4), dims=[1], keepdims=True).shape == [2, 1]
    # concat: lhs's threads and slots major, rhs's minor.
    c = concat(spatial(2), local(3))
    assert c.shape == [2, 3] and c.num_threads == 2 and c.local_size == 3 and c.map(1, 2) == [1, 2]
    assert permute(spatial(2, 4), [1, 0]).map(5, 0) == [1, 1]
    assert reshape(spatial(2, 4), [8]) == spatial(8)
    # Chained composition, as Tilus writes it.
    assert spatial(2, 2).local(2, 1) == spatial(2, 2) * local(2, 1)
    with pytest.raises(tilus.CompileError, match="ranks must order the 2 dims"):
        spatial(2, 2, ranks=[0, 0])
    with pytest.raises(tilus.CompileError, match="cannot reshape"):
        reshape(spatial(2, 3), [3, 2])


@pytest.mark.parametrize("warp_spatial, warp_repeat", [((2, 2), (1, 1, 1)), ((1, 4), (2, 1, 2)), ((4, 1), (1, 2, 1)),
                                                      ((2, 2), (2, 2, 1)), ((2, 4), (3, 2, 2)), ((1, 2), (1, 3, 1))])
def test_mma_dot_config_layouts_run_a_dot(arrays, warp_spatial, warp_repeat):
    """self.cuda.atomic_mma_configs / mma_dot_config give Tilus's layouts (the warps major, the
    repeats minor); a dot annotated with them compiles to mma.sync and computes a @ b. Where
    several warps and several repeats share m or n, they differ from tilus's default plan
    (repeats major) and the lowering record says warps_major."""
    cuda = tilus.Script().cuda
    atom = cuda.atomic_mma_configs.m16n8k16_f16_f32
    assert (atom.m, atom.n, atom.k, atom.vec_k) == (16, 8, 16, 1) and atom.lb.shape == [16, 8]
    cfg = cuda.mma_dot_config(atom, warp_spatial, warp_repeat)
    ours = cuda.resolve_dot_config(float16, float32, m=cfg.m, n=cfg.n, k=cfg.k, warp_m=warp_spatial[0],
                                   warp_n=warp_spatial[1])
    (wsm, wsn), (wrm, wrn, _) = warp_spatial, warp_repeat
    differs = (wsm > 1 and wrm > 1) or (wsn > 1 and wrn > 1)
    assert ((cfg.la, cfg.lb, cfg.lc) == (ours.la, ours.lb, ours.lc)) == (not differs)
    # Tilus's order: warp (i, j) holds the rows [i * wrm * 16, (i + 1) * wrm * 16) of c.
    lane0_rows = {cfg.lc.map(32 * w, 0)[0] for w in range(cfg.num_warps)}
    assert lane0_rows == {i * wrm * 16 for i in range(wsm)}

    class AnnotatedDot(tilus.Script):
        def __call__(self, a: ~float16, b: ~float16, c: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = cfg.num_warps
            ra = self.load_global(self.global_view(a, shape=[cfg.m, cfg.k]), offsets=[0, 0], shape=[cfg.m, cfg.k])
            rb = self.load_global(self.global_view(b, shape=[cfg.k, cfg.n]), offsets=[0, 0], shape=[cfg.k, cfg.n])
            acc = self.register_tensor(dtype=float32, shape=[cfg.m, cfg.n], init=0.0)
            self.dot(ra, rb, acc, out=acc)
            self.store_global(self.global_view(c, shape=[cfg.m, cfg.n]), acc, offsets=[0, 0])
            self.annotate_layout(ra, cfg.la)
            self.annotate_layout(rb, cfg.lb)
            self.annotate_layout(acc, cfg.lc)

    rng = np.random.default_rng(4)
    a = rng.standard_normal((cfg.m, cfg.k)).astype(np.float16)
    b = rng.standard_normal((cfg.k, cfg.n)).astype(np.float16)
    c = arrays.put(np.zeros((cfg.m, cfg.n), np.float32))
    AnnotatedDot()(arrays.put(a), arrays.put(b), c)
    np.testing.assert_allclose(arrays.host(c), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)
    if tilus._C.nvrtc_available():
        ir = AnnotatedDot().ir(a, b, np.zeros((cfg.m, cfg.n), np.float32), arch="sm_90a")["select_instructions"]
        assert "lowering: mma.sync" in ir, ir
        assert ("warps_major" in ir) == differs, ir


def test_atomic_mma_configs_without_an_mma_sync():
    with pytest.raises(AttributeError, match="no mma.sync for int8 operands"):
        tilus.Script().cuda.atomic_mma_configs.m16n8k32_i8_i32
