#include "tilus/passes/order_wgmma_waits.h"

#include "tilus/ir/functor.h"

namespace tilus {

namespace {

bool is_wgmma(InstKind k) {
  return k == InstKind::WgmmaFence || k == InstKind::WgmmaMma || k == InstKind::WgmmaCommitGroup ||
         k == InstKind::WgmmaWaitGroup;
}

// Whether s computes a register tensor anywhere inside (the work a wait may be hoisted over).
bool computes_registers(const Stmt& s) {
  struct Find : StmtVisitor {
    bool found = false;
    void visit_inst(const InstNode& i) override {
      Tensor out = i.output();
      if (!is_wgmma(i.kind()) && out.defined() && out.is_register()) found = true;
    }
  } f;
  f.visit(s);
  return f.found;
}

class Orderer : public StmtMutator {
 protected:
  // Within one statement list: the work since the last wgmma instruction, in order. A list's
  // start knows nothing of what ran before it (a loop's previous iteration, the enclosing
  // code), so a wait there is left alone.
  Stmt mutate_seq(const Stmt& s, const SeqStmtNode& n) override {
    std::vector<Stmt> out;
    bool changed = false, work = false;
    for (auto& c : n.stmts) {
      Stmt m = mutate(c);
      if (c->kind == StmtKind::Inst) {
        const Inst& inst = static_cast<const InstStmtNode&>(*c).inst;
        if (inst->kind() == InstKind::WgmmaWaitGroup && work &&
            !static_cast<const WgmmaWaitGroupInst&>(*inst).ordered) {
          auto w = std::make_shared<WgmmaWaitGroupInst>(static_cast<const WgmmaWaitGroupInst&>(*inst));
          w->ordered = true;
          m = make_inst_stmt(w);
        }
        if (is_wgmma(inst->kind())) work = false;
        else if (computes_registers(c)) work = true;
      } else if (contains_inst(c, InstKind::WgmmaMma) || contains_inst(c, InstKind::WgmmaWaitGroup) ||
                 contains_inst(c, InstKind::WgmmaCommitGroup)) {
        work = false;  // what a nested statement leaves: not followed here
      } else if (computes_registers(c)) {
        work = true;
      }
      changed |= m != c;
      out.push_back(m);
    }
    return changed ? make_seq(out, s->loc) : s;
  }
};

}  // namespace

Program order_wgmma_waits(const Program& program, const Target& target) {
  if (target.is_cpu()) return program;
  return map_kernels(program, [](const Kernel& k) { return Orderer().mutate(k); });
}

}  // namespace tilus
