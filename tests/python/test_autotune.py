"""Autotuning without a GPU: spaces and their errors, keys and buckets, the persisted format,
stale entries, and a parallel compile-only tuning of the matmul space with a fake timer."""
import json
import os

import numpy as np
import pytest

import tilus
from tilus import tuning as A
from tilus import float16, float32, int32

from matmul_autotune import AutotunedMatmul


def test_space_is_the_product_and_fixed_arguments_are_not_tuned():
    configs = A.space_of(AutotunedMatmul, {})
    assert len(configs) == 16
    assert {"block_m": 128, "block_n": 128, "warps": 4, "stages": 3} in configs
    fixed = A.space_of(AutotunedMatmul, {"stages": 3})
    assert len(fixed) == 8 and all("stages" not in c for c in fixed)
    assert A.space_of(AutotunedMatmul, {"block_m": 64, "block_n": 64, "warps": 4, "stages": 2}) == [{}]


def test_space_errors_name_the_decorator_line():
    with pytest.raises(tilus.CompileError, match=r"test_autotune.py:\d+: autotune: K.__init__ has no parameter 'bk'"):
        @tilus.autotune("bk", [16, 32])
        class K(tilus.Script):
            def __init__(self, bm):
                super().__init__()
    with pytest.raises(tilus.CompileError, match=r"value \(1, 2, 3\) has 3 entries, expected 2"):
        tilus.autotune("a, b", [(1, 2, 3)])
    with pytest.raises(tilus.CompileError, match="an empty list"):
        tilus.autotune("a", [])
    with pytest.raises(tilus.CompileError, match="already tuned"):
        @tilus.autotune("a", [1])
        @tilus.autotune("a, b", [(1, 2)])
        class K2(tilus.Script):
            def __init__(self, a, b):
                super().__init__()


def test_buckets_and_keys():
    assert [A.bucket(n) for n in (0, 1, 2, 3, 100, 128, 129, 4096)] == [0, 1, 2, 4, 128, 128, 256, 4096]
    env = {"gpu": "H100", "arch": "sm_90a", "driver": 13000, "nvrtc": 13000, "tilus": "0.1.0"}
    from tilus import launch as L
    sig = L._signature(AutotunedMatmul)
    k1 = A.tuning_key(AutotunedMatmul, {}, (True,), [100, 200, 300, 0, 0, 0], sig.params, env)
    k2 = A.tuning_key(AutotunedMatmul, {}, (True,), [128, 129, 300, 0, 0, 0], sig.params, env)
    assert k1["sizes"] == [128, 256, 512] and k2["sizes"] == [128, 256, 512]
    assert A.key_hash(k1) == A.key_hash(k2)
    for part, value in [("gpu", "A100"), ("driver", 12000), ("nvrtc", 12080), ("tilus", "0.2.0")]:
        assert A.key_hash({**k1, part: value}) != A.key_hash(k1)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(tilus._C, "cache_dir", lambda: str(tmp_path))
    return tmp_path


def test_persistence_round_trip_and_stale_entries(cache_dir):
    key = {"format": 1, "script": "m.K", "fixed": {}, "specialization": "()", "sizes": [128], "gpu": "H100",
           "arch": "sm_90a", "driver": 1, "nvrtc": 1, "tilus": "0.1.0"}
    entry = {"key": key, "winner": {"bm": 64}, "results": [{"config": {"bm": 64}, "ms": 1.0}], "compile_s": 0.1,
             "tuning_s": 0.2}
    A.store(entry)
    files = os.listdir(cache_dir / "autotune")
    assert files == [A.key_hash(key) + ".json"]  # no temporary left behind
    assert A.load(key) == entry
    assert A.load({**key, "driver": 2}) is None  # another driver: retune
    path = cache_dir / "autotune" / files[0]
    path.write_text("{ truncated")
    assert A.load(key) is None  # a corrupt entry is ignored (and rewritten by the next tuning)


@pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="NVRTC not available")
def test_parallel_compile_only_tuning_with_a_fake_timer(cache_dir, monkeypatch, capsys):
    timed = []

    def fake_timer(config, repeat):
        timed.append(config)
        return config["block_m"] * 0.01 + config["stages"] * 0.001 + config["warps"] * 0.0001

    monkeypatch.setattr(A.Tuner, "timer", staticmethod(fake_timer))
    monkeypatch.setattr(A.Tuner, "compile_only_arch", "sm_90a")
    m, n, k = 1000, 1000, 1000
    a = np.zeros((m, k), np.float16)
    b = np.zeros((k, n), np.float16)
    c = np.zeros((m, n), np.float16)
    kernel = AutotunedMatmul()
    kernel(m, n, k, a, b, c)
    assert len(timed) == 16
    entries = list((cache_dir / "autotune").iterdir())
    assert len(entries) == 1
    entry = json.loads(entries[0].read_text())
    assert entry["winner"] == {"block_m": 64, "block_n": 64, "warps": 4, "stages": 2}
    assert entry["key"]["sizes"] == [1024, 1024, 1024] and entry["key"]["gpu"] == "compile-only sm_90a"
    assert len(entry["results"]) == 16 and all("ms" in r for r in entry["results"])
    # A new instance (as in a new process) with a size in the same bucket: no tuning.
    timed.clear()
    AutotunedMatmul()(1020, 1000, 999, a, b, c)
    assert timed == []
    report = capsys.readouterr().out
    tilus.autotune_report()
    out = capsys.readouterr().out
    assert "AutotunedMatmul" in out and "* {'block_m': 64" in out


@pytest.mark.skipif(not __import__("conftest").HAS_GPU, reason="no GPU")
def test_autotuned_matmul_on_the_gpu(cache_dir, monkeypatch):
    import torch
    monkeypatch.setenv("TILUS_AUTOTUNE_REPEAT", "2")
    calls = []
    real = A.Tuner.tune

    def spy(self, *a, **k):
        calls.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(A.Tuner, "tune", spy)
    m, n, k = 300, 260, 190
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    AutotunedMatmul()(m, n, k, a, b, c)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)
    assert len(calls) == 1
    c.zero_()
    AutotunedMatmul()(m, n, k, a, b, c)  # a new instance: the persisted winner, no tuning
    assert len(calls) == 1
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)
