#include "tilus/passes/insert_wgmma_fences.h"

#include <unordered_set>

#include "tilus/ir/functor.h"

namespace tilus {

namespace {

bool is_wgmma(InstKind k) {
  return k == InstKind::WgmmaFence || k == InstKind::WgmmaMma || k == InstKind::WgmmaCommitGroup ||
         k == InstKind::WgmmaWaitGroup;
}

class FenceInserter {
 public:
  explicit FenceInserter(const Kernel& k) {
    struct Collect : StmtVisitor {
      std::unordered_set<const TensorNode*>* out;
      void visit_inst(const InstNode& i) override {
        if (i.kind() != InstKind::WgmmaMma) return;
        auto& m = static_cast<const WgmmaMmaInst&>(i);
        out->insert(m.d.get());
        if (m.a.is_register()) out->insert(m.a.get());
      }
    } c;
    c.out = &operands_;
    c.visit(k.body);
  }

  bool any() const { return !operands_.empty(); }
  int inserted = 0;

  // `fenced`: whether every path to here fenced since the wgmma register operands were last
  // accessed; updated to the state after `s`. With emit false nothing is counted (a probe).
  Stmt rewrite(const Stmt& s, bool& fenced, bool emit) {
    if (!s) return s;
    switch (s->kind) {
      case StmtKind::Seq: {  // make_seq flattens the fences the children put before them
        auto& n = static_cast<const SeqStmtNode&>(*s);
        std::vector<Stmt> out;
        bool changed = false;
        for (auto& c : n.stmts) {
          out.push_back(rewrite(c, fenced, emit));
          changed |= out.back() != c;
        }
        return changed ? make_seq(out, s->loc) : s;
      }
      case StmtKind::Inst: {
        const InstNode& i = *static_cast<const InstStmtNode&>(*s).inst;
        if (i.kind() == InstKind::WgmmaMma && !fenced) return make_seq({fence(i.loc, fenced, emit), s}, s->loc);
        if (i.kind() == InstKind::WgmmaFence || i.kind() == InstKind::WgmmaMma) {
          fenced = true;
        } else if (!is_wgmma(i.kind())) {
          for (auto& [t, access] : i.operands())
            if (access != Access::Alias && operands_.count(t.get())) fenced = false;
        }
        return s;
      }
      case StmtKind::For: {
        auto& n = static_cast<const ForStmtNode&>(*s);
        return loop(s, n.body, fenced, emit, [&](Stmt body) {
          return rebuild_for(n, std::move(body));
        });
      }
      case StmtKind::While: {
        auto& n = static_cast<const WhileStmtNode&>(*s);
        return loop(s, n.body, fenced, emit,
                    [&](Stmt body) { return std::make_shared<WhileStmtNode>(n.cond, std::move(body), n.loc); });
      }
      case StmtKind::If: {
        auto& n = static_cast<const IfStmtNode&>(*s);
        bool t = fenced, e = fenced;
        Stmt then_body = rewrite(n.then_body, t, emit);
        Stmt else_body = rewrite(n.else_body, e, emit);
        fenced = t && e;
        return then_body == n.then_body && else_body == n.else_body
                   ? s
                   : std::make_shared<IfStmtNode>(n.cond, then_body, else_body, n.loc);
      }
      case StmtKind::ThreadGroup: {
        auto& n = static_cast<const ThreadGroupStmtNode&>(*s);
        Stmt body = rewrite(n.body, fenced, emit);
        return body == n.body ? s
                              : std::make_shared<ThreadGroupStmtNode>(n.group_kind, n.thread_begin, n.num_threads,
                                                                      body, n.loc);
      }
      default:  // scalars only (let, declare, assign) and jumps
        return s;
    }
  }

 private:
  // A fence statement placed before an mma (or a loop); counted unless in a probe.
  Stmt fence(const SourceLoc& loc, bool& fenced, bool emit) {
    fenced = true;
    inserted += emit;
    ++placed_;
    return make_inst_stmt(make_inst<WgmmaFenceInst>(loc));
  }

  // A loop: its body starts with the state the previous iteration leaves (the one before the
  // loop for the first), and zero trips keep the state before the loop.
  template <class Rebuild>
  Stmt loop(const Stmt& s, const Stmt& body, bool& fenced, bool emit, Rebuild rebuild) {
    Stmt before = hoist(body, fenced, emit);
    bool entry = fenced;
    rewrite(body, entry, false);  // a probe: the state one iteration leaves
    entry = fenced && entry;
    Stmt out = rewrite(body, entry, emit);
    fenced = fenced && entry;
    Stmt rebuilt = out == body ? s : rebuild(out);
    return before ? make_seq({before, rebuilt}, s->loc) : rebuilt;
  }

  // A loop reached unfenced whose body would need a fence only in its first iteration (its
  // accumulator only chained on, as in a k loop) gets one fence before it instead of one
  // per iteration; returns that fence (null if none) and sets `fenced`.
  Stmt hoist(const Stmt& body, bool& fenced, bool emit) {
    if (fenced) return nullptr;
    bool unfenced = false;
    int placed = placed_;
    rewrite(body, unfenced, false);
    if (placed_ == placed) return nullptr;  // no mma, or its own fences come before its mma
    bool after = true;
    placed = placed_;
    rewrite(body, after, false);
    if (!after || placed_ != placed) return nullptr;  // the body needs a fence each time anyway
    return fence(body->loc, fenced, emit);
  }

  std::unordered_set<const TensorNode*> operands_;
  int placed_ = 0;  // fences placed, probes included
};

}  // namespace

Program insert_wgmma_fences(const Program& program, int* inserted) {
  Program out = program;
  int total = 0;
  for (auto& k : out.kernels) {
    FenceInserter f(k);
    if (!f.any()) continue;
    bool fenced = false;  // the first wgmma.mma of the kernel needs one
    k.body = f.rewrite(k.body, fenced, true);
    total += f.inserted;
  }
  if (inserted) *inserted = total;
  return out;
}

}  // namespace tilus
