#include "tilus/lang/script.h"

#include "script_util.h"

#include <fmt/format.h>

#include <cstdlib>

namespace tilus {

using namespace script_detail;

namespace detail {

namespace {
thread_local Builder* current = nullptr;
}

Builder* current_builder() { return current; }
void set_current_builder(Builder* b) { current = b; }

std::vector<std::string> split_param_names(const char* names) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    size_t b = cur.find_first_not_of(" \t\n"), e = cur.find_last_not_of(" \t\n");
    out.push_back(b == std::string::npos ? "" : cur.substr(b, e - b + 1));
    cur.clear();
  };
  for (const char* p = names; *p; ++p) {
    if (*p == ',') flush();
    else cur += *p;
  }
  flush();
  if (out.size() == 1 && out[0].empty()) out.clear();
  return out;
}

std::string demangle_script_name(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && d ? d : mangled;
  std::free(d);
  // Drop namespaces and template arguments: "ns::Matmul<2>" -> "Matmul".
  size_t lt = name.find('<');
  if (lt != std::string::npos) name = name.substr(0, lt);
  size_t colon = name.rfind("::");
  if (colon != std::string::npos) name = name.substr(colon + 2);
  return name;
}

std::string const_to_string(const ConstValue& v) {
  if (auto i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto d = std::get_if<double>(&v)) return fmt::format("{}", *d);
  if (auto b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  return "'" + std::get<std::string>(v) + "'";
}

void missing_constant(const std::string& kernel, const std::string& name, const char* type, SourceLoc loc) {
  throw CompileError(fmt::format("{}: parameter '{}' is a compile-time constant; trace() needs its value "
                                 "(pass {{{{\"{}\", value}}}})",
                                 kernel, name, name),
                     loc);
}

void wrong_constant(const std::string& kernel, const std::string& name, const char* type, const ConstValue& v,
                    SourceLoc loc) {
  throw CompileError(fmt::format("{}: compile-time parameter '{}' needs {}, got {}", kernel, name, type,
                                 const_to_string(v)),
                     loc);
}

}  // namespace detail

namespace {
Builder& active(const char* what) {
  Builder* b = detail::current_builder();
  if (!b) throw CompileError(fmt::format("{} used outside of a trace (tensor handles only live while tracing)", what));
  return *b;
}
}  // namespace

// --- handles ---------------------------------------------------------------------------------

CopyRegionArg::CopyRegionArg(const GlobalTensor& t) : region{t.tensor(), {}, {}} {}
CopyRegionArg::CopyRegionArg(const SharedTensor& t) : region{t.tensor(), {}, {}} {}
CopyRegionArg::CopyRegionArg(const RegisterTensor& t) : region{t.tensor(), {}, {}} {}

SharedTensor SharedTensor::operator[](const IndexArg& i) const {
  return SharedTensor(active("shared tensor indexing").index_shared(t_, {i.value}, i.loc));
}

SharedTensor SharedTensor::slice(std::vector<Expr> offsets, std::vector<int> dims, std::vector<int64_t> shape,
                                 Loc loc) const {
  return SharedTensor(active("SharedTensor.slice")
                          .slice_shared(t_, std::move(offsets), std::move(dims), std::move(shape), SourceLoc::from(loc)));
}
SharedTensor SharedTensor::permute(std::vector<int> dims, Loc loc) const {
  return SharedTensor(active("SharedTensor.permute").permute_shared(t_, std::move(dims), SourceLoc::from(loc)));
}
SharedTensor SharedTensor::transpose(Loc loc) const {
  return SharedTensor(active("SharedTensor.transpose").permute_shared(t_, {1, 0}, SourceLoc::from(loc)));
}

RegisterTensor& RegisterTensor::operator=(const RegisterTensor& other) {
  if (this == &other) return *this;
  if (!t_.defined() || !other.t_.defined() || t_.same_as(other.t_)) {
    t_ = other.t_;
    return *this;
  }
  Builder& b = active("assignment to a register tensor");
  b.assign_tensor(t_, other.t_, b.last_loc());
  return *this;
}

RegisterTensor RegisterTensor::to(DataType dtype, Loc loc) const {
  return RegisterTensor(active("to()").cast(t_, dtype, SourceLoc::from(loc)));
}

RegisterTensor RegisterTensor::transpose(Loc loc) const {
  return RegisterTensor(active("transpose()").transpose(t_, SourceLoc::from(loc)));
}

namespace {
RegisterTensor binary_op(BinaryOp op, const TensorOperand& a, const TensorOperand& b) {
  return RegisterTensor(
      active("a tensor operator").binary(op, a.tensor.tensor(), a.scalar, b.tensor.tensor(), b.scalar, a.loc));
}
}  // namespace

RegisterTensor operator+(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Add, a, b); }
RegisterTensor operator-(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Sub, a, b); }
RegisterTensor operator*(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Mul, a, b); }
RegisterTensor operator/(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Div, a, b); }
RegisterTensor operator%(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Mod, a, b); }
RegisterTensor operator&(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::BitAnd, a, b); }
RegisterTensor operator|(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::BitOr, a, b); }
RegisterTensor operator^(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::BitXor, a, b); }
RegisterTensor operator<<(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Shl, a, b); }
RegisterTensor operator>>(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Shr, a, b); }
RegisterTensor operator<(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Lt, a, b); }
RegisterTensor operator<=(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Le, a, b); }
RegisterTensor operator>(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Gt, a, b); }
RegisterTensor operator>=(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Ge, a, b); }
RegisterTensor operator==(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Eq, a, b); }
RegisterTensor operator!=(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Ne, a, b); }
RegisterTensor operator&&(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::And, a, b); }
RegisterTensor operator||(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Or, a, b); }

namespace {
RegisterTensor unary_op(const char* op, const TensorOperand& a) {
  if (!a.tensor.bound()) throw CompileError(fmt::format("{}: needs a register tensor operand", op), a.loc);
  return RegisterTensor(active("a tensor operator").unary(op, a.tensor.tensor(), a.loc));
}
}  // namespace

RegisterTensor operator-(const TensorOperand& a) { return unary_op("neg", a); }
RegisterTensor operator~(const TensorOperand& a) { return unary_op("bitnot", a); }
RegisterTensor operator!(const TensorOperand& a) { return unary_op("not", a); }

ScalarVar& ScalarVar::assign(const Expr& value) {
  Builder& b = active("assignment to a scalar variable");
  b.assign(*this, value, b.last_loc());
  return *this;
}

ScalarVar& ScalarVar::assign_from(const TensorOperand& value) {
  if (value.tensor.bound())
    throw CompileError(fmt::format("cannot assign a register tensor to scalar variable '{}'", name()), value.loc);
  active("assignment to a scalar variable").assign(*this, value.scalar, value.loc);
  return *this;
}

// --- loops and branches ------------------------------------------------------------------------

LoopRange::LoopRange(Builder* b, Expr begin, Expr end, Expr step, RangeOptions opts, SourceLoc loc)
    : b_(b), begin_(std::move(begin)), end_(std::move(end)), step_(std::move(step)), opts_(std::move(opts)),
      loc_(std::move(loc)), exceptions_(std::uncaught_exceptions()) {}

LoopRange::Iterator LoopRange::begin() {
  if (!opened_) {
    LoopPipeline p;
    p.num_stages = opts_.num_stages;
    p.warp_specialize = opts_.warp_specialize;
    p.persistent = opts_.persistent;
    p.epilogue = opts_.epilogue;
    var_ = b_->begin_for(opts_.name, begin_, end_, step_, opts_.unroll, loc_, p);
    opened_ = true;
  }
  return Iterator(this);
}

LoopRange::Iterator& LoopRange::Iterator::operator++() {
  r_->close();
  return *this;
}

void LoopRange::close() {
  if (opened_ && !closed_) {
    closed_ = true;
    b_->end_for();
  }
}

LoopRange::~LoopRange() noexcept(false) {
  // A C++ `break` or `return` inside the body leaves the loop without ++: close it here,
  // unless an exception is on its way out (the trace is abandoned then).
  if (std::uncaught_exceptions() > exceptions_) return;
  close();
}

IfChain& IfChain::else_if(const Expr& cond, const std::function<void()>& body, Loc loc) {
  SourceLoc where = SourceLoc::from(loc);
  b_->begin_else(where);
  b_->begin_if(cond, where);
  body();
  b_->end_if();
  b_->end_else();
  return *this;
}

void IfChain::else_(const std::function<void()>& body, Loc loc) {
  b_->begin_else(SourceLoc::from(loc));
  body();
  b_->end_else();
}

// --- Script ------------------------------------------------------------------------------------

Builder& Script::builder() const {
  if (!builder_) throw CompileError("a Script instruction was called outside of tilus::trace()");
  // attrs are plain members: hand their values to the builder as soon as they change.
  const_cast<Script*>(this)->apply_attrs();
  return *builder_;
}

void Script::apply_attrs() {
  if (!builder_) return;
  SourceLoc loc = builder_->last_loc();
  if (attrs.blocks.size() != applied_.blocks.size() ||
      !std::equal(attrs.blocks.begin(), attrs.blocks.end(), applied_.blocks.begin(),
                  [](const Expr& a, const Expr& b) { return a.same_as(b); })) {
    builder_->set_blocks(attrs.blocks, loc);
    applied_.blocks = attrs.blocks;
  }
  if (attrs.warps != applied_.warps) {
    builder_->set_warps(attrs.warps, loc);
    applied_.warps = attrs.warps;
  }
  if (attrs.cluster_blocks != applied_.cluster_blocks) {
    builder_->set_cluster(attrs.cluster_blocks, loc);
    applied_.cluster_blocks = attrs.cluster_blocks;
  }
  if (attrs.min_blocks != applied_.min_blocks) {
    builder_->set_min_blocks(attrs.min_blocks, loc);
    applied_.min_blocks = attrs.min_blocks;
  }
}

GlobalTensor Script::global_view_impl(const Expr& ptr, DataType dtype, std::vector<Expr> shape,
                                      std::vector<Expr> strides, Loc loc) {
  return GlobalTensor(builder().global_view(ptr, dtype, std::move(shape), std::move(strides), SourceLoc::from(loc),
                                            ptr.as<VarNode>() ? ptr.as<VarNode>()->name : "g"));
}

GlobalTensor Script::global_tensor(DataType dtype, std::vector<Expr> shape, bool requires_clean, Loc loc) {
  return GlobalTensor(builder().global_tensor(dtype, std::move(shape), requires_clean, SourceLoc::from(loc)));
}

Expr Script::item_ptr(const SharedTensor& s, std::vector<Expr> indices, Loc loc) {
  return builder().item_ptr(s.tensor(), std::move(indices), SourceLoc::from(loc));
}
Expr Script::item_ptr(const GlobalTensor& g, std::vector<Expr> indices, Loc loc) {
  return builder().item_ptr(g.tensor(), std::move(indices), SourceLoc::from(loc));
}

void Script::lock_semaphore(const Expr& semaphore, const Expr& value, Loc loc) {
  builder().semaphore(SemaphoreOp::Lock, semaphore, value, SourceLoc::from(loc));
}

void Script::release_semaphore(const Expr& semaphore, const Expr& value, Loc loc) {
  builder().semaphore(SemaphoreOp::Release, semaphore, value, SourceLoc::from(loc));
}

SharedTensor Script::shared_tensor(DataType dtype, std::vector<int64_t> shape, Loc loc) {
  return SharedTensor(builder().shared_tensor(dtype, std::move(shape), SourceLoc::from(loc)));
}

void Script::free_shared(const SharedTensor& t, Loc loc) { builder().free_shared(t.tensor(), SourceLoc::from(loc)); }
SharedTensor Script::reshape_shared(const SharedTensor& tensor, std::vector<int64_t> shape, Loc loc) {
  return SharedTensor(builder().reshape_shared(tensor.tensor(), std::move(shape), SourceLoc::from(loc)));
}

RegisterTensor Script::register_tensor(DataType dtype, std::vector<int64_t> shape, Init init, Loc loc) {
  if (init.fn) return RegisterTensor(builder().register_tensor(dtype, std::move(shape), init.fn, SourceLoc::from(loc)));
  return RegisterTensor(builder().register_tensor(dtype, std::move(shape), init.scalar, SourceLoc::from(loc)));
}

namespace {
RegisterTensor into(Builder& b, const RegisterTensor& out, const Tensor& value, const SourceLoc& loc) {
  if (!out.bound()) return RegisterTensor(value);
  b.assign_tensor(out.tensor(), value, loc);
  return out;
}
}  // namespace

RegisterTensor Script::load_global(const GlobalTensor& src, LoadGlobalOptions opts, Loc loc) {
  SourceLoc where = SourceLoc::from(loc);
  Tensor t = builder().load_global(src.tensor(), std::move(opts.offsets), std::move(opts.shape), std::move(opts.dims), where,
                                   opts.other);
  return into(builder(), opts.out, t, where);
}

void Script::store_global(const GlobalTensor& dst, const RegisterTensor& src, StoreGlobalOptions opts, Loc loc) {
  builder().store_global(dst.tensor(), src.tensor(), std::move(opts.offsets), std::move(opts.dims), SourceLoc::from(loc));
}

RegisterTensor Script::load_shared(const SharedTensor& src, Loc loc) {
  return RegisterTensor(builder().load_shared(src.tensor(), SourceLoc::from(loc)));
}

void Script::store_shared(const SharedTensor& dst, const RegisterTensor& src, Loc loc) {
  builder().store_shared(dst.tensor(), src.tensor(), SourceLoc::from(loc));
}

void Script::copy_async(const GlobalTensor& src, const SharedTensor& dst, CopyAsyncOptions opts, Loc loc) {
  builder().copy_async(src.tensor(), dst.tensor(), std::move(opts.offsets), std::move(opts.dims), opts.evict,
                       opts.check_bounds, SourceLoc::from(loc));
}

void Script::copy_async_commit_group(Loc loc) { builder().copy_async_commit_group(SourceLoc::from(loc)); }
void Script::copy_async_wait_group(int64_t n, Loc loc) { builder().copy_async_wait_group(n, SourceLoc::from(loc)); }
void Script::copy_async_wait_all(Loc loc) { builder().copy_async_wait_all(SourceLoc::from(loc)); }

void Script::copy(const CopyRegionArg& src, const CopyRegionArg& dst, CopyOptions opts, Loc loc) {
  CopyArgs args{opts.coalesced_width, opts.disable_tma, opts.eviction_policy, opts.annotations, opts.loop_layout};
  builder().copy(src.region, dst.region, args, SourceLoc::from(loc));
}

void Script::async_copy(const CopyRegionArg& src, const CopyRegionArg& dst, AsyncCopyOptions opts, Loc loc) {
  CopyArgs args{.coalesced_width = opts.coalesced_width, .annotations = opts.annotations,
                .loop_layout = opts.loop_layout, .api = CopyApi::AsyncCopy};
  builder().copy(src.region, dst.region, args, SourceLoc::from(loc));
}

RegisterTensor Script::dot(const RegisterTensor& a, const RegisterTensor& b, const RegisterTensor& c, DotOptions opts,
                           Loc loc) {
  SourceLoc where = SourceLoc::from(loc);
  Tensor d = c.bound() ? builder().dot(a.tensor(), b.tensor(), c.tensor(), where)
                       : builder().dot(a.tensor(), b.tensor(), opts.acc_dtype, where);
  return into(builder(), opts.out, d, where);
}

RegisterTensor Script::cast(const RegisterTensor& x, DataType dtype, Loc loc) {
  return RegisterTensor(builder().cast(x.tensor(), dtype, SourceLoc::from(loc)));
}

RegisterTensor Script::view(const RegisterTensor& x, ViewOptions opts, Loc loc) {
  return RegisterTensor(builder().view(x.tensor(), opts.dtype, opts.layout, SourceLoc::from(loc)));
}

RegisterTensor Script::reshape(const RegisterTensor& x, std::vector<int64_t> shape, Loc loc) {
  return RegisterTensor(builder().reshape(x.tensor(), std::move(shape), SourceLoc::from(loc)));
}

Expr Script::item(const RegisterTensor& x, Loc loc) { return Expr(builder().item(x.tensor(), SourceLoc::from(loc))); }

RegisterTensor Script::squeeze(const RegisterTensor& x, std::vector<int> dims, Loc loc) {
  return RegisterTensor(builder().squeeze(x.tensor(), std::move(dims), SourceLoc::from(loc)));
}

RegisterTensor Script::unsqueeze(const RegisterTensor& x, std::vector<int> dims, Loc loc) {
  return RegisterTensor(builder().unsqueeze(x.tensor(), std::move(dims), SourceLoc::from(loc)));
}

RegisterTensor Script::transpose(const RegisterTensor& x, Loc loc) {
  return RegisterTensor(builder().transpose(x.tensor(), SourceLoc::from(loc)));
}

RegisterTensor Script::repeat(const RegisterTensor& x, std::vector<int64_t> repeats, Loc loc) {
  return RegisterTensor(builder().repeat(x.tensor(), std::move(repeats), SourceLoc::from(loc)));
}

RegisterTensor Script::where(const TensorOperand& cond, const TensorOperand& x, const TensorOperand& y) {
  return RegisterTensor(builder().where(cond.tensor.tensor(), x.tensor.tensor(), x.scalar, y.tensor.tensor(), y.scalar,
                                        cond.loc));
}

RegisterTensor Script::unary(const char* op, const RegisterTensor& x, Loc loc) {
  return RegisterTensor(builder().unary(op, x.tensor(), SourceLoc::from(loc)));
}

RegisterTensor Script::clip(const RegisterTensor& x, const Expr& lo, const Expr& hi, Loc loc) {
  return RegisterTensor(builder().clip(x.tensor(), lo, hi, SourceLoc::from(loc)));
}

RegisterTensor Script::gelu(const RegisterTensor& x, const std::string& approximate, Loc loc) {
  return RegisterTensor(builder().gelu(x.tensor(), approximate, SourceLoc::from(loc)));
}

RegisterTensor Script::maximum(const TensorOperand& a, const TensorOperand& b) {
  return RegisterTensor(builder().binary(BinaryOp::Max, a.tensor.tensor(), a.scalar, b.tensor.tensor(), b.scalar, a.loc));
}

RegisterTensor Script::minimum(const TensorOperand& a, const TensorOperand& b) {
  return RegisterTensor(builder().binary(BinaryOp::Min, a.tensor.tensor(), a.scalar, b.tensor.tensor(), b.scalar, a.loc));
}

RegisterTensor Script::reduce(ReduceOp op, const RegisterTensor& x, const ReduceOptions& opts, Loc loc) {
  return RegisterTensor(builder().reduce(op, x.tensor(), opts.dims, opts.keepdim, SourceLoc::from(loc)));
}

RegisterTensor Script::sum(const RegisterTensor& x, ReduceOptions opts, Loc loc) { return reduce(ReduceOp::Sum, x, opts, loc); }
RegisterTensor Script::max(const RegisterTensor& x, ReduceOptions opts, Loc loc) { return reduce(ReduceOp::Max, x, opts, loc); }
RegisterTensor Script::min(const RegisterTensor& x, ReduceOptions opts, Loc loc) { return reduce(ReduceOp::Min, x, opts, loc); }
RegisterTensor Script::any(const RegisterTensor& x, ReduceOptions opts, Loc loc) { return reduce(ReduceOp::Any, x, opts, loc); }
RegisterTensor Script::all(const RegisterTensor& x, ReduceOptions opts, Loc loc) { return reduce(ReduceOp::All, x, opts, loc); }

RegisterTensor Script::scan(const RegisterTensor& x, int dim, const std::string& op, bool exclusive, Loc loc) {
  return RegisterTensor(builder().scan(op, x.tensor(), dim, exclusive, SourceLoc::from(loc)));
}

void Script::sync(Loc loc) { builder().sync(SourceLoc::from(loc)); }

}  // namespace tilus
