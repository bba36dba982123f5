"""A call's arguments: a Script's signature (the annotations of its ``__call__``), each argument
as the C++ core takes it, and the C++ fast path (tilus._C.FastPath) that reads a call's arguments.

A call ``MyKernel(hparams)(*args)`` maps each argument to its parameter by the annotations of
``__call__``: ``int32``, ``float32``, ... are runtime scalars, ``~dtype`` runtime pointers
(torch / cupy tensors, numpy arrays, anything with ``__dlpack__`` or
``__cuda_array_interface__``), Python ``int``/``float``/``bool``/``str`` compile-time constants.
Runtime integers are specialized on divisibility by 16 and pointers on 16-byte alignment.

Python only turns each argument object into what the C++ core launches with (a KernelArg:
address, element dtype, byte extent, device, read-only flag, byte order, shape and byte
strides; or a number); the core checks the arguments (the kernel's argument contract among
them), says what the call specializes on and which backend it runs on, exactly as for C++
launches.
"""
import inspect
import sys

from . import _C
from ._C import ArgumentError, CompileError, DataType
from .tensor import Tensor as _HostTensor
from .tracing import _describe

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
        self.keyword_only = any(p.keyword_only for p in self.params)
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
        raw = _raw_stream[0]
        if raw is None:
            import torch
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
                lambda d: torch.cuda.current_stream(d).cuda_stream)
            _raw_stream[0] = raw
        return raw(device)
    return 0


_raw_stream = [None]  # torch's current-stream reader, found at the first launch that needs it


def bind(sig, args, kw):
    """A call's arguments in parameter order (keywords placed by name) and its stream= argument."""
    stream = None
    if kw:
        kw = dict(kw)
        stream = kw.pop("stream", None)
    elif len(args) == len(sig.params) and not sig.keyword_only:  # every argument by position
        return args, None
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
    """One call's arguments as the core takes them: `values` (KernelArgs and numbers, or the
    core's ArgList of them) of the runtime parameters, the compile-time `constants`, the
    specialization `key` (per parameter: True / False for integers and pointers, None for floats,
    ("c", value) for a constant; the backend last), the `facts` for the traced program, where it
    runs and on which stream (`owner`: the CUDA device of the first torch tensor, whose current
    stream it runs on)."""
    __slots__ = ("values", "constants", "key", "_facts", "backend", "owner", "stream")

    @property
    def facts(self):
        """The specialization facts (an ArgList keeps them in C++ until a compile asks)."""
        return self.values.facts if self._facts is None else self._facts


def arguments(sig, args, stream=None):
    """Checks a call's arguments (errors name the kernel and the parameter) and returns its Call."""
    c = Call()
    # Checked for every backend (the CPU backend's launches are synchronous and ignore it).
    c.stream = None if stream is None else _stream_handle(stream, sig.name)
    reader = sig.reader
    if reader is None:
        reader = sig.reader = make_fast(sig)
    # Only torch tensors and plain numbers: read and checked in one C++ pass, kept in C++.
    checked = reader.check_call(args, sig.kernel)
    if checked is not None:
        c.values, flags, c.backend, c.owner = checked
        c.constants, c._facts = {}, None
        c.key = flags + (c.backend,)
        return c
    values, constants = c.values, c.constants = [], {}
    # The torch tensors and plain numbers as the fast path reads them, in C++; everything else (and
    # every error) here. The launch's owner: the CUDA device of the first torch tensor.
    read, owner_at, c.owner = reader.read_arrays(args)
    for i, p in enumerate(sig.params):
        r = read[i]
        if r is not None:
            values.append(r)
        elif p.kind == "ptr":
            value, owner = _pointer(args[i], p, sig.name)
            if owner is not None and i < owner_at:
                c.owner, owner_at = owner, i
            values.append(value)
        elif p.kind == "scalar":
            values.append(_scalar(args[i], p, sig.name))
        else:
            a = args[i]
            if not isinstance(a, p.const_type) or (p.const_type is int and isinstance(a, bool)):
                raise ArgumentError(f"kernel {sig.name}, argument {p.index} ('{p.name}'): a compile-time "
                                    f"{p.const_type.__name__}, got {a!r}")
            constants[p.name] = a
    flags, c.backend, c._facts = sig.kernel.check(c.values)
    if c.constants:
        flag = iter(flags)
        flags = tuple(("c", c.constants[p.name]) if p.kind == "const" else next(flag) for p in sig.params)
    c.key = flags + (c.backend,)
    return c


# --- the fast path's reader ---------------------------------------------------------------------

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
