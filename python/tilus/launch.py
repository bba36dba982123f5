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
    __slots__ = ("name", "index", "kind", "dtype", "const_type", "keyword_only")

    def __init__(self, name, index, kind, dtype=None, const_type=None):
        self.name, self.index, self.kind, self.dtype, self.const_type = name, index, kind, dtype, const_type
        self.keyword_only = False  # after `*` in __call__: passed by name only


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
            self.params[-1].keyword_only = p.kind == p.KEYWORD_ONLY
        self.kernel = _C.KernelSignature(cls.__name__, runtime)  # checks the runtime arguments
        self.normalized = None
        self.reader = None  # a FastPath that reads the torch tensors of a call (arguments())


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
    core's argument contract checks: read-only, byte order, shape and byte strides) and, for
    torch's CUDA memory, its device (whose current torch stream the launch uses), else None."""
    if isinstance(obj, _HostTensor):  # tilus.empty(...), tilus.from_torch(...): any tilus dtype, bit-packed
        pointee = p.dtype.pointee
        if pointee.name != "void" and pointee != obj.dtype:
            raise _argument_error(kernel, p, f"points to {obj.dtype!r} data (a tilus.Tensor), the kernel reads "
                                             f"{pointee!r}")
        storage = obj.storage
        return _C.KernelArg.pointer(obj.data_ptr(), obj.dtype, obj.nbytes, obj.device), (
            storage.get_device() if hasattr(storage, "data_ptr") and storage.is_cuda else None)
    if type(obj) is int:  # a raw address (NVIDIA Tilus's examples pass tensor.data_ptr())
        if obj <= 0 or obj >= 1 << 64:
            raise _argument_error(kernel, p, f"a raw address must be a positive 64-bit integer, got {obj}")
        # Device memory of unknown extent: the GPU launch finds its allocation (or refuses it).
        return _C.KernelArg.pointer(obj, p.dtype.pointee, -1, "cuda"), None
    mod = type(obj).__module__
    if mod.startswith("torch"):
        cuda = obj.is_cuda
        size = obj.element_size()
        return _typed(p, kernel, obj.data_ptr(), str(obj.dtype)[len("torch."):], obj.numel() * size,
                      "cuda" if cuda else obj.device.type, shape=tuple(obj.shape),
                      byte_strides=[s * size for s in obj.stride()]), obj.get_device() if cuda else None
    if mod.startswith("numpy"):
        # dtype.str ("<f4") is read in 0.1 us, dtype.name in 7 us (a one-block CPU call's budget)
        dtype = _TYPESTR.get(obj.dtype.str[1:]) or obj.dtype.name
        return _typed(p, kernel, obj.ctypes.data, dtype, obj.nbytes, "cpu",
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


def _is_array(a):
    """Whether an argument is an array (what a ~dtype parameter takes), not a number: numpy
    scalars (0-d, with __index__ / __float__) are numbers."""
    if isinstance(a, _HostTensor):
        return True
    if getattr(a, "ndim", 0) == 0 and (hasattr(a, "__index__") or hasattr(a, "__float__")):
        return False
    return any(hasattr(a, n) for n in ("__dlpack__", "__cuda_array_interface__", "__array_interface__", "shape"))


def _scalar(a, p, kernel):
    """A scalar argument as the Python int or float the core takes (it checks kinds and ranges)."""
    if type(a) is int or type(a) is float:
        return float(a) if p.dtype.is_float() else a
    if _is_array(a):
        what = f"{type(a).__module__.split('.')[0]}.{type(a).__name__}"
        if hasattr(a, "shape") and hasattr(a, "dtype"):
            what += f" of shape {tuple(a.shape)} and dtype {a.dtype}"
        raise _argument_error(kernel, p, f"the parameter is a {p.dtype!r} scalar, got an array ({what}); a parameter "
                                         f"that takes an array is a pointer: annotate it '{p.name}: ~{p.dtype!r}'")
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


def _stream_of(stream, device):
    """The stream of a launch: stream= when given, else torch's current stream of the CUDA device
    of the call's first torch tensor (as the fast path reads it), else the default stream."""
    if stream is not None:
        return stream
    if device is not None:
        import torch
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        return raw(device) if raw is not None else torch.cuda.current_stream(device).cuda_stream
    return 0


def bind(sig, args, kw):
    """A call's arguments in parameter order (keywords placed by name) and its stream= argument."""
    stream = None
    if kw:
        kw = dict(kw)
        stream = kw.pop("stream", None)
    keyword_only = [p.name for p in sig.params[:len(args)] if p.keyword_only]
    if keyword_only:
        raise ArgumentError(f"kernel {sig.name}: parameter '{keyword_only[0]}' is keyword-only (after `*` in "
                            f"__call__): pass it by name, {keyword_only[0]}=...")
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
    backend last), the `facts` for the traced program, where it runs and on which stream
    (`owner`: the CUDA device of the first torch tensor, whose current stream it runs on)."""
    __slots__ = ("values", "constants", "key", "facts", "backend", "owner", "stream")


def arguments(sig, args, stream=None):
    """Checks a call's arguments (errors name the kernel and the parameter) and returns its Call."""
    c = Call()
    c.values, c.constants, c.owner = [], {}, None
    # Checked for every backend (the CPU backend's launches are synchronous and ignore it).
    c.stream = None if stream is None else _stream_handle(stream, sig.name)
    reader = sig.reader
    if reader is None:
        reader = sig.reader = make_fast(sig)
    # The torch tensors as the fast path reads them, in C++; everything else (and every error) here.
    read = reader.read_arrays(args)
    for p, a, r in zip(sig.params, args, read):
        if p.kind == "ptr":
            value, owner = r if r is not None else _pointer(a, p, sig.name)
            if c.owner is None:
                c.owner = owner
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
