"""Seed 004's flat names for instructions of the mbarrier, TMA, fence and wgmma groups."""

from typing import Any, Optional

from .. import _C
from .._C import CompileError, DataType, Expr
from ..tracing import (GlobalTensor, Region, RegisterTensor, SharedTensor, Unusable, _builder, _describe, _here,
                       _tracing, _where)
from ._args import _Scalar, _barrier, _choice, _exprs, _int, _peer, _scalar, _tensor


class TmaDescriptor:
    """What seed 004's ``create_tma_descriptor`` describes, as tilus keeps it: the global tensor (a
    view of the pointer with the descriptor's shape and strides) and the box a ``tma_load`` of it
    copies. The tensor map itself is made by the runtime from the view, as for
    ``tma.global_to_shared``."""
    __slots__ = ("tensor", "box")

    def __init__(self, tensor, box):
        self.tensor, self.box = tensor, box

    def __repr__(self):
        return f"TmaDescriptor({self.tensor!r}, box={self.box})"


_SEED_NAMES = {"fp16": "float16", "fp32": "float32", "bf16": "bfloat16", "f16": "float16", "f32": "float32"}


def _seed_dtype(x, what, loc):
    """A dtype given as tilus.float16 or as the seed's string ("fp16", "float16")."""
    if isinstance(x, DataType):
        return x
    if isinstance(x, str):
        try:
            return DataType.from_name(_SEED_NAMES.get(x, x))
        except Exception:  # not a dtype name: the error below
            pass
    raise CompileError(f"{_where(loc)}{what} must be a dtype (tilus.float16 or \"fp16\"), got {_describe(x)}")


def _descriptor_field(x, bits, what, loc):
    """An integer descriptor field of `bits` bits: a Python int is checked, a kernel scalar masked."""
    if isinstance(x, bool) or not (isinstance(x, int) or isinstance(x, Expr)):
        raise CompileError(f"{_where(loc)}{what} must be an integer, got {_describe(x)}")
    if isinstance(x, int):
        if not 0 <= x < (1 << bits):
            raise CompileError(f"{_where(loc)}{what} must be in [0, {1 << bits}) (a {bits}-bit field), got {x}")
        return x
    return _C.cast(x, _u64()) & ((1 << bits) - 1)


def _u64():
    return DataType.from_name("uint64")


def _store_descriptor(descriptor, value, what, loc):
    """The seed writes the descriptor in place: a mutable kernel variable (``desc: uint64 = 0``) is
    assigned; None or any other value only gets the result back."""
    if descriptor is None:
        return value
    if isinstance(descriptor, Unusable):
        raise descriptor.error()
    if not (isinstance(descriptor, Expr) and id(descriptor) in _tracing.mutables):
        raise CompileError(f"{_where(loc)}{what}: descriptor must be a mutable uint64 kernel variable "
                           f"(desc: uint64 = 0) or None, got {_describe(descriptor)}")
    if descriptor.dtype != _u64():
        raise CompileError(f"{_where(loc)}{what}: descriptor must be a uint64 kernel variable, got one of "
                           f"{descriptor.dtype}")
    _builder().assign(descriptor, value, loc)
    return descriptor


class SeedBuiltins:
    """Seed 004's flat names for the mbarrier, TMA, fence and wgmma groups' instructions. A mixin of
    ``tilus.Script``."""

    def mbarrier_wait_parity(self, mbarrier: SharedTensor, parity: _Scalar) -> None:
        """Waits until the phase of parity ``parity`` (0 or 1) of ``mbarrier`` has completed (seed 004)."""
        self.mbarrier.wait(mbarrier, parity)

    def mbarrier_arrive(self, mbarrier: SharedTensor, cta_id: Optional[_Scalar] = None, scope: str = "cta") -> None:
        """Every thread of the group arrives once at ``mbarrier`` (seed 004); with ``cta_id``, at the
        barrier at the same offset in block ``cta_id`` of the cluster. ``scope="cluster"`` makes the
        arrival a release at cluster scope (the thread's earlier writes to the peer's memory become
        visible to its waiters); the default, as the seed's, releases at block scope only, which is
        enough to hand back a buffer the peer overwrites."""
        loc = _here()
        scope = _choice(scope, ("cta", "cluster"), "mbarrier_arrive: scope", loc)
        cta = None if cta_id is None else _scalar(cta_id, "mbarrier_arrive: cta_id", loc)
        b, cta = _peer(mbarrier, cta, "mbarrier_arrive", loc)
        _builder().mbarrier("arrive", b, 1, "release", scope, cta, loc)

    def mbarrier_expect_tx(self, mbarrier: SharedTensor, tx: _Scalar) -> None:
        """Adds ``tx`` bytes to the transaction count of ``mbarrier``'s current phase, without arriving (seed 004)."""
        loc = _here()
        _builder().mbarrier("expect_tx", _barrier(mbarrier, "mbarrier_expect_tx: mbarrier", loc),
                            _scalar(tx, "mbarrier_expect_tx: tx", loc), "relaxed", "cta", None, loc)

    def cp_async_barrier_noinc(self, barrier: SharedTensor) -> None:
        """Every thread of the group arrives once at ``barrier`` when all the cp.async copies it issued
        before (``copy_async``, ``async_copy``) have landed (seed 004; PTX
        ``cp.async.mbarrier.arrive.noinc``): the arrival counts toward the barrier's expected count,
        so allocate it with one count per arriving thread. A wait on the barrier then covers those
        copies: the passes add no ``copy_async_wait_group`` for the waiting threads. sm_80."""
        loc = _here()
        _builder().mbarrier("cp_async_arrive", _barrier(barrier, "cp_async_barrier_noinc: barrier", loc), 1,
                            "release", "cta", None, loc)

    def barrier_wait(self, mbarrier: SharedTensor, parity: _Scalar) -> None:
        """``mbarrier_wait_parity`` under its other seed name."""
        self.mbarrier.wait(mbarrier, parity)

    def barrier_arrive(self, mbarrier: SharedTensor) -> None:
        """``mbarrier_arrive`` under its other seed name."""
        self.mbarrier.arrive(mbarrier)

    def fence_proxy_async(self) -> None:
        """``fence.proxy.async.shared::cta`` (seed 004): orders this thread's generic shared-memory
        accesses with TMA's (``self.fence.proxy_async()``)."""
        self.fence.proxy_async()

    def tma_store_arrive(self) -> None:
        """Commits the TMA stores issued since the last commit (seed 004; ``self.tma.commit_group()``)."""
        self.tma.commit_group()

    def tma_store_wait(self) -> None:
        """Waits until every committed TMA store has read its shared source (seed 004;
        ``self.tma.wait_group(0, read=True)``)."""
        self.tma.wait_group(0, read=True)

    def warpgroup_arrive(self) -> None:
        """``wgmma.fence`` (seed 004; ``self.wgmma.fence()``)."""
        self.wgmma.fence()

    def warpgroup_commit_batch(self) -> None:
        """``wgmma.commit_group`` (seed 004; ``self.wgmma.commit_group()``)."""
        self.wgmma.commit_group()

    def warpgroup_wait(self, num_mma: int) -> None:
        """``wgmma.wait_group(num_mma)`` (seed 004; ``self.wgmma.wait_group(num_mma)``)."""
        self.wgmma.wait_group(num_mma)

    def wait_wgmma(self, id: int) -> None:  # noqa: A002 (the seed's parameter name)
        """``wgmma.wait_group(id)`` (seed 004)."""
        self.wgmma.wait_group(id)

    def warpgroup_fence_operand(self, buffer_or_ptr: Any, offset: Any = 0, num_regs: Any = None,
                                dtype: Any = None) -> None:
        """Seed 004's accumulator fence. tilus ties every wgmma accumulator to each ``wgmma.wait_group``
        itself, so there is nothing to record: accepted for TileLang-style kernels, a no-op."""
        loc = _here()
        _tensor(buffer_or_ptr, "warpgroup_fence_operand: buffer_or_ptr", loc, RegisterTensor)

    # --- the rest of seed 004: pointers, TMA descriptors, register reallocation hints, matrix
    # descriptors, the cluster barrier and Volta's mma --------------------------------------------

    def access_ptr(self, base: Any, access_type: Any = "r", *extents: Any, offset: Any = 0, extent: Any = None,
                   ignore_last_ndim: int = 0) -> Expr:
        """The address of an element of a global or shared tensor (seed 004): ``base`` a tensor (its
        first element), a region ``g[i:j, k]`` (its first element) or an element ``s[i, j]``;
        ``offset`` more elements on; ``ignore_last_ndim`` leaves the last dims' offsets out (the head
        of the trailing sub-tensor). A pointer to the dtype, as ``item_ptr()``. ``access_type`` ("r",
        "w", "rw" or 1, 2, 3) and the extent (``extent``, else the product of ``extents``) are checked
        (the range must lie in a shared tensor) but the passes do not see accesses through the pointer:
        order them with ``sync()``."""
        loc = _here()
        if access_type not in ("r", "w", "rw", 1, 2, 3) or isinstance(access_type, bool):
            raise CompileError(f"{_where(loc)}access_ptr: access_type must be 'r', 'w', 'rw' or 1, 2, 3, got "
                               f"{_describe(access_type)}")
        if isinstance(base, (GlobalTensor, SharedTensor)):
            tensor, offsets = base, [0] * len(base.shape)
        elif isinstance(base, Region):
            tensor, offsets = base.tensor, list(base.offsets)
        else:
            raise CompileError(f"{_where(loc)}access_ptr: base must be a global or shared tensor or a region / "
                               f"element of one (g[i, j]), got {_describe(base)}")
        n = _int(ignore_last_ndim, "access_ptr: ignore_last_ndim", loc)
        if not 0 <= n <= len(offsets):
            raise CompileError(f"{_where(loc)}access_ptr: ignore_last_ndim must be in [0, {len(offsets)}] for "
                               f"{tensor.t.type_str()}, got {n}")
        offsets = offsets[:len(offsets) - n] + [0] * n
        if extent is None:
            extent = 1
            for e in _exprs(list(extents), "access_ptr: extents", loc):
                extent = extent * e
        extent = _exprs(extent, "access_ptr: extent", loc)[0]
        offset = _exprs(offset, "access_ptr: offset", loc)[0]
        if isinstance(tensor, SharedTensor) and all(isinstance(x, int) for x in offsets + [offset, extent]):
            size, start = 1, 0
            for d, o in zip(tensor.shape, offsets):
                start, size = start * d + o, size * d
            if extent < 0 or offset < 0 or start + offset + extent > size:
                raise CompileError(f"{_where(loc)}access_ptr: elements [{start + offset}, {start + offset + extent}) "
                                   f"lie outside {tensor.t.type_str()}'s {size}")
        ptr = Region(tensor, offsets, [1] * len(offsets)).item_ptr()
        return ptr if isinstance(offset, int) and offset == 0 else ptr + offset

    def create_tma_descriptor(self, *args: Any) -> TmaDescriptor:
        """Seed 004's TMA descriptor, with the seed's ``7 + 4 * rank`` arguments: ``data_type, rank,
        global_addr, global_shape..., global_stride..., smem_box..., smem_stride..., interleave,
        swizzle, l2_promotion, oob_fill``, each list innermost dim first (as cuTensorMapEncodeTiled
        takes them) and the strides in bytes (the first, the element's, is its size).
        ``global_addr`` is a pointer parameter. tilus makes the tensor map itself from a global view
        (with those shape and strides) when a ``tma_load`` of it is issued, and the shared tensor's
        layout decides the swizzle: ``interleave`` must be 0, ``smem_stride`` all 1 and ``oob_fill``
        0 (zeros); ``swizzle`` and ``l2_promotion`` are accepted as hints. Returns a
        ``TmaDescriptor`` for ``tma_load``."""
        loc = _here()
        w = "create_tma_descriptor"
        if len(args) < 2:
            raise CompileError(f"{_where(loc)}{w}: takes data_type, rank, global_addr, then 4 * rank + 4 more "
                               f"arguments, got {len(args)}")
        dtype = _seed_dtype(args[0], f"{w}: data_type", loc)
        rank = _int(args[1], f"{w}: rank", loc)
        if not 1 <= rank <= 5 or len(args) != 7 + 4 * rank:
            raise CompileError(f"{_where(loc)}{w}: rank {rank} takes 7 + 4 * rank = {7 + 4 * rank} arguments "
                               f"(rank 1 to 5), got {len(args)}")
        ptr = args[2]
        shape = _exprs(list(args[3:3 + rank]), f"{w}: global_shape", loc)[::-1]
        strides = _exprs(list(args[3 + rank:3 + 2 * rank]), f"{w}: global_stride", loc)[::-1]
        box = [_int(x, f"{w}: smem_box", loc) for x in args[3 + 2 * rank:3 + 3 * rank]][::-1]
        box_strides = [_int(x, f"{w}: smem_stride", loc) for x in args[3 + 3 * rank:3 + 4 * rank]]
        interleave, _swizzle, _promotion, oob_fill = args[3 + 4 * rank:]
        if any(s != 1 for s in box_strides):
            raise CompileError(f"{_where(loc)}{w}: smem_stride must be all 1 (tilus's TMA copies dense boxes), got "
                               f"{box_strides}")
        if _int(interleave, f"{w}: interleave", loc) != 0 or _int(oob_fill, f"{w}: oob_fill", loc) != 0:
            raise CompileError(f"{_where(loc)}{w}: interleave and oob_fill must be 0 (no interleave; zeros "
                               f"outside the tensor), got {interleave} and {oob_fill}")
        size = dtype.storage_bytes(1)
        if not (isinstance(strides[-1], int) and strides[-1] == size):
            raise CompileError(f"{_where(loc)}{w}: the innermost global_stride must be the element's size, "
                               f"{size} bytes for {dtype}, got {strides[-1]}")
        elems = []
        for s in strides:
            if isinstance(s, int) and s % size:
                raise CompileError(f"{_where(loc)}{w}: global_stride {s} is not a multiple of {dtype}'s {size} bytes")
            elems.append(s // size)
        return TmaDescriptor(self.global_view(ptr, dtype=dtype, shape=shape, strides=elems), box)

    def tma_load(self, descriptor: TmaDescriptor, mbarrier: SharedTensor, smem: SharedTensor, *coords: Any,
                 eviction_policy: Any = 0) -> None:
        """Seed 004's TMA load: the box of ``descriptor`` (``create_tma_descriptor``) at ``coords``
        (innermost dim first, as the seed's) into the shared tensor ``smem`` (of the box's shape, or
        one with its leading dims squeezed), its bytes completing on ``mbarrier``: tilus's
        ``tma.global_to_shared``. As the seed's, it neither arrives nor waits: the kernel expects
        the bytes (``mbarrier_expect_tx`` / ``mbarrier.arrive_and_expect_tx``) and waits.
        ``eviction_policy``: 0 (normal) only, tilus takes raw L2 policies through
        ``tma.global_to_shared(cache_policy=)``."""
        loc = _here()
        if not isinstance(descriptor, TmaDescriptor):
            raise CompileError(f"{_where(loc)}tma_load: descriptor must be what create_tma_descriptor returns, got "
                               f"{_describe(descriptor)}")
        if not isinstance(smem, SharedTensor):
            raise CompileError(f"{_where(loc)}tma_load: smem must be a shared tensor, got {_describe(smem)}")
        rank = len(descriptor.box)
        if len(coords) != rank:
            raise CompileError(f"{_where(loc)}tma_load: the descriptor has rank {rank}, got {len(coords)} coords")
        if eviction_policy != 0:
            raise CompileError(f"{_where(loc)}tma_load: eviction_policy must be 0 (normal); give a raw L2 policy "
                               f"to tma.global_to_shared(cache_policy=), got {_describe(eviction_policy)}")
        box = descriptor.box
        dims = [d for d in range(rank) if box[d] != 1 or rank - d <= len(smem.shape)]
        dims = dims[len(dims) - len(smem.shape):] if len(dims) > len(smem.shape) else dims
        if [box[d] for d in dims] != list(smem.shape) or any(box[d] != 1 for d in range(rank) if d not in dims):
            raise CompileError(f"{_where(loc)}tma_load: smem {smem.t.type_str()} does not hold the descriptor's box "
                               f"{box} (outermost first)")
        self.tma.global_to_shared(src=descriptor.tensor, dst=smem, offsets=list(coords)[::-1], dims=dims,
                                  mbarrier=mbarrier)

    def annotate_producer_reg_dealloc(self, reg_count: int = 24) -> None:
        """Seed 004's register hint for a warp-specialized producer: in tilus, whose warp groups are
        written out, the producer's group lowers its registers per thread to ``reg_count`` where it
        says so: ``dec_max_nreg(reg_count)`` (sm_90a, a group of whole warp groups)."""
        loc = _here()
        _builder().set_max_nreg(_int(reg_count, "reg_count", loc), False, loc)

    def annotate_consumer_reg_alloc(self, reg_count: int = 240) -> None:
        """Seed 004's register hint for a consumer: ``inc_max_nreg(reg_count)`` in its group."""
        loc = _here()
        _builder().set_max_nreg(_int(reg_count, "reg_count", loc), True, loc)

    def no_set_max_nreg(self) -> None:
        """Seed 004: no automatic ``setmaxnreg``. tilus inserts none of its own (only ``set_max_nreg`` and
        the two annotations above emit one), so there is nothing to switch off: accepted, a no-op."""

    def disable_warp_group_reg_alloc(self) -> None:
        """``no_set_max_nreg()`` under its other seed name."""

    def ptx_arrive_cluster_barrier(self, mbarrier: SharedTensor, cta_id: _Scalar) -> None:
        """Every thread of the group arrives once at the barrier at ``mbarrier``'s offset in block
        ``cta_id`` of the cluster (seed 004): ``mbarrier_arrive(mbarrier, cta_id)``."""
        self.mbarrier_arrive(mbarrier, cta_id)

    def initialize_wgmma_descriptor(self, descriptor: Any, start_address: _Scalar, layout_type_: _Scalar = 0,
                                    leading_byte_offset: _Scalar = 0, stride_byte_offset: _Scalar = 0) -> Expr:
        """A wgmma shared-memory matrix descriptor (seed 004; PTX "Matrix Descriptor Format"), a uint64:
        ``start_address`` (a byte address in the shared window) >> 4 in bits 0-13, the seed's
        ``leading_byte_offset`` and ``stride_byte_offset`` (already in 16-byte units, as its bitfields
        take them) in bits 16-29 and 32-45, ``layout_type_`` (0 none, 1 128B, 2 64B, 3 32B swizzle) in
        bits 62-63. ``descriptor``: a mutable uint64 kernel variable it is written to (or None); the
        value is returned too. tilus's own ``wgmma.mma`` derives its descriptors from the layouts."""
        loc = _here()
        w = "initialize_wgmma_descriptor"
        v = ((_start_field(start_address, w, loc))
             | (_descriptor_field(leading_byte_offset, 14, f"{w}: leading_byte_offset", loc) << 16)
             | (_descriptor_field(stride_byte_offset, 14, f"{w}: stride_byte_offset", loc) << 32)
             | (_descriptor_field(layout_type_, 2, f"{w}: layout_type_", loc) << 62))
        return _store_descriptor(descriptor, _as_u64(v), w, loc)

    def initialize_tcgen05_descriptor(self, descriptor: Any, start_address: _Scalar, leading_byte_offset: _Scalar,
                                      stride_byte_offset: _Scalar, base_offset: _Scalar = 0,
                                      leading_is_absolute: bool = False, swizzle_mode: _Scalar = 0) -> Expr:
        """A tcgen05 shared-memory descriptor (seed 004; PTX "Shared memory descriptor"), a uint64: the
        start address >> 4 in bits 0-13, ``leading_byte_offset`` and ``stride_byte_offset`` (16-byte
        units) in bits 16-29 and 32-45, the version 1 in bits 46-47, ``base_offset`` in bits 49-51,
        ``leading_is_absolute`` in bit 52 and ``swizzle_mode`` (0 none, 1 128B with 32B atoms, 2 128B,
        4 64B, 6 32B) in bits 61-63. ``descriptor`` as for ``initialize_wgmma_descriptor``."""
        loc = _here()
        w = "initialize_tcgen05_descriptor"
        if not isinstance(leading_is_absolute, bool):
            raise CompileError(f"{_where(loc)}{w}: leading_is_absolute must be True or False, got "
                               f"{_describe(leading_is_absolute)}")
        v = ((_start_field(start_address, w, loc))
             | (_descriptor_field(leading_byte_offset, 14, f"{w}: leading_byte_offset", loc) << 16)
             | (_descriptor_field(stride_byte_offset, 14, f"{w}: stride_byte_offset", loc) << 32)
             | (1 << 46)
             | ((_descriptor_field(base_offset, 32, f"{w}: base_offset", loc) & 7) << 49)
             | (int(leading_is_absolute) << 52)
             | ((_descriptor_field(swizzle_mode, 32, f"{w}: swizzle_mode", loc) & 7) << 61))
        return _store_descriptor(descriptor, _as_u64(v), w, loc)

    def increase_descriptor_offset(self, descriptor: Any, offset: _Scalar) -> Expr:
        """Moves a matrix descriptor's start ``offset`` bytes on (seed 004): ``offset >> 4`` added to its
        low 32 bits (the seed's ``reg32_[0] += offset >> 4``; a carry out of them is dropped). A mutable
        uint64 variable is updated in place; the new value is returned."""
        loc = _here()
        w = "increase_descriptor_offset"
        if isinstance(descriptor, Unusable):
            raise descriptor.error()
        if not isinstance(descriptor, (int, Expr)) or isinstance(descriptor, bool):
            raise CompileError(f"{_where(loc)}{w}: descriptor must be a uint64 scalar, got {_describe(descriptor)}")
        d = _C.cast(descriptor, _u64()) if isinstance(descriptor, Expr) else descriptor
        o = _C.cast(_scalar(offset, f"{w}: offset", loc), _u64()) if isinstance(offset, Expr) else offset
        low = ((d & 0xFFFFFFFF) + (o >> 4)) & 0xFFFFFFFF
        v = _as_u64(((d >> 32) << 32) | low)  # (a mask of the high bits does not fit an int64 constant)
        if isinstance(descriptor, Expr) and id(descriptor) in _tracing.mutables:
            return _store_descriptor(descriptor, v, w, loc)
        return v

    def ptx_mma_sm70(self, shape: str, A_layout: str, B_layout: str, A_dtype: Any, B_dtype: Any, C_dtype: Any,
                     multiplicand_a: RegisterTensor, a_index: int, multiplicand_b: RegisterTensor, b_index: int,
                     accumulator: RegisterTensor, c_index: int) -> RegisterTensor:
        """Seed 004's Volta tensor-core product ``m16n16k4``: ``accumulator += a @ b`` over register
        tiles. ``multiplicand_a`` is [16, 4] for ``A_layout="row"`` ([m, k]) or [4, 16] for "col"
        ([k, m]); ``multiplicand_b`` [4, 16] for "row" ([k, n]) or [16, 4] for "col" ([n, k]);
        ``accumulator`` [16, 16]; a tilus register tensor is the whole fragment, so each ``*_index``
        (the seed's offset into a thread's registers) must be 0. The dtypes ("fp16", "fp32", or tilus dtypes) must be the
        tensors'. tilus runs it as its ``dot`` (the fragments' layouts are its own, chosen for the
        target: mma.sync on sm_80 and newer), written back into ``accumulator`` (returned too)."""
        loc = _here()
        w = "ptx_mma_sm70"
        if shape != "m16n16k4":
            raise CompileError(f"{_where(loc)}{w}: shape must be 'm16n16k4', got {_describe(shape)}")
        for name, lay in (("A_layout", A_layout), ("B_layout", B_layout)):
            if lay not in ("row", "col"):
                raise CompileError(f"{_where(loc)}{w}: {name} must be 'row' or 'col', got {_describe(lay)}")
        a = _fragment(multiplicand_a, a_index, "multiplicand_a", [16, 4] if A_layout == "row" else [4, 16], loc)
        b = _fragment(multiplicand_b, b_index, "multiplicand_b", [4, 16] if B_layout == "row" else [16, 4], loc)
        c = _fragment(accumulator, c_index, "accumulator", [16, 16], loc)
        for name, want, t in (("A_dtype", A_dtype, a), ("B_dtype", B_dtype, b), ("C_dtype", C_dtype, c)):
            d = _seed_dtype(want, f"{w}: {name}", loc)
            if d != t.dtype:
                raise CompileError(f"{_where(loc)}{w}: {name} is {d} but the tensor is {_describe(t)}")
        f16, f32 = DataType.from_name("float16"), DataType.from_name("float32")
        if a.dtype != f16 or c.dtype not in (f16, f32):
            raise CompileError(f"{_where(loc)}{w}: m16n16k4 takes float16 a and b and a float16 or float32 "
                               f"accumulator, got {_describe(a)}, {_describe(b)}, {_describe(c)}")
        if A_layout == "col":
            a = self.transpose(a)
        if B_layout == "col":
            b = self.transpose(b)
        return self.dot(a, b, c, out=c)


def _start_field(start_address, what, loc):
    """Bits 0-13 of a matrix descriptor: the shared-window byte address >> 4."""
    if isinstance(start_address, (SharedTensor, Region)):
        raise CompileError(f"{_where(loc)}{what}: start_address must be a byte address in the shared window (an "
                           f"integer); tilus's shared tensors have no raw addresses (wgmma.mma and tcgen05.mma "
                           f"make their descriptors from the layouts), got {_describe(start_address)}")
    if isinstance(start_address, Unusable):
        raise start_address.error()
    if isinstance(start_address, bool) or not isinstance(start_address, (int, Expr)):
        raise CompileError(f"{_where(loc)}{what}: start_address must be an integer, got {_describe(start_address)}")
    if isinstance(start_address, int):
        if not 0 <= start_address < (1 << 18):
            raise CompileError(f"{_where(loc)}{what}: start_address {start_address} is outside the shared window "
                               f"[0, 262144)")
        return (start_address & 0x3FFFF) >> 4
    return (_C.cast(start_address, _u64()) & 0x3FFFF) >> 4


def _as_u64(v):
    return _C.cast(v, _u64()) if isinstance(v, Expr) else v


def _fragment(t, index, what, shape, loc):
    """The register tensor `t`, which must have `shape`, at index 0."""
    if not isinstance(t, RegisterTensor):
        raise CompileError(f"{_where(loc)}ptx_mma_sm70: {what} must be a register tensor, got {_describe(t)}")
    i = _int(index, f"ptx_mma_sm70: {what}'s index", loc)
    if list(t.shape) != shape or i != 0:
        raise CompileError(f"{_where(loc)}ptx_mma_sm70: {what} must be a register tensor {shape} at index 0 (a "
                           f"tilus register tensor is the whole fragment), got {_describe(t)} at index {i}")
    return t
