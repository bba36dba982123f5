"""NVIDIA Tilus's module-level names (issue 17): void_p, Dim3, RegisterLayout, targets and
get_current_target, host tensors (tilus.empty/zeros/ones/full/rand/randn/randint/from_torch/
view_torch) as kernel arguments, tilus.option's recorded options, tilus.utils, tilus.testing.requires
and the internal import paths the Tilus examples use."""
import importlib
import warnings

import numpy as np
import pytest

import tilus
from conftest import HAS_CPU, HAS_GPU
from tilus import float32, int32

needs_cpu = pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


needs_torch = pytest.mark.skipif(_torch() is None, reason="torch is not installed")


# --- names --------------------------------------------------------------------------------------

def test_nvidia_tilus_module_names_exist():
    names = ["void_p", "DataType", "RegisterLayout", "SharedLayout", "RegisterTensor", "SharedTensor", "GlobalTensor", "Script",
             "autotune", "Class", "Pipeline", "Dim3", "empty", "from_torch", "full", "ones", "rand", "randint",
             "randn", "view_torch", "zeros", "option", "utils", "get_current_target", "__version__"]
    assert [n for n in names if not hasattr(tilus, n)] == []
    assert tilus.void_p.is_pointer() and tilus.void_p.pointee.name == "void"
    assert isinstance(tilus.spatial(2, 4), tilus.RegisterLayout)


def test_internal_import_paths_of_the_tilus_examples():
    from tilus.hidet.ir import DataType
    from tilus.hidet.ir.dtypes import bfloat16, int4b
    from tilus.hidet.ir.type import DataType as DataType2, void_p
    from tilus.ir import RegisterTensor, SharedTensor
    from tilus.ir.layout.ops import local, spatial
    from tilus.ir.tensor import GlobalTensor
    from tilus.utils import benchmark_func, cdiv, dtype_to_torch, gcd  # noqa: F401
    assert DataType is DataType2 is tilus.DataType and bfloat16 is tilus.bfloat16 and int4b is tilus.int4
    assert void_p == tilus.void_p
    assert (RegisterTensor, SharedTensor, GlobalTensor) == (tilus.RegisterTensor, tilus.SharedTensor,
                                                            tilus.GlobalTensor)
    assert spatial(2, 4).num_threads == 8 and local(2, 1).local_size == 2
    ops = importlib.import_module("tilus.ir.layout.ops")
    assert ops.concat(spatial(2), local(2)).shape == [2, 2]
    assert ops.shared_row_major(4, 8) == tilus.SharedLayout.row_major([4, 8])
    assert (local(2, 4).size, spatial(4, 8).size) == (8, 32)


def test_shared_layouts():
    """tilus.SharedLayout and Tilus's shared layout functions: offsets, the swizzles of
    shared_row_major_swizzle (Tilus's for rows of 16 to 128 bytes) and its conditions."""
    from tilus.ir.layout.ops import shared_column_major, shared_row_major, shared_row_major_swizzle
    r = shared_row_major(3, 5)
    assert (r.shape, r.strides, r.swizzle, r.size) == ([3, 5], [5, 1], (0, 0, 0), 15)
    assert shared_column_major(3, 5).strides == [1, 3] and shared_column_major(3, 5).offset([2, 1]) == 5
    # f16 rows of 64 bytes (32 elements): Tilus's Swizzle(base=3, bits=2, shift=3) on 16-byte units.
    z = shared_row_major_swizzle([2, 16, 32], dtype_nbytes=2)
    assert z.swizzle == (2, 3, 3) and z.strides == [512, 32, 1]
    for i, j in [(0, 0), (1, 0), (2, 8), (5, 17), (15, 31)]:
        plain = i * 32 + j
        assert z.offset([0, i, j]) == plain ^ ((plain >> 3) & (0b11 << 3))
    # Every element lands on its own offset inside the tile.
    assert sorted(z.offset([a, i, j]) for a in range(2) for i in range(16) for j in range(32)) == list(range(1024))
    assert shared_row_major_swizzle([8, 64], 2).swizzle == (3, 3, 3)    # 128-byte rows
    assert shared_row_major_swizzle([8, 16], 1).swizzle == (0, 0, 0)    # 16-byte rows: none, as in Tilus
    wide = shared_row_major_swizzle([16, 128], 2)                        # 256-byte rows: XOR with the row
    assert wide.swizzle == (3, 3, 4) and wide.strides == [128, 1]
    with pytest.raises(ValueError, match="rows .* multiple of 8"):
        shared_row_major_swizzle([12, 64], 2)
    with pytest.raises(ValueError, match="at least two dims"):
        shared_row_major_swizzle([64], 2)
    assert tilus.SharedLayout([4, 4], [1, 4]) == shared_column_major(4, 4)
    with pytest.raises(tilus.CompileError, match="SharedLayout: .*2 extents but 1 strides"):
        tilus.SharedLayout([4, 4], [1])
    with pytest.raises(tilus.CompileError, match="shift >= bits"):
        tilus.SharedLayout([8, 8], [8, 1], swizzle=(3, 0, 1))


def test_short_names():
    """hidet's short names, which Tilus's examples print."""
    assert [d.short_name for d in (tilus.float16, tilus.bfloat16, tilus.tfloat32, tilus.float8_e5m2, tilus.float6_e3m2,
                                   tilus.int8, tilus.int4b, tilus.uint3b, tilus.boolean, tilus.float32)] == \
        ["f16", "bf16", "tf32", "f8e5m2", "f6e3m2", "i8", "i4", "u3", "bool", "f32"]


def test_dim3():
    d = tilus.Dim3(4, 5)
    assert (d.x, d.y, d.z) == (4, 5, 1) and list(d) == [4, 5, 1] and d[1] == 5 and len(d) == 3
    x, y, z = tilus.Dim3(1, 2, 3)
    assert (x, y, z) == (1, 2, 3)


# --- targets --------------------------------------------------------------------------------------

def test_targets_support_their_features():
    from tilus import target as t
    assert t.nvgpu_sm90a.supports(t.nvgpu_sm90) and t.nvgpu_sm90a.supports(t.nvgpu_sm80)
    assert not t.nvgpu_sm90.supports(t.nvgpu_sm90a) and not t.nvgpu_sm80.supports(t.nvgpu_sm90)
    assert not t.nvgpu_sm100a.supports(t.nvgpu_sm90a)       # "a" features are one architecture's
    assert t.nvgpu_sm100a.supports(t.nvgpu_sm100f) and not t.nvgpu_sm100.supports(t.nvgpu_sm100f)
    assert t.nvgpu_sm80.supports(t.gpgpu_any) and not t.cpu.supports(t.gpgpu_any)
    assert t.target_of_arch("sm_90a") is t.nvgpu_sm90a and t.target_of_arch("cpu") is t.cpu
    assert str(t.nvgpu_sm90a) == "nvgpu/sm90a"
    with pytest.raises(ValueError):
        t.target_of_arch("gfx1100")


def test_get_current_target_follows_the_backend():
    target = tilus.get_current_target()
    if tilus._C.default_backend() == "gpu":
        assert target.is_nvgpu() and target.arch == tilus._C.device_info()["arch"].replace("_", "")
    else:
        assert target.is_cpu() and target == tilus.target.cpu


def test_requires_skips_where_the_target_lacks_the_feature(monkeypatch):
    ran = []

    @tilus.testing.requires.nvgpu_sm90
    def needs_hopper(x):
        ran.append(x)

    monkeypatch.setattr(tilus.target, "get_current_target", lambda: tilus.target.nvgpu_sm80)
    with pytest.raises(pytest.skip.Exception, match=r"needs a GPU of nvgpu/sm90 \(the current target is nvgpu/sm80\)"):
        needs_hopper(1)
    monkeypatch.setattr(tilus.target, "get_current_target", lambda: tilus.target.nvgpu_sm90a)
    needs_hopper(2)
    assert ran == [2]


# --- options and utils ---------------------------------------------------------------------------------

def test_recorded_options():
    tilus.option.parallel_workers(3)
    tilus.option.bench_warmup(0)
    assert tilus.option.get_option("parallel_workers") == 3 and tilus.option.get_option("bench_warmup") == 0
    with pytest.raises(ValueError, match="parallel_workers: expects an int >= 1"):
        tilus.option.parallel_workers(0)
    with pytest.warns(UserWarning, match="disable_ptxas_opt has no effect"):
        tilus.option.debug.disable_ptxas_opt()
    assert tilus.option.get_option("debug.disable_ptxas_opt") is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tilus.option.debug.disable_ptxas_opt(False)
    with pytest.raises(ValueError, match="unknown option 'nope'"):
        tilus.option.get_option("nope")


def test_utils_names():
    assert tilus.utils.cdiv(10, 4) == 3 and tilus.utils.gcd(12, 18) == 6
    assert tilus.utils.same_list([1, 2], (1, 2)) and not tilus.utils.same_list([1], [1, 2])
    assert tilus.utils.dtype_from_torch("torch.float16") is not None


@needs_torch
def test_torch_dtypes():
    torch = _torch()
    assert tilus.utils.dtype_to_torch(tilus.float16) is torch.float16
    assert tilus.utils.dtype_to_torch(tilus.int4) is None
    assert tilus.utils.dtype_from_torch(torch.bfloat16) == tilus.bfloat16


# --- host tensors ---------------------------------------------------------------------------------

def test_sub_byte_integers_pack_little_endian():
    t = tilus.Tensor(tilus.int4, [4], np.array([0x21, 0xF3], dtype=np.uint8))  # elements 1, 2, 3, -1
    assert t.numpy().tolist() == [1, 2, 3, -1] and t.nbytes == 2
    u = tilus.full([5], 5, tilus.uint3)   # 101 five times: bits 0..14
    assert u.nbytes == 2 and u._bytes().tolist() == [0b01101101, 0b01011011]
    assert tilus.full([3], 9, tilus.int4).numpy().tolist() == [-7] * 3   # the low bits, as a C cast
    r = tilus.randint(-8, 8, [7, 5], tilus.int4)
    assert r.numpy().min() >= -8 and r.numpy().max() < 8
    np.testing.assert_array_equal(r.to(tilus.int32).numpy(), r.numpy())


def test_floats_round_and_saturate_like_the_core():
    f4 = tilus.full([3], 2.6, tilus.float4_e2m1)
    assert f4.numpy().tolist() == [3.0] * 3 and f4.nbytes == 2
    assert tilus.full([1], 100.0, tilus.float4_e2m1).numpy().tolist() == [6.0]          # saturates
    assert tilus.full([1], 1000.0, tilus.float8_e4m3).numpy().tolist() == [448.0]
    assert tilus.full([2], 1 + 2 ** -8, tilus.bfloat16).numpy().tolist() == [1.0, 1.0]   # ties to even
    assert tilus.full([1], 1 + 3 * 2 ** -9, tilus.bfloat16).numpy().tolist() == [1 + 2 ** -7]
    x = tilus.randn([64], tilus.float32)
    y = x.to(tilus.float6_e3m2).numpy()
    codes = [tilus.float6_e3m2.encode_float(float(v)) for v in x.numpy()]
    assert y.tolist() == [tilus.float6_e3m2.decode_float(c) for c in codes]


def test_bulk_encoding_matches_the_scalar_one():
    """DataType.encode_floats and tilus._C.pack_bits / unpack_bits (what tilus.Tensor.to uses at
    weight sizes) agree with encode_float and the little-endian packing, at odd lengths."""
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.standard_normal(37) * 8, [0.0, -0.0, 1e9, -1e9, np.inf, -np.inf]])
    for dt in (tilus.float8_e4m3, tilus.float8_e5m2, tilus.float6_e3m2, tilus.float4_e2m1, tilus.float3_e1m1):
        codes = [dt.encode_float(float(v)) for v in values]
        bits = "".join(format(c, f"0{dt.bits}b")[::-1] for c in codes)
        bits += "0" * (-len(bits) % 8)
        expect = bytes(int(bits[i:i + 8][::-1], 2) for i in range(0, len(bits), 8))
        assert dt.encode_floats(values) == expect, dt.name
        unpacked = np.frombuffer(tilus._C.unpack_bits(np.frombuffer(expect, np.uint8), dt.bits, len(codes)), np.uint64)
        assert unpacked.tolist() == codes
    assert tilus._C.pack_bits(np.array([1, 2, 3], np.uint64), 4) == bytes([0x21, 0x03])
    with pytest.raises(ValueError, match="contiguous 1-D float64"):
        tilus.float6_e3m2.encode_floats(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="not a float type"):
        tilus.int4.encode_floats(np.zeros(4))
    with pytest.raises(ValueError, match="uint64"):
        tilus._C.pack_bits(np.zeros(4, np.int32), 4)
    with pytest.raises(ValueError, match="hold fewer than 9 codes"):
        tilus._C.unpack_bits(np.zeros(4, np.uint8), 4, 9)


def test_factories():
    assert tilus.zeros([2, 3], tilus.float16).numpy().tolist() == [[0, 0, 0]] * 2
    assert tilus.ones([2], tilus.int8).numpy().tolist() == [1, 1]
    assert tilus.empty([3, 3], tilus.int2).nbytes == 3
    r = tilus.rand([100], tilus.float32).numpy()
    assert r.shape == (100,) and (0 <= r).all() and (r < 1).all()
    v = tilus.full([4, 8], 3, tilus.int8).view(dtype=tilus.int32)
    assert v.shape == [4, 2] and (v.numpy() == 0x03030303).all()
    c = v.clone()
    assert c.storage is not v.storage and (c.numpy() == v.numpy()).all()
    with pytest.raises(ValueError, match="differ in size"):
        v.view(dtype=tilus.int8, shape=[3])
    with pytest.raises(TypeError, match="dtype must be a tilus data type"):
        tilus.zeros([2], "float32")


@needs_torch
def test_from_torch_and_view_torch():
    torch = _torch()
    t = torch.arange(6, dtype=torch.int32)
    x = tilus.from_torch(t)
    assert x.dtype == tilus.int32 and x.shape == [6] and x.data_ptr() == t.data_ptr()
    assert x.torch() is not None and x.numpy().tolist() == list(range(6))
    v = tilus.view_torch(torch.zeros(4, dtype=torch.uint8), dtype=tilus.int4, shape=[8])
    assert v.numpy().tolist() == [0] * 8
    with pytest.raises(ValueError, match=r"int4\[7, 2\] takes 7 bytes, the torch tensor has 4"):
        tilus.view_torch(torch.zeros(4, dtype=torch.uint8), dtype=tilus.int4, shape=[7, 2])


def test_host_tensors_without_torch_say_so():
    if _torch() is not None:
        pytest.skip("torch is installed")
    with pytest.raises(ValueError, match="not stored in torch"):
        tilus.zeros([2], tilus.float32).torch()
    with pytest.raises(RuntimeError, match="needs torch"):
        tilus.zeros([2], tilus.float32, device="cuda")


class AddOne(tilus.Script):
    """y = x + 1 with x read through an untyped pointer (void_p)."""

    def __call__(self, n: int32, x: tilus.void_p, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, 32)]
        self.attrs.warps = 1
        o = self.blockIdx.x * 32
        v = self.load_global(self.global_view(x, dtype=float32, shape=[n]), offsets=[o], shape=[32])
        self.store_global(self.global_view(y, shape=[n]), v + 1.0, offsets=[o])


def _run_with_host_tensors(device):
    n = 70
    x = tilus.rand([n], float32, device=device)
    y = tilus.zeros([n], float32, device=device)
    AddOne()(n, x, y)
    np.testing.assert_allclose(y.numpy(), x.numpy() + 1.0, rtol=1e-6)
    with pytest.raises(tilus.ArgumentError, match=r"points to int32 data \(a tilus.Tensor\), the kernel reads float32"):
        AddOne()(n, x, tilus.zeros([n], int32, device=device))


@needs_cpu
def test_host_tensors_are_kernel_arguments_on_the_cpu():
    _run_with_host_tensors("cpu")


def test_raw_addresses_are_device_addresses(monkeypatch):
    """An int for a pointer parameter is a raw CUDA device address, as NVIDIA Tilus's examples
    pass tensor.data_ptr(): the CPU backend cannot run with one (nor may a GPU launch take host
    arrays), and a bad int is refused before anything runs."""
    n = 40
    y = np.zeros(n, np.float32)
    monkeypatch.setenv("TILUS_TARGET", "cpu")
    with pytest.raises(tilus.ArgumentError, match="CUDA device memory .* TILUS_TARGET=cpu runs the launch on the CPU"):
        AddOne()(n, 1 << 40, 1 << 41)
    with pytest.raises(tilus.ArgumentError, match="mix host and CUDA arrays"):
        AddOne()(n, 1 << 40, y)
    if HAS_GPU:
        monkeypatch.setenv("TILUS_TARGET", "gpu")
        with pytest.raises(tilus.ArgumentError, match="host memory .* TILUS_TARGET=gpu runs the launch on the GPU"):
            AddOne()(n, y, y)
    else:
        monkeypatch.delenv("TILUS_TARGET")
        with pytest.raises(tilus.ArgumentError, match=r"CUDA device memory \(.*\), but no GPU can run it"):
            AddOne()(n, 1 << 40, 1 << 41)
    for bad in (0, -8, 1 << 64):
        with pytest.raises(tilus.ArgumentError, match=r"argument 1 \('x'.*a raw address must be a positive 64-bit"):
            AddOne()(n, bad, 1 << 40)
    with pytest.raises(tilus.ArgumentError, match="or an int address, got str"):
        AddOne()(n, "x", y)
    assert (y == 0).all()


@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
def test_raw_device_addresses_are_size_checked():
    """On the GPU a raw address's extent is the rest of its driver allocation
    (cuMemGetAddressRange): a kernel that would read past it is refused before it runs."""
    torch = _torch()
    if torch is None:
        pytest.skip("torch is not installed")
    n = 100
    x = torch.rand(n, device="cuda")
    y = torch.zeros(n, device="cuda")
    AddOne()(n, x.data_ptr(), y.data_ptr())
    torch.cuda.synchronize()
    assert torch.equal(y, x + 1)
    small = torch.cuda.caching_allocator_alloc(256)  # 64 floats in a segment of at most a few MB
    big = torch.zeros(1 << 24, device="cuda")
    try:
        with pytest.raises(tilus.ArgumentError, match=r"argument 1 \('x'.*the array has [0-9]+ bytes"):
            AddOne()(1 << 24, small, big.data_ptr())
    finally:
        torch.cuda.caching_allocator_delete(small)
    with pytest.raises(tilus.ArgumentError, match=r"argument 1 \('x'\): the address 0x10 is not in a CUDA device"):
        AddOne()(n, 16, y.data_ptr())
    with pytest.raises(tilus.ArgumentError, match="mix host and CUDA arrays"):
        AddOne()(n, x.data_ptr(), np.zeros(n, np.float32))
    torch.cuda.synchronize()


@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
def test_host_tensors_are_kernel_arguments_on_the_gpu():
    _run_with_host_tensors("cuda")
