// The copy family through the passes: instruction selection (every slot of the chain, widths,
// coalesced_width, loop_layout, errors), bounds predicates on copy regions, async waits for
// cp.async copies and async_copy, barriers around copies. Each case checks the decision it
// is about and compares the IR before and after the pass with a golden file
// (tests/cpp/golden/copy_passes/<case>.tir; TILUS_UPDATE_GOLDEN=1 rewrites them).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "golden.h"
#include "tilus/codegen/cuda.h"
#include "tilus/ir/functor.h"
#include "tilus/ir/printer.h"
#include "tilus/passes/choose_shared_layouts.h"
#include "tilus/passes/infer_layouts.h"
#include "tilus/passes/keep_wgmma_loops_rolled.h"
#include "tilus/passes/order_thread_groups.h"
#include "tilus/passes/order_wgmma_waits.h"
#include "tilus/tilus.h"

using namespace tilus;

namespace {

// A kernel over a = float16[m, n] and b = float32[m, n] with a body given per test.
struct K : Script {
  static constexpr const char* param_names = "m, n, a, b";
  std::function<void(K&, Int32, Int32, GlobalTensor&, GlobalTensor&)> body;
  int warps = 4;
  Ptr<f16> pa;
  void operator()(Int32 m, Int32 n, Ptr<f16> a, Ptr<f32> b) {
    attrs.blocks = {1};
    attrs.warps = warps;
    pa = a;
    auto ga = global_view(a, {m, n});
    auto gb = global_view(b, {m, n});
    body(*this, m, n, ga, gb);
  }
};

struct Options {
  // sm_86: the vector, cp.async and ldmatrix choices without TMA (the TMA cases name sm_90a).
  std::string arch = "sm_86";
  bool aligned = true;  // pointers 16-byte aligned, m and n multiples of 16 (as jit specializes)
  int warps = 4;
  std::vector<int> ragged = {};  // parameters (0: m, 1: n) left unspecialized when aligned
};

Program traced(std::function<void(K&, Int32, Int32, GlobalTensor&, GlobalTensor&)> body, const Options& o) {
  K k;
  k.body = std::move(body);
  k.warps = o.warps;
  Program p = trace(k);
  if (o.aligned)
    for (int i = 0; i < 4; ++i)
      if (std::find(o.ragged.begin(), o.ragged.end(), i) == o.ragged.end()) p.kernels[0].param_divisibility[i] = 16;
  return p;
}

// The program before and after `pass` in the full pipeline.
struct Stage {
  Program before, after;
  std::string text(const std::string& pass) const {
    return fmt::format("---- before {} ----\n{}---- after ----\n{}", pass, print(before), print(after));
  }
};

Stage run_to(const Program& p, const std::string& pass, const Options& o) {
  Stage s;
  Program last = p;
  PipelineOptions po;
  po.target = o.arch == "cpu" ? Target::cpu() : Target::from_arch(o.arch);
  po.after_pass = [&](const std::string& name, const Program& q) {
    if (name == pass) {
      s.before = last;
      s.after = q;
    }
    last = q;
  };
  run_pipeline(p, po);
  return s;
}

// The instructions of type T in program order.
template <class T>
std::vector<const T*> insts_of(const Program& p) {
  struct Collect : StmtVisitor {
    std::vector<const T*> out;
    void visit_inst(const InstNode& i) override {
      if (auto* c = dynamic_cast<const T*>(&i)) out.push_back(c);
    }
  } c;
  c.visit(p.kernels[0].body);
  return c.out;
}

std::vector<const CopyInst*> copies(const Program& p) { return insts_of<CopyInst>(p); }

// Instruction names in order (waits with n, syncs), for the wait and barrier cases.
std::vector<std::string> sequence(const Program& p) {
  struct Collect : StmtVisitor {
    std::vector<std::string> out;
    void visit_inst(const InstNode& i) override {
      if (auto* w = dynamic_cast<const CopyAsyncWaitGroupInst*>(&i)) out.push_back(fmt::format("wait({})", w->n));
      else if (i.kind() == InstKind::Copy || i.kind() == InstKind::Sync || i.kind() == InstKind::LoadShared ||
               i.kind() == InstKind::CopyAsyncCommitGroup || i.kind() == InstKind::CopyAsyncWaitAll ||
               i.kind() == InstKind::StoreGlobal)
        out.push_back(i.display_name());
    }
  } c;
  c.visit(p.kernels[0].body);
  return c.out;
}

using Seq = std::vector<std::string>;
using Body = std::function<void(K&, Int32, Int32, GlobalTensor&, GlobalTensor&)>;

// Runs a case to `pass`, compares with its golden file and returns the stage.
Stage golden_case(const std::string& name, const std::string& pass, Body body, Options o = {}) {
  Stage s = run_to(traced(std::move(body), o), pass, o);
  EXPECT_TRUE(matches_golden("copy_passes/" + name, s.text(pass)));
  return s;
}

std::string compile_error(Body body, Options o = {}) {
  try {
    run_to(traced(std::move(body), o), "verify", o);
  } catch (const CompileError& e) {
    return e.what();
  }
  return "";
}

const char* kSelect = "select_instructions";

}  // namespace

// --- selection -------------------------------------------------------------------------------

TEST(CopySelection, GlobalToSharedTakesTheWidestVector) {
  auto s = golden_case("simt_widest", kSelect, [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {32, 64});
    k.copy(a.region({0, 0}, {32, 64}), sa);
  });
  auto c = copies(s.after);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]->lowering.op, MachineOp::Simt);
  EXPECT_EQ(c[0]->lowering.vector, 8);  // 16 bytes of float16
  EXPECT_NE(c[0]->lowering.note.find("tma: not legal on this target (sm_86 has no TMA)"), std::string::npos);
  EXPECT_TRUE(copies(s.before)[0]->lowering.defined() == false);
}

TEST(CopySelection, GlobalToSharedIsTmaOnSm90WhenLegal) {
  auto s = golden_case(
      "tma_load", kSelect,
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {32, 64});
        k.copy(a.region({0, 8}, {32, 64}), sa);  // a box starting 16 bytes into the row
      },
      {.arch = "sm_90a"});
  auto c = copies(s.after);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]->lowering.op, MachineOp::TmaLoad);
  EXPECT_EQ(c[0]->lowering.completion, Completion::Synchronous);
  EXPECT_EQ(c[0]->lowering.copy_barrier, 0);
  ASSERT_EQ(s.after.kernels[0].tensor_maps.size(), 1u);
  EXPECT_EQ(s.after.kernels[0].tensor_maps[0].box, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(s.after.kernels[0].tensor_maps[0].swizzle_bytes, 128);
  // Unaligned pointers leave it to cp.async / SIMT, saying why.
  auto u = run_to(traced([](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
                    auto sa = k.shared_tensor(dtypes::float16, {32, 64});
                    k.copy(a.region({0, 0}, {32, 64}), sa);
                  }, {.arch = "sm_90a", .aligned = false}),
                  kSelect, {.arch = "sm_90a", .aligned = false});
  EXPECT_NE(copies(u.after)[0]->lowering.note.find("tma: not legal: the global base pointer is not known to be "
                                                     "16-byte aligned"),
            std::string::npos);
}

// The hardware faults on a box whose first element is not 16-byte aligned: a start 2 float16
// into the row is no TMA box; with use_tma it is a CompileError naming the offset and dtype.
TEST(CopySelection, MisalignedTmaStartIsNotTma) {
  Body body = [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {32, 64});
    k.copy(a.region({0, 2}, {32, 64}), sa);
  };
  auto s = run_to(traced(body, {.arch = "sm_90a"}), kSelect, {.arch = "sm_90a"});
  auto c = copies(s.after);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NE(c[0]->lowering.op, MachineOp::TmaLoad);
  EXPECT_NE(c[0]->lowering.note.find("tma: not legal: the box starts at innermost offset 2, not a multiple of 8 "
                                     "elements of float16 (16 bytes)"),
            std::string::npos)
      << c[0]->lowering.note;
  std::string err = compile_error([](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {32, 64});
    k.copy(a.region({0, 2}, {32, 64}), sa, {.annotations = {{"use_tma", "true"}}});
  }, {.arch = "sm_90a"});
  EXPECT_NE(err.find("test_copy_passes.cpp:"), std::string::npos) << err;
  EXPECT_NE(err.find("copy: use_tma asks for a TMA copy, which is not legal: the box starts at innermost offset 2, not "
                     "a multiple of 8 elements of float16 (16 bytes)"),
            std::string::npos)
      << err;
}

TEST(CopySelection, UnalignedPointerGivesScalarAccessesWithCoalescedThreads) {
  auto s = golden_case(
      "simt_unaligned", kSelect,
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {32, 64});
        k.copy(a.region({0, 0}, {32, 64}), sa);
      },
      {.aligned = false});
  auto c = copies(s.after);
  EXPECT_EQ(c[0]->lowering.vector, 1);
  // Consecutive threads take consecutive elements: one element per thread innermost.
  EXPECT_EQ(c[0]->lowering.mapping.map(1, 0)[1] - c[0]->lowering.mapping.map(0, 0)[1], 1);
  EXPECT_NE(c[0]->lowering.note.find("tma: not legal on this target (sm_86 has no TMA)"), std::string::npos);
}

TEST(CopySelection, OddOffsetLimitsTheVector) {
  auto s = golden_case("simt_odd_offset", kSelect, [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {32, 64});
    k.copy(a.region({0, 2}, {32, 64}), sa);  // 2 elements = 4 bytes past an aligned row
  });
  EXPECT_EQ(copies(s.after)[0]->lowering.vector, 2);
}

TEST(CopySelection, CoalescedWidthForcesANarrowerVector) {
  auto s = golden_case("coalesced_width_narrower", kSelect, [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {32, 64});
    k.copy(a.region({0, 0}, {32, 64}), sa, {.coalesced_width = 2});
  });
  auto c = copies(s.after);
  EXPECT_EQ(c[0]->lowering.vector, 2);
  EXPECT_EQ(c[0]->lowering.mapping.map(1, 0)[1] - c[0]->lowering.mapping.map(0, 0)[1], 2);
  EXPECT_EQ(c[0]->lowering.note.find("coalesced_width"), std::string::npos);
}

TEST(CopySelection, IllegalCoalescedWidthIsClampedWithANote) {
  auto s = golden_case("coalesced_width_clamped", kSelect, [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {32, 64});
    k.copy(a.region({0, 1}, {32, 64}), sa, {.annotations = {{"coalesced_width", "4"}}});
  });
  auto c = copies(s.after);
  EXPECT_EQ(c[0]->lowering.vector, 1);
  EXPECT_EQ(c[0]->coalesced_width, 4);  // the annotation reached the node
  EXPECT_NE(c[0]->lowering.note.find("coalesced_width=4 is not legal here"), std::string::npos) << c[0]->lowering.note;
}

TEST(CopySelection, LoopLayoutPinsTheThreadMapping) {
  RegisterLayout pinned = spatial({32, 4}) * local({1, 16});
  auto s = golden_case("loop_layout", kSelect, [&](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {32, 64});
    k.copy(a.region({0, 0}, {32, 64}), sa, {.loop_layout = pinned});
  });
  auto c = copies(s.after);
  EXPECT_EQ(c[0]->lowering.mapping.str(), pinned.str());
  EXPECT_EQ(c[0]->lowering.vector, 8);  // runs of 16, vectors capped at 16 bytes
}

TEST(CopySelection, ExplicitCpAsync) {
  auto s = golden_case("explicit_cp_async", kSelect, [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {32, 64});
    k.copy(a.region({0, 0}, {32, 64}), sa, {.annotations = {{"use_cp_async", "true"}}});
  });
  auto c = copies(s.after);
  EXPECT_EQ(c[0]->lowering.op, MachineOp::CpAsyncCg);  // 16 bytes
  EXPECT_EQ(c[0]->lowering.completion, Completion::CpAsyncGroup);
  EXPECT_TRUE(c[0]->lowering.commits_group);
  EXPECT_EQ(c[0]->lowering.vector, 8);
}

TEST(CopySelection, ExplicitCpAsyncBelowFourBytesFallsBackToElements) {
  auto s = golden_case(
      "explicit_cp_async_elements", kSelect,
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {32, 64});
        k.copy(a.region({0, 0}, {32, 64}), sa, {.annotations = {{"use_cp_async", "1"}}});
      },
      {.aligned = false});
  auto c = copies(s.after);
  // Element by element is synchronous: no group of its own, nothing for a wait to cover.
  EXPECT_EQ(c[0]->lowering.op, MachineOp::Simt);
  EXPECT_EQ(c[0]->lowering.completion, Completion::Synchronous);
  EXPECT_FALSE(c[0]->lowering.commits_group);
  EXPECT_EQ(c[0]->lowering.vector, 1);
  EXPECT_NE(c[0]->lowering.note.find("element by element"), std::string::npos);
}

TEST(CopySelection, DisableTmaLeavesNoTmaNote) {
  auto s = golden_case("disable_tma", kSelect, [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {32, 64});
    k.copy(a.region({0, 0}, {32, 64}), sa, {.disable_tma = true});
  });
  EXPECT_EQ(copies(s.after)[0]->lowering.note, "");
}

TEST(CopySelection, Sm80HasNoTma) {
  auto s = golden_case(
      "sm80_no_tma", kSelect,
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {32, 64});
        k.copy(sa, a.region({0, 0}, {32, 64}));
      },
      {.arch = "sm_80"});
  EXPECT_NE(copies(s.after)[0]->lowering.note.find("sm_80 has no TMA"), std::string::npos);
}

TEST(CopySelection, SharedToFragmentsIsLdmatrix) {
  auto s = golden_case("ldmatrix", kSelect, [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor& b) {
    auto sa = k.shared_tensor(dtypes::float16, {64, 32});
    auto sb = k.shared_tensor(dtypes::float16, {32, 64});
    auto ra = k.register_tensor(dtypes::float16, {64, 32});
    auto rb = k.register_tensor(dtypes::float16, {32, 64});
    k.copy(sa, ra);
    k.copy(sb, rb);
    auto acc = k.dot(ra, rb);
    k.copy(acc, b.region({0, 0}, {64, 64}));
  });
  auto c = copies(s.after);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0]->lowering.op, MachineOp::Ldmatrix);
  EXPECT_EQ(c[1]->lowering.op, MachineOp::Ldmatrix);  // .trans: b's fragments run down the columns
  EXPECT_EQ(c[2]->lowering.op, MachineOp::Simt);
  EXPECT_EQ(c[2]->lowering.vector, 2);  // the accumulator fragment holds pairs of columns
}

TEST(CopySelection, FragmentsToSharedIsStmatrixOnSm90Only) {
  Body body = [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto ra = k.register_tensor(dtypes::float16, {64, 16});
    auto rb = k.register_tensor(dtypes::float16, {16, 64});
    k.copy(a.region({0, 0}, {64, 16}), ra);
    k.copy(a.region({0, 0}, {16, 64}), rb);
    auto acc = k.dot(ra, rb, {}, {.acc_dtype = dtypes::float16});
    auto sc = k.shared_tensor(dtypes::float16, {64, 64});
    k.copy(acc, sc);
  };
  auto s90 = golden_case("stmatrix_sm90", kSelect, body, {.arch = "sm_90a"});
  auto s80 = golden_case("stmatrix_sm80", kSelect, body, {.arch = "sm_80"});
  EXPECT_EQ(copies(s90.after).back()->lowering.op, MachineOp::Stmatrix);
  EXPECT_EQ(copies(s80.after).back()->lowering.op, MachineOp::Simt);
}

// The Hopper epilogues store the accumulator as [rows, boxes, box] into shared boxes seen as
// [rows, boxes, box] (a permuted [boxes, rows, box] tile): stmatrix in the (rows, box) plane.
TEST(CopySelection, FragmentsToAThreeDimensionalSharedViewAreStmatrix) {
  auto s = golden_case("stmatrix_3d", kSelect, [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto ra = k.register_tensor(dtypes::float16, {64, 16});
    auto rb = k.register_tensor(dtypes::float16, {16, 64});
    k.copy(a.region({0, 0}, {64, 16}), ra);
    k.copy(a.region({0, 0}, {16, 64}), rb);
    auto acc = k.dot(ra, rb, {}, {.acc_dtype = dtypes::float16});
    auto sc = k.shared_tensor(dtypes::float16, {2, 64, 32});
    k.copy(k.reshape(acc, {64, 2, 32}), sc.permute({1, 0, 2}));
  }, {.arch = "sm_90a"});
  const Lowering& l = copies(s.after).back()->lowering;
  EXPECT_EQ(l.op, MachineOp::Stmatrix);
  EXPECT_EQ(l.matrix_cdim, 2);
  EXPECT_EQ(l.matrix_rdim, 0);
}

// --- stores of mma accumulators: the lane exchange ---------------------------------------------

namespace {

std::vector<const StoreGlobalInst*> stores(const Program& p) { return insts_of<StoreGlobalInst>(p); }

// c = a[0:64, 0:16] @ a[0:16, 0:64] as mma fragments (pairs of columns per thread), stored into a
// as float16 (or float32 into b), from all threads or, `divergent`, inside a branch on the thread.
Body accumulator_store(bool to_f16 = true, bool divergent = false) {
  return [=](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor& b) {
    auto ra = k.register_tensor(dtypes::float16, {64, 16});
    auto rb = k.register_tensor(dtypes::float16, {16, 64});
    k.copy(a.region({0, 0}, {64, 16}), ra);
    k.copy(a.region({0, 0}, {16, 64}), rb);
    auto acc = k.dot(ra, rb);
    auto store = [&] {
      if (to_f16) k.store_global(a, k.cast(acc, dtypes::float16), {.offsets = {0, 0}});
      else k.store_global(b, acc, {.offsets = {0, 0}});
    };
    if (divergent) k.if_(Expr(builtin::thread_idx()) < 64, store);
    else store();
  };
}

// The CUDA source of the whole pipeline's output.
std::string cuda_of(Body body, const Options& o) {
  PipelineOptions po;
  po.target = Target::from_arch(o.arch);
  return emit_cuda(run_pipeline(traced(std::move(body), o), po).kernels[0], po.target).source;
}

}  // namespace

// Each lane holds pairs of float16 columns (4 bytes): a quad of lanes covers 16 bytes of a row,
// half of each 32-byte sector a warp-wide store touches. The quad transposes 4 x 4 blocks of
// pairs first, and each lane stores 8 contiguous columns: 16-byte vectors, whole sectors.
TEST(CopySelection, AccumulatorStoresTradePairsBetweenLanesForSixteenByteVectors) {
  auto s = golden_case("store_lane_exchange", kSelect, accumulator_store(), {.arch = "sm_90a"});
  ASSERT_EQ(stores(s.after).size(), 1u);
  const Lowering& l = stores(s.after)[0]->lowering;
  EXPECT_EQ(l.op, MachineOp::Simt);
  EXPECT_EQ(l.vector, 8);
  EXPECT_EQ(l.exchange.lanes, 4);
  EXPECT_EQ(l.exchange.lane_stride, 1);
  EXPECT_EQ(l.exchange.unit, 2);
  EXPECT_EQ(lane_exchange_problem(stores(s.after)[0]->src->layout, l), "");
  EXPECT_NO_THROW(verify(s.after, {.require_layouts = true}));
  // The emitter trades the words, then stores 16 bytes at a time.
  std::string cuda = cuda_of(accumulator_store(), {.arch = "sm_90a"});
  EXPECT_NE(cuda.find("tilus::transpose_lanes<4, 1>"), std::string::npos);
  EXPECT_NE(cuda.find("tilus::store_vec<16>"), std::string::npos);
  // The same for a copy from registers to global memory, unless its width is forced.
  for (int64_t width : {0, 2}) {
    Body copy_out = [width](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
      auto ra = k.register_tensor(dtypes::float16, {64, 16});
      auto rb = k.register_tensor(dtypes::float16, {16, 64});
      k.copy(a.region({0, 0}, {64, 16}), ra);
      k.copy(a.region({0, 0}, {16, 64}), rb);
      auto acc = k.cast(k.dot(ra, rb), dtypes::float16);
      CopyOptions o;
      if (width) o.coalesced_width = width;
      k.copy(acc, a.region({0, 0}, {64, 64}), o);
    };
    auto c = run_to(traced(copy_out, {.arch = "sm_90a"}), kSelect, {.arch = "sm_90a"});
    const Lowering& cl = copies(c.after).back()->lowering;
    EXPECT_EQ(cl.exchange.defined(), width == 0) << cl.str();
    EXPECT_EQ(cl.vector, width == 0 ? 8 : 2) << cl.str();
    EXPECT_NO_THROW(verify(c.after, {.require_layouts = true}));
    std::string text = cuda_of(copy_out, {.arch = "sm_90a"});
    EXPECT_EQ(text.find("tilus::transpose_lanes<4, 1>") != std::string::npos, width == 0);
  }
}

TEST(CopySelection, LaneExchangeKeepsPerVectorPredicatesOnRaggedEnds) {
  // Ragged rows: every vector lies in one row, the exchange stays, each vector checks its row.
  auto rows = run_to(traced(accumulator_store(), {.arch = "sm_90a", .ragged = {0}}), kSelect, {.arch = "sm_90a"});
  EXPECT_TRUE(stores(rows.after)[0]->lowering.exchange.defined());
  EXPECT_EQ(stores(rows.after)[0]->lowering.vector, 8);
  EXPECT_NE(cuda_of(accumulator_store(), {.arch = "sm_90a", .ragged = {0}}).find("tilus::transpose_lanes"),
            std::string::npos);
  // A ragged end of the columns (n not known to be a multiple of 8): a 16-byte vector could
  // straddle it, the pairs cannot; no exchange.
  auto cols = run_to(traced(accumulator_store(), {.arch = "sm_90a", .ragged = {1}}), kSelect, {.arch = "sm_90a"});
  EXPECT_FALSE(stores(cols.after)[0]->lowering.exchange.defined());
  EXPECT_LE(stores(cols.after)[0]->lowering.vector, 2);
}

TEST(CopySelection, NoLaneExchangeWhereItCannotHelpOrCouldHang) {
  // float32 pairs: a quad covers a whole sector already.
  auto f32 = run_to(traced(accumulator_store(false), {.arch = "sm_90a"}), kSelect, {.arch = "sm_90a"});
  EXPECT_FALSE(stores(f32.after)[0]->lowering.exchange.defined());
  EXPECT_EQ(stores(f32.after)[0]->lowering.vector, 2);
  // Inside a branch on the thread index the shuffles could wait for lanes that never come.
  auto branch = run_to(traced(accumulator_store(true, true), {.arch = "sm_90a"}), kSelect, {.arch = "sm_90a"});
  EXPECT_FALSE(stores(branch.after)[0]->lowering.exchange.defined());
  EXPECT_EQ(stores(branch.after)[0]->lowering.vector, 2);
  // The CPU backend runs tiles, not lanes.
  auto cpu = run_to(traced(accumulator_store(), {.arch = "cpu"}), kSelect, {.arch = "cpu"});
  EXPECT_FALSE(stores(cpu.after)[0]->lowering.exchange.defined());
}

TEST(CopySelection, TheVerifierChecksALaneExchangeAgainstTheLayouts) {
  auto s = run_to(traced(accumulator_store(), {.arch = "sm_90a"}), kSelect, {.arch = "sm_90a"});
  struct Tamper : StmtMutator {
    Stmt mutate_inst(const Stmt& st, const Inst& inst) override {
      if (inst->kind() != InstKind::StoreGlobal) return st;
      auto c = inst->clone();
      std::swap(c->lowering.exchange.dst[0], c->lowering.exchange.dst[1]);
      return make_inst_stmt(c);
    }
  } tamper;
  Program bad = s.after;
  bad.kernels[0] = tamper.mutate(bad.kernels[0]);
  try {
    verify(bad, {.require_layouts = true});
    ADD_FAILURE() << "a lane exchange that misplaces units passed the verifier";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("store_global"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("the lane exchange of its lowering"), std::string::npos) << e.what();
  }
}

TEST(CopySelection, CoalescedWidthOrLoopLayoutSkipsLdmatrix) {
  auto s = golden_case("ldmatrix_skipped", kSelect, [](K& k, Int32, Int32, GlobalTensor&, GlobalTensor& b) {
    auto sa = k.shared_tensor(dtypes::float16, {64, 32});
    auto sb = k.shared_tensor(dtypes::float16, {32, 64});
    auto ra = k.register_tensor(dtypes::float16, {64, 32});
    auto rb = k.register_tensor(dtypes::float16, {32, 64});
    k.copy(sa, ra, {.coalesced_width = 2});
    k.copy(sb, rb);
    k.copy(k.dot(ra, rb), b.region({0, 0}, {64, 64}));
  });
  auto c = copies(s.after);
  EXPECT_EQ(c[0]->lowering.op, MachineOp::Simt);
  EXPECT_EQ(c[0]->lowering.vector, 2);
  EXPECT_EQ(c[1]->lowering.op, MachineOp::Ldmatrix);
}

TEST(CopySelection, ScalarCopyIsOneElement) {
  auto s = golden_case("scalar", kSelect, [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {4, 8});
    k.copy(a.at({3, 5}), sa.at({1, 2}));
  });
  auto c = copies(s.after);
  EXPECT_TRUE(c[0]->scalar);
  EXPECT_EQ(c[0]->lowering.vector, 1);
  EXPECT_EQ(c[0]->lowering.mapping.local_size(), 1);
}

TEST(CopySelection, LowerRankSourceBroadcastsAlongTheMissingDims) {
  auto s = golden_case("broadcast_rows", kSelect, [](K& k, Int32, Int32 n, GlobalTensor&, GlobalTensor&) {
    auto row = k.global_view(k.pa, {n});
    auto sa = k.shared_tensor(dtypes::float16, {32, 64});
    k.copy(row.region({0}, {64}), sa);
  });
  auto c = copies(s.after);
  EXPECT_EQ(c[0]->lowering.vector, 8);
  EXPECT_EQ(c[0]->src.extents.size(), 1u);
}

TEST(CopySelection, PermutedCopyAsyncDimsGiveScalarVectors) {
  auto s = golden_case("copy_async_permuted", kSelect, [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {32, 64});
    k.copy_async(a, sa, {.offsets = {0, 0}, .dims = {1, 0}});
    auto sb = k.shared_tensor(dtypes::float16, {32, 64});
    k.copy_async(a, sb, {.offsets = {0, 0}, .evict = "evict_first"});
  });
  std::vector<int64_t> vectors;
  struct Collect : StmtVisitor {
    std::vector<int64_t>* out;
    void visit_inst(const InstNode& i) override {
      if (auto* c = dynamic_cast<const CopyAsyncInst*>(&i)) out->push_back(c->lowering.vector);
    }
  } c;
  c.out = &vectors;
  c.visit(s.after.kernels[0].body);
  EXPECT_EQ(vectors, (std::vector<int64_t>{1, 8}));
}

TEST(CopySelection, Errors) {
  // Explicit TMA where it cannot be: no TMA on the target, or a box TMA cannot move.
  std::string t = compile_error(
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {32, 64});
        k.copy(a.region({0, 0}, {32, 64}), sa, {.annotations = {{"use_tma", "true"}}});
      },
      {.arch = "sm_80"});
  EXPECT_NE(t.find("copy: use_tma asks for a TMA copy, which is not legal on this target (sm_80 has no TMA)"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("test_copy_passes.cpp"), std::string::npos) << t;
  EXPECT_NE(t.find("global float16[m, n]"), std::string::npos) << t;
  t = compile_error(
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {4, 512});
        k.copy(a.region({0, 0}, {4, 512}), sa, {.annotations = {{"use_tma", "true"}}});
      },
      {.arch = "sm_90a"});
  EXPECT_NE(t.find("use_tma asks for a TMA copy, which is not legal: box extent 512 of dim 1 exceeds 256"),
            std::string::npos)
      << t;
  // cp.async only goes global -> shared.
  std::string m = compile_error([](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {32, 64});
    k.copy(sa, a.region({0, 0}, {32, 64}), {.annotations = {{"use_cp_async", "true"}}});
  });
  EXPECT_NE(m.find("cp.async copies global to shared memory"), std::string::npos) << m;
  m = compile_error([](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {32, 64});
    k.async_copy(sa, a.region({0, 0}, {32, 64}));
  });
  EXPECT_NE(m.find("async_copy: cp.async copies global to shared memory"), std::string::npos) << m;
  // Typos in annotations are not silently ignored.
  m = compile_error([](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {32, 64});
    k.copy(a.region({0, 0}, {32, 64}), sa, {.annotations = {{"coalesced_widht", "4"}}});
  });
  EXPECT_NE(m.find("unknown annotation 'coalesced_widht'"), std::string::npos) << m;
  // Memory-to-memory copies need constant extents.
  m = compile_error([](K& k, Int32 mm, Int32, GlobalTensor& a, GlobalTensor&) {
    k.copy(a.region({0, 0}, {mm, 64}), a.region({0, 64}, {mm, 64}));
  });
  EXPECT_NE(m.find("memory-to-memory copies need constant extents"), std::string::npos) << m;
  // A loop layout cannot remap a register tensor.
  m = compile_error([](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto r = k.register_tensor(dtypes::float16, {32, 64});
    k.copy(a.region({0, 0}, {32, 64}), r, {.loop_layout = spatial({32, 4}) * local({1, 16})});
    k.copy(r, a.region({32, 0}, {32, 64}));
  });
  EXPECT_NE(m.find("loop_layout maps the threads of memory-to-memory copies"), std::string::npos) << m;
  // Source dims that the destination lacks must be single elements.
  m = compile_error([](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {64});
    k.copy(a.region({0, 0}, {2, 64}), sa);
  });
  EXPECT_NE(m.find("the leading src extents that dst does not have must be 1"), std::string::npos) << m;
}

// --- bounds predicates ---------------------------------------------------------------------------

TEST(CopyBounds, RegionsGetTheirOwnCheckedDims) {
  auto s = golden_case("bounds_global_to_global", "insert_bounds_predicates",
                       [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
                         // Rows from a runtime offset; columns [0, 32) of n >= 16... unknown.
                         k.copy(a.region({k.blockIdx.x * 16, 0}, {16, 32}), a.region({0, 32}, {16, 32}));
                       });
  auto c = copies(s.after);
  ASSERT_TRUE(c[0]->src.checked_dims && c[0]->dst.checked_dims);
  EXPECT_EQ(*c[0]->src.checked_dims, (std::vector<int>{0, 1}));
  EXPECT_EQ(*c[0]->dst.checked_dims, (std::vector<int>{0, 1}));
}

TEST(CopyBounds, LoopStepProvesTheInnerDim) {
  auto s = golden_case("bounds_loop_step", "insert_bounds_predicates",
                       [](K& k, Int32, Int32 n, GlobalTensor& a, GlobalTensor&) {
                         auto sa = k.shared_tensor(dtypes::float16, {16, 32});
                         for (Expr k0 : k.range(0, n, 32)) {
                           k.copy(a.region({0, k0}, {16, 32}), sa);
                           k.sync();
                         }
                       });
  auto c = copies(s.after);
  ASSERT_TRUE(c[0]->src.checked_dims);
  // n % 16 == 0 only: a step of 32 is not proven, the row dim neither (m unknown).
  EXPECT_EQ(*c[0]->src.checked_dims, (std::vector<int>{0, 1}));
}

TEST(CopyBounds, SharedAndRegisterEndsHaveNoChecks) {
  auto s = golden_case("bounds_shared_only", "insert_bounds_predicates",
                       [](K& k, Int32, Int32, GlobalTensor&, GlobalTensor& b) {
                         auto sa = k.shared_tensor(dtypes::float32, {16, 32});
                         auto r = k.register_tensor(dtypes::float32, {16, 32});
                         k.copy(sa, r);
                         k.store_global(b, r, {.offsets = {0, 0}});
                       });
  auto c = copies(s.after);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0]->src.checked_dims);
  EXPECT_FALSE(c[0]->dst.checked_dims);
}

// --- async waits -------------------------------------------------------------------------------

TEST(CopyAsyncWaits, CpAsyncCopyIsWaitedBeforeItsRead) {
  auto s = golden_case("waits_cp_async_copy", "insert_async_waits",
                       [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
                         auto sa = k.shared_tensor(dtypes::float16, {32, 64});
                         k.copy(a.region({0, 0}, {32, 64}), sa, {.annotations = {{"use_cp_async", "true"}}});
                         auto r = k.register_tensor(dtypes::float16, {32, 64});
                         k.copy(sa, r);
                         k.copy(r, a.region({32, 0}, {32, 64}));
                       });
  // The cp.async copy commits its own group; the read waits for it.
  EXPECT_EQ(sequence(s.after), (Seq{"copy", "wait(0)", "copy", "copy"}));
}

TEST(CopyAsyncWaits, PipelinedCpAsyncCopiesKeepStagesInFlight) {
  auto s = golden_case("waits_cp_async_pipeline", "insert_async_waits",
                       [](K& k, Int32, Int32 n, GlobalTensor& a, GlobalTensor& b) {
                         auto sa = k.shared_tensor(dtypes::float16, {3, 16, 64});
                         for (int st = 0; st < 2; ++st)
                           k.copy(a.region({0, st * 64}, {16, 64}), sa[st],
                                  {.annotations = {{"use_cp_async", "true"}}});
                         for (Expr i : k.range(n)) {
                           k.copy(a.region({0, (i + 2) * 64}, {16, 64}), sa[(i + 2) % 3],
                                  {.annotations = {{"use_cp_async", "true"}}});
                           auto r = k.register_tensor(dtypes::float16, {16, 64});
                           k.copy(sa[i % 3], r);
                           k.copy(r, a.region({16, i * 64}, {16, 64}));
                         }
                         (void)b;
                       });
  std::vector<std::string> waits;
  for (auto& x : sequence(s.after))
    if (x.rfind("wait", 0) == 0) waits.push_back(x);
  ASSERT_FALSE(waits.empty());
  for (auto& w : waits) EXPECT_EQ(w, "wait(2)");
}

TEST(CopyAsyncWaits, ACopyStillLandingInBytesAnotherTensorReusesIsWaited) {
  // The loop's last prefetch (predicated off past k, but a cp.async still zero-fills) is in
  // flight after the loop; the planner puts `out` on the pipeline buffer's bytes, so the write
  // of `out` waits for every group first (a per-tensor analysis would see no hazard).
  auto cp = CopyOptions{.annotations = {{"use_cp_async", "true"}}};
  auto s = golden_case("waits_reused_bytes", "insert_async_waits",
                       [&](K& k, Int32, Int32 n, GlobalTensor& a, GlobalTensor&) {
                         auto sa = k.shared_tensor(dtypes::float16, {2, 16, 64});
                         k.copy(a.region({0, 0}, {16, 64}), sa[0], cp);
                         for (Expr i : k.range(n)) {
                           k.copy(a.region({0, (i + 1) * 64}, {16, 64}), sa[(i + 1) % 2], cp);
                           auto r = k.register_tensor(dtypes::float16, {16, 64});
                           k.copy(sa[i % 2], r);
                           k.copy(r, a.region({16, i * 64}, {16, 64}));
                         }
                         auto out = k.shared_tensor(dtypes::float16, {16, 64});
                         auto g = k.register_tensor(dtypes::float16, {16, 64});
                         k.copy(a.region({32, 0}, {16, 64}), g);
                         k.copy(g, out);
                         auto r = k.register_tensor(dtypes::float16, {16, 64});
                         k.copy(out, r);
                         k.copy(r, a.region({48, 0}, {16, 64}));
                       });
  Seq seq = sequence(s.after);
  // after the loop: the global load into g, then wait(0), then the write of `out`
  auto last = std::find(seq.rbegin(), seq.rend(), "wait(0)");
  ASSERT_NE(last, seq.rend()) << fmt::format("{}", fmt::join(seq, " "));
  Seq tail(last.base() - 1, seq.end());
  EXPECT_EQ(tail, (Seq{"wait(0)", "copy", "copy", "copy"})) << fmt::format("{}", fmt::join(seq, " "));
  EXPECT_NE(print(s.after).find("shared_tensor(offset=0) : shared float16[16, 64]"), std::string::npos);
}

TEST(CopyAsyncWaits, AsyncCopyWithoutAWaitIsAnError) {
  std::string m;
  try {
    run_to(traced(
               [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
                 auto sa = k.shared_tensor(dtypes::float16, {32, 64});
                 k.async_copy(a.region({0, 0}, {32, 64}), sa);
                 auto r = k.register_tensor(dtypes::float16, {32, 64});
                 k.copy(sa, r);
                 k.copy(r, a.region({32, 0}, {32, 64}));
               },
               {}),
           "insert_async_waits", {});
  } catch (const CompileError& e) {
    m = e.what();
  }
  EXPECT_NE(m.find("copy at"), std::string::npos) << m;
  EXPECT_NE(m.find("async_copy at"), std::string::npos) << m;
  EXPECT_NE(m.find("async_copy leaves the wait to the kernel"), std::string::npos) << m;
}

TEST(CopyAsyncWaits, AsyncCopyWithTheKernelsWaitGetsNothingAdded) {
  auto s = golden_case("waits_async_copy_user_wait", "insert_async_waits",
                       [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
                         auto sa = k.shared_tensor(dtypes::float16, {32, 64});
                         auto sb = k.shared_tensor(dtypes::float16, {32, 64});
                         k.async_copy(a.region({0, 0}, {32, 64}), sa);
                         k.async_copy(a.region({32, 0}, {32, 64}), sb);
                         k.copy_async_wait_group(1);  // sa's group is done, sb's may not be
                         auto r = k.register_tensor(dtypes::float16, {32, 64});
                         k.copy(sa, r);
                         k.copy_async_wait_all();
                         k.copy(sb, r);
                         k.copy(r, a.region({64, 0}, {32, 64}));
                       });
  EXPECT_EQ(print(s.before), print(s.after));
}

// --- barriers ---------------------------------------------------------------------------------

TEST(CopyBarriers, CopyIntoSharedThenReadByOtherThreadsGetsASync) {
  auto s = golden_case("barrier_after_copy", "insert_barriers", [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {64, 32});
    k.copy(a.region({0, 0}, {64, 32}), sa);
    auto r = k.register_tensor(dtypes::float16, {32, 64});
    k.copy(k.shared_tensor(dtypes::float16, {32, 64}), r);  // unrelated tensor: no hazard
    auto t = k.transpose(k.load_shared(sa));
    k.store_global(a, t, {.offsets = {0, 0}});
  });
  int syncs = 0;
  for (auto& x : sequence(s.after)) syncs += x == "sync";
  EXPECT_EQ(syncs, 1);
}

TEST(CopyBarriers, DisjointRegionsOfOneTensorNeedNoBarrier) {
  auto s = golden_case("barrier_disjoint_regions", "insert_barriers",
                       [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
                         auto sa = k.shared_tensor(dtypes::float16, {64, 64});
                         k.copy(a.region({0, 0}, {32, 64}), sa.region({0, 0}, {32, 64}));
                         k.copy(sa.region({32, 0}, {32, 64}), a.region({32, 0}, {32, 64}));
                       });
  for (auto& x : sequence(s.after)) EXPECT_NE(x, "sync");
}

TEST(CopyBarriers, OverlappingRegionsNeedOne) {
  auto s = golden_case("barrier_overlapping_regions", "insert_barriers",
                       [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
                         auto sa = k.shared_tensor(dtypes::float16, {64, 64});
                         k.copy(a.region({0, 0}, {32, 64}), sa.region({0, 0}, {32, 64}));
                         k.copy(sa.region({16, 0}, {32, 64}), a.region({32, 0}, {32, 64}));
                       });
  int syncs = 0;
  for (auto& x : sequence(s.after)) syncs += x == "sync";
  EXPECT_EQ(syncs, 1);
}

// --- mbarriers and TMA ---------------------------------------------------------------------------

namespace {
// Every instruction's name, in order (views and allocations left out).
std::vector<std::string> names(const Program& p) {
  struct Collect : StmtVisitor {
    std::vector<std::string> out;
    void visit_inst(const InstNode& i) override {
      if (i.kind() != InstKind::SliceShared && i.kind() != InstKind::AllocateShared &&
          i.kind() != InstKind::GlobalView && i.kind() != InstKind::AllocateRegister)
        out.push_back(i.display_name());
    }
  } c;
  c.visit(p.kernels[0].body);
  return c.out;
}

std::string pass_error(Body body, const std::string& pass, Options o) {
  try {
    run_to(traced(std::move(body), o), pass, o);
  } catch (const CompileError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(TmaPasses, StoreOfGenericWritesGetsAFenceAndABarrier) {
  auto s = golden_case(
      "tma_store_fence", "insert_barriers",
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {32, 64});
        k.store_shared(sa, k.register_tensor(dtypes::float16, {32, 64}, 1.0));
        k.tma.shared_to_global(sa, a, {.offsets = {0, 0}});
        k.tma.commit_group();
        k.tma.wait_group(0);
      },
      {.arch = "sm_90a"});
  EXPECT_EQ(names(s.after), (std::vector<std::string>{"store_shared", "fence.proxy_async", "sync",
                                                      "tma.shared_to_global", "tma.commit_group", "tma.wait_group"}));
}

// One thread issues the store of what every thread wrote: the writers fence before the barrier
// that hands their writes to it; its wait for the store's read is seen by the other threads only
// after a barrier, before they write the tile again.
TEST(TmaPasses, StoreIssuedByOneThreadFencesInTheWritersAndItsWaitGetsABarrier) {
  auto s = golden_case(
      "tma_store_one_thread", "insert_barriers",
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {32, 64});
        k.store_shared(sa, k.register_tensor(dtypes::float16, {32, 64}, 1.0));
        k.single_thread([&] {
          k.tma.shared_to_global(sa, a, {.offsets = {0, 0}});
          k.tma.commit_group();
        });
        k.single_thread([&] { k.tma.wait_group(0, true); });
        k.store_shared(sa, k.register_tensor(dtypes::float16, {32, 64}, 2.0));
      },
      {.arch = "sm_90a"});
  EXPECT_EQ(names(s.after), (std::vector<std::string>{"store_shared", "fence.proxy_async", "sync",
                                                      "tma.shared_to_global", "tma.commit_group", "tma.wait_group",
                                                      "sync", "store_shared"}));
}

TEST(TmaPasses, LoadWaitedForByTheReadersNeedsNoBarrier) {
  auto s = golden_case(
      "tma_load_wait", "insert_barriers",
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {32, 64});
        auto bars = k.mbarrier.alloc({1});
        k.single_thread([&] {
          k.mbarrier.arrive_and_expect_tx(bars[0], 32 * 64 * 2);
          k.tma.global_to_shared(a, sa, {.offsets = {0, 0}}, bars[0]);
        });
        k.mbarrier.wait(bars[0], MbarrierGroup::consumer_initial_phase);
        k.store_global(a, k.load_shared(sa), {.offsets = {32, 0}});
      },
      {.arch = "sm_90a"});
  // One barrier: after the barriers' initialization (by one thread), before their first use.
  EXPECT_EQ(names(s.after), (std::vector<std::string>{"mbarrier.alloc", "sync", "mbarrier.arrive_and_expect_tx",
                                                      "tma.global_to_shared", "mbarrier.wait", "load_shared",
                                                      "store_global"}));
}

TEST(TmaPasses, ReadWithoutTheWaitNamesBothLines) {
  std::string m = pass_error(
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {32, 64});
        auto bars = k.mbarrier.alloc({1});
        k.single_thread([&] { k.tma_copy(a.region({0, 0}, {32, 64}), sa, {.barrier = bars[0]}); });
        k.store_global(a, k.load_shared(sa), {.offsets = {32, 0}});
      },
      "insert_async_waits", {.arch = "sm_90a"});
  EXPECT_NE(m.find("load_shared at"), std::string::npos) << m;
  EXPECT_NE(m.find("tma_copy at"), std::string::npos) << m;
  EXPECT_NE(m.find("completes on its mbarrier: wait on it"), std::string::npos) << m;
}

TEST(TmaPasses, WriteOfAStoresSourceBeforeItsWaitIsAnError) {
  std::string m = pass_error(
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {32, 64});
        k.tma.shared_to_global(sa, a, {.offsets = {0, 0}});
        k.tma.commit_group();
        k.store_shared(sa, k.register_tensor(dtypes::float16, {32, 64}, 1.0));
      },
      "insert_async_waits", {.arch = "sm_90a"});
  EXPECT_NE(m.find("store_shared at"), std::string::npos) << m;
  EXPECT_NE(m.find("may still be reading"), std::string::npos) << m;
  EXPECT_NE(m.find("tma.wait_group(0, read=True)"), std::string::npos) << m;
}

TEST(TmaPasses, AWaitNothingArrivesAtIsAnError) {
  std::string m = pass_error(
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto bars = k.mbarrier.alloc({1, 1});
        k.mbarrier.expect_tx(bars[0], 16);
        k.mbarrier.wait(bars[1], 0);
      },
      "insert_async_waits", {.arch = "sm_90a"});
  EXPECT_NE(m.find("mbarrier.wait at"), std::string::npos) << m;
  EXPECT_NE(m.find("that nothing in the kernel arrives at"), std::string::npos) << m;
}

// --- wgmma -----------------------------------------------------------------------------------------

namespace {
// acc = a @ b (b.T where transpose_b; a zeroed f32 [m, n] accumulator) as one fenced, committed
// wgmma group, waited for where `wait`, stored to out as f16.
template <class A>
void mma_and_store(K& k, GlobalTensor& out, const A& a, const SharedTensor& b, bool transpose_b,
                   std::vector<int64_t> acc_shape, bool wait = true) {
  auto acc = k.register_tensor(dtypes::float32, std::move(acc_shape), 0.0);
  k.wgmma.fence();
  k.wgmma.mma(a, transpose_b ? b.transpose() : b, acc);
  k.wgmma.commit_group();
  if (wait) k.wgmma.wait_group(0);
  k.store_global(out, acc.to(dtypes::float16), {.offsets = {0, 0}});
}

// d += sa @ sb.T on one warp group: sa [64, 64] and sb [128, 64] f16 (rows of 128 bytes).
void wgmma_body(K& k, GlobalTensor& a, bool wait) {
  auto sa = k.shared_tensor(dtypes::float16, {64, 64});
  auto sb = k.shared_tensor(dtypes::float16, {128, 64});
  k.copy(a.region({0, 0}, {64, 64}), sa);
  k.copy(a.region({64, 0}, {128, 64}), sb);
  mma_and_store(k, a, sa, sb, true, {64, 128}, wait);
}

// Runs `body` to instruction selection on sm_90a against its golden file and expects `record`
// among the lowering records.
void expect_wgmma_record(const std::string& golden, Body body, const std::string& record) {
  std::string after = print(golden_case(golden, "select_instructions", std::move(body), {.arch = "sm_90a"}).after);
  EXPECT_NE(after.find(record), std::string::npos) << after;
}
}  // namespace

TEST(WgmmaPasses, SelectionRecordsTheSplitAndTheDescriptors) {
  expect_wgmma_record(
      "wgmma_select", [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) { wgmma_body(k, a, true); },
      "lowering: wgmma m64n128k16 groups=1 tiles=1x1x4 a=sw128/sbo1024 b=sw128/sbo1024 completion=wgmma-group");
}

// a in registers: layout inference gives it the A-fragment layout (each warp's 16 rows as
// mma.sync's A fragment, per m64 x k16 instruction) and selection records a=regs.
TEST(WgmmaPasses, AInRegistersGetsTheFragmentLayoutAndTheRegisterForm) {
  expect_wgmma_record(
      "wgmma_select_regs",
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto ra = k.load_global(a, {.offsets = {0, 0}, .shape = {128, 32}});
        auto sb = k.shared_tensor(dtypes::float16, {64, 32});
        k.copy(a.region({128, 0}, {64, 32}), sb);
        mma_and_store(k, a, ra, sb, true, {128, 64});
      },
      "lowering: wgmma m64n64k16 groups=1 tiles=2x1x2 a=regs b=sw64/sbo512 completion=wgmma-group");
}

// b stored [k, n] with its n contiguous, one 128-byte swizzled row wide: an MN-major operand
// (wgmma's transpose flag), each k step two 8-row atoms down.
TEST(WgmmaPasses, ARowMajorBOneSwizzleSpanWideIsMnMajor) {
  expect_wgmma_record(
      "wgmma_select_mn",
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {64, 32});
        auto sb = k.shared_tensor(dtypes::float16, {32, 64});
        k.copy(a.region({0, 0}, {64, 32}), sa);
        k.copy(a.region({64, 0}, {32, 64}), sb);
        mma_and_store(k, a, sa, sb, false, {64, 64});
      },
      "lowering: wgmma m64n64k16 groups=1 tiles=1x1x2 a=sw64/sbo512 b=sw128/sbo1024/mn completion=wgmma-group");
}

// b as two MN-major column blocks [2, k, 64] of one tile (attention's V in 64-column blocks): one
// m64n128 instruction per k step, the blocks the descriptor's leading byte offset apart (32 rows
// of 128 bytes).
TEST(WgmmaPasses, BInColumnBlocksIsOneWideMnMajorOperand) {
  expect_wgmma_record(
      "wgmma_select_mn_blocks",
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {64, 32});
        auto sb = k.shared_tensor(dtypes::float16, {2, 32, 64});
        k.copy(a.region({0, 0}, {64, 32}), sa);
        k.copy(a.region({64, 0}, {32, 64}), sb[0]);
        k.copy(a.region({64, 64}, {32, 64}), sb[1]);
        mma_and_store(k, a, sa, sb, false, {64, 128});
      },
      "lowering: wgmma m64n128k16 groups=1 tiles=1x1x2 a=sw64/sbo512 b=sw128/sbo1024/lbo4096/mn "
      "completion=wgmma-group");
}

// The C++ Script's wgmma.mma(..., enable_input_d = false), as Python's: the instruction says so in
// the IR; the default accumulates.
TEST(WgmmaPasses, TheCppScriptTakesEnableInputD) {
  Stage s = run_to(traced([](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {64, 64});
    auto acc = k.register_tensor(dtypes::float32, {64, 64}, 0.0);
    k.wgmma.fence();
    k.wgmma.mma(sa, sa.transpose(), acc, false);
    k.wgmma.mma(sa, sa.transpose(), acc);
    k.wgmma.commit_group();
    k.wgmma.wait_group(0);
    k.store_global(a, acc.to(dtypes::float16), {.offsets = {0, 0}});
  }, {.arch = "sm_90a"}), "verify", {.arch = "sm_90a"});
  std::string ir = print(s.after);
  size_t first = ir.find("wgmma.mma");
  ASSERT_NE(first, std::string::npos) << ir;
  EXPECT_NE(ir.substr(first, ir.find('\n', first) - first).find("enable_input_d=false"), std::string::npos) << ir;
  size_t second = ir.find("wgmma.mma", first + 1);
  ASSERT_NE(second, std::string::npos) << ir;
  EXPECT_EQ(ir.substr(second, ir.find('\n', second) - second).find("enable_input_d"), std::string::npos) << ir;
}

// A wait placed after register work (the work to overlap with the wgmma it waits for) is
// ordered; a wait right after a commit or another wait is not; CPU targets are left alone.
TEST(WgmmaPasses, AWaitAfterRegisterWorkIsOrdered) {
  auto body = [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {64, 64});
    auto sb = k.shared_tensor(dtypes::float16, {64, 64});
    auto s = k.register_tensor(dtypes::float32, {64, 64}, 0.0);
    auto o = k.register_tensor(dtypes::float32, {64, 64}, 0.0);
    k.wgmma.fence();
    k.wgmma.mma(sa, sb.transpose(), s);
    k.wgmma.commit_group();
    k.wgmma.mma(sa, sb.transpose(), o);
    k.wgmma.commit_group();
    k.wgmma.wait_group(1);           // right after a commit: left alone
    auto p = k.exp2(s) * 2.0;        // work while o's wgmma runs
    k.wgmma.wait_group(0);           // ordered
    k.store_global(a, (o + p).to(dtypes::float16), {.offsets = {0, 0}});
  };
  auto s = golden_case("wgmma_waits_ordered", "order_wgmma_waits", body, {.arch = "sm_90a"});
  std::vector<std::string> waits;
  struct Collect : StmtVisitor {
    std::vector<std::string>* out;
    void visit_inst(const InstNode& i) override {
      if (auto* w = dynamic_cast<const WgmmaWaitGroupInst*>(&i)) out->push_back(fmt::format("{}{}", w->n, w->ordered ? "o" : ""));
    }
  } c;
  c.out = &waits;
  c.visit(s.after.kernels[0].body);
  EXPECT_EQ(waits, (Seq{"1", "0o"}));
  EXPECT_EQ(print(order_wgmma_waits(s.before, Target::cpu())), print(s.before));
  // The CUDA text fences the ordered wait.
  std::string cuda = emit_cuda(s.after.kernels[0], Target::from_arch("sm_90a")).source;
  EXPECT_NE(cuda.find("tilus::wgmma_wait_group_ordered<0>();"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("tilus::wgmma_wait_group<1>();"), std::string::npos) << cuda;
}

TEST(WgmmaPasses, RewritingARegisterAWhileTheWgmmaReadsItIsAnError) {
  std::string m = pass_error(
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto ra = k.load_global(a, {.offsets = {0, 0}, .shape = {64, 64}});
        auto sb = k.shared_tensor(dtypes::float16, {64, 64});
        auto acc = k.register_tensor(dtypes::float32, {64, 64}, 0.0);
        k.wgmma.fence();
        k.wgmma.mma(ra, sb.transpose(), acc);
        k.wgmma.commit_group();
        ra = k.load_global(a, {.offsets = {64, 0}, .shape = {64, 64}});
        k.wgmma.wait_group(0);
      },
      "insert_async_waits", {.arch = "sm_90a"});
  EXPECT_NE(m.find("wgmma.mma at"), std::string::npos) << m;
  EXPECT_NE(m.find("wgmma.wait_group(n) that covers it"), std::string::npos) << m;
}

TEST(WgmmaPasses, OperandsWrittenByThreadsGetAFenceAndABarrier) {
  auto s = golden_case(
      "wgmma_fence", "insert_barriers",
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {64, 32});
        auto sb = k.shared_tensor(dtypes::float16, {64, 32});
        k.store_shared(sa, k.register_tensor(dtypes::float16, {64, 32}, 1.0));
        k.store_shared(sb, k.register_tensor(dtypes::float16, {64, 32}, 2.0));
        auto acc = k.register_tensor(dtypes::float32, {64, 64}, 0.0);
        k.wgmma.fence();
        k.wgmma.mma(sa, sb.transpose(), acc);
        k.wgmma.commit_group();
        k.wgmma.wait_group(0);
        k.store_global(a, acc.to(dtypes::float16), {.offsets = {0, 0}});
      },
      {.arch = "sm_90a"});
  EXPECT_EQ(names(s.after),
            (std::vector<std::string>{"store_shared", "store_shared", "wgmma.fence", "fence.proxy_async", "sync",
                                      "wgmma.mma", "wgmma.commit_group", "wgmma.wait_group", "cast", "store_global"}));
}

// PTX's wgmma.fence rule: a k loop reached right after the accumulator is zeroed gets one
// fence before it (its mma only chain on the accumulator); a loop whose body reads the
// accumulator before its mma gets one before that mma, every iteration; an mma after a read
// outside loops gets one before it.
TEST(WgmmaPasses, MissingFencesAreInsertedWhereRegistersWereAccessed) {
  auto s = golden_case(
      "wgmma_fences_inserted", "insert_wgmma_fences",
      [](K& k, Int32 m, Int32, GlobalTensor& a, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {64, 64});
        auto sb = k.shared_tensor(dtypes::float16, {128, 64});
        k.copy(a.region({0, 0}, {64, 64}), sa);
        k.copy(a.region({64, 0}, {128, 64}), sb);
        auto acc = k.register_tensor(dtypes::float32, {64, 128}, 0.0);
        for (Expr i : k.range(m)) {
          k.wgmma.mma(sa, sb.transpose(), acc);
          k.wgmma.commit_group();
          k.wgmma.wait_group(0);
        }
        for (Expr i : k.range(m)) {
          k.store_global(a, acc.to(dtypes::float16), {.offsets = {i, 0}});
          k.wgmma.mma(sa, sb.transpose(), acc);
          k.wgmma.commit_group();
          k.wgmma.wait_group(0);
        }
        k.store_global(a, acc.to(dtypes::float16), {.offsets = {0, 0}});
        k.wgmma.mma(sa, sb.transpose(), acc);
        k.wgmma.commit_group();
        k.wgmma.wait_group(0);
      },
      {.arch = "sm_90a"});
  auto before = names(s.before), after = names(s.after);
  EXPECT_EQ(std::count(before.begin(), before.end(), "wgmma.fence"), 0);
  EXPECT_EQ(std::count(after.begin(), after.end(), "wgmma.fence"), 3);
}

// A producer group written before the consumer group that issues wgmma: the consumers come
// first (ptxas serialized the wgmma of such kernels with the producer's loop of waits first).
// Overlapping groups, and CPU targets, keep their order.
TEST(WgmmaPasses, GroupsThatIssueWgmmaComeFirst) {
  auto groups = [](bool overlap) {
    return [overlap](K& k, Int32 m, Int32, GlobalTensor& a, GlobalTensor&) {
      auto sa = k.shared_tensor(dtypes::float16, {64, 64});
      auto sb = k.shared_tensor(dtypes::float16, {64, 64});
      auto full = k.mbarrier.alloc({Expr(1)});
      auto empty = k.mbarrier.alloc({Expr(1)});
      k.thread_group(overlap ? 96 : 128, 32, [&] {  // the producer
        for (Expr i : k.range(m)) {
          k.mbarrier.wait(empty[0], (i % 2) ^ 1);
          k.single_thread([&] { k.mbarrier.arrive(full[0]); });
        }
      });
      k.thread_group(0, 128, [&] {
        auto acc = k.register_tensor(dtypes::float32, {64, 64}, 0.0);
        k.mbarrier.wait(full[0], 0);
        k.single_thread([&] { k.mbarrier.arrive(empty[0]); });
        k.wgmma.fence();
        k.wgmma.mma(sa, sb.transpose(), acc);
        k.wgmma.commit_group();
        k.wgmma.wait_group(0);
        k.store_global(a, acc.to(dtypes::float16), {.offsets = {0, 0}});
      });
    };
  };
  Options o{.arch = "sm_90a", .warps = 5};
  auto s = golden_case("thread_groups_ordered", "order_thread_groups", groups(false), o);
  auto first_group = [](const Program& p) {
    for (auto& st : static_cast<const SeqStmtNode&>(*p.kernels[0].body).stmts)
      if (st->kind == StmtKind::ThreadGroup) return static_cast<const ThreadGroupStmtNode&>(*st).thread_begin;
    return int64_t(-1);
  };
  EXPECT_EQ(first_group(s.before), 128);
  EXPECT_EQ(first_group(s.after), 0);
  EXPECT_EQ(print(order_thread_groups(s.before, Target::cpu())), print(s.before));
  auto overlapping = run_to(traced(groups(true), o), "order_thread_groups", o);
  EXPECT_EQ(print(overlapping.before), print(overlapping.after));
}

// The steps of a flash-attention kernel: one step written once (its two dots on one line each)
// and called from two loops, the score and the accumulator annotated with the 4x1 warp split's
// fragments (as NVIDIA Tilus's resolve_dot_config gives them), the score fed to the second dot
// from registers. Four dots of 4 and 5 splits are 400 combinations, more than layout inference
// lists; the dots of one line are tried together first (20 combinations), and each takes the
// 4x1 split.
TEST(LayoutPasses, DotsOfOneLineTakeTheirSplitTogether) {
  auto qk = dot_plans(dtypes::float16, dtypes::float32, 64, 32, 64, 128);
  auto pv = dot_plans(dtypes::float16, dtypes::float32, 64, 64, 32, 128);
  auto split = [](const std::vector<DotPlan>& plans, int64_t wm) {
    for (auto& p : plans)
      if (p.tiling.warps_m == wm && !p.tiling.warps_major) return p;
    throw std::runtime_error("no such split");
  };
  ASSERT_EQ(qk.size() * pv.size() * qk.size() * pv.size(), 400u);
  ASSERT_NE(qk[0].tiling.warps_m, 4);  // the annotations need a split other than the default
  DotPlan qk4 = split(qk, 4), pv4 = split(pv, 4);
  auto body = [&](K& k, Int32 m, Int32, GlobalTensor& a, GlobalTensor& b) {
    auto q = k.load_global(a, {.offsets = {0, 0}, .shape = {64, 64}});
    auto o = k.register_tensor(dtypes::float32, {64, 64}, 0.0);
    k.annotate_layout(o, pv4.c);
    auto step = [&](const Expr& i) {
      auto kt = k.load_global(a, {.offsets = {i * 32, 0}, .shape = {32, 64}});
      auto v = k.load_global(a, {.offsets = {i * 32, 0}, .shape = {32, 64}});
      auto score = k.dot(q, kt.transpose());
      k.annotate_layout(score, qk4.c);
      k.dot(score.to(dtypes::float16), v, o, {.out = o});
    };
    for (Expr i : k.range(m)) step(i);
    for (Expr i : k.range(m, m + 2)) step(i);
    k.store_global(b, o, {.offsets = {0, 0}});
  };
  auto s = golden_case("dots_of_one_line", "infer_layouts", body);
  struct Splits : StmtVisitor {
    std::vector<std::string> out;
    void visit_inst(const InstNode& i) override {
      if (i.kind() == InstKind::Dot) out.push_back(static_cast<const DotInst&>(i).b->layout.str());
    }
  } after;
  after.visit(s.after.kernels[0].body);
  EXPECT_EQ(after.out, (std::vector<std::string>{qk4.b.str(), pv4.b.str(), qk4.b.str(), pv4.b.str()}));
}

// A loop with a run-time trip count that issues wgmma gets unroll=1; a Script's own unroll, a
// constant trip count and a loop without wgmma keep theirs; CPU targets are left alone.
TEST(WgmmaPasses, RunTimeWgmmaLoopsStayRolled) {
  auto body = [](K& k, Int32 m, Int32, GlobalTensor& a, GlobalTensor&) {
    auto sa = k.shared_tensor(dtypes::float16, {64, 64});
    auto sb = k.shared_tensor(dtypes::float16, {64, 64});
    auto acc = k.register_tensor(dtypes::float32, {64, 64}, 0.0);
    auto mma = [&] {
      k.wgmma.fence();
      k.wgmma.mma(sa, sb.transpose(), acc);
      k.wgmma.commit_group();
      k.wgmma.wait_group(0);
    };
    for (Expr i : k.range(m)) mma();                                   // rolled by the pass
    for (Expr i : k.range(m, {.unroll = Unroll::by(2)})) mma();        // the Script's unroll
    for (Expr i : k.range(4)) mma();                                   // a constant trip count
    for (Expr i : k.range(m)) k.store_global(a, acc.to(dtypes::float16), {.offsets = {i, 0}});  // no wgmma
  };
  Options o{.arch = "sm_90a"};
  auto s = golden_case("wgmma_loops_rolled", "keep_wgmma_loops_rolled", body, o);
  auto unrolls = [](const Program& p) {
    std::vector<std::string> out;
    for (auto& st : static_cast<const SeqStmtNode&>(*p.kernels[0].body).stmts)
      if (st->kind == StmtKind::For) {
        const Unroll& u = static_cast<const ForStmtNode&>(*st).unroll;
        out.push_back(u.kind == Unroll::Factor ? std::to_string(u.factor) : u.kind == Unroll::All ? "all" : "-");
      }
    return out;
  };
  EXPECT_EQ(unrolls(s.before), (Seq{"-", "2", "-", "-"}));
  EXPECT_EQ(unrolls(s.after), (Seq{"1", "2", "-", "-"}));
  EXPECT_EQ(print(keep_wgmma_loops_rolled(s.before, Target::cpu())), print(s.before));
}

TEST(WgmmaPasses, AKernelThatFencesGetsNoFence) {
  auto s = run_to(traced([](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) { wgmma_body(k, a, true); },
                         {.arch = "sm_90a"}),
                  "insert_wgmma_fences", {.arch = "sm_90a"});
  EXPECT_EQ(print(s.before), print(s.after));
}

TEST(WgmmaPasses, ReadingTheAccumulatorBeforeTheWaitNamesBothLines) {
  std::string m = pass_error([](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) { wgmma_body(k, a, false); },
                             "insert_async_waits", {.arch = "sm_90a"});
  EXPECT_NE(m.find("cast at"), std::string::npos) << m;
  EXPECT_NE(m.find("wgmma.mma at"), std::string::npos) << m;
  EXPECT_NE(m.find("wgmma.wait_group(n) that covers it"), std::string::npos) << m;
}

TEST(WgmmaPasses, RefillingAnOperandWhileTheWgmmaReadsItIsAnError) {
  std::string m = pass_error(
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {64, 64});
        auto acc = k.register_tensor(dtypes::float32, {64, 64}, 0.0);
        k.wgmma.fence();
        k.wgmma.mma(sa, sa.transpose(), acc);
        k.wgmma.commit_group();
        k.copy(a.region({0, 0}, {64, 64}), sa);
        k.wgmma.wait_group(0);
      },
      "insert_async_waits", {.arch = "sm_90a"});
  EXPECT_NE(m.find("copy at"), std::string::npos) << m;
  EXPECT_NE(m.find("may still be reading"), std::string::npos) << m;
}

TEST(WgmmaPasses, LayoutAndTargetErrorsSayWhatWgmmaNeeds) {
  auto body = [](std::vector<int64_t> b_shape, bool transpose) {
    return [=](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
      auto sa = k.shared_tensor(dtypes::float16, {64, 64});
      auto sb = k.shared_tensor(dtypes::float16, b_shape);
      auto acc = k.register_tensor(dtypes::float32, {64, transpose ? b_shape[0] : b_shape[1]}, 0.0);
      k.wgmma.mma(sa, transpose ? sb.transpose() : sb, acc);
      k.wgmma.commit_group();
      k.wgmma.wait_group(0);
    };
  };
  // b stored [k, n] (n contiguous) two 128-byte rows wide: MN-major, but not one swizzle span.
  std::string m = pass_error(body({64, 128}, false), "select_instructions", {.arch = "sm_90a"});
  EXPECT_NE(m.find("b is MN-major and must be stored in rows of 32, 64 or 128 bytes along N"), std::string::npos)
      << m;
  // sm_90 without the a: no wgmma.
  m = pass_error(body({64, 64}, true), "select_instructions", {.arch = "sm_90"});
  EXPECT_NE(m.find("wgmma needs sm_90a, the target is sm_90"), std::string::npos) << m;
  // A group of 96 threads is not a warp group.
  m = pass_error(
      [](K& k, Int32, Int32, GlobalTensor&, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {64, 64});
        k.thread_group(0, 96, [&] {
          auto acc = k.register_tensor(dtypes::float32, {64, 64}, 0.0);
          k.wgmma.mma(sa, sa.transpose(), acc);
        });
      },
      "verify", {.arch = "sm_90a"});
  EXPECT_NE(m.find("wgmma.mma runs on whole warp groups"), std::string::npos) << m;
}

// --- atomics ---------------------------------------------------------------------------------------

namespace {
std::vector<const AtomicInst*> atomics(const Program& p) { return insts_of<AtomicInst>(p); }

// Shared adds (results unused: red), then a global add of the sums at a ragged offset whose
// old values are stored (atom, one thread per element).
void atomic_body(K& k, GlobalTensor& b) {
  auto s = k.shared_tensor(dtypes::float32, {128});
  k.store_shared(s, k.register_tensor(dtypes::float32, {128}, 0.0));
  auto v = k.load_global(b, {.offsets = {0, 3}, .shape = {1, 128}});
  auto row = k.squeeze(v, {0});
  k.atomic.shared_add(s, row);
  auto old = k.atomic.global_add(b, k.load_shared(s), {.offsets = {1, 5}});
  k.store_global(b, k.unsqueeze(old, {0}), {.offsets = {2, 0}});
}
}  // namespace

TEST(AtomicPasses, SelectionRecordsRedOrAtomAndTheBoundsChecks) {
  auto s = golden_case("atomic_select", kSelect,
                       [](K& k, Int32, Int32, GlobalTensor&, GlobalTensor& b) { atomic_body(k, b); });
  auto a = atomics(s.after);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0]->lowering.op, MachineOp::Atom);
  EXPECT_TRUE(a[0]->lowering.red) << "the shared add's old values are never read";
  EXPECT_FALSE(a[1]->lowering.red) << "the global add's old values are stored";
  EXPECT_FALSE(a[1]->values->layout.is_replicated()) << a[1]->values->layout.str();
  ASSERT_TRUE(a[1]->checked_dims.has_value());
  EXPECT_EQ(*a[1]->checked_dims, (std::vector<int>{0, 1}));  // the tile at (1, 5) may pass m and n
}

TEST(AtomicPasses, SixteenBitFloatRedGoesByPairsWhereThePairIsOneAlignedWord) {
  // An f16 add whose old values are unread: by pairs (red .f16x2) at an even column, element by
  // element at an odd one (a pair would straddle two words).
  auto s = golden_case("atomic_red_pairs", kSelect, [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto v = k.load_global(a, {.offsets = {0, 0}, .shape = {1, 256}});
    k.atomic.global_add(a, v, {.offsets = {1, 0}});
    k.atomic.global_add(a, v, {.offsets = {2, 1}});
  });
  auto a = atomics(s.after);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_TRUE(a[0]->lowering.red);
  EXPECT_EQ(a[0]->lowering.vector, 2) << "an even column: pairs of one aligned word";
  EXPECT_TRUE(a[1]->lowering.red);
  EXPECT_LE(a[1]->lowering.vector, 1) << "an odd column: element by element";
}

TEST(AtomicPasses, SharedAtomicsGetBarriersLikeStores) {
  auto s = golden_case("atomic_barriers", "insert_barriers",
                       [](K& k, Int32, Int32, GlobalTensor&, GlobalTensor& b) { atomic_body(k, b); });
  std::string after = print(s.after);
  // store_shared -> atomic (other threads' elements) -> load_shared: a barrier before each.
  size_t first = after.find("sync()"), add = after.find("atomic.shared_add"), load = after.find("load_shared");
  ASSERT_NE(first, std::string::npos) << after;
  EXPECT_LT(first, add) << after;
  EXPECT_NE(after.find("sync()", add), std::string::npos) << after;
  EXPECT_LT(after.find("sync()", add), load) << after;
}

TEST(AtomicPasses, OldValuesOfReplicatedElementsAreAnError) {
  // 16 elements on 128 threads: each element in 8 threads, and the old values are read.
  std::string m;
  try {
    run_to(traced([](K& k, Int32, Int32, GlobalTensor&, GlobalTensor& b) {
             auto old = k.atomic.global_max(b, k.register_tensor(dtypes::float32, {1, 16}, 1.0));
             k.store_global(b, old, {.offsets = {1, 0}});
           }, {}),
           kSelect, {});
  } catch (const CompileError& e) {
    m = e.what();
  }
  // float32 max is no PTX atom: the verifier says so first.
  EXPECT_NE(m.find("atomic.global_max"), std::string::npos) << m;
  EXPECT_NE(m.find("atomic max takes 32- or 64-bit integers"), std::string::npos) << m;
  m.clear();
  try {
    run_to(traced([](K& k, Int32, Int32, GlobalTensor&, GlobalTensor& b) {
             auto old = k.atomic.global_add(b, k.register_tensor(dtypes::float32, {1, 16}, 1.0));
             k.store_global(b, old, {.offsets = {1, 0}});
           }, {}),
           kSelect, {});
  } catch (const CompileError& e) {
    m = e.what();
  }
  EXPECT_NE(m.find("its old values are read"), std::string::npos) << m;
  EXPECT_NE(m.find("single_thread()"), std::string::npos) << m;
}

TEST(AtomicPasses, VerifierChecksShapesTypesAndQualifiers) {
  auto err = [](Body body) { return compile_error(std::move(body)); };
  std::string m = err([](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    auto s = k.shared_tensor(dtypes::float16, {64});
    k.atomic.shared_add(s, k.register_tensor(dtypes::float16, {32}, 1.0));
  });
  EXPECT_NE(m.find("atomic.shared_add"), std::string::npos) << m;
  EXPECT_NE(m.find("float16[64]"), std::string::npos) << m;
  m = err([](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
    k.atomic.global_exch(a, k.register_tensor(dtypes::float16, {1, 8}, 1.0));
  });
  EXPECT_NE(m.find("atomic exch takes 32- or 64-bit elements"), std::string::npos) << m;
  m = err([](K& k, Int32, Int32, GlobalTensor&, GlobalTensor& b) {
    k.atomic.global_add(b, k.register_tensor(dtypes::float32, {1, 8}, 1.0), {.sem = "seq_cst"});
  });
  EXPECT_NE(m.find("sem='seq_cst' is not one of"), std::string::npos) << m;
  m = err([](K& k, Int32, Int32, GlobalTensor&, GlobalTensor& b) {
    k.atomic.global_add(b, k.register_tensor(dtypes::int32, {1, 8}, 1), {});
  });
  EXPECT_NE(m.find("the element dtypes differ"), std::string::npos) << m;
}

TEST(ItemPasses, TheElementIsHeldByEveryThreadAndItsScalarIsAnOffset) {
  auto s = golden_case("item_layout", "infer_layouts", [](K& k, Int32, Int32, GlobalTensor&, GlobalTensor& b) {
    auto x = k.load_global(b, {.offsets = {0, 0}, .shape = {1, 1}});
    Expr row = k.item(x.to(dtypes::int32));
    k.store_global(b, k.load_global(b, {.offsets = {row, 0}, .shape = {1, 64}}), {.offsets = {1, 0}});
  });
  std::string after = print(s.after);
  EXPECT_NE(after.find("item(x="), std::string::npos) << after;
  EXPECT_NE(after.find("spatial=[r128"), std::string::npos) << "every thread holds the element: " << after;
}

// cp_async_barrier_noinc hands the thread's cp.async copies to an mbarrier: a wait on it covers
// them, so neither a cp.async wait nor a block barrier is added before the read.
void noinc_body(K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
  auto sa = k.shared_tensor(dtypes::float16, {32, 64});
  auto bars = k.mbarrier.alloc({128});
  k.copy_async(a, sa, {.offsets = {0, 0}});
  k.cp_async_barrier_noinc(bars[0]);
  k.mbarrier.wait(bars[0], MbarrierGroup::consumer_initial_phase);
  k.store_global(a, k.load_shared(sa), {.offsets = {32, 0}});
}

TEST(CopyAsyncWaits, CpAsyncBarrierNoincCoversTheCopies) {
  auto s = golden_case("waits_cp_async_noinc", "insert_async_waits", noinc_body, {.arch = "sm_90a"});
  EXPECT_EQ(names(s.after), (std::vector<std::string>{"mbarrier.alloc", "copy_async", "cp_async_barrier_noinc",
                                                      "mbarrier.wait", "load_shared", "store_global"}));
  // Without the barrier the read waits for the copy.
  auto plain = golden_case("waits_cp_async_no_barrier", "insert_async_waits",
                           [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
                             auto sa = k.shared_tensor(dtypes::float16, {32, 64});
                             k.copy_async(a, sa, {.offsets = {0, 0}});
                             k.store_global(a, k.load_shared(sa), {.offsets = {32, 0}});
                           },
                           {.arch = "sm_90a"});
  EXPECT_EQ(names(plain.after), (std::vector<std::string>{"copy_async", "copy_async_commit_group",
                                                          "copy_async_wait_group", "load_shared", "store_global"}));
}

TEST(CopyAsyncWaits, CpAsyncBarrierNoincNeedsNoBlockBarrier) {
  auto s = golden_case("barriers_cp_async_noinc", "insert_barriers", noinc_body, {.arch = "sm_90a"});
  // One barrier: after the barriers' initialization, before their first use.
  EXPECT_EQ(names(s.after), (std::vector<std::string>{"mbarrier.alloc", "copy_async", "sync", "cp_async_barrier_noinc",
                                                      "mbarrier.wait", "load_shared", "store_global"}));
}

// c2d_im2col on sm_90: one TMA load in im2col mode where the tile's channels stay in one kernel
// position (C = n, a multiple of 16 by the specialization; 64 by an assumption), the gathers
// otherwise (bk = 32 with nothing known past 16).
Body im2col_body(int64_t bk, bool assume64) {
  return [bk, assume64](K& k, Int32, Int32 n, GlobalTensor& a, GlobalTensor&) {
    if (assume64) k.assume(n % 64 == 0);
    auto img = k.global_view(k.pa, {Expr(2), Expr(9), Expr(7), n});
    auto col = k.shared_tensor(dtypes::float16, {64, bk});
    k.c2d_im2col(img, col, k.blockIdx.x, k.blockIdx.y, 3, 2, 1, 1);
    k.store_global(a, k.load_shared(col), {.offsets = {0, 0}});
  };
}

TEST(Im2colSelection, TmaWhereTheChannelsStayInOneKernelPosition) {
  auto s = golden_case("im2col_tma", kSelect, im2col_body(64, true), {.arch = "sm_90a"});
  const std::string after = print(s.after);
  EXPECT_NE(after.find("lowering: tma.load tensor_map=0 copy_barrier=0 completion=synchronous"), std::string::npos)
      << after;
  EXPECT_NE(after.find("im2col pixel_box [-1, -1] stride 2"), std::string::npos) << after;
  auto simt = golden_case("im2col_simt", kSelect, im2col_body(32, false), {.arch = "sm_90a"});
  const std::string text = print(simt.after);
  EXPECT_NE(text.find("tma im2col: not legal: C (n) is not a known multiple of the tile's 32 channels"),
            std::string::npos)
      << text;
}

// cluster.map_shared_addr (NVIDIA Tilus's name) makes the arrivals on a peer block's barrier.
TEST(MbarrierPeers, MapSharedAddrArrivesOnThePeer) {
  Program p = traced(
      [](K& k, Int32, Int32, GlobalTensor&, GlobalTensor&) {
        auto bars = k.mbarrier.alloc({32, 1});
        MappedBarrier peer = k.cluster.map_shared_addr(bars[0], 1 - k.cluster.blockRank);
        k.mbarrier.arrive(peer);
        k.mbarrier_arrive(k.cluster.map_shared_addr(bars[1], 0));
        k.single_thread([&] { k.mbarrier.arrive_and_expect_tx(k.cluster.map_shared_addr(bars[1], 0), 64); });
      },
      {.arch = "sm_90a"});
  const std::string text = print(p);
  EXPECT_NE(text.find("mbarrier.arrive(barrier=barriers_1, count=1, cta_id=1 - clusterBlockRank)"), std::string::npos) << text;
  EXPECT_NE(text.find("mbarrier.arrive(barrier=barriers_2, count=1, cta_id=0)"), std::string::npos) << text;
  EXPECT_NE(text.find("mbarrier.arrive_and_expect_tx(barrier=barriers_3, transaction_bytes=64, cta_id=0)"), std::string::npos)
      << text;
}

// --- dot -> wgmma (lower_dots_to_wgmma) ------------------------------------------------------

namespace {

// The dots of a program that are still dots, and the wgmma.mma made from one.
std::pair<int, int> dots_and_wgmma(const Program& p) {
  struct Collect : StmtVisitor {
    int dots = 0, from_dot = 0;
    void visit_inst(const InstNode& i) override {
      dots += i.kind() == InstKind::Dot;
      if (auto* w = dynamic_cast<const WgmmaMmaInst*>(&i)) from_dot += w->from_dot;
    }
  } c;
  c.visit(p.kernels[0].body);
  return {c.dots, c.from_dot};
}

// A k step of the usual Ampere-style matmul: a [bm, 32] and b [32, bn] tiles row-major in
// shared memory, loaded and multiplied.
void k_step(K& k, GlobalTensor& g, int64_t bm, int64_t bn, bool b_stored_transposed) {
  auto sa = k.shared_tensor(dtypes::float16, {bm, 32});
  auto sb = b_stored_transposed ? k.shared_tensor(dtypes::float16, {bn, 32}) : k.shared_tensor(dtypes::float16, {32, bn});
  k.copy_async(g, sa, {.offsets = {0, 0}});
  k.copy_async(g, sb, {.offsets = {0, 0}});
  k.copy_async_commit_group();
  auto acc = k.register_tensor(dtypes::float32, {bm, bn}, 0.0);
  auto b = b_stored_transposed ? k.load_shared(sb.transpose()) : k.load_shared(sb);
  acc = k.dot(k.load_shared(sa), b, acc);
  k.store_global(g, acc.to(dtypes::float16), {.offsets = {0, 0}});
}

}  // namespace

// The usual row-major b: the transposed product, b^T in registers (ldmatrix.trans) and a's
// tile read by its descriptor; a's load_shared is gone.
TEST(WgmmaPasses, DotWithARowMajorBBecomesTheTransposedWgmma) {
  auto s = golden_case(
      "dot_wgmma_transposed", "lower_dots_to_wgmma",
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) { k_step(k, a, 64, 128, false); }, {.arch = "sm_90a"});
  EXPECT_EQ(dots_and_wgmma(s.after), std::pair(0, 1));
  Program lowered = run_to(s.before, "insert_wgmma_fences", {.arch = "sm_90a"}).after;
  std::string text = print(lowered);
  EXPECT_NE(text.find("lowering: wgmma m64n64k16 groups=1 tiles=2x1x2 a=regs b=sw64/sbo512"), std::string::npos)
      << text;
  EXPECT_NE(text.find("note=\"dot\""), std::string::npos) << text;
  EXPECT_NE(text.find("x4.trans"), std::string::npos) << text;  // b^T through ldmatrix.trans
  EXPECT_NE(text.find("fence.proxy_async"), std::string::npos) << text;
}

// b stored [n, k] (loaded through its transposed view): both operands by descriptor.
TEST(WgmmaPasses, DotWithBothTilesKMajorReadsBothFromSharedMemory) {
  auto s = golden_case(
      "dot_wgmma_shared", "lower_dots_to_wgmma",
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) { k_step(k, a, 128, 64, true); }, {.arch = "sm_90a"});
  EXPECT_EQ(dots_and_wgmma(s.after), std::pair(0, 1));
  EXPECT_EQ(print(s.after).find("load_shared"), std::string::npos) << print(s.after);
  std::string text = print(run_to(s.before, "insert_wgmma_fences", {.arch = "sm_90a"}).after);
  EXPECT_NE(text.find("a=sw64/sbo512 b=sw64/sbo512"), std::string::npos) << text;
}

// What keeps mma.sync: another target, TILUS_DOT_WGMMA=0, the CPU backend (unless 1), a
// thread count that is not whole warp groups, rows that do not fill 64 per warp group, an
// operand computed in registers, a tile whose rows are not one swizzle span.
TEST(WgmmaPasses, DotsWgmmaCannotTakeStayDots) {
  auto count = [](Body body, const std::string& arch = "sm_90a", int warps = 4,
                  DotWgmma mode = DotWgmma::Auto) {
    Options o{.arch = arch, .warps = warps};
    Program p = traced(std::move(body), o);
    Target t = arch == "cpu" ? Target::cpu() : Target::from_arch(arch);
    return dots_and_wgmma(lower_dots_to_wgmma(choose_shared_layouts(p), t, mode));
  };
  auto step = [](int64_t bm, int64_t bn) {
    return [=](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) { k_step(k, a, bm, bn, false); };
  };
  EXPECT_EQ(count(step(64, 64)), std::pair(0, 1));
  EXPECT_EQ(count(step(64, 64), "sm_90"), std::pair(1, 0));
  EXPECT_EQ(count(step(64, 64), "sm_80"), std::pair(1, 0));
  EXPECT_EQ(count(step(64, 64), "sm_90a", 4, DotWgmma::Never), std::pair(1, 0));
  EXPECT_EQ(count(step(64, 64), "cpu"), std::pair(1, 0));
  EXPECT_EQ(count(step(64, 64), "cpu", 4, DotWgmma::Always), std::pair(0, 1));
  EXPECT_EQ(count(step(64, 64), "sm_90a", 2), std::pair(1, 0));   // 64 threads
  EXPECT_EQ(count(step(64, 64), "sm_90a", 8), std::pair(1, 0));   // 2 warp groups, 64 rows
  EXPECT_EQ(count(step(64, 128), "sm_90a", 8), std::pair(0, 1));  // the transposed form: n = 64 per group
  EXPECT_EQ(count([](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
              auto sb = k.shared_tensor(dtypes::float16, {32, 64});
              auto ra = k.load_global(a, {.offsets = {0, 0}, .shape = {64, 32}});
              auto acc = k.register_tensor(dtypes::float32, {64, 64}, 0.0);
              acc = k.dot(ra, k.load_shared(sb), acc);
              k.store_global(a, acc.to(dtypes::float16), {.offsets = {0, 0}});
            }),
            std::pair(1, 0));
  EXPECT_EQ(count([](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
              auto sa = k.shared_tensor(dtypes::float16, {64, 64});  // 128-byte rows: fine
              auto sb = k.shared_tensor(dtypes::float16, {64, 64});
              auto sc = k.shared_tensor(dtypes::float16, {64, 128});  // 256-byte rows: no descriptor
              auto sd = k.shared_tensor(dtypes::float16, {128, 64});
              auto acc = k.register_tensor(dtypes::float32, {64, 64}, 0.0);
              acc = k.dot(k.load_shared(sa), k.load_shared(sb), acc);
              auto acc2 = k.register_tensor(dtypes::float32, {64, 64}, 0.0);
              acc2 = k.dot(k.load_shared(sc), k.load_shared(sd), acc2);
              k.store_global(a, (acc + acc2).to(dtypes::float16), {.offsets = {0, 0}});
            }),
            std::pair(1, 1));
}

// A store widened through shared memory (infer_layouts) needs barriers that every thread
// reaches: inside a loop whose trip count depends on the thread it stays narrow (and compiles),
// at the top level it is widened.
TEST(WgmmaPasses, NarrowStoresInAPerThreadLoopStayNarrow) {
  auto widened = [](bool per_thread) {
    Program p = traced(
        [per_thread](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
          auto t = k.transpose(k.load_global(a, {.offsets = {0, 0}, .shape = {64, 128}}));
          if (per_thread) {
            for (Expr i : k.range(Expr(builtin::thread_idx()) % 2 + 1)) k.store_global(a, t, {.offsets = {0, 0}});
          } else {
            k.store_global(a, t, {.offsets = {0, 0}});
          }
        },
        {.arch = "sm_90a"});
    PipelineOptions o;
    return print(run_pipeline(p, o)).find("_converted") != std::string::npos;
  };
  EXPECT_TRUE(widened(false));
  EXPECT_FALSE(widened(true));
}

// Two tiles filled by cp.async, the first read by a wgmma after wait_group(1) while the second
// is still landing: the proxy fence before the first wgmma cannot cover the second tile's
// writes, so the second wgmma (after wait_group(0)) gets a fence of its own.
TEST(WgmmaPasses, AFenceCoversOnlyTheWritesThatLanded) {
  Program p = traced(
      [](K& k, Int32, Int32, GlobalTensor& a, GlobalTensor&) {
        auto sa = k.shared_tensor(dtypes::float16, {64, 32});
        auto sb = k.shared_tensor(dtypes::float16, {64, 32});
        auto sc = k.shared_tensor(dtypes::float16, {64, 32});
        k.copy_async(a, sa, {.offsets = {0, 0}});
        k.copy_async(a, sb, {.offsets = {0, 0}});
        k.copy_async_commit_group();
        k.copy_async(a, sc, {.offsets = {64, 0}});
        k.copy_async_commit_group();
        auto acc = k.register_tensor(dtypes::float32, {64, 64}, 0.0);
        k.copy_async_wait_group(1);
        k.wgmma.mma(sa, sb.transpose(), acc);
        k.wgmma.commit_group();
        k.wgmma.wait_group(0);
        k.copy_async_wait_group(0);
        k.wgmma.mma(sc, sb.transpose(), acc);
        k.wgmma.commit_group();
        k.wgmma.wait_group(0);
        k.store_global(a, acc.to(dtypes::float16), {.offsets = {0, 0}});
      },
      {.arch = "sm_90a"});
  PipelineOptions o;
  auto seq = names(run_pipeline(p, o));
  // Between each cp.async wait and the wgmma.mma after it: a proxy fence, then a barrier.
  std::vector<std::string> between;
  std::string run;
  for (auto& n : seq) {
    if (n == "copy_async_wait_group") run = "";
    else if (n == "fence.proxy_async" || n == "sync") run += n + " ";
    else if (n == "wgmma.mma") between.push_back(run);
  }
  EXPECT_EQ(between, (std::vector<std::string>{"fence.proxy_async sync ", "fence.proxy_async sync "}))
      << fmt::format("{}", fmt::join(seq, ", "));
}
