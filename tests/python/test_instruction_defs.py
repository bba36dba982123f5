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
              "wgmma": script.WgmmaGroup, "atomic": script.AtomicGroup, "cluster": script._Cluster}
    for d in _C.instruction_defs():
        if d["name"] in ("add", "sum", "slice_shared", "ldg32", "stg32", "get_lane_idx", "shfl_xor", "lock_semaphore",
                         "item", "item_ptr", "mbarrier.expect_tx", "assign"):
            continue  # names of IR nodes that several methods (or a tensor method) record
        owner = tilus.Script if not d["group"] else groups[d["group"]]
        assert hasattr(owner, d["method"]), d["name"]
