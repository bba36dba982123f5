"""``self.atomic``: element-wise atomics and scatters (NVIDIA Tilus's group)."""

from ..tracing import GlobalTensor, RegisterTensor, SharedTensor, _builder, _here
from ._args import _exprs, _int, _ints, _tensor
from .tensors import TensorInstructions


def _atomic(space, op, dst, values, compare, sem, scope, output, offsets, dims):
    name = f"atomic.{space}_{op}"
    loc = _here()
    kind = GlobalTensor if space == "global" else SharedTensor
    d = _tensor(dst, f"{name}: dst", loc, kind)
    v = _tensor(values, f"{name}: values", loc)
    c = None if compare is None else _tensor(compare, f"{name}: compare", loc)
    # The core defaults a global tile's offsets to zeros and checks sem and scope (the verifier).
    t = RegisterTensor(_builder().atomic(op, d, v, c, _exprs(offsets, f"{name}: offsets", loc),
                                         _ints(dims, f"{name}: dims", loc), sem, scope, loc))
    return TensorInstructions._into(None, output, t, loc, name)


def _scatter(space, op, dst, dim, indices, values, sem, scope, output, loc):
    """atomic.<space>_scatter_<op>, or store_<space>_scatter when op is None."""
    name = f"store_{space}_scatter" if op is None else f"atomic.{space}_scatter_{op}"
    kind = GlobalTensor if space == "global" else SharedTensor
    t = _builder().atomic_scatter(op or "exch", op is None, _tensor(dst, f"{name}: dst", loc, kind),
                                  _int(dim, f"{name}: dim", loc), _tensor(indices, f"{name}: indices", loc),
                                  _tensor(values, f"{name}: values", loc), sem, scope, loc)
    return None if op is None else TensorInstructions._into(None, output, RegisterTensor(t), loc, name)


def _scatter_method(space, op, what):
    """AtomicGroup's {space}_scatter_{op}: the scatter form of the atomic (see the class)."""
    default_scope = "gpu" if space == "global" else "cta"

    def method(self, dst, *, dim, indices, values, sem="relaxed", scope=default_scope, output=None):
        return _scatter(space, op, dst, dim, indices, values, sem, scope, output, _here())

    method.__name__ = f"{space}_scatter_{op}"
    method.__doc__ = (f"{what} atomically; returns the previous values." if space == "global"
                      else f"{what} on shared memory.")
    return method


class AtomicGroup:
    """Element-wise atomic read-modify-write of a shared or global tile (``self.atomic``, NVIDIA
    Tilus's names): element i of ``dst`` becomes ``op(dst[i], values[i])`` atomically, each element
    once (by the thread that holds it), and the call returns the elements' previous values (or
    writes them into ``output``). ``sem``: "relaxed" (default), "acquire", "release", "acq_rel";
    ``scope``: "cta" (shared default), "cluster", "gpu" (global default), "sys". A global ``dst``
    takes ``offsets`` (default all zero) and ``dims`` as ``store_global`` does, and out-of-bounds
    elements are skipped (previous value 0); a shared ``dst`` is the whole tensor. When the
    previous values are never read the GPU uses ``red`` instead of ``atom``. Types: add / sub on
    32/64-bit integers, float32, float64, float16, bfloat16 (sm_90); min / max on 32/64-bit
    integers; exch on 32/64-bit, cas on 16/32/64-bit elements."""

    def global_add(self, dst, values, *, sem="relaxed", scope="gpu", output=None, offsets=None, dims=None):
        """``dst[i] += values[i]`` atomically; returns the previous values."""
        return _atomic("global", "add", dst, values, None, sem, scope, output, offsets, dims)

    def global_sub(self, dst, values, *, sem="relaxed", scope="gpu", output=None, offsets=None, dims=None):
        """``dst[i] -= values[i]`` atomically (an add of ``-values``); returns the previous values."""
        return _atomic("global", "sub", dst, values, None, sem, scope, output, offsets, dims)

    def global_min(self, dst, values, *, sem="relaxed", scope="gpu", output=None, offsets=None, dims=None):
        """``dst[i] = min(dst[i], values[i])`` atomically; returns the previous values."""
        return _atomic("global", "min", dst, values, None, sem, scope, output, offsets, dims)

    def global_max(self, dst, values, *, sem="relaxed", scope="gpu", output=None, offsets=None, dims=None):
        """``dst[i] = max(dst[i], values[i])`` atomically; returns the previous values."""
        return _atomic("global", "max", dst, values, None, sem, scope, output, offsets, dims)

    def global_exch(self, dst, values, *, sem="relaxed", scope="gpu", output=None, offsets=None, dims=None):
        """``dst[i] = values[i]`` atomically; returns the previous values."""
        return _atomic("global", "exch", dst, values, None, sem, scope, output, offsets, dims)

    def global_cas(self, dst, compare, values, *, sem="relaxed", scope="gpu", output=None, offsets=None, dims=None):
        """``dst[i] = values[i]`` where ``dst[i] == compare[i]`` (bit for bit), atomically; returns
        the previous values."""
        return _atomic("global", "cas", dst, values, compare, sem, scope, output, offsets, dims)

    def shared_add(self, dst, values, *, sem="relaxed", scope="cta", output=None):
        """``dst[i] += values[i]`` atomically on shared memory; returns the previous values."""
        return _atomic("shared", "add", dst, values, None, sem, scope, output, None, None)

    def shared_sub(self, dst, values, *, sem="relaxed", scope="cta", output=None):
        """``dst[i] -= values[i]`` atomically on shared memory; returns the previous values."""
        return _atomic("shared", "sub", dst, values, None, sem, scope, output, None, None)

    def shared_min(self, dst, values, *, sem="relaxed", scope="cta", output=None):
        """``dst[i] = min(dst[i], values[i])`` atomically on shared memory; returns the previous values."""
        return _atomic("shared", "min", dst, values, None, sem, scope, output, None, None)

    def shared_max(self, dst, values, *, sem="relaxed", scope="cta", output=None):
        """``dst[i] = max(dst[i], values[i])`` atomically on shared memory; returns the previous values."""
        return _atomic("shared", "max", dst, values, None, sem, scope, output, None, None)

    def shared_exch(self, dst, values, *, sem="relaxed", scope="cta", output=None):
        """``dst[i] = values[i]`` atomically on shared memory; returns the previous values."""
        return _atomic("shared", "exch", dst, values, None, sem, scope, output, None, None)

    def shared_cas(self, dst, compare, values, *, sem="relaxed", scope="cta", output=None):
        """``dst[i] = values[i]`` where ``dst[i] == compare[i]``, atomically on shared memory; returns
        the previous values."""
        return _atomic("shared", "cas", dst, values, compare, sem, scope, output, None, None)

    # Scatter forms (torch.scatter_add_'s semantics): element k of values goes to dst at k's own
    # coordinates, except along `dim`, where indices[k] (integers, values' shape) picks it; an index
    # outside dst is skipped (previous value 0). dst has values' rank; a shared dst equals values in
    # the other dims.
    global_scatter_add = _scatter_method("global", "add", "``dst[..., indices[k], ...] += values[k]``")
    global_scatter_sub = _scatter_method("global", "sub", "``dst[..., indices[k], ...] -= values[k]``")
    global_scatter_min = _scatter_method("global", "min", "``dst[..., indices[k], ...] = min(.., values[k])``")
    global_scatter_max = _scatter_method("global", "max", "``dst[..., indices[k], ...] = max(.., values[k])``")
    shared_scatter_add = _scatter_method("shared", "add", "``global_scatter_add``")
    shared_scatter_sub = _scatter_method("shared", "sub", "``global_scatter_sub``")
    shared_scatter_min = _scatter_method("shared", "min", "``global_scatter_min``")
    shared_scatter_max = _scatter_method("shared", "max", "``global_scatter_max``")
