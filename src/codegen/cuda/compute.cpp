// Register tensors: allocation, elementwise operations, casts, views, reshapes, repeats and
// assignments. Every slot of the result reads slots of the operands held by the same thread
// (checked when the code is generated; layout inference guarantees it).
#include "emitter.h"

namespace tilus::cuda {

namespace {

std::vector<int64_t> identity_index(const std::vector<int64_t>& i) { return i; }

// The slot of `src` that each slot of `dst` reads, or a CompileError naming the instruction.
std::vector<int64_t> must_map(Emitter& em, const InstNode& inst, const Tensor& dst, const Tensor& src,
                              const std::function<std::vector<int64_t>(const std::vector<int64_t>&)>& index_map) {
  auto m = em.slot_map(dst->layout, src->layout, index_map);
  if (m.empty())
    em.fail(inst, fmt::format("{} ({}) and {} ({}) do not keep their elements in the same threads; "
                              "moving data between threads is not supported here",
                              src.type_str(), src->layout.str(), dst.type_str(), dst->layout.str()));
  return m;
}

}  // namespace

void Emitter::copy_slots(const Tensor& dst, const std::vector<int64_t>& m,
                         const std::function<std::string(const std::string& from)>& value) {
  const std::string& out = reg(dst);
  if (auto a = affine_slots(m, "tilus_s")) {
    slot_loop(int64_t(m.size()), [&](const std::string& s) { return fmt::format("{}[{}] = {};", out, s, value(*a)); });
    return;
  }
  for (size_t s = 0; s < m.size(); ++s) linef("{}[{}] = {};", out, s, value(std::to_string(m[s])));
}

// A copy of a thread's slots in order: one memcpy for 8-bit floats (NVVM split a slot-by-slot copy
// of e4m3 codes converted four to a word into bytes and put each word back together with five more
// instructions before its store; H200, mid1 and mid2 calls of 2026-11-29, bench/fp8.py --only
// quant: SwiGLU + cast 0.92 / 0.96x of its floor at m 4096 / 16384 without, 0.95 / 0.99x with,
// with the lop3 of tilus_device.cuh's e4m3_positive_nans); else slot by slot.
void Emitter::copy_register(const Tensor& dst, const std::vector<int64_t>& m, const std::string& src) {
  bool identity = true;
  for (size_t s = 0; s < m.size(); ++s) identity = identity && m[s] == int64_t(s);
  if (identity && dst.dtype().bits() == 8 && dst.dtype().is_float() && !m.empty()) {
    linef("memcpy((void*)&{}, (const void*)&{}, {});", reg(dst), src, m.size());
    return;
  }
  copy_slots(dst, m, [&](const std::string& from) { return fmt::format("{}[{}]", src, from); });
}

void Emitter::emit_compute(const InstNode& inst) {
  switch (inst.kind()) {
    case InstKind::AllocateRegister: {
      auto& i = static_cast<const AllocateRegisterInst&>(inst);
      std::string name = declare_reg(i.out);
      if (!i.init.defined()) return;
      const RegisterLayout& l = i.out->layout;
      if (i.axes.empty()) {
        std::string v = expr(simplify(i.init));
        slot_loop(l.local_size(), [&](const std::string& s) { return fmt::format("{}[{}] = {};", name, s, v); });
        return;
      }
      auto spatial = spatial_index(l);
      for (int64_t s = 0; s < l.local_size(); ++s) {
        auto local = local_index(l, s);
        std::unordered_map<const void*, Expr> axes;
        for (size_t d = 0; d < i.axes.size(); ++d) axes[i.axes[d].get()] = spatial[d] + int_const(local[d]);
        Expr v = substitute(i.init, [&](const Var& var) {
          auto it = axes.find(var.get());
          return it == axes.end() ? Expr() : it->second;
        });
        linef("{}[{}] = {};", name, s, expr(simplify(v)));
      }
      return;
    }
    case InstKind::Elementwise: {
      auto& i = static_cast<const ElementwiseInst&>(inst);
      std::vector<std::vector<int64_t>> maps;
      auto out_shape = i.out.static_shape();
      for (auto& in : i.inputs) {
        auto in_shape = in.static_shape();
        size_t lead = out_shape.size() - in_shape.size();
        maps.push_back(must_map(*this, inst, i.out, in, [&](const std::vector<int64_t>& idx) {
          std::vector<int64_t> r(in_shape.size());
          for (size_t d = 0; d < in_shape.size(); ++d) r[d] = in_shape[d] == 1 ? 0 : idx[d + lead];
          return r;
        }));
      }
      std::string out = declare_reg(i.out);
      // The body refers to the params; it is printed with them bound to a slot's operands:
      // once for all slots where every operand's slot is affine in the result's, else per slot.
      Expr body = simplify(i.body);
      std::vector<std::string> affine;
      for (auto& m : maps)
        if (auto a = affine_slots(m, "tilus_s")) affine.push_back(*a);
      int64_t n = i.out->layout.local_size();
      if (affine.size() == maps.size()) {
        for (size_t k = 0; k < i.params.size(); ++k) var_names_[i.params[k].get()] = reg_elem(i.inputs[k], affine[k]);
        slot_loop(n, [&](const std::string& s) { return fmt::format("{}[{}] = {};", out, s, expr(body)); });
      } else {
        for (int64_t s = 0; s < n; ++s) {
          for (size_t k = 0; k < i.params.size(); ++k) var_names_[i.params[k].get()] = reg_elem(i.inputs[k], maps[k][s]);
          linef("{}[{}] = {};", out, s, expr(body));
        }
      }
      for (auto& p : i.params) var_names_.erase(p.get());
      return;
    }
    case InstKind::Cast: {
      auto& i = static_cast<const CastInst&>(inst);
      auto m = must_map(*this, inst, i.out, i.x, identity_index);
      const std::string& x = reg(i.x);
      std::string out = declare_reg(i.out);
      int64_t n = i.out->layout.local_size();
      DataType from = i.x.dtype(), to = i.out.dtype();
      bool identity = true;
      for (int64_t s = 0; s < n; ++s) identity = identity && m[s] == s;
      bool to16 = to == dtypes::float16 || to == dtypes::bfloat16;
      // Vectorized exact conversions where each thread's slots line up: 4-bit integers and
      // fp4 e2m1 eight per word, fp8 pairs (hardware cvt on sm_89+).
      if (identity && to16 && from.is_integer() && from.bits() == 4 && n % 8 == 0) {
        for (int64_t s = 0; s < n; s += 8)
          linef("tilus::cvt_4bit_x8<{}>(&{}[{}], {}.w[{}]);", from.is_int() ? "true" : "false", out, s, x, s / 8);
        return;
      }
      if (identity && to16 && from == dtypes::float4_e2m1 && n % 8 == 0) {
        for (int64_t s = 0; s < n; s += 8) linef("tilus::cvt_fp4_x8(&{}[{}], {}.w[{}]);", out, s, x, s / 8);
        return;
      }
      if (identity && to16 && (from == dtypes::float8_e4m3 || from == dtypes::float8_e5m2) && n % 2 == 0) {
        for (int64_t s = 0; s < n; s += 2)
          linef("tilus::cvt_fp8_x2<{}>(&{}[{}], *reinterpret_cast<const uint16_t*>(&{}[{}]));",
                from == dtypes::float8_e4m3 ? "true" : "false", out, s, x, s);
        return;
      }
      // float32 pairs to e4m3 (round to nearest even, saturating: the host encoder's rule).
      // Four at a time as one word where the slots come in fours (the declared arrays are
      // 16-byte aligned).
      if (identity && from == dtypes::float32 && to == dtypes::float8_e4m3 && n % 4 == 0) {
        for (int64_t s = 0; s < n; s += 4)
          linef("tilus::cvt_f32x4_e4m3(&{}[{}], {}[{}], {}[{}], {}[{}], {}[{}]);", out, s, x, s, x, s + 1, x, s + 2,
                x, s + 3);
        return;
      }
      if (identity && from == dtypes::float32 && to == dtypes::float8_e4m3 && n % 2 == 0) {
        for (int64_t s = 0; s < n; s += 2)
          linef("tilus::cvt_f32x2_e4m3(&{}[{}], {}[{}], {}[{}]);", out, s, x, s, x, s + 1);
        return;
      }
      // bfloat16 pairs to float32 from their word: a shift and a mask (exact).
      if (identity && from == dtypes::bfloat16 && to == dtypes::float32 && n % 2 == 0) {
        for (int64_t s = 0; s < n; s += 2)
          linef("tilus::cvt_bf16x2_f32(&{}[{}], *reinterpret_cast<const uint32_t*>(&{}[{}]));", out, s, x, s);
        return;
      }
      copy_slots(i.out, m, [&](const std::string& from) { return fmt::format("tilus::cvt<{}>({}[{}])", ctype(to), x, from); });
      return;
    }
    case InstKind::Assign: {
      auto& i = static_cast<const AssignInst&>(inst);
      auto m = must_map(*this, inst, i.dst, i.src, identity_index);
      copy_register(i.dst, m, reg(i.src));
      return;
    }
    case InstKind::View: {
      auto& i = static_cast<const ViewInst&>(inst);
      int64_t in_bytes = i.x->layout.local_size() * i.x.dtype().bits(), out_bytes = i.out->layout.local_size() * i.out.dtype().bits();
      if (in_bytes != out_bytes) fail(inst, "the per-thread bits of the two layouts differ");
      const std::string& x = reg(i.x);
      std::string out = declare_reg(i.out);
      if (i.out.dtype() == i.x.dtype()) {
        slot_loop(i.out->layout.local_size(), [&](const std::string& s) { return fmt::format("{}[{}] = {}[{}];", out, s, x, s); });
      } else {
        // The thread's bits, whole bytes (packed sub-byte arrays round their storage up).
        linef("memcpy((void*)&{}, (const void*)&{}, {});", out, x, (in_bytes + 7) / 8);
      }
      return;
    }
    case InstKind::Reshape:
    case InstKind::Squeeze:
    case InstKind::Unsqueeze:
    case InstKind::Transpose: {
      Tensor out = inst.output(), x;
      for (auto& [t, a] : inst.operands()) x = t;
      auto in_shape = x.static_shape(), out_shape = out.static_shape();
      bool transpose = inst.kind() == InstKind::Transpose;
      auto m = must_map(*this, inst, out, x, [&](const std::vector<int64_t>& idx) {
        if (transpose) return std::vector<int64_t>{idx[1], idx[0]};
        // Reshapes keep the row-major linear index.
        int64_t linear = 0;
        for (size_t d = 0; d < idx.size(); ++d) linear = linear * out_shape[d] + idx[d];
        std::vector<int64_t> r(in_shape.size());
        for (int d = int(in_shape.size()) - 1; d >= 0; --d) {
          r[d] = linear % in_shape[d];
          linear /= in_shape[d];
        }
        return r;
      });
      const std::string& src = reg(x);
      declare_reg(out);
      copy_register(out, m, src);
      return;
    }
    case InstKind::Repeat: {
      auto& i = static_cast<const RepeatInst&>(inst);
      auto in_shape = i.x.static_shape(), out_shape = i.out.static_shape();
      size_t lead = out_shape.size() - in_shape.size();
      auto m = must_map(*this, inst, i.out, i.x, [&](const std::vector<int64_t>& idx) {
        std::vector<int64_t> r(in_shape.size());
        for (size_t d = 0; d < in_shape.size(); ++d) r[d] = idx[d + lead] % in_shape[d];
        return r;
      });
      const std::string& src = reg(i.x);
      declare_reg(i.out);
      copy_slots(i.out, m, [&](const std::string& from) { return fmt::format("{}[{}]", src, from); });
      return;
    }
    default: fail(inst, "the CUDA code generator does not lower this instruction");
  }
}

}  // namespace tilus::cuda
