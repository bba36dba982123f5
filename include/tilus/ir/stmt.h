// Statements of the tile IR.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tilus/ir/error.h"
#include "tilus/ir/expr.h"
#include "tilus/ir/inst.h"

namespace tilus {

enum class StmtKind : uint8_t { Seq, For, If, While, Break, Continue, Return, Let, Declare, Assign, Inst, ThreadGroup };

struct StmtNode {
  StmtKind kind;
  SourceLoc loc;
  explicit StmtNode(StmtKind k, SourceLoc l = {}) : kind(k), loc(std::move(l)) {}
  virtual ~StmtNode() = default;
};

using Stmt = std::shared_ptr<const StmtNode>;

template <class T>
const T* stmt_as(const Stmt& s) {
  return s && s->kind == T::static_kind ? static_cast<const T*>(s.get()) : nullptr;
}

struct SeqStmtNode : StmtNode {
  static constexpr StmtKind static_kind = StmtKind::Seq;
  std::vector<Stmt> stmts;
  explicit SeqStmtNode(std::vector<Stmt> s, SourceLoc l = {}) : StmtNode(StmtKind::Seq, std::move(l)), stmts(std::move(s)) {}
};

// Unroll hint of a loop.
struct Unroll {
  enum Kind : uint8_t { None, All, Factor } kind = None;
  int64_t factor = 0;
  static Unroll none() { return {}; }
  static Unroll all() { return {All, 0}; }
  static Unroll by(int64_t f) { return {Factor, f}; }
};

// A loop the Script asks to software-pipeline (`self.range(..., num_stages=S)`, the name
// TileLang's T.Pipelined and Triton's tl.range use), and what pipeline_loops made of it.
struct LoopPipeline {
  // The Script's request (0: none).
  int64_t num_stages = 0;
  bool warp_specialize = false;  // a producer warp group feeds the consumer warp groups
  bool persistent = false;       // one block per SM walks the output tiles
  // How a persistent ring's tile is stored after its loop: "" (pipeline_loops chooses: through
  // shared memory and TMA stores where legal and the output tile fits beside the stages; the
  // note says why not), "tma" (the same) or "registers" (the store as the Script wrote it).
  std::string epilogue;
  // Set by pipeline_loops on the ring's loop (empty before it): "tma" or "cp.async", the
  // completion of the ring's loads; "warp-specialized" rings say so too.
  std::string ring;
  // wgmma groups the ring keeps in flight across iterations (pipeline_loops; 0: each
  // iteration waits for its own).
  int64_t wgmma_in_flight = 0;
  // The threads' roles and the tile loop pipeline_loops built (warp specialization, persistence;
  // empty: the kernel's threads issue and read the ring, one block per tile).
  std::string schedule;
  // Why the ring's loads are not TMA loads, or an option asked for was not taken (empty: none).
  std::string note;
  bool requested() const { return num_stages > 0; }
  bool operator==(const LoopPipeline& o) const {
    return num_stages == o.num_stages && warp_specialize == o.warp_specialize && persistent == o.persistent &&
           epilogue == o.epilogue &&
           ring == o.ring && wgmma_in_flight == o.wgmma_in_flight && schedule == o.schedule && note == o.note;
  }
};

// for var in range(begin, end, step): body
struct ForStmtNode : StmtNode {
  static constexpr StmtKind static_kind = StmtKind::For;
  Var var;
  Expr begin, end, step;
  Unroll unroll;
  Stmt body;
  LoopPipeline pipeline;
  ForStmtNode(Var v, Expr b, Expr e, Expr s, Unroll u, Stmt body, SourceLoc l = {}, LoopPipeline p = {})
      : StmtNode(StmtKind::For, std::move(l)), var(std::move(v)), begin(std::move(b)), end(std::move(e)),
        step(std::move(s)), unroll(u), body(std::move(body)), pipeline(std::move(p)) {}
};

// Loop n with another body (and bounds), every other field (unroll, pipeline, location) kept:
// how passes rebuild a loop.
Stmt rebuild_for(const ForStmtNode& n, Stmt body);
Stmt rebuild_for(const ForStmtNode& n, Expr begin, Expr end, Expr step, Stmt body);

struct IfStmtNode : StmtNode {
  static constexpr StmtKind static_kind = StmtKind::If;
  Expr cond;
  Stmt then_body;
  Stmt else_body;  // may be null
  IfStmtNode(Expr c, Stmt t, Stmt e, SourceLoc l = {})
      : StmtNode(StmtKind::If, std::move(l)), cond(std::move(c)), then_body(std::move(t)), else_body(std::move(e)) {}
};

struct WhileStmtNode : StmtNode {
  static constexpr StmtKind static_kind = StmtKind::While;
  Expr cond;
  Stmt body;
  WhileStmtNode(Expr c, Stmt b, SourceLoc l = {}) : StmtNode(StmtKind::While, std::move(l)), cond(std::move(c)), body(std::move(b)) {}
};

struct BreakStmtNode : StmtNode {
  static constexpr StmtKind static_kind = StmtKind::Break;
  explicit BreakStmtNode(SourceLoc l = {}) : StmtNode(StmtKind::Break, std::move(l)) {}
};

struct ContinueStmtNode : StmtNode {
  static constexpr StmtKind static_kind = StmtKind::Continue;
  explicit ContinueStmtNode(SourceLoc l = {}) : StmtNode(StmtKind::Continue, std::move(l)) {}
};

// The threads that run it leave the kernel (NVIDIA Tilus's `return` in a kernel body or helper).
struct ReturnStmtNode : StmtNode {
  static constexpr StmtKind static_kind = StmtKind::Return;
  explicit ReturnStmtNode(SourceLoc l = {}) : StmtNode(StmtKind::Return, std::move(l)) {}
};

// An immutable scalar binding, visible to the statements after it in the same sequence.
struct LetStmtNode : StmtNode {
  static constexpr StmtKind static_kind = StmtKind::Let;
  Var var;
  Expr value;
  LetStmtNode(Var v, Expr e, SourceLoc l = {}) : StmtNode(StmtKind::Let, std::move(l)), var(std::move(v)), value(std::move(e)) {}
};

// A mutable scalar variable with its initial value.
struct DeclareStmtNode : StmtNode {
  static constexpr StmtKind static_kind = StmtKind::Declare;
  Var var;
  Expr init;
  DeclareStmtNode(Var v, Expr e, SourceLoc l = {})
      : StmtNode(StmtKind::Declare, std::move(l)), var(std::move(v)), init(std::move(e)) {}
};

struct AssignStmtNode : StmtNode {
  static constexpr StmtKind static_kind = StmtKind::Assign;
  Var var;
  Expr value;
  AssignStmtNode(Var v, Expr e, SourceLoc l = {})
      : StmtNode(StmtKind::Assign, std::move(l)), var(std::move(v)), value(std::move(e)) {}
};

struct InstStmtNode : StmtNode {
  static constexpr StmtKind static_kind = StmtKind::Inst;
  Inst inst;
  explicit InstStmtNode(Inst i) : StmtNode(StmtKind::Inst, i ? i->loc : SourceLoc{}), inst(std::move(i)) {}
};

// Threads [thread_begin, thread_begin + num_threads) of the current group run the body.
// `kind` records how the user wrote it.
enum class ThreadGroupKind : uint8_t { ThreadGroup, SingleThread, SingleWarp, WarpGroup };
const char* to_string(ThreadGroupKind k);

struct ThreadGroupStmtNode : StmtNode {
  static constexpr StmtKind static_kind = StmtKind::ThreadGroup;
  ThreadGroupKind group_kind;
  int64_t thread_begin;
  int64_t num_threads;
  Stmt body;
  ThreadGroupStmtNode(ThreadGroupKind k, int64_t b, int64_t n, Stmt body, SourceLoc l = {})
      : StmtNode(StmtKind::ThreadGroup, std::move(l)), group_kind(k), thread_begin(b), num_threads(n), body(std::move(body)) {}
};

// Builds a sequence, flattening nested sequences and dropping nulls; a single statement
// is returned as is.
Stmt make_seq(std::vector<Stmt> stmts, SourceLoc loc = {});
Stmt make_inst_stmt(Inst inst);

}  // namespace tilus
