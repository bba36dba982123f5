#include "tilus/ir/inst.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

namespace tilus {

const char* to_string(EvictPolicy e) {
  switch (e) {
    case EvictPolicy::Normal: return "evict_normal";
    case EvictPolicy::First: return "evict_first";
    case EvictPolicy::Last: return "evict_last";
  }
  return "?";
}

std::optional<EvictPolicy> parse_evict_policy(const std::string& s) {
  if (s == "evict_normal") return EvictPolicy::Normal;
  if (s == "evict_first") return EvictPolicy::First;
  if (s == "evict_last") return EvictPolicy::Last;
  return std::nullopt;
}

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::Any: return "any";
    case ReduceOp::All: return "all";
  }
  return "?";
}

namespace {
// out = op(x), both register tensors.
void register_unary(FieldVisitor& v, Tensor& out, Tensor& x) {
  v.output("out", out, kRegister);
  v.operand("x", x, Access::Read, kRegister, nullptr);
}
std::string ints_str(const std::vector<int>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); }
std::string ints_str(const std::vector<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); }
}  // namespace

void GlobalViewInst::visit_fields(FieldVisitor& v) {
  v.output("out", out, kGlobal);
  v.expr("ptr", ptr);
}

void AllocateSharedInst::visit_fields(FieldVisitor& v) {
  v.output("out", out, kShared);
  if (offset >= 0) v.attr("offset", std::to_string(offset));
}

void FreeSharedInst::visit_fields(FieldVisitor& v) { v.operand("tensor", tensor, Access::Alias, kShared, nullptr); }

void AllocateRegisterInst::visit_fields(FieldVisitor& v) {
  v.output("out", out, kRegister);
  for (auto& a : axes) v.binder("axes", a);
  if (init.defined()) v.expr("init", init);
}

void SliceSharedInst::visit_fields(FieldVisitor& v) {
  v.output("out", out, kShared);
  v.operand("src", src, Access::Alias, kShared, nullptr);
  v.exprs("offsets", offsets);
  v.attr("dims", ints_str(dims));
}

void ReshapeSharedInst::visit_fields(FieldVisitor& v) {
  v.output("out", out, kShared);
  v.operand("src", src, Access::Alias, kShared, nullptr);
}

void LoadGlobalInst::visit_fields(FieldVisitor& v) {
  v.output("out", out, kRegister);
  v.operand("src", src, Access::Read, kGlobal, nullptr);
  v.exprs("offsets", offsets);
  v.attr("dims", ints_str(dims));
  if (checked_dims) v.attr("checked_dims", ints_str(*checked_dims));
  if (other.defined()) v.expr("other", other);
}

const char* to_string(AtomicOp op) {
  switch (op) {
    case AtomicOp::Add: return "add";
    case AtomicOp::Sub: return "sub";
    case AtomicOp::Min: return "min";
    case AtomicOp::Max: return "max";
    case AtomicOp::Exch: return "exch";
    case AtomicOp::Cas: return "cas";
  }
  return "?";
}

std::string AtomicInst::display_name() const {
  const char* space = dst.defined() && dst.is_shared() ? "shared" : "global";
  if (store) return fmt::format("store_{}_scatter", space);
  return fmt::format("atomic.{}_{}{}", space, scatter() ? "scatter_" : "", to_string(op));
}

Expr AtomicInst::scatter_in_bounds(const Expr& index) const {
  return logical_and(index >= int_const(0, dtypes::int64), index < cast(dst.shape()[size_t(scatter_dim)], dtypes::int64));
}

void AtomicInst::visit_fields(FieldVisitor& v) {
  v.output("out", out, kRegister);
  v.operand("dst", dst, Access::ReadWrite, kGlobal | kShared, nullptr);
  v.operand("values", values, Access::Read, kRegister, nullptr);
  if (compare.defined()) v.operand("compare", compare, Access::Read, kRegister, nullptr);
  if (indices.defined()) v.operand("indices", indices, Access::Read, kRegister, nullptr);
  if (scatter()) v.attr("dim", std::to_string(scatter_dim));
  if (!offsets.empty()) v.exprs("offsets", offsets);
  if (!dims.empty()) v.attr("dims", ints_str(dims));
  if (checked_dims) v.attr("checked_dims", ints_str(*checked_dims));
  if (sem != "relaxed") v.attr("sem", sem);
  v.attr("scope", scope);
}

void ItemInst::visit_fields(FieldVisitor& v) {
  v.operand("x", x, Access::Read, kRegister, nullptr);
  v.attr("var", var.defined() ? var.name() : "<undefined>");
}

void SharedItemPtrInst::visit_fields(FieldVisitor& v) {
  v.operand("x", x, Access::Alias, kShared, nullptr);
  v.attr("var", var.defined() ? var.name() : "<undefined>");
}

void SemaphoreInst::visit_fields(FieldVisitor& v) {
  v.expr("semaphore", semaphore);
  v.expr("value", value);
}

void StoreGlobalInst::visit_fields(FieldVisitor& v) {
  v.operand("dst", dst, Access::Write, kGlobal, nullptr);
  v.operand("src", src, Access::Read, kRegister, nullptr);
  v.exprs("offsets", offsets);
  v.attr("dims", ints_str(dims));
  if (checked_dims) v.attr("checked_dims", ints_str(*checked_dims));
}

void LoadSharedInst::visit_fields(FieldVisitor& v) {
  v.output("out", out, kRegister);
  v.operand("src", src, Access::Read, kShared, nullptr);
}

void StoreSharedInst::visit_fields(FieldVisitor& v) {
  v.operand("dst", dst, Access::Write, kShared, nullptr);
  v.operand("src", src, Access::Read, kRegister, nullptr);
}

void CopyAsyncInst::visit_fields(FieldVisitor& v) {
  v.operand("src", src, Access::Read, kGlobal, nullptr);
  v.operand("dst", dst, Access::Write, kShared, nullptr);
  v.exprs("offsets", offsets);
  v.attr("dims", ints_str(dims));
  v.attr("evict", to_string(evict));
  v.attr("check_bounds", check_bounds ? "true" : "false");
  if (checked_dims) v.attr("checked_dims", ints_str(*checked_dims));
}

void CopyAsyncCommitGroupInst::visit_fields(FieldVisitor&) {}

void CopyAsyncWaitGroupInst::visit_fields(FieldVisitor& v) { v.attr("n", std::to_string(n)); }

void CopyAsyncWaitAllInst::visit_fields(FieldVisitor&) {}

void CopyInst::visit_fields(FieldVisitor& v) {
  v.operand("src", src.tensor, Access::Read, kAnyScope, &src);
  v.exprs("src_offsets", src.offsets);
  v.exprs("src_extents", src.extents);
  if (src.checked_dims) v.attr("src_checked_dims", ints_str(*src.checked_dims));
  v.operand("dst", dst.tensor, Access::Write, kAnyScope, &dst);
  v.exprs("dst_offsets", dst.offsets);
  v.exprs("dst_extents", dst.extents);
  if (dst.checked_dims) v.attr("dst_checked_dims", ints_str(*dst.checked_dims));
  if (coalesced_width) v.attr("coalesced_width", std::to_string(*coalesced_width));
  if (disable_tma) v.attr("disable_tma", "true");
  if (use_tma) v.attr("use_tma", "true");
  if (use_cp_async) v.attr("use_cp_async", "true");
  if (eviction_policy) v.attr("eviction_policy", to_string(*eviction_policy));
  if (!annotations.empty()) {
    std::string s = "{";
    bool first = true;
    for (auto& [k, val] : annotations) {
      s += fmt::format("{}{}: {}", first ? "" : ", ", k, val);
      first = false;
    }
    v.attr("annotations", s + "}");
  }
  if (loop_layout.defined()) v.attr("loop_layout", loop_layout.str());
  if (scalar) v.attr("scalar", "true");
  if (barrier.defined()) v.operand("barrier", barrier, Access::Read, kShared, nullptr);
  if (multicast_mask.defined()) v.expr("multicast_mask", multicast_mask);
  if (cta_group != 1) v.attr("cta_group", std::to_string(cta_group));
  if (barrier_rank.defined()) v.expr("barrier_rank", barrier_rank);
  if (cache_policy.defined()) v.expr("cache_policy", cache_policy);
}

void Im2colInst::visit_fields(FieldVisitor& v) {
  v.operand("img", img, Access::Read, kGlobal, nullptr);
  v.operand("col", col, Access::Write, kShared, nullptr);
  v.expr("nhw_step", nhw_step);
  v.expr("c_step", c_step);
  v.attr("kernel", std::to_string(kernel));
  v.attr("stride", std::to_string(stride));
  v.attr("dilation", std::to_string(dilation));
  v.attr("pad", std::to_string(pad));
  if (eviction_policy) v.attr("eviction_policy", to_string(*eviction_policy));
  if (barrier.defined()) v.operand("barrier", barrier, Access::Read, kShared, nullptr);
}

const char* to_string(CopyApi api) {
  switch (api) {
    case CopyApi::Copy: return "copy";
    case CopyApi::AsyncCopy: return "async_copy";
    case CopyApi::TmaCopy: return "tma_copy";
    case CopyApi::TmaGlobalToShared: return "tma.global_to_shared";
    case CopyApi::TmaSharedToGlobal: return "tma.shared_to_global";
  }
  return "?";
}

const char* to_string(MbarrierOp op) {
  switch (op) {
    case MbarrierOp::Arrive: return "arrive";
    case MbarrierOp::ArriveExpectTx: return "arrive_and_expect_tx";
    case MbarrierOp::ExpectTx: return "expect_tx";
    case MbarrierOp::Wait: return "wait";
    case MbarrierOp::CpAsyncArrive: return "cp_async_arrive";
  }
  return "?";
}

// The barriers are written once, by their initialization; arrivals and waits read them (they
// synchronize, and never conflict with each other).
void MbarrierInitInst::visit_fields(FieldVisitor& v) {
  v.operand("barriers", barriers, Access::Write, kShared, nullptr);
  v.exprs("counts", counts);
}

void MbarrierInst::visit_fields(FieldVisitor& v) {
  v.operand("barrier", barrier, Access::Read, kShared, nullptr);
  if (value_tensor.defined()) v.operand("phase", value_tensor, Access::Read, kRegister, nullptr);
  else if (op != MbarrierOp::CpAsyncArrive)
    v.expr(op == MbarrierOp::Wait ? "phase" : op == MbarrierOp::Arrive ? "count" : "transaction_bytes", value);
  if (cta_id.defined()) v.expr("cta_id", cta_id);
  if (sem != (op == MbarrierOp::Wait ? "acquire" : "release")) v.attr("sem", sem);
  if (scope != "cta") v.attr("scope", scope);
}

void TmaCommitGroupInst::visit_fields(FieldVisitor&) {}

void TmaWaitGroupInst::visit_fields(FieldVisitor& v) {
  v.attr("n", std::to_string(n));
  if (read) v.attr("read", "true");
}

void FenceProxyAsyncInst::visit_fields(FieldVisitor& v) { v.attr("space", space); }

void WgmmaFenceInst::visit_fields(FieldVisitor&) {}

void WgmmaMmaInst::visit_fields(FieldVisitor& v) {
  v.operand("a", a, Access::Read, Scopes(kShared | kRegister), nullptr);
  v.operand("b", b, Access::Read, kShared, nullptr);
  v.operand("d", d, Access::ReadWrite, kRegister, nullptr);
  if (from_dot) v.attr("from_dot", "true");
  if (!enable_input_d) v.attr("enable_input_d", "false");
}

void WgmmaCommitGroupInst::visit_fields(FieldVisitor&) {}

void WgmmaWaitGroupInst::visit_fields(FieldVisitor& v) {
  v.attr("n", std::to_string(n));
  if (ordered) v.attr("ordered", "true");
}

void DotInst::visit_fields(FieldVisitor& v) {
  v.output("out", out, kRegister);
  v.operand("a", a, Access::Read, kRegister, nullptr);
  v.operand("b", b, Access::Read, kRegister, nullptr);
  v.operand("c", c, Access::Read, kRegister, nullptr);
}

void CastInst::visit_fields(FieldVisitor& v) {
  register_unary(v, out, x);
}

void ViewInst::visit_fields(FieldVisitor& v) {
  register_unary(v, out, x);
}

void ReshapeInst::visit_fields(FieldVisitor& v) {
  register_unary(v, out, x);
}

void SqueezeInst::visit_fields(FieldVisitor& v) {
  register_unary(v, out, x);
  v.attr("dims", ints_str(dims));
}

void UnsqueezeInst::visit_fields(FieldVisitor& v) {
  register_unary(v, out, x);
  v.attr("dims", ints_str(dims));
}

void TransposeInst::visit_fields(FieldVisitor& v) {
  register_unary(v, out, x);
}

void RepeatInst::visit_fields(FieldVisitor& v) {
  register_unary(v, out, x);
  v.attr("repeats", ints_str(repeats));
}

void ElementwiseInst::visit_fields(FieldVisitor& v) {
  v.output("out", out, kRegister);
  for (auto& t : inputs) v.operand("inputs", t, Access::Read, kRegister, nullptr);
  for (auto& p : params) v.binder("params", p);
  v.expr("body", body);
}

void ReduceInst::visit_fields(FieldVisitor& v) {
  register_unary(v, out, x);
  v.attr("dims", ints_str(dims));
  v.attr("keepdim", keepdim ? "true" : "false");
}

void AssignInst::visit_fields(FieldVisitor& v) {
  v.operand("dst", dst, Access::Write, kRegister, nullptr);
  v.operand("src", src, Access::Read, kRegister, nullptr);
}

std::string SyncInst::display_name() const {
  switch (scope) {
    case SyncScope::Group: return "sync";
    case SyncScope::Named: return "sync_threads";
    case SyncScope::Warp: return "sync_warp";
    case SyncScope::Cluster: return "cluster.sync";
    case SyncScope::Grid: return "sync_grid";
    case SyncScope::NamedArrive: return "named_barrier_arrive";
  }
  return "sync";
}

void SyncInst::visit_fields(FieldVisitor& v) {
  if (scope == SyncScope::Named || scope == SyncScope::NamedArrive) {
    v.attr("barrier_id", std::to_string(barrier_id));
    v.attr("arrive_count", std::to_string(arrive_count));
  }
  if (mask.defined()) v.expr("mask", mask);
}

void SetMaxNRegInst::visit_fields(FieldVisitor& v) { v.attr("reg_count", std::to_string(reg_count)); }

void ThreadIndexInst::visit_fields(FieldVisitor& v) {
  v.output("out", out, kRegister);
  if (op == "shuffle_elect") {
    v.attr("thread_extent", std::to_string(thread_extent));
  } else {
    v.attr("warp_size", std::to_string(warp_size));
    if (op == "get_warp_group_idx") v.attr("warps_per_group", std::to_string(warps_per_group));
  }
}

void ShuffleInst::visit_fields(FieldVisitor& v) {
  v.output("out", out, kRegister);
  v.operand("value", value, Access::Read, kRegister, nullptr);
  v.expr(op == "shfl_sync" ? "src_lane" : "offset", lane);
  if (mask.defined()) v.expr("mask", mask);
  if (op == "shfl_sync") v.attr("width", std::to_string(width));
}

void LoadGlobalVectorInst::visit_fields(FieldVisitor& v) {
  v.output("out", out, kRegister);
  v.operand("src", src.tensor, Access::Read, kGlobal, &src);
  v.exprs("src_offsets", src.offsets);
  v.exprs("src_extents", src.extents);
  if (pred.defined()) v.expr("pred", pred);
}

void StoreGlobalVectorInst::visit_fields(FieldVisitor& v) {
  v.operand("dst", dst.tensor, Access::Write, kGlobal, &dst);
  v.exprs("dst_offsets", dst.offsets);
  v.exprs("dst_extents", dst.extents);
  v.operand("value", value, Access::Read, kRegister, nullptr);
  if (pred.defined()) v.expr("pred", pred);
}

void PrintfInst::visit_fields(FieldVisitor& v) {
  std::string escaped;
  for (char c : format) {
    if (c == '\n') escaped += "\\n";
    else if (c == '"') escaped += "\\\"";
    else if (c == '\\') escaped += "\\\\";
    else escaped += c;
  }
  v.attr("format", "\"" + escaped + "\"");
  v.exprs("args", args);
}

void AssumeInst::visit_fields(FieldVisitor& v) { v.expr("cond", cond); }

void AnnotateLayoutInst::visit_fields(FieldVisitor& v) {
  v.operand("tensor", tensor, Access::Alias, kRegister | kShared, nullptr);
  if (layout.defined()) v.attr("layout", layout.str());
  if (shared_layout.defined()) v.attr("shared_layout", shared_layout.str());
}

int64_t shuffle_source_lane(const std::string& op, int64_t lane, int64_t b, int64_t width) {
  b &= 31;
  int64_t first = lane & ~(width - 1), last = first + width - 1;
  if (op == "shfl_xor") return (lane ^ b) > last ? lane : (lane ^ b);
  if (op == "shfl_down") return lane + b > last ? lane : lane + b;
  if (op == "shfl_up") return lane - b < first ? lane : lane - b;
  return first + (b & (width - 1));  // shfl_sync
}

std::string shuffle_replica_problem(const ShuffleInst& inst, std::optional<int64_t> b) {
  const RegisterLayout& l = inst.value->layout;
  if (!l.defined() || !l.is_replicated()) return "";
  // Per element: what its first owner reads (the source element, or with a run-time b the
  // owner's lane and slot, which fix the source whatever b is).
  std::map<std::vector<int64_t>, std::vector<int64_t>> first;
  for (int64_t t = 0; t < l.num_threads(); ++t)
    for (int64_t s = 0; s < l.local_size(); ++s) {
      std::vector<int64_t> key;
      if (b) key = l.map(t - t % 32 + shuffle_source_lane(inst.op, t % 32, *b, inst.width), s);
      else key = {t % 32, s};
      auto [it, fresh] = first.emplace(l.map(t, s), key);
      if (!fresh && it->second != key)
        return fmt::format("value {} has layout {}, which holds element [{}] in several threads that would read "
                           "different elements{}; give value a layout without replicas inside a warp "
                           "(annotate_layout)",
                           inst.value.type_str(), l.str(), fmt::join(l.map(t, s), ", "),
                           b ? "" : " (the offset is only known at run time)");
    }
  return "";
}

namespace {
struct TraitFinder : FieldVisitor {
  Tensor out;
  std::vector<InstNode::Operand> all;  // in the order visit_fields declares them
  std::vector<std::pair<Tensor, Access>> operands;
  void output(const char* name, Tensor& t, uint8_t scopes) override {
    out = t;
    all.push_back({name, t, Access::Write, scopes, nullptr, true});
  }
  void operand(const char* name, Tensor& t, Access a, uint8_t scopes, const CopyRegion* region) override {
    all.push_back({name, t, a, scopes, region, false});
    operands.emplace_back(t, a);
  }
};
}  // namespace

// --- Blackwell ---------------------------------------------------------------------------------------

int64_t Tcgen05AllocInst::columns() const {
  int64_t bits = out.dtype().bits();
  auto shape = out.static_shape();
  for (size_t d = 1; d < shape.size(); ++d) bits *= shape[d];
  int64_t cols = std::max<int64_t>(32, (bits + 31) / 32);
  int64_t p = 32;
  while (p < cols) p *= 2;
  return p;
}

void Tcgen05AllocInst::visit_fields(FieldVisitor& v) {
  v.output("out", out, kTensorMemory);
  if (cta_group != 1) v.attr("cta_group", std::to_string(cta_group));
  if (slot_offset >= 0) v.attr("slot_offset", std::to_string(slot_offset));
}

void Tcgen05SliceInst::visit_fields(FieldVisitor& v) {
  v.output("out", out, kTensorMemory);
  v.operand("src", src, Access::Alias, kTensorMemory, nullptr);
  v.exprs("offsets", offsets);
  v.attr("dims", ints_str(dims));
}

void Tcgen05ViewInst::visit_fields(FieldVisitor& v) {
  v.output("out", out, kTensorMemory);
  v.operand("src", src, Access::Alias, kTensorMemory, nullptr);
}

void Tcgen05LoadInst::visit_fields(FieldVisitor& v) {
  v.output("out", out, kRegister);
  v.operand("src", src, Access::Read, kTensorMemory, nullptr);
}

void ClcQueryInst::visit_fields(FieldVisitor& v) {
  v.operand("response", response, Access::Read, kShared, nullptr);
  for (const Var* x : {&is_canceled, &this->x, &y, &z}) v.attr("var", x->defined() ? x->name() : "<undefined>");
}

Scopes scope_bit(MemoryScope s) {
  switch (s) {
    case MemoryScope::Global: return kGlobal;
    case MemoryScope::Shared: return kShared;
    case MemoryScope::Register: return kRegister;
    case MemoryScope::TensorMemory: return kTensorMemory;
  }
  return kAnyScope;
}

std::string scopes_str(uint8_t scopes) {
  std::vector<std::string> names;
  for (MemoryScope s : {MemoryScope::Register, MemoryScope::Shared, MemoryScope::Global, MemoryScope::TensorMemory})
    if (scopes & scope_bit(s)) names.push_back(to_string(s));
  if ((scopes & kAnyScope) == kAnyScope || names.empty()) return "a";
  return "a " + fmt::format("{}", fmt::join(names, " or "));
}

Tensor InstNode::output() const {
  TraitFinder f;
  visit_fields(f);
  return f.out;
}

std::vector<std::pair<Tensor, Access>> InstNode::operands() const {
  TraitFinder f;
  visit_fields(f);
  return f.operands;
}

std::vector<InstNode::Operand> InstNode::traits() const {
  TraitFinder f;
  visit_fields(f);
  return f.all;
}

bool InstNode::touches_memory() const {
  for (auto& o : traits())
    if (o.scopes & (kGlobal | kShared)) return true;
  return false;
}

bool InstNode::is_pure() const {
  if (has_side_effects()) return false;
  for (auto& [t, a] : operands())
    if (a == Access::Write || a == Access::ReadWrite) return false;
  return true;
}

}  // namespace tilus
