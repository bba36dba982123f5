"""The helpers that a Script body normalized by transform.py calls while it is traced
(``_Runtime``, visible to the body as ``__tilus_rt``): symbolic conditions, IR loops and
branches, the merge of names bound in the branches of a symbolic ``if``, rebinding names inside
IR scopes, Python loops counted while tracing, and ``math`` of kernel scalars (``_MATH``)."""
import builtins
import math
import warnings

from . import _C
from ._C import CompileError, DataType, Expr
from .instructions._args import MappedBarrier
from .tracing import (RegisterTensor, TensorBase, TilusWarning, Unusable, _builder, _declare_kernel_variable, _describe,
                      _here, _is_scalar, _tracing, _where)


def _named(b, name, value, loc):
    """A symbolic scalar bound to a Python name becomes a named `let` (computed once, shown by
    name in the IR); a tensor takes the name of the first variable it is bound to; everything
    else is bound as is."""
    if isinstance(value, Expr) and not isinstance(value, _C.Var) and not value.is_const():
        return b.let(name, value, loc)
    _name_tensor(b, name, value)
    return value


def _name_tensor(b, name, value):
    if isinstance(value, TensorBase) and value.t.id not in _tracing.named:
        _tracing.named.add(value.t.id)
        b.name(value.t, name)


def _unbound(v):
    return v is _Runtime.UNBOUND or isinstance(v, Unusable)


def _is_number(v):
    return isinstance(v, (bool, int, float))


def _symbolic_scalar(v):
    return isinstance(v, Expr) or _is_number(v)


class _If:
    """A symbolic `if` being traced: the names its branches bind, and their merge after it."""

    def __init__(self, line, names, merged, has_else, pre):
        self.loc = (_here()[0], line)
        self.names, self.merged, self.has_else = names, set(merged), has_else
        self.pre = dict(zip(names, pre))
        # the names' values as the then branch starts
        self.pre_values = tuple(Unusable(n, "is not bound yet") if v is _Runtime.UNBOUND else v
                                for n, v in zip(names, pre))
        self.then = {}
        self.joined = {}  # merged name -> the kernel variable or register tensor before the if

    def end_then(self, values):
        b = _builder()
        self.then = dict(zip(self.names, values))
        if self.has_else:
            for n in self.names:
                v = self.then[n]
                if n in self.merged and not _unbound(v) and v is not self.pre[n]:
                    self._join_symbolic(b, n, v)
        b.end_if()
        if self.has_else:  # the else branch starts from the values before the if
            return tuple(self._restored(n) for n in self.names)
        return tuple(self._after(n, self.then[n], self.pre[n]) for n in self.names)

    def begin_else(self, line):
        _builder().begin_else((self.loc[0], line))

    def end_else(self, values):
        b = _builder()
        out = []
        for n, v in zip(self.names, values):
            first = self.then[n]
            if n in self.merged and not _unbound(first) and not _unbound(v):
                out.append(self._join(b, n, first, v))
            else:
                out.append(self._after(n, first, v))
        b.end_else()
        for n, v in zip(self.names, out):
            if not _unbound(v) and n in self.joined:
                _tracing.bound[n] = b.depth()
        return tuple(out)

    def _restored(self, n):
        pre = self.pre[n]
        if _unbound(pre):
            return Unusable(n, f"is not bound in this branch (the other branch of the `if` at line {self.loc[1]} "
                               "binds it)")
        return pre

    def _after(self, n, first, second):
        """The value after the if of a name that is not merged: the same in both branches, or
        unusable when bound in only one of them (or differently, and not read after the if)."""
        pre = self.pre[n]
        if _unbound(first) and _unbound(second):
            return Unusable(n, f"is not bound (no branch of the `if` at line {self.loc[1]} bound it)")
        if first is second:
            return first
        if not _unbound(pre) and (first is pre or second is pre):
            return second if first is pre else first
        _tracing.bound.pop(n, None)
        where = "in only one branch" if _unbound(first) or _unbound(second) else "differently in the branches"
        return Unusable(n, f"is bound {where} of the `if` at line {self.loc[1]}, whose condition is only known when "
                           "the kernel runs, so it has no value after it: bind it in both branches, or before the if")

    def _join_symbolic(self, b, n, v):
        """At the end of the then branch: the variable (or tensor) before the if that holds a
        kernel value `v` bound in it."""
        loc = self.loc
        if isinstance(v, RegisterTensor):
            t = RegisterTensor(b.register_tensor_outside(v.t.dtype, [int(x) for x in v.t.shape], loc, n))
            _tracing.named.add(t.t.id)
            b.assign_tensor(t.t, v.t, loc)
            self.joined[n] = t
        elif isinstance(v, Expr):
            var = _declare_kernel_variable(b, n, v.dtype, None, loc, outside=True)
            b.assign(var, v, loc)
            self.joined[n] = var

    def _join(self, b, n, first, second):
        """At the end of the else branch: the merged value of `n`, bound to `first` in the then
        branch and to `second` here."""
        joined = self.joined.get(n)
        if joined is None:
            if first is second or (type(first) is type(second) and not isinstance(first, (Expr, TensorBase))
                                   and _same(first, second)):
                return first  # the same value in both branches
            if not (_is_number(first) and _symbolic_scalar(second)):
                raise self._mismatch(n, first, second, ": only scalars and register tensors can take a value that "
                                                       "depends on a condition known when the kernel runs")
            # then: the initial value (a constant, valid before the if); else: assigned here
            dtype = _C.select(True, _C.Expr(first), _C.Expr(second)).dtype
            joined = _declare_kernel_variable(b, n, dtype, first, self.loc, outside=True)
        elif isinstance(joined, RegisterTensor):
            if not isinstance(second, RegisterTensor) or second.t.type_str() != joined.t.type_str():
                raise self._mismatch(n, joined, second)
            b.assign_tensor(joined.t, second.t, self.loc)
            return joined
        elif not _symbolic_scalar(second):
            raise self._mismatch(n, first, second)
        elif joined.dtype.is_integer() and (isinstance(second, float) or
                                          isinstance(second, Expr) and second.dtype.is_float()):
            raise self._mismatch(n, first, second, ": cast one of them so that both have one type")
        b.assign(joined, second, self.loc)
        return joined

    def _mismatch(self, n, first, second, why=""):
        return CompileError(f"{_where(self.loc)}'{n}' is {_describe(first)} in one branch of the `if` at line "
                            f"{self.loc[1]} and {_describe(second)} in the other{why}")


def _same(a, b):
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - values whose == is not a bool are not the same
        return False


class _Trips:
    """Counts the iterations of a Python loop while tracing; stops one that does not end."""
    __slots__ = ("what", "line", "n")

    def __init__(self, what, line):
        self.what, self.line, self.n = what, line, 0

    def tick(self):
        self.n += 1
        if self.n > _Runtime.max_trace_trips:
            raise CompileError(
                f"{_here()[0]}:{self.line}: this `{self.what}` loop ran {_Runtime.max_trace_trips} times while the "
                f"kernel was traced and had not ended: its {'condition' if self.what == 'while' else 'iterable'} is a "
                "Python value, so it runs at trace time (unrolling its body into the kernel); a loop that runs on the "
                "device needs a condition known only at run time, or range(...)")


class _Runtime:
    UNBOUND = Unusable("<name>", "is not bound")
    max_trace_trips = 1_000_000  # iterations of one Python loop while tracing before it is an error

    @staticmethod
    def kernel_true():
        return Expr(True)

    @staticmethod
    def not_(v):
        if isinstance(v, Unusable):
            raise v.error()
        if isinstance(v, Expr):
            return _C.logical_not(v if v.dtype.is_bool() else v != 0)
        return not v

    @staticmethod
    def symbolic(v):
        if isinstance(v, Unusable):
            raise v.error()
        if isinstance(v, TensorBase):
            raise CompileError(f"{_where(_here())}a tensor ({v.t.type_str()}) used as a condition; "
                               "reduce it to a scalar first")
        return isinstance(v, Expr)

    @staticmethod
    def loop(script, name, line, *args, unroll=None, num_stages=None, warp_specialize=False, persistent=False,
             epilogue=None):
        loc = (_here()[0], line)
        if not 1 <= len(args) <= 3:
            raise CompileError(f"{_where(loc)}range takes 1 to 3 arguments, got {len(args)}")
        begin, end, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
        for v in (begin, end, step):
            if isinstance(v, Unusable):
                raise v.error()
            if not _is_scalar(v) or isinstance(v, float) or (isinstance(v, Expr) and not v.dtype.is_integer()):
                raise CompileError(f"{_where(loc)}range bounds must be integers, got {_describe(v)}")
        if unroll is not None and (not isinstance(unroll, int) or unroll < 0):
            raise CompileError(f"{_where(loc)}range: unroll must be True, False or a positive int, got "
                               f"{_describe(unroll)}")
        u = 0 if unroll is None or unroll is False else (-1 if unroll is True else unroll)
        if num_stages is not None and (isinstance(num_stages, bool) or not isinstance(num_stages, int)):
            raise CompileError(f"{_where(loc)}range: num_stages must be a Python int (the ring's stages, fixed when "
                               f"the kernel compiles), got {_describe(num_stages)}")
        for what, v in (("warp_specialize", warp_specialize), ("persistent", persistent)):
            if not isinstance(v, bool):
                raise CompileError(f"{_where(loc)}range: {what} must be True or False, got {_describe(v)}")
        if epilogue is not None and not isinstance(epilogue, str):
            raise CompileError(f"{_where(loc)}range: epilogue must be \"tma\", \"registers\" or None, got "
                               f"{_describe(epilogue)}")
        b = _builder()
        var = b.begin_for(name, begin, end, step, u, loc, num_stages or 0, warp_specialize, persistent, epilogue or "")
        yield var
        b.end_for()

    @staticmethod
    def python_range(*args):
        """range(...) where it runs while tracing (a comprehension, a call argument, ...): its
        arguments must be Python ints."""
        for a in args:
            if isinstance(a, Unusable):
                raise a.error()
            if isinstance(a, (Expr, TensorBase)):
                raise CompileError(f"{_where(_here())}range({', '.join(_describe(x) for x in args)}): a range over a "
                                   "value only known when the kernel runs can only be the iterable of a `for` "
                                   "statement in the kernel body (a loop on the device); here it runs while tracing "
                                   "and needs Python ints")
        try:
            return builtins.range(*args)
        except TypeError as e:
            raise CompileError(f"{_where(_here())}range: {e}") from None

    @staticmethod
    def _extremum(what, builtin, scalar, args, kw):
        """Python's min / max: of kernel scalars (two or more, or one iterable of them) a kernel
        expression, of anything else Python's own result."""
        items = args[0] if len(args) == 1 and not isinstance(args[0], (Expr, TensorBase)) else args
        if not kw and isinstance(items, (list, tuple)) and any(isinstance(x, Expr) for x in items):
            for x in items:
                if isinstance(x, Unusable):
                    raise x.error()
                if not _is_scalar(x):
                    raise CompileError(f"{_where(_here())}{what}: expects scalars (numbers or kernel scalars), got "
                                       f"{', '.join(_describe(v) for v in items)}")
            out = items[0]
            for x in items[1:]:
                out = scalar(out, x)
            return out
        return builtin(*args, **kw)

    @staticmethod
    def ifexp(cond, then, orelse, line):
        """``then() if cond else orelse()``: Python's conditional expression where ``cond`` is a
        Python value; where it is a kernel condition (known when the kernel runs) both sides are
        traced and the value is a kernel select of the two scalars (NVIDIA Tilus's if-then-else)."""
        if not _Runtime.symbolic(cond):
            return then() if cond else orelse()
        a, b = then(), orelse()
        if not (_is_scalar(a) and _is_scalar(b)):
            raise CompileError(f"{_where((_here()[0], line))}`a if c else b` with a condition only known when the "
                               f"kernel runs ({_describe(cond)}) selects between two scalars (numbers "
                               f"or kernel scalars); got {_describe(a)} and {_describe(b)} (for tensors use "
                               "self.where(c, a, b))")
        return _C.select(cond, a, b)

    @staticmethod
    def python_min(*args, **kw):
        return _Runtime._extremum("min", builtins.min, _C.min, args, kw)

    @staticmethod
    def python_max(*args, **kw):
        return _Runtime._extremum("max", builtins.max, _C.max, args, kw)

    @staticmethod
    def annotated(script, name, old, annotation, value, line, mutable):
        """``name: annotation = value``: with a tilus data type, a new kernel variable of that type
        (a kernel variable of the name and type bound before is assigned instead); with anything
        else an assignment."""
        if not isinstance(annotation, DataType) or annotation.is_pointer():
            return _Runtime.rebind(script, name, old, value, line, mutable)
        b = _builder()
        loc = (_here()[0], line)
        value = _Runtime._scalar_of(name, annotation, value, loc)
        declared = _tracing.scopes.get(id(old))
        visible = declared is not None and tuple(b.scope_path()[:len(declared)]) == declared
        if isinstance(old, Expr) and id(old) in _tracing.mutables and name in _tracing.bound and \
                old.dtype == annotation and visible:
            b.assign(old, value, loc)
            return old
        _tracing.bound[name] = b.depth()
        return _declare_kernel_variable(b, name, annotation, value, loc)

    @staticmethod
    def annotated_attribute(name, annotation, value, line):
        """``obj.name: annotation = value``: with a tilus data type, a new kernel variable named
        ``name`` (stored in the attribute), else ``value``."""
        if not isinstance(annotation, DataType) or annotation.is_pointer():
            return value
        b = _builder()
        loc = (_here()[0], line)
        return _declare_kernel_variable(b, name, annotation, _Runtime._scalar_of(name, annotation, value, loc), loc)

    @staticmethod
    def _scalar_of(name, dtype, value, loc):
        if isinstance(value, Unusable):
            raise value.error()
        if isinstance(value, RegisterTensor) and math.prod(value.shape) == 1:
            value = value.item()  # NVIDIA Tilus: `alpha: float32 = self.exp(r_g)` of a [1] tile
        if not _is_scalar(value):
            raise CompileError(f"{_where(loc)}'{name}: {dtype!r} = ...' declares a kernel scalar; its value must be a "
                               f"scalar, got {_describe(value)}")
        return value if isinstance(value, Expr) and value.dtype == dtype else _C.cast(value, dtype)

    @staticmethod
    def bounded(iterable, line):
        """A Python loop's iterable, counted while tracing (see _Trips)."""
        if isinstance(iterable, Unusable):
            raise iterable.error()
        if isinstance(iterable, Expr):
            raise CompileError(f"{_where(_here())}cannot iterate over {_describe(iterable)}: a loop over a value known "
                               "only when the kernel runs is `for i in range(...)`")
        if isinstance(iterable, (list, tuple, range, dict, str)):
            return iterable  # finite
        return _Runtime._counted(iterable, _Trips("for", line))

    @staticmethod
    def _counted(iterable, trips):
        for x in iterable:
            trips.tick()
            yield x

    @staticmethod
    def trips(what, line):
        return _Trips(what, line)

    @staticmethod
    def begin_if(script, cond, line, names, merged, read_after, has_else, pre):
        """Opens a symbolic if. A Python number bound before it, reassigned in a branch and read
        after it becomes a kernel variable first (its value after the if depends on the branch)."""
        b = _builder()
        loc = (_here()[0], line)
        pre = list(pre)
        for i, n in enumerate(names):
            if n in read_after and _is_number(pre[i]):
                pre[i] = _declare_kernel_variable(b, n, _C.Expr(pre[i]).dtype, pre[i], loc)
                _tracing.bound[n] = b.depth()
        b.begin_if(cond, loc)
        return _If(line, names, merged, has_else, pre)

    @staticmethod
    def begin_while(script, cond, line):
        _builder().begin_while(cond, (_here()[0], line))

    @staticmethod
    def end_while(script):
        _builder().end_while()

    @staticmethod
    def after_scope(names, pre, values, kind, line):
        """After an IR loop: the names its body bound first are unusable (the loop may run no
        iterations; its variables exist on the device only inside it)."""
        out = []
        for n, before, v in zip(names, pre, values):
            if _unbound(before) and not _unbound(v):
                _tracing.bound.pop(n, None)
                v = Unusable(n, f"is bound only inside the `{kind}` loop at line {line} (which may run no iterations), "
                                "so it has no value after it: bind it before the loop")
            out.append(v)
        return tuple(out)

    @staticmethod
    def promote(script, names, values, line):
        """The names a symbolic while condition reads and the body reassigns, as kernel
        variables (None when they are already)."""
        b = _builder()
        loc = (_here()[0], line)
        out, changed = [], False
        for n, v in zip(names, values):
            if _is_number(v) or (isinstance(v, Expr) and id(v) not in _tracing.mutables):
                v = _declare_kernel_variable(b, n, _C.Expr(v).dtype, v, loc)
                _tracing.bound[n] = b.depth()
                changed = True
            out.append(v)
        return tuple(out) if changed else None

    @staticmethod
    def brk(script, line):
        _builder().emit_break((_here()[0], line))

    @staticmethod
    def cont(script, line):
        _builder().emit_continue((_here()[0], line))

    @staticmethod
    def ret(script, line):
        _builder().emit_return((_here()[0], line))

    @staticmethod
    def python_jump_error(word, line):
        raise CompileError(f"{_here()[0]}:{line}: `{word}` of a Python loop under a condition that is only known "
                           "when the kernel runs; use an IR loop (range) or a Python condition")

    @staticmethod
    def unsupported(what, line):
        raise CompileError(f"{_here()[0]}:{line}: {what} is not supported: the body is traced once into device code, "
                           "where Python cannot leave a loop or branch early")

    @staticmethod
    def unpack(script, values, names, olds, line):
        """The values of `names[0], names[1], ... = values`, which are bound in turn: where the
        register tensor of an earlier target that is assigned in place (bound outside this loop or
        branch) is also a later target's value, that value is copied before the assigns, so that
        each target takes the value it had when the statement began (`a, b = b, a` swaps)."""
        if not isinstance(values, (tuple, list)) or not hasattr(_tracing, "builder"):
            return values
        b = _builder()
        bound = _tracing.bound
        in_place = [isinstance(old, RegisterTensor) and n in bound and b.depth() > bound[n]
                    for n, old in zip(names, olds)]
        out = list(values)
        for i, v in enumerate(out):
            if isinstance(v, RegisterTensor) and any(in_place[j] and olds[j] is v for j in range(min(i, len(olds)))):
                loc = (_here()[0], line)
                copy = RegisterTensor(b.register_tensor(v.t.dtype, [int(x) for x in v.t.shape], None, loc))
                b.assign_tensor(copy.t, v.t, loc)
                out[i] = copy
        return type(values)(out) if isinstance(values, tuple) else out

    @staticmethod
    def discard(script, value, what, line):
        """An expression statement's value: a new tensor computed by a pure instruction (or an
        operator) and thrown away is a warning."""
        if not isinstance(value, TensorBase) or value.t.id in _tracing.named:
            return value
        if not what.startswith("operator ") and not getattr(getattr(type(script), what, None), "_tilus_pure", False):
            return value
        call = f"`{what[len('operator '):]}`" if what.startswith("operator ") else f"self.{what}(...)"
        hint = " (dot does not update c: write `c = self.dot(a, b, c)`)" if what == "dot" else ""
        warnings.warn_explicit(f"the result of {call} ({value.t.type_str()}) is discarded: it computes a new tensor "
                               f"and changes nothing else; assign it to a name{hint}", TilusWarning, _here()[0], line)
        return value

    @staticmethod
    def rebind(script, name, old, value, line, mutable):
        b = _builder()
        depth = b.depth()
        bound = _tracing.bound
        loc = (_here()[0], line)
        if isinstance(value, Unusable):
            raise value.error()
        if _unbound(old) or name not in bound:
            bound[name] = depth
            if isinstance(value, Expr) and id(value) in _tracing.mutables:
                return value  # self.declare(...) already made it a kernel variable
            if mutable and isinstance(value, Expr):
                return _declare_kernel_variable(b, name, value.dtype, value, loc)
            return _named(b, name, value, loc)
        if isinstance(old, Expr) and id(old) in _tracing.mutables:
            if isinstance(value, TensorBase):
                raise CompileError(f"{_where(loc)}cannot assign a tensor to scalar variable '{name}'")
            b.assign(old, value, loc)
            return old
        if depth <= bound[name]:
            bound[name] = depth
            return _named(b, name, value, loc)
        # Reassigned inside an IR loop or branch deeper than where it was bound.
        if isinstance(old, RegisterTensor) and isinstance(value, RegisterTensor):
            if old.t.same_as(value.t):
                return old
            _name_tensor(b, name, value)
            b.assign_tensor(old.t, value.t, loc)
            return old
        mapped = _mapped_barrier(b, name, old, value, loc)
        if mapped is not None:
            return mapped
        if isinstance(old, TensorBase) or isinstance(value, TensorBase):
            raise CompileError(f"{_where(loc)}'{name}' is rebound inside a loop or branch to a different kind of "
                               f"value ({old!r} -> {value!r})")
        raise CompileError(
            f"{_where(loc)}'{name}' was bound outside this loop or branch to {old!r}, a value fixed when the kernel is "
            f"traced; to change it at run time make it a kernel variable: {name} = self.declare({name!r}, int32, ...)")


def _mapped_barrier(b, name, old, value, loc):
    """A barrier rebound inside a branch to its own mapping into a peer block
    (``bar = self.cluster.map_shared_addr(bar, rank)`` under ``if cta_rank != 0``, as NVIDIA Tilus's
    examples do, where barriers are addresses): the same barrier in a block chosen at run time, its
    rank a kernel variable that starts as this block's own rank (or the old mapping's) and is
    assigned the new one here. None for anything else."""
    source = old.source if isinstance(old, MappedBarrier) else old
    if not isinstance(value, MappedBarrier) or value.source is not source:
        return None
    if isinstance(old, MappedBarrier) and old.rank_var:
        b.assign(old.rank, value.rank, loc)
        return old
    start = old.rank if isinstance(old, MappedBarrier) else _C.cluster_block_rank()
    var = _declare_kernel_variable(b, f"{name}_rank", _C.DataType.from_name("int32"), start, loc, outside=True)
    b.assign(var, value.rank, loc)
    return MappedBarrier(None, var, source=value.source, rank_var=True)


class _ScalarMath:
    """The ``math`` module as a kernel body sees it: ``math.exp``, ``log``, ``sqrt``, ... of a kernel
    scalar are kernel expressions (the backends' scalar builtins; integers are taken as float32),
    of a number Python's own; every other name is the module's."""

    _NAMES = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "sqrt": "sqrt", "sin": "sin",
              "cos": "cos", "tanh": "tanh", "floor": "floor", "ceil": "ceil", "fabs": "abs", "pow": "pow",
              "erf": "erf"}

    def __getattr__(self, name):
        fn = getattr(math, name)
        if not callable(fn):
            return fn
        builtin = self._NAMES.get(name)

        def call(*args, **kw):
            tensor = next((a for a in (*args, *kw.values()) if isinstance(a, TensorBase)), None)
            if tensor is not None:  # Python's own error would say only "must be real number"
                script = getattr(_tracing, "script", None)
                method = builtin if builtin and callable(getattr(script, builtin, None)) else None
                hint = f"self.{method}(x) computes it elementwise" if method else \
                    f"tilus has no elementwise {name} (its elementwise math: self.exp, self.tanh, self.erf, ...)"
                raise CompileError(f"{_where(_here())}math.{name}() takes numbers and kernel scalars, not a tensor "
                                   f"({_describe(tensor)}): {hint}")
            if builtin is None or kw or not any(isinstance(a, Expr) for a in args):
                return fn(*args, **kw)
            exprs = []
            for a in args:
                e = a if isinstance(a, Expr) else _C.const(float(a), _FLOAT32)
                if not e.dtype.is_float():
                    e = _C.cast(e, _FLOAT32)
                exprs.append(e)
            return _C.call(builtin, exprs)

        call.__name__ = name
        return call


_FLOAT32 = DataType.from_name("float32")
_MATH = _ScalarMath()
