"""Tracing a Script for a call's arguments, compiling it, and launching it.

The first call for a specialization traces, runs the passes and compiles; later calls are one
dictionary lookup and the launch. A call's arguments are mapped to the kernel's parameters, read
and checked in arguments.py.
"""
import os
import re
import threading

from . import _C
from ._C import ArgumentError, CompileError, DataType
from .arguments import _stream_of, arguments, bind, make_fast, signature
from .tracing import _describe, _located, _raised_at, _tracing, tracing
from .transform import normalize

_lock = threading.Lock()
# One trace at a time: a body keeps its state on the instance (self.<view> = ..., self.attrs), so
# two threads tracing one instance (a tuner compiling its candidates in parallel) would read each
# other's; tracing is Python under the GIL anyway (NVRTC's compile, after it, runs in parallel).
_trace_lock = threading.RLock()


# --- compiling ----------------------------------------------------------------------------------

def trace(script, constants=None):
    """The traced (not yet lowered) Program of a Script instance; ``str()`` prints its tile IR.

    ``constants`` maps the names of the compile-time parameters of ``__call__`` (those annotated
    ``int``, ``float``, ``bool`` or ``str``) to their values; each needs one. Nothing is
    compiled and no arguments are needed.

    Raises:
        CompileError: the body cannot be traced (at its ``file:line``), or a constant is missing.
    """
    cls = type(script)
    if getattr(cls, "_tilus_body", None) is None:
        what = f"the class {script.__name__} (make an instance: {script.__name__}(...))" if isinstance(script, type) \
            else _describe(script)
        raise CompileError(f"tilus.trace: expects an instance of a tilus.Script subclass that defines __call__ (the "
                           f"kernel body), got {what}")
    sig = signature(cls)
    if sig.normalized is None:
        sig.normalized = normalize(cls._tilus_body)
    constants = constants or {}
    b = _C.Builder(cls.__name__, (sig.file, sig.line))
    args = []
    for p in sig.params:
        if p.kind == "const":
            if p.name not in constants:
                raise CompileError(f"{sig.file}:{sig.line}: {cls.__name__}: compile-time parameter '{p.name}' has no value")
            v = constants[p.name]
            b.add_constant(p.name, repr(v))
            args.append(v)
        else:
            args.append(b.add_param(p.name, p.dtype, (sig.file, sig.line)))
    with _trace_lock, tracing(b):
        _tracing.script = script  # the Script a tilus.Class reaches (classes.py)
        script.attrs._values.clear()  # each trace sets them anew
        try:
            result = sig.normalized(script, *(a for p, a in zip(sig.params, args) if not p.keyword_only),
                                    **{p.name: a for p, a in zip(sig.params, args) if p.keyword_only})
            if result is not None:
                raise CompileError(f"{sig.file}:{sig.line}: {cls.__name__}.__call__ returned {_describe(result)}: a "
                                   "kernel returns nothing (it writes its results through pointer parameters)")
            return b.finish()
        except Exception as e:  # noqa: BLE001 - every mistake in the body is reported at the user's line
            raise _trace_error(e) from (None if isinstance(e, _C.Error) else e)


def _trace_error(e):
    """An exception raised while tracing as a tilus error at the user's line: tilus errors as
    they are (given the line when they have none), other Python errors in the body (a TypeError,
    a NameError, ...) as CompileErrors that name them."""
    at = _raised_at(e.__traceback__)
    where = f"{at[0]}:{at[1]}: " if at else ""
    if isinstance(e, _C.Error):
        if _located(str(e)) or not where:
            return e
        return type(e)(where + str(e))
    text = str(e)
    bad_call = re.match(r"(\w+)\(\): incompatible function arguments.*Invoked with: (.*)", text, re.S)
    if bad_call:  # a tilus._C function called with the wrong types (pybind11's message lists C++ signatures)
        text = f"{bad_call.group(1)}: wrong argument types ({bad_call.group(2).strip()})"
    return CompileError(f"{where}{type(e).__name__}: {text}")


def _env_flag(name):
    return os.environ.get(name, "") not in ("", "0", "false", "False")


class _Compiled:
    __slots__ = ("kernel", "backend", "program")

    def __init__(self, kernel, backend, program):
        self.kernel, self.backend, self.program = kernel, backend, program


def specialized(script, call):
    """The traced program of a call, specialized on its arguments' facts (what it compiles)."""
    program = trace(script, call.constants)
    program.specialize(call.facts)
    return program


def _compile(script, call):
    program = specialized(script, call)
    if call.backend == "cpu":
        if not _C.cpu_backend_available():
            raise CompileError("the CPU backend is not available: " + _C.cpu_unavailable_reason())
        kernel = _C.compile_cpu(program, checked=_env_flag("TILUS_CPU_CHECK"))
    else:
        if not _C.gpu_available():
            raise ArgumentError("no GPU: " + _C.gpu_unavailable_reason() + " (use host arrays or TILUS_TARGET=cpu "
                                "to run on the CPU backend)")
        kernel = _C.compile_gpu(program)
    return _Compiled(kernel, call.backend, program)


# --- launching ----------------------------------------------------------------------------------

class Shared:
    """What the instances of a Script class whose attributes are the same plain data share (or
    one instance alone, when they are not plain): the compiled kernels, by specialization key,
    and the fast path that launches them. A tuner's Shared has its `tuner` (tuning.Tuner) and a
    bucketed fast path to the winners."""
    __slots__ = ("kernels", "fast", "entry", "attrs", "tuner")

    def __init__(self, attrs=None, tuner=None):
        self.kernels, self.fast, self.entry, self.attrs, self.tuner = {}, None, None, attrs, tuner

    def fast_path(self, sig):
        if self.fast is None:
            self.fast = make_fast(sig, bucketed=self.tuner is not None)
            self.entry = self.fast.entry
        return self.fast


# Compiled kernels shared by the instances of a Script class whose attributes print the same:
# NVIDIA Tilus's kernels are often made anew for every call (`Kernel()(x, y)` inside a Python
# function), which must not trace and compile again each time.
_shared_kernels = {}
# (class, constructor arguments and their types) -> the Shared state its instances join when made
# (script._ScriptType), for classes called before (their _tilus_signature exists).
by_constructor = {}
_BASE_ATTRS = {"attrs", "blockIdx", "cluster"}


def plain_key(items):
    """A key for (name, value) pairs whose values are plain data (numbers, strings, None, data
    types, and tuples / lists / dicts of them), which their repr identifies; None otherwise."""
    def plain(v):
        if v is None or isinstance(v, (bool, int, float, str, DataType)):
            return True
        if isinstance(v, (tuple, list)):
            return all(plain(x) for x in v)
        if isinstance(v, dict):
            return all(plain(k) and plain(x) for k, x in v.items())
        return False
    items = sorted(items, key=lambda kv: kv[0])
    return repr(items) if all(plain(v) for _, v in items) else None


def user_attributes(script):
    """What the constructor set on a Script instance (its attributes but tilus's own)."""
    return {k: v for k, v in vars(script).items() if not k.startswith("_tilus") and k not in _BASE_ATTRS}


def shared_of(script):
    """The Shared state of a Script instance: that of the other instances of its class whose
    attributes (what its constructor set) are the same plain data (plain_key), else its own."""
    shared = script.__dict__.get("_tilus_shared")
    if shared is not None:
        return shared
    attrs = user_attributes(script)
    key = plain_key(attrs.items())
    if key is None:
        shared = Shared()
    else:
        with _lock:
            shared = _shared_kernels.get((type(script), key))
            if shared is None:
                shared = _shared_kernels[(type(script), key)] = Shared(attrs)
    script.__dict__["_tilus_shared"] = shared
    return shared


def prepare(script, args, kw):
    """Checks a call's arguments and returns (compiled kernel, Call), compiling the
    specialization on first use."""
    cls = type(script)
    sig = cls.__dict__.get("_tilus_signature") or signature(cls)
    call = arguments(sig, *bind(sig, args, kw))
    cache = shared_of(script).kernels
    compiled = cache.get(call.key)
    if compiled is None:
        compiled = _compile(script, call)  # outside the lock: several threads compile in parallel
        with _lock:
            compiled = cache.setdefault(call.key, compiled)
    return compiled, call


def run(compiled, call):
    if compiled.backend == "cpu":
        compiled.kernel.launch(call.values)
    else:
        compiled.kernel.launch(call.values, _stream_of(call.stream, call.owner))


class skipped_launches:
    """Launches in this thread do nothing while it is entered (tilus.torch's default fake
    functions run so, on FakeTensors). The depth is the C++ core's (tilus._C.skip_launches), which
    Script.__call__ reads before anything else."""

    def __enter__(self):
        _C.skip_launches(1)

    def __exit__(self, *exc):
        _C.skip_launches(-1)
        return False


def launch(script, args, kw):
    """A call the fast path did not launch (Script.__call__, tilus._C.script_launch_call)."""
    if _C.skip_launches(0):
        return None
    tuner = script.__dict__.get("_tilus_tuner")
    if tuner is not None:
        return tuner.call(script, args, kw)
    compiled, call = prepare(script, args, kw)
    run(compiled, call)
    if fast_path_on():
        shared = script.__dict__["_tilus_shared"]
        register_fast(shared, type(script).__dict__["_tilus_signature"], compiled, call)
        script.__dict__["_tilus_fast"] = shared.entry
    return None


def register_fast(shared, sig, compiled, call):
    """Makes later calls with this call's key take the fast path: Script.__call__ calls the
    path's METH_FASTCALL entry (no pybind11 dispatcher in between) before anything else. Not for a
    signature with keyword-only parameters: the path places arguments by position."""
    if any(p.keyword_only for p in sig.params):
        return
    constants = [call.constants[p.name] for p in sig.params if p.kind == "const"]
    shared.fast_path(sig).add(compiled.kernel, call.values, constants)


def fast_path_on():
    """Whether calls are registered on the fast path: not under TILUS_TARGET (which moves every
    launch to one backend) nor TILUS_FAST_PATH=0 (every call takes the general path; the bench
    measures that path with it). A kernel whose backend is not where its arrays are (TILUS_TARGET=gpu
    with host arrays) is never registered (FastPath.add)."""
    return not _TARGET_CPU and os.environ.get("TILUS_FAST_PATH", "1") != "0"


_TARGET_CPU = os.environ.get("TILUS_TARGET", "") == "cpu"


class Specialization(tuple):
    """A key of ``tilus.compiled_kernels``: a tuple with one entry per parameter (True / False:
    whether an integer is divisible by 16 or a pointer 16-byte aligned; None for floats;
    ("c", value) for a compile-time constant) and the backend ("gpu" or "cpu") last, which
    prints what each entry means and names them: ``key.params`` ({parameter: entry}),
    ``key.backend``."""

    def __new__(cls, key, sig):
        k = super().__new__(cls, key)
        k._sig = sig
        return k

    @property
    def backend(self):
        """"gpu" or "cpu"."""
        return self[-1]

    @property
    def params(self):
        """{parameter name: its entry}, in the kernel's order."""
        return {p.name: v for p, v in zip(self._sig.params, self)}

    def __repr__(self):
        def entry(p, v):
            if p.kind == "const":
                return f"{p.name}={v[1]!r}"
            if p.kind == "ptr":
                return f"{p.name}: {'16-byte aligned' if v else 'not 16-byte aligned'}"
            if v is None:
                return f"{p.name}: {p.dtype!r}"
            return f"{p.name}: {'divisible by 16' if v else 'not divisible by 16'}"
        return f"Specialization({', '.join(entry(p, v) for p, v in zip(self._sig.params, self))}; {self.backend})"


def compiled_kernels(script):
    """The kernels compiled for a Script instance so far: {specialization key: (backend, Program)};
    instances of one class whose attributes are the same plain data share them.

    Each key is a ``tilus.launch.Specialization``: the tuple of what the call specialized on, one
    entry per parameter (True / False: whether an integer is divisible by 16 or a pointer 16-byte
    aligned; None for floats; ("c", value) for a compile-time constant), the backend ("gpu" or
    "cpu") last; it prints as ``Specialization(n: divisible by 16, x: 16-byte aligned, scale=2.0;
    cpu)`` and has ``.params`` and ``.backend``. The Program is the traced one (``str()`` prints it).
    """
    sig = type(script).__dict__.get("_tilus_signature")
    shared = script.__dict__.get("_tilus_shared")
    return {} if shared is None else {Specialization(k, sig): (c.backend, c.program) for k, c in shared.kernels.items()}
