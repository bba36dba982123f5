"""Control-flow normalization: each construct, nested, with break/continue; traced once into IR
scopes (checked in the printed IR) and run on the CPU backend (checked against Python)."""
import numpy as np
import pytest

import tilus
from tilus import int32

from conftest import HAS_CPU

needs_cpu = pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")


def run_cpu(kernel, *args):
    kernel(*args)
    return args


class Loops(tilus.Script):
    """out[0] = sum over i < n of (i if i % 3 else 2 i), skipping i == 5, stopping at i == limit;
    out[1] = number of while iterations halving m; out[2] = static unrolled sum."""

    def __call__(self, n: int32, m: int32, limit: int32, out: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        total = self.register_tensor(dtype=int32, shape=[1], init=0)
        for i in range(n):
            if i == 5:
                continue
            if i == limit:
                break
            if i % 3 == 0:
                total = total + 2 * i
            elif i % 3 == 1:
                total = total + i
            else:
                total = total + i
        halvings = self.declare("halvings", int32, 0)
        v = self.declare("v", int32, m)
        while v > 1:
            v = v // 2
            halvings = halvings + 1
        static = 0
        for s in tilus.static_range(4):  # Python loop: unrolled while tracing
            if s == 3:
                break  # a Python break of a Python loop
            static = static + s * 10
        for s in [100, 200]:
            static += s
        g = self.global_view(out, shape=[3])
        self.store_global(g, total, offsets=[0])
        self.store_global(g, self.register_tensor(dtype=int32, shape=[1], init=halvings), offsets=[1])
        self.store_global(g, self.register_tensor(dtype=int32, shape=[1], init=static), offsets=[2])


def reference(n, m, limit):
    total = 0
    for i in range(n):
        if i == 5:
            continue
        if i == limit:
            break
        total += 2 * i if i % 3 == 0 else i
    h, v = 0, m
    while v > 1:
        v //= 2
        h += 1
    return [total, h, 0 + 10 + 20 + 100 + 200]


def test_loops_become_ir_scopes():
    text = str(tilus.trace(Loops()))
    assert text.count("for ") == 1  # the range loop; static_range and the list loop are unrolled
    assert "while " in text and "break" in text and "continue" in text
    assert text.count("if ") >= 4 and "else" in text


@needs_cpu
@pytest.mark.parametrize("n,m,limit", [(0, 1, 100), (4, 7, 100), (13, 1000, 100), (40, 33, 17), (6, 2, 6)])
def test_loops_run_like_python(n, m, limit):
    out = np.zeros(3, dtype=np.int32)
    Loops()(n, m, limit, out)
    assert out.tolist() == reference(n, m, limit)


class Nested(tilus.Script):
    """out[i, j] over a 2-D loop nest with a symbolic if inside, an unrolled inner loop and a
    Python-level branch on a constant."""

    def __init__(self, flip):
        super().__init__()
        self.flip = flip

    def __call__(self, rows: int32, out: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        g = self.global_view(out, shape=[rows, 8])
        for i in range(rows):
            for j in self.range(8, unroll=True):
                v = i * 8 + j
                if self.flip:  # a Python condition: only one branch is traced
                    v = -v
                if (i + j) % 2 == 0:
                    self.store_global(g, self.register_tensor(dtype=int32, shape=[1, 1], init=v), offsets=[i, j])
                else:
                    self.store_global(g, self.register_tensor(dtype=int32, shape=[1, 1], init=0), offsets=[i, j])


@needs_cpu
@pytest.mark.parametrize("flip", [False, True])
def test_nested_loops_and_python_branches(flip):
    rows = 5
    out = np.full((rows, 8), 99, dtype=np.int32)
    Nested(flip)(rows, out)
    want = np.array([[((i * 8 + j) * (-1 if flip else 1)) if (i + j) % 2 == 0 else 0 for j in range(8)]
                     for i in range(rows)])
    assert (out == want).all()
    text = str(tilus.trace(Nested(flip)))
    assert text.count("for ") == 2 and "unroll" in text


class PythonBreakUnderSymbolicIf(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        for s in tilus.static_range(3):
            if n > s:
                break  # ERROR: a Python loop cannot stop on a run-time condition


def test_python_break_under_symbolic_condition_is_an_error():
    with pytest.raises(tilus.CompileError, match=r"test_control_flow.py:\d+: `break` of a Python loop"):
        tilus.trace(PythonBreakUnderSymbolicIf())


class ScalarReassignedInLoop(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        acc = n * 0  # a symbolic scalar reassigned in the loop: declared mutable automatically
        for i in range(n):
            acc = acc + i
        g = self.global_view(out, shape=[1])
        self.store_global(g, self.register_tensor(dtype=int32, shape=[1], init=acc), offsets=[0])


@needs_cpu
def test_symbolic_scalars_reassigned_in_loops_are_mutable():
    out = np.zeros(1, dtype=np.int32)
    ScalarReassignedInLoop()(10, out)
    assert out[0] == 45
    assert "declare" in str(tilus.trace(ScalarReassignedInLoop())) or "acc =" in str(tilus.trace(ScalarReassignedInLoop()))


class PythonValueReassignedInLoop(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        count = 0
        for i in range(n):
            count = count + 1  # ERROR: fixed at trace time


def test_python_value_reassigned_in_ir_loop_is_an_error():
    with pytest.raises(tilus.CompileError, match=r"test_control_flow.py:\d+: 'count' was bound outside"):
        tilus.trace(PythonValueReassignedInLoop())


class ConditionalExpressions(tilus.Script):
    """`a if c else b`: a kernel select where c is a kernel condition (NVIDIA Tilus's flash
    attention v3 releases its semaphore with `y + 1 if (y + 1) * split < end else 0`), Python's
    own where c is a Python value (only the chosen side runs)."""

    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = [3]
        self.attrs.warps = 1
        x = self.blockIdx.x
        first = x + 5 if x * 3 < n else 0
        second = 7 if n > 100 else first
        third = 2 if self.attrs.warps == 1 else self.no_such_method()
        scale = 1.5 if n > 4 else 2  # a float and an int: the select is a float
        value = self.register_tensor(dtype=int32, shape=[1], init=(second + third) * 10 + self.cast_int(scale))
        self.store_global(self.global_view(out, shape=[3]), value, offsets=[x])

    def cast_int(self, v):
        return tilus.cast(v * 2, int32)


@needs_cpu
@pytest.mark.parametrize("n", [2, 5, 500])
def test_conditional_expressions_on_kernel_conditions_select(n):
    out = np.zeros(3, np.int32)
    ConditionalExpressions()(n, out)
    want = []
    for x in range(3):
        first = x + 5 if x * 3 < n else 0
        second = 7 if n > 100 else first
        want.append((second + 2) * 10 + int((1.5 if n > 4 else 2) * 2))
    assert out.tolist() == want


def test_conditional_expression_on_tensors_names_where():
    class TensorChoice(tilus.Script):
        def __call__(self, n: int32, out: ~int32):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            a = self.register_tensor(dtype=int32, shape=[4], init=1)
            b = a if n > 3 else a * 2
            self.store_global(self.global_view(out, shape=[4]), b, offsets=[0])

    with pytest.raises(tilus.CompileError) as e:
        TensorChoice().ir(4, np.zeros(4, np.int32))
    msg = str(e.value)
    assert "test_control_flow.py:" in msg and "`a if c else b`" in msg and "self.where(c, a, b)" in msg, msg


class SelectInALambda(tilus.Script):
    """A conditional expression in a lambda of the body (a register tensor's init) is a select."""

    def __call__(self, out: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        upper = self.register_tensor(dtype=int32, shape=[4, 4], init=lambda i, j: i * 4 + j if i <= j else -1)
        self.store_global(self.global_view(out, shape=[4, 4]), upper, offsets=[0, 0])


@needs_cpu
def test_a_conditional_expression_in_a_lambda_selects():
    out = np.zeros((4, 4), np.int32)
    SelectInALambda()(out)
    i, j = np.indices((4, 4))
    assert (out == np.where(i <= j, i * 4 + j, -1)).all()


class Rotate(tilus.Script):
    """Register tensors a, b, c (rows 0, 1, 2 of x) reassigned by tuple in a loop of n trips:
    `a, b = b, a` (swap) or `a, b, c = c, a, b` (rotate); out holds a, b, c after the loop."""

    def __init__(self, how):
        super().__init__()
        self.how = how

    def __call__(self, n: int32, x: ~int32, out: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        gx = self.global_view(x, shape=[3, 4])
        a = self.load_global(gx, offsets=[0, 0], shape=[1, 4])
        b = self.load_global(gx, offsets=[1, 0], shape=[1, 4])
        c = self.load_global(gx, offsets=[2, 0], shape=[1, 4])
        for _ in range(n):
            if self.how == "swap":
                a, b = b, a
            elif self.how == "rotate":
                a, b, c = c, a, b
            else:  # the usual pipeline shift: no value is overwritten before it is read
                a, b = b, c
        go = self.global_view(out, shape=[3, 4])
        self.store_global(go, a, offsets=[0, 0])
        self.store_global(go, b, offsets=[1, 0])
        self.store_global(go, c, offsets=[2, 0])


@needs_cpu
@pytest.mark.parametrize("how", ["swap", "rotate", "shift"])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
def test_tuple_assignment_in_a_loop_takes_the_values_of_before(how, n):
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    out = np.zeros((3, 4), np.int32)
    run_cpu(Rotate(how), n, x, out)
    rows = [0, 1, 2]
    for _ in range(n):  # the same statement in Python
        if how == "swap":
            rows[0], rows[1] = rows[1], rows[0]
        elif how == "rotate":
            rows[0], rows[1], rows[2] = rows[2], rows[0], rows[1]
        else:
            rows[0], rows[1] = rows[1], rows[2]
    np.testing.assert_array_equal(out, x[rows])


def test_tuple_assignment_copies_only_what_an_earlier_target_overwrites():
    def loop_body(how):
        text = str(tilus.trace(Rotate(how)))
        return text[text.index("for "):text.index("}")]
    assert loop_body("shift").count("assign(") == 2  # b into a, then c into b: nothing copied
    assert loop_body("swap").count("assign(") == 3  # a copied before b goes into it
    assert loop_body("rotate").count("assign(") == 5  # a and b copied before c and a go into them
