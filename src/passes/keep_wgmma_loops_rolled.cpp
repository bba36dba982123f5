#include "tilus/passes/keep_wgmma_loops_rolled.h"

#include "mutate_kernels.h"
#include "tilus/ir/functor.h"
#include "tilus/ir/simplify.h"

namespace tilus {

namespace {

class Roller : public StmtMutator {
 protected:
  Stmt mutate_for(const Stmt& s, const ForStmtNode& n) override {
    Stmt inner = StmtMutator::mutate_for(s, n);
    auto& f = static_cast<const ForStmtNode&>(*inner);
    bool constant = simplify(f.begin).is_int_const() && simplify(f.end).is_int_const() &&
                    simplify(f.step).is_int_const();
    if (f.unroll.kind != Unroll::None || constant || !contains_inst(f.body, InstKind::WgmmaMma)) return inner;
    auto rolled = std::make_shared<ForStmtNode>(f);
    rolled->unroll = Unroll::by(1);
    return rolled;
  }
};

}  // namespace

Program keep_wgmma_loops_rolled(const Program& program, const Target& target) {
  if (target.is_cpu()) return program;
  return mutate_kernels<Roller>(program);
}

}  // namespace tilus
