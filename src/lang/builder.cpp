#include "tilus/lang/builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>
#include <fmt/ranges.h>

#include "tilus/ir/inst_def.h"
#include "tilus/ir/simplify.h"
#include "tilus/ir/verifier.h"

namespace tilus {

namespace {

std::string type_of(const Tensor& t) { return t.defined() ? t.type_str() : std::string("<none>"); }

int normalize_dim(int dim, int rank) { return dim < 0 ? dim + rank : dim; }

// The static shape of a tensor, or empty when a dim is dynamic (hand-built IR); the
// verifier reports the problem with the instruction's location.
std::vector<int64_t> static_dims(const Tensor& t) {
  std::vector<int64_t> s;
  if (!t.defined()) return s;
  for (auto& d : t.shape()) {
    if (!d.is_int_const()) return {};
    s.push_back(d.int_value());
  }
  return s;
}

// Normalizes negative dims (Python's: -1 is the last); dims out of range and duplicates
// (after normalization) are reported with the dims as the user wrote them.
std::vector<int> normalize_dims(const std::vector<int>& dims, const Tensor& x, const char* inst, const SourceLoc& loc) {
  std::vector<int> out;
  int rank = x.defined() ? x.rank() : 0;
  for (int d : dims) {
    if (x.defined() && (d < -rank || d >= rank))
      throw CompileError(fmt::format("{}: dims [{}]: dim {} is out of range for {} (rank {}), where dims are 0 to {} "
                                     "or, from the end, -1 to -{}",
                                     inst, fmt::join(dims, ", "), d, type_of(x), rank, rank - 1, rank),
                         loc);
    int n = normalize_dim(d, rank);
    if (std::find(out.begin(), out.end(), n) != out.end())
      throw CompileError(fmt::format("{}: dim {} appears twice in dims [{}] of {}", inst, n, fmt::join(dims, ", "),
                                     type_of(x)),
                         loc);
    out.push_back(n);
  }
  return out;
}

// A static shape as the user gave it: positive dims that fit the IR's 32-bit extents.
void check_static_shape(const std::vector<int64_t>& shape, const char* inst, const SourceLoc& loc) {
  for (auto d : shape) {
    if (d <= 0) throw CompileError(fmt::format("{}: shape {} must have positive dims", inst, shape_str(shape)), loc);
    if (d > std::numeric_limits<int32_t>::max())
      throw CompileError(fmt::format("{}: shape {} has a dim larger than {}", inst, shape_str(shape),
                                     std::numeric_limits<int32_t>::max()),
                         loc);
  }
}

bool is_math_op(const std::string& op) {
  static const char* ops[] = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "round", "tanh", "floor", "ceil"};
  return std::any_of(std::begin(ops), std::end(ops), [&](const char* o) { return op == o; });
}

// A scalar operand next to a tensor of dtype t takes t's type when that loses no
// category (int literal next to a float tensor, etc.); a float scalar next to an integer
// tensor promotes the result to float.
Expr adopt_scalar(const Expr& s, DataType t) {
  if (!s.defined() || s.dtype() == t) return s;
  if (t.is_float() && (s.dtype().is_integer() || s.dtype().is_bool() || s.dtype().is_float())) return cast(s, t);
  if (t.is_integer() && (s.dtype().is_integer() || s.dtype().is_bool())) return cast(s, t);
  if (t.is_bool() && s.dtype().is_bool()) return s;
  return s;
}

}  // namespace

Builder::Builder(std::string kernel_name, SourceLoc loc) {
  kernel_.name = std::move(kernel_name);
  kernel_.loc = std::move(loc);
  scopes_.push_back(Scope{});
}

// --- kernel ---------------------------------------------------------------------------

Var Builder::add_param(const std::string& name, DataType dtype, SourceLoc loc) {
  for (auto& p : kernel_.params)
    if (p.name() == name)
      throw CompileError(fmt::format("kernel {} has two parameters named '{}'", kernel_.name, name), loc);
  if (!dtype.is_pointer() && !dtype.is_numeric() && !dtype.is_bool())
    throw CompileError(fmt::format("kernel parameter '{}' has type {}; parameters are scalars or pointers", name,
                                   dtype.name()),
                       loc);
  if (dtype.is_subbyte() && !dtype.is_pointer())
    throw CompileError(fmt::format("kernel parameter '{}' has sub-byte type {}; pass it as a wider scalar "
                                   "and cast inside the kernel",
                                   name, dtype.name()),
                       loc);
  Var v(name, dtype, VarRole::Param);
  kernel_.params.push_back(v);
  return v;
}

void Builder::add_constant(const std::string& name, const std::string& printed_value) {
  kernel_.constants.emplace_back(name, printed_value);
}

void Builder::set_blocks(std::vector<Expr> blocks, SourceLoc loc) {
  if (blocks.empty() || blocks.size() > 3)
    throw CompileError(fmt::format("attrs.blocks needs 1 to 3 block counts, got {}", blocks.size()), loc);
  for (auto& b : blocks) {
    if (!b.defined() || !(b.dtype().is_integer()))
      throw CompileError(fmt::format("attrs.blocks: block counts must be integers, got {}",
                                     b.defined() ? b.dtype().name() : "<undefined>"),
                         loc);
    if (b.is_int_const() && b.int_value() <= 0)
      throw CompileError(fmt::format("attrs.blocks: block count {} is not positive", b.int_value()), loc);
  }
  // Block counts are evaluated at launch from the parameters: lets they use are inlined.
  for (auto& b : blocks) b = inline_lets(b);
  kernel_.grid = std::move(blocks);
  blocks_set_ = true;
}

void Builder::set_warps(int64_t warps, SourceLoc loc) {
  if (warps < 1 || warps > kMaxWarps)
    throw CompileError(fmt::format("attrs.warps = {}: a block has 1 to {} warps", warps, kMaxWarps), loc);
  kernel_.warps = warps;
  warps_set_ = true;
}

void Builder::set_cluster(const std::vector<int64_t>& cluster_blocks, SourceLoc loc) {
  if (cluster_blocks.empty() || cluster_blocks.size() > 3)
    throw CompileError(fmt::format("attrs.cluster_blocks: needs 1 to 3 dimensions, got {}", cluster_blocks.size()), loc);
  std::array<int64_t, 3> cluster{1, 1, 1};
  int64_t size = 1;
  for (size_t d = 0; d < cluster_blocks.size(); ++d) {
    if (cluster_blocks[d] < 1)
      throw CompileError(fmt::format("attrs.cluster_blocks: dimension {} is {}, not positive", d, cluster_blocks[d]), loc);
    cluster[d] = cluster_blocks[d];
    size *= cluster_blocks[d];
  }
  // Checked again by the verifier, which also needs the grid; here the error names this line.
  if (size > kMaxPortableClusterBlocks)
    throw CompileError(fmt::format("attrs.cluster_blocks: a cluster of {} blocks is larger than the portable maximum "
                                   "of {}",
                                   size, kMaxPortableClusterBlocks),
                       loc);
  kernel_.cluster = cluster;
}

Program Builder::finish() {
  if (finished_) throw InternalError("Builder::finish() called twice");
  if (scopes_.size() != 1) {
    // A front end closes every scope it opens unless the body left one early (an exception
    // caught inside it, a `return` from a helper the front end does not see).
    static const char* kinds[] = {"body", "for loop", "if", "else branch", "while loop", "thread group"};
    const Scope& open = scopes_.back();
    throw CompileError(fmt::format("kernel {}: the {} opened here was never closed (the body left it early, by "
                                   "`return` or an exception it caught)",
                                   kernel_.name, kinds[open.kind]),
                       open.loc);
  }
  if (!blocks_set_)
    throw CompileError(fmt::format("kernel {} does not set attrs.blocks (the number of thread blocks)", kernel_.name),
                       kernel_.loc);
  if (!warps_set_)
    throw CompileError(fmt::format("kernel {} does not set attrs.warps (the number of warps per block)", kernel_.name),
                       kernel_.loc);
  finished_ = true;
  kernel_.body = make_seq(std::move(scopes_[0].stmts));
  if (!kernel_.body) kernel_.body = std::make_shared<SeqStmtNode>(std::vector<Stmt>{});
  Program p;
  p.kernels.push_back(kernel_);
  return p;
}

// --- scopes -----------------------------------------------------------------------------

void Builder::push(Scope s) {
  s.serial = next_serial_++;
  scopes_.push_back(std::move(s));
}

namespace {
// The statements of a closed scope as one body (an empty sequence when there are none).
Stmt body_of(std::vector<Stmt>&& stmts) {
  Stmt body = make_seq(std::move(stmts));
  return body ? body : std::make_shared<SeqStmtNode>(std::vector<Stmt>{});
}
}  // namespace

Builder::Scope Builder::pop(Scope::Kind expected, const char* what) {
  if (scopes_.size() <= 1 || scopes_.back().kind != expected)
    throw InternalError(fmt::format("unbalanced scopes: closing a {} that is not open", what));
  Scope s = std::move(scopes_.back());
  scopes_.pop_back();
  return s;
}

void Builder::emit_stmt(Stmt s) { scopes_.back().stmts.push_back(std::move(s)); }

bool Builder::in_loop() const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    if (it->kind == Scope::For || it->kind == Scope::While) return true;
    if (it->kind == Scope::ThreadGroup) return false;  // cannot leave a thread group by break
  }
  return false;
}

void Builder::check_index(const Expr& e, const char* what, const SourceLoc& loc, const std::string& inst) const {
  if (!e.defined() || !(e.dtype().is_integer()))
    throw CompileError(fmt::format("{}: {} must be integers, got {} ({})", inst, what,
                                   e.defined() ? to_string(e) : "<undefined>",
                                   e.defined() ? e.dtype().name() : "none"),
                       loc);
}

Var Builder::begin_for(const std::string& var_name, Expr begin, Expr end, Expr step, Unroll unroll, SourceLoc loc) {
  for (auto* e : {&begin, &end, &step}) check_index(*e, "loop bounds", loc, "range");
  if (step.is_int_const(0)) throw CompileError("range: step must not be zero", loc);
  if (unroll.kind == Unroll::Factor && unroll.factor < 1)
    throw CompileError(fmt::format("range: unroll factor must be positive, got {}", unroll.factor), loc);
  DataType t = promote(promote(begin.dtype(), end.dtype()), step.dtype());
  if (t.bits() < 32) t = dtypes::int32;
  // A step known only at run time may be 0, which would never reach `end`: such a loop runs
  // no iterations (Python raises there; a kernel cannot, and must not hang).
  if (!step.is_const()) end = select(step == make_const(step.dtype(), 0), tilus::cast(begin, t), tilus::cast(end, t));
  Scope s;
  s.kind = Scope::For;
  s.loc = loc;
  s.loop_var = Var(var_name.empty() ? "i" : var_name, t, VarRole::Loop);
  s.a = begin;
  s.b = end;
  s.c = step;
  s.unroll = unroll;
  push(std::move(s));
  return scopes_.back().loop_var;
}

void Builder::end_for() {
  Scope s = pop(Scope::For, "for loop");
  emit_stmt(std::make_shared<ForStmtNode>(s.loop_var, tilus::cast(s.a, s.loop_var.dtype()), tilus::cast(s.b, s.loop_var.dtype()),
                                          tilus::cast(s.c, s.loop_var.dtype()), s.unroll, body_of(std::move(s.stmts)),
                                          s.loc));
}

namespace {
Expr as_condition(const Expr& cond, const char* what, const SourceLoc& loc) {
  if (!cond.defined()) throw CompileError(fmt::format("{}: the condition is undefined", what), loc);
  if (cond.dtype().is_bool()) return cond;
  if (cond.dtype().is_integer()) return cond != 0;
  throw CompileError(fmt::format("{}: the condition must be a boolean (or integer) scalar, got {} of type {}", what,
                                 to_string(cond), cond.dtype().name()),
                     loc);
}

// Attaches `else_body` to the innermost else-less if of an else-if chain.
Stmt attach_else(const Stmt& s, Stmt else_body) {
  auto n = stmt_as<IfStmtNode>(s);
  if (!n->else_body) return std::make_shared<IfStmtNode>(n->cond, n->then_body, std::move(else_body), n->loc);
  if (stmt_as<IfStmtNode>(n->else_body))
    return std::make_shared<IfStmtNode>(n->cond, n->then_body, attach_else(n->else_body, std::move(else_body)), n->loc);
  throw InternalError("else attached to an if that already has one");
}

bool has_open_else(const Stmt& s) {
  auto n = stmt_as<IfStmtNode>(s);
  if (!n) return false;
  if (!n->else_body) return true;
  return has_open_else(n->else_body);
}
}  // namespace

void Builder::push_condition(int kind, const char* what, const Expr& cond, const SourceLoc& loc) {
  Scope s;
  s.kind = Scope::Kind(kind);
  s.loc = loc;
  s.a = as_condition(cond, what, loc);
  push(std::move(s));
}

void Builder::begin_if(Expr cond, SourceLoc loc) { push_condition(Scope::If, "if", cond, loc); }

void Builder::end_if() {
  Scope s = pop(Scope::If, "if");
  Stmt then_body = body_of(std::move(s.stmts));
  emit_stmt(std::make_shared<IfStmtNode>(s.a, then_body, nullptr, s.loc));
}

void Builder::begin_else(SourceLoc loc) {
  auto& stmts = scopes_.back().stmts;
  if (stmts.empty() || !has_open_else(stmts.back()))
    throw CompileError("else without a matching if", loc);
  Scope s;
  s.kind = Scope::Else;
  s.loc = loc;
  s.pending_if = stmts.back();
  stmts.pop_back();
  push(std::move(s));
}

void Builder::end_else() {
  Scope s = pop(Scope::Else, "else");
  Stmt body = body_of(std::move(s.stmts));
  emit_stmt(attach_else(s.pending_if, body));
}

void Builder::begin_while(Expr cond, SourceLoc loc) { push_condition(Scope::While, "while", cond, loc); }

void Builder::end_while() {
  Scope s = pop(Scope::While, "while loop");
  Stmt body = body_of(std::move(s.stmts));
  emit_stmt(std::make_shared<WhileStmtNode>(s.a, body, s.loc));
}

void Builder::emit_break(SourceLoc loc, const char* what) {
  if (!in_loop())
    throw CompileError(std::string(what) == "break"
                           ? std::string("break outside of a loop")
                           : fmt::format("{}: outside of a loop (a for or while loop of the kernel, not one that "
                                         "runs in Python while tracing)",
                                         what),
                       loc);
  emit_stmt(std::make_shared<BreakStmtNode>(loc));
}

void Builder::emit_return(SourceLoc loc) { emit_stmt(std::make_shared<ReturnStmtNode>(loc)); }

void Builder::emit_continue(SourceLoc loc) {
  if (!in_loop()) throw CompileError("continue outside of a loop", loc);
  emit_stmt(std::make_shared<ContinueStmtNode>(loc));
}

void Builder::begin_thread_group(ThreadGroupKind kind, int64_t thread_begin, int64_t num_threads, SourceLoc loc) {
  if (thread_begin < 0 || num_threads < 1)
    throw CompileError(fmt::format("{}: needs thread_begin >= 0 and num_threads >= 1, got thread_begin={}, "
                                   "num_threads={}",
                                   to_string(kind), thread_begin, num_threads),
                       loc);
  // The group must fit in its parent group.
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    if (it->kind == Scope::ThreadGroup) {
      if (thread_begin + num_threads > it->num_threads)
        throw CompileError(fmt::format("{}: threads [{}, {}) do not fit in the enclosing group of {} threads",
                                       to_string(kind), thread_begin, thread_begin + num_threads, it->num_threads),
                           loc);
      break;
    }
  }
  if (warps_set_ && thread_begin + num_threads > kernel_.num_threads())
    throw CompileError(fmt::format("{}: threads [{}, {}) do not fit in a block of {} threads ({} warps)",
                                   to_string(kind), thread_begin, thread_begin + num_threads, kernel_.num_threads(),
                                   kernel_.warps),
                       loc);
  Scope s;
  s.kind = Scope::ThreadGroup;
  s.loc = loc;
  s.group_kind = kind;
  s.thread_begin = thread_begin;
  s.num_threads = num_threads;
  push(std::move(s));
}

void Builder::end_thread_group() {
  Scope s = pop(Scope::ThreadGroup, "thread group");
  Stmt body = body_of(std::move(s.stmts));
  emit_stmt(std::make_shared<ThreadGroupStmtNode>(s.group_kind, s.thread_begin, s.num_threads, body, s.loc));
}

Var Builder::let(const std::string& name, Expr value, SourceLoc loc) {
  if (!value.defined()) throw CompileError(fmt::format("let {}: the value is undefined", name), loc);
  Var v(name, value.dtype(), VarRole::Local);
  emit_stmt(std::make_shared<LetStmtNode>(v, value, loc));
  let_values_[v.get()] = value;
  return v;
}

Var Builder::declare(const std::string& name, DataType dtype, Expr init, SourceLoc loc) {
  if (dtype.is_void() || dtype.is_subbyte())
    throw CompileError(fmt::format("declare {}: scalar variables cannot have type {}", name, dtype.name()), loc);
  if (!init.defined()) init = make_const(dtype, 0);
  if (init.dtype().is_pointer() != dtype.is_pointer())
    throw CompileError(fmt::format("declare {}: cannot initialize a {} variable with {} ({})", name, dtype.name(),
                                   to_string(init), init.dtype().name()),
                       loc);
  Var v(name, dtype, VarRole::Local);
  mutable_vars_.insert(v.get());
  emit_stmt(std::make_shared<DeclareStmtNode>(v, tilus::cast(init, dtype), loc));
  return v;
}

void Builder::assign(const Var& var, Expr value, SourceLoc loc) {
  if (var->role != VarRole::Local || !mutable_vars_.count(var.get()))
    throw CompileError(fmt::format("cannot assign to '{}': only variables made by declare() are mutable", var.name()), loc);
  if (!value.defined()) throw CompileError(fmt::format("assignment to '{}': the value is undefined", var.name()), loc);
  if (value.dtype().is_pointer() != var.dtype().is_pointer())
    throw CompileError(fmt::format("cannot assign {} ({}) to '{}' of type {}", to_string(value), value.dtype().name(),
                                   var.name(), var.dtype().name()),
                       loc);
  emit_stmt(std::make_shared<AssignStmtNode>(var, tilus::cast(value, var.dtype()), loc));
}

void Builder::record_before_innermost_scope(const std::function<void()>& record) {
  if (scopes_.size() < 2) return record();
  Scope inner = std::move(scopes_.back());
  scopes_.pop_back();
  try {
    record();
  } catch (...) {
    scopes_.push_back(std::move(inner));
    throw;
  }
  scopes_.push_back(std::move(inner));
}

Var Builder::declare_outside(const std::string& name, DataType dtype, Expr init, SourceLoc loc) {
  Var v;
  record_before_innermost_scope([&] { v = declare(name, dtype, std::move(init), loc); });
  return v;
}

Tensor Builder::register_tensor_outside(DataType dtype, std::vector<int64_t> shape, SourceLoc loc,
                                        const std::string& name) {
  Tensor t;
  record_before_innermost_scope([&] { t = register_tensor(dtype, std::move(shape), Expr(), loc, name); });
  return t;
}

void Builder::name(const Tensor& t, const std::string& name) {
  if (!t.defined() || name.empty()) return;
  // The node is this trace's own (made by an instruction recorded here, before any pass read
  // its name): the hint is set in place so that every handle to the tensor sees it.
  const_cast<TensorNode*>(t.get())->name = name;
}

// --- instructions -------------------------------------------------------------------------

void Builder::emit(std::shared_ptr<InstNode> inst) {
  last_loc_ = inst->loc;
  verify_inst(*inst);
  // Which threads may issue it (its definition's rule), against the current thread group.
  GroupRule rule = inst->def().threads;
  if (rule != GroupRule::Any) {
    int64_t threads = group_threads(inst->name(), inst->loc), begin = group_begin();
    bool ok = begin % 32 == 0 && (rule == GroupRule::OneWarp ? threads == 32 : threads >= 32 && threads % 32 == 0);
    if (!ok)
      throw CompileError(fmt::format("{}: must be issued by {} (a thread group of {} starting on a warp), but the "
                                     "current thread group is threads [{}, {}) of the block; use {}",
                                     inst->display_name(), rule == GroupRule::OneWarp ? "one warp" : "whole warps",
                                     rule == GroupRule::OneWarp ? "32 threads" : "a multiple of 32 threads", begin,
                                     begin + threads,
                                     rule == GroupRule::OneWarp ? "self.single_warp()" : "whole warps (warp_group)"),
                         inst->loc);
  }
  emit_stmt(make_inst_stmt(std::move(inst)));
}

Tensor Builder::emit_with_output(std::shared_ptr<InstNode> inst) {
  Tensor out = inst->output();
  emit(std::move(inst));
  return out;
}

Tensor Builder::global_view(Expr ptr, DataType dtype, std::vector<Expr> shape, std::vector<Expr> strides, SourceLoc loc,
                            const std::string& name) {
  for (auto& d : shape) check_index(d, "shape dims", loc, "global_view");
  for (auto& d : strides) check_index(d, "strides", loc, "global_view");
  if (!strides.empty() && strides.size() != shape.size())
    throw CompileError(fmt::format("global_view: shape {} has {} dims but strides {} has {}", shape_str(shape),
                                   shape.size(), shape_str(strides), strides.size()),
                       loc);
  auto i = make_inst<GlobalViewInst>(loc);
  i->ptr = ptr;
  i->out = Tensor::global(name, dtype, std::move(shape), std::move(strides));
  if (ptr.defined() && ptr.dtype().is_pointer())  // the verifier reports anything else
    global_ptrs_[i->out.get()] = ptr.dtype().pointee() == dtype ? ptr : tilus::cast(ptr, dtype.pointer_to());
  return emit_with_output(i);
}

Expr Builder::inline_lets(Expr e) const {
  for (int round = 0; round < 64; ++round) {
    bool changed = false;
    e = substitute(e, [&](const Var& v) {
      auto it = let_values_.find(v.get());
      if (it == let_values_.end()) return Expr();
      changed = true;
      return it->second;
    });
    if (!changed) break;
  }
  return e;
}

Tensor Builder::global_tensor(DataType dtype, std::vector<Expr> shape, bool requires_clean, SourceLoc loc,
                              const std::string& name) {
  std::string what = fmt::format("global_tensor(dtype={}, shape={})", dtype.name(), shape_str(shape));
  if (dtype.is_void() || dtype.is_pointer())
    throw CompileError(fmt::format("{}: the elements must be a scalar type, not {}", what, dtype.name()), loc);
  if (shape.empty()) throw CompileError(fmt::format("{}: the shape needs at least one dim", what), loc);
  for (auto& d : shape) {
    check_index(d, "shape dims", loc, "global_tensor");
    // The runtime sizes the tensor from the arguments before the launch: lets are inlined.
    d = inline_lets(d);
    for (const Var& v : free_vars(d))
      if (v->role != VarRole::Param)
        throw CompileError(fmt::format("{}: the runtime allocates it before the launch, so its shape may use only "
                                       "the kernel's parameters and constants, but it uses '{}' ({})",
                                       what, v.name(),
                                       v->role == VarRole::Loop      ? "a loop variable"
                                       : v->role == VarRole::Builtin ? "a per-block or per-thread index"
                                                                     : "a variable of the body"),
                           loc);
    if (d.is_int_const() && d.int_value() < 0)
      throw CompileError(fmt::format("{}: dim {} is negative", what, d.int_value()), loc);
  }
  GlobalScratch g;
  g.ptr = Var(fmt::format("global_tensor_{}", kernel_.global_tensors.size()), dtype.pointer_to(), VarRole::Param);
  g.shape = shape;
  g.requires_clean = requires_clean;
  g.loc = loc;
  kernel_.global_tensors.push_back(g);
  return global_view(g.ptr, dtype, std::move(shape), {}, loc, name);
}

Expr Builder::item_ptr(const Tensor& t, std::vector<Expr> indices, SourceLoc loc) {
  bool shared = t.defined() && t.is_shared();
  auto it = global_ptrs_.find(t.get());
  if (!shared && (!t.defined() || !t.is_global() || it == global_ptrs_.end()))
    throw CompileError(fmt::format("item_ptr: only an element of a global tensor of this kernel or of a shared tensor "
                                   "has an address here, got {}",
                                   type_of(t)),
                       loc);
  // A shared tensor without indices: its first element.
  if (!(shared && indices.empty()) && indices.size() != size_t(t.rank()))
    throw CompileError(fmt::format("item_ptr: {} has {} dims but {} indices were given", t.type_str(), t.rank(),
                                   indices.size()),
                       loc);
  if (t.dtype().is_subbyte())
    throw CompileError(fmt::format("item_ptr: the elements of {} are packed below a byte and have no address of "
                                   "their own",
                                   t.type_str()),
                       loc);
  for (auto& i : indices) check_index(i, "indices", loc, "item_ptr");
  if (shared) {
    auto i = make_inst<SharedItemPtrInst>(loc);
    i->x = indices.empty() ? t : slice_shared(t, std::move(indices), {}, {}, loc);
    i->var = Var(t->name.empty() ? "ptr" : t->name + "_ptr", t.dtype().pointer_to(), VarRole::Local);
    emit(i);
    return i->var;
  }
  Expr offset = int_const(0, dtypes::int64);  // a global tensor always has its strides (Tensor::global)
  for (size_t d = 0; d < indices.size(); ++d)
    offset = offset + tilus::cast(indices[d], dtypes::int64) * tilus::cast(t->strides[d], dtypes::int64);
  offset = simplify(offset);
  return offset.is_int_const() && offset.int_value() == 0 ? it->second : it->second + offset;
}

void Builder::semaphore(SemaphoreOp op, Expr semaphore, Expr value, SourceLoc loc) {
  auto i = make_inst<SemaphoreInst>(loc);
  i->op = op;
  i->semaphore = std::move(semaphore);
  i->value = std::move(value);
  // The verifier (run by emit) checks the operands; an integer of another width is converted.
  if (i->value.defined() && i->value.dtype().is_integer() && i->value.dtype() != dtypes::int32)
    i->value = tilus::cast(i->value, dtypes::int32);
  emit(i);
}

Tensor Builder::shared_tensor(DataType dtype, std::vector<int64_t> shape, SourceLoc loc, const std::string& name) {
  check_static_shape(shape, "shared_tensor", loc);
  auto i = make_inst<AllocateSharedInst>(loc);
  i->out = Tensor::shared(name, dtype, std::move(shape));
  Tensor out = emit_with_output(i);
  whole_shared_.insert(out.get());
  return out;
}

Tensor Builder::reshape_shared(const Tensor& src, std::vector<int64_t> shape, SourceLoc loc) {
  if (!src.defined() || !src.is_shared())
    throw CompileError(fmt::format("reshape_shared: tensor must be a shared tensor, got {}", type_of(src)), loc);
  check_static_shape(shape, "reshape_shared", loc);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n != src.num_elements())
    throw CompileError(fmt::format("reshape_shared: {} has {} elements, the shape {} has {}", src.type_str(),
                                   src.num_elements(), shape_str(shape), n),
                       loc);
  if (!whole_shared_.count(src.get()))
    throw CompileError(fmt::format("reshape_shared: {} is a slice or view of a shared tensor; only a shared_tensor "
                                   "allocation itself (or a reshape of one) can be reshaped",
                                   src.type_str()),
                       loc);
  auto i = make_inst<ReshapeSharedInst>(loc);
  i->src = src;
  i->out = Tensor::shared(src->name, src.dtype(), shape);
  Tensor out = emit_with_output(i);
  whole_shared_.insert(out.get());
  return out;
}

void Builder::free_shared(const Tensor& t, SourceLoc loc) {
  auto i = make_inst<FreeSharedInst>(loc);
  i->tensor = t;
  emit(i);
}

Tensor Builder::register_tensor(DataType dtype, std::vector<int64_t> shape, Expr init, SourceLoc loc,
                                const std::string& name) {
  check_static_shape(shape, "register_tensor", loc);
  auto i = make_inst<AllocateRegisterInst>(loc);
  i->out = Tensor::reg(name, dtype, shape);
  if (init.defined()) {
    if (!(init.dtype().is_numeric() || init.dtype().is_bool()))
      throw CompileError(fmt::format("register_tensor: init {} of type {} is not a number", to_string(init),
                                     init.dtype().name()),
                         loc);
    i->init = tilus::cast(init, dtype);
  }
  return emit_with_output(i);
}

Tensor Builder::register_tensor(DataType dtype, std::vector<int64_t> shape,
                                const std::function<Expr(const std::vector<Var>&)>& init, SourceLoc loc,
                                const std::string& name) {
  check_static_shape(shape, "register_tensor", loc);
  auto i = make_inst<AllocateRegisterInst>(loc);
  i->out = Tensor::reg(name, dtype, shape);
  for (size_t d = 0; d < shape.size(); ++d) i->axes.push_back(Var(fmt::format("i{}", d), dtypes::int32, VarRole::Binder));
  Expr v = init(i->axes);
  if (!v.defined() || !(v.dtype().is_numeric() || v.dtype().is_bool()))
    throw CompileError("register_tensor: the init function must return a number", loc);
  i->init = tilus::cast(v, dtype);
  return emit_with_output(i);
}

Tensor Builder::slice_shared(const Tensor& src, std::vector<Expr> offsets, std::vector<int> dims,
                             std::vector<int64_t> shape, SourceLoc loc) {
  auto i = make_inst<SliceSharedInst>(loc);
  i->src = src;
  i->offsets = std::move(offsets);
  i->dims = std::move(dims);
  DataType dt = src.defined() ? src.dtype() : dtypes::void_t;
  SharedLayout layout;
  if (src.defined() && src.is_shared() && src->shared_layout.defined()) {
    // Keep the strides of the kept dims.
    std::vector<int64_t> strides;
    for (int d : i->dims)
      if (d >= 0 && d < src.rank()) strides.push_back(src->shared_layout.strides()[d]);
    if (strides.size() == shape.size()) layout = SharedLayout(shape, strides, src->shared_layout.swizzle());
  }
  i->out = Tensor::shared(src.defined() ? src->name : "s", dt, shape, layout);
  return emit_with_output(i);
}

Tensor Builder::index_shared(const Tensor& src, std::vector<Expr> indices, SourceLoc loc) {
  if (!src.defined() || !src.is_shared())
    throw CompileError(fmt::format("indexing: only shared tensors can be indexed this way, got {}", type_of(src)), loc);
  if (indices.size() > size_t(src.rank()))
    throw CompileError(fmt::format("indexing: {} indices for {}", indices.size(), type_of(src)), loc);
  std::vector<int64_t> full = static_dims(src);
  if (full.size() != size_t(src.rank())) throw CompileError(fmt::format("indexing: {} has a dynamic shape", type_of(src)), loc);
  std::vector<Expr> offsets = indices;
  std::vector<int> dims;
  std::vector<int64_t> shape;
  for (int d = int(indices.size()); d < src.rank(); ++d) {
    offsets.push_back(int_const(0));
    dims.push_back(d);
    shape.push_back(full[d]);
  }
  for (auto& o : indices) check_index(o, "indices", loc, "indexing");
  return slice_shared(src, offsets, dims, shape, loc);
}

namespace {
std::vector<int> default_dims(const Tensor& global, size_t tile_rank) {
  std::vector<int> dims;
  int r = global.defined() ? global.rank() : 0;
  for (int d = std::max<int>(0, r - int(tile_rank)); d < r; ++d) dims.push_back(d);
  return dims;
}
}  // namespace

Tensor Builder::load_global(const Tensor& src, std::vector<Expr> offsets, std::vector<int64_t> shape,
                            std::vector<int> dims, SourceLoc loc) {
  auto i = make_inst<LoadGlobalInst>(loc);
  i->src = src;
  i->offsets = std::move(offsets);
  i->dims = dims.empty() ? default_dims(src, shape.size()) : normalize_dims(dims, src, "load_global", loc);
  check_static_shape(shape, "load_global", loc);
  i->out = Tensor::reg("x", src.defined() ? src.dtype() : dtypes::void_t, shape);
  return emit_with_output(i);
}

Var Builder::item(const Tensor& x, SourceLoc loc) {
  if (!x.defined() || !x.is_register() || x.num_elements() != 1)
    throw CompileError(fmt::format("item: a register tensor of one element has an item, got {}", type_of(x)), loc);
  auto i = make_inst<ItemInst>(loc);
  i->x = x;
  i->var = Var(x->name.empty() ? "item" : x->name + "_item", x.dtype(), VarRole::Local);
  emit(i);
  return i->var;
}

namespace {
// The fields every atomic (and scatter) sets; its old values are `values`-shaped.
void set_atomic(AtomicInst& i, AtomicOp op, const Tensor& dst, const Tensor& values, const std::string& sem,
                const std::string& scope) {
  i.op = op;
  i.dst = dst;
  i.values = values;
  i.sem = sem;
  i.scope = scope;
  i.out = Tensor::reg("old", values.defined() ? values.dtype() : dtypes::void_t,
                      values.defined() && values.is_register() ? static_dims(values) : std::vector<int64_t>{});
}
}  // namespace

Tensor Builder::atomic(AtomicOp op, const Tensor& dst, const Tensor& values, const Tensor& compare,
                       std::vector<Expr> offsets, std::vector<int> dims, const std::string& sem,
                       const std::string& scope, SourceLoc loc) {
  auto i = make_inst<AtomicInst>(loc);
  i->compare = compare;
  std::string name = fmt::format("atomic.{}_{}", dst.defined() && dst.is_shared() ? "shared" : "global", to_string(op));
  if (!dst.defined() || !(dst.is_global() || dst.is_shared()) || !values.defined() || !values.is_register())
    throw CompileError(fmt::format("{}: expected a global or shared dst and register values, got {} and {}", name,
                                   type_of(dst), type_of(values)),
                       loc);
  if (dst.is_global()) {
    i->offsets = std::move(offsets);
    if (i->offsets.empty()) i->offsets.assign(size_t(dst.rank()), Expr(0));  // the tile at the origin
    i->dims = dims.empty() ? default_dims(dst, values.rank()) : normalize_dims(dims, dst, name.c_str(), loc);
  } else if (!offsets.empty() || !dims.empty()) {
    throw CompileError(fmt::format("{}: a shared dst is the whole tensor {} (slice_shared it); offsets and dims are "
                                   "for a global dst",
                                   name, type_of(dst)),
                       loc);
  }
  set_atomic(*i, op, dst, values, sem, scope);
  return emit_with_output(i);
}

Tensor Builder::atomic_scatter(AtomicOp op, bool store, const Tensor& dst, int dim, const Tensor& indices,
                               const Tensor& values, const std::string& sem, const std::string& scope, SourceLoc loc) {
  const char* space = dst.defined() && dst.is_shared() ? "shared" : "global";
  std::string name = store ? fmt::format("store_{}_scatter", space)
                           : fmt::format("atomic.{}_scatter_{}", space, to_string(op));
  if (!dst.defined() || !(dst.is_global() || dst.is_shared()) || !values.defined() || !values.is_register() ||
      !indices.defined() || !indices.is_register())
    throw CompileError(fmt::format("{}: expected a global or shared dst and register indices and values, got {}, {} "
                                   "and {}",
                                   name, type_of(dst), type_of(indices), type_of(values)),
                       loc);
  if (dst.rank() != values.rank())
    throw CompileError(fmt::format("{}: dst {} and values {} must have the same rank (each element keeps its other "
                                   "coordinates)",
                                   name, type_of(dst), type_of(values)),
                       loc);
  dim = normalize_dims({dim}, dst, name.c_str(), loc)[0];
  auto i = make_inst<AtomicInst>(loc);
  set_atomic(*i, store ? AtomicOp::Exch : op, dst, values, sem, scope);
  i->store = store;
  i->indices = indices;
  i->scatter_dim = dim;
  if (dst.is_global()) {
    i->offsets.assign(size_t(dst.rank()), Expr(0));
    i->dims = default_dims(dst, values.rank());
  }
  return emit_with_output(i);
}

void Builder::store_global(const Tensor& dst, const Tensor& src, std::vector<Expr> offsets, std::vector<int> dims,
                           SourceLoc loc) {
  auto i = make_inst<StoreGlobalInst>(loc);
  i->dst = dst;
  i->src = src;
  i->offsets = std::move(offsets);
  i->dims = dims.empty() ? default_dims(dst, src.defined() ? src.rank() : 0) : normalize_dims(dims, dst, "store_global", loc);
  emit(i);
}

Tensor Builder::load_shared(const Tensor& src, SourceLoc loc) {
  auto i = make_inst<LoadSharedInst>(loc);
  i->src = src;
  std::vector<int64_t> shape = src.defined() && src.is_shared() ? static_dims(src) : std::vector<int64_t>{};
  i->out = Tensor::reg("y", src.defined() ? src.dtype() : dtypes::void_t, shape);
  return emit_with_output(i);
}

void Builder::store_shared(const Tensor& dst, const Tensor& src, SourceLoc loc) {
  auto i = make_inst<StoreSharedInst>(loc);
  i->dst = dst;
  i->src = src;
  emit(i);
}

void Builder::copy_async(const Tensor& src, const Tensor& dst, std::vector<Expr> offsets, std::vector<int> dims,
                         const std::optional<std::string>& evict, bool check_bounds, SourceLoc loc) {
  auto i = make_inst<CopyAsyncInst>(loc);
  i->src = src;
  i->dst = dst;
  i->offsets = std::move(offsets);
  i->dims = dims.empty() ? default_dims(src, dst.defined() ? dst.rank() : 0) : normalize_dims(dims, src, "copy_async", loc);
  if (evict) {
    auto e = parse_evict_policy(*evict);
    if (!e)
      throw CompileError(fmt::format("copy_async: evict='{}' is not one of 'evict_normal', 'evict_first', "
                                     "'evict_last'",
                                     *evict),
                         loc);
    i->evict = *e;
  }
  i->check_bounds = check_bounds;
  emit(i);
}

void Builder::copy_async_commit_group(SourceLoc loc) { emit(make_inst<CopyAsyncCommitGroupInst>(loc)); }

void Builder::copy_async_wait_group(int64_t n, SourceLoc loc) {
  if (n < 0) throw CompileError(fmt::format("copy_async_wait_group: n = {} must be >= 0", n), loc);
  auto i = make_inst<CopyAsyncWaitGroupInst>(loc);
  i->n = n;
  emit(i);
}

void Builder::copy_async_wait_all(SourceLoc loc) { emit(make_inst<CopyAsyncWaitAllInst>(loc)); }

namespace {
std::optional<bool> parse_bool(const std::string& s) {
  if (s == "true" || s == "True" || s == "1") return true;
  if (s == "false" || s == "False" || s == "0") return false;
  return std::nullopt;
}

// Fills in a region's offsets and extents: a whole tensor when both are missing.
void complete_region(CopyRegion& r) {
  if (r.offsets.empty() && r.extents.empty()) {
    for (int d = 0; d < r.tensor.rank(); ++d) r.offsets.push_back(int_const(0));
    r.extents = r.tensor.shape();
  }
}
}  // namespace

namespace {
std::string region_str(const char* role, const CopyRegion& r) {
  return fmt::format("{} {} (offsets {}, extents {})", role, type_of(r.tensor), shape_str(r.offsets),
                     shape_str(r.extents));
}

// A global region whose box reaches its tensor's end in dim d: the bounds predicates stop a
// copy where the region stops, whatever the tile's extent.
bool reaches_end(const CopyRegion& r, size_t d) {
  return r.tensor.is_global() && d < r.offsets.size() && d < size_t(r.tensor.rank()) &&
         structural_equal(simplify(r.offsets[d] + r.extents[d]), simplify(r.tensor.shape()[d]));
}

// Pairwise extent legalization over the trailing dims, so that the copy moves a tile of
// constant extents that both regions agree on: equal stays; a memory side's 1 broadcasts; a
// dynamic extent takes the other side's constant when its region is global and reaches its
// tensor's end there (the bounds predicates stop the copy where the region stops). Any other
// dynamic extent would move another tile than the region says: an error naming both regions.
// A static mismatch is reported by verify.
void legalize_extents(CopyRegion& src, CopyRegion& dst, const std::string& name, const SourceLoc& loc) {
  auto both = [&] { return region_str("src", src) + " and " + region_str("dst", dst); };
  size_t common = std::min(src.extents.size(), dst.extents.size());
  for (size_t k = 0; k < common; ++k) {
    size_t da = src.extents.size() - 1 - k, db = dst.extents.size() - 1 - k;
    Expr& a = src.extents[da];
    Expr& b = dst.extents[db];
    if (!a.is_int_const() || !b.is_int_const()) {
      // The constant the tile takes here: a register side's extent, or a memory side's but a
      // broadcasting 1.
      Expr tile;
      if (a.is_int_const() && (src.tensor.is_register() || !a.is_int_const(1))) tile = a;
      if (b.is_int_const() && (dst.tensor.is_register() || !b.is_int_const(1))) tile = b;
      if (!tile.defined())
        throw CompileError(fmt::format("{}: the extent of the copied tile in its dim {} is not a constant ({} and {}): "
                                       "{}; memory-to-memory copies need constant extents: slice with one "
                                       "(g[i0:i0 + 16])",
                                       name, common - 1 - k, to_string(a), to_string(b), both()),
                           loc);
      for (auto [e, r, d] : {std::tuple<Expr*, const CopyRegion*, size_t>{&a, &src, da}, {&b, &dst, db}}) {
        if (e->is_int_const()) continue;
        const char* role = r == &src ? "src" : "dst";
        if (!r->tensor.is_global())
          throw CompileError(fmt::format("{}: extent {} of dim {} of the {} region is not a constant, but a {} tile's "
                                         "extents are: {}; slice with a constant extent (s[i0:i0 + {}])",
                                         name, to_string(*e), d, role, to_string(r->tensor.scope()), both(),
                                         to_string(tile)),
                             loc);
        if (!reaches_end(*r, d))
          throw CompileError(
              fmt::format("{}: extent {} of dim {} of the {} region is not a constant and the region stops before its "
                          "tensor's end, so the copy would move {} elements there, past the region: {}; slice with a "
                          "constant extent (g[i0:i0 + {}]) or to the end (g[i0:])",
                          name, to_string(*e), d, role, to_string(tile), both(), to_string(tile)),
              loc);
        *e = tile;
      }
    }
    if (a.is_int_const(1) && !b.is_int_const(1)) {
      if (!src.tensor.is_register()) a = b;
    } else if (b.is_int_const(1) && !a.is_int_const(1)) {
      if (!dst.tensor.is_register()) b = a;
    }
  }
  // Leading dims that only one side has: their extents are the tile's too.
  for (auto [r, n] : {std::pair<const CopyRegion*, size_t>{&src, src.extents.size()}, {&dst, dst.extents.size()}})
    for (size_t d = 0; d + common < n; ++d)
      if (!r->extents[d].is_int_const())
        throw CompileError(fmt::format("{}: the extent of the copied tile in its dim {} is not a constant ({}): {}; "
                                       "memory-to-memory copies need constant extents: slice with one (g[i0:i0 + 16])",
                                       name, d, to_string(r->extents[d]), both()),
                           loc);
}
}  // namespace

void Builder::copy(CopyRegion src, CopyRegion dst, const CopyArgs& args, SourceLoc loc) {
  auto i = make_inst<CopyInst>(loc);
  i->api = args.api;
  const std::string name = i->display_name();
  if (!src.tensor.defined() || !dst.tensor.defined())
    throw CompileError(fmt::format("{}: source and destination must be tensors, got {} and {}", name, type_of(src.tensor),
                                   type_of(dst.tensor)),
                       loc);
  bool src_head = !src.offsets.empty() && src.extents.empty();
  bool dst_head = !dst.offsets.empty() && dst.extents.empty();
  complete_region(src);
  complete_region(dst);
  // A slice's extent is stop - start: `g[i0:i0 + 16]` has extent 16, not a dynamic one (which
  // would take the other side's and copy a larger tile).
  for (CopyRegion* r : {&src, &dst})
    for (Expr& e : r->extents)
      if (e.defined()) e = simplify(e);
  if (src_head && dst_head) {
    // Two scalars: a direct store of one element.
    i->scalar = true;
    src.extents.assign(src.offsets.size(), int_const(1));
    dst.extents.assign(dst.offsets.size(), int_const(1));
  } else if (src_head || dst_head) {
    // Head-element sugar: the region starts at the element and takes the other side's
    // extents (right-aligned; the remaining leading dims have extent 1).
    CopyRegion& head = src_head ? src : dst;
    const CopyRegion& other = src_head ? dst : src;
    size_t n = head.offsets.size();
    head.extents.assign(n, int_const(1));
    for (size_t k = 0; k < std::min(n, other.extents.size()); ++k)
      head.extents[n - 1 - k] = other.extents[other.extents.size() - 1 - k];
  }
  legalize_extents(src, dst, name, loc);
  i->src = std::move(src);
  i->dst = std::move(dst);
  // Keyword arguments, then annotations on top (user annotations win).
  auto evict = [&](const std::string& value, const char* what) {
    auto e = parse_evict_policy(value);
    if (!e)
      throw CompileError(fmt::format("{}: {}='{}' is not one of 'evict_normal', 'evict_first', 'evict_last'", name,
                                     what, value),
                         loc);
    return *e;
  };
  auto boolean = [&](const std::string& key, const std::string& value) {
    auto b = parse_bool(value);
    if (!b) throw CompileError(fmt::format("{}: annotation {}='{}' is not a boolean", name, key, value), loc);
    return *b;
  };
  i->coalesced_width = args.coalesced_width;
  i->disable_tma = args.disable_tma;
  if (args.eviction_policy) i->eviction_policy = evict(*args.eviction_policy, "eviction_policy");
  for (auto& [key, value] : args.annotations) {
    if (key == "coalesced_width") {
      char* end = nullptr;
      long long w = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0')
        throw CompileError(fmt::format("{}: annotation coalesced_width='{}' is not an integer", name, value), loc);
      i->coalesced_width = w;
    } else if (key == "disable_tma") {
      i->disable_tma = boolean(key, value);
    } else if (key == "use_tma") {
      i->use_tma = boolean(key, value);
    } else if (key == "use_cp_async") {
      i->use_cp_async = boolean(key, value);
    } else if (key == "eviction_policy") {
      i->eviction_policy = evict(value, "annotation eviction_policy");
    } else {
      throw CompileError(fmt::format("{}: unknown annotation '{}' (known: coalesced_width, disable_tma, "
                                     "eviction_policy, use_tma, use_cp_async)",
                                     name, key),
                         loc);
    }
    i->annotations[key] = value;
  }
  i->loop_layout = args.loop_layout;
  i->barrier = args.barrier;
  if (args.api == CopyApi::TmaCopy) i->use_tma = true;
  emit(i);
}

Tensor Builder::mbarrier_alloc(std::vector<Expr> counts, SourceLoc loc) {
  if (counts.empty()) throw CompileError("mbarrier.alloc: counts must name at least one barrier", loc);
  Tensor barriers = shared_tensor(dtypes::uint64, {int64_t(counts.size())}, loc, "barriers");
  auto i = make_inst<MbarrierInitInst>(loc);
  i->barriers = barriers;
  for (auto& c : counts) i->counts.push_back(simplify(c));
  emit(i);
  return barriers;
}

void Builder::mbarrier(MbarrierOp op, const Tensor& barrier, Expr value, const std::string& sem,
                       const std::string& scope, Expr cta_id, SourceLoc loc) {
  auto i = make_inst<MbarrierInst>(loc);
  i->op = op;
  i->barrier = barrier;
  i->value = value.defined() ? simplify(value) : value;
  i->sem = sem;
  i->scope = scope;
  i->cta_id = cta_id;
  emit(i);
}

void Builder::defined(const std::string& name, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::vector<std::pair<std::string, Expr>>& scalars,
                      const std::vector<std::pair<std::string, std::string>>& attrs, SourceLoc loc) {
  auto i = make_defined(name, tensors, scalars, attrs, std::move(loc));
  for (auto& e : i->scalars)
    if (e.defined()) e = simplify(e);
  emit(i);
}

void Builder::mbarrier_wait(const Tensor& barrier, const Tensor& phase, const std::string& sem,
                            const std::string& scope, SourceLoc loc) {
  auto i = make_inst<MbarrierInst>(loc);
  i->op = MbarrierOp::Wait;
  i->barrier = barrier;
  i->value_tensor = phase;
  i->sem = sem;
  i->scope = scope;
  emit(i);
}

void Builder::tma_copy_tile(const Tensor& global, const Tensor& shared, std::vector<Expr> offsets,
                            std::vector<int> dims, const Tensor& barrier, bool load, SourceLoc loc,
                            Expr multicast_mask, Expr cache_policy, int64_t cta_group, Expr barrier_rank) {
  const char* name = load ? "tma.global_to_shared" : "tma.shared_to_global";
  if (cta_group != 1 && cta_group != 2)
    throw CompileError(fmt::format("{}: cta_group must be 1 or 2, got {}", name, cta_group), loc);
  if (barrier_rank.defined() && cta_group != 2)
    throw CompileError(fmt::format("{}: the mbarrier is another block's (cluster.map_shared_addr): a TMA load completes "
                                   "on a peer's barrier only with cta_group=2 (the pair's barrier)",
                                   name),
                       loc);
  if (!global.defined() || !global.is_global() || !shared.defined() || !shared.is_shared())
    throw CompileError(fmt::format("{}: expected a global and a shared tensor, got {} and {}", name, type_of(global),
                                   type_of(shared)),
                       loc);
  std::vector<int> d = dims.empty() ? default_dims(global, size_t(shared.rank())) : normalize_dims(dims, global, name, loc);
  if (d.size() != size_t(shared.rank()))
    throw CompileError(fmt::format("{}: dims {} name {} global dims for the {} dims of {}", name, fmt::format("[{}]", fmt::join(d, ", ")), d.size(),
                                   shared.rank(), type_of(shared)),
                       loc);
  if (offsets.size() != size_t(global.rank()))
    throw CompileError(fmt::format("{}: offsets {} need one per dim of {}", name, shape_str(offsets), type_of(global)),
                       loc);
  // The box: the shared tile's extents on `dims` (in increasing order: TMA cannot transpose),
  // 1 elsewhere; a CopyRegion of the global tensor against the whole shared tensor, whose
  // extents pair right-aligned once the leading 1s are dropped.
  for (size_t k = 1; k < d.size(); ++k)
    if (d[k] <= d[k - 1])
      throw CompileError(fmt::format("{}: dims {} must increase (the TMA box keeps the global tensor's dim order)",
                                     name, fmt::format("[{}]", fmt::join(d, ", "))),
                         loc);
  for (size_t k = 0; k + 1 < d.size(); ++k)
    for (int g = d[k] + 1; g < d[k + 1]; ++g)
      throw CompileError(fmt::format("{}: dims {} skip global dim {} between two tile dims; the tile's dims must be "
                                     "consecutive global dims",
                                     name, fmt::format("[{}]", fmt::join(d, ", ")), g),
                         loc);
  CopyRegion g;
  g.tensor = global;
  g.offsets = std::move(offsets);
  for (int k = 0; k < global.rank(); ++k) g.extents.push_back(int_const(1));
  for (size_t k = 0; k < d.size(); ++k) g.extents[d[k]] = int_const(shared.static_shape()[k]);
  // The regions pair right-aligned, so the tile must end at the last global dim.
  if (!d.empty() && d.back() != global.rank() - 1)
    throw CompileError(fmt::format("{}: dims {} must end at the last global dim ({}) for a TMA box", name,
                                   fmt::format("[{}]", fmt::join(d, ", ")), global.rank() - 1),
                       loc);
  CopyRegion s;
  s.tensor = shared;
  complete_region(s);
  auto i = make_inst<CopyInst>(loc);
  i->api = load ? CopyApi::TmaGlobalToShared : CopyApi::TmaSharedToGlobal;
  i->use_tma = true;
  i->barrier = barrier;
  i->multicast_mask = std::move(multicast_mask);
  i->cta_group = cta_group;
  if (barrier_rank.defined()) {
    check_index(barrier_rank, "the barrier's block (target_rank)", loc, name);
    i->barrier_rank = simplify(barrier_rank);
  }
  // Integers of any width name the policy's 64 bits (a Python int past 2^63 arrives negative).
  i->cache_policy = cache_policy.defined() && cache_policy.dtype().is_integer() ? simplify(tilus::cast(cache_policy, dtypes::uint64))
                                                                               : cache_policy;
  i->src = load ? g : s;
  i->dst = load ? s : g;
  emit(i);
}

void Builder::c2d_im2col(const Tensor& img, const Tensor& col, Expr nhw_step, Expr c_step, int64_t kernel,
                         int64_t stride, int64_t dilation, int64_t pad, const std::optional<std::string>& eviction_policy,
                         SourceLoc loc, const Tensor& barrier) {
  auto i = make_inst<Im2colInst>(loc);
  i->barrier = barrier;
  i->img = img;
  i->col = col;
  i->nhw_step = nhw_step;
  i->c_step = c_step;
  i->kernel = kernel;
  i->stride = stride;
  i->dilation = dilation;
  i->pad = pad;
  if (eviction_policy) {
    auto e = parse_evict_policy(*eviction_policy);
    if (!e)
      throw CompileError(fmt::format("c2d_im2col: eviction_policy='{}' is not one of 'evict_normal', 'evict_first', "
                                     "'evict_last'",
                                     *eviction_policy),
                         loc);
    i->eviction_policy = *e;
  }
  emit(i);
}

void Builder::tma_commit_group(SourceLoc loc) { emit(make_inst<TmaCommitGroupInst>(loc)); }

void Builder::tma_wait_group(int64_t n, bool read, SourceLoc loc) {
  auto i = make_inst<TmaWaitGroupInst>(loc);
  i->n = n;
  i->read = read;
  emit(i);
}

void Builder::fence_proxy_async(const std::string& space, SourceLoc loc) {
  auto i = make_inst<FenceProxyAsyncInst>(loc);
  i->space = space;
  emit(i);
}

void Builder::wgmma_fence(SourceLoc loc) { emit(make_inst<WgmmaFenceInst>(loc)); }

void Builder::wgmma_mma(const Tensor& a, const Tensor& b, const Tensor& d, SourceLoc loc) {
  auto i = make_inst<WgmmaMmaInst>(loc);
  i->a = a;
  i->b = b;
  i->d = d;
  emit(i);
}

void Builder::wgmma_commit_group(SourceLoc loc) { emit(make_inst<WgmmaCommitGroupInst>(loc)); }

void Builder::wgmma_wait_group(int64_t n, SourceLoc loc) {
  auto i = make_inst<WgmmaWaitGroupInst>(loc);
  i->n = n;
  emit(i);
}

Tensor Builder::permute_shared(const Tensor& src, std::vector<int> dims, SourceLoc loc) {
  if (!src.defined() || !src.is_shared())
    throw CompileError(fmt::format("permute: only shared tensors are permuted this way, got {}", type_of(src)), loc);
  std::vector<int64_t> full = static_dims(src);
  std::vector<int> sorted = dims;
  std::sort(sorted.begin(), sorted.end());
  for (size_t k = 0; k < sorted.size(); ++k)
    if (sorted.size() != full.size() || sorted[k] != int(k))
      throw CompileError(fmt::format("permute: dims [{}] is not a permutation of the {} dims of {}",
                                     fmt::join(dims, ", "), full.size(), type_of(src)),
                         loc);
  std::vector<int64_t> shape;
  for (int d : dims) shape.push_back(full[size_t(d)]);
  return slice_shared(src, std::vector<Expr>(full.size(), int_const(0)), dims, shape, loc);
}

Tensor Builder::dot(const Tensor& a, const Tensor& b, const Tensor& c, SourceLoc loc) {
  auto i = make_inst<DotInst>(loc);
  i->a = a;
  i->b = b;
  i->c = c;
  i->out = Tensor::reg("d", c.defined() ? c.dtype() : dtypes::void_t, c.defined() && c.is_register() ? static_dims(c)
                                                                                                    : std::vector<int64_t>{});
  return emit_with_output(i);
}

Tensor Builder::dot(const Tensor& a, const Tensor& b, std::optional<DataType> acc_dtype, SourceLoc loc) {
  if (!a.defined() || !b.defined()) throw CompileError("dot: a and b must be register tensors", loc);
  DataType dt = acc_dtype ? *acc_dtype : (a.dtype().is_float() ? dtypes::float32 : dtypes::int32);
  auto dim = [](const Tensor& t, int d) {
    return t.rank() == 2 && t.shape()[d].is_int_const() ? t.shape()[d].int_value() : int64_t(1);
  };
  Tensor acc = register_tensor(dt, {dim(a, 0), dim(b, 1)}, make_const(dt, 0), loc, "acc");
  return dot(a, b, acc, loc);
}

Tensor Builder::cast(const Tensor& x, DataType dtype, SourceLoc loc) {
  auto i = make_inst<CastInst>(loc);
  i->x = x;
  i->out = Tensor::reg("c", dtype, x.defined() && x.is_register() ? static_dims(x) : std::vector<int64_t>{});
  return emit_with_output(i);
}

Tensor Builder::view(const Tensor& x, std::optional<DataType> dtype, const RegisterLayout& layout, SourceLoc loc) {
  auto i = make_inst<ViewInst>(loc);
  i->x = x;
  DataType dt = dtype ? *dtype : (x.defined() ? x.dtype() : dtypes::void_t);
  std::vector<int64_t> shape;
  if (layout.defined()) {
    shape = layout.shape();
  } else if (x.defined() && x.is_register()) {
    shape = static_dims(x);
    // Reinterpreting as a narrower/wider dtype scales the last dim.
    if (!shape.empty() && dt.bits() > 0 && x.dtype().bits() != dt.bits()) {
      int64_t bits = shape.back() * x.dtype().bits();
      shape.back() = bits % dt.bits() == 0 ? bits / dt.bits() : -1;
    }
  }
  for (auto d : shape)
    if (d <= 0)
      throw CompileError(fmt::format("view: cannot view {} as {}: the last dim holds {} bits, not a multiple of {}",
                                     type_of(x), dt.name(), x.defined() && !static_dims(x).empty() ? static_dims(x).back() * x.dtype().bits() : 0,
                                     dt.bits()),
                         loc);
  i->out = Tensor::reg("v", dt, shape, layout);
  return emit_with_output(i);
}

Tensor Builder::reshape(const Tensor& x, std::vector<int64_t> shape, SourceLoc loc) {
  // One -1 is inferred from the element count.
  int inferred = -1;
  int64_t known = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1 && inferred < 0) inferred = int(d);
    else known *= shape[d];
  }
  if (inferred >= 0 && x.defined() && x.is_register() && known > 0 && x.num_elements() % known == 0)
    shape[inferred] = x.num_elements() / known;
  for (auto d : shape)
    if (d <= 0) throw CompileError(fmt::format("reshape: cannot reshape {} to {}", type_of(x), shape_str(shape)), loc);
  auto i = make_inst<ReshapeInst>(loc);
  i->x = x;
  i->out = Tensor::reg("rs", x.defined() ? x.dtype() : dtypes::void_t, shape);
  return emit_with_output(i);
}

Tensor Builder::squeeze(const Tensor& x, std::vector<int> dims, SourceLoc loc) {
  auto i = make_inst<SqueezeInst>(loc);
  i->x = x;
  int r = x.defined() ? x.rank() : 0;
  dims = normalize_dims(dims, x, "squeeze", loc);
  i->dims = dims;
  std::vector<int64_t> shape;
  if (x.defined() && x.is_register()) {
    auto s = static_dims(x);
    for (int d = 0; d < r; ++d)
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) shape.push_back(s[d]);
  }
  i->out = Tensor::reg("sq", x.defined() ? x.dtype() : dtypes::void_t, shape);
  return emit_with_output(i);
}

Tensor Builder::unsqueeze(const Tensor& x, std::vector<int> dims, SourceLoc loc) {
  auto i = make_inst<UnsqueezeInst>(loc);
  i->x = x;
  int out_rank = (x.defined() ? x.rank() : 0) + int(dims.size());
  for (int& d : dims) d = normalize_dim(d, out_rank);
  i->dims = dims;
  std::vector<int64_t> shape;
  if (x.defined() && x.is_register()) {
    auto s = static_dims(x);
    size_t k = 0;
    for (int d = 0; d < out_rank; ++d) {
      if (std::find(dims.begin(), dims.end(), d) != dims.end()) shape.push_back(1);
      else if (k < s.size()) shape.push_back(s[k++]);
    }
  }
  i->out = Tensor::reg("us", x.defined() ? x.dtype() : dtypes::void_t, shape);
  return emit_with_output(i);
}

Tensor Builder::transpose(const Tensor& x, SourceLoc loc) {
  auto i = make_inst<TransposeInst>(loc);
  i->x = x;
  std::vector<int64_t> shape;
  if (x.defined() && x.is_register() && static_dims(x).size() == 2) shape = {static_dims(x)[1], static_dims(x)[0]};
  i->out = Tensor::reg("tr", x.defined() ? x.dtype() : dtypes::void_t, shape);
  return emit_with_output(i);
}

Tensor Builder::repeat(const Tensor& x, std::vector<int64_t> repeats, SourceLoc loc) {
  auto i = make_inst<RepeatInst>(loc);
  i->x = x;
  i->repeats = repeats;
  std::vector<int64_t> shape;
  if (x.defined() && x.is_register()) {
    auto s = static_dims(x);
    size_t rank = std::max(s.size(), repeats.size());
    shape.assign(rank, 1);
    for (size_t d = 0; d < rank; ++d) {
      int64_t sd = d + s.size() >= rank ? s[d + s.size() - rank] : 1;
      int64_t rd = d + repeats.size() >= rank ? repeats[d + repeats.size() - rank] : 1;
      shape[d] = sd * std::max<int64_t>(rd, 1);
    }
  }
  i->out = Tensor::reg("rp", x.defined() ? x.dtype() : dtypes::void_t, shape);
  return emit_with_output(i);
}

Tensor Builder::elementwise(const std::string& op, const std::vector<Tensor>& inputs,
                            const std::function<Expr(const std::vector<Expr>&)>& body, SourceLoc loc) {
  std::vector<std::vector<int64_t>> shapes;
  for (auto& t : inputs) {
    if (!t.defined() || !t.is_register())
      throw CompileError(fmt::format("{}: operands must be register tensors or scalars, got {}", op, type_of(t)), loc);
    shapes.push_back(static_dims(t));
  }
  if (inputs.empty()) throw CompileError(fmt::format("{}: needs at least one register tensor operand", op), loc);
  auto shape = broadcast_shapes(shapes);
  if (!shape) {
    std::string operands;
    for (size_t k = 0; k < inputs.size(); ++k) operands += (k ? " and " : "") + type_of(inputs[k]);
    throw CompileError(fmt::format("{}: cannot broadcast {}", op, operands), loc);
  }
  auto i = make_inst<ElementwiseInst>(loc);
  i->op = op;
  i->inputs = inputs;
  std::vector<Expr> args;
  for (size_t k = 0; k < inputs.size(); ++k) {
    i->params.push_back(Var(fmt::format("x{}", k), inputs[k].dtype(), VarRole::Binder));
    args.push_back(i->params.back());
  }
  try {
    i->body = body(args);
  } catch (const CompileError& e) {
    if (e.loc().valid()) throw;
    throw CompileError(fmt::format("{}: {}", op, e.message()), loc);
  }
  i->out = Tensor::reg(op, i->body.dtype(), *shape);
  return emit_with_output(i);
}

Tensor Builder::unary(const std::string& op, const Tensor& x, SourceLoc loc) {
  if (x.defined() && is_math_op(op) && !x.dtype().is_float())
    throw CompileError(fmt::format("{}: needs a floating-point tensor, got {}", op, type_of(x)), loc);
  if (x.defined() && op == "bitnot" && !x.dtype().is_integer() && !x.dtype().is_bool())
    throw CompileError(fmt::format("bitwise not: needs an integer tensor, got {}", type_of(x)), loc);
  if (x.defined() && (op == "abs" || op == "neg" || op == "square") && !x.dtype().is_numeric())
    throw CompileError(fmt::format("{}: needs a numeric tensor, got {}", op, type_of(x)), loc);
  return elementwise(op, {x}, [&](const std::vector<Expr>& a) -> Expr {
    if (op == "neg") return -a[0];
    if (op == "not") return !a[0];
    if (op == "bitnot") return ~a[0];
    if (op == "square") return a[0] * a[0];
    return call(op, {a[0]});
  }, loc);
}

namespace {
const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Mod: return "mod";
    case BinaryOp::FloorDiv: return "floordiv";
    case BinaryOp::FloorMod: return "floormod";
    case BinaryOp::Min: return "minimum";
    case BinaryOp::Max: return "maximum";
    case BinaryOp::BitAnd: return "bitwise_and";
    case BinaryOp::BitOr: return "bitwise_or";
    case BinaryOp::BitXor: return "bitwise_xor";
    case BinaryOp::Shl: return "shift_left";
    case BinaryOp::Shr: return "shift_right";
    case BinaryOp::And: return "logical_and";
    case BinaryOp::Or: return "logical_or";
    case BinaryOp::Eq: return "equal";
    case BinaryOp::Ne: return "not_equal";
    case BinaryOp::Lt: return "less";
    case BinaryOp::Le: return "less_equal";
    case BinaryOp::Gt: return "greater";
    case BinaryOp::Ge: return "greater_equal";
  }
  return "binary";
}
}  // namespace

Tensor Builder::binary(BinaryOp op, const Tensor& a, const Expr& a_scalar, const Tensor& b, const Expr& b_scalar,
                       SourceLoc loc) {
  const char* name = binary_name(op);
  std::vector<Tensor> inputs;
  if (a.defined()) inputs.push_back(a);
  if (b.defined()) inputs.push_back(b);
  if (inputs.empty()) throw CompileError(fmt::format("{}: needs at least one register tensor operand", name), loc);
  for (auto* s : {&a_scalar, &b_scalar})
    if (s->defined() && !(s->dtype().is_numeric() || s->dtype().is_bool()))
      throw CompileError(fmt::format("{}: scalar operand {} of type {} is not a number", name, to_string(*s),
                                     s->dtype().name()),
                         loc);
  DataType tensor_dtype = inputs[0].dtype();
  return elementwise(name, inputs, [&](const std::vector<Expr>& x) {
    size_t k = 0;
    Expr lhs = a.defined() ? x[k++] : adopt_scalar(a_scalar, tensor_dtype);
    Expr rhs = b.defined() ? x[k++] : adopt_scalar(b_scalar, tensor_dtype);
    return tilus::binary(op, lhs, rhs);
  }, loc);
}

Tensor Builder::where(const Tensor& cond, const Tensor& x, const Expr& x_scalar, const Tensor& y, const Expr& y_scalar,
                      SourceLoc loc) {
  if (!cond.defined() || !cond.is_register() || !cond.dtype().is_bool())
    throw CompileError(fmt::format("where: the condition must be a register tensor of bool, got {}", type_of(cond)), loc);
  std::vector<Tensor> inputs{cond};
  if (x.defined()) inputs.push_back(x);
  if (y.defined()) inputs.push_back(y);
  DataType value_dtype = x.defined() ? x.dtype() : (y.defined() ? y.dtype() : promote(x_scalar.dtype(), y_scalar.dtype()));
  return elementwise("where", inputs, [&](const std::vector<Expr>& v) {
    size_t k = 1;
    Expr tv = x.defined() ? v[k++] : adopt_scalar(x_scalar, value_dtype);
    Expr fv = y.defined() ? v[k++] : adopt_scalar(y_scalar, value_dtype);
    return select(v[0], tv, fv);
  }, loc);
}

Tensor Builder::clip(const Tensor& x, const Expr& lo, const Expr& hi, SourceLoc loc) {
  if (x.defined() && !x.dtype().is_numeric())
    throw CompileError(fmt::format("clip: needs a numeric tensor, got {}", type_of(x)), loc);
  return elementwise("clip", {x}, [&](const std::vector<Expr>& v) {
    DataType t = v[0].dtype();
    return tilus::min(tilus::max(v[0], adopt_scalar(lo, t)), adopt_scalar(hi, t));
  }, loc);
}

Tensor Builder::reduce(ReduceOp op, const Tensor& x, std::optional<std::vector<int>> dims, bool keepdim, SourceLoc loc) {
  auto i = make_inst<ReduceInst>(loc);
  i->x = x;
  i->op = op;
  i->keepdim = keepdim;
  int r = x.defined() ? x.rank() : 0;
  if (!dims) {
    dims = std::vector<int>(r);
    std::iota(dims->begin(), dims->end(), 0);
  }
  *dims = normalize_dims(*dims, x, to_string(op), loc);
  i->dims = *dims;
  std::vector<int64_t> shape;
  if (x.defined() && x.is_register()) {
    auto s = static_dims(x);
    for (int d = 0; d < r; ++d) {
      bool reduced = std::find(dims->begin(), dims->end(), d) != dims->end();
      if (!reduced) shape.push_back(s[d]);
      else if (keepdim) shape.push_back(1);
    }
  }
  DataType dt = x.defined() ? x.dtype() : dtypes::void_t;
  if (op == ReduceOp::Any || op == ReduceOp::All) dt = dtypes::boolean;
  i->out = Tensor::reg(to_string(op), dt, shape);
  return emit_with_output(i);
}

Tensor Builder::scan(const std::string& op, const Tensor& x, int dim, bool exclusive, SourceLoc loc) {
  static const std::map<std::string, BinaryOp> ops = {{"add", BinaryOp::Add},    {"mul", BinaryOp::Mul},
                                                      {"max", BinaryOp::Max},    {"min", BinaryOp::Min},
                                                      {"and", BinaryOp::BitAnd}, {"or", BinaryOp::BitOr},
                                                      {"xor", BinaryOp::BitXor}};
  auto it = ops.find(op);
  if (it == ops.end())
    throw CompileError(fmt::format("scan: op must be one of add, mul, max, min, and, or, xor; got '{}'", op), loc);
  if (!x.defined() || !x.is_register())
    throw CompileError(fmt::format("scan: x must be a register tensor, got {}", type_of(x)), loc);
  DataType t = x.dtype();
  bool bitwise = op == "and" || op == "or" || op == "xor";
  if (bitwise ? !(t.is_integer() || t.is_bool()) : !(t.is_numeric()) || t.is_bool())
    throw CompileError(fmt::format("scan: op '{}' needs {} elements, x is {}", op,
                                   bitwise ? "integer or bool" : "numeric (not bool)", type_of(x)),
                       loc);
  if (x.rank() == 0) throw CompileError(fmt::format("scan: x has no dims ({})", type_of(x)), loc);
  dim = normalize_dims({dim}, x, "scan", loc)[0];
  std::vector<int64_t> shape = static_dims(x);
  int64_t n = shape[size_t(dim)];
  Expr identity;
  if (op == "add" || op == "or" || op == "xor") identity = make_const(t, 0);
  else if (op == "mul") identity = make_const(t, 1);
  else if (op == "and") identity = t.is_bool() ? bool_const(true) : int_const(t.is_uint() ? int64_t(t.int_max()) : -1, t);
  else if (t.is_float()) identity = make_const(t, op == "max" ? -INFINITY : INFINITY);
  else identity = int_const(op == "max" ? t.int_min() : int64_t(t.int_max()), t);
  // buffer[.., 0:n, ..] = identity, buffer[.., n:2n, ..] = the running scan; a step reads the
  // running scan shifted by `step` as the slice at n - step.
  std::vector<int64_t> doubled = shape;
  doubled[size_t(dim)] = 2 * n;
  std::vector<int> all(shape.size());
  std::iota(all.begin(), all.end(), 0);
  Tensor buffer = shared_tensor(t, doubled, loc, "scan_buffer");
  auto slice_at = [&](int64_t offset) {
    std::vector<Expr> offsets(shape.size(), int_const(0));
    offsets[size_t(dim)] = int_const(offset);
    return slice_shared(buffer, offsets, all, shape, loc);
  };
  store_shared(slice_at(0), register_tensor(t, shape, identity, loc, "scan_identity"), loc);
  Tensor acc = x;
  for (int64_t step = 1; step < n; step *= 2) {
    store_shared(slice_at(n), acc, loc);
    sync(loc);
    Tensor partner = load_shared(slice_at(n - step), loc);
    sync(loc);  // every thread read its partner before the next step stores
    acc = binary(it->second, acc, Expr(), partner, Expr(), loc);
  }
  if (exclusive) {
    store_shared(slice_at(n), acc, loc);
    sync(loc);
    acc = load_shared(slice_at(n - 1), loc);
  }
  sync(loc);  // the buffer is read: it may be freed and reused
  free_shared(buffer, loc);
  return acc;
}

void Builder::assign_tensor(const Tensor& dst, const Tensor& src, SourceLoc loc) {
  auto i = make_inst<AssignInst>(loc);
  i->dst = dst;
  i->src = src;
  emit(i);
}

void Builder::sync(SourceLoc loc) { emit(make_inst<SyncInst>(loc)); }

int64_t Builder::group_threads(const char* what, const SourceLoc& loc) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
    if (it->kind == Scope::ThreadGroup) return it->num_threads;
  if (!warps_set_)
    throw CompileError(fmt::format("{}: the block's threads are not known yet: set attrs.warps before it", what), loc);
  return kernel_.num_threads();
}

int64_t Builder::group_begin() const {
  int64_t begin = 0;
  for (auto& sc : scopes_)
    if (sc.kind == Scope::ThreadGroup) begin += sc.thread_begin;
  return begin;
}

// --- Blackwell -------------------------------------------------------------------------------------

Tensor Builder::tcgen05_alloc(DataType dtype, std::vector<int64_t> shape, int64_t cta_group, SourceLoc loc) {
  check_static_shape(shape, "tcgen05.alloc", loc);
  auto i = make_inst<Tcgen05AllocInst>(loc);
  i->out = Tensor::tmem("t", dtype, std::move(shape));
  i->cta_group = cta_group;
  return emit_with_output(i);
}

Tensor Builder::tcgen05_slice(const Tensor& t, std::vector<Expr> offsets, std::vector<int> dims,
                              std::vector<int64_t> shape, SourceLoc loc) {
  check_static_shape(shape, "tcgen05.slice", loc);
  for (auto& o : offsets) {
    check_index(o, "offsets", loc, "tcgen05.slice");
    o = simplify(o);
  }
  auto i = make_inst<Tcgen05SliceInst>(loc);
  i->src = t;
  i->offsets = std::move(offsets);
  i->dims = std::move(dims);
  i->out = Tensor::tmem(t.defined() ? t->name : "t", t.defined() ? t.dtype() : dtypes::void_t, std::move(shape));
  return emit_with_output(i);
}

Tensor Builder::tcgen05_index(const Tensor& t, std::vector<std::optional<Expr>> indices, SourceLoc loc) {
  if (!t.defined() || !t.is_tmem())
    throw CompileError(fmt::format("indexing: a tensor-memory tensor is indexed here, got {}", type_of(t)), loc);
  std::vector<int64_t> full = static_dims(t);
  if (indices.size() > full.size())
    throw CompileError(fmt::format("indexing: {} indices for {}", indices.size(), type_of(t)), loc);
  if (!indices.empty() && indices[0])
    throw CompileError(fmt::format("indexing {}: the lane dim (0) is kept whole (t[:, i, ...]); slice lanes with "
                                   "tcgen05.slice",
                                   type_of(t)),
                       loc);
  std::vector<Expr> offsets;
  std::vector<int> dims;
  std::vector<int64_t> shape;
  for (size_t d = 0; d < full.size(); ++d) {
    bool fixed = d < indices.size() && indices[d].has_value();
    offsets.push_back(fixed ? *indices[d] : int_const(0));
    if (!fixed) {
      dims.push_back(int(d));
      shape.push_back(full[d]);
    }
  }
  return tcgen05_slice(t, std::move(offsets), std::move(dims), std::move(shape), loc);
}

Tensor Builder::tcgen05_view(const Tensor& t, DataType dtype, std::vector<int64_t> shape, SourceLoc loc) {
  check_static_shape(shape, "tcgen05.view", loc);
  auto i = make_inst<Tcgen05ViewInst>(loc);
  i->src = t;
  i->out = Tensor::tmem(t.defined() ? t->name : "t", dtype, std::move(shape));
  return emit_with_output(i);
}

Tensor Builder::tcgen05_load(const Tensor& t, SourceLoc loc) {
  auto i = make_inst<Tcgen05LoadInst>(loc);
  i->src = t;
  i->out = Tensor::reg("r", t.defined() ? t.dtype() : dtypes::void_t, t.defined() && t.is_tmem() ? static_dims(t)
                                                                                                : std::vector<int64_t>{});
  return emit_with_output(i);
}

std::array<Var, 4> Builder::clc_query_response(const Tensor& response, SourceLoc loc) {
  auto i = make_inst<ClcQueryInst>(loc);
  i->response = response;
  i->is_canceled = Var("is_canceled", dtypes::boolean, VarRole::Local);
  i->x = Var("clc_x", dtypes::int32, VarRole::Local);
  i->y = Var("clc_y", dtypes::int32, VarRole::Local);
  i->z = Var("clc_z", dtypes::int32, VarRole::Local);
  emit(i);
  return {i->is_canceled, i->x, i->y, i->z};
}

void Builder::sync_threads(std::optional<int64_t> barrier_id, std::optional<int64_t> arrive_count, SourceLoc loc) {
  if (!barrier_id) {
    if (arrive_count)
      throw CompileError(fmt::format("sync_threads: arrive_count={} needs a barrier_id (a named barrier, 1 to 15)",
                                     *arrive_count),
                         loc);
    return sync(loc);
  }
  auto i = make_inst<SyncInst>(loc);
  i->scope = SyncScope::Named;
  i->barrier_id = *barrier_id;
  i->arrive_count = arrive_count ? *arrive_count : group_threads("sync_threads", loc);
  emit(i);
}

void Builder::sync_warp(Expr mask, SourceLoc loc) {
  auto i = make_inst<SyncInst>(loc);
  i->scope = SyncScope::Warp;
  if (mask.defined()) i->mask = mask.dtype().is_integer() ? tilus::cast(mask, dtypes::uint32) : mask;
  emit(i);
}

void Builder::cluster_sync(SourceLoc loc) {
  auto i = make_inst<SyncInst>(loc);
  i->scope = SyncScope::Cluster;
  emit(i);
}

void Builder::sync_grid(SourceLoc loc) {
  auto i = make_inst<SyncInst>(loc);
  i->scope = SyncScope::Grid;
  emit(i);
}

void Builder::set_max_nreg(int64_t reg_count, bool is_inc, SourceLoc loc) {
  auto i = make_inst<SetMaxNRegInst>(loc);
  i->reg_count = reg_count;
  i->is_inc = is_inc;
  emit(i);
}

Tensor Builder::thread_index(const std::string& op, int64_t warp_size, int64_t warps_per_group, int64_t thread_extent,
                             SourceLoc loc) {
  int64_t n = group_threads(op.c_str(), loc);
  auto i = make_inst<ThreadIndexInst>(loc);
  i->op = op;
  i->warp_size = warp_size;
  i->warps_per_group = warps_per_group;
  i->thread_extent = thread_extent;
  DataType dt = op == "shuffle_elect" ? dtypes::boolean : dtypes::int32;
  std::string name = op.rfind("get_", 0) == 0 ? op.substr(4) : op;
  i->out = Tensor::reg(name, dt, {n}, spatial({n}));
  return emit_with_output(i);
}

Tensor Builder::shuffle(const std::string& op, const Tensor& value, Expr lane, Expr mask, int64_t width,
                        SourceLoc loc) {
  if (!value.defined() || !value.is_register())
    throw CompileError(fmt::format("{}: value must be a register tensor or a scalar, got {}", op, type_of(value)), loc);
  auto i = make_inst<ShuffleInst>(loc);
  i->op = op;
  i->value = value;
  i->lane = lane.defined() && lane.dtype().is_integer() ? tilus::cast(lane, dtypes::int32) : lane;
  if (mask.defined()) i->mask = mask.dtype().is_integer() ? tilus::cast(mask, dtypes::uint32) : mask;
  i->width = width;
  i->out = Tensor::reg("shfl", value.dtype(), static_dims(value));
  return emit_with_output(i);
}

namespace {
// The region of an explicit-width access: a whole tensor, a box, or a head element (the
// `bits`-bit vector that starts there: the last dim takes the rest). Extents simplified.
CopyRegion vector_region(CopyRegion r, int64_t bits) {
  if (r.offsets.empty() && r.extents.empty()) {
    for (int d = 0; d < r.tensor.rank(); ++d) r.offsets.push_back(int_const(0));
    r.extents = r.tensor.shape();
  } else if (r.extents.empty() || std::all_of(r.extents.begin(), r.extents.end(),
                                               [](const Expr& e) { return e.defined() && e.is_int_const(1); })) {
    // A single element (`g[i]`) stands for the vector that starts there.
    r.extents.assign(r.offsets.size(), int_const(1));
    int64_t eb = r.tensor.dtype().bits();
    if (!r.extents.empty() && eb > 0 && bits % eb == 0) r.extents.back() = int_const(bits / eb);
  }
  for (Expr& e : r.extents)
    if (e.defined()) e = simplify(e);
  // No bounds predicate: only `pred` guards the access (the CPU's checked mode still checks).
  r.checked_dims = std::vector<int>{};
  return r;
}

Expr vector_pred(const Expr& pred, const std::string& what, const SourceLoc& loc) {
  if (!pred.defined()) return pred;
  if (pred.dtype().is_bool()) return pred;
  if (pred.dtype().is_integer()) return pred != make_const(pred.dtype(), 0);
  throw CompileError(fmt::format("{}: pred must be a bool scalar, got {} of type {}", what, to_string(pred),
                                 pred.dtype().name()),
                     loc);
}
}  // namespace

Tensor Builder::ldg(int64_t bits, CopyRegion src, Expr pred, SourceLoc loc) {
  std::string name = fmt::format("ldg{}", bits);
  if (!src.tensor.defined() || !src.tensor.is_global())
    throw CompileError(fmt::format("{}: src must be a global tensor or region, got {}", name, type_of(src.tensor)), loc);
  auto i = make_inst<LoadGlobalVectorInst>(loc);
  i->bits = bits;
  i->src = vector_region(std::move(src), bits);
  i->pred = vector_pred(pred, name, loc);
  std::vector<int64_t> shape;
  for (auto& e : i->src.extents) shape.push_back(e.is_int_const() ? e.int_value() : 1);
  int64_t n = group_threads(name.c_str(), loc);
  bool positive = std::all_of(shape.begin(), shape.end(), [](int64_t d) { return d > 0; });
  // Every thread holds the whole vector (a bad extent is the verifier's error).
  i->out = Tensor::reg("v", i->src.tensor.dtype(), shape, positive ? replicated(n) * local(shape) : RegisterLayout());
  return emit_with_output(i);
}

void Builder::stg(int64_t bits, CopyRegion dst, const Tensor& value, Expr pred, SourceLoc loc) {
  std::string name = fmt::format("stg{}", bits);
  if (!dst.tensor.defined() || !dst.tensor.is_global())
    throw CompileError(fmt::format("{}: dst must be a global tensor or region, got {}", name, type_of(dst.tensor)), loc);
  auto i = make_inst<StoreGlobalVectorInst>(loc);
  i->bits = bits;
  i->dst = vector_region(std::move(dst), bits);
  i->value = value;
  i->pred = vector_pred(pred, name, loc);
  emit(i);
}

void Builder::printf(std::string format, std::vector<Expr> args, SourceLoc loc) {
  auto i = make_inst<PrintfInst>(loc);
  i->format = std::move(format);
  i->args = std::move(args);
  emit(i);
}

void Builder::assume(Expr cond, SourceLoc loc) {
  auto i = make_inst<AssumeInst>(loc);
  i->cond = std::move(cond);
  emit(i);
}

void Builder::annotate_layout(const Tensor& t, const RegisterLayout& layout, SourceLoc loc) {
  auto i = make_inst<AnnotateLayoutInst>(loc);
  i->tensor = t;
  i->layout = layout;
  emit(i);
}

void Builder::annotate_shared_layout(const Tensor& t, const SharedLayout& layout, SourceLoc loc) {
  auto i = make_inst<AnnotateLayoutInst>(loc);
  i->tensor = t;
  i->shared_layout = layout;
  emit(i);
}

}  // namespace tilus
