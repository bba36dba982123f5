"""NVIDIA Tilus's seven Blackwell matmuls (its examples/blackwell_matmul/matmul_v0.py .. v6.py),
unchanged: each traces, compiles for sm_100a (tcgen05 in the PTX, UTC* MMA in the SASS where
cuobjdump is found, no spills, no local memory but the argument buffer of the printf that reports a
failed run-time check) and runs on the CPU backend at ragged sizes,
matching a float64 reference.

The examples are not part of this repository. They are read from $TILUS_NVIDIA_SRC (a checkout of
NVIDIA Tilus, or its git directory), else from the read-only mirror this project is developed
beside; without either the tests skip saying so. pandas and torch, which the examples import for
their own benchmark tables, are stood in for when missing (nothing here calls them)."""
import importlib.util
import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest

import tilus
from tilus.artifacts import _cuobjdump
from tilus.tuning import space_of
from conftest import HAS_CPU, local_memory_uses

MIRROR = "/work/.mirror/NVIDIA+tilus/repo"
VERSIONS = range(7)
# One configuration of each example's autotuning space (the first one unless a test below needs
# another): what its compile and CPU tests use.
CONFIG = {v: 0 for v in VERSIONS}


def _source_of(v):
    """The text of matmul_v{v}.py, or None where no NVIDIA Tilus sources are found."""
    rel = f"examples/blackwell_matmul/matmul_v{v}.py"
    root = os.environ.get("TILUS_NVIDIA_SRC") or MIRROR
    if os.path.isfile(os.path.join(root, rel)):
        with open(os.path.join(root, rel)) as f:
            return f.read()
    if os.path.isdir(root):
        r = subprocess.run(["git", "--git-dir", root, "show", f"HEAD:{rel}"], capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout
    return None


_MODULES = {}


def _example(v, tmp_dir):
    """The example's Script class, its module imported as the example's own `python3 matmul_vN.py`
    would (its `tilus.option.cache_dir("./cache")` kept out of the way: restored after the import)."""
    if v in _MODULES:
        return _MODULES[v]
    text = _source_of(v)
    if text is None:
        pytest.skip("NVIDIA Tilus's sources are not here: set TILUS_NVIDIA_SRC to a checkout of "
                    "https://github.com/NVIDIA/tilus (examples/blackwell_matmul) to run these tests")
    # Stand-ins only while the example is imported (one left in sys.modules breaks torch's own
    # find_spec of it later).
    stand_ins = [n for n in ("pandas", "torch") if n not in sys.modules and importlib.util.find_spec(n) is None]
    for name in stand_ins:
        sys.modules[name] = types.ModuleType(name)
    path = os.path.join(tmp_dir, f"tilus_blackwell_matmul_v{v}.py")
    with open(path, "w") as f:
        f.write(text)
    cache, env = tilus._C.cache_dir(), os.environ.get("TILUS_CACHE_DIR")
    cwd = os.getcwd()
    try:
        os.chdir(tmp_dir)
        spec = importlib.util.spec_from_file_location(f"tilus_blackwell_matmul_v{v}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for name in stand_ins:
            sys.modules.pop(name, None)
        os.chdir(cwd)
        tilus._C.set_cache_dir(cache)
        if env is None:
            os.environ.pop("TILUS_CACHE_DIR", None)
        else:
            os.environ["TILUS_CACHE_DIR"] = env
    classes = [c for n, c in vars(module).items() if n.startswith("BlackwellMatmul") and isinstance(c, type)]
    assert len(classes) == 1, [c.__name__ for c in classes]
    _MODULES[v] = classes[0]
    return classes[0]


@pytest.fixture(scope="module")
def tmp_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tilus_blackwell"))


def _kernel(v, tmp_dir):
    cls = _example(v, tmp_dir)
    configs = space_of(cls, {})
    assert configs, f"matmul_v{v}: an empty autotuning space"
    return cls(**configs[CONFIG[v]]), configs


def _arrays(m, n, k, rng=None):
    if rng is None:
        z = np.zeros
        return m, n, k, z((m, k), np.float16), z((n, k), np.float16), z((m, n), np.float16)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (n, k)).astype(np.float16)
    return m, n, k, a, b, np.full((m, n), 7, np.float16)


@pytest.mark.parametrize("v", VERSIONS)
def test_every_config_traces(v, tmp_dir):
    """Every configuration of the example's autotuning space traces and passes the verifier and
    the passes for sm_100a (a configuration over the shared-memory limit may only be refused with
    a message naming the bytes)."""
    _, configs = _kernel(v, tmp_dir)
    cls = _example(v, tmp_dir)
    args = _arrays(300, 270, 136)
    passed = 0
    for config in configs:
        try:
            cls(**config).ir(*args, arch="sm_100a")
            passed += 1
        except tilus.CompileError as e:
            assert "shared memory" in str(e) and "bytes" in str(e), (config, str(e))
    assert passed > 0, f"matmul_v{v}: no configuration compiles"


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
@pytest.mark.parametrize("v", VERSIONS)
def test_compiles_for_sm100a(v, tmp_dir):
    kernel, _ = _kernel(v, tmp_dir)
    args = _arrays(4096, 4096, 4096)
    ptx = kernel.ptx(*args, arch="sm_100a")
    for want in ("tcgen05.alloc", "tcgen05.mma.cta_group", "tcgen05.commit", "tcgen05.ld.sync.aligned",
                 "tcgen05.dealloc"):
        assert want in ptx, f"matmul_v{v}: {want} not in the PTX"
    g = kernel.compiled(*args, arch="sm_100a")
    assert (g.spill_store_bytes, g.spill_load_bytes) == (0, 0), f"matmul_v{v} spills"
    if _cuobjdump() is None:
        pytest.skip("no cuobjdump: the PTX and the compile were checked, not the SASS")
    sass = kernel.sass(*args, arch="sm_100a")
    assert re.search(r"\bUTC\w*MMA\b", sass), f"matmul_v{v}: no UTC*MMA in the SASS"
    if "clusterlaunchcontrol.try_cancel" in ptx:  # v5, v6: persistent through cluster launch control
        assert "UGETNEXTWORKID" in sass, f"matmul_v{v}: no UGETNEXTWORKID in the SASS"
    assert local_memory_uses(sass) == [], f"matmul_v{v}: local memory in the SASS"


@pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
@pytest.mark.parametrize("v", VERSIONS)
def test_matches_float64_on_the_cpu(v, tmp_dir):
    kernel, _ = _kernel(v, tmp_dir)
    rng = np.random.default_rng(v)
    for m, n, k in ((300, 270, 136), (129, 65, 40)):
        args = _arrays(m, n, k, rng)
        a, b, c = args[3:]
        kernel(*args)
        want = a.astype(np.float64) @ b.astype(np.float64).T
        np.testing.assert_allclose(c.astype(np.float64), want, rtol=1e-2, atol=2e-2,
                                   err_msg=f"matmul_v{v} {m}x{n}x{k}")
