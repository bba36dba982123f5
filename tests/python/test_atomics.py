"""self.atomic.* (element-wise atomics on global and shared tiles) on both backends against numpy,
with contention between blocks, ragged tiles and the errors."""
import numpy as np
import pytest

import tilus
from tilus import float32, int32

B = 128  # elements per block


class Accumulate(tilus.Script):
    """Every block adds (subtracts, takes the min / max with, exchanges) its tile of x into the same
    `width` elements of acc at `at`, and stores the old values it saw, one row per block."""

    def __init__(self, dtype, op, width=B, at=0):
        super().__init__()
        self.dtype, self.op, self.width, self.at = dtype, op, width, at

    def __call__(self, n: int32, x: tilus.void_p, acc: tilus.void_p, old: tilus.void_p):
        self.attrs.blocks = [tilus.cdiv(n, B)]
        self.attrs.warps = 4
        dt = self.dtype
        v = self.load_global(self.global_view(x, dtype=dt, shape=[n]), offsets=[self.blockIdx.x * B], shape=[B])
        ga = self.global_view(acc, dtype=dt, shape=[self.width])
        prev = getattr(self.atomic, f"global_{self.op}")(ga, v, offsets=[self.at])
        go = self.global_view(old, dtype=dt, shape=[tilus.cdiv(n, B), B])
        self.store_global(go, self.unsqueeze(prev, 0), offsets=[self.blockIdx.x, 0])


def run_accumulate(arrays, dtype, op, x, acc, width=B, at=0):
    n = len(x)
    blocks = -(-n // B)
    old = arrays.put(np.zeros((blocks, B), x.dtype))
    a = arrays.put(acc)
    Accumulate(getattr(tilus, dtype), op, width, at)(n, arrays.put(x), a, old)
    return arrays.host(a), arrays.host(old)


@pytest.mark.parametrize("dtype", ["int32", "uint32", "int64", "uint64"])
def test_global_add_integers_sum_every_block_and_return_the_partial_sums(arrays, dtype):
    rng = np.random.default_rng(1)
    n = 9 * B + 37  # ragged: the last block's tail reads zeros
    x = rng.integers(0, 1000, n).astype(dtype)
    acc, old = run_accumulate(arrays, dtype, "add", x, np.full(B, 5, dtype))
    xp = np.concatenate([x, np.zeros(-n % B, dtype)]).reshape(-1, B)
    np.testing.assert_array_equal(acc, 5 + xp.sum(axis=0, dtype=dtype))
    # Each block saw the sum of the blocks before it in some order: the old values with the final
    # value are the initial value with every old + contribution.
    for j in range(B):
        seen = sorted(old[:, j].tolist() + [int(acc[j])])
        after = sorted([5] + (old[:, j] + xp[:, j]).tolist())
        assert seen == after, f"element {j}: old values {old[:, j]} do not chain to {acc[j]}"


def test_global_sub_and_float_add(arrays):
    rng = np.random.default_rng(2)
    n = 5 * B
    x = rng.integers(-100, 100, n).astype(np.int32)
    acc, _ = run_accumulate(arrays, "int32", "sub", x, np.zeros(B, np.int32))
    np.testing.assert_array_equal(acc, -x.reshape(-1, B).sum(axis=0))
    xf = rng.uniform(-1, 1, n).astype(np.float32)
    accf, _ = run_accumulate(arrays, "float32", "add", xf, np.ones(B, np.float32))
    np.testing.assert_allclose(accf, 1 + xf.reshape(-1, B).astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-5)


def test_global_add_float16(arrays):
    n = 4 * B
    x = (np.arange(n) % 7).astype(np.float16)  # small integers: every order of the sums is exact
    acc, old = run_accumulate(arrays, "float16", "add", x, np.zeros(B, np.float16))
    np.testing.assert_array_equal(acc.astype(np.float32), x.reshape(-1, B).astype(np.float32).sum(axis=0))


@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("dtype", ["int32", "uint32", "int64"])
def test_global_min_max(arrays, op, dtype):
    rng = np.random.default_rng(3)
    n = 6 * B + 5
    lo = 0 if dtype.startswith("u") else -10**6
    x = rng.integers(lo, 10**6, n).astype(dtype)
    start = np.full(B, 17, dtype)
    acc, _ = run_accumulate(arrays, dtype, op, x, start)
    xp = np.concatenate([x, np.zeros(-n % B, dtype)]).reshape(-1, B)
    f = np.minimum if op == "min" else np.maximum
    np.testing.assert_array_equal(acc, f(start, f.reduce(xp, axis=0)))


def test_global_exch_hands_every_value_on_once(arrays):
    n = 6 * B
    x = np.arange(n, dtype=np.int32) + 1
    acc, old = run_accumulate(arrays, "int32", "exch", x, np.zeros(B, np.int32))
    for j in range(B):
        seen = sorted(old[:, j].tolist() + [int(acc[j])])
        assert seen == sorted([0] + x.reshape(-1, B)[:, j].tolist())


def test_global_tile_at_a_ragged_offset_skips_out_of_bounds_elements(arrays):
    # acc has 200 elements; block 0's tile at 150 reaches 278: only [150, 200) are added.
    x = np.arange(1, B + 1, dtype=np.int32)
    acc, old = run_accumulate(arrays, "int32", "add", x, np.full(200, 3, np.int32), width=200, at=150)
    want = np.full(200, 3, np.int32)
    want[150:] += x[:50]
    np.testing.assert_array_equal(acc, want)
    np.testing.assert_array_equal(old[0, :50], 3)
    np.testing.assert_array_equal(old[0, 50:], 0)  # out of bounds: no operation, old value 0


class Claim(tilus.Script):
    """Every block tries once to claim each slot (cas 0 -> its id + 1); the old values say who won."""

    def __call__(self, blocks: int32, slots: ~int32, seen: ~int32):
        self.attrs.blocks = [blocks]
        self.attrs.warps = 4
        me = self.register_tensor(dtype=int32, shape=[B], init=self.blockIdx.x + 1)
        zero = self.register_tensor(dtype=int32, shape=[B], init=0)
        prev = self.atomic.global_cas(self.global_view(slots, shape=[B]), zero, me, sem="acq_rel")
        self.store_global(self.global_view(seen, shape=[blocks, B]), self.unsqueeze(prev, 0),
                          offsets=[self.blockIdx.x, 0])


def test_global_cas_lets_exactly_one_block_claim_each_slot(arrays):
    blocks = 12
    slots = arrays.put(np.zeros(B, np.int32))
    seen = arrays.put(np.full((blocks, B), -1, np.int32))
    Claim()(blocks, slots, seen)
    s, sn = arrays.host(slots), arrays.host(seen)
    for j in range(B):
        winners = np.nonzero(sn[:, j] == 0)[0]
        assert len(winners) == 1, f"slot {j}: blocks {winners} all saw it free"
        assert s[j] == winners[0] + 1
        assert (sn[sn[:, j] != 0, j] == s[j]).all()


class SharedCount(tilus.Script):
    """Shared atomics from every warp: s = 3 * x (added three times), then min with 100."""

    def __call__(self, x: ~int32, y: ~int32, first: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        v = self.load_global(self.global_view(x, shape=[B]), offsets=[0], shape=[B])
        s = self.shared_tensor(dtype=int32, shape=[B])
        self.store_shared(s, self.register_tensor(dtype=int32, shape=[B], init=0))
        got = self.atomic.shared_add(s, v)
        self.atomic.shared_add(s, v)
        self.atomic.shared_add(s, v)
        self.atomic.shared_min(s, self.register_tensor(dtype=int32, shape=[B], init=100))
        self.store_global(self.global_view(y, shape=[B]), self.load_shared(s), offsets=[0])
        self.store_global(self.global_view(first, shape=[B]), got, offsets=[0])


def test_shared_atomics(arrays):
    x = np.arange(B, dtype=np.int32)
    y, first = arrays.put(np.zeros(B, np.int32)), arrays.put(np.full(B, -1, np.int32))
    SharedCount()(arrays.put(x), y, first)
    np.testing.assert_array_equal(arrays.host(y), np.minimum(3 * x, 100))
    np.testing.assert_array_equal(arrays.host(first), 0)


def test_unused_old_values_become_red_and_used_ones_atom():
    src = Accumulate(tilus.int32, "add").source(B, np.zeros(B, np.int32), np.zeros(B, np.int32),
                                                  np.zeros((1, B), np.int32), arch="sm_90a")
    assert "atom.relaxed.gpu.global.add.s32" in src

    class Fire(tilus.Script):
        def __call__(self, acc: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            self.atomic.global_add(self.global_view(acc, shape=[B]),
                                   self.register_tensor(dtype=float32, shape=[B], init=1.0))

    src = Fire().source(np.zeros(B, np.float32), arch="sm_90a")
    assert "red.relaxed.gpu.global.add.f32" in src and "atom." not in src


def test_errors_name_the_instruction_and_the_line():
    class Replicated(tilus.Script):
        def __call__(self, acc: ~int32, out: ~int32):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            v = self.register_tensor(dtype=int32, shape=[8], init=1)
            old = self.atomic.global_add(self.global_view(acc, shape=[8]), v)  # REPLICATED-LINE
            self.store_global(self.global_view(out, shape=[8]), old, offsets=[0])

    with pytest.raises(tilus.CompileError, match=r"test_atomics.py:\d+: .*atomic.global_add: its old values are read"):
        Replicated().source(np.zeros(8, np.int32), np.zeros(8, np.int32), arch="sm_90a")

    class BadType(tilus.Script):
        def __call__(self, acc: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            self.atomic.global_max(self.global_view(acc, shape=[B]),
                                   self.register_tensor(dtype=float32, shape=[B], init=1.0))

    with pytest.raises(tilus.CompileError, match=r"test_atomics.py:\d+: .*atomic max takes 32- or 64-bit integers"):
        BadType().source(np.zeros(B, np.float32), arch="sm_90a")

    class BadSem(tilus.Script):
        def __call__(self, acc: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            self.atomic.global_add(self.global_view(acc, shape=[B]),
                                   self.register_tensor(dtype=float32, shape=[B], init=1.0), sem="seq_cst")

    with pytest.raises(tilus.CompileError, match=r"sem='seq_cst' is not one of"):
        BadSem().source(np.zeros(B, np.float32), arch="sm_90a")


def test_single_thread_atomic_counter(arrays):
    """A ticket counter: one thread per block takes a ticket (old values used, one element)."""

    class Ticket(tilus.Script):
        def __call__(self, blocks: int32, counter: ~int32, tickets: ~int32):
            self.attrs.blocks = [blocks]
            self.attrs.warps = 4
            with self.single_thread():
                one = self.register_tensor(dtype=int32, shape=[1], init=1)
                t = self.atomic.global_add(self.global_view(counter, shape=[1]), one, sem="acq_rel")
                self.store_global(self.global_view(tickets, shape=[blocks]), t, offsets=[self.blockIdx.x])

    blocks = 40
    counter, tickets = arrays.put(np.zeros(1, np.int32)), arrays.put(np.full(blocks, -1, np.int32))
    Ticket()(blocks, counter, tickets)
    assert arrays.host(counter)[0] == blocks
    assert sorted(arrays.host(tickets).tolist()) == list(range(blocks))


class EveryAtomic(tilus.Script):
    """One kernel with every (op, dtype) pair the GPU has, on global and shared tiles, with the old
    values used (atom) and unused (red)."""

    def __init__(self, pairs):
        super().__init__()
        self.pairs = pairs

    def __call__(self, buf: tilus.void_p, out: tilus.void_p):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        for k, (op, name) in enumerate(self.pairs):
            dt = getattr(tilus, name)
            g = self.global_view(buf, dtype=dt, shape=[len(self.pairs), B])
            s = self.shared_tensor(dtype=dt, shape=[B])
            v = self.load_global(g, offsets=[k, 0], shape=[B])
            self.store_shared(s, v)
            args = (v, v) if op == "cas" else (v,)
            old = getattr(self.atomic, f"global_{op}")(g, *args, offsets=[k, 0], sem="acq_rel")
            getattr(self.atomic, f"shared_{op}")(s, *args)
            self.store_global(self.global_view(out, dtype=dt, shape=[len(self.pairs), B]), self.unsqueeze(old, 0),
                              offsets=[k, 0])


ALL_PAIRS = ([(op, t) for op in ("add", "sub") for t in ("int32", "uint32", "int64", "uint64", "float32", "float64",
                                                          "float16", "bfloat16")] +
             [(op, t) for op in ("min", "max") for t in ("int32", "uint32", "int64", "uint64")] +
             [("exch", t) for t in ("int32", "float32", "uint64", "float64")] +
             [("cas", t) for t in ("int16", "float16", "int32", "float32", "int64")])


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
def test_every_atomic_compiles_for_sm90a_and_bfloat16_is_refused_on_sm80():
    buf = np.zeros(len(ALL_PAIRS) * B * 8, np.uint8)
    c = EveryAtomic(ALL_PAIRS).compiled(buf, buf, arch="sm_90a")
    assert c.spill_store_bytes == 0
    sm80 = [p for p in ALL_PAIRS if p[1] != "bfloat16"]
    EveryAtomic(sm80).compiled(buf, buf, arch="sm_80")
    with pytest.raises(tilus.CompileError, match="atomic bfloat16 operations need sm_90"):
        EveryAtomic([("add", "bfloat16")]).compiled(buf, buf, arch="sm_80")


def test_bfloat16_add(arrays, device):
    if device == "cuda":
        import torch
        if torch.cuda.get_device_capability() < (9, 0):
            pytest.skip("bfloat16 atomics need sm_90")
    n = 3 * B
    x = (np.arange(n) % 5).astype(np.float32)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # small integers: exact in bfloat16
    acc, _ = run_accumulate(arrays, "bfloat16", "add", bits, np.zeros(B, np.uint16))
    got = (np.asarray(acc).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(got, x.reshape(-1, B).sum(axis=0))


# --- scatter forms (atomic.*_scatter_*, store_*_scatter) ---------------------------------------

class Scatter(tilus.Script):
    """A [R, C] tile of values scattered along dim 1 into an [m, n] dst: dst[r, idx[r, c]] (op)=
    values[r, c]. Global: one block, the tile at dst's origin (rows past m are skipped). Shared:
    each block scatters into a shared [R, n] copy of its rows, written back afterwards."""

    def __init__(self, op, dtype, shared=False, R=16, C=32):
        super().__init__()
        self.op, self.dtype, self.shared, self.R, self.C = op, dtype, shared, R, C

    def __call__(self, m: int32, n: int, idx: ~int32, x: tilus.void_p, dst: tilus.void_p):
        R, C = self.R, self.C
        self.attrs.blocks = [tilus.cdiv(m, R) if self.shared else 1]
        self.attrs.warps = 4
        r0 = self.blockIdx.x * R
        i = self.load_global(self.global_view(idx, shape=[m, C]), offsets=[r0, 0], shape=[R, C])
        v = self.load_global(self.global_view(x, dtype=self.dtype, shape=[m, C]), offsets=[r0, 0], shape=[R, C])
        g = self.global_view(dst, dtype=self.dtype, shape=[m, n])
        if not self.shared:
            if self.op == "store":
                self.store_global_scatter(g, dim=1, indices=i, values=v)
            else:
                getattr(self.atomic, f"global_scatter_{self.op}")(g, dim=1, indices=i, values=v)
            return
        s = self.shared_tensor(dtype=self.dtype, shape=[R, n])
        self.store_shared(s, self.load_global(g, offsets=[r0, 0], shape=[R, n]))
        self.sync()
        if self.op == "store":
            self.store_shared_scatter(s, dim=1, indices=i, values=v)
        else:
            getattr(self.atomic, f"shared_scatter_{self.op}")(s, dim=1, indices=i, values=v)
        self.sync()
        self.store_global(g, self.load_shared(s), offsets=[r0, 0])


def scatter_reference(op, dst, idx, x):
    out = dst.copy()
    n = dst.shape[1]
    for r in range(dst.shape[0]):
        for c in range(idx.shape[1]):
            j = idx[r, c]
            if not 0 <= j < n:
                continue  # outside dst: skipped
            if op == "add":
                out[r, j] += x[r, c]
            elif op == "sub":
                out[r, j] -= x[r, c]
            elif op == "min":
                out[r, j] = min(out[r, j], x[r, c])
            elif op == "max":
                out[r, j] = max(out[r, j], x[r, c])
            else:
                out[r, j] = x[r, c]
    return out


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("op, dtype", [("add", "float32"), ("add", "int32"), ("sub", "int32"), ("min", "int32"),
                                       ("max", "int32"), ("store", "float32"), ("store", "int32")])
def test_scatter_matches_numpy(arrays, op, dtype, shared):
    m, n, C = 13 if not shared else 37, 40, 32  # ragged rows; indices also below 0 and past n
    rng = np.random.default_rng(9)
    if op == "store":  # distinct columns per row (a plain store under duplicates keeps one of them)
        idx = np.stack([rng.permutation(np.arange(-4, n + 4))[:C] for _ in range(m)]).astype(np.int32)
    else:
        idx = rng.integers(-4, n + 4, size=(m, C)).astype(np.int32)
    x = rng.integers(-50, 50, size=(m, C)).astype(dtype)
    d0 = rng.integers(-20, 20, size=(m, n)).astype(dtype)
    d = arrays.put(d0.copy())  # the CPU backend writes a numpy argument in place
    Scatter(op, getattr(tilus, dtype), shared)(m, n, arrays.put(idx), arrays.put(x), d)
    np.testing.assert_array_equal(arrays.host(d), scatter_reference(op, d0, idx, x))


def test_scatter_ir_and_errors():
    text = str(tilus.trace(Scatter("add", tilus.float32), constants={"n": 40}))
    assert "atomic.global_scatter_add(dst=g, values=v, indices=i, dim=1" in text, text
    text = str(tilus.trace(Scatter("store", tilus.float32, shared=True), constants={"n": 40}))
    assert "store_shared_scatter(dst=s, values=v, indices=i, dim=1" in text, text

    class Bad(tilus.Script):
        def __init__(self, case):
            super().__init__()
            self.case = case

        def __call__(self, x: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            g = self.global_view(x, shape=[8, 8])
            v = self.register_tensor(dtype=float32, shape=[8, 8], init=1.0)
            i = self.register_tensor(dtype=int32, shape=[8, 8], init=0)
            if self.case == "float-indices":
                self.store_global_scatter(g, dim=1, indices=v, values=v)
            elif self.case == "dim":
                self.store_global_scatter(g, dim=2, indices=i, values=v)
            elif self.case == "shape":
                self.atomic.global_scatter_add(g, dim=1, indices=self.register_tensor(dtype=int32, shape=[8, 4], init=0),
                                               values=v)
            elif self.case == "shared-shape":
                s = self.shared_tensor(dtype=float32, shape=[4, 8])
                self.store_shared_scatter(s, dim=1, indices=i, values=v)

    for case, match in [("float-indices", "indices must be a register tensor of integers"),
                        ("dim", "store_global_scatter: dims \\[2\\]: dim 2 is out of range"),
                        ("shape", "indices .* and values .* must have the same shape|shape"),
                        ("shared-shape", "differ in dim 0, which is not the scatter dim 1")]:
        with pytest.raises(tilus.CompileError, match=match):
            tilus.trace(Bad(case))


class PairAdd(tilus.Script):
    """Every block adds its [2, B] float16 tile of x, two neighbouring elements a thread (the
    layout annotated), into the same [2, B] elements of acc at column `at`; the old values unread
    (red)."""

    def __init__(self, dtype, at=0):
        super().__init__()
        self.dtype, self.at = dtype, at

    def __call__(self, blocks: int32, width: int32, x: tilus.void_p, acc: tilus.void_p):
        self.attrs.blocks = [blocks]
        self.attrs.warps = 2
        gx = self.global_view(x, dtype=self.dtype, shape=[blocks * 2, B])
        v = self.load_global(gx, offsets=[self.blockIdx.x * 2, 0], shape=[2, B])
        self.annotate_layout(v, tilus.local(2, 1) * tilus.spatial(1, B // 2) * tilus.local(1, 2))
        self.atomic.global_add(self.global_view(acc, dtype=self.dtype, shape=[2, width]), v, offsets=[0, self.at])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_float_red_goes_by_pairs(arrays, device, dtype):
    """A 16-bit float add whose old values are unread goes by pairs of neighbouring elements (one
    red .f16x2 / .bf16x2 per aligned word: ptxas makes the scalar form a compare-and-swap loop on
    sm_90) where the word is provably aligned and both elements share their bounds (select_instructions
    records `atom red pairs`); else element by element (an odd column offset). Both sum every block
    exactly (small integers)."""
    if dtype == "bfloat16" and device == "cuda":
        import torch
        if torch.cuda.get_device_capability() < (9, 0):
            pytest.skip("bfloat16 atomics need sm_90")
    dt, blocks, width = getattr(tilus, dtype), 5, B + 16
    x = (np.arange(blocks * 2 * B) % 5).astype(np.float32).reshape(blocks * 2, B)
    to16 = (lambda a: a.astype(np.float16)) if dtype == "float16" else \
        (lambda a: (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))
    back = (lambda a: a.astype(np.float32)) if dtype == "float16" else \
        (lambda a: (a.astype(np.uint32) << 16).view(np.float32))
    for at, pairs in ((0, True), (16, True), (1, False)):
        kernel = PairAdd(dt, at)
        args = (blocks, width, np.zeros((blocks * 2, B), x.dtype), np.zeros((2, width), np.float16))
        ir = kernel.ir(*args, arch="sm_90a")["select_instructions"]
        assert ("lowering: atom red pairs" in ir) == pairs and "lowering: atom red" in ir, (at, ir)
        if tilus._C.nvrtc_available():
            src = kernel.source(*args, arch="sm_90a")
            assert (f"add.noftz.{'f16' if dtype == 'float16' else 'bf16'}x2" in src) == pairs, at
            assert "atom." not in src
        acc = arrays.put(to16(np.zeros((2, width))))
        kernel(blocks, width, arrays.put(to16(x)), acc)
        want = np.zeros((2, width), np.float32)
        want[:, at:at + B] = x.reshape(blocks, 2, B).sum(axis=0)
        np.testing.assert_array_equal(back(arrays.host(acc)), want, err_msg=f"at {at}")


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
def test_16_bit_float_red_pairs_are_one_redg_each_in_sass():
    """SASS (sm_90a): the pairs' red is REDG .F16x2, no compare-and-swap loop; the scalar form
    (odd offset) is the loop ptxas makes."""
    from tilus.artifacts import _cuobjdump
    if _cuobjdump() is None:
        pytest.skip("no cuobjdump: the SASS cannot be read")
    args = (5, B + 16, np.zeros((10, B), np.float16), np.zeros((2, B + 16), np.float16))
    paired = PairAdd(tilus.float16, 0).sass(*args, arch="sm_90a")
    assert "REDG.E.ADD.F16x2" in paired and "CAS" not in paired
    assert "CAS" in PairAdd(tilus.float16, 1).sass(*args, arch="sm_90a")
