"""scan / cumsum / cumprod (NVIDIA Tilus's prefix scans; Builder::scan composes them from shared
loads and stores) on both backends against numpy: every op, inclusive and exclusive, both dims of
a tile, ragged tensors (each block scans its own tile), float and integer dtypes, a thread group
smaller than the block, `out=`, and the errors."""
import numpy as np
import pytest

import tilus
from tilus import int32
from tilus._C import CompileError

BM, BN = 16, 64

IDENTITY = {"add": 0, "mul": 1, "max": -np.inf, "min": np.inf, "and": -1, "or": 0, "xor": 0}
ACCUMULATE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum, "and": np.bitwise_and,
              "or": np.bitwise_or, "xor": np.bitwise_xor}


class TileScan(tilus.Script):
    """y[tile] = scan(x[tile]) for each [BM, BN] tile (one per block) of an [m, n] tensor."""

    def __init__(self, dtype, op, dim, exclusive, how="scan", group=None):
        super().__init__()
        self.dtype, self.op, self.dim, self.exclusive, self.how, self.group = dtype, op, dim, exclusive, how, group

    def __call__(self, m: int32, n: int32, x: tilus.void_p, y: tilus.void_p):
        self.attrs.blocks = [tilus.cdiv(m, BM), tilus.cdiv(n, BN)]
        self.attrs.warps = 4
        gx = self.global_view(x, dtype=self.dtype, shape=[m, n])
        gy = self.global_view(y, dtype=self.dtype, shape=[m, n])
        at = [self.blockIdx.x * BM, self.blockIdx.y * BN]
        if self.group is None:
            self.body(gx, gy, at)
        else:
            with self.thread_group(0, self.group):
                self.body(gx, gy, at)

    def body(self, gx, gy, at):
        v = self.load_global(gx, offsets=at, shape=[BM, BN])
        if self.how == "scan":
            r = self.scan(v, dim=self.dim, op=self.op, exclusive=self.exclusive)
        elif self.how == "out":
            r = self.register_tensor(dtype=self.dtype, shape=[BM, BN])
            self.scan(v, dim=self.dim, op=self.op, exclusive=self.exclusive, out=r)
        else:
            r = getattr(self, self.how)(v, dim=self.dim, exclusive=self.exclusive)
        self.store_global(gy, r, offsets=at)


def reference(x, op, dim, exclusive):
    m, n = x.shape
    out = np.empty_like(x)
    for i in range(0, m, BM):
        for j in range(0, n, BN):
            t = x[i:i + BM, j:j + BN]
            s = ACCUMULATE[op].accumulate(t, axis=dim)
            if exclusive:
                ident = IDENTITY[op]
                if np.issubdtype(x.dtype, np.integer) and op in ("max", "min"):
                    ident = np.iinfo(x.dtype).min if op == "max" else np.iinfo(x.dtype).max
                ident = np.full_like(np.take(s, [0], axis=dim), ident)
                s = np.concatenate([ident, np.delete(s, -1, axis=dim)], axis=dim)
            out[i:i + BM, j:j + BN] = s
    return out


CASES = [("float32", op) for op in ("add", "mul", "max", "min")] + \
        [("int32", op) for op in ("add", "max", "min", "and", "or", "xor")]


# Each op inclusive down the tile's rows and exclusive along them; "add" in the other two ways too.
DIMS = [(0, False), (1, True)]


@pytest.mark.parametrize("dtype, op, dim, exclusive",
                         [c + d for c in CASES for d in DIMS] + [(t, "add") + d for t in ("float32", "int32")
                                                                 for d in ((1, False), (0, True))])
def test_scan_matches_numpy(arrays, dtype, op, dim, exclusive):
    m, n = 37, 150  # ragged: partial tiles in both dims
    if op == "mul":  # products of ±1 and ±2 stay exact in float32 over 16 or 64 terms only for ±1
        h = arrays.rng.choice(np.array([-1.0, 1.0], dtype), size=(m, n))
    elif dtype == "int32":
        h = arrays.rng.integers(-1000, 1000, size=(m, n)).astype(dtype)
    else:
        h = arrays.rng.integers(-8, 9, size=(m, n)).astype(dtype)  # exact sums
    x, y = arrays.put(h), arrays.empty((m, n), dtype)
    TileScan(getattr(tilus, dtype), op, dim, exclusive)(m, n, x, y)
    np.testing.assert_array_equal(arrays.host(y), reference(h, op, dim, exclusive))


@pytest.mark.parametrize("how", ["cumsum", "cumprod", "out"])
def test_cumsum_cumprod_out_and_a_thread_group(arrays, how):
    m, n = 40, 70
    h = arrays.rng.choice(np.array([-1.0, 1.0, 2.0], "float32"), size=(m, n)) if how != "cumprod" else \
        arrays.rng.choice(np.array([-1.0, 1.0], "float32"), size=(m, n))
    op = "mul" if how == "cumprod" else "add"
    for group in (None, 64):
        x, y = arrays.put(h), arrays.empty((m, n))
        TileScan(tilus.float32, op, 1, False, how, group)(m, n, x, y)
        np.testing.assert_array_equal(arrays.host(y), reference(h, op, 1, False), err_msg=f"group {group}")


def test_scan_errors():
    def trace(**kw):
        args = dict(dtype=tilus.float32, op="add", dim=1, exclusive=False)
        args.update(kw)
        return tilus.trace(TileScan(**args))

    with pytest.raises(CompileError, match="scan: op must be one of add, mul, max, min, and, or, xor; got 'sum'"):
        trace(op="sum")
    with pytest.raises(CompileError, match="scan: op 'xor' needs integer or bool elements, x is register float32"):
        trace(op="xor")
    with pytest.raises(CompileError, match=r"scan: dims \[2\]: dim 2 is out of range for register float32\[16, 64\]"):
        trace(dim=2)
    with pytest.raises(CompileError, match="test_scan.py:[0-9]+"):
        trace(op="sum")
