"""The instructions' definitions in the C++ core (include/tilus/ir/inst_def.h) as the front end
sees them: every definition has its row in docs/instructions.md, the synchronization traits the
passes read are there, and a definition-driven instruction's Python method is made from its
definition (signature, docstring, errors at the user's line)."""
import os
import re

import pytest

import tilus
from tilus import _C

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def first_cells():
    """The text of the first cell of every table row of docs/instructions.md, and the bold
    headings of the instructions described in a paragraph of their own."""
    cells = []
    with open(os.path.join(ROOT, "docs", "instructions.md")) as f:
        for line in f:
            if line.startswith("| ") and not line.startswith("|---"):
                cells.append(line.split("|")[1])
            elif line.startswith("**`"):
                cells.append(line.split("**")[1])
    return cells


def test_every_definition_has_its_row_in_the_instruction_docs():
    cells = first_cells()
    missing = []
    for d in _C.instruction_defs():
        word = re.compile(r"(?<![\w.])" + re.escape(d["name"]) + r"(?![\w])")
        if not any(word.search(c) for c in cells):
            missing.append(d["name"])
    assert not missing, f"docs/instructions.md has no row for {missing}"


def test_definitions_are_unique_and_grouped():
    defs = _C.instruction_defs()
    names = [d["name"] for d in defs]
    assert len(names) == len(set(names))
    for d in defs:
        assert d["name"] == (f"{d['group']}.{d['method']}" if d["group"] else d["method"])
        assert d["summary"], d["name"]


def test_the_passes_traits_are_in_the_definitions():
    by = {d["name"]: d for d in _C.instruction_defs()}
    assert (by["copy_async_wait_group"]["role"], by["copy_async_wait_group"]["completion"]) == ("wait", "cp.async-group")
    assert (by["tma.commit_group"]["role"], by["tma.commit_group"]["completion"]) == ("commit", "tma-store-group")
    assert by["mbarrier.wait"]["role"] == "barrier-wait"
    assert by["cp_async_barrier_noinc"]["role"] == "hand-over"
    assert by["fence.proxy_async"]["attrs"] == [{"name": "space", "type": "str", "default": "shared",
                                                  "allowed": ["shared", "global"]}]


def test_every_group_method_of_a_definition_exists_on_the_script():
    from tilus import script
    groups = {"mbarrier": script.MbarrierGroup, "tma": script.TmaGroup, "fence": script.FenceGroup,
              "wgmma": script.WgmmaGroup, "atomic": script.AtomicGroup, "cluster": script._Cluster,
              "tcgen05": script.Tcgen05Group, "clc": script.ClcGroup}
    for d in _C.instruction_defs():
        if d["name"] in ("add", "sum", "slice_shared", "ldg32", "stg32", "get_lane_idx", "shfl_xor", "lock_semaphore",
                         "item", "item_ptr", "mbarrier.expect_tx", "assign"):
            continue  # names of IR nodes that several methods (or a tensor method) record
        owner = tilus.Script if not d["group"] else groups[d["group"]]
        assert hasattr(owner, d["method"]), d["name"]


# --- tcgen05_mma_arrive: a definition-driven instruction (seed 004) -------------------------------

import numpy as np  # noqa: E402

from tilus import int32  # noqa: E402

from conftest import HAS_CPU  # noqa: E402


class ArriveThenWait(tilus.Script):
    """Every thread arrives once through tcgen05_mma_arrive on a barrier that expects one arrival
    per thread, then waits on it: the wait completes only if every arrival counted."""

    def __call__(self, out: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        bars = self.mbarrier.alloc(counts=[128])
        self.tcgen05_mma_arrive(bars[0])
        self.mbarrier.wait(bars[0], phase=0)
        self.store_global(self.global_view(out, shape=[128]), self.get_lane_idx() + 1, offsets=[0])


def test_its_method_comes_from_its_definition():
    import inspect
    m = tilus.Script.tcgen05_mma_arrive
    assert list(inspect.signature(m).parameters) == ["self", "mbar"]
    assert "tcgen05" in m.__doc__ and "sm_100" in m.__doc__


class ArriveThenWaitByMbarrier(ArriveThenWait):
    """The same with mbarrier.arrive: the passes must treat both arrivals alike."""

    def tcgen05_mma_arrive(self, mbar):
        self.mbarrier.arrive(mbar)


def test_it_prints_and_the_passes_take_it_as_an_arrival():
    out = np.zeros(128, np.int32)
    stages = ArriveThenWait().ir(out, arch="sm_100a")
    for stage, ir in stages.items():
        assert ir.count("tcgen05_mma_arrive(mbar=bars_1)") == 1, (stage, ir)
    final = list(stages.values())[-1]
    by_mbarrier = list(ArriveThenWaitByMbarrier().ir(out, arch="sm_100a").values())[-1]
    assert final.replace("tcgen05_mma_arrive(mbar=bars_1)", "mbarrier.arrive(barrier=bars_1, count=1)") == \
        by_mbarrier.replace("ArriveThenWaitByMbarrier", "ArriveThenWait")


@pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
def test_it_arrives_once_per_thread_on_the_cpu():
    out = np.zeros(128, np.int32)
    ArriveThenWait()(out)  # a missing arrival would be a CpuCheckError at the wait
    np.testing.assert_array_equal(out, np.arange(128) % 32 + 1)


def test_its_cuda_is_tcgen05_commit_on_sm_100a_and_an_error_before():
    out = np.zeros(128, np.int32)
    src = ArriveThenWait().source(out, arch="sm_100a")
    assert src.count("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64") == 1, src
    with pytest.raises(tilus.CompileError, match=r"tcgen05_mma_arrive needs sm_100 or newer, the target is sm_90a") as e:
        ArriveThenWait().source(out, arch="sm_90a")
    assert "test_instruction_defs.py:" in str(e.value)
    if _C.nvrtc_available():
        assert "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64" in \
            ArriveThenWait().ptx(out, arch="sm_100a")


def test_a_wrong_operand_names_the_instruction_and_the_line():
    class Bad(tilus.Script):
        def __call__(self, out: ~int32):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            s = self.shared_tensor(dtype=int32, shape=[4])
            self.tcgen05_mma_arrive(s)

    with pytest.raises(tilus.CompileError, match=r"tcgen05_mma_arrive: mbar must be a shared tensor of uint64 with 1 "
                                                 r"element .*got shared int32\[4\]") as e:
        Bad().ir(np.zeros(4, np.int32))
    assert "test_instruction_defs.py:" in str(e.value)
