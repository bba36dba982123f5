"""Tracing a Script for a call's arguments, compiling it, and launching it.

A call ``MyKernel(hparams)(*args)`` maps each argument to its parameter by the annotations of
``__call__``: ``int32``, ``float32``, ... are runtime scalars, ``~dtype`` runtime pointers
(torch / cupy tensors, numpy arrays, anything with ``__dlpack__`` or
``__cuda_array_interface__``), Python ``int``/``float``/``bool``/``str`` compile-time constants.
Runtime integers are specialized on divisibility by 16 and pointers on 16-byte alignment. The
first call for a specialization traces, runs the passes and compiles; later calls are one
dictionary lookup and the launch.
"""
import inspect
import os
import threading

from . import _C
from . import script as _script
from ._C import ArgumentError, CompileError, DataType

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

_lock = threading.Lock()


class _Param:
    __slots__ = ("name", "index", "kind", "dtype", "const_type", "torch_dtype")

    def __init__(self, name, index, kind, dtype=None, const_type=None):
        self.name, self.index, self.kind, self.dtype, self.const_type = name, index, kind, dtype, const_type
        self.torch_dtype = None  # set when torch is imported: the torch dtype a pointer must have


def _annotations(fn):
    """Parameter annotations evaluated in the function's globals (works with PEP 563 strings)."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1:]  # drop self
    out = []
    for p in params:
        ann = p.annotation
        if isinstance(ann, str):
            try:
                ann = eval(ann, fn.__globals__)  # noqa: S307 - the user's own annotation
            except Exception as e:
                raise CompileError(f"{inspect.getsourcefile(fn)}:{fn.__code__.co_firstlineno}: cannot evaluate the "
                                   f"annotation of parameter '{p.name}' ({p.annotation!r}): {e}") from None
        out.append((p.name, ann, p))
    return out


class _Signature:
    def __init__(self, cls):
        fn = cls._tilus_body
        self.file = inspect.getsourcefile(fn)
        self.line = fn.__code__.co_firstlineno
        self.params = []
        for i, (name, ann, p) in enumerate(_annotations(fn)):
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise CompileError(f"{self.file}:{self.line}: {cls.__name__}.__call__: *args / **kwargs are not "
                                   "supported in a kernel signature")
            if isinstance(ann, DataType):
                self.params.append(_Param(name, i, "ptr" if ann.is_pointer else "scalar", ann))
            elif ann in _CONST_TYPES:
                self.params.append(_Param(name, i, "const", const_type=ann))
            else:
                raise CompileError(
                    f"{self.file}:{self.line}: {cls.__name__}.__call__: parameter '{name}' needs an annotation: a tilus "
                    f"dtype (int32, float32, ...) for a runtime scalar, ~dtype for a pointer, or int / float / bool / "
                    f"str for a compile-time constant (got {ann!r})")
        self.normalized = None
        # The torch fast path: usable when torch is present and every pointer's dtype maps to one.
        self.torch_ok = False
        try:
            import torch
        except ImportError:
            return
        names = {v: k for k, v in _DTYPE_NAMES.items() if hasattr(torch, k)}
        ok = True
        for p in self.params:
            if p.kind == "ptr":
                pointee = p.dtype.pointee.name
                t = getattr(torch, names.get(pointee, "-"), None) if pointee in names else None
                if t is None:
                    ok = False
                p.torch_dtype = t
        self.torch_ok = ok


def _signature(cls):
    sig = cls.__dict__.get("_tilus_signature")
    if sig is None:
        sig = _Signature(cls)
        cls._tilus_signature = sig
    return sig


# --- arguments ----------------------------------------------------------------------------------

class _Pointer:
    __slots__ = ("address", "dtype", "device", "nbytes", "stream_owner")

    def __init__(self, address, dtype, device, nbytes, stream_owner=None):
        self.address, self.dtype, self.device, self.nbytes, self.stream_owner = address, dtype, device, nbytes, stream_owner


def _pointer(obj, param, kernel):
    """Address, element dtype and device ("cuda" / "cpu") of an array argument."""
    mod = type(obj).__module__
    if mod.startswith("torch"):
        dt = str(obj.dtype).replace("torch.", "")
        dev = "cuda" if obj.is_cuda else "cpu" if obj.device.type == "cpu" else obj.device.type
        return _Pointer(obj.data_ptr(), _DTYPE_NAMES.get(dt, dt), dev, obj.numel() * obj.element_size(), "torch")
    if mod.startswith("numpy"):
        return _Pointer(obj.ctypes.data, _DTYPE_NAMES.get(obj.dtype.name, obj.dtype.name), "cpu", obj.nbytes)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        dt = _TYPESTR.get(cai["typestr"][1:], cai["typestr"])
        n = 1
        for s in cai["shape"]:
            n *= s
        return _Pointer(cai["data"][0], dt, "cuda", n * int(cai["typestr"][2:] or 1))
    if hasattr(obj, "__dlpack__"):
        try:
            import torch
            return _pointer(torch.from_dlpack(obj), param, kernel)
        except ImportError:
            import numpy
            return _pointer(numpy.from_dlpack(obj), param, kernel)
    raise ArgumentError(f"kernel {kernel}, argument {param.index} ('{param.name}': {param.dtype!r}): expected a tensor "
                        f"(torch, cupy, numpy, DLPack or CUDA array interface), got {type(obj).__name__}")


def _stream_of(stream, owner):
    if stream is not None:
        for attr in ("cuda_stream", "ptr", "handle"):
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        return int(stream)
    if owner == "torch":
        import torch
        return torch.cuda.current_stream().cuda_stream
    return 0


# --- compiling ----------------------------------------------------------------------------------

def trace(script, constants=None, divisibility=None):
    """The traced (not yet lowered) Program of a Script for given compile-time constants."""
    cls = type(script)
    sig = _signature(cls)
    if sig.normalized is None:
        from .transform import normalize
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
    prev = getattr(_script._tracing, "builder", None)
    state = (getattr(_script._tracing, "bound", None), getattr(_script._tracing, "mutables", None),
             getattr(_script._tracing, "keep", None))
    _script._tracing.builder = b
    _script._tracing.bound = {}
    _script._tracing.mutables = set()
    _script._tracing.keep = []
    try:
        script.attrs._values.clear()  # each trace sets them anew
        sig.normalized(script, *args)
        program = b.finish()
    finally:
        _script._tracing.builder = prev
        _script._tracing.bound, _script._tracing.mutables, _script._tracing.keep = state
    for index, d in (divisibility or {}).items():
        program.set_divisibility(index, d)
    return program


def _backend_for(devices):
    env = os.environ.get("TILUS_TARGET", "")
    if env in ("cpu", "gpu", "cuda"):
        return "cpu" if env == "cpu" else "gpu"
    if "cpu" in devices and "cuda" in devices:
        raise ArgumentError("the arguments mix host and CUDA arrays; pass all of them on one device")
    if "cpu" in devices:
        return "cpu"
    if "cuda" in devices:
        return "gpu"
    return _C.default_backend()


class _Compiled:
    __slots__ = ("kernel", "backend", "program")

    def __init__(self, kernel, backend, program):
        self.kernel, self.backend, self.program = kernel, backend, program


def _compile(script, key, constants, divisibility, backend):
    program = trace(script, constants, divisibility)
    if backend == "cpu":
        if not _C.cpu_backend_available():
            raise CompileError("the CPU backend is not available: " + _C.cpu_unavailable_reason())
        kernel = _C.compile_cpu(program, checked=_script.env_flag("TILUS_CPU_CHECK"))
    else:
        if not _C.gpu_available():
            raise ArgumentError("no GPU: " + _C.gpu_unavailable_reason() + " (use host arrays or TILUS_TARGET=cpu "
                                "to run on the CPU backend)")
        kernel = _C.compile_gpu(program)
    return _Compiled(kernel, backend, program)


# --- launching ----------------------------------------------------------------------------------

def _make_fast(sig):
    """The C++ fast path for calls whose arguments are CUDA torch tensors of the parameters'
    dtypes and Python numbers (tilus._C.TorchFastPath); None when the signature has
    compile-time constants (those calls take the general path)."""
    import torch
    kinds, dtypes = [], []
    for p in sig.params:
        if p.kind == "const":
            return None
        kinds.append(0 if p.kind == "ptr" else 2 if p.dtype.is_float else 1)
        dtypes.append(p.torch_dtype if p.kind == "ptr" else None)
    return _C.TorchFastPath(kinds, dtypes, torch.Tensor, torch._C._cuda_getCurrentRawStream)


def prepare(script, args, kw):
    """Checks a call's arguments and returns (compiled kernel, key, launch values, extents,
    stream owner, stream), compiling the specialization on first use."""
    cls = type(script)
    sig = cls.__dict__.get("_tilus_signature") or _signature(cls)
    kw = dict(kw)
    stream = kw.pop("stream", None)
    if kw:
        # keyword arguments by parameter name
        names = [p.name for p in sig.params]
        args = list(args) + [None] * (len(names) - len(args))
        for k, v in kw.items():
            if k not in names:
                raise ArgumentError(f"kernel {cls.__name__} has no parameter '{k}' (parameters: {', '.join(names)})")
            args[names.index(k)] = v
    params = sig.params
    if len(args) != len(params):
        raise ArgumentError(f"kernel {cls.__name__} takes {len(params)} arguments "
                            f"({', '.join(p.name for p in params)}), got {len(args)}")
    cache = script.__dict__.get("_tilus_kernels")
    if cache is None:
        cache = script.__dict__["_tilus_kernels"] = {}
    key, values, extents, owner = _general_arguments(cls, params, args)
    compiled = cache.get(key)
    if compiled is None:
        with _lock:
            compiled = cache.get(key)
        if compiled is None:
            constants = {p.name: a for p, a in zip(params, args) if p.kind == "const"}
            divisibility = {}
            runtime = [p for p in params if p.kind != "const"]
            flags = [k for k, p in zip(key, params) if p.kind != "const"]
            for i, (p, f) in enumerate(zip(runtime, flags)):
                if f:
                    divisibility[i] = 16
            compiled = _compile(script, key, constants, divisibility, key[-1])  # outside the lock: parallel
            with _lock:
                compiled = cache.setdefault(key, compiled)
    return compiled, key, values, extents, owner, stream


def run(compiled, values, extents, owner, stream):
    if compiled.backend == "cpu":
        compiled.kernel.launch(values, extents)
    else:
        compiled.kernel.launch(values, _stream_of(stream, owner))


def launch(script, args, kw):
    tuner = script.__dict__.get("_tilus_tuner")
    if tuner is not None:
        return tuner.call(script, args, kw)
    compiled, key, values, extents, owner, stream = prepare(script, args, kw)
    run(compiled, values, extents, owner, stream)
    if compiled.backend == "gpu" and owner == "torch" and stream is None:
        sig = type(script).__dict__["_tilus_signature"]
        if sig.torch_ok and not _TARGET_CPU:
            _register_fast(script, sig, key, compiled)
    return None


def _register_fast(script, sig, key, compiled):
    """Makes later calls with the same specialization take the fast path."""
    fast = script.__dict__.get("_tilus_fast")
    if fast is None:
        fast = _make_fast(sig)
        if fast is None:
            return
        script.__dict__["_tilus_fast"] = fast
    mask = 0
    for i, (p, k) in enumerate(zip(sig.params, key)):
        if p.kind == "ptr" or (p.kind == "scalar" and not p.dtype.is_float):
            if k:
                mask |= 1 << i
    fast.add(mask, compiled.kernel)


_TARGET_CPU = os.environ.get("TILUS_TARGET", "") == "cpu"


def _general_arguments(cls, params, args):
    """Validates every argument (errors name the parameter) and builds the specialization key
    (runtime ints: divisible by 16; pointers: 16-byte aligned; constants: their value; the
    backend last), the launch values, the pointers' byte extents and the stream owner."""
    key = []
    values = []
    extents = []
    devices = set()
    owner = None
    for p, a in zip(params, args):
        if p.kind == "ptr":
            ptr = _pointer(a, p, cls.__name__)
            want = p.dtype.pointee
            if ptr.dtype != want.name and want.name != "void":
                raise ArgumentError(f"kernel {cls.__name__}, argument {p.index} ('{p.name}': {p.dtype!r}): points to "
                                    f"{ptr.dtype} data, the kernel reads {want!r}")
            if ptr.address == 0:
                raise ArgumentError(f"kernel {cls.__name__}, argument {p.index} ('{p.name}'): null pointer")
            devices.add(ptr.device)
            owner = owner or ptr.stream_owner
            key.append(ptr.address % 16 == 0)
            values.append(ptr.address)
            extents.append(ptr.nbytes)
        elif p.kind == "scalar":
            if p.dtype.is_float:
                if not isinstance(a, (int, float)) or isinstance(a, bool):
                    raise ArgumentError(f"kernel {cls.__name__}, argument {p.index} ('{p.name}': {p.dtype!r}): expected "
                                        f"a number, got {type(a).__name__}")
                values.append(float(a))
                key.append(None)
            else:
                if isinstance(a, bool) or not isinstance(a, int):
                    if hasattr(a, "__index__") and not isinstance(a, bool):
                        a = a.__index__()
                    else:
                        raise ArgumentError(f"kernel {cls.__name__}, argument {p.index} ('{p.name}': {p.dtype!r}): "
                                            f"expected an int, got {type(a).__name__}")
                values.append(a)
                key.append(a % 16 == 0)
            extents.append(-1)
        else:
            if not isinstance(a, p.const_type) or (p.const_type is int and isinstance(a, bool)):
                raise ArgumentError(f"kernel {cls.__name__}, argument {p.index} ('{p.name}'): a compile-time "
                                    f"{p.const_type.__name__}, got {a!r}")
            key.append(("c", a))
    key.append(_backend_for(devices))
    return tuple(key), values, extents, owner


def compiled_kernels(script):
    """The kernels compiled for a Script instance so far: {specialization key: (backend, Program)}."""
    return {k: (c.backend, c.program) for k, c in script.__dict__.get("_tilus_kernels", {}).items()}
