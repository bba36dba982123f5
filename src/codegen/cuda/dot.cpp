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
  slot_loop(i.out->layout.local_size(), [&](const std::string& s) { return fmt::format("{}[{}] = {}[{}];", out, s, c, s); });
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
  // SIMT: slots are c[i][j] = i * pn + j, a[i][kk] = i * k + kk, b[kk][j] = kk * pn + j
  // (the emitter's own names begin with tilus_, which no tensor's name does).
  std::string acc = ctype(i.c.dtype());
  line("#pragma unroll");
  open(fmt::format("for (int tilus_i = 0; tilus_i < {}; ++tilus_i)", p.per_m));
  line("#pragma unroll");
  open(fmt::format("for (int tilus_j = 0; tilus_j < {}; ++tilus_j)", p.per_n));
  linef("{} tilus_acc = {}[tilus_i * {} + tilus_j];", acc, out, p.per_n);
  line("#pragma unroll");
  linef("for (int tilus_k = 0; tilus_k < {}; ++tilus_k) tilus_acc = tilus_acc + tilus::cvt<{}>({}[tilus_i * {} + tilus_k]) * "
        "tilus::cvt<{}>({}[tilus_k * {} + tilus_j]);",
        k, acc, a, k, acc, b, p.per_n);
  linef("{}[tilus_i * {} + tilus_j] = tilus_acc;", out, p.per_n);
  close();
  close();
}

}  // namespace tilus::cuda
