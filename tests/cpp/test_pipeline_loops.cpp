// The pipelining pass (issue 39): a loop marked num_stages becomes a ring of stages, TMA loads
// on mbarriers on sm_90 and cp.async groups on sm_80, the dot a wgmma with one group in flight
// on sm_90a; every wait and barrier comes from the later passes; loops it cannot rewrite are
// refused with the reason and the line.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "../../examples/cpp/matmul_auto.h"
#include "golden.h"
#include "message_of.h"
#include "tilus/ir/functor.h"
#include "tilus/passes/pipeline_loops.h"
#include "tilus/passes/verify_program.h"
#include "tilus/tilus.h"

using namespace tilus;

namespace {

// As a launch with 16-divisible sizes and 16-byte aligned pointers specializes it.
Program aligned(Program p) {
  for (size_t i = 0; i < p.kernels[0].params.size(); ++i) p.kernels[0].param_divisibility[int(i)] = 16;
  return p;
}

// The program after `stage` of the pipeline for `arch`.
Program after(const Program& traced, const std::string& arch, const std::string& stage = "pipeline_loops") {
  Program out;
  PipelineOptions o;
  o.target = arch == "cpu" ? Target::cpu() : Target::from_arch(arch);
  o.after_pass = [&](const std::string& name, const Program& p) {
    if (name == stage) out = p;
  };
  run_pipeline(traced, o);
  return out;
}

// The loop records of a kernel, outermost first.
std::vector<LoopPipeline> rings(const Program& p) {
  struct Collect : StmtVisitor {
    std::vector<LoopPipeline> out;
    void visit_for(const ForStmtNode& f) override {
      if (f.pipeline.requested()) out.push_back(f.pipeline);
      StmtVisitor::visit_for(f);
    }
  } c;
  c.visit(p.kernels[0].body);
  return c.out;
}

// The synchronization inside the ring's loop, in order; with `wgmma`, the wgmma.mma too, and
// what is inside an `if` in braces.
std::vector<std::string> loop_sync(const Program& p, bool wgmma = false) {
  struct Collect : StmtVisitor {
    std::vector<std::string> out;
    int depth = 0;
    bool wgmma = false;
    void visit_for(const ForStmtNode& f) override {
      depth += f.pipeline.requested();
      StmtVisitor::visit_for(f);
      depth -= f.pipeline.requested();
    }
    void visit_if(const IfStmtNode& n) override {
      if (depth && wgmma) out.push_back("if {");
      StmtVisitor::visit_if(n);
      if (depth && wgmma) out.push_back("}");
    }
    void visit_inst(const InstNode& i) override {
      if (!depth) return;
      if (wgmma && dynamic_cast<const WgmmaMmaInst*>(&i)) out.push_back("wgmma");
      if (dynamic_cast<const FenceProxyAsyncInst*>(&i)) out.push_back("fence.proxy.async");
      if (auto* w = dynamic_cast<const CopyAsyncWaitGroupInst*>(&i)) out.push_back(fmt::format("cp.async.wait({})", w->n));
      else if (auto* g = dynamic_cast<const WgmmaWaitGroupInst*>(&i)) out.push_back(fmt::format("wgmma.wait({})", g->n));
      else if (auto* m = dynamic_cast<const MbarrierInst*>(&i); m && m->op == MbarrierOp::Wait) out.push_back("mbarrier.wait");
      else if (i.kind() == InstKind::Sync) out.push_back("sync");
    }
  } c;
  c.wgmma = wgmma;
  c.visit(p.kernels[0].body);
  return c.out;
}

// The one ring of `traced` for `arch`: the program after pipeline_loops verifies and matches
// its golden file.
LoopPipeline golden_ring(const Program& traced, const std::string& arch, const std::string& golden) {
  Program p = after(traced, arch);
  EXPECT_NO_THROW(verify_program(p, Target::from_arch(arch)));
  EXPECT_TRUE(matches_golden(golden, print(p)));
  auto r = rings(p);
  EXPECT_EQ(r.size(), 1u);
  return r.empty() ? LoopPipeline{} : r[0];
}

}  // namespace

TEST(PipelineLoops, TheMarkIsRecordedAndPrinted) {
  std::string text = print(trace(examples::MatmulAuto{}));
  EXPECT_NE(text.find("for ko in range(0, (k + 64 - 1) / 64, 1) num_stages=4 {"), std::string::npos) << text;
  // Invalid marks are errors at the loop.
  struct Bad : Script {
    int64_t stages = 17;
    bool ws = false;
    void operator()(Int32 n) {
      attrs.blocks = {1};
      attrs.warps = 1;
      for (Expr i : range(n, {.num_stages = stages, .warp_specialize = ws})) (void)i;
    }
  };
  auto bad = [](int64_t stages, bool ws) {
    Bad b;
    b.stages = stages;
    b.ws = ws;
    return b;
  };
  EXPECT_NE(message_of<CompileError>([&] { trace(bad(17, false)); }).find("num_stages must be 1 to 16"),
            std::string::npos);
  EXPECT_NE(message_of<CompileError>([&] { trace(bad(1, true)); }).find("needs num_stages of 2 or more"),
            std::string::npos);
  // One stage is the loop as written.
  EXPECT_EQ(print(trace(bad(1, false))).find("num_stages"), std::string::npos);
}

TEST(PipelineLoops, Sm90RingIsTmaOnMbarriersWithOneWgmmaGroupInFlight) {
  LoopPipeline r = golden_ring(aligned(trace(examples::MatmulAuto{})), "sm_90a", "pipeline_loops_tma");
  EXPECT_EQ(r.ring, "tma");
  EXPECT_EQ(r.wgmma_in_flight, 1);
  // Through every pass: the wait on the stage's phase, the wgmma of the previous iteration
  // retired before its stage is refilled (after the one barrier, which the barrier pass adds).
  Program done = after(aligned(trace(examples::MatmulAuto{})), "sm_90a", "keep_wgmma_loops_rolled");
  EXPECT_EQ(loop_sync(done), (std::vector<std::string>{"mbarrier.wait", "wgmma.wait(1)", "sync"}));
}

TEST(PipelineLoops, WarpSpecializedPersistentRing) {
  examples::MatmulAuto m;
  m.warps = 8;
  m.block_n = 256;
  m.warp_specialize = m.persistent = true;
  LoopPipeline r = golden_ring(aligned(trace(m)), "sm_90a", "pipeline_loops_warp_specialized");
  EXPECT_EQ(r.schedule, "warp-specialized: warps 8-11 load (setmaxnreg 40), warps 0-7 compute (setmaxnreg 232); "
                        "persistent: 132 blocks walk the tiles in groups of 8 along blockIdx.x");
  Program p = after(aligned(trace(m)), "sm_90a");
  const Kernel& k = p.kernels[0];
  EXPECT_EQ(k.warps, 12);  // a producer warp group
  ASSERT_EQ(k.grid.size(), 1u);
  EXPECT_EQ(to_string(k.grid[0]), "min((m + 127) / 128 * ((n + 255) / 256), 132)");
  // Through every pass: the consumers wait on full stages and keep one wgmma group in flight;
  // no barrier in their loop (the groups meet through the mbarriers).
  Program done = after(aligned(trace(m)), "sm_90a", "keep_wgmma_loops_rolled");
  EXPECT_EQ(loop_sync(done), (std::vector<std::string>{"mbarrier.wait", "wgmma.wait(1)"}));
  // The CPU backend runs a block's threads in order: a persistent ring, no warp specialization.
  Program cpu = after(aligned(trace(m)), "cpu");
  auto c = rings(cpu);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(cpu.kernels[0].warps, 8);
  EXPECT_NE(c[0].note.find("warp_specialize: the CPU backend runs a block's threads in order"), std::string::npos);
  EXPECT_EQ(c[0].schedule, "persistent: 132 blocks walk the tiles in groups of 8 along blockIdx.x");
}

// The instructions of the kernel after the tile loop's ring, in order: what the epilogue became
// (store_shared with its lowering, the TMA store groups, the proxy fence and the barriers).
std::vector<std::string> epilogue_ops(const Program& p) {
  struct Collect : StmtVisitor {
    std::vector<std::string> out;
    int rings = 0;
    void visit_for(const ForStmtNode& f) override {
      if (f.pipeline.requested()) {
        ++rings;
        return;  // the ring's loop itself
      }
      StmtVisitor::visit_for(f);
    }
    void visit_inst(const InstNode& i) override {
      if (!rings) return;
      if (auto* s = dynamic_cast<const StoreSharedInst*>(&i))
        out.push_back(fmt::format("store_shared:{}", s->lowering.op == MachineOp::Stmatrix ? "stmatrix" : "other"));
      else if (auto* c = dynamic_cast<const CopyInst*>(&i); c && c->api == CopyApi::TmaSharedToGlobal)
        out.push_back(c->lowering.op == MachineOp::TmaStore ? "tma.store" : "copy:other");
      else if (auto* w = dynamic_cast<const TmaWaitGroupInst*>(&i))
        out.push_back(fmt::format("tma.wait_group({}{})", w->n, w->read ? ", read" : ""));
      else if (i.kind() == InstKind::TmaCommitGroup) out.push_back("tma.commit_group");
      else if (i.kind() == InstKind::FenceProxyAsync) out.push_back("fence.proxy.async");
      else if (i.kind() == InstKind::Sync) out.push_back("sync");
      else if (i.kind() == InstKind::StoreGlobal) out.push_back("store_global");
    }
  } c;
  c.visit(p.kernels[0].body);
  return c.out;
}

TEST(PipelineLoops, PersistentRingStoresItsTileThroughSharedMemoryAndTma) {
  examples::MatmulAuto m;
  m.warps = 8;
  m.block_n = 256;
  m.stages = 3;
  m.warp_specialize = m.persistent = true;
  LoopPipeline r = golden_ring(aligned(trace(m)), "sm_90a", "pipeline_loops_tma_epilogue");
  EXPECT_NE(r.schedule.find("; epilogue: registers -> shared [4, 128, 64] -> 4 TMA stores of [128, 64], during the "
                            "next tile's loop"),
            std::string::npos)
      << r.schedule;
  EXPECT_EQ(r.note, "");
  // Through every pass: one thread waits until the previous tile's stores have read the shared
  // tile, a barrier, the threads' stmatrix, the proxy fence and a barrier, four TMA stores of
  // one commit group; the last tile's stores are waited for before the block exits.
  Program done = after(aligned(trace(m)), "sm_90a", "keep_wgmma_loops_rolled");
  EXPECT_EQ(epilogue_ops(done),
            (std::vector<std::string>{"tma.wait_group(0, read)", "sync", "store_shared:stmatrix", "fence.proxy.async",
                                      "sync", "tma.store", "tma.store", "tma.store", "tma.store", "tma.commit_group",
                                      "tma.wait_group(0)"}));
  // The same on the CPU backend (no warp specialization there).
  Program cpu = after(aligned(trace(m)), "cpu");
  ASSERT_EQ(rings(cpu).size(), 1u);
  EXPECT_NE(rings(cpu)[0].schedule.find("epilogue: registers -> shared"), std::string::npos);
  // The one ring for sm_90a, aligned but for the parameter `unknown` (-1: none): where the store
  // stayed, the schedule names no epilogue and the note says why (`why`).
  auto kept_because = [&](int unknown, const std::string& why) {
    Program p = aligned(trace(m));
    p.kernels[0].param_divisibility.erase(unknown);
    auto r = rings(after(p, "sm_90a"));
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].schedule.find("epilogue"), std::string::npos);
    EXPECT_NE(r[0].note.find("epilogue: registers: " + why), std::string::npos) << r[0].note;
  };
  // Four stages of these tiles leave no room for the 64 KB tile.
  m.stages = 4;
  kept_because(-1, "the output tile's 65536 bytes and the ring's 196608 exceed the 232448 bytes a block has on "
                   "sm_90a (num_stages=3 would fit)");
  // n not known to be a multiple of 16 (rows of c not 16-byte aligned): TMA's rules, as
  // select_instructions applies them, refuse the store.
  m.stages = 3;
  kept_because(1, "the TMA store is not legal: global stride n of dim 0 is not a known multiple of 16 bytes");
  // k not known to be a multiple of 16: a ring of cp.async copies, behind which ptxas serialized
  // the wgmma of a kernel with this epilogue.
  kept_because(2, "the ring's loads are not TMA loads");
  // The Script may keep its store.
  m.epilogue = "registers";
  auto kept = rings(after(aligned(trace(m)), "sm_90a"));
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].schedule.find("epilogue"), std::string::npos);
  EXPECT_EQ(epilogue_ops(after(aligned(trace(m)), "sm_90a", "keep_wgmma_loops_rolled")),
            (std::vector<std::string>{"store_global"}));
  // epilogue is an option of a persistent ring, with two values.
  m.persistent = false;
  EXPECT_NE(message_of<CompileError>([&] { trace(m); }).find("is an option of a persistent ring"), std::string::npos);
  m.persistent = true;
  m.epilogue = "smem";
  EXPECT_NE(message_of<CompileError>([&] { trace(m); }).find("epilogue must be \"tma\", \"registers\" or None"),
            std::string::npos);
}

TEST(PipelineLoops, Sm80RingIsCpAsyncGroupsWithDerivedWaits) {
  LoopPipeline r = golden_ring(aligned(trace(examples::MatmulAuto{})), "sm_80", "pipeline_loops_cp_async");
  EXPECT_EQ(r.ring, "cp.async");
  EXPECT_EQ(r.note, "tma: sm_80 has no TMA");
  // num_stages - 2 groups stay in flight while a stage is read; one barrier per iteration.
  Program done = after(aligned(trace(examples::MatmulAuto{})), "sm_80", "keep_wgmma_loops_rolled");
  EXPECT_EQ(loop_sync(done), (std::vector<std::string>{"cp.async.wait(2)", "sync"}));
}

TEST(PipelineLoops, CopiesThatTmaCannotMakeRingOnCpAsync) {
  // Without the specialization the rows of a and b are not known to be 16-byte multiples.
  Program p = after(trace(examples::MatmulAuto{}), "sm_90a");
  auto r = rings(p);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].ring, "cp.async");
  EXPECT_NE(r[0].note.find("tma: not legal"), std::string::npos) << r[0].note;
}

namespace {

// A kernel whose pipelined loop's body the test writes.
using Body = std::function<void(Script&, GlobalTensor&, SharedTensor&, RegisterTensor&, const Expr&)>;
struct Loop : Script {
  static constexpr const char* param_names = "n, p, q";
  Body body;
  int64_t stages = 3;
  bool read_after = false;  // the epilogue stores the tile itself (read after the loop)
  void operator()(Int32 n, Ptr<f16> p, Ptr<f16> q) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto g = global_view(p, {n * 16, 64});
    auto s = shared_tensor(dtypes::float16, {16, 64});
    auto acc = register_tensor(dtypes::float32, {16, 64}, 0.0);
    for (Expr i : range(n, {.name = "i", .num_stages = stages})) body(*this, g, s, acc, i);
    store_global(global_view(q, {16, 64}), read_after ? load_shared(s) : acc.to(dtypes::float16), {.offsets = {0, 0}});
  }
};

Loop loop(Body body) {
  Loop l;
  l.body = std::move(body);
  return l;
}

std::string refusal(Body body) {
  PipelineOptions o;
  o.target = Target::from_arch("sm_90a");
  return message_of<CompileError>([&] { run_pipeline(aligned(trace(loop(body))), o); });
}

void copy_in(Script& k, GlobalTensor& g, SharedTensor& s, const Expr& i) {
  k.copy_async(g, s, {.offsets = {i * 16, 0}});
}
void consume(Script& k, SharedTensor& s, RegisterTensor& acc) { acc = acc + k.load_shared(s).to(dtypes::float32); }

}  // namespace

TEST(PipelineLoops, TheSimplestBodyRuns) {
  Program p = after(aligned(trace(loop([](Script& k, GlobalTensor& g, SharedTensor& s, RegisterTensor& acc,
                                          const Expr& i) {
                      copy_in(k, g, s, i);
                      consume(k, s, acc);
                    }))),
                    "sm_90a");
  auto r = rings(p);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].ring, "tma");
  EXPECT_EQ(r[0].wgmma_in_flight, 0);
}

TEST(PipelineLoops, RefusesWhatItCannotProve) {
  auto has = [](const std::string& msg, const std::string& what) {
    return msg.find("cannot pipeline this loop") != std::string::npos && msg.find(what) != std::string::npos &&
           msg.find("test_pipeline_loops.cpp:") != std::string::npos;
  };
  // A read of the tile before the iteration copies it: the previous iteration's tile.
  std::string m = refusal([](Script& k, GlobalTensor& g, SharedTensor& s, RegisterTensor& acc, const Expr& i) {
    consume(k, s, acc);
    copy_in(k, g, s, i);
  });
  EXPECT_TRUE(has(m, "reads `s` before")) << m;
  EXPECT_TRUE(has(m, "dependence through shared memory")) << m;
  // A copy under a condition.
  m = refusal([](Script& k, GlobalTensor& g, SharedTensor& s, RegisterTensor& acc, const Expr& i) {
    k.if_(i > 0, [&] { copy_in(k, g, s, i); });
    consume(k, s, acc);
  });
  EXPECT_TRUE(has(m, "copies no tile from global to shared memory at its top level")) << m;
  // Leaving an iteration early.
  m = refusal([](Script& k, GlobalTensor& g, SharedTensor& s, RegisterTensor& acc, const Expr& i) {
    copy_in(k, g, s, i);
    k.if_(i == 3, [&] { k.break_(); });
    consume(k, s, acc);
  });
  EXPECT_TRUE(has(m, "`break` at")) << m;
  // Waits written by hand.
  m = refusal([](Script& k, GlobalTensor& g, SharedTensor& s, RegisterTensor& acc, const Expr& i) {
    copy_in(k, g, s, i);
    k.copy_async_wait_all();
    k.sync();
    consume(k, s, acc);
  });
  EXPECT_TRUE(has(m, "derives its own waits and barriers")) << m;
  EXPECT_TRUE(has(m, "copy_async_wait_all")) << m;
  // Addresses computed by the iteration.
  m = refusal([](Script& k, GlobalTensor& g, SharedTensor& s, RegisterTensor& acc, const Expr& i) {
    ScalarVar row = k.declare("row", dtypes::int32, Expr(0));
    k.assign(row, i * 16);
    k.copy_async(g, s, {.offsets = {row, 0}});
    consume(k, s, acc);
  });
  EXPECT_TRUE(has(m, "addresses its tile with `row`")) << m;
  // A write of the memory the copies read.
  m = refusal([](Script& k, GlobalTensor& g, SharedTensor& s, RegisterTensor& acc, const Expr& i) {
    copy_in(k, g, s, i);
    consume(k, s, acc);
    k.store_global(g, acc.to(dtypes::float16), {.offsets = {i * 16 + 16, 0}});
  });
  EXPECT_TRUE(has(m, "writes global memory that")) << m;
  // Part of the tile.
  m = refusal([](Script& k, GlobalTensor& g, SharedTensor& s, RegisterTensor& acc, const Expr& i) {
    k.copy_async(g, s.slice({0, 0}, {0, 1}, {8, 64}), {.offsets = {i * 16, 0}});
    consume(k, s, acc);
  });
  EXPECT_TRUE(has(m, "fill 512 of its 1024 elements")) << m;
}

TEST(PipelineLoops, TileUsedAfterTheLoopIsRefused) {
  Loop l = loop([](Script& k, GlobalTensor& g, SharedTensor& s, RegisterTensor& acc, const Expr& i) {
    copy_in(k, g, s, i);
    consume(k, s, acc);
  });
  l.read_after = true;
  PipelineOptions o;
  o.target = Target::from_arch("sm_90a");
  std::string m = message_of<CompileError>([&] { run_pipeline(aligned(trace(l)), o); });
  EXPECT_NE(m.find("the pipelined tile `s` is used outside the loop"), std::string::npos) << m;
}

// A ring whose copies threads make (k of unknown divisor: 2 bytes at a time, generic st.shared),
// read by wgmma through the async proxy. The
// refill's barrier is inside `if (ko + 3 < steps)`, which the last 3 iterations skip: on that
// path the stages they read were written with no barrier or proxy fence after them (issue 39's
// race: MatmulAuto at 301 x 520 x 200 read wrong values under racecheck on an H200). Every
// iteration fences and synchronizes before its wgmma; the refill keeps its own barrier (the
// stage it overwrites was read by the other warp group's wgmma of the previous iteration).
TEST(PipelineLoops, RingOfGenericCopiesFencesAndSynchronizesBeforeEveryWgmma) {
  examples::MatmulAuto m;
  m.warps = 8;
  m.block_n = 256;
  Program sync_ring = after(trace(m), "sm_90a", "keep_wgmma_loops_rolled");
  ASSERT_EQ(rings(sync_ring).size(), 1u);
  EXPECT_EQ(rings(sync_ring)[0].ring, "cp.async");
  EXPECT_EQ(loop_sync(sync_ring, true), (std::vector<std::string>{"fence.proxy.async", "sync", "wgmma", "wgmma.wait(1)",
                                                                    "if {", "sync", "}"}));
}
