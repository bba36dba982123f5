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
  variable it is first bound to. ``a, b = b, a`` (a tuple of names) binds each target to the value
  it had when the statement began: a value that an earlier target's in-place assign would
  overwrite is copied first.
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
the rewritten body calls (``_Runtime``) are in transform_runtime.py.
"""
import ast
import copy
import inspect
import math
import textwrap

from ._C import CompileError
from .transform_runtime import _MATH, _Runtime

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
            # (__tilus_rt.unpack: a value that an earlier target's in-place assign would overwrite is
            # copied first, so that `a, b = b, a` swaps)
            names = [e.id for e in node.targets[0].elts]
            unpack = _call("unpack", [_self(node), node.value, _strings(names, node), _pre_values(names, node),
                                      _const(node.lineno, node)], node)
            out = [_assign(tmp, unpack, node)]
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
