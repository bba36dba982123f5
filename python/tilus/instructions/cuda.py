"""``self.cuda``: NVIDIA Tilus's dot configurations and layout helpers."""

from .. import _C, layouts as _layouts
from .._C import DataType


class DotConfig:
    """A dot's operand layouts on a block (NVIDIA Tilus's BlockMmaConfig): ``la``, ``lb``, ``lc``
    for a [m, k] x [k, n] product on ``num_warps`` warps, and the dtypes, exactly as layout
    inference lays out such a dot with that warp split (annotating them keeps that split)."""

    def __init__(self, operand_dtype, accumulator_dtype, m, n, k, num_warps, warp_m, warp_n, la, lb, lc):
        self.operand_dtype, self.accumulator_dtype = operand_dtype, accumulator_dtype
        self.m, self.n, self.k, self.num_warps, self.warp_m, self.warp_n = m, n, k, num_warps, warp_m, warp_n
        self.la, self.lb, self.lc = la, lb, lc

    @property
    def lb_T(self):
        """``lb`` transposed: the layout of b as an [n, k] tile (NVIDIA Tilus's ``lb_T``)."""
        return self.lb.permute([1, 0])

    def __repr__(self):
        return (f"DotConfig({self.operand_dtype.name} -> {self.accumulator_dtype.name}, m={self.m}, n={self.n}, "
                f"k={self.k}, warps {self.warp_m}x{self.warp_n})")


class AtomicMmaConfig:
    """One warp's mma.sync instruction (NVIDIA Tilus's AtomicMmaConfig): ``m``, ``n``, ``k``,
    ``vec_k``, ``operand_type``, ``acc_type`` and the fragment layouts ``la`` [m, k], ``lb`` [k, n],
    ``lc`` [m, n] of its 32 threads (the hardware's, as tilus's own dot lowering uses them)."""

    def __init__(self, name, operand_type, acc_type, m, n, k):
        plans = _C.dot_plans(operand_type, acc_type, m, n, k, 32)
        if not plans or not plans[0]["op"].startswith("mma.sync"):
            raise AttributeError(f"atomic_mma_configs.{name}: tilus has no mma.sync for {operand_type.name} operands "
                                 f"with {acc_type.name} accumulation (docs/tilus-compatibility.md)")
        self.name, self.operand_type, self.acc_type = name, operand_type, acc_type
        self.m, self.n, self.k, self.vec_k = m, n, k, 1
        self.la, self.lb, self.lc = plans[0]["a"], plans[0]["b"], plans[0]["c"]

    def __repr__(self):
        return f"AtomicMmaConfig({self.name})"


class AtomicMmaConfigs:
    """``self.cuda.atomic_mma_configs`` (NVIDIA Tilus's names): ``m16n8k16_f16_f32``,
    ``m16n8k16_f16_f16``, ``m16n8k16_bf16_f32``; the int8 ones are an AttributeError (no int8
    mma.sync in tilus yet)."""

    _SPECS = {"m16n8k16_f16_f32": ("float16", "float32", 16, 8, 16),
              "m16n8k16_f16_f16": ("float16", "float16", 16, 8, 16),
              "m16n8k16_bf16_f32": ("bfloat16", "float32", 16, 8, 16),
              "m8n8k16_i8_i32": ("int8", "int32", 8, 8, 16),
              "m16n8k16_i8_i32": ("int8", "int32", 16, 8, 16),
              "m16n8k32_i8_i32": ("int8", "int32", 16, 8, 32)}

    def __getattr__(self, name):
        spec = AtomicMmaConfigs._SPECS.get(name)
        if spec is None:
            raise AttributeError(f"atomic_mma_configs has no '{name}' (it has {', '.join(AtomicMmaConfigs._SPECS)})")
        a, c, m, n, k = spec
        config = AtomicMmaConfig(name, DataType.from_name(a), DataType.from_name(c), m, n, k)
        setattr(self, name, config)
        return config

    def from_dtypes(self, operand_dtype, accumulator_dtype):
        for name, (a, c, *_) in AtomicMmaConfigs._SPECS.items():
            if (operand_dtype.name, accumulator_dtype.name) == (a, c) and name != "m8n8k16_i8_i32":
                return getattr(self, name)
        raise ValueError(f"no mma config for {operand_dtype.name} operands with {accumulator_dtype.name} accumulation")


class CudaHelpers:
    """``self.cuda`` (NVIDIA Tilus's names): the layouts the compiler would choose, for kernels
    that annotate them."""

    atomic_mma_configs = AtomicMmaConfigs()

    @staticmethod
    def mma_dot_config(atomic_mma, warp_spatial, warp_repeat):
        """NVIDIA Tilus's block mma layouts: ``warp_spatial`` (wsm, wsn) warps, each repeating the
        ``atomic_mma`` instruction ``warp_repeat`` (wrm, wrn, wrk) times, the warps major and the
        repeats minor in every dim, as Tilus composes them. tilus's default dot plans put the
        repeats major; a dot annotated with these layouts takes the warps-major plan (its lowering
        record says ``warps_major``)."""
        wsm, wsn = warp_spatial
        wrm, wrn, wrk = warp_repeat
        la = _layouts.reduce(_layouts.spatial(wsm, 1, wsn, ranks=[1, 0, 2]), dims=[2]).local(wrm, wrk) * atomic_mma.la
        lb = _layouts.reduce(_layouts.spatial(1, wsn, wsm, ranks=[0, 2, 1]), dims=[2]).local(wrk, wrn) * atomic_mma.lb
        lc = _layouts.spatial(wsm, wsn).local(wrm, wrn) * atomic_mma.lc
        return DotConfig(atomic_mma.operand_type, atomic_mma.acc_type, atomic_mma.m * wsm * wrm,
                         atomic_mma.n * wsn * wrn, atomic_mma.k * wrk, wsm * wsn, wsm, wsn, la, lb, lc)

    @staticmethod
    def resolve_dot_config(operand_dtype, acc_dtype, *, m, n, k, num_warps=None, warp_m=None, warp_n=None):
        """The operand layouts of a [m, k] x [k, n] dot on ``num_warps`` warps (or
        ``warp_m`` x ``warp_n``): mma.sync m16n8k16 fragments for float16 / bfloat16 operands
        on tiles that fit them. With warp_m / warp_n the split is theirs, else the one layout
        inference takes by default. ValueError when no split fits."""
        if num_warps is None:
            if warp_m is None or warp_n is None:
                raise ValueError("resolve_dot_config: give num_warps, or both warp_m and warp_n")
            num_warps = warp_m * warp_n
        plans = _C.dot_plans(operand_dtype, acc_dtype, m, n, k, 32 * num_warps)
        if not plans[0]["op"].startswith("mma.sync") and (warp_m is not None or warp_n is not None):
            raise ValueError(f"resolve_dot_config: a {operand_dtype.name} x {operand_dtype.name} -> {acc_dtype.name} "
                             f"dot of m={m}, n={n}, k={k} takes no mma.sync, so it has no warp split")
        fits = [p for p in plans if (warp_m is None or p["warps_m"] == warp_m) and
                (warp_n is None or p["warps_n"] == warp_n)]
        if not fits:
            splits = ", ".join(dict.fromkeys(f"{p['warps_m']}x{p['warps_n']}" for p in plans))
            raise ValueError(f"resolve_dot_config: no split of {num_warps} warps into warp_m={warp_m} x "
                             f"warp_n={warp_n} fits m={m}, n={n}, k={k} (the splits that fit: {splits})")
        p = fits[0]
        if p["op"].startswith("mma.sync"):
            # NVIDIA Tilus's estimate of the registers a thread's fragments take, and its limit: a
            # split over it would spill (and its compile take minutes), so Tilus refuses it, and so
            # does this (its flash-attention examples' autotune spaces rely on the refusal).
            registers = (p["a"].local_size * operand_dtype.nbytes + p["b"].local_size * operand_dtype.nbytes +
                         p["c"].local_size * acc_dtype.nbytes) // 4
            if registers >= 256 - 32:
                raise ValueError(f"resolve_dot_config: the {p['warps_m']}x{p['warps_n']} split of m={m}, n={n}, k={k} "
                                 f"on {num_warps} warps holds about {registers} registers of fragments per thread, "
                                 f"224 or more (NVIDIA Tilus's limit): use more warps or smaller tiles")
        return DotConfig(operand_dtype, acc_dtype, m, n, k, num_warps, p["warps_m"], p["warps_n"], p["a"], p["b"],
                         p["c"])

    @staticmethod
    def shared_layout(shape):
        """A row-major shared layout of ``shape`` (NVIDIA Tilus's ``self.cuda.shared_layout``): an
        annotation with it keeps the tile unswizzled."""
        return _C.SharedLayout.row_major([int(d) for d in shape])

    @staticmethod
    def default_register_layout(num_warps, dtype, shape, vector_size=None):
        """The layout layout inference gives a free register tensor of ``shape`` and ``dtype`` on
        ``num_warps`` warps (16-byte vectors along the last dim unless ``vector_size`` says)."""
        return _C.default_register_layout(list(shape), dtype, 32 * num_warps, vector_size or 0)
