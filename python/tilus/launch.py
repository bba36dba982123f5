"""Tracing a Script for a call's arguments, compiling it, and launching it.

A call ``MyKernel(hparams)(*args)`` maps each argument to its parameter by the annotations of
``__call__``: ``int32``, ``float32``, ... are runtime scalars, ``~dtype`` runtime pointers
(torch / cupy tensors, numpy arrays, anything with ``__dlpack__`` or
``__cuda_array_interface__``), Python ``int``/``float``/``bool``/``str`` compile-time constants.
Runtime integers are specialized on divisibility by 16 and pointers on 16-byte alignment. The
first call for a specialization traces, runs the passes and compiles; later calls are one
dictionary lookup and the launch.

Python only turns each argument object into what the C++ core launches with (a KernelArg:
address, element dtype, byte extent, device, read-only flag, byte order, shape and byte
strides; or a number); the core checks the arguments (the kernel's argument contract among
them), says what the call specializes on and which backend it runs on, exactly as for C++
launches.
"""
import inspect
import os
import re
import sys
import threading

from . import _C
from ._C import ArgumentError, CompileError, DataType
from .tensor import Tensor as _HostTensor
from .tracing import _describe, _located, _raised_at, _tracing, tracing
from .transform import normalize

_CONST_TYPES = {int: "int", float: "float", bool: "bool", str: "str"}

# torch / numpy dtype names -> tilus data types
_DTYPE_NAMES = {
    "float16": "float16", "half": "float16", "bfloat16": "bfloat16", "float32": "float32", "float": "float32",
    "float64": "float64", "double": "float64", "int8": "int8", "int16": "int16", "int32": "int32", "int": "int32",
    "int64": "int64", "long": "int64", "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "bool": "bool", "float8_e4m3fn": "float8_e4m3", "float8_e5m2": "float8_e5m2",
}
_TYPESTR = {"f2": "float16", "f4": "float32", "f8": "float64", "i1": "int8", "i2": "int16", "i4": "int32",
            "i8": "int64", "u1": "uint8", "u2": "uint16", "u4": "uint32", "u8": "uint64", "b1": "bool"}
_POINTEES = {name: DataType.from_name(name) for name in set(_DTYPE_NAMES.values())}
# The typestr byte-order character of data in the other byte order than the host's.
_FOREIGN_ORDER = ">" if sys.byteorder == "little" else "<"

_lock = threading.Lock()


class _Param:
    # index: the position among the kernel's runtime parameters (as C++ messages count them),
    # or in the whole signature for a compile-time constant
    __slots__ = ("name", "index", "kind", "dtype", "const_type")

    def __init__(self, name, index, kind, dtype=None, const_type=None):
        self.name, self.index, self.kind, self.dtype, self.const_type = name, index, kind, dtype, const_type


def _annotations(fn, scope):
    """Parameter annotations; strings (PEP 563) are evaluated in the function's globals, the
    names visible where its class was defined (`scope`: a factory function's arguments and
    locals) and its closure."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1:]  # drop self
    names = dict(scope)
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            names[name] = cell.cell_contents
        except ValueError:  # not bound yet
            pass
    out = []
    for p in params:
        ann = p.annotation
        if isinstance(ann, str):
            try:
                ann = eval(ann, fn.__globals__, names)  # noqa: S307 - the user's own annotation
            except Exception as e:
                raise CompileError(f"{inspect.getsourcefile(fn)}:{fn.__code__.co_firstlineno}: cannot evaluate the "
                                   f"annotation of parameter '{p.name}' ({p.annotation!r}): {e}") from None
        out.append((p.name, ann, p))
    return out


class _Signature:
    def __init__(self, cls):
        fn = cls._tilus_body
        self.name = cls.__name__
        self.file = inspect.getsourcefile(fn)
        self.line = fn.__code__.co_firstlineno
        self.params = []
        runtime = []
        for i, (name, ann, p) in enumerate(_annotations(fn, cls.__dict__.get("_tilus_scope", {}))):
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise CompileError(f"{self.file}:{self.line}: {cls.__name__}.__call__: *args / **kwargs are not "
                                   "supported in a kernel signature")
            if isinstance(ann, DataType):
                self.params.append(_Param(name, len(runtime), "ptr" if ann.is_pointer() else "scalar", ann))
                runtime.append((name, ann))
            elif isinstance(ann, type) and ann in _CONST_TYPES:
                self.params.append(_Param(name, i, "const", const_type=ann))
            else:
                raise CompileError(
                    f"{self.file}:{self.line}: {cls.__name__}.__call__: parameter '{name}' needs an annotation: a tilus "
                    f"dtype (int32, float32, ...) for a runtime scalar, ~dtype for a pointer, or int / float / bool / "
                    f"str for a compile-time constant (got {ann!r})")
        self.kernel = _C.KernelSignature(cls.__name__, runtime)  # checks the runtime arguments
        self.normalized = None


def signature(cls):
    sig = cls.__dict__.get("_tilus_signature")
    if sig is None:
        sig = _Signature(cls)
        cls._tilus_signature = sig
    return sig


# --- arguments ----------------------------------------------------------------------------------

def _argument_error(kernel, p, why):
    return ArgumentError(f"kernel {kernel}, argument {p.index} ('{p.name}': {p.dtype!r}): {why}")


def _pointer(obj, p, kernel):
    """The KernelArg of an array argument (address, element dtype, bytes, device, and what the
    core's argument contract checks: read-only, byte order, shape and byte strides) and who owns
    the stream it is used on ("torch" or None)."""
    if isinstance(obj, _HostTensor):  # tilus.empty(...), tilus.from_torch(...): any tilus dtype, bit-packed
        pointee = p.dtype.pointee
        if pointee.name != "void" and pointee != obj.dtype:
            raise _argument_error(kernel, p, f"points to {obj.dtype!r} data (a tilus.Tensor), the kernel reads "
                                             f"{pointee!r}")
        return _C.KernelArg.pointer(obj.data_ptr(), obj.dtype, obj.nbytes, obj.device), (
            "torch" if hasattr(obj.storage, "data_ptr") else None)
    if type(obj) is int:  # a raw address (NVIDIA Tilus's examples pass tensor.data_ptr())
        if obj <= 0 or obj >= 1 << 64:
            raise _argument_error(kernel, p, f"a raw address must be a positive 64-bit integer, got {obj}")
        # Device memory of unknown extent: the GPU launch finds its allocation (or refuses it).
        return _C.KernelArg.pointer(obj, p.dtype.pointee, -1, "cuda"), None
    mod = type(obj).__module__
    if mod.startswith("torch"):
        device = "cuda" if obj.is_cuda else obj.device.type
        size = obj.element_size()
        return _typed(p, kernel, obj.data_ptr(), str(obj.dtype)[len("torch."):], obj.numel() * size, device,
                      shape=tuple(obj.shape), byte_strides=[s * size for s in obj.stride()]), "torch"
    if mod.startswith("numpy"):
        return _typed(p, kernel, obj.ctypes.data, obj.dtype.name, obj.nbytes, "cpu",
                      read_only=not obj.flags.writeable, foreign_byte_order=not obj.dtype.isnative,
                      shape=obj.shape, byte_strides=obj.strides), None
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        n = 1
        for s in cai["shape"]:
            n *= s
        typestr = cai["typestr"]
        dtype = _TYPESTR.get(typestr[1:], typestr)
        strides = cai.get("strides")  # None: C-contiguous
        return _typed(p, kernel, cai["data"][0], dtype, n * int(typestr[2:] or 1), "cuda",
                      read_only=bool(cai["data"][1]), foreign_byte_order=typestr[0] == _FOREIGN_ORDER,
                      shape=tuple(cai["shape"]) if strides else (), byte_strides=tuple(strides or ())), None
    if hasattr(obj, "__dlpack__"):
        try:
            import torch
            return _pointer(torch.from_dlpack(obj), p, kernel)
        except ImportError:
            import numpy
            return _pointer(numpy.from_dlpack(obj), p, kernel)
    raise _argument_error(kernel, p, "expected a tensor (torch, cupy, numpy, DLPack or CUDA array interface) or an int "
                                     "address, got "
                                     f"{type(obj).__name__}")


def _typed(p, kernel, address, dtype, nbytes, device, **layout):
    pointee = _POINTEES.get(_DTYPE_NAMES.get(dtype, dtype))
    if pointee is None:  # a dtype tilus has no name for: only a void* parameter takes it
        if p.dtype.pointee.name != "void":
            raise _argument_error(kernel, p, f"points to {dtype} data, the kernel reads {p.dtype.pointee!r}")
        pointee = p.dtype.pointee
    return _C.KernelArg.pointer(address, pointee, nbytes, device, **layout)


def _scalar(a, p, kernel):
    """A scalar argument as the Python int or float the core takes (it checks kinds and ranges)."""
    if type(a) is int or type(a) is float:
        return float(a) if p.dtype.is_float() else a
    if isinstance(a, bool) and not p.dtype.is_bool() or not isinstance(a, (int, float)) and not hasattr(a, "__index__"):
        raise _argument_error(kernel, p, f"expected a number, got {type(a).__name__}")
    v = float(a) if isinstance(a, float) else a.__index__()
    return float(v) if p.dtype.is_float() else v


def _stream_handle(stream, kernel):
    """The CUDA stream handle that a stream= argument names (an int handle, or an object with
    cuda_stream / ptr / handle); an ArgumentError naming the kernel for anything else."""
    value = stream
    for attr in ("cuda_stream", "ptr", "handle"):
        if hasattr(stream, attr):
            value = getattr(stream, attr)
            break
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ArgumentError(f"kernel {kernel}: stream= must be a CUDA stream (an int handle, or an object with "
                            f"cuda_stream / ptr / handle), got {_describe(stream)}")
    return value


def _stream_of(stream, owner):
    if stream is not None:
        return stream
    if owner == "torch":
        import torch
        return torch.cuda.current_stream().cuda_stream
    return 0


def bind(sig, args, kw):
    """A call's arguments in parameter order (keywords placed by name) and its stream= argument."""
    stream = None
    if kw:
        kw = dict(kw)
        stream = kw.pop("stream", None)
    if kw:
        names = [p.name for p in sig.params]
        if len(args) > len(names):
            raise ArgumentError(f"kernel {sig.name} takes {len(names)} arguments ({', '.join(names)}), got {len(args)} "
                                "by position")
        missing = object()
        args = list(args) + [missing] * (len(names) - len(args))
        for k, v in kw.items():
            if k not in names:
                raise ArgumentError(f"kernel {sig.name} has no parameter '{k}' (parameters: {', '.join(names)})")
            i = names.index(k)
            if args[i] is not missing:
                raise ArgumentError(f"kernel {sig.name}: argument '{k}' is given both by position and by name")
            args[i] = v
        absent = [n for n, a in zip(names, args) if a is missing]
        if absent:
            raise ArgumentError(f"kernel {sig.name}: missing argument{'s' if len(absent) > 1 else ''} "
                                f"{', '.join(repr(n) for n in absent)} (parameters: {', '.join(names)})")
    if len(args) != len(sig.params):
        raise ArgumentError(f"kernel {sig.name} takes {len(sig.params)} arguments "
                            f"({', '.join(p.name for p in sig.params)}), got {len(args)}")
    return args, stream


class Call:
    """One call's arguments as the core takes them: `values` (KernelArgs and numbers) of the
    runtime parameters, the compile-time `constants`, the specialization `key` (per parameter:
    True / False for integers and pointers, None for floats, ("c", value) for a constant; the
    backend last), the `facts` for the traced program, where it runs and on which stream."""
    __slots__ = ("values", "constants", "key", "facts", "backend", "owner", "stream")


def arguments(sig, args, stream=None):
    """Checks a call's arguments (errors name the kernel and the parameter) and returns its Call."""
    c = Call()
    c.values, c.constants, c.owner = [], {}, None
    # Checked for every backend (the CPU backend's launches are synchronous and ignore it).
    c.stream = None if stream is None else _stream_handle(stream, sig.name)
    for p, a in zip(sig.params, args):
        if p.kind == "ptr":
            value, owner = _pointer(a, p, sig.name)
            c.owner = c.owner or owner
            c.values.append(value)
        elif p.kind == "scalar":
            c.values.append(_scalar(a, p, sig.name))
        else:
            if not isinstance(a, p.const_type) or (p.const_type is int and isinstance(a, bool)):
                raise ArgumentError(f"kernel {sig.name}, argument {p.index} ('{p.name}'): a compile-time "
                                    f"{p.const_type.__name__}, got {a!r}")
            c.constants[p.name] = a
    flags, c.backend, c.facts = sig.kernel.check(c.values)
    if c.constants:
        flag = iter(flags)
        flags = tuple(("c", c.constants[p.name]) if p.kind == "const" else next(flag) for p in sig.params)
    c.key = flags + (c.backend,)
    return c


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
    with tracing(b):
        _tracing.script = script  # the Script a tilus.Class reaches (classes.py)
        script.attrs._values.clear()  # each trace sets them anew
        try:
            result = sig.normalized(script, *args)
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

_CONST_KINDS = {int: 0, float: 1, bool: 2, str: 3}


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def make_fast(sig, bucketed=False):
    """The C++ fast path (tilus._C.FastPath) for a signature's calls: torch tensors of the
    parameters' dtypes (CUDA or CPU), tilus.Tensors, cupy / numpy / DLPack arrays, Python numbers
    and compile-time constants, by position or by name, with or without stream=. `bucketed`: a
    tuner's path, whose key holds each int's tuning bucket."""
    torch = _torch()
    names = {} if torch is None else {v: getattr(torch, k) for k, v in _DTYPE_NAMES.items() if hasattr(torch, k)}
    params = []
    for p in sig.params:
        if p.kind == "const":
            params.append((4, p.name, None, None, False, _CONST_KINDS[p.const_type]))
        elif p.kind == "ptr":
            pointee = p.dtype.pointee
            void = pointee.name == "void"
            params.append((0, p.name, pointee, None if void else names.get(pointee.name), void or pointee.name in names, 0))
        else:
            params.append((2 if p.dtype.is_float() else 1, p.name, p.dtype, None, False, 0))
    raw_stream = None if torch is None else getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return _C.FastPath(params, None if torch is None else torch.Tensor, raw_stream, _HostTensor, bucketed)


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


class _Skipped(threading.local):
    depth = 0


_skipped = _Skipped()


class skipped_launches:
    """Launches in this thread do nothing while it is entered (tilus.torch's default fake
    functions run so, on FakeTensors)."""

    def __enter__(self):
        _skipped.depth += 1

    def __exit__(self, *exc):
        _skipped.depth -= 1
        return False


def launch(script, args, kw):
    if _skipped.depth:
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
    path's METH_FASTCALL entry (no pybind11 dispatcher in between) before anything else."""
    constants = [call.constants[p.name] for p in sig.params if p.kind == "const"]
    shared.fast_path(sig).add(compiled.kernel, call.values, constants)


def fast_path_on():
    """Whether calls are registered on the fast path: not under TILUS_TARGET (which moves every
    launch to one backend) nor TILUS_FAST_PATH=0 (every call takes the general path; the bench
    measures that path with it). A kernel whose backend is not where its arrays are (TILUS_TARGET=gpu
    with host arrays) is never registered (FastPath.add)."""
    return not _TARGET_CPU and os.environ.get("TILUS_FAST_PATH", "1") != "0"


_TARGET_CPU = os.environ.get("TILUS_TARGET", "") == "cpu"


def compiled_kernels(script):
    """The kernels compiled for a Script instance so far: {specialization key: (backend, Program)};
    instances of one class whose attributes are the same plain data share them.

    The key has one entry per parameter (True / False: whether an integer is divisible by 16 or
    a pointer 16-byte aligned; None for floats; ("c", value) for a compile-time constant) and
    the backend ("gpu" or "cpu") last; the Program is the traced one (``str()`` prints it).
    """
    shared = script.__dict__.get("_tilus_shared")
    return {} if shared is None else {k: (c.backend, c.program) for k, c in shared.kernels.items()}
