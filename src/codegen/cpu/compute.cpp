// Register tensors on the CPU: each is a per-block array in row-major tile order, so
// elementwise operations, casts, reshapes, transposes, repeats, dot and reductions are loops
// over tile indices. Only `view` depends on the layouts: it reinterprets each thread's
// registers, so it is lowered through a table built from both layouts.
#include <fmt/format.h>

#include "emitter.h"

namespace tilus::cpu {

namespace {

int64_t ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& shape) {
  int64_t l = 0;
  for (size_t d = 0; d < idx.size(); ++d) l = l * shape[d] + idx[d];
  return l;
}

}  // namespace

void Emitter::emit_compute(const InstNode& inst) {
  switch (inst.kind()) {
    case InstKind::AllocateRegister: {
      auto& i = static_cast<const AllocateRegisterInst&>(inst);
      declare_reg(i.out);
      if (!i.init.defined()) return;
      auto shape = i.out.static_shape();
      tile_loop(shape, [&](const std::vector<llvm::Value*>& idx) {
        std::vector<llvm::Value*> axes;
        for (size_t d = 0; d < i.axes.size(); ++d) axes.push_back(convert(idx[d], dtypes::int32, i.axes[d].dtype()));
        for (size_t d = 0; d < i.axes.size(); ++d) values_[i.axes[d].operator->()] = axes[d];
        store_reg(i.out, linear(idx, shape), convert(expr(i.init), i.init.dtype(), i.out.dtype()));
        for (auto& a : i.axes) values_.erase(a.operator->());
      });
      return;
    }
    case InstKind::Elementwise: {
      auto& i = static_cast<const ElementwiseInst&>(inst);
      auto out_shape = i.out.static_shape();
      declare_reg(i.out);
      tile_loop(out_shape, [&](const std::vector<llvm::Value*>& idx) {
        for (size_t k = 0; k < i.inputs.size(); ++k) {
          auto in_shape = i.inputs[k].static_shape();
          size_t lead = out_shape.size() - in_shape.size();
          std::vector<llvm::Value*> in_idx;
          for (size_t d = 0; d < in_shape.size(); ++d) in_idx.push_back(in_shape[d] == 1 ? b.getInt32(0) : idx[d + lead]);
          values_[i.params[k].operator->()] =
              convert(load_reg(i.inputs[k], linear(in_idx, in_shape)), i.inputs[k].dtype(), i.params[k].dtype());
        }
        store_reg(i.out, linear(idx, out_shape), convert(expr(i.body), i.body.dtype(), i.out.dtype()));
        for (auto& p : i.params) values_.erase(p.operator->());
      });
      return;
    }
    case InstKind::Cast: {
      auto& i = static_cast<const CastInst&>(inst);
      declare_reg(i.out);
      loop(i32(i.out.num_elements()), [&](llvm::Value* l) {
        store_reg(i.out, l, convert(load_reg(i.x, l), i.x.dtype(), i.out.dtype()));
      });
      return;
    }
    case InstKind::Assign:
    case InstKind::Reshape:
    case InstKind::Squeeze:
    case InstKind::Unsqueeze: {
      // The same elements in the same row-major order.
      Tensor out = inst.output(), x;
      for (auto& [t, a] : inst.operands())
        if (!t.same_as(out)) x = t;
      if (inst.kind() == InstKind::Assign) {
        auto& i = static_cast<const AssignInst&>(inst);
        out = i.dst;
        x = i.src;
      } else {
        declare_reg(out);
      }
      loop(i32(out.num_elements()), [&](llvm::Value* l) { store_reg(out, l, convert(load_reg(x, l), x.dtype(), out.dtype())); });
      return;
    }
    case InstKind::Transpose: {
      auto& i = static_cast<const TransposeInst&>(inst);
      auto shape = i.out.static_shape(), in_shape = i.x.static_shape();
      declare_reg(i.out);
      tile_loop(shape, [&](const std::vector<llvm::Value*>& idx) {
        store_reg(i.out, linear(idx, shape), load_reg(i.x, linear({idx[1], idx[0]}, in_shape)));
      });
      return;
    }
    case InstKind::Repeat: {
      auto& i = static_cast<const RepeatInst&>(inst);
      auto shape = i.out.static_shape(), in_shape = i.x.static_shape();
      size_t lead = shape.size() - in_shape.size();
      declare_reg(i.out);
      tile_loop(shape, [&](const std::vector<llvm::Value*>& idx) {
        std::vector<llvm::Value*> src;
        for (size_t d = 0; d < in_shape.size(); ++d) src.push_back(b.CreateSRem(idx[d + lead], i32(in_shape[d])));
        store_reg(i.out, linear(idx, shape), load_reg(i.x, linear(src, in_shape)));
      });
      return;
    }
    case InstKind::View: {
      // Each thread's registers reinterpreted: out slot s of thread t takes the bits
      // [s * ob, (s + 1) * ob) of the concatenation of thread t's x slots.
      auto& i = static_cast<const ViewInst&>(inst);
      const RegisterLayout &lo = i.out->layout, &lx = i.x->layout;
      if (!lo.defined() || !lx.defined()) fail(inst, "view needs the layouts of both tensors");
      int ob = i.out.dtype().bits(), xb = i.x.dtype().bits();
      if (lo.local_size() * ob != lx.local_size() * xb) fail(inst, "the per-thread bits of the two layouts differ");
      // An out element's ob bits may straddle several x slots (3-bit codes in bytes): part k of
      // out slot s is x slot s * ob / xb + k, shifted left (or right, negative) into place.
      int64_t parts = (ob + xb - 1) / xb + (ob % xb != 0 || xb % ob != 0 ? 1 : 0);
      auto out_shape = i.out.static_shape(), x_shape = i.x.static_shape();
      // table[e * parts + k]: part k of out element e: (x linear index, shift, whether it exists).
      size_t entries = size_t(out_shape.empty() ? 1 : i.out.num_elements()) * size_t(parts);
      std::vector<int32_t> src(entries, 0), shift(entries, 0), valid(entries, 0);
      for (int64_t t = 0; t < lo.num_threads(); ++t)
        for (int64_t s = 0; s < lo.local_size(); ++s) {
          int64_t e = ravel(lo.map(t, s), out_shape);
          for (int64_t k = 0; k < parts; ++k) {
            int64_t xs = s * ob / xb + k;
            if (xs * xb >= (s + 1) * ob || xs >= lx.local_size()) continue;
            size_t at = size_t(e * parts + k);
            src[at] = int32_t(ravel(lx.map(t % lx.num_threads(), xs), x_shape));
            shift[at] = int32_t(xs * xb - s * ob);
            valid[at] = 1;
          }
        }
      auto table = [&](const std::vector<int32_t>& v, const char* name) {
        auto* at = llvm::ArrayType::get(b.getInt32Ty(), v.size());
        std::vector<llvm::Constant*> cs;
        for (int32_t x : v) cs.push_back(b.getInt32(x));
        auto* g = new llvm::GlobalVariable(module, at, true, llvm::GlobalValue::PrivateLinkage, llvm::ConstantArray::get(at, cs), name);
        return std::make_pair(at, g);
      };
      auto [src_t, src_g] = table(src, "view_src");
      auto [shift_t, shift_g] = table(shift, "view_shift");
      auto [valid_t, valid_g] = table(valid, "view_valid");
      declare_reg(i.out);
      llvm::Type* oi = b.getIntNTy(ob);
      llvm::Type* wide = b.getInt64Ty();
      auto bits_of = [&](llvm::Value* v, DataType t) {
        if (t.is_bool()) return b.CreateZExt(v, b.getInt8Ty());
        return v->getType()->isIntegerTy() ? v : b.CreateBitCast(v, b.getIntNTy(t.bits()));
      };
      loop(i32(i.out.num_elements()), [&](llvm::Value* e) {
        llvm::Value* acc = llvm::ConstantInt::get(wide, 0);
        auto entry = [&](llvm::ArrayType* t, llvm::GlobalVariable* g, llvm::Value* at) {
          return b.CreateLoad(b.getInt32Ty(), b.CreateInBoundsGEP(t, g, {b.getInt32(0), at}));
        };
        for (int64_t k = 0; k < parts; ++k) {
          llvm::Value* at = b.CreateAdd(b.CreateMul(e, i32(parts)), i32(k));
          llvm::Value* xs = entry(src_t, src_g, at);
          llvm::Value* sh = b.CreateSExt(entry(shift_t, shift_g, at), wide);
          llvm::Value* ok = b.CreateICmpNE(entry(valid_t, valid_g, at), b.getInt32(0));
          llvm::Value* xv = b.CreateZExt(bits_of(load_reg(i.x, xs), i.x.dtype()), wide);
          llvm::Value* zero = llvm::ConstantInt::get(wide, 0);
          llvm::Value* left = b.CreateICmpSGE(sh, zero);
          // Both shifts are below 64 (|shift| < max(ob, xb) <= 64); the unused one is clamped.
          llvm::Value* piece = b.CreateSelect(left, b.CreateShl(xv, b.CreateSelect(left, sh, zero)),
                                              b.CreateLShr(xv, b.CreateSelect(left, zero, b.CreateNeg(sh))));
          acc = b.CreateOr(acc, b.CreateSelect(ok, piece, zero));
        }
        acc = b.CreateTrunc(acc, oi);
        DataType ot = i.out.dtype();
        llvm::Value* v = ot.is_bool() ? b.CreateICmpNE(acc, llvm::ConstantInt::get(oi, 0))
                                      : b.CreateBitCast(acc, type(ot));
        store_reg(i.out, e, v);
      });
      return;
    }
    case InstKind::Dot: {
      // out[i][j] = c[i][j] + sum_k a[i][k] * b[k][j], in the accumulator's dtype, k in order.
      auto& i = static_cast<const DotInst&>(inst);
      if (i.a.rank() != 2) fail(inst, "only rank-2 operands are lowered");
      DataType ct = i.c.dtype(), ot = i.out.dtype();
      declare_reg(i.out);
      loop(i32(i.out.num_elements()), [&](llvm::Value* l) { store_reg(i.out, l, convert(load_reg(i.c, l), ct, ot)); });
      matmul_accumulate(i.a, i.b, i.out);
      return;
    }
    case InstKind::Reduce: {
      auto& i = static_cast<const ReduceInst&>(inst);
      auto x_shape = i.x.static_shape(), out_shape = i.out.static_shape();
      // 16-bit floats accumulate in float32 (as the CUDA path), everything else in its own type.
      DataType xt = i.x.dtype();
      DataType acc_t = (xt == dtypes::float16 || xt == dtypes::bfloat16) ? dtypes::float32 : i.out.dtype();
      llvm::Value* accs = alloca_in_entry(type(acc_t), i.out.num_elements(), "acc");
      auto acc_ptr = [&](llvm::Value* l) { return b.CreateInBoundsGEP(type(acc_t), accs, l); };
      // The identity of the reduction. Integer extremes are built bit-exactly: through a
      // double, INT64_MAX and UINT64_MAX round up to 2^63 and 2^64, which do not convert back.
      llvm::Value* identity = nullptr;
      bool extreme = i.op == ReduceOp::Max || i.op == ReduceOp::Min;
      if (extreme && acc_t.is_integer()) {
        unsigned bits = unsigned(acc_t.bits());
        bool is_min = i.op == ReduceOp::Min;  // min starts from the largest value, max from the smallest
        llvm::APInt v = acc_t.is_uint() ? (is_min ? llvm::APInt::getMaxValue(bits) : llvm::APInt::getMinValue(bits))
                                        : (is_min ? llvm::APInt::getSignedMaxValue(bits)
                                                  : llvm::APInt::getSignedMinValue(bits));
        identity = b.getInt(v);
      } else if (extreme) {
        identity = constant(acc_t, i.op == ReduceOp::Min ? INFINITY : -INFINITY);
      } else {
        identity = constant(acc_t, i.op == ReduceOp::All ? 1 : 0);
      }
      loop(i32(std::max<int64_t>(1, i.out.num_elements())), [&](llvm::Value* l) { b.CreateStore(identity, acc_ptr(l)); });
      auto reduced = [&](int d) { return std::find(i.dims.begin(), i.dims.end(), d) != i.dims.end(); };
      tile_loop(x_shape, [&](const std::vector<llvm::Value*>& idx) {
        std::vector<llvm::Value*> oi;
        for (int d = 0; d < int(idx.size()); ++d) {
          if (!reduced(d)) oi.push_back(idx[d]);
          else if (i.keepdim) oi.push_back(b.getInt32(0));
        }
        llvm::Value* ol = linear(oi, out_shape);
        llvm::Value* v = convert(load_reg(i.x, linear(idx, x_shape)), xt, acc_t);
        llvm::Value* a = b.CreateLoad(type(acc_t), acc_ptr(ol));
        llvm::Value* r = nullptr;
        bool f = acc_t.is_float(), s = acc_t.is_int();
        switch (i.op) {
          case ReduceOp::Sum: r = f ? b.CreateFAdd(a, v) : b.CreateAdd(a, v); break;
          case ReduceOp::Any: r = b.CreateOr(a, v); break;
          case ReduceOp::All: r = b.CreateAnd(a, v); break;
          case ReduceOp::Max:
            r = f ? b.CreateCall(llvm::Intrinsic::getDeclaration(&module, llvm::Intrinsic::maxnum, {a->getType()}), {a, v})
                  : b.CreateSelect(s ? b.CreateICmpSLT(a, v) : b.CreateICmpULT(a, v), v, a);
            break;
          case ReduceOp::Min:
            r = f ? b.CreateCall(llvm::Intrinsic::getDeclaration(&module, llvm::Intrinsic::minnum, {a->getType()}), {a, v})
                  : b.CreateSelect(s ? b.CreateICmpSLT(v, a) : b.CreateICmpULT(v, a), v, a);
            break;
        }
        b.CreateStore(r, acc_ptr(ol));
      });
      declare_reg(i.out);
      loop(i32(std::max<int64_t>(1, i.out.num_elements())), [&](llvm::Value* l) {
        store_reg(i.out, l, convert(b.CreateLoad(type(acc_t), acc_ptr(l)), acc_t, i.out.dtype()));
      });
      return;
    }
    default: fail(inst, "the CPU code generator does not lower this instruction");
  }
}

// out[i][j] += sum_k a[i][k] * b[k][j] over whole register tiles, in out's dtype (floats through
// float32, or float64 for it), k in order. A rank-3 b [blocks, k, n / blocks] holds b's column
// blocks (wgmma.mma's b in column blocks): b[k][j] is its [j / (n / blocks)][k][j % (n / blocks)].
void Emitter::matmul_accumulate(const Tensor& ta, const Tensor& tb, const Tensor& tout) {
  auto sa = ta.static_shape(), sb = tb.static_shape();
  bool blocked = sb.size() == 3;
  int64_t m = sa[0], k = sa[1], n = blocked ? sb[0] * sb[2] : sb[1], nb = blocked ? sb[2] : n;
  DataType ot = tout.dtype();
  bool is_float = ot.is_float();
  DataType acc_t = is_float ? (ot == dtypes::float64 ? dtypes::float64 : dtypes::float32) : ot;
  loop(i32(m), [&](llvm::Value* im) {
    loop(i32(k), [&](llvm::Value* ik) {
      llvm::Value* av = convert(load_reg(ta, b.CreateAdd(b.CreateMul(im, i32(k)), ik)), ta.dtype(), acc_t);
      loop(i32(n), [&](llvm::Value* jn) {
        llvm::Value* ol = b.CreateAdd(b.CreateMul(im, i32(n)), jn);
        llvm::Value* bi = b.CreateAdd(b.CreateMul(ik, i32(nb)), jn);
        if (blocked)  // column j of block j / nb: k * nb elements per block
          bi = b.CreateAdd(b.CreateMul(b.CreateUDiv(jn, i32(nb)), i32(k * nb - nb)), bi);
        llvm::Value* bv = convert(load_reg(tb, bi), tb.dtype(), acc_t);
        llvm::Value* acc = convert(load_reg(tout, ol), ot, acc_t);
        llvm::Value* r;
        if (is_float) r = b.CreateCall(llvm::Intrinsic::getDeclaration(&module, llvm::Intrinsic::fmuladd, {av->getType()}), {av, bv, acc});
        else r = b.CreateAdd(b.CreateMul(av, bv), acc);
        store_reg(tout, ol, convert(r, acc_t, ot));
      });
    });
  });
}

}  // namespace tilus::cpu
