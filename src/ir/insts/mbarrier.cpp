// The mbarrier instructions (self.mbarrier.* and the seed-004 builtins that arrive and wait).
// Each instruction's definition (inst_def.h): name, group, emitters' family, traits, attributes
// and its verifier hook, the check below.
#include "../verify_util.h"

namespace tilus {

namespace {
using namespace verify_detail;

void check_mbarrier_init(const MbarrierInitInst& i) {
  const Tensor& b = i.barriers;
  if (!b.defined() || !b.is_shared() || b.dtype() != dtypes::uint64 || b.rank() != 1 ||
      b.num_elements() != int64_t(i.counts.size()))
    fail(i, fmt::format("barriers must be a uint64 shared tensor of shape [{}] (one per count), got {}",
                        i.counts.size(), ty(b)));
  if (i.counts.empty()) fail(i, "counts must name at least one barrier");
  for (auto& c : i.counts) {
    if (!is_integer_expr(c))
      fail(i, fmt::format("counts must be integers, got {} of type {}", expr_str(c), dtype_str(c)));
    if (c.is_int_const() && (c.int_value() < 1 || c.int_value() > (int64_t(1) << 20) - 1))
      fail(i, fmt::format("an arrival count must be in [1, 2^20 - 1], got {}", c.int_value()));
  }
}

void check_mbarrier(const MbarrierInst& i) {
  check_barrier(i, i.barrier);
  if (i.value_tensor.defined()) {
    const Tensor& t = i.value_tensor;
    if (i.op != MbarrierOp::Wait) fail(i, "only a wait takes its value from a register tensor");
    if (!t.is_register() || t.num_elements() != 1 || !(t.dtype().is_integer() || t.dtype().is_bool()))
      fail(i, fmt::format("phase must be a scalar or a one-element integer register tensor, got {}", ty(t)));
    return;
  }
  if (i.op == MbarrierOp::CpAsyncArrive) {
    if (i.cta_id.defined() || i.sem != "release" || i.scope != "cta")
      fail(i, "arrives on a barrier of this block, with release semantics at block scope (no cta_id, sem or scope)");
    return;
  }
  const char* what = i.op == MbarrierOp::Wait ? "phase" : i.op == MbarrierOp::Arrive ? "count" : "transaction_bytes";
  if (!is_integer_expr(i.value) && !(i.value.defined() && i.value.dtype().is_bool()))
    fail(i, fmt::format("{} must be an integer, got {} of type {}", what, expr_str(i.value), dtype_str(i.value)));
  if (i.value.is_int_const()) {
    int64_t v = i.value.int_value();
    if (i.op == MbarrierOp::Wait && v != 0 && v != 1)
      fail(i, fmt::format("phase is a parity, 0 or 1, got {}", v));
    if (i.op == MbarrierOp::Arrive && (v < 1 || v >= (int64_t(1) << 20)))
      fail(i, fmt::format("count must be in [1, 2^20 - 1], got {}", v));
    if (i.op != MbarrierOp::Wait && i.op != MbarrierOp::Arrive && (v < 0 || v >= (int64_t(1) << 20)))
      fail(i, fmt::format("transaction_bytes must be in [0, 2^20 - 1], got {}", v));
  }
  bool wait = i.op == MbarrierOp::Wait;
  if (wait ? (i.sem != "acquire" && i.sem != "relaxed") : (i.sem != "release" && i.sem != "relaxed"))
    fail(i, fmt::format("sem='{}' is not one of {}", i.sem, wait ? "'acquire', 'relaxed'" : "'release', 'relaxed'"));
  if (i.scope != "cta" && i.scope != "cluster")
    fail(i, fmt::format("scope='{}' is not one of 'cta', 'cluster'", i.scope));
  if (i.cta_id.defined() && !is_integer_expr(i.cta_id))
    fail(i, fmt::format("the peer block (cta_id / target_rank) must be an integer, got {} of type {}", expr_str(i.cta_id),
                        dtype_str(i.cta_id)));
}

}  // namespace

void insts::add_mbarrier(std::vector<InstDef>& d) {
  using verify_detail::hook;
  d.push_back({.name = "mbarrier.alloc", .group = "mbarrier", .kind = InstKind::MbarrierInit,
               .emit = EmitFamily::AsyncProxy, .summary = "shared mbarriers, initialized with their arrival counts",
               .verify = hook(check_mbarrier_init)});
  const std::vector<AttrDef> arrive_attrs = {{"sem", AttrType::String, "release"}, {"scope", AttrType::String, "cta"}};
  auto mbarrier = hook(check_mbarrier);
  d.push_back({.name = "mbarrier.arrive", .group = "mbarrier", .kind = InstKind::Mbarrier,
               .variant = int(MbarrierOp::Arrive), .emit = EmitFamily::AsyncProxy, .traits = {.role = SyncRole::Arrive},
               .summary = "every thread of the group arrives count times", .attrs = arrive_attrs, .verify = mbarrier});
  d.push_back({.name = "mbarrier.arrive_and_expect_tx", .group = "mbarrier", .kind = InstKind::Mbarrier,
               .variant = int(MbarrierOp::ArriveExpectTx), .emit = EmitFamily::AsyncProxy,
               .traits = {.role = SyncRole::Arrive}, .summary = "every thread adds transaction bytes and arrives once",
               .attrs = arrive_attrs, .verify = mbarrier});
  d.push_back({.name = "mbarrier.expect_tx", .group = "mbarrier", .kind = InstKind::Mbarrier,
               .variant = int(MbarrierOp::ExpectTx), .emit = EmitFamily::AsyncProxy,
               .traits = {.role = SyncRole::Expect},
               .summary = "every thread adds transaction bytes (mbarrier_expect_tx)", .attrs = arrive_attrs,
               .verify = mbarrier});
  d.push_back({.name = "mbarrier.wait", .group = "mbarrier", .kind = InstKind::Mbarrier,
               .variant = int(MbarrierOp::Wait), .emit = EmitFamily::AsyncProxy,
               .traits = {.role = SyncRole::BarrierWait}, .summary = "waits until the phase of a parity has completed",
               .attrs = {{"sem", AttrType::String, "acquire"}, {"scope", AttrType::String, "cta"}},
               .verify = mbarrier});
  d.push_back({.name = "cp_async_barrier_noinc", .kind = InstKind::Mbarrier, .variant = int(MbarrierOp::CpAsyncArrive),
               .emit = EmitFamily::AsyncProxy,
               .traits = {.role = SyncRole::HandOver, .completion = Completion::CpAsyncGroup, .min_sm = 80},
               .summary = "arrives once the thread's cp.async copies have landed", .verify = mbarrier});
  // Seed 004's tcgen05_mma_arrive: a definition-driven instruction (data alone; lowered in
  // codegen/{cuda,cpu}/async_proxy.cpp).
  d.push_back({.name = "tcgen05_mma_arrive", .kind = InstKind::Defined, .emit = EmitFamily::AsyncProxy,
               .traits = {.role = SyncRole::Arrive, .min_sm = 100},
               .summary = "every thread of the group arrives once on the mbarrier when the tcgen05 operations it "
                          "issued before have completed (tcgen05.commit)",
               .operands = {{.name = "mbar", .scopes = kShared, .access = Access::Read, .dtype = "uint64", .numel = 1,
                             .doc = "one mbarrier, mbarrier.alloc(...)[i]"}}});

}

}  // namespace tilus
