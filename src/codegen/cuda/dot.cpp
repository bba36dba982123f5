// dot, as its lowering record says: mma.sync m16n8k16 tiles, or a SIMT outer product.
#include "emitter.h"

namespace tilus::cuda {

void Emitter::emit_dot(const InstNode& inst) {
  auto& i = static_cast<const DotInst&>(inst);
  const Lowering& rec = inst.lowering;
  const DotTiling& p = rec.dot;
  if (rec.op != MachineOp::MmaSync && rec.op != MachineOp::SimtFma)
    fail(inst, "no instruction selected; run the pass pipeline first");
  int64_t k = i.a.static_shape()[1];
  const std::string& a = reg(i.a);
  const std::string& b = reg(i.b);
  const std::string& c = reg(i.c);
  std::string out = declare_reg(i.out);
  linef("for (int s = 0; s < {}; ++s) {}[s] = {}[s];", i.out->layout.local_size(), out, c);
  std::string in = ctype(i.a.dtype());
  if (rec.op == MachineOp::MmaSync) {
    bool f32 = i.c.dtype() == dtypes::float32;
    for (int64_t ik = 0; ik < p.rep_k; ++ik)
      for (int64_t im = 0; im < p.rep_m; ++im)
        for (int64_t in_ = 0; in_ < p.rep_n; ++in_) {
          int64_t cs = (im * p.rep_n + in_) * 4, as = (im * p.rep_k + ik) * 8, bs = (ik * p.rep_n + in_) * 4;
          if (f32) linef("tilus::mma_m16n8k16_f32<{}>(&{}[{}], &{}[{}], &{}[{}]);", in, out, cs, a, as, b, bs);
          else linef("tilus::mma_m16n8k16_f16(&{}[{}], &{}[{}], &{}[{}]);", out, cs, a, as, b, bs);
        }
    return;
  }
  // SIMT: slots are c[i][j] = i * pn + j, a[i][kk] = i * k + kk, b[kk][j] = kk * pn + j.
  std::string acc = ctype(i.c.dtype());
  line("#pragma unroll");
  open(fmt::format("for (int i = 0; i < {}; ++i)", p.per_m));
  line("#pragma unroll");
  open(fmt::format("for (int j = 0; j < {}; ++j)", p.per_n));
  linef("{} acc = {}[i * {} + j];", acc, out, p.per_n);
  line("#pragma unroll");
  linef("for (int kk = 0; kk < {}; ++kk) acc = acc + tilus::cvt<{}>({}[i * {} + kk]) * tilus::cvt<{}>({}[kk * {} + j]);",
        k, acc, a, k, acc, b, p.per_n);
  linef("{}[i * {} + j] = acc;", out, p.per_n);
  close();
  close();
}

}  // namespace tilus::cuda
