"""Normalizes the control flow of a Script's ``__call__`` so that it reaches the tracer as scopes.

The body is traced once. Python runs it, so plain Python (helpers, list comprehensions,
arithmetic on Python values) stays Python; only these constructs are rewritten:

* ``for v in range(...)`` and ``for v in self.range(..., unroll=...)`` always become IR loops
  with a symbolic ``v`` (even with Python-int bounds), traced once.
* ``if``/``elif``/``else`` and ``while`` test their condition when traced: a symbolic
  condition (a tilus expression) opens IR scopes and both branches are traced; a Python value
  runs as Python (compile-time metaprogramming).
* ``break``/``continue`` of an IR loop become IR statements; those of a Python loop stay
  Python (and are an error under a symbolic ``if``).
* ``name = value`` (and ``name op= value``) inside an IR scope deeper than where ``name``
  was bound updates that variable in the IR: an ``assign`` into a register tensor, or an
  assignment of a mutable scalar (a scalar bound outside and reassigned inside a loop or
  branch is declared mutable where it is first bound).
* other iterables (lists, tuples, ``tilus.static_range``) loop in Python.

Line numbers and the file name are kept, so errors point at the user's source. The helpers
the rewritten body calls (``_Runtime``) are at the end of this file.
"""
import ast
import copy
import inspect
import textwrap

from . import _C
from ._C import CompileError, Expr
from .tracing import RegisterTensor, TensorBase, _builder, _here, _tracing, _where

_RT = "__tilus_rt"  # the name under which the runtime helpers are visible to the body


class _LoopKind:
    IR = "ir"          # for over range / self.range
    DYNAMIC = "while"  # while: IR or Python, decided when traced
    PYTHON = "python"  # for over anything else


def _is_range_call(node):
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    if isinstance(f, ast.Name) and f.id == "range":
        return True
    return isinstance(f, ast.Attribute) and f.attr == "range" and isinstance(f.value, ast.Name) and f.value.id == "self"


def _at(new, node):
    """Gives a generated node the first line of `node` only: Python attributes a call to the
    last line of its span, and the user's line is the statement's first."""
    new.lineno, new.col_offset = node.lineno, node.col_offset
    new.end_lineno, new.end_col_offset = node.lineno, node.col_offset
    for child in ast.walk(new):
        if child is not new and not hasattr(child, "lineno") and isinstance(child, (ast.expr, ast.stmt)):
            child.lineno, child.col_offset, child.end_lineno, child.end_col_offset = (
                node.lineno, node.col_offset, node.lineno, node.col_offset)
    return new


def _rt(attr, node):
    return _at(ast.Attribute(value=ast.Name(id=_RT, ctx=ast.Load()), attr=attr, ctx=ast.Load()), node)


def _call(attr, args, node, keywords=None):
    return _at(ast.Call(func=_rt(attr, node), args=args, keywords=keywords or []), node)


def _stmt(expr, node):
    return _at(ast.Expr(value=expr), node)


def _const(v, node):
    return _at(ast.Constant(value=v), node)


def _assigned_names(stmts):
    """Names bound by assignments anywhere in these statements (not in nested functions)."""
    names = set()

    class V(ast.NodeVisitor):
        def visit_FunctionDef(self, n):
            pass

        visit_AsyncFunctionDef = visit_FunctionDef
        visit_Lambda = visit_FunctionDef

        def visit_Name(self, n):
            if isinstance(n.ctx, ast.Store):
                names.add(n.id)

    for s in stmts:
        V().visit(s)
    return names


class _Normalizer(ast.NodeTransformer):
    def __init__(self):
        self.loops = []          # stack of _LoopKind
        self.under_ir_if = []    # per loop level: inside a symbolic if since that loop began
        self.counter = 0
        self.mutable = set()     # names assigned inside nested scopes (may become mutable scalars)

    def fresh(self, hint):
        self.counter += 1
        return f"__tilus_{hint}{self.counter}"

    # --- the function ------------------------------------------------------------------------
    def visit_FunctionDef(self, node):
        # A name may need to be a mutable kernel variable when it is assigned more than once
        # and at least once inside a loop or branch; a name assigned once is a `let`.
        nested = []
        for s in ast.walk(node):
            if isinstance(s, (ast.For, ast.While, ast.If)) and s is not node:
                nested.extend(s.body)
                nested.extend(s.orelse)
        sites = {}
        for s in ast.walk(node):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target] if isinstance(s, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        sites[n.id] = sites.get(n.id, 0) + (2 if isinstance(s, ast.AugAssign) else 1)
        self.mutable = {n for n in _assigned_names(nested) if sites.get(n, 0) > 1}
        node.body = self.visit_body(node.body)
        node.decorator_list = []
        return node

    def visit_body(self, stmts):
        out = []
        for s in stmts:
            r = self.visit(s)
            if r is None:
                continue
            out.extend(r if isinstance(r, list) else [r])
        return out or [ast.Pass()]

    def _copy_body(self, stmts, ir_if):
        """Transforms a copy of a branch body (each branch is traced as IR or as Python)."""
        self.under_ir_if.append(ir_if or (self.under_ir_if[-1] if self.under_ir_if else False))
        try:
            return self.visit_body(copy.deepcopy(stmts))
        finally:
            self.under_ir_if.pop()

    # --- loops ---------------------------------------------------------------------------------
    def visit_For(self, node):
        if node.orelse:
            raise SyntaxError("tilus: for ... else is not supported in a kernel body")
        if not _is_range_call(node.iter):
            self.loops.append(_LoopKind.PYTHON)
            self.under_ir_if.append(False)
            node.body = self.visit_body(node.body)
            self.under_ir_if.pop()
            self.loops.pop()
            return node
        if not isinstance(node.target, ast.Name):
            raise SyntaxError("tilus: the variable of a range loop must be a single name")
        call = node.iter
        # for v in range(a, b, c)  ->  for v in __tilus_rt.loop(self, "v", loc, a, b, c, **kw)
        args = [ast.Name(id="self", ctx=ast.Load()), _const(node.target.id, node), _const(node.lineno, node)]
        node.iter = _call("loop", args + list(call.args), call, list(call.keywords))
        self.loops.append(_LoopKind.IR)
        self.under_ir_if.append(False)
        node.body = self.visit_body(node.body)
        self.under_ir_if.pop()
        self.loops.pop()
        return node

    def visit_While(self, node):
        if node.orelse:
            raise SyntaxError("tilus: while ... else is not supported in a kernel body")
        cond = self.fresh("cond")
        # __c = COND
        # if __tilus_rt.symbolic(__c):
        #     __tilus_rt.begin_while(self, __c, line); BODY(ir); __tilus_rt.end(self, "while")
        # else:
        #     while COND: BODY(python)
        assign = _at(ast.Assign(targets=[ast.Name(id=cond, ctx=ast.Store())], value=node.test), node)
        self.loops.append(_LoopKind.IR)
        ir_body = self._copy_body(node.body, False)
        self.loops.pop()
        self.loops.append(_LoopKind.PYTHON)
        py_body = self._copy_body(node.body, False)
        self.loops.pop()
        begin = _stmt(_call("begin_while", [ast.Name(id="self", ctx=ast.Load()), ast.Name(id=cond, ctx=ast.Load()),
                                            _const(node.lineno, node)], node), node)
        end = _stmt(_call("end", [ast.Name(id="self", ctx=ast.Load()), _const("while", node)], node), node)
        py_loop = _at(ast.While(test=copy.deepcopy(node.test), body=py_body, orelse=[]), node)
        test = _call("symbolic", [ast.Name(id=cond, ctx=ast.Load())], node)
        branch = _at(ast.If(test=test, body=[begin] + ir_body + [end], orelse=[py_loop]), node)
        return [assign, branch]

    def visit_Break(self, node):
        return self._jump(node, "brk")

    def visit_Continue(self, node):
        return self._jump(node, "cont")

    def _jump(self, node, kind):
        if not self.loops:
            return node
        if self.loops[-1] == _LoopKind.IR:
            return _stmt(_call(kind, [ast.Name(id="self", ctx=ast.Load()), _const(node.lineno, node)], node), node)
        if self.under_ir_if and self.under_ir_if[-1]:
            word = "break" if kind == "brk" else "continue"
            return _stmt(_call("python_jump_error", [_const(word, node), _const(node.lineno, node)], node), node)
        return node

    # --- branches -------------------------------------------------------------------------------
    def visit_If(self, node):
        cond = self.fresh("cond")
        assign = _at(ast.Assign(targets=[ast.Name(id=cond, ctx=ast.Store())], value=node.test), node)
        self_ = ast.Name(id="self", ctx=ast.Load())
        ir = [_stmt(_call("begin_if", [self_, ast.Name(id=cond, ctx=ast.Load()), _const(node.lineno, node)], node), node)]
        ir += self._copy_body(node.body, True)
        ir.append(_stmt(_call("end", [copy.deepcopy(self_), _const("if", node)], node), node))
        if node.orelse:
            line = node.orelse[0].lineno
            ir.append(_stmt(_call("begin_else", [copy.deepcopy(self_), _const(line, node)], node), node))
            ir += self._copy_body(node.orelse, True)
            ir.append(_stmt(_call("end", [copy.deepcopy(self_), _const("else", node)], node), node))
        py = _at(
            ast.If(test=ast.Name(id=cond, ctx=ast.Load()), body=self._copy_body(node.body, False),
                   orelse=self._copy_body(node.orelse, False) if node.orelse else []), node)
        test = _call("symbolic", [ast.Name(id=cond, ctx=ast.Load())], node)
        return [assign, _at(ast.If(test=test, body=ir, orelse=[py]), node)]

    # --- assignments ----------------------------------------------------------------------------
    def _rebind(self, name, value, node):
        # name = __tilus_rt.rebind(self, "name", locals().get("name", __tilus_rt.UNBOUND), value, line, mutable)
        old = ast.Call(func=ast.Attribute(value=ast.Call(func=ast.Name(id="locals", ctx=ast.Load()), args=[], keywords=[]),
                                          attr="get", ctx=ast.Load()),
                       args=[_const(name, node), _rt("UNBOUND", node)], keywords=[])
        call = _call("rebind", [ast.Name(id="self", ctx=ast.Load()), _const(name, node), old, value,
                                _const(node.lineno, node), _const(name in self.mutable, node)], node)
        return _at(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=call), node)

    def visit_Assign(self, node):
        node.value = self.visit(node.value)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            return self._rebind(node.targets[0].id, node.value, node)
        if len(node.targets) == 1 and isinstance(node.targets[0], (ast.Tuple, ast.List)) and all(
                isinstance(e, ast.Name) for e in node.targets[0].elts):
            tmp = self.fresh("tuple")
            out = [_at(ast.Assign(targets=[ast.Name(id=tmp, ctx=ast.Store())], value=node.value), node)]
            for i, e in enumerate(node.targets[0].elts):
                item = ast.Subscript(value=ast.Name(id=tmp, ctx=ast.Load()), slice=_const(i, node), ctx=ast.Load())
                out.append(self._rebind(e.id, _at(item, node), node))
            return out
        return node

    def visit_AugAssign(self, node):
        if isinstance(node.target, ast.Name):
            value = _at(ast.BinOp(left=ast.Name(id=node.target.id, ctx=ast.Load()), op=node.op,
                                                right=self.visit(node.value)), node)
            return self._rebind(node.target.id, value, node)
        return self.generic_visit(node)

    def visit_AnnAssign(self, node):
        if isinstance(node.target, ast.Name) and node.value is not None:
            return self._rebind(node.target.id, self.visit(node.value), node)
        return node

    # nested functions and lambdas are plain Python
    def visit_Lambda(self, node):
        return node


def normalize(fn):
    """The Script body `fn` with its control flow normalized (see the module docstring)."""
    try:
        lines, first = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or "<unknown>"
    except (OSError, TypeError) as e:
        raise RuntimeError(f"tilus: cannot read the source of {fn.__qualname__} ({e}); "
                           "a Script's __call__ must be defined in a file") from e
    src = textwrap.dedent("".join(lines))
    tree = ast.parse(src)
    ast.increment_lineno(tree, first - 1)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise RuntimeError(f"tilus: {fn.__qualname__} is not a plain function")
    _Normalizer().visit(fdef)
    ast.fix_missing_locations(tree)
    code = compile(tree, filename, "exec")
    # Closure variables become globals of the normalized function (read-only, as closures are).
    env = dict(fn.__globals__)
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                env[name] = cell.cell_contents
            except ValueError:
                pass
    env[_RT] = _Runtime
    ns = {}
    exec(code, env, ns)
    return ns[fdef.name]


# --- the runtime helpers the normalized body calls ------------------------------------------------

class _Unbound:
    def __repr__(self):
        return "<unbound>"


def _named(b, name, value, loc):
    """A symbolic scalar bound to a Python name becomes a named `let` (computed once, shown by
    name in the IR); everything else is bound as is."""
    if isinstance(value, Expr) and not isinstance(value, _C.Var) and not value.is_const():
        return b.let(name, value, loc)
    return value


class _Runtime:
    UNBOUND = _Unbound()

    @staticmethod
    def symbolic(v):
        if isinstance(v, TensorBase):
            raise CompileError(f"{_where(_here())}a tensor ({v.t.type_str()}) used as a condition; "
                               "reduce it to a scalar first")
        return isinstance(v, Expr)

    @staticmethod
    def loop(script, name, line, *args, unroll=None):
        loc = (_here()[0], line)
        if not 1 <= len(args) <= 3:
            raise CompileError(f"{_where(loc)}range takes 1 to 3 arguments, got {len(args)}")
        begin, end, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
        for v in (begin, end, step):
            if isinstance(v, float) or (isinstance(v, Expr) and not (v.dtype.is_integer)):
                raise CompileError(f"{_where(loc)}range bounds must be integers, got {v!r}")
        u = 0 if unroll is None else (-1 if unroll is True else int(unroll))
        b = _builder()
        var = b.begin_for(name, begin, end, step, u, loc)
        yield var
        b.end_for()

    @staticmethod
    def begin_if(script, cond, line):
        _builder().begin_if(cond, (_here()[0], line))

    @staticmethod
    def begin_else(script, line):
        _builder().begin_else((_here()[0], line))

    @staticmethod
    def begin_while(script, cond, line):
        _builder().begin_while(cond, (_here()[0], line))

    @staticmethod
    def end(script, what):
        b = _builder()
        {"if": b.end_if, "else": b.end_else, "while": b.end_while}[what]()

    @staticmethod
    def brk(script, line):
        _builder().emit_break((_here()[0], line))

    @staticmethod
    def cont(script, line):
        _builder().emit_continue((_here()[0], line))

    @staticmethod
    def python_jump_error(word, line):
        raise CompileError(f"{_here()[0]}:{line}: `{word}` of a Python loop under a condition that is only known "
                           "when the kernel runs; use an IR loop (range) or a Python condition")

    @staticmethod
    def rebind(script, name, old, value, line, mutable):
        b = _builder()
        depth = b.depth()
        bound = _tracing.bound
        loc = (_here()[0], line)
        if old is _Runtime.UNBOUND or name not in bound:
            bound[name] = depth
            if isinstance(value, Expr) and id(value) in _tracing.mutables:
                return value  # self.declare(...) already made it a kernel variable
            if mutable and isinstance(value, Expr):
                var = b.declare(name, value.dtype, value, loc)
                _tracing.mutables.add(id(var))
                _tracing.keep.append(var)
                return var
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
            b.assign_tensor(old.t, value.t, loc)
            return old
        if isinstance(old, TensorBase) or isinstance(value, TensorBase):
            raise CompileError(f"{_where(loc)}'{name}' is rebound inside a loop or branch to a different kind of "
                               f"value ({old!r} -> {value!r})")
        raise CompileError(
            f"{_where(loc)}'{name}' was bound outside this loop or branch to {old!r}, a value fixed when the kernel is "
            f"traced; to change it at run time make it a kernel variable: {name} = self.declare({name!r}, int32, ...)")
