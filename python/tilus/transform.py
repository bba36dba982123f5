"""Normalizes the control flow of a Script's ``__call__`` so that it reaches the tracer as scopes.

The body is traced once. Python runs it, so plain Python (helpers, nested functions, list
comprehensions, arithmetic on Python values) stays Python; only these constructs are rewritten:

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
  branch is declared mutable where it is first bound). A tensor takes the name of the
  variable it is first bound to.
* A name bound in both branches of a symbolic ``if`` and used after it is merged: a kernel
  variable (or register tensor) declared before the ``if`` that each branch assigns. A name
  bound only inside an IR scope (one branch, a loop body) cannot be used after it: any use is
  an error that says so.
* The names a symbolic ``while`` condition reads and its body reassigns become kernel
  variables (``i = 0; while i < n: ...; i += 1``).
* other iterables (lists, tuples, ``tilus.static_range``) loop in Python; a Python loop that
  runs more than ``_Runtime.max_trace_trips`` times while tracing is stopped with an error.
* An expression statement whose value is a new tensor computed by a pure instruction (or an
  operator) is a ``TilusWarning``: its result is discarded.
* ``yield``, ``return``/``try`` inside an IR scope, ``for``/``while ... else`` on an IR loop
  and tuple variables of an IR loop are errors at the user's line.

Line numbers and the file name are kept, so errors point at the user's source. The helpers
the rewritten body calls (``_Runtime``) are at the end of this file.
"""
import ast
import builtins
import copy
import inspect
import math
import textwrap
import warnings

from . import _C
from ._C import CompileError, DataType, Expr
from .tracing import (RegisterTensor, TensorBase, TilusWarning, Unusable, _builder, _declare_kernel_variable, _describe,
                      _here, _is_scalar, _tracing, _where)

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


def _name(n, node, store=False):
    return _at(ast.Name(id=n, ctx=ast.Store() if store else ast.Load()), node)


def _self(node):
    return _name("self", node)


def _assign(target, value, node):
    return _at(ast.Assign(targets=[target if isinstance(target, ast.expr) else _name(target, node, True)], value=value),
               node)


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp, ast.DictComp,
           ast.GeneratorExp)


def _walk(nodes):
    """The nodes of these statements (or expressions), not inside nested functions, classes or
    comprehensions (which have names of their own)."""
    todo = list(nodes)
    while todo:
        n = todo.pop()
        yield n
        todo.extend(c for c in ast.iter_child_nodes(n) if not isinstance(c, _SCOPES))


def _assigned_names(stmts):
    """Names bound by assignments (and loop variables) in these statements."""
    return {n.id for n in _walk(stmts) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _loaded_names(nodes):
    """How often each name is read in these nodes (nested functions and comprehensions included:
    they may read the body's names)."""
    out = {}
    for n in (m for node in nodes for m in ast.walk(node)):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out[n.id] = out.get(n.id, 0) + 1
    return out


def _method(obj, attr, args, node):
    """obj.attr(*args) for the name `obj`."""
    return _at(ast.Call(func=_at(ast.Attribute(value=_name(obj, node), attr=attr, ctx=ast.Load()), node), args=args,
                        keywords=[]), node)


def _strings(xs, node):
    """The tuple literal ("a", "b", ...)."""
    return _at(ast.Tuple(elts=[_const(x, node) for x in xs], ctx=ast.Load()), node)


def _pre_values(names, node):
    """(locals().get("a", UNBOUND), ...): the current values of `names`."""
    return _at(ast.Tuple(elts=[_local(n, node) for n in names], ctx=ast.Load()), node)


def _local(n, node):
    return _at(ast.Call(func=ast.Attribute(value=ast.Call(func=ast.Name(id="locals", ctx=ast.Load()), args=[],
                                                          keywords=[]), attr="get", ctx=ast.Load()),
                        args=[_const(n, node), _rt("UNBOUND", node)], keywords=[]), node)


def _rebind_names(names, value, node):
    """(a, b, ...) = value; nothing when there are no names."""
    if not names:
        return [_stmt(value, node)]
    target = _at(ast.Tuple(elts=[_name(n, node, True) for n in names], ctx=ast.Store()), node)
    return [_assign(target, value, node)]


def _describe_expr(node):
    """What an expression statement computes, for the discarded-result warning: a method name
    of `self`, or an operator."""
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            return f.attr
        if isinstance(f, ast.Attribute) and f.attr in ("to", "transpose"):  # a register tensor's own methods
            return f"operator .{f.attr}()"
        return None
    ops = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
           ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>", ast.USub: "-",
           ast.Invert: "~", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        return "operator " + ops.get(type(node.op), "?")
    if isinstance(node, ast.Compare):
        return "operator " + ops.get(type(node.ops[0]), "?")
    return None


class _Normalizer(ast.NodeTransformer):
    def __init__(self, filename):
        self.filename = filename
        self.loops = []          # stack of _LoopKind
        self.under_ir_if = []    # per loop level: inside a symbolic if since that loop began
        self.ir_depth = 0        # IR scopes (range loops, symbolic if / while copies) around the node
        self.counter = 0
        self.mutable = set()     # names assigned inside nested scopes (may become mutable scalars)
        self.loads = {}          # name -> loads in the whole body
        self.top = None

    def fresh(self, hint):
        self.counter += 1
        return f"__tilus_{hint}{self.counter}"

    def error(self, node, msg):
        return CompileError(f"{self.filename}:{node.lineno}: {msg}")

    def unsupported(self, node, what):
        """A statement that raises, when traced, that `what` is not supported inside an IR scope."""
        return _stmt(_call("unsupported", [_const(what, node), _const(node.lineno, node)], node), node)

    # --- the function ------------------------------------------------------------------------
    def visit_FunctionDef(self, node):
        if self.top is not None:
            return node  # a nested helper function: plain Python, called (and traced) where it is called
        self.top = node
        for n in _walk(node.body):
            if isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)):
                raise self.error(n, "a kernel body cannot `yield` or `await`: __call__ is traced once, as a plain "
                                    "function")
            if isinstance(n, (ast.Global, ast.Nonlocal)):
                raise self.error(n, f"`{'global' if isinstance(n, ast.Global) else 'nonlocal'}` is not supported in a "
                                    "kernel body (a value the kernel computes cannot be stored in a Python variable "
                                    "outside it)")
        # A name may need to be a mutable kernel variable when it is assigned more than once
        # and at least once inside a loop or branch; a name assigned once is a `let`.
        nested = []
        for s in _walk(node.body):
            if isinstance(s, (ast.For, ast.While, ast.If)):
                nested.extend(s.body)
                nested.extend(s.orelse)
        params = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs][1:]  # not self
        sites = {p: 1 for p in params}  # a parameter is bound once by the call
        for s in _walk(node.body):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target] if isinstance(s, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        sites[n.id] = sites.get(n.id, 0) + (2 if isinstance(s, ast.AugAssign) else 1)
        self.mutable = {n for n in _assigned_names(nested) if sites.get(n, 0) > 1}
        self.loads = _loaded_names(node.body)
        # A parameter reassigned inside a loop or branch starts as a kernel variable.
        first = [self._rebind(p, _name(p, node.body[0]), node.body[0]) for p in params if p in self.mutable]
        node.body = first + self.visit_body(node.body)
        node.decorator_list = []
        return node

    def visit_AsyncFunctionDef(self, node):
        if self.top is None:
            raise self.error(node, "a kernel body cannot be `async def`")
        return node

    def visit_ClassDef(self, node):
        return node

    def visit_Lambda(self, node):
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
        self.ir_depth += bool(ir_if)
        try:
            return self.visit_body(copy.deepcopy(stmts))
        finally:
            self.ir_depth -= bool(ir_if)
            self.under_ir_if.pop()

    def _loop_body(self, kind, stmts, ir):
        self.loops.append(kind)
        self.under_ir_if.append(False)
        self.ir_depth += ir
        try:
            return self.visit_body(copy.deepcopy(stmts))
        finally:
            self.ir_depth -= ir
            self.under_ir_if.pop()
            self.loops.pop()

    def _after_scope(self, names, pre, kind, node):
        """Rebinds, after an IR loop, the names its body bound: those bound only inside it
        become unusable."""
        value = _call("after_scope", [_strings(names, node), _name(pre, node), _pre_values(names, node),
                                      _const(kind, node),
                                      _const(node.lineno, node)], node)
        return _rebind_names(names, value, node)

    # --- loops ---------------------------------------------------------------------------------
    def visit_For(self, node):
        if not _is_range_call(node.iter):
            # for x in <Python iterable>: a Python loop, bounded while tracing
            node.iter = _call("bounded", [node.iter, _const(node.lineno, node)], node)
            node.body = self._loop_body(_LoopKind.PYTHON, node.body, False)
            node.orelse = self.visit_body(node.orelse) if node.orelse else []
            return node
        if node.orelse:
            raise self.error(node, "`for ... else` is not supported on a loop over range(...), which runs on the "
                                   "device (the else branch would need to know whether a run-time `break` happened)")
        if not isinstance(node.target, ast.Name):
            raise self.error(node, "the variable of a loop over range(...) must be a single name (the loop runs on the "
                                   f"device and its variable is one integer), got `{ast.unparse(node.target)}`")
        call = node.iter
        # for v in range(a, b, c)  ->  for v in __tilus_rt.loop(self, "v", loc, a, b, c, **kw)
        args = [_self(node), _const(node.target.id, node), _const(node.lineno, node)]
        node.iter = _call("loop", args + list(call.args), call, list(call.keywords))
        names = sorted(_assigned_names([node]))
        pre = self.fresh("pre")
        node.body = self._loop_body(_LoopKind.IR, node.body, True)
        return [_assign(pre, _pre_values(names, node), node), node] + self._after_scope(names, pre, "for", node)

    def visit_While(self, node):
        node.test = self.visit(node.test)
        if isinstance(node.test, ast.Constant) and node.test.value is True:
            # `while True:` is the kernel's own loop (left by a `break`), as in NVIDIA Tilus: a
            # persistent kernel's loop over tiles. Only a condition that is a Python expression runs
            # at trace time.
            node.test = _call("kernel_true", [], node.test)
        cond = self.fresh("cond")
        # __c = COND
        # if __tilus_rt.symbolic(__c):
        #     [the names COND reads and BODY assigns become kernel variables; __c = COND]
        #     __tilus_rt.begin_while(self, __c, line); BODY(ir); __tilus_rt.end_while(self)
        # else:
        #     while COND: tick; BODY(python)
        assign = _assign(cond, node.test, node)
        ir = []
        if node.orelse:
            ir.append(self.unsupported(node, "`while ... else` on a condition only known when the kernel runs"))
        names = sorted(_assigned_names(node.body))
        counters = [n for n in sorted(_loaded_names([node.test])) if n in names]
        if counters:
            promoted = self.fresh("promoted")
            ir.append(_assign(promoted, _call("promote", [_self(node), _strings(counters, node),
                                                          _pre_values(counters, node), _const(node.lineno, node)],
                                              node), node))
            redo = _rebind_names(counters, _name(promoted, node), node)
            redo.append(_assign(cond, copy.deepcopy(node.test), node))
            test = _at(ast.Compare(left=_name(promoted, node), ops=[ast.IsNot()], comparators=[_const(None, node)]),
                       node)
            ir.append(_at(ast.If(test=test, body=redo, orelse=[]), node))
        pre = self.fresh("pre")
        ir.append(_assign(pre, _pre_values(names, node), node))
        ir.append(_stmt(_call("begin_while", [_self(node), _name(cond, node), _const(node.lineno, node)], node), node))
        ir += self._loop_body(_LoopKind.IR, node.body, True)
        ir.append(_stmt(_call("end_while", [_self(node)], node), node))
        ir += self._after_scope(names, pre, "while", node)
        trips = self.fresh("trips")
        tick = _stmt(_method(trips, "tick", [], node), node)
        py_body = [tick] + self._loop_body(_LoopKind.PYTHON, node.body, False)
        py_else = self.visit_body(copy.deepcopy(node.orelse)) if node.orelse else []
        py_loop = [_assign(trips, _call("trips", [_const("while", node), _const(node.lineno, node)], node), node),
                   _at(ast.While(test=copy.deepcopy(node.test), body=py_body, orelse=py_else), node)]
        test = _call("symbolic", [_name(cond, node)], node)
        branch = _at(ast.If(test=test, body=ir, orelse=py_loop), node)
        return [assign, branch]

    def visit_Break(self, node):
        return self._jump(node, "brk")

    def visit_Continue(self, node):
        return self._jump(node, "cont")

    def _jump(self, node, kind):
        if not self.loops:
            return node
        if self.loops[-1] == _LoopKind.IR:
            return _stmt(_call(kind, [_self(node), _const(node.lineno, node)], node), node)
        if self.under_ir_if and self.under_ir_if[-1]:
            word = "break" if kind == "brk" else "continue"
            return _stmt(_call("python_jump_error", [_const(word, node), _const(node.lineno, node)], node), node)
        return node

    def visit_Return(self, node):
        if not self.ir_depth:
            return node
        if node.value is not None:
            return self.unsupported(node, "`return` of a value inside a loop over range(...) or a branch on a "
                                          "condition only known when the kernel runs")
        # NVIDIA Tilus's meaning: the threads that reach it leave the kernel.
        return _stmt(_call("ret", [_self(node), _const(node.lineno, node)], node), node)

    def visit_Try(self, node):
        if self.ir_depth:
            return self.unsupported(node, "`try` inside a loop over range(...) or a branch on a condition only "
                                          "known when the kernel runs")
        return self.generic_visit(node)

    visit_TryStar = visit_Try

    # --- branches -------------------------------------------------------------------------------
    def visit_If(self, node):
        node.test = self.visit(node.test)
        cond = self.fresh("cond")
        assign = _assign(cond, node.test, node)
        # The names the branches bind; those read elsewhere (after the if) may need a kernel
        # variable: merged when bound in both branches, promoted when a Python number before.
        names = sorted(_assigned_names(node.body) | _assigned_names(node.orelse))
        inside = _loaded_names([node])
        read_after = [n for n in names if self.loads.get(n, 0) > inside.get(n, 0)]
        merged = [n for n in read_after if n in _assigned_names(node.body) & _assigned_names(node.orelse)]
        m = self.fresh("if")
        ir = [_assign(m, _call("begin_if", [_self(node), _name(cond, node), _const(node.lineno, node),
                                            _strings(names, node), _strings(merged, node), _strings(read_after, node),
                                            _const(bool(node.orelse), node), _pre_values(names, node)], node), node)]
        ir += _rebind_names(names, _at(ast.Attribute(value=_name(m, node), attr="pre_values", ctx=ast.Load()), node),
                            node)
        ir += self._copy_body(node.body, True)
        ir += _rebind_names(names, _method(m, "end_then", [_pre_values(names, node)], node), node)
        if node.orelse:
            ir.append(_stmt(_method(m, "begin_else", [_const(node.orelse[0].lineno, node)], node), node))
            ir += self._copy_body(node.orelse, True)
            ir += _rebind_names(names, _method(m, "end_else", [_pre_values(names, node)], node), node)
        py = _at(
            ast.If(test=_name(cond, node), body=self._copy_body(node.body, False),
                   orelse=self._copy_body(node.orelse, False) if node.orelse else []), node)
        test = _call("symbolic", [_name(cond, node)], node)
        return [assign, _at(ast.If(test=test, body=ir, orelse=[py]), node)]

    # --- assignments ----------------------------------------------------------------------------
    def _rebind(self, name, value, node):
        # name = __tilus_rt.rebind(self, "name", locals().get("name", __tilus_rt.UNBOUND), value, line, mutable)
        call = _call("rebind", [_self(node), _const(name, node), _local(name, node), value,
                                _const(node.lineno, node), _const(name in self.mutable, node)], node)
        return _assign(name, call, node)

    def visit_Assign(self, node):
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            return self._rebind(node.targets[0].id, node.value, node)
        if len(node.targets) == 1 and isinstance(node.targets[0], (ast.Tuple, ast.List)) and all(
                isinstance(e, ast.Name) for e in node.targets[0].elts):
            tmp = self.fresh("tuple")
            out = [_assign(tmp, node.value, node)]
            for i, e in enumerate(node.targets[0].elts):
                item = ast.Subscript(value=_name(tmp, node), slice=_const(i, node), ctx=ast.Load())
                out.append(self._rebind(e.id, _at(item, node), node))
            return out
        return node

    def visit_AugAssign(self, node):
        if isinstance(node.target, ast.Name):
            value = _at(ast.BinOp(left=_name(node.target.id, node), op=node.op, right=node.value), node)
            return self._rebind(node.target.id, value, node)
        return node

    def visit_AnnAssign(self, node):
        # `x: int32 = v` declares a kernel variable of that type (NVIDIA Tilus's form); any other
        # annotation (`x: int = v`) is an assignment. `self.x: int32 = v` (an attribute, e.g. of a
        # tilus.Class) stores such a variable in the attribute.
        if node.value is None:
            return node
        if isinstance(node.target, ast.Name):
            name = node.target.id
            call = _call("annotated", [_self(node), _const(name, node), _local(name, node), node.annotation,
                                       node.value, _const(node.lineno, node), _const(name in self.mutable, node)],
                         node)
            return _assign(name, call, node)
        if isinstance(node.target, ast.Attribute):
            call = _call("annotated_attribute", [_const(node.target.attr, node), node.annotation, node.value,
                                                 _const(node.lineno, node)], node)
            return _assign(node.target, call, node)
        return node

    # --- `not` --------------------------------------------------------------------------------
    def visit_UnaryOp(self, node):
        # `not x` of a kernel condition is its logical negation (NVIDIA Tilus's `if not is_valid:`);
        # of a Python value, Python's `not`.
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return _call("not_", [node.operand], node)
        return node

    # --- expression statements ------------------------------------------------------------------
    def visit_Expr(self, node):
        what = _describe_expr(node.value)
        if what is None:
            return node
        node.value = _call("discard", [_self(node), node.value, _const(what, node), _const(node.lineno, node)], node)
        return node


class _ConditionalExpressions(ast.NodeTransformer):
    """a if c else b  ->  __tilus_rt.ifexp(c, lambda: a, lambda: b, line): Python's own where c is a
    Python value (only the chosen side runs), a kernel select where c is a kernel condition. In
    the body and its lambdas, not in nested functions or classes (plain Python, as the
    normalizer leaves them)."""

    def __init__(self):
        self.top = None

    def visit_FunctionDef(self, node):
        if self.top is not None:
            return node
        self.top = node
        self.generic_visit(node)
        return node

    def visit_AsyncFunctionDef(self, node):
        return node

    def visit_ClassDef(self, node):
        return node

    def visit_IfExp(self, node):
        self.generic_visit(node)
        no_args = ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                                defaults=[])
        sides = [_at(ast.Lambda(args=no_args, body=side), side) for side in (node.body, node.orelse)]
        return _call("ifexp", [node.test, *sides, _const(node.lineno, node)], node)


def normalize(fn):
    """The Script body `fn` with its control flow normalized (see the module docstring)."""
    try:
        lines, first = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or "<unknown>"
    except (OSError, TypeError) as e:
        raise CompileError(f"cannot read the source of {fn.__qualname__} ({e}); a Script's __call__ must be defined "
                           "in a file") from None
    src = textwrap.dedent("".join(lines))
    tree = ast.parse(src)
    ast.increment_lineno(tree, first - 1)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise CompileError(f"{filename}:{first}: {fn.__qualname__} is not a plain function")
    # inspect reads the file as it is now: one edited since Python loaded it gives other lines.
    loaded = fn.__code__
    params = [a.arg for a in fdef.args.posonlyargs + fdef.args.args + fdef.args.kwonlyargs]
    if fdef.name != loaded.co_name or params != list(loaded.co_varnames[:loaded.co_argcount + loaded.co_kwonlyargcount]):
        raise CompileError(f"{filename}:{first}: the source of {fn.__qualname__} there is not the code Python loaded "
                           f"(found `def {fdef.name}({', '.join(params)})`): the file changed after it was "
                           "imported; import it again (a new process) to trace the new code")
    _ConditionalExpressions().visit(fdef)
    _Normalizer(filename).visit(fdef)
    # The signature is the original's (launch.signature): annotations, which may name what
    # only the class's defining scope sees, are not evaluated again.
    for a in fdef.args.posonlyargs + fdef.args.args + fdef.args.kwonlyargs + [fdef.args.vararg, fdef.args.kwarg]:
        if a is not None:
            a.annotation = None
    fdef.returns = None
    # The body is defined inside a factory whose parameters are its free variables (the
    # closure of __call__: a factory function's arguments, __class__ for super()).
    free = list(fn.__code__.co_freevars)
    factory = ast.FunctionDef(
        name="__tilus_factory", args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=n) for n in free], vararg=None,
                                                   kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=[fdef, ast.Return(value=ast.Name(id=fdef.name, ctx=ast.Load()))], decorator_list=[], returns=None,
        type_params=[])
    _at(factory, fdef)
    tree.body = [factory]
    ast.fix_missing_locations(tree)
    try:
        code = compile(tree, filename, "exec")
    except SyntaxError as e:
        raise CompileError(f"{filename}:{e.lineno}: {e.msg}") from None
    env = dict(fn.__globals__)
    env[_RT] = _Runtime
    if "range" not in env:
        env["range"] = _Runtime.python_range  # range(...) outside a `for` statement runs while tracing
    for name in ("min", "max"):
        if name not in env:  # Python's min / max, also of kernel scalars
            env[name] = getattr(_Runtime, "python_" + name)
    if env.get("math") is math:  # math.exp(x) of a kernel scalar is a kernel expression (as in Tilus)
        env["math"] = _MATH
    ns = {}
    exec(code, env, ns)
    cells = []
    for cell in fn.__closure__ or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # not bound yet
            cells.append(_Runtime.UNBOUND)
    return ns["__tilus_factory"](*cells)


# --- the runtime helpers the normalized body calls ------------------------------------------------

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
    def loop(script, name, line, *args, unroll=None, num_stages=None, warp_specialize=False, persistent=False):
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
        b = _builder()
        var = b.begin_for(name, begin, end, step, u, loc, num_stages or 0, warp_specialize, persistent)
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
    from .instructions._args import MappedBarrier
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
