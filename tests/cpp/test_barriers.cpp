// The barrier-insertion pass: which shared-memory hazards get a barrier, where it goes, and
// that correctly synchronized kernels get none.
#include <gtest/gtest.h>

#include "../../examples/cpp/matmul_mma.h"
#include "../../examples/cpp/matmul_shared.h"
#include "../../examples/cpp/softmax.h"
#include "tilus/ir/functor.h"
#include "tilus/passes/insert_barriers.h"
#include "tilus/tilus.h"

using namespace tilus;

namespace {

// Barriers the pass adds to a traced kernel (the whole pipeline runs first).
int inserted(const Program& traced, Program* out = nullptr) {
  Program before;
  PipelineOptions o;
  o.dot_wgmma = DotWgmma::Never;  // the barriers of mma.sync kernels (wgmma's: test_passes)
  o.after_pass = [&](const std::string& name, const Program& p) {
    if (name == "plan_shared_memory") before = p;
  };
  Program after = run_pipeline(traced, o);
  int n = 0;
  insert_barriers(before, &n);
  if (out) *out = after;
  return n;
}

// The instructions of a kernel in order, by display name ("sync", "load_shared", ...).
std::vector<std::string> sequence(const Program& p) {
  struct Collect : StmtVisitor {
    std::vector<std::string> out;
    void visit_inst(const InstNode& i) override {
      std::string n = i.display_name();
      if (n == "sync" || n == "load_shared" || n == "store_shared" || n == "copy_async" || n == "copy")
        out.push_back(n);
    }
  } c;
  c.visit(p.kernels[0].body);
  return c.out;
}

using Body = std::function<void(Script&, Int32, Ptr<f32>)>;
struct K : Script {
  static constexpr const char* param_names = "n, p";
  Body body;
  int64_t warps = 4;
  void operator()(Int32 n, Ptr<f32> p) {
    attrs.blocks = {1};
    attrs.warps = warps;
    body(*this, n, p);
  }
};
Program traced(Body body) {
  K k;
  k.body = std::move(body);
  return trace(k);
}

}  // namespace

TEST(InsertBarriers, RawBetweenDifferentMappings) {
  Program out;
  EXPECT_EQ(inserted(traced([](Script& s, Int32 n, Ptr<f32> p) {
              auto t = s.shared_tensor(dtypes::float32, {32, 8});
              s.store_shared(t, s.register_tensor(dtypes::float32, {8, 32}, 1.0).transpose());
              auto g = s.global_view(p, {32, 8});
              s.store_global(g, s.load_shared(t), {.offsets = {0, 0}});
            }),
            &out),
            1);
  EXPECT_EQ(sequence(out), (std::vector<std::string>{"store_shared", "sync", "load_shared"}));
}

TEST(InsertBarriers, UserSyncIsCounted) {
  EXPECT_EQ(inserted(traced([](Script& s, Int32 n, Ptr<f32> p) {
              auto t = s.shared_tensor(dtypes::float32, {32, 8});
              s.store_shared(t, s.register_tensor(dtypes::float32, {8, 32}, 1.0).transpose());
              s.sync();
              s.store_global(s.global_view(p, {32, 8}), s.load_shared(t), {.offsets = {0, 0}});
            })),
            0);
}

TEST(InsertBarriers, SameLayoutSameViewIsThreadPrivate) {
  auto kernel = [](DataType dt) {
    return traced([dt](Script& s, Int32 n, Ptr<f32> p) {
      auto t = s.shared_tensor(dt, {16, 64});
      auto r = s.register_tensor(dt, {16, 64}, 1.0);
      s.store_shared(t, r);
      s.store_global(s.global_view(p, {16, 64}), s.load_shared(t).to(dtypes::float32), {.offsets = {0, 0}});
    });
  };
  EXPECT_EQ(inserted(kernel(dtypes::float32)), 0);
  // The lowering record says these 16-bit accesses are per-thread vectors, not ldmatrix.
  EXPECT_EQ(inserted(kernel(dtypes::float16)), 0);
}

TEST(InsertBarriers, ReplicatedLayoutsAreNotThreadPrivate) {
  // 32 elements over 128 threads: each element has 4 owners. One of them stores it, all of
  // them load it, so the other three read what another thread wrote.
  EXPECT_EQ(inserted(traced([](Script& s, Int32 n, Ptr<f32> p) {
              auto t = s.shared_tensor(dtypes::float32, {4, 8});
              s.store_shared(t, s.register_tensor(dtypes::float32, {4, 8}, 1.0));
              s.store_global(s.global_view(p, {4, 8}), s.load_shared(t), {.offsets = {0, 0}});
            })),
            1);
}

TEST(InsertBarriers, ReadsNeverConflict) {
  EXPECT_EQ(inserted(traced([](Script& s, Int32 n, Ptr<f32> p) {
              auto t = s.shared_tensor(dtypes::float32, {32, 8});
              s.store_shared(t, s.register_tensor(dtypes::float32, {32, 8}, 1.0));
              s.sync();
              auto a = s.load_shared(t);
              auto b = s.load_shared(t).transpose().transpose();
              s.store_global(s.global_view(p, {32, 8}), a + b, {.offsets = {0, 0}});
            })),
            0);
}

TEST(InsertBarriers, AsyncCopyThenRead) {
  Program out;
  EXPECT_EQ(inserted(traced([](Script& s, Int32 n, Ptr<f32> p) {
              auto g = s.global_view(p, {n, 64});
              auto t = s.shared_tensor(dtypes::float32, {16, 64});
              s.copy_async(g, t, {.offsets = {0, 0}});
              s.copy_async_commit_group();
              s.copy_async_wait_all();
              s.store_global(g, s.load_shared(t).transpose().transpose() + 1.0f, {.offsets = {0, 0}});
            }),
            &out),
            1);
  EXPECT_EQ(sequence(out), (std::vector<std::string>{"copy_async", "sync", "load_shared"}));
}

TEST(InsertBarriers, ConstantSlicesAreDisjoint) {
  EXPECT_EQ(inserted(traced([](Script& s, Int32 n, Ptr<f32> p) {
              auto g = s.global_view(p, {n, 64});
              auto t = s.shared_tensor(dtypes::float32, {2, 16, 64});
              s.copy_async(g, t[0], {.offsets = {0, 0}});
              s.copy_async_commit_group();
              s.copy_async_wait_all();
              s.sync();
              s.copy_async(g, t[1], {.offsets = {16, 0}});  // while t[0] is read below
              s.copy_async_commit_group();
              s.store_global(g, s.load_shared(t[0]), {.offsets = {0, 0}});
              s.copy_async_wait_all();
            })),
            0);
}

// A double-buffered loop without any sync: the read of buffer i % 2 must finish before
// iteration i + 1 refills it (WAR, loop-carried), and the refill must land before it is read
// (RAW): two barriers per iteration, in the body.
TEST(InsertBarriers, DoubleBufferedLoopWithoutSyncs) {
  Program out;
  EXPECT_EQ(inserted(traced([](Script& s, Int32 n, Ptr<f32> p) {
              auto g = s.global_view(p, {n, 64});
              auto t = s.shared_tensor(dtypes::float32, {2, 16, 64});
              auto acc = s.register_tensor(dtypes::float32, {16, 64}, 0.0);
              s.copy_async(g, t[0], {.offsets = {0, 0}});
              s.copy_async_commit_group();
              for (Expr i : s.range(n)) {
                s.copy_async(g, t[(i + 1) % 2], {.offsets = {(i + 1) * 16, 0}});
                s.copy_async_commit_group();
                s.copy_async_wait_group(1);
                acc = acc + s.load_shared(t[i % 2]).transpose().transpose();
              }
              s.store_global(g, acc, {.offsets = {0, 0}});
            }),
            &out),
            2);
  EXPECT_EQ(sequence(out), (std::vector<std::string>{"copy_async", "sync", "copy_async", "sync", "load_shared"}));
}

// The same loop as the examples write it (a sync after the wait) needs nothing more.
TEST(InsertBarriers, ExamplesNeedNoExtraBarriers) {
  EXPECT_EQ(inserted(trace(examples::MatmulMma{})), 0);
  EXPECT_EQ(inserted(trace(examples::MatmulShared{})), 0);
  EXPECT_EQ(inserted(trace(examples::Softmax{})), 0);
}

// Two tensors the planner puts on the same bytes: the second's first write waits for every
// thread to finish reading the first.
TEST(InsertBarriers, ReusedBytesAreAHazard) {
  Program out;
  EXPECT_EQ(inserted(traced([](Script& s, Int32 n, Ptr<f32> p) {
              auto g = s.global_view(p, {32, 32});
              auto a = s.shared_tensor(dtypes::float32, {32, 32});
              s.store_shared(a, s.register_tensor(dtypes::float32, {32, 32}, 1.0));
              s.sync();
              s.store_global(g, s.load_shared(a).transpose(), {.offsets = {0, 0}});
              auto b = s.shared_tensor(dtypes::float32, {32, 32});
              s.store_shared(b, s.register_tensor(dtypes::float32, {32, 32}, 2.0).transpose());
              s.sync();
              s.store_global(g, s.load_shared(b), {.offsets = {0, 0}});
            }),
            &out),
            1);
  EXPECT_EQ(sequence(out),
            (std::vector<std::string>{"store_shared", "sync", "load_shared", "sync", "store_shared", "sync",
                                      "load_shared"}));
}

TEST(InsertBarriers, BarrierGoesBeforeADivergentBranch) {
  Program out;
  EXPECT_EQ(inserted(traced([](Script& s, Int32 n, Ptr<f32> p) {
              auto t = s.shared_tensor(dtypes::float32, {32, 8});
              s.store_shared(t, s.register_tensor(dtypes::float32, {32, 8}, 1.0));
              s.sync();
              auto r = s.load_shared(t);
              s.single_warp(0, [&] {});  // nothing
              s.if_(Expr(builtin::thread_idx()) < 64, [&] {
                s.store_shared(t, s.register_tensor(dtypes::float32, {8, 32}, 3.0).transpose());
              });
              s.store_global(s.global_view(p, {32, 8}), r, {.offsets = {0, 0}});
            }),
            &out),
            1);
  EXPECT_EQ(sequence(out), (std::vector<std::string>{"store_shared", "sync", "load_shared", "sync", "store_shared"}));
}

TEST(InsertBarriers, HazardInsideADivergentBranchIsAnError) {
  try {
    inserted(traced([](Script& s, Int32 n, Ptr<f32> p) {
      auto t = s.shared_tensor(dtypes::float32, {32, 8});
      s.if_(Expr(builtin::thread_idx()) < 64, [&] {
        s.store_shared(t, s.register_tensor(dtypes::float32, {8, 32}, 3.0).transpose());
        s.store_global(s.global_view(p, {32, 8}), s.load_shared(t), {.offsets = {0, 0}});
      });
    }));
    FAIL() << "expected a CompileError";
  } catch (const CompileError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("load_shared at"), std::string::npos) << m;
    EXPECT_NE(m.find("after store_shared at"), std::string::npos) << m;
    EXPECT_NE(m.find("test_barriers.cpp"), std::string::npos) << m;
    EXPECT_NE(m.find("depends on the thread index"), std::string::npos) << m;
  }
}

TEST(InsertBarriers, UniformBranchGetsItsBarrierInside) {
  Program out;
  EXPECT_EQ(inserted(traced([](Script& s, Int32 n, Ptr<f32> p) {
              auto t = s.shared_tensor(dtypes::float32, {32, 8});
              s.if_(n > 3, [&] {
                s.store_shared(t, s.register_tensor(dtypes::float32, {8, 32}, 3.0).transpose());
                s.store_global(s.global_view(p, {32, 8}), s.load_shared(t), {.offsets = {0, 0}});
              });
            }),
            &out),
            1);
  EXPECT_EQ(sequence(out), (std::vector<std::string>{"store_shared", "sync", "load_shared"}));
}

TEST(InsertBarriers, ThreadGroups) {
  // A warp writes, the block reads: a block-wide barrier after the group.
  Program out;
  EXPECT_EQ(inserted(traced([](Script& s, Int32 n, Ptr<f32> p) {
              auto t = s.shared_tensor(dtypes::float32, {8, 32});
              s.single_warp(1, [&] { s.store_shared(t, s.register_tensor(dtypes::float32, {8, 32}, 3.0)); });
              s.store_global(s.global_view(p, {8, 32}), s.load_shared(t), {.offsets = {0, 0}});
            }),
            &out),
            1);
  EXPECT_EQ(sequence(out), (std::vector<std::string>{"store_shared", "sync", "load_shared"}));
  // A hazard inside the group: the group's own barrier, inside it.
  std::string text;
  EXPECT_EQ(inserted(traced([](Script& s, Int32 n, Ptr<f32> p) {
              auto t = s.shared_tensor(dtypes::float32, {8, 32});
              s.warp_group(0, 2, [&] {
                s.store_shared(t, s.register_tensor(dtypes::float32, {32, 8}, 3.0).transpose());
                auto r = s.load_shared(t);  // another thread mapping than the store's
                s.annotate_layout(r, spatial({8, 8}) * local({1, 4}));
                s.store_global(s.global_view(p, {8, 32}), r, {.offsets = {0, 0}});
              });
            }),
            &out),
            1);
  text = print(out);
  size_t group = text.find("warp_group"), sync = text.find("sync()");
  EXPECT_NE(group, std::string::npos) << text;
  EXPECT_GT(sync, group) << text;
}

TEST(InsertBarriers, NestedLoops) {
  // The outer loop rewrites the tile the inner loop reads: a barrier before the rewrite
  // (the previous outer iteration's reads) and one before the reads.
  Program out;
  EXPECT_EQ(inserted(traced([](Script& s, Int32 n, Ptr<f32> p) {
              auto g = s.global_view(p, {n, 64});
              auto t = s.shared_tensor(dtypes::float32, {16, 64});
              auto acc = s.register_tensor(dtypes::float32, {64, 16}, 0.0);
              for (Expr i : s.range(n)) {
                auto x = s.load_global(g, {.offsets = {i * 16, 0}, .shape = {16, 64}});
                s.annotate_layout(x, spatial({16, 8}) * local({1, 8}));  // not the reads' mapping
                s.store_shared(t, x);
                for (Expr j : s.range(4)) acc = acc + s.load_shared(t).transpose();
              }
              s.store_global(g, acc.transpose(), {.offsets = {0, 0}});
            }),
            &out),
            2);
  EXPECT_EQ(sequence(out), (std::vector<std::string>{"sync", "store_shared", "sync", "load_shared"}));
}

namespace {
// A shared write, `barrier`, then a read of it in another mapping (a hazard unless `barrier`
// separates them).
void hazard(Script& s, Ptr<f32> p, const std::function<void()>& barrier) {
  auto t = s.shared_tensor(dtypes::float32, {32, 8});
  s.store_shared(t, s.register_tensor(dtypes::float32, {8, 32}, 1.0).transpose());
  barrier();
  s.store_global(s.global_view(p, {32, 8}), s.load_shared(t), {.offsets = {0, 0}});
}
}  // namespace

// The thread-level barriers of seed 004: a named barrier over the current group (the block, or a
// warp group with the default count) separates like sync(); __syncwarp does for a group inside
// one warp only.
TEST(InsertBarriers, NamedBarriersAndWarpSyncSeparateTheirGroup) {
  EXPECT_EQ(inserted(traced([&](Script& s, Int32, Ptr<f32> p) { hazard(s, p, [&] { s.sync_threads(1); }); })), 0);
  EXPECT_EQ(inserted(traced([&](Script& s, Int32, Ptr<f32> p) { hazard(s, p, [&] { s.sync_threads(); }); })), 0);
  EXPECT_EQ(inserted(traced([&](Script& s, Int32, Ptr<f32> p) {
              s.warp_group(0, 4, [&] { hazard(s, p, [&] { s.sync_threads(2); }); });
            })),
            0);
  // __syncwarp does not order the 4 warps of the block.
  EXPECT_EQ(inserted(traced([&](Script& s, Int32, Ptr<f32> p) { hazard(s, p, [&] { s.sync_warp(); }); })), 1);
  EXPECT_EQ(inserted(traced([&](Script& s, Int32, Ptr<f32> p) {
              s.single_warp(1, [&] { hazard(s, p, [&] { s.sync_warp(); }); });
            })),
            0);
}

// named_barrier_arrive waits for nothing, so it separates nothing: the hazard gets a barrier of its
// own. Sibling groups that meet at a named barrier run at once (waits_on_siblings), like groups
// that wait on mbarriers.
TEST(InsertBarriers, NamedBarrierArriveSeparatesNothing) {
  EXPECT_EQ(inserted(traced([&](Script& s, Int32, Ptr<f32> p) {
              s.thread_group(0, 64, [&] { hazard(s, p, [&] { s.named_barrier_arrive(3, 128); }); });
            })),
            1);
  auto group = [](Script& s, int64_t begin, const std::function<void()>& body) { s.thread_group(begin, 64, body); };
  Program met = traced([&](Script& s, Int32, Ptr<f32>) {
    group(s, 0, [&] { s.named_barrier_arrive(3, 128); });
    group(s, 64, [&] { s.sync_threads(3, 128); });
  });
  Program apart = traced([&](Script& s, Int32, Ptr<f32>) {
    group(s, 0, [&] { s.sync_threads(3, 64); });
    group(s, 64, [&] { s.sync_threads(4, 64); });
  });
  auto siblings = [](const Program& p) {
    auto& seq = static_cast<const SeqStmtNode&>(*p.kernels[0].body);
    std::vector<Stmt> groups;
    for (auto& c : seq.stmts)
      if (c && c->kind == StmtKind::ThreadGroup) groups.push_back(c);
    return waits_on_siblings(groups);
  };
  EXPECT_TRUE(siblings(met));
  EXPECT_FALSE(siblings(apart));  // each group's own barrier
}
