"""Memory instructions: loads, stores, cp.async, copy / async_copy / tma_copy, im2col, explicit-width
global accesses."""

from typing import Any, Dict, Optional, Sequence, Union

from .. import _C
from .._C import CompileError
from ..tracing import GlobalTensor, Region, RegisterTensor, SharedTensor, TensorBase, _builder, _describe, _here, _where
from ._args import (_Dims, _Int, _Scalar, _Src, _barrier, _bool, _exprs, _int, _ints, _layout, _optional, _scalar,
                    _tensor)
from .atomic import _scatter


class MemoryInstructions:
    """Loads, stores and copies between global, shared and register memory. A mixin of ``tilus.Script``."""

    # --- memory ----------------------------------------------------------------------------------
    def load_global(self, src: GlobalTensor, *, offsets: Sequence[_Int], shape: Optional[Sequence[int]] = None,
                    dims: _Dims = None, out: Optional[RegisterTensor] = None,
                    other: Optional[_Scalar] = None) -> RegisterTensor:
        """A tile of a global tensor loaded into a new register tensor.

        Args:
            src: the global tensor (``global_view``).
            offsets: where the tile starts, one per dim of ``src``.
            shape: the tile's static shape (required).
            dims: which dims of ``src`` the tile's dims map to (default: the trailing dims;
                negative dims count from the end).
            out: write the tile into this register tensor instead, and return it.
            other: the value of the elements outside the global tensor (Triton's ``other=``), a
                scalar of the tile's kind (a Python number or a kernel scalar); default zero.
                A reduction over a tile wider than the data needs its identity there:
                ``other=-math.inf`` for a max (softmax), ``0`` for a sum.

        Elements outside the global tensor read as ``other`` (zero by default).
        """
        loc = _here()
        g = _tensor(src, "load_global", loc, GlobalTensor)
        if shape is None:
            raise CompileError(f"{_where(loc)}load_global: shape= is required")
        if other is not None:
            other = _scalar(other, "load_global: other", loc)
        t = RegisterTensor(_builder().load_global(g, _exprs(offsets, "load_global: offsets", loc),
                                                  _ints(shape, "load_global: shape", loc),
                                                  _ints(dims, "load_global: dims", loc), loc, other))
        return self._into(out, t, loc, "load_global")

    def store_global(self, dst: GlobalTensor, src: RegisterTensor, *, offsets: Sequence[_Int],
                     dims: _Dims = None) -> None:
        """Stores the register tensor ``src`` into the global tensor ``dst`` at ``offsets``.

        ``offsets`` has one entry per dim of ``dst``; ``dims`` maps the tile's dims to the dims
        of ``dst`` as in ``load_global``. Elements outside the global tensor are not written.
        """
        loc = _here()
        _builder().store_global(_tensor(dst, "store_global", loc, GlobalTensor), _tensor(src, "store_global", loc),
                                _exprs(offsets, "store_global: offsets", loc), _ints(dims, "store_global: dims", loc),
                                loc)

    def store_global_scatter(self, dst: GlobalTensor, *, dim: int, indices: RegisterTensor,
                             values: RegisterTensor) -> None:
        """``dst[..., indices[k], ...] = values[k]`` for each element ``k`` of the tile (NVIDIA
        Tilus's): the element keeps its own coordinates in the other dims, and ``indices`` (integers,
        ``values``' shape) picks the one along ``dim``. Not atomic: under duplicate indices one of
        the values lands. Elements whose coordinates fall outside ``dst`` are not written."""
        _scatter("global", None, dst, dim, indices, values, "relaxed", "gpu", None, _here())

    def store_shared_scatter(self, dst: SharedTensor, *, dim: int, indices: RegisterTensor,
                             values: RegisterTensor) -> None:
        """``store_global_scatter`` into a shared tensor (its other dims equal ``values``')."""
        _scatter("shared", None, dst, dim, indices, values, "relaxed", "cta", None, _here())

    def load_shared(self, src: SharedTensor, *, out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """The whole shared tensor ``src`` loaded into a new register tensor (or into ``out``, returned)."""
        loc = _here()
        t = RegisterTensor(_builder().load_shared(_tensor(src, "load_shared", loc, SharedTensor), loc))
        return self._into(out, t, loc, "load_shared")

    def store_shared(self, dst: SharedTensor, src: RegisterTensor) -> None:
        """Stores the register tensor ``src`` into the shared tensor ``dst`` (same shape and dtype)."""
        loc = _here()
        _builder().store_shared(_tensor(dst, "store_shared", loc, SharedTensor), _tensor(src, "store_shared", loc), loc)

    def copy_async(self, src: GlobalTensor, dst: SharedTensor, *, offsets: Sequence[_Int], dims: _Dims = None,
                   evict: Optional[str] = None, check_bounds: bool = True) -> None:
        """Copies a tile of the global tensor ``src`` into the shared tensor ``dst`` with cp.async.

        Args:
            offsets: where the tile starts, one per dim of ``src``.
            dims: the dim of ``src`` of each dim of ``dst``, in any order (default: the
                trailing dims in order).
            evict: the L2 eviction hint, "evict_normal" (the default), "evict_first" or
                "evict_last".
            check_bounds: True (default): elements outside ``src`` are zero-filled; False
                removes the bounds predicate.

        Asynchronous: pair it with ``copy_async_commit_group`` / ``copy_async_wait_group`` /
        ``copy_async_wait_all``, or let the async-wait pass add the commits and waits before the
        shared tensor is read (docs/passes.md).
        """
        loc = _here()
        _builder().copy_async(_tensor(src, "copy_async", loc, GlobalTensor),
                              _tensor(dst, "copy_async", loc, SharedTensor),
                              _exprs(offsets, "copy_async: offsets", loc), _ints(dims, "copy_async: dims", loc),
                              _optional(evict, str, "copy_async: evict", loc),
                              _bool(check_bounds, "copy_async: check_bounds", loc), loc)

    def copy_async_commit_group(self) -> None:
        """Closes the group of ``copy_async`` copies issued since the last commit."""
        _builder().copy_async_commit_group(_here())

    def copy_async_wait_group(self, n: int) -> None:
        """Waits until at most ``n`` (a Python int >= 0) committed copy groups are still pending."""
        loc = _here()
        _builder().copy_async_wait_group(_int(n, "copy_async_wait_group: n", loc), loc)

    def copy_async_wait_all(self) -> None:
        """Waits for every pending ``copy_async`` copy."""
        _builder().copy_async_wait_all(_here())

    @staticmethod
    def _region(x, loc):
        if isinstance(x, Region):
            return x.tensor.t, x.offsets, x.extents
        if isinstance(x, TensorBase):
            return x.t, [], []
        raise CompileError(f"{_where(loc)}copy: expects a tensor or a tensor region, got {type(x).__name__}")

    def _copy(self, src, dst, coalesced_width, disable_tma, eviction_policy, annotations, loop_layout, api, loc,
              barrier=None):
        s, so, se = self._region(src, loc)
        d, do, de = self._region(dst, loc)
        annotations = {str(k): str(v) for k, v in (annotations or {}).items()}
        _builder().copy(s, so, se, d, do, de, coalesced_width, bool(disable_tma), eviction_policy, annotations,
                        loop_layout, api, barrier, loc)

    @staticmethod
    def _copy_options(what, loc, coalesced_width=None, disable_tma=False, eviction_policy=None, annotations=None,
                      loop_layout=None):
        if coalesced_width is not None:
            _int(coalesced_width, f"{what}: coalesced_width", loc)
        _bool(disable_tma, f"{what}: disable_tma", loc)
        _optional(eviction_policy, str, f"{what}: eviction_policy", loc)
        _optional(annotations, dict, f"{what}: annotations", loc)
        _layout(loop_layout, f"{what}: loop_layout", loc)

    def copy(self, src: _Src, dst: _Src, *, coalesced_width: Optional[int] = None, disable_tma: bool = False,
             eviction_policy: Optional[str] = None, annotations: Optional[Dict[str, Any]] = None,
             loop_layout: Optional[_C.RegisterLayout] = None) -> None:
        """Copies between any two of global, shared and register regions.

        A region is a whole tensor or a slice of a global or shared tensor (``g[a:b, c:d]``;
        an integer index fixes a dim with extent 1); register regions are whole tensors, and
        register to register is an assignment. The extents of the two sides are matched
        right-aligned into a tile of constant extents: equal extents stay, a memory side's 1
        takes the other side's extent, leading dims of ``dst`` that ``src`` lacks broadcast
        ``src``. A dynamic extent is taken only where its region is global and reaches its
        tensor's end (``g[i0:]``); anything else that does not match is a CompileError naming
        both regions. Out-of-bounds global elements read as zero and are not written.

        Args:
            coalesced_width: elements per access, forcing a narrower vector (clamped, with a
                warning, when not legal).
            disable_tma: skip the TMA path.
            eviction_policy: the L2 hint of the global accesses, "evict_normal",
                "evict_first" or "evict_last".
            annotations: ``coalesced_width``, ``disable_tma``, ``eviction_policy`` (winning
                over the arguments), ``use_tma`` (TMA or an error), ``use_cp_async`` (cp.async,
                global to shared, committing its own group); any other key is an error.
            loop_layout: pins the thread mapping of a memory-to-memory copy.

        Synchronous: the passes add the waits and barriers around it. The instruction
        (cp.async, ldmatrix, stmatrix or vectorized SIMT) is chosen by the
        ``select_instructions`` pass (docs/instructions.md, docs/passes.md).
        """
        loc = _here()
        self._copy_options("copy", loc, coalesced_width, disable_tma, eviction_policy, annotations, loop_layout)
        self._copy(src, dst, coalesced_width, disable_tma, eviction_policy, annotations, loop_layout, "copy", loc)

    def async_copy(self, src: Union[GlobalTensor, Region], dst: Union[SharedTensor, Region], *,
                   coalesced_width: Optional[int] = None, annotations: Optional[Dict[str, Any]] = None,
                   loop_layout: Optional[_C.RegisterLayout] = None) -> None:
        """cp.async from a global region to a shared region, followed by a commit; no wait is added.

        The kernel waits itself (``copy_async_wait_group`` / ``copy_async_wait_all``); reading
        the shared data without a wait is a CompileError. Regions and options as in ``copy``.
        """
        loc = _here()
        self._copy_options("async_copy", loc, coalesced_width, annotations=annotations, loop_layout=loop_layout)
        self._copy(src, dst, coalesced_width, False, None, annotations, loop_layout, "async_copy", loc)

    def tma_copy(self, src: _Src, dst: _Src, *, barrier: SharedTensor, eviction_policy: Optional[str] = None,
                 annotations: Optional[Dict[str, Any]] = None) -> None:
        """Split-phase TMA copy (seed 000): arrive-and-expect-tx on ``barrier`` plus a TMA load; no wait.

        ``src`` and ``dst`` are regions as in ``copy``: a global region into a shared one (a
        load, completing on ``barrier``, an mbarrier from ``self.mbarrier.alloc``), or a shared
        region into a global one (a TMA store; ``barrier`` is then None and the kernel waits
        with ``tma_store_arrive`` / ``tma_store_wait``). Issued once by the current thread
        group; the kernel waits on the barrier itself (``mbarrier_wait_parity``). Needs sm_90:
        when the box cannot be a TMA box the error says why.
        """
        loc = _here()
        self._copy_options("tma_copy", loc, eviction_policy=eviction_policy, annotations=annotations)
        b = None if barrier is None else _barrier(barrier, "tma_copy: barrier", loc)
        self._copy(src, dst, None, False, eviction_policy, annotations, None, "tma_copy", loc, b)

    def c2d_im2col(self, img: GlobalTensor, col: SharedTensor, nhw_step: _Int, c_step: _Int, kernel: int, stride: int,
                   dilation: int, pad: int, eviction_policy: Optional[str] = None,
                   barrier: Optional[SharedTensor] = None) -> None:
        """im2col for a 2-D convolution (seed 000): the tile (``nhw_step``, ``c_step``) of the im2col
        matrix of the NHWC image ``img`` [N, H, W, C] into the shared tensor ``col`` [bm, bk].

        ``col[i, j] = img[n, oh * stride + kh * dilation - pad, ow * stride + kw * dilation - pad, c]``
        for the output pixel ``nhw_step * bm + i = (n, oh, ow)`` (row-major over [N, OH, OW]) and
        ``c_step * bk + j = (kh, kw, c)`` (row-major over [kernel, kernel, C]); zero outside the
        image and past the matrix. Synchronous; vectorized along the channels where C allows (on
        sm_90 a TMA im2col load where C is a known multiple of bk).

        ``barrier`` (an mbarrier, ``bars[i]``): split-phase, as ``tma_copy``: the group's first thread
        arrives once on it with the tile's bytes and issues the TMA im2col load; the kernel waits on
        the barrier before reading ``col`` (the passes report a missing wait). Needs TMA im2col on
        the GPU (a CompileError says why not); on the CPU backend the gathers, then the arrival.
        """
        loc = _here()
        _builder().c2d_im2col(_tensor(img, "c2d_im2col: img", loc, GlobalTensor),
                              _tensor(col, "c2d_im2col: col", loc, SharedTensor),
                              _scalar(nhw_step, "c2d_im2col: nhw_step", loc), _scalar(c_step, "c2d_im2col: c_step", loc),
                              _int(kernel, "c2d_im2col: kernel", loc), _int(stride, "c2d_im2col: stride", loc),
                              _int(dilation, "c2d_im2col: dilation", loc), _int(pad, "c2d_im2col: pad", loc),
                              _optional(eviction_policy, str, "c2d_im2col: eviction_policy", loc), loc,
                              None if barrier is None else _barrier(barrier, "c2d_im2col: barrier", loc))

    @staticmethod
    def _vector_region(x, what, loc):
        if isinstance(x, Region):
            return x.tensor.t, x.offsets, x.extents
        if isinstance(x, GlobalTensor):
            return x.t, [], []
        raise CompileError(f"{_where(loc)}{what}: expects a global tensor or a region of one (g[i:i + 8]), got "
                           f"{_describe(x)}")

    def _ldg(self, bits, src, pred, loc):
        t, offsets, extents = self._vector_region(src, f"ldg{bits}", loc)
        p = None if pred is None else _scalar(pred, f"ldg{bits}: pred", loc)
        return RegisterTensor(_builder().ldg(bits, t, offsets, extents, p, loc))

    def _stg(self, bits, dst, value, pred, loc):
        t, offsets, extents = self._vector_region(dst, f"stg{bits}", loc)
        p = None if pred is None else _scalar(pred, f"stg{bits}: pred", loc)
        _builder().stg(bits, t, offsets, extents, _tensor(value, f"stg{bits}: value", loc), p, loc)

    def ldg32(self, src: Union[GlobalTensor, Region], pred: Optional[_Scalar] = None) -> RegisterTensor:
        """Loads the 4 bytes of the global region ``src`` (``g[i:i + 2]`` of 16-bit elements; a single
        element ``g[i]`` stands for the vector that starts there) with one ``ld.global.u32`` in every
        thread of the current group: a register tensor of the region's shape that every thread holds
        whole. ``pred`` (a bool scalar) false gives zeros. The address must be provably 4-byte aligned;
        no bounds predicate is added (``pred`` is the only guard)."""
        return self._ldg(32, src, pred, _here())

    def ldg64(self, src: Union[GlobalTensor, Region], pred: Optional[_Scalar] = None) -> RegisterTensor:
        """``ldg32`` for 8 bytes (``ld.global.v2.u32``, 8-byte aligned)."""
        return self._ldg(64, src, pred, _here())

    def ldg128(self, src: Union[GlobalTensor, Region], pred: Optional[_Scalar] = None) -> RegisterTensor:
        """``ldg32`` for 16 bytes (``ld.global.v4.u32``, 16-byte aligned)."""
        return self._ldg(128, src, pred, _here())

    def ldg256(self, src: Union[GlobalTensor, Region], pred: Optional[_Scalar] = None) -> RegisterTensor:
        """``ldg32`` for 32 bytes (two ``ld.global.v4.u32``, 16-byte aligned)."""
        return self._ldg(256, src, pred, _here())

    def stg32(self, dst: Union[GlobalTensor, Region], value: RegisterTensor, pred: Optional[_Scalar] = None) -> None:
        """Stores ``value`` (a register tensor of the region's dtype and shape, 4 bytes) to the global
        region ``dst`` with ``st.global.u32`` from every thread of the current group; skipped where
        ``pred`` is false. 4-byte aligned; no bounds predicate."""
        self._stg(32, dst, value, pred, _here())

    def stg64(self, dst: Union[GlobalTensor, Region], value: RegisterTensor, pred: Optional[_Scalar] = None) -> None:
        """``stg32`` for 8 bytes (``st.global.v2.u32``)."""
        self._stg(64, dst, value, pred, _here())

    def stg128(self, dst: Union[GlobalTensor, Region], value: RegisterTensor, pred: Optional[_Scalar] = None) -> None:
        """``stg32`` for 16 bytes (``st.global.v4.u32``)."""
        self._stg(128, dst, value, pred, _here())

    def stg256(self, dst: Union[GlobalTensor, Region], value: RegisterTensor, pred: Optional[_Scalar] = None) -> None:
        """``stg32`` for 32 bytes (two ``st.global.v4.u32``, 16-byte aligned)."""
        self._stg(256, dst, value, pred, _here())
