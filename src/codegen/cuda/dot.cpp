// dot: mma.sync m16n8k16 for f16/bf16 operands, a SIMT outer product for everything else.
#include "emitter.h"
#include "tilus/passes/infer_layouts.h"

namespace tilus::cuda {

void Emitter::emit_dot(const InstNode& inst) {
  auto& i = static_cast<const DotInst&>(inst);
  if (i.a.rank() != 2) fail(inst, "only rank-2 operands are lowered");
  auto sa = i.a.static_shape(), sb = i.b.static_shape();
  int64_t m = sa[0], k = sa[1], n = sb[1];
  DotPlan p = plan_dot(i.a.dtype(), i.c.dtype(), m, n, k, scope().threads);
  if (i.a->layout != p.a || i.b->layout != p.b || i.c->layout != p.c || i.out->layout != p.c)
    fail(inst, fmt::format("the operand layouts ({}, {}, {}) are not the ones layout inference gives a dot of this "
                           "shape on {} threads; remove the annotations that changed them",
                           i.a->layout.str(), i.b->layout.str(), i.c->layout.str(), scope().threads));
  const std::string& a = reg(i.a);
  const std::string& b = reg(i.b);
  const std::string& c = reg(i.c);
  std::string out = declare_reg(i.out);
  linef("for (int s = 0; s < {}; ++s) {}[s] = {}[s];", i.out->layout.local_size(), out, c);
  std::string in = ctype(i.a.dtype());
  if (p.kind == DotPlan::Mma) {
    bool f32 = i.c.dtype() == dtypes::float32;
    for (int64_t ik = 0; ik < p.rk; ++ik)
      for (int64_t im = 0; im < p.rm; ++im)
        for (int64_t in_ = 0; in_ < p.rn; ++in_) {
          int64_t cs = (im * p.rn + in_) * 4, as = (im * p.rk + ik) * 8, bs = (ik * p.rn + in_) * 4;
          if (f32) linef("tilus::mma_m16n8k16_f32<{}>(&{}[{}], &{}[{}], &{}[{}]);", in, out, cs, a, as, b, bs);
          else linef("tilus::mma_m16n8k16_f16(&{}[{}], &{}[{}], &{}[{}]);", out, cs, a, as, b, bs);
        }
    return;
  }
  // SIMT: slots are c[i][j] = i * pn + j, a[i][kk] = i * k + kk, b[kk][j] = kk * pn + j.
  std::string acc = ctype(i.c.dtype());
  line("#pragma unroll");
  open(fmt::format("for (int i = 0; i < {}; ++i)", p.pm));
  line("#pragma unroll");
  open(fmt::format("for (int j = 0; j < {}; ++j)", p.pn));
  linef("{} acc = {}[i * {} + j];", acc, out, p.pn);
  line("#pragma unroll");
  linef("for (int kk = 0; kk < {}; ++kk) acc = acc + tilus::cvt<{}>({}[i * {} + kk]) * tilus::cvt<{}>({}[kk * {} + j]);",
        k, acc, a, k, acc, b, p.pn);
  linef("{}[i * {} + j] = acc;", out, p.pn);
  close();
  close();
}

}  // namespace tilus::cuda
