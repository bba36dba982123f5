"""Host-side tensors of any tilus data type, under NVIDIA Tilus's names (``tilus.empty``,
``tilus.zeros``, ``tilus.ones``, ``tilus.full``, ``tilus.rand``, ``tilus.randn``, ``tilus.randint``,
``tilus.from_torch``, ``tilus.view_torch``):

    w = tilus.randint(-8, 8, [128, 64], dtype=tilus.int4)    # 4-bit integers, packed two per byte
    kernel(m, n, w)                                          # a tilus.Tensor is a kernel argument
    w.to(tilus.float32).numpy()                              # its values

A ``Tensor`` is a data type, a shape and a ``storage``: a torch tensor when torch is installed (on
the GPU when torch and tilus can use one, else on the host), else a numpy array (host memory, for
the CPU backend). Types that torch and numpy lack (sub-byte integers and floats, float8 in numpy)
are stored densely bit-packed, little-endian, as tilus kernels read them (docs/ir.md). Conversions
(``to``, the factories' values) run on the host: these are helpers for setting up and checking
kernels, not for speed.
"""
import math
from typing import List, Optional, Sequence, Union

import numpy as np

from . import _C
from ._C import DataType

_NUMPY = {"bool": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
          "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
          "float16": np.float16, "float32": np.float32, "float64": np.float64}
_TORCH = {"bool": "bool", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8",
          "uint16": "uint16", "uint32": "uint32", "uint64": "uint64", "float16": "float16",
          "bfloat16": "bfloat16", "float32": "float32", "float64": "float64", "float8_e4m3": "float8_e4m3fn",
          "float8_e5m2": "float8_e5m2"}
_FROM_TORCH = {v: k for k, v in _TORCH.items()}


def _torch():
    """torch, or None when it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def _default_device(torch):
    """"cuda" when torch sees a GPU that tilus can use too, else "cpu"."""
    return "cuda" if torch is not None and torch.cuda.is_available() and _C.gpu_available() else "cpu"


def _nbytes(dtype, shape):
    return (dtype.bits * math.prod(shape) + 7) // 8


def _check_dtype(dtype, what):
    if not isinstance(dtype, DataType) or dtype.is_pointer() or dtype.bits == 0:
        raise TypeError(f"{what}: dtype must be a tilus data type (tilus.float16, tilus.int4, ...), got {dtype!r}")
    return dtype


def _check_shape(shape, what):
    if isinstance(shape, int):
        shape = [shape]
    shape = list(shape)
    if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
        raise ValueError(f"{what}: shape must be non-negative ints, got {shape!r}")
    return [int(d) for d in shape]


def torch_dtype(dtype: DataType):
    """The torch dtype of a tilus data type (``tilus.float16`` -> ``torch.float16``), or None when
    torch has none (sub-byte types, tfloat32). Needs torch."""
    torch = _torch()
    if torch is None:
        raise ImportError("tilus: this needs torch (pip install torch)")
    name = _TORCH.get(dtype.name)
    return None if name is None else getattr(torch, name, None)


def dtype_from_torch(torch_dtype) -> DataType:
    """The tilus data type of a torch dtype (``torch.float16`` -> ``tilus.float16``)."""
    name = str(torch_dtype).replace("torch.", "")
    if name not in _FROM_TORCH:
        raise ValueError(f"tilus: torch dtype {torch_dtype} has no tilus data type")
    return DataType.from_name(_FROM_TORCH[name])


# --- values <-> bytes (host, numpy) ----------------------------------------------------------------

def _encode(values, dtype):
    """The bytes (a uint8 numpy array) of ``values`` (a numpy array) converted to ``dtype``."""
    values = np.asarray(values).reshape(-1)
    n = dtype.name
    if n in _NUMPY:
        if dtype.is_integer() and values.dtype.kind == "f":
            values = np.trunc(values)
        return np.ascontiguousarray(values.astype(_NUMPY[n])).view(np.uint8).reshape(-1)
    if n in ("bfloat16", "tfloat32"):
        bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
        keep = 16 if n == "bfloat16" else 13  # bits dropped: bfloat16 keeps 16, tf32 keeps 19 of 32
        rounded = (bits + ((1 << (keep - 1)) - 1) + ((bits >> keep) & 1)) >> keep << keep
        rounded = np.where(np.isnan(values.astype(np.float32)), bits | (1 << 22), rounded).astype(np.uint32)
        if n == "bfloat16":
            return np.ascontiguousarray((rounded >> 16).astype(np.uint16)).view(np.uint8).reshape(-1)
        return np.ascontiguousarray(rounded).view(np.uint8).reshape(-1)
    if dtype.is_float():  # float8 and sub-byte floats: the core's conversion (rounding, saturation)
        packed = dtype.encode_floats(np.ascontiguousarray(values, dtype=np.float64))
        return np.frombuffer(packed, dtype=np.uint8).copy()
    else:  # sub-byte integers: the low bits (two's complement), as a C cast truncates
        codes = np.trunc(values.astype(np.float64)).astype(np.int64) if values.dtype.kind == "f" else \
            values.astype(np.int64)
        codes = (codes & ((1 << dtype.bits) - 1)).astype(np.uint64)
    return _pack(codes, dtype.bits)


def _pack(codes, bits):
    if bits == 8:
        return codes.astype(np.uint8)
    return np.frombuffer(_C.pack_bits(np.ascontiguousarray(codes, dtype=np.uint64), bits), dtype=np.uint8).copy()


def _unpack(data, bits, count):
    if bits == 8:
        return data[:count].astype(np.uint64)
    return np.frombuffer(_C.unpack_bits(np.ascontiguousarray(data, dtype=np.uint8), bits, count), dtype=np.uint64)


def _decode(data, dtype, count):
    """The values (a numpy array: the native dtype, float32 or int64) of ``count`` elements of
    ``dtype`` in the bytes ``data`` (a uint8 numpy array)."""
    n = dtype.name
    if n in _NUMPY:
        return data[:count * dtype.bits // 8].view(_NUMPY[n]).copy()
    if n == "bfloat16":
        return (data[:2 * count].view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if n == "tfloat32":
        return data[:4 * count].view(np.float32).copy()
    codes = _unpack(data, dtype.bits, count)
    if dtype.is_float():
        table = np.array([dtype.decode_float(c) for c in range(1 << dtype.bits)], dtype=np.float32)
        return table[codes.astype(np.int64)]
    values = codes.astype(np.int64)
    if dtype.is_signed():
        values = np.where(values >= 1 << (dtype.bits - 1), values - (1 << dtype.bits), values)
    return values


class Tensor:
    """A tensor of any tilus data type in device or host memory (see the module docstring).

    ``dtype``: a tilus DataType; ``shape``: a list of ints; ``storage``: the torch tensor or numpy
    array holding its bytes. Pass it to a kernel where a pointer parameter of its dtype (or
    ``void_p``) is expected.
    """

    def __init__(self, dtype: DataType, shape: Sequence[int], storage):
        self.dtype: DataType = _check_dtype(dtype, "tilus.Tensor")
        self.shape: List[int] = _check_shape(shape, "tilus.Tensor")
        self.storage = storage

    @property
    def nbytes(self) -> int:
        """The bytes the elements occupy (bit-packed for sub-byte types)."""
        return _nbytes(self.dtype, self.shape)

    @property
    def device(self) -> str:
        """"cuda" or "cpu"."""
        s = self.storage
        return "cuda" if getattr(s, "is_cuda", False) else "cpu"

    def data_ptr(self) -> int:
        """The address of the first byte."""
        s = self.storage
        return s.data_ptr() if hasattr(s, "data_ptr") else s.ctypes.data

    def _bytes(self):
        """The bytes as a uint8 numpy array on the host."""
        s = self.storage
        if hasattr(s, "detach"):
            s = s.detach().contiguous().reshape(-1).view(_torch().uint8).cpu().numpy()
        return np.ascontiguousarray(s).reshape(-1).view(np.uint8)[:self.nbytes]

    def numpy(self) -> np.ndarray:
        """The values as a numpy array of ``shape`` (types numpy lacks: float32 for floats, int64
        for integers)."""
        return _decode(self._bytes(), self.dtype, math.prod(self.shape)).reshape(self.shape)

    def torch(self):
        """The storage viewed as a torch tensor of the data type and shape (torch must have the type)."""
        torch = _torch()
        if torch is None or not hasattr(self.storage, "detach"):
            raise ValueError("tilus.Tensor.torch: the tensor is not stored in torch (torch is not installed)")
        t = torch_dtype(self.dtype)
        if t is None:
            raise ValueError(f"tilus.Tensor.torch: torch has no dtype for {self.dtype.name}")
        return self.storage.reshape(-1).view(torch.uint8)[:self.nbytes].view(t).reshape(self.shape)

    def to(self, dtype: DataType) -> "Tensor":
        """A new tensor of the values converted to ``dtype`` (on the same device)."""
        return _from_values(self.numpy(), _check_dtype(dtype, "tilus.Tensor.to"), self.device)

    def view(self, *, dtype: Optional[DataType] = None, shape: Optional[Sequence[int]] = None) -> "Tensor":
        """The same bytes as another data type and/or shape (same total bits; without ``shape`` the
        last dim scales by the ratio of the bit widths)."""
        return view(self, dtype, shape)

    def clone(self) -> "Tensor":
        """A copy of the tensor."""
        s = self.storage
        return Tensor(self.dtype, list(self.shape), s.clone() if hasattr(s, "clone") else s.copy())

    def __repr__(self):
        return f"tilus.Tensor({self.dtype.name}{self.shape}, {self.device})"

    def __str__(self):
        return f"{self.dtype.name}{self.shape}:\n{self.numpy()}"


def _store(data, device):
    """A 1-D byte buffer (``data``: uint8 numpy) on ``device`` ("cuda", "cpu", None: the default)."""
    torch = _torch()
    device = device or _default_device(torch)
    if torch is None:
        if device != "cpu":
            raise RuntimeError(f"tilus: a tensor on {device!r} needs torch (pip install torch)")
        return np.array(data, dtype=np.uint8)
    return torch.from_numpy(np.array(data, dtype=np.uint8)).to(device)


def _from_values(values, dtype, device=None):
    values = np.asarray(values)
    return Tensor(dtype, list(values.shape), _store(_encode(values, dtype), device))


def from_torch(torch_tensor) -> Tensor:
    """A tilus tensor over a torch tensor's memory (no copy; its dtype must have a tilus type)."""
    if not hasattr(torch_tensor, "dtype") or not hasattr(torch_tensor, "data_ptr"):
        raise TypeError(f"tilus.from_torch: expects a torch tensor, got {type(torch_tensor).__name__}")
    return Tensor(dtype_from_torch(torch_tensor.dtype), list(torch_tensor.shape), torch_tensor)


def view_torch(torch_tensor, *, dtype: DataType, shape: List[int]) -> Tensor:
    """A tilus tensor of ``dtype`` and ``shape`` over a torch tensor's bytes (which must be exactly
    the bytes such a tensor occupies)."""
    dtype, shape = _check_dtype(dtype, "tilus.view_torch"), _check_shape(shape, "tilus.view_torch")
    nbytes = torch_tensor.numel() * torch_tensor.element_size()
    if _nbytes(dtype, shape) != nbytes:
        raise ValueError(f"tilus.view_torch: {dtype.name}{shape} takes {_nbytes(dtype, shape)} bytes, the torch tensor "
                         f"has {nbytes}")
    return Tensor(dtype, shape, torch_tensor)


def empty(shape: Sequence[int], dtype: DataType, *, device: Optional[str] = None) -> Tensor:
    """An uninitialized tensor (its bytes are zero where it lives on the host)."""
    dtype, shape = _check_dtype(dtype, "tilus.empty"), _check_shape(shape, "tilus.empty")
    return Tensor(dtype, shape, _store(np.zeros(_nbytes(dtype, shape), np.uint8), device))


def full(shape: Sequence[int], fill_value: Union[float, int], dtype: DataType, *,
         device: Optional[str] = None) -> Tensor:
    """A tensor with every element ``fill_value`` converted to ``dtype``."""
    dtype, shape = _check_dtype(dtype, "tilus.full"), _check_shape(shape, "tilus.full")
    return _from_values(np.full(shape, fill_value, dtype=np.float64 if dtype.is_float() else np.int64), dtype, device)


def zeros(shape: Sequence[int], dtype: DataType, *, device: Optional[str] = None) -> Tensor:
    """A tensor of zeros."""
    return full(shape, 0, dtype, device=device)


def ones(shape: Sequence[int], dtype: DataType, *, device: Optional[str] = None) -> Tensor:
    """A tensor of ones (converted to ``dtype``: a 1-bit unsigned int holds 1, a signed one -1)."""
    return full(shape, 1, dtype, device=device)


def _rng():
    return np.random.default_rng()


def rand(shape: List[int], dtype: DataType, *, device: Optional[str] = None) -> Tensor:
    """Uniform random values in [0, 1), converted to ``dtype``."""
    dtype, shape = _check_dtype(dtype, "tilus.rand"), _check_shape(shape, "tilus.rand")
    return _from_values(_rng().random(shape, dtype=np.float32), dtype, device)


def randn(shape: List[int], dtype: DataType, *, device: Optional[str] = None) -> Tensor:
    """Standard normal random values, converted to ``dtype``."""
    dtype, shape = _check_dtype(dtype, "tilus.randn"), _check_shape(shape, "tilus.randn")
    return _from_values(_rng().standard_normal(shape, dtype=np.float32), dtype, device)


def randint(low: int, high: int, shape: List[int], dtype: DataType, *, device: Optional[str] = None) -> Tensor:
    """Random integers in [low, high), converted to ``dtype``."""
    dtype, shape = _check_dtype(dtype, "tilus.randint"), _check_shape(shape, "tilus.randint")
    return _from_values(_rng().integers(low, high, size=shape, dtype=np.int64), dtype, device)


def view(tensor: Tensor, dtype: Optional[DataType] = None, shape: Optional[Sequence[int]] = None) -> Tensor:
    """``tensor``'s bytes as ``dtype`` (default: its own) and ``shape`` (see ``Tensor.view``)."""
    dtype = tensor.dtype if dtype is None else _check_dtype(dtype, "tilus.view")
    if shape is None:
        shape = list(tensor.shape)
        if dtype.bits != tensor.dtype.bits:
            if not shape or (shape[-1] * tensor.dtype.bits) % dtype.bits:
                raise ValueError(f"tilus.view: cannot view {tensor.dtype.name}{tensor.shape} as {dtype.name} "
                                 "without a shape")
            shape[-1] = shape[-1] * tensor.dtype.bits // dtype.bits
    shape = _check_shape(shape, "tilus.view")
    if dtype.bits * math.prod(shape) != tensor.dtype.bits * math.prod(tensor.shape):
        raise ValueError(f"tilus.view: {dtype.name}{shape} and {tensor.dtype.name}{tensor.shape} differ in size")
    return Tensor(dtype, shape, tensor.storage)
