// The async-wait pass: where commits and waits are inserted, with which n, and that kernels
// that wait correctly get none.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "../../examples/cpp/matmul_mma.h"
#include "../../examples/cpp/matmul_pipelined.h"
#include "../../examples/cpp/matmul_shared.h"
#include "tilus/ir/functor.h"
#include "tilus/passes/insert_async_waits.h"
#include "tilus/tilus.h"

using namespace tilus;

namespace {

// The pipeline up to the wait pass, then the pass alone: (inserted, program).
std::pair<int, Program> waits(const Program& traced, bool strict = false) {
  Program before;
  PipelineOptions o;
  o.dot_wgmma = DotWgmma::Never;  // the cp.async pipelines of mma.sync kernels (wgmma's: test_passes)
  o.after_pass = [&](const std::string& name, const Program& p) {
    if (name == "select_instructions") before = p;
  };
  run_pipeline(traced, o);
  int n = 0;
  Program after = insert_async_waits(before, strict, &n);
  return {n, after};
}

// As a launch with 16-divisible sizes and 16-byte aligned pointers specializes it (without
// alignment, cp.async has no legal vector and copies synchronously, element by element).
Program aligned(Program p) {
  for (size_t i = 0; i < p.kernels[0].params.size(); ++i) p.kernels[0].param_divisibility[int(i)] = 16;
  return p;
}

// copy / commit / wait(n) / wait_all / read, in order.
std::vector<std::string> sequence(const Program& p) {
  struct Collect : StmtVisitor {
    std::vector<std::string> out;
    void visit_inst(const InstNode& i) override {
      if (auto* w = dynamic_cast<const CopyAsyncWaitGroupInst*>(&i)) out.push_back(fmt::format("wait({})", w->n));
      else if (i.kind() == InstKind::CopyAsync) out.push_back("copy");
      else if (i.kind() == InstKind::CopyAsyncCommitGroup) out.push_back("commit");
      else if (i.kind() == InstKind::CopyAsyncWaitAll) out.push_back("wait_all");
      else if (i.kind() == InstKind::LoadShared) out.push_back("read");
    }
  } c;
  c.visit(p.kernels[0].body);
  return c.out;
}

using Body = std::function<void(Script&, GlobalTensor&)>;
struct K : Script {
  static constexpr const char* param_names = "n, p";
  Body body;
  void operator()(Int32 n, Ptr<f32> p) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto g = global_view(p, {n, 64});
    body(*this, g);
  }
};
Program traced(Body body) {
  K k;
  k.body = std::move(body);
  return trace(k);
}
using Seq = std::vector<std::string>;

}  // namespace

TEST(InsertAsyncWaits, UncommittedCopyIsCommittedAndWaited) {
  auto [n, p] = waits(traced([](Script& s, GlobalTensor& g) {
    auto t = s.shared_tensor(dtypes::float32, {16, 64});
    s.copy_async(g, t, {.offsets = {0, 0}});
    s.store_global(g, s.load_shared(t), {.offsets = {0, 0}});
  }));
  EXPECT_EQ(n, 2);
  EXPECT_EQ(sequence(p), (Seq{"copy", "commit", "wait(0)", "read"}));
}

TEST(InsertAsyncWaits, UserWaitsAreRespected) {
  auto [n, p] = waits(traced([](Script& s, GlobalTensor& g) {
    auto t = s.shared_tensor(dtypes::float32, {16, 64});
    s.copy_async(g, t, {.offsets = {0, 0}});
    s.copy_async_commit_group();
    s.copy_async_wait_all();
    s.store_global(g, s.load_shared(t), {.offsets = {0, 0}});
  }));
  EXPECT_EQ(n, 0);
  EXPECT_EQ(sequence(p), (Seq{"copy", "commit", "wait_all", "read"}));
}

TEST(InsertAsyncWaits, LargestNThatCoversTheRead) {
  // Three groups; reading the first leaves the two later ones in flight.
  auto [n, p] = waits(traced([](Script& s, GlobalTensor& g) {
    auto t = s.shared_tensor(dtypes::float32, {3, 16, 64});
    for (int64_t i = 0; i < 3; ++i) {
      s.copy_async(g, t[i], {.offsets = {i * 16, 0}});
      s.copy_async_commit_group();
    }
    auto x = s.load_shared(t[0]);
    auto y = s.load_shared(t[2]);
    s.store_global(g, x + y, {.offsets = {0, 0}});
  }));
  EXPECT_EQ(n, 2);
  EXPECT_EQ(sequence(p), (Seq{"copy", "commit", "copy", "commit", "copy", "commit", "wait(2)", "read", "wait(0)",
                              "read"}));
}

TEST(InsertAsyncWaits, ReadsOfOtherBuffersNeedNoWait) {
  auto [n, p] = waits(traced([](Script& s, GlobalTensor& g) {
    auto t = s.shared_tensor(dtypes::float32, {2, 16, 64});
    s.copy_async(g, t[0], {.offsets = {0, 0}});
    s.copy_async_commit_group();
    s.copy_async_wait_all();
    s.copy_async(g, t[1], {.offsets = {16, 0}});
    s.store_global(g, s.load_shared(t[0]), {.offsets = {0, 0}});  // t[1] still in flight
    s.copy_async_commit_group();
    s.copy_async_wait_all();
  }));
  EXPECT_EQ(n, 0);
}

TEST(InsertAsyncWaits, WriteAfterAsyncWriteWaits) {
  auto [n, p] = waits(traced([](Script& s, GlobalTensor& g) {
    auto t = s.shared_tensor(dtypes::float32, {16, 64});
    s.copy_async(g, t, {.offsets = {0, 0}});
    s.copy_async_commit_group();
    s.copy_async(g, t, {.offsets = {16, 0}});  // the same bytes: the first must land first
    s.copy_async_commit_group();
    s.copy_async_wait_all();
  }));
  EXPECT_EQ(n, 1);
  EXPECT_EQ(sequence(p), (Seq{"copy", "commit", "wait(0)", "copy", "commit", "wait_all"}));
}

TEST(InsertAsyncWaits, ExamplesThatWaitGetNothing) {
  EXPECT_EQ(waits(aligned(trace(examples::MatmulMma{}))).first, 0);
  EXPECT_EQ(waits(aligned(trace(examples::MatmulShared{}))).first, 0);
}

// The pipelined matmul with no waits: one wait per iteration, before the reads, with
// n = stages - 1: the tile being read is the oldest of the stages in flight, so the
// stages - 1 newer ones (this iteration's included) keep loading.
TEST(InsertAsyncWaits, PipelineKeepsItsStagesInFlight) {
  for (int64_t stages : {2, 3, 4}) {
    SCOPED_TRACE(stages);
    examples::MatmulPipelined m;
    m.stages = stages;
    auto [n, p] = waits(aligned(trace(m)));
    EXPECT_EQ(n, 1);
    Seq want;
    for (int64_t s = 0; s + 1 < stages; ++s) want.insert(want.end(), {"copy", "copy", "commit"});
    want.insert(want.end(), {"copy", "copy", "commit", fmt::format("wait({})", stages - 1), "read", "read"});
    EXPECT_EQ(sequence(p), want);
  }
}

TEST(InsertAsyncWaits, DoubleBufferedLoop) {
  auto [n, p] = waits(traced([](Script& s, GlobalTensor& g) {
    auto t = s.shared_tensor(dtypes::float32, {2, 16, 64});
    auto acc = s.register_tensor(dtypes::float32, {16, 64}, 0.0);
    s.copy_async(g, t[0], {.offsets = {0, 0}});
    for (Expr i : s.range(7)) {
      s.copy_async(g, t[(i + 1) % 2], {.offsets = {(i + 1) * 16, 0}});
      acc = acc + s.load_shared(t[i % 2]);
    }
    s.store_global(g, acc, {.offsets = {0, 0}});
  }));
  // Nothing is committed by the kernel: the commit goes just before the first read that
  // needs it, so the loop's copy joins the group and the read waits for all of it.
  EXPECT_EQ(sequence(p), (Seq{"copy", "copy", "commit", "wait(0)", "read"}));
  EXPECT_EQ(n, 2);
}

TEST(InsertAsyncWaits, BranchesAndNestedLoops) {
  auto [n, p] = waits(traced([](Script& s, GlobalTensor& g) {
    auto t = s.shared_tensor(dtypes::float32, {16, 64});
    auto acc = s.register_tensor(dtypes::float32, {16, 64}, 0.0);
    for (Expr i : s.range(3)) {
      s.if_(i % 2 == 0, [&] { s.copy_async(g, t, {.offsets = {i * 16, 0}}); });
      s.copy_async_commit_group();
      for (Expr j : s.range(2)) acc = acc + s.load_shared(t);
    }
    s.store_global(g, acc, {.offsets = {0, 0}});
  }));
  EXPECT_EQ(n, 1);
  EXPECT_EQ(sequence(p), (Seq{"copy", "commit", "wait(0)", "read"}));
}

TEST(InsertAsyncWaits, StrictModeNamesTheCopyAndTheRead) {
  try {
    waits(traced([](Script& s, GlobalTensor& g) {
            auto t = s.shared_tensor(dtypes::float32, {16, 64});
            s.copy_async(g, t, {.offsets = {0, 0}});
            s.copy_async_commit_group();
            s.store_global(g, s.load_shared(t), {.offsets = {0, 0}});
          }),
          true);
    FAIL() << "expected a CompileError";
  } catch (const CompileError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("load_shared at"), std::string::npos) << m;
    EXPECT_NE(m.find("copy_async at"), std::string::npos) << m;
    EXPECT_EQ(std::count(m.begin(), m.end(), ':') >= 4, true) << m;  // both file:line
  }
}
