"""Layout conversions (issue 17): where two uses of a register tensor need different thread
mappings, layout inference copies it through shared memory at one of them instead of failing;
the IR after infer_layouts shows the copy (store_shared / load_shared of a `<name>_convert`
buffer) and the barrier pass orders it. Each kernel runs on every backend present and is
checked against numpy."""
import re

import numpy as np
import pytest

import tilus
from tilus import float16, float32, int32

NVRTC = tilus._C.nvrtc_available()


class DotAndAnnotatedProduct(tilus.Script):
    """x is the `a` operand of a dot (mma.sync fragments) and, cast to float32, a factor of an
    elementwise product with a tile annotated with another mapping: one of the two uses reads a
    converted copy. With `steps` > 1 the whole thing repeats in a loop over row blocks (the
    buffer is reused every trip: the barrier pass must order the next store after this load)."""

    def __init__(self, steps=1):
        super().__init__()
        self.steps = steps

    def __call__(self, a: ~float16, b: ~float16, w: ~float32, c: ~float32, d: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        ga = self.global_view(a, shape=[64 * self.steps, 32])
        gw = self.global_view(w, shape=[64 * self.steps, 32])
        gc = self.global_view(c, shape=[64 * self.steps, 48])
        gd = self.global_view(d, shape=[64 * self.steps, 32])
        y = self.load_global(self.global_view(b, shape=[32, 48]), offsets=[0, 0], shape=[32, 48])
        for i in range(self.steps):
            x = self.load_global(ga, offsets=[i * 64, 0], shape=[64, 32])
            acc = self.register_tensor(dtype=float32, shape=[64, 48], init=0.0)
            self.dot(x, y, acc, out=acc)
            self.store_global(gc, acc, offsets=[i * 64, 0])
            ww = self.load_global(gw, offsets=[i * 64, 0], shape=[64, 32])
            self.store_global(gd, x.to(float32) * ww, offsets=[i * 64, 0])
            self.annotate_layout(ww, tilus.spatial(32, 4).local(2, 8))


def _inputs(steps, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((64 * steps, 32)).astype(np.float16)
    b = rng.standard_normal((32, 48)).astype(np.float16)
    w = rng.standard_normal((64 * steps, 32)).astype(np.float32)
    return a, b, w


@pytest.mark.parametrize("steps", [1, 3])
def test_conflicting_uses_get_a_conversion(arrays, steps):
    a, b, w = _inputs(steps)
    c = arrays.put(np.zeros((64 * steps, 48), np.float32))
    d = arrays.put(np.zeros((64 * steps, 32), np.float32))
    DotAndAnnotatedProduct(steps)(arrays.put(a), arrays.put(b), arrays.put(w), c, d)
    np.testing.assert_allclose(arrays.host(c), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)
    np.testing.assert_array_equal(arrays.host(d), a.astype(np.float32) * w)


@pytest.mark.skipif(not NVRTC, reason="NVRTC is not available")
def test_the_conversion_in_the_ir():
    """The pass output (golden lines): the copy sits right before the product, the copy takes the
    annotated mapping of `ww`, x keeps the dot's fragments, and the CUDA source orders the store
    and the load with a barrier."""
    a, b, w = _inputs(1)
    args = (a, b, w, np.zeros((64, 48), np.float32), np.zeros((64, 32), np.float32))
    ir = DotAndAnnotatedProduct(1).ir(*args, arch="sm_90a")["infer_layouts"]
    lines = [re.sub(r"\s+", " ", ln.strip()) for ln in ir.splitlines()]
    at = next(i for i, ln in enumerate(lines) if "_convert = shared_tensor()" in ln)
    buf = lines[at].split(" = ")[0]
    src = re.search(r"src=(\w+)\)", lines[at + 1])
    cast = src.group(1) if src else None
    assert lines[at] == (f"{buf} = shared_tensor() : shared float32[64, 32] shared_layout(shape=[64, 32], "
                         "strides=[32, 1], swizzle=(3, 2, 3))"), lines[at]
    assert lines[at - 1].startswith(f"{cast} = cast(x=x) : register float32[64, 32]"), lines[at - 1]
    assert lines[at + 1] == f"store_shared(dst={buf}, src={cast})"
    annotated = "layout(shape=[64, 32], modes=[32, 2, 4, 8], spatial=[0, 2], local=[1, 3])"
    assert lines[at + 2] == f"{buf}ed = load_shared(src={buf}) : register float32[64, 32] {annotated}", lines[at + 2]
    assert lines[at + 3].startswith(f"mul = mul(inputs=[{buf}ed, ww]") and lines[at + 3].endswith(annotated)
    assert lines[at + 4] == f"free_shared(tensor={buf})"
    x_line = next(ln for ln in lines if ln.startswith("x = load_global"))
    assert "modes=[2, 2, 2, 8, 4, 4, 2]" in x_line  # the mma.sync fragments of the dot's `a`
    barriers = DotAndAnnotatedProduct(1).ir(*args, arch="sm_90a")["insert_barriers"]
    body = barriers[barriers.index(f"store_shared(dst={buf}"):barriers.index(f"{buf}ed = load_shared")]
    assert "sync" in body, body


class AnnotatedTileIntoADot(tilus.Script):
    """A float32 tile loaded with an annotated mapping, cast to float16 and used as a dot's `a`:
    the cast defines a tensor the dot needs in its fragments, so the cast writes a copy of its
    own (`<name>_unconverted`, in the annotated mapping) and the conversion follows it."""

    def __call__(self, a: ~float32, b: ~float16, c: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.load_global(self.global_view(a, shape=[64, 32]), offsets=[0, 0], shape=[64, 32])
        y = self.load_global(self.global_view(b, shape=[32, 48]), offsets=[0, 0], shape=[32, 48])
        acc = self.register_tensor(dtype=float32, shape=[64, 48], init=0.0)
        self.dot(x.to(float16), y, acc, out=acc)
        self.store_global(self.global_view(c, shape=[64, 48]), acc, offsets=[0, 0])
        self.annotate_layout(x, tilus.spatial(32, 4).local(2, 8))


def test_a_conversion_after_the_defining_instruction(arrays):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((32, 48)).astype(np.float16)
    c = arrays.put(np.zeros((64, 48), np.float32))
    AnnotatedTileIntoADot()(arrays.put(a), arrays.put(b), c)
    ref = a.astype(np.float16).astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(arrays.host(c), ref, rtol=1e-3, atol=1e-3)
    if NVRTC:
        ir = AnnotatedTileIntoADot().ir(a, b, np.zeros((64, 48), np.float32), arch="sm_90a")["infer_layouts"]
        lines = [re.sub(r"\s+", " ", ln.strip()) for ln in ir.splitlines()]
        at = next(i for i, ln in enumerate(lines) if "_unconverted = cast(x=x)" in ln)
        assert "modes=[32, 2, 4, 8]" in lines[at], lines[at]  # the annotated mapping of x
        name = lines[at].split("_unconverted = ")[0]
        assert lines[at + 2] == f"store_shared(dst={name}_convert, src={name}_unconverted)", lines[at + 2]
        assert f" = load_shared(src={name}_convert) : register float16[64, 32]" in lines[at + 3], lines[at + 3]
        assert "modes=[2, 2, 2, 8, 4, 4, 2]" in lines[at + 3]  # the dot's `a` fragments


def test_two_annotations_cannot_be_converted():
    """Two annotations of one tensor disagree: no instruction reads it between them, so it is
    still an error naming both."""

    class TwoAnnotations(tilus.Script):
        def __call__(self, a: ~float32, c: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            x = self.load_global(self.global_view(a, shape=[64, 32]), offsets=[0, 0], shape=[64, 32])
            self.store_global(self.global_view(c, shape=[64, 32]), x, offsets=[0, 0])
            self.annotate_layout(x, tilus.spatial(32, 4).local(2, 8))
            self.annotate_layout(x, tilus.local(2, 8).spatial(32, 4))

    with pytest.raises(tilus.CompileError, match=r"'x' needs .* for annotate_layout at .* and .* for annotate_layout "
                                                 r"at .*no conversion through shared memory can go between them"):
        TwoAnnotations().ir(np.zeros((64, 32), np.float32), np.zeros((64, 32), np.float32), arch="sm_90a")


def test_an_accumulator_annotated_with_another_mapping(arrays):
    """A dot accumulating in a loop into a tile annotated with a mapping that is not the dot's:
    the dot reads a converted copy of the accumulator and its result is converted back every
    trip; the sum is still a @ b twice."""

    class Accumulate(tilus.Script):
        def __call__(self, a: ~float16, b: ~float16, c: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            x = self.load_global(self.global_view(a, shape=[64, 32]), offsets=[0, 0], shape=[64, 32])
            y = self.load_global(self.global_view(b, shape=[32, 64]), offsets=[0, 0], shape=[32, 64])
            acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
            for _ in range(2):
                self.dot(x, y, acc, out=acc)
            self.store_global(self.global_view(c, shape=[64, 64]), acc, offsets=[0, 0])
            self.annotate_layout(acc, tilus.spatial(16, 8).local(4, 8))

    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 32)).astype(np.float16)
    b = rng.standard_normal((32, 64)).astype(np.float16)
    c = arrays.put(np.zeros((64, 64), np.float32))
    Accumulate()(arrays.put(a), arrays.put(b), c)
    np.testing.assert_allclose(arrays.host(c), 2 * (a.astype(np.float32) @ b.astype(np.float32)), rtol=1e-3,
                               atol=1e-3)
    if NVRTC:
        ir = Accumulate().ir(a, b, np.zeros((64, 64), np.float32), arch="sm_90a")["infer_layouts"]
        assert ir.count("_convert = shared_tensor()") >= 1, ir


class TransposedStore(tilus.Script):
    """c = a.T for one [rows, 128] tile of a (f16): the transposed tile gives each thread a column
    run, which a store writes element by element unless it is widened through shared memory
    (`branch`: the store inside a branch, where it stays narrow)."""

    def __init__(self, rows=64, branch=False):
        super().__init__()
        self.rows, self.branch = rows, branch

    def __call__(self, go: int32, a: ~float16, c: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        ga = self.global_view(a, shape=[self.rows, 128])
        gc = self.global_view(c, shape=[128, self.rows])
        t = self.transpose(self.load_global(ga, offsets=[0, 0], shape=[self.rows, 128]))
        if self.branch:
            if go > 0:
                self.store_global(gc, t, offsets=[0, 0])
        else:
            self.store_global(gc, t, offsets=[0, 0])


# 16 KB at the top level: widened; 4 KB, or inside a branch: stored element by element.
@pytest.mark.parametrize("rows,branch,widened", [(64, False, True), (16, False, False), (64, True, False)])
def test_narrow_stores_are_widened_through_shared_memory(arrays, rows, branch, widened):
    kernel = TransposedStore(rows, branch)
    ir = str(tilus.trace(kernel).lowered("sm_90a"))
    store = re.search(r"store_global\(dst=\w+, src=(\w+)", ir).group(1)
    assert store.endswith("_converted") == widened, ir
    if widened:  # 16 KB through the buffer, read back in 16-byte vectors
        assert re.search(r"_converted = load_shared\(.*\n\s+lowering: simt vector=8", ir), ir
    assert "_convert" not in str(tilus.trace(kernel).lowered("cpu"))  # GPU targets only
    ha = np.random.default_rng(0).uniform(-1, 1, (rows, 128)).astype(np.float16)
    c = arrays.put(np.zeros((128, rows), np.float16))
    kernel(1, arrays.put(ha), c)
    np.testing.assert_array_equal(arrays.host(c), ha.T)
