#include "tilus/lang/builder.h"

#include "builder_util.h"

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

using namespace builder_detail;


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
  check_min_blocks(loc);
}

void Builder::set_min_blocks(int64_t min_blocks, SourceLoc loc) {
  if (min_blocks < 1 || min_blocks > 32)
    throw CompileError(fmt::format("attrs.min_blocks = {}: an SM holds 1 to 32 blocks", min_blocks), loc);
  kernel_.min_blocks = min_blocks;
  // Checked again by the verifier (the warps may come after); here the error names this line.
  if (warps_set_) check_min_blocks(loc);
}

void Builder::check_min_blocks(SourceLoc loc) const {
  if (std::string why = min_blocks_problem(kernel_.min_blocks, kernel_.warps); !why.empty())
    throw CompileError("attrs." + why, loc);
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

Var Builder::begin_for(const std::string& var_name, Expr begin, Expr end, Expr step, Unroll unroll, SourceLoc loc,
                       LoopPipeline pipeline) {
  for (auto* e : {&begin, &end, &step}) check_index(*e, "loop bounds", loc, "range");
  if (step.is_int_const(0)) throw CompileError("range: step must not be zero", loc);
  if (unroll.kind == Unroll::Factor && unroll.factor < 1)
    throw CompileError(fmt::format("range: unroll factor must be positive, got {}", unroll.factor), loc);
  if (pipeline.num_stages < 0 || pipeline.num_stages > 16)
    throw CompileError(fmt::format("range: num_stages must be 1 to 16 (1: not pipelined), got {}", pipeline.num_stages),
                       loc);
  if ((pipeline.warp_specialize || pipeline.persistent) && pipeline.num_stages < 2)
    throw CompileError(fmt::format("range: {} is an option of the pipelined loop, and needs num_stages of 2 or more "
                                   "(got {})",
                                   pipeline.warp_specialize ? "warp_specialize" : "persistent", pipeline.num_stages),
                       loc);
  if (!pipeline.epilogue.empty() && pipeline.epilogue != "tma" && pipeline.epilogue != "registers")
    throw CompileError(fmt::format("range: epilogue must be \"tma\", \"registers\" or None (the pass chooses), got "
                                   "\"{}\"",
                                   pipeline.epilogue),
                       loc);
  if (!pipeline.epilogue.empty() && !pipeline.persistent)
    throw CompileError(fmt::format("range: epilogue=\"{}\" is an option of a persistent ring (persistent=True): the "
                                   "store after the loop overlaps the next tile's loop",
                                   pipeline.epilogue),
                       loc);
  if (!pipeline.ring.empty() || pipeline.wgmma_in_flight)
    throw CompileError("range: the ring a pipelined loop becomes is the pipeline_loops pass's choice", loc);
  if (pipeline.num_stages == 1) pipeline.num_stages = 0;  // one stage: the loop as written
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
  s.pipeline = pipeline;
  push(std::move(s));
  return scopes_.back().loop_var;
}

void Builder::end_for() {
  Scope s = pop(Scope::For, "for loop");
  emit_stmt(std::make_shared<ForStmtNode>(s.loop_var, tilus::cast(s.a, s.loop_var.dtype()), tilus::cast(s.b, s.loop_var.dtype()),
                                          tilus::cast(s.c, s.loop_var.dtype()), s.unroll, body_of(std::move(s.stmts)),
                                          s.loc, s.pipeline));
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

}  // namespace tilus
