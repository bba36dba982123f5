// The shared-memory planning pass, run alone on IR traced with the C++ API: live ranges,
// placement, alignment, sizes and the target's limit.
#include <gtest/gtest.h>

#include "golden.h"
#include "tilus/ir/functor.h"
#include "tilus/passes/plan_shared_memory.h"
#include "tilus/tilus.h"

using namespace tilus;

namespace {

// The planned offsets of a kernel's shared_tensor allocations, in program order.
std::vector<int64_t> offsets(const Kernel& k) {
  struct Collect : StmtVisitor {
    std::vector<int64_t> out;
    void visit_inst(const InstNode& i) override {
      if (auto a = dynamic_cast<const AllocateSharedInst*>(&i)) out.push_back(a->offset);
    }
  } c;
  c.visit(k.body);
  return c.out;
}

Kernel plan(const Program& p, const std::string& arch = "sm_90a") {
  return plan_shared_memory(p, Target::from_arch(arch)).kernels.at(0);
}

using Offsets = std::vector<int64_t>;

// The line of the allocation a failing Script expects the error at.
int expected_line = 0;

// Two [64, 32] / [32, 64] float16 tiles (4096 bytes each) used together.
struct BothLive : Script {
  void operator()(Int32 n) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto a = shared_tensor(dtypes::float16, {64, 32});
    auto b = shared_tensor(dtypes::float16, {32, 64});
    store_shared(a, register_tensor(dtypes::float16, {64, 32}, 1.0));
    store_shared(b, register_tensor(dtypes::float16, {32, 64}, 2.0));
    auto c = dot(load_shared(a), load_shared(b));
    (void)c;
  }
};

}  // namespace

TEST(SharedMemoryPlan, UnsetBeforeThePass) {
  Program p = trace(BothLive{});
  EXPECT_EQ(offsets(p.kernels[0]), (Offsets{-1, -1}));
  EXPECT_EQ(p.kernels[0].shared_memory_bytes, 0);
}

TEST(SharedMemoryPlan, TensorsLiveTogetherAreDisjoint) {
  Kernel k = plan(trace(BothLive{}));
  EXPECT_EQ(offsets(k), (Offsets{0, 4096}));
  EXPECT_EQ(k.shared_memory_bytes, 8192);
}

TEST(SharedMemoryPlan, FreedTensorsShareOffsetZero) {
  struct K : Script {
    void operator()(Int32 n) {
      attrs.blocks = {1};
      attrs.warps = 4;
      auto a = shared_tensor(dtypes::float32, {128});  // 512 bytes
      store_shared(a, register_tensor(dtypes::float32, {128}, 1.0));
      auto x = load_shared(a);
      free_shared(a);
      auto b = shared_tensor(dtypes::float32, {256});  // 1024 bytes, after a is gone
      store_shared(b, register_tensor(dtypes::float32, {256}, 2.0));
      auto y = load_shared(b);
      (void)x, (void)y;
    }
  };
  Kernel k = plan(trace(K{}));
  EXPECT_EQ(offsets(k), (Offsets{0, 0}));
  EXPECT_EQ(k.shared_memory_bytes, 1024);
}

TEST(SharedMemoryPlan, FreeSharedEndsTheRangeEvenWithoutLaterUses) {
  // a is last read before b exists, but freed only after b's allocation: they overlap.
  struct K : Script {
    void operator()(Int32 n) {
      attrs.blocks = {1};
      attrs.warps = 4;
      auto a = shared_tensor(dtypes::float32, {128});
      auto x = load_shared(a);
      auto b = shared_tensor(dtypes::float32, {128});
      free_shared(a);
      auto y = load_shared(b);
      (void)x, (void)y;
    }
  };
  EXPECT_EQ(offsets(plan(trace(K{}))), (Offsets{0, 512}));
}

namespace {
// a is read at the top of a loop and b is allocated after that read, in the same body:
// without the loop, a's bytes would be free for b.
struct LoopCarried : Script {
  bool loop = true;
  void operator()(Int32 n) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto a = shared_tensor(dtypes::float32, {256});
    store_shared(a, register_tensor(dtypes::float32, {256}, 1.0));
    auto body = [&] {
      auto x = load_shared(a);
      auto b = shared_tensor(dtypes::float32, {256});
      store_shared(b, x);
      auto y = load_shared(b);
      (void)y;
    };
    if (loop) {
      for (Expr i : range(4)) body();
    } else {
      body();
    }
  }
};
}  // namespace

TEST(SharedMemoryPlan, TensorsUsedInALoopStayLiveForTheWholeLoop) {
  EXPECT_EQ(offsets(plan(trace(LoopCarried{}))), (Offsets{0, 1024}));
  LoopCarried flat;
  flat.loop = false;
  EXPECT_EQ(offsets(plan(trace(flat))), (Offsets{0, 0}));
}

TEST(SharedMemoryPlan, OnlyLoopsOutsideTheAllocationExtendIt) {
  // a lives inside one outer iteration: allocated in the outer body and used in the inner
  // loop, it stays live to the inner loop's end and no further, so b (after the inner loop)
  // takes its bytes. c, allocated before both loops and read in the inner one, is live
  // through the whole outer loop, so neither a nor b may touch it.
  struct K : Script {
    void operator()(Int32 n) {
      attrs.blocks = {1};
      attrs.warps = 4;
      auto c = shared_tensor(dtypes::float32, {512});  // 2048 bytes each
      for (Expr i : range(n)) {
        auto a = shared_tensor(dtypes::float32, {512});
        for (Expr j : range(4)) store_shared(a, load_shared(c));
        auto b = shared_tensor(dtypes::float32, {512});
        store_shared(b, register_tensor(dtypes::float32, {512}, 1.0));
      }
    }
  };
  EXPECT_EQ(offsets(plan(trace(K{}))), (Offsets{0, 2048, 2048}));
}

TEST(SharedMemoryPlan, SlicesKeepTheirBaseAlive) {
  // v = a[1] and w = v[0] are views of a: reading w after b's allocation keeps a live.
  struct K : Script {
    bool read_view_late = true;
    void operator()(Int32 n) {
      attrs.blocks = {1};
      attrs.warps = 4;
      auto a = shared_tensor(dtypes::float32, {2, 2, 32});  // 512 bytes
      auto v = a[1];
      auto w = v[0];
      store_shared(a, register_tensor(dtypes::float32, {2, 2, 32}, 1.0));
      auto b = shared_tensor(dtypes::float32, {128});
      store_shared(b, register_tensor(dtypes::float32, {128}, 2.0));
      if (read_view_late) load_shared(w);
    }
  };
  K late;
  EXPECT_EQ(offsets(plan(trace(late))), (Offsets{0, 512}));
  K early;
  early.read_view_late = false;
  EXPECT_EQ(offsets(plan(trace(early))), (Offsets{0, 0}));
}

TEST(SharedMemoryPlan, EveryOffsetIs128ByteAligned) {
  // 100, 36 and 260 bytes, all live together: placed largest first at 0, then 384, 512.
  struct K : Script {
    void operator()(Int32 n) {
      attrs.blocks = {1};
      attrs.warps = 1;
      auto a = shared_tensor(dtypes::float32, {25});
      auto b = shared_tensor(dtypes::int8, {36});
      auto c = shared_tensor(dtypes::float32, {65});
      load_shared(a), load_shared(b), load_shared(c);
    }
  };
  Kernel k = plan(trace(K{}));
  EXPECT_EQ(offsets(k), (Offsets{384, 512, 0}));
  for (int64_t o : offsets(k)) EXPECT_EQ(o % 128, 0) << o;
  EXPECT_EQ(k.shared_memory_bytes, 512 + 36);  // the total is the highest end, unpadded
}

TEST(SharedMemoryPlan, LargestFirstTiesInProgramOrderReuseGaps) {
  // Sizes 256, 1024, 256, 512. x (1024) and the first y (256) are live with everything;
  // z (512) dies before the second y (256) is born, which then fits in z's bytes.
  struct K : Script {
    void operator()(Int32 n) {
      attrs.blocks = {1};
      attrs.warps = 1;
      auto y1 = shared_tensor(dtypes::float32, {64});
      auto x = shared_tensor(dtypes::float32, {256});
      auto z = shared_tensor(dtypes::float32, {128});
      load_shared(z);
      auto y2 = shared_tensor(dtypes::float32, {64});
      load_shared(y1), load_shared(x), load_shared(y2);
    }
  };
  Kernel k = plan(trace(K{}));
  // x at 0; z at 1024; y1 (first of the 256s) at 1536; y2 at 1024, in z's old bytes.
  EXPECT_EQ(offsets(k), (Offsets{1536, 0, 1024, 1024}));
  EXPECT_EQ(k.shared_memory_bytes, 1792);
}

TEST(SharedMemoryPlan, SubByteTensorsArePacked) {
  struct K : Script {
    void operator()(Int32 n) {
      attrs.blocks = {1};
      attrs.warps = 1;
      auto a = shared_tensor(dtypes::int4, {33});  // 132 bits: 17 bytes
      auto b = shared_tensor(dtypes::float6_e3m2, {3});  // 18 bits: 3 bytes
      load_shared(a), load_shared(b);
    }
  };
  Kernel k = plan(trace(K{}));
  EXPECT_EQ(offsets(k), (Offsets{0, 128}));
  EXPECT_EQ(k.shared_memory_bytes, 128 + 3);
  struct Alone : Script {
    void operator()(Int32 n) {
      attrs.blocks = {1};
      attrs.warps = 1;
      load_shared(shared_tensor(dtypes::int4, {33}));
    }
  };
  EXPECT_EQ(plan(trace(Alone{})).shared_memory_bytes, 17);
}

namespace {
// Three 64 KiB tensors: together 192 KiB, more than the 163 KiB of sm_80; one at a time
// (each freed before the next) 64 KiB.
struct ThreeBig : Script {
  static constexpr const char* param_names = "n";
  static constexpr const char* kernel_name = "three_big";
  void operator()(Int32 n) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto a = shared_tensor(dtypes::float32, {128, 128});
    auto b = shared_tensor(dtypes::float32, {128, 128});
    expected_line = __LINE__ + 1;
    auto c = shared_tensor(dtypes::float32, {128, 128});
    load_shared(a), load_shared(b), load_shared(c);
  }
};
struct ThreeBigFreed : Script {
  static constexpr const char* kernel_name = "three_big_freed";
  void operator()(Int32 n) {
    attrs.blocks = {1};
    attrs.warps = 4;
    for (int i = 0; i < 3; ++i) {
      auto s = shared_tensor(dtypes::float32, {128, 128});
      load_shared(s);
      free_shared(s);
    }
  }
};
}  // namespace

TEST(SharedMemoryPlan, OverTheLimitIsAnErrorAtThePeakAllocation) {
  Program p = trace(ThreeBig{});
  try {
    plan(p, "sm_80");
    FAIL() << "expected a shared-memory error";
  } catch (const CompileError& e) {
    const std::string& m = e.message();
    EXPECT_NE(m.find("kernel three_big"), std::string::npos) << m;
    EXPECT_NE(m.find("196608 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(163 * 1024)), std::string::npos) << m;
    EXPECT_NE(m.find("sm_80"), std::string::npos) << m;
    // The three live tensors, each with its size, offset and allocation site.
    for (int64_t offset : {0, 65536, 131072}) {
      std::string entry =
          "(shared float32[128, 128]): 65536 bytes at offset " + std::to_string(offset) + ", allocated at ";
      EXPECT_NE(m.find(entry), std::string::npos) << entry << "\n" << m;
    }
    size_t sites = 0;
    for (size_t pos = m.find("test_shared_memory_plan.cpp:"); pos != std::string::npos;
         pos = m.find("test_shared_memory_plan.cpp:", pos + 1))
      ++sites;
    EXPECT_EQ(sites, 3u) << m;
    EXPECT_NE(m.find("test_shared_memory_plan.cpp:" + std::to_string(expected_line)), std::string::npos) << m;
    // The error points at c's allocation: with it, the live tensors pass the limit.
    EXPECT_NE(e.loc().file.find("test_shared_memory_plan.cpp"), std::string::npos) << e.loc().str();
    EXPECT_EQ(e.loc().line, expected_line);
  }
  // sm_90's 227 KiB hold all three.
  EXPECT_EQ(plan(p, "sm_90a").shared_memory_bytes, 196608);
}

TEST(SharedMemoryPlan, UnderTheLimitWhenTensorsTakeTurns) {
  // 192 KiB allocated in all, but never more than 64 KiB at once.
  Kernel k = plan(trace(ThreeBigFreed{}), "sm_80");
  EXPECT_EQ(offsets(k), (Offsets{0, 0, 0}));
  EXPECT_EQ(k.shared_memory_bytes, 65536);
  // The limit is inclusive: exactly the budget is fine.
  struct Exact : Script {
    void operator()(Int32 n) {
      attrs.blocks = {1};
      attrs.warps = 4;
      shared_tensor(dtypes::int8, {163 * 1024});
    }
  };
  EXPECT_EQ(plan(trace(Exact{}), "sm_80").shared_memory_bytes, 163 * 1024);
  struct OneMore : Script {
    void operator()(Int32 n) {
      attrs.blocks = {1};
      attrs.warps = 4;
      shared_tensor(dtypes::int8, {163 * 1024 + 1});
    }
  };
  EXPECT_THROW(plan(trace(OneMore{}), "sm_80"), CompileError);
}

TEST(SharedMemoryPlan, NoSharedTensorsNoBytes) {
  struct K : Script {
    void operator()(Int32 n) {
      attrs.blocks = {1};
      attrs.warps = 1;
      auto r = register_tensor(dtypes::float32, {32}, 0.0);
      (void)r;
    }
  };
  Kernel k = plan(trace(K{}));
  EXPECT_EQ(k.shared_memory_bytes, 0);
  EXPECT_EQ(print(Program{{k}}).find("shared_memory"), std::string::npos);
}

TEST(SharedMemoryPlan, IdempotentAndGolden) {
  // A double-buffered k loop: both stages live across the loop; an epilogue tile allocated
  // after the loop reuses their bytes.
  struct K : Script {
    void operator()(Int32 k, Ptr<f16> a) {
      attrs.blocks = {1};
      attrs.warps = 4;
      auto ga = global_view(a, {Expr(64), k});
      auto stages = shared_tensor(dtypes::float16, {2, 64, 32});
      auto acc = register_tensor(dtypes::float32, {64, 32}, 0.0);
      for (Expr k0 : range(0, k, 32, {.name = "k0"})) {
        auto stage = stages[k0 / 32 % 2];
        copy_async(ga, stage, {.offsets = {0, k0}});
        copy_async_wait_all();
        sync();
        acc = acc + load_shared(stage).to(dtypes::float32);
        sync();
      }
      free_shared(stages);
      auto out = shared_tensor(dtypes::float32, {64, 32});
      store_shared(out, acc);
    }
  };
  Program once = plan_shared_memory(trace(K{}), Target::from_arch("sm_80"));
  EXPECT_EQ(offsets(once.kernels[0]), (Offsets{0, 0}));
  EXPECT_EQ(once.kernels[0].shared_memory_bytes, 8192);
  Program twice = plan_shared_memory(once, Target::from_arch("sm_80"));
  EXPECT_EQ(print(once), print(twice));
  EXPECT_TRUE(matches_golden("shared_memory_plan", print(once)));
}
