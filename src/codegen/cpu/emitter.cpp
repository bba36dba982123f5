// The CPU emitter: the kernel function, statements, scalar expressions and conversions.
#include "emitter.h"

#include <fmt/format.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <cmath>

#include "tilus/ir/functor.h"
#include "tilus/ir/inst_def.h"

namespace tilus::cpu {

Emitter::Emitter(const Kernel& k, llvm::LLVMContext& c, llvm::Module& m, const CpuCodegenOptions& o)
    : kernel(k), ctx(c), module(m), b(c), options(o), facts(k) {}

[[noreturn]] void Emitter::fail(const InstNode& inst, const std::string& message) const {
  throw CompileError(fmt::format("{}: {} (CPU backend)", inst.display_name(), message), inst.loc);
}

// --- types --------------------------------------------------------------------------------------

llvm::Type* Emitter::type(DataType t) {
  if (t.is_pointer()) return b.getInt8PtrTy();
  if (t.is_bool()) return b.getInt1Ty();
  // Sub-byte integers are LLVM's iN (a byte each in registers; packed in memory).
  if (t.is_integer() && (t.bits() < 8 || t.bits() == 8 || t.bits() == 16 || t.bits() == 32 || t.bits() == 64))
    return b.getIntNTy(t.bits());
  if (t == dtypes::float16) return b.getHalfTy();
  if (t == dtypes::bfloat16) return b.getInt16Ty();  // computes through float32, stored by bits
  if (is_low_float(t)) return b.getIntNTy(t.bits());  // computes through float32, stored by bits
  if (t == dtypes::float32 || t == dtypes::tfloat32) return b.getFloatTy();
  if (t == dtypes::float64) return b.getDoubleTy();
  throw CompileError(fmt::format("the CPU backend does not support {} yet (nor does the CUDA path)", t.name()));
}

llvm::Type* Emitter::memory_type(DataType t) { return t.is_bool() ? b.getInt8Ty() : type(t); }

bool is_low_float(DataType t) { return t.is_float() && t.bits() <= 8; }

int32_t low_float_format(DataType t) {
  return t.bits() | (t.exponent_bits() << 8) | (t.mantissa_bits() << 16) | (int32_t(t.float_style()) << 24);
}

llvm::Value* Emitter::low_float_decode(llvm::Value* code, DataType t) {
  llvm::FunctionCallee f = module.getOrInsertFunction("tilus_low_float_decode", b.getDoubleTy(), b.getInt32Ty(), b.getInt32Ty());
  return b.CreateCall(f, {b.CreateZExt(code, b.getInt32Ty()), b.getInt32(low_float_format(t))});
}

llvm::Value* Emitter::low_float_encode(llvm::Value* v, DataType t) {
  if (!v->getType()->isDoubleTy()) v = b.CreateFPExt(v, b.getDoubleTy());
  llvm::FunctionCallee f = module.getOrInsertFunction("tilus_low_float_encode", b.getInt32Ty(), b.getDoubleTy(), b.getInt32Ty());
  return b.CreateTrunc(b.CreateCall(f, {v, b.getInt32(low_float_format(t))}), type(t));
}

llvm::Function* Emitter::intrinsic(llvm::Intrinsic::ID id, llvm::ArrayRef<llvm::Type*> types) {
  return llvm::Intrinsic::getDeclaration(&module, id, types);
}

llvm::Value* Emitter::constant(DataType t, double v) {
  if (t.is_bool()) return b.getInt1(v != 0.0);
  if (t.is_integer()) {
    uint64_t bits = t.is_uint() && v >= 9.2e18 ? uint64_t(v) : uint64_t(int64_t(v));
    return llvm::ConstantInt::get(type(t), bits);
  }
  if (t == dtypes::bfloat16) return b.getInt16(uint16_t(t.encode_float(v)));
  if (is_low_float(t)) return llvm::ConstantInt::get(type(t), t.encode_float(v));
  if (t == dtypes::float16) {
    uint16_t bits = uint16_t(t.encode_float(v));
    return llvm::ConstantFP::get(ctx, llvm::APFloat(llvm::APFloat::IEEEhalf(), llvm::APInt(16, bits)));
  }
  if (t == dtypes::float32 || t == dtypes::tfloat32) return llvm::ConstantFP::get(b.getFloatTy(), double(float(v)));
  if (t == dtypes::float64) return llvm::ConstantFP::get(b.getDoubleTy(), v);
  return llvm::Constant::getNullValue(type(t));
}

// --- conversions ---------------------------------------------------------------------------------

llvm::Value* Emitter::widen(llvm::Value* v, DataType t) {
  if (t == dtypes::float16) return b.CreateFPExt(v, b.getFloatTy());
  if (t == dtypes::bfloat16) return b.CreateBitCast(b.CreateShl(b.CreateZExt(v, b.getInt32Ty()), 16), b.getFloatTy());
  if (is_low_float(t)) return b.CreateFPTrunc(low_float_decode(v, t), b.getFloatTy());  // exact
  return v;
}

llvm::Value* Emitter::narrow(llvm::Value* v, DataType t) {
  if (t == dtypes::float16) return b.CreateFPTrunc(v, b.getHalfTy());
  if (t == dtypes::bfloat16) {
    // Round to nearest even on the bits; NaN becomes the canonical 0x7fff (as cvt.rn.bf16.f32).
    llvm::Value* bits = b.CreateBitCast(v, b.getInt32Ty());
    llvm::Value* lsb = b.CreateAnd(b.CreateLShr(bits, 16), 1);
    llvm::Value* rounded = b.CreateLShr(b.CreateAdd(b.CreateAdd(bits, b.getInt32(0x7fff)), lsb), 16);
    llvm::Value* is_nan = b.CreateFCmpUNO(v, v);
    return b.CreateSelect(is_nan, b.getInt16(0x7fff), b.CreateTrunc(rounded, b.getInt16Ty()));
  }
  if (is_low_float(t)) return low_float_encode(v, t);
  return v;
}

llvm::Value* Emitter::convert(llvm::Value* v, DataType from, DataType to) {
  if (from == to) return v;
  if (to.is_pointer() || from.is_pointer()) {
    if (to.is_pointer() && from.is_pointer()) return v;
    if (to.is_pointer()) return b.CreateIntToPtr(b.CreateSExtOrTrunc(v, b.getInt64Ty()), type(to));
    return b.CreateSExtOrTrunc(b.CreatePtrToInt(v, b.getInt64Ty()), type(to));
  }
  if (to.is_bool()) {
    if (from.is_float()) {
      llvm::Value* w = widen(v, from);
      return b.CreateFCmpUNE(w, llvm::ConstantFP::get(w->getType(), 0.0));
    }
    return b.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
  }
  bool from_signed = from.is_int();
  if (to.is_integer()) {
    if (from.is_bool()) return b.CreateZExt(v, type(to));
    if (from.is_integer()) return from_signed ? b.CreateSExtOrTrunc(v, type(to)) : b.CreateZExtOrTrunc(v, type(to));
    // Float to integer truncates toward zero and saturates (NaN: 0), as cvt.rzi does.
    llvm::Value* w = widen(v, from);
    auto id = to.is_int() ? llvm::Intrinsic::fptosi_sat : llvm::Intrinsic::fptoui_sat;
    return b.CreateCall(intrinsic(id, {type(to), w->getType()}), {w});
  }
  // To a float.
  if (from.is_bool() || from.is_integer()) {
    bool is_signed = from.is_int();
    // 16-bit floats from integers go through float32 (as __float2half_rn(float(x))).
    llvm::Type* target = (to == dtypes::float16 || to == dtypes::bfloat16) ? b.getFloatTy()
                         : is_low_float(to)                                 ? b.getDoubleTy()
                                                                            : type(to);
    llvm::Value* f = is_signed ? b.CreateSIToFP(v, target) : b.CreateUIToFP(v, target);
    return narrow(f, to);
  }
  // Float to float. A low-precision float is rounded once, from the source's exact value.
  if (is_low_float(to)) {
    llvm::Value* w = widen(v, from);
    return low_float_encode(w, to);
  }
  if (to == dtypes::float16 && from == dtypes::float64) return b.CreateFPTrunc(v, b.getHalfTy());  // __double2half
  llvm::Value* w = widen(v, from);  // f16/bf16 -> float
  if (to == dtypes::float16 || to == dtypes::bfloat16) {
    if (w->getType()->isDoubleTy()) w = b.CreateFPTrunc(w, b.getFloatTy());
    return narrow(w, to);
  }
  llvm::Type* target = type(to);
  if (w->getType() == target) return w;
  if (target->isDoubleTy()) return b.CreateFPExt(w, target);
  return b.CreateFPTrunc(w, target);
}

// --- expressions -----------------------------------------------------------------------------

llvm::Value* Emitter::expr(const Expr& e) {
  if (!e.defined()) throw InternalError("CPU emitter: an undefined expression");
  DataType t = e.dtype();
  switch (e.kind()) {
    case ExprKind::Var: {
      auto v = e.as<VarNode>();
      if (auto it = values_.find(v); it != values_.end()) return here(it->second);
      if (llvm::Value* slot = block_storage(v, type(t))) return b.CreateLoad(type(t), slot, v->name);
      if (v->role == VarRole::Builtin) {
        if (v->name == "blockIdx.x") return fn->getArg(1);
        if (v->name == "blockIdx.y") return fn->getArg(2);
        if (v->name == "blockIdx.z") return fn->getArg(3);
        // The block's place in its cluster, from its block index and the cluster's shape.
        const auto& c = kernel.cluster;
        for (int d = 0; d < 3; ++d) {
          if (v == builtin::cluster_dim(d).get()) return i32(c[d]);
          if (v == builtin::cluster_block_idx(d).get()) return b.CreateSRem(fn->getArg(1 + d), i32(c[d]));
        }
        if (v == builtin::cluster_block_rank().get()) {
          llvm::Value* x = b.CreateSRem(fn->getArg(1), i32(c[0]));
          llvm::Value* y = b.CreateSRem(fn->getArg(2), i32(c[1]));
          llvm::Value* z = b.CreateSRem(fn->getArg(3), i32(c[2]));
          return b.CreateAdd(x, b.CreateMul(i32(c[0]), b.CreateAdd(y, b.CreateMul(i32(c[1]), z))));
        }
        throw CompileError(fmt::format("the CPU backend runs tiles, not threads: '{}' has no value there", v->name));
      }
      throw InternalError(fmt::format("CPU emitter: variable '{}' used before its definition", v->name));
    }
    case ExprKind::IntImm: return llvm::ConstantInt::get(type(t), uint64_t(e.as<IntImmNode>()->value));
    case ExprKind::FloatImm: return constant(t, e.as<FloatImmNode>()->value);
    case ExprKind::BoolImm: return b.getInt1(e.as<BoolImmNode>()->value);
    case ExprKind::Unary: {
      auto n = e.as<UnaryNode>();
      llvm::Value* a = expr(n->a);
      switch (n->op) {
        case UnaryOp::Neg:
          if (t.is_float()) return narrow(b.CreateFNeg(widen(a, t)), t);
          return b.CreateNeg(a);
        case UnaryOp::Not: return b.CreateNot(convert(a, n->a.dtype(), dtypes::boolean));
        case UnaryOp::BitNot: return b.CreateNot(a);
      }
      break;
    }
    case ExprKind::Binary: return binary(*e.as<BinaryNode>());
    case ExprKind::Select: {
      auto n = e.as<SelectNode>();
      llvm::Value* c = convert(expr(n->cond), n->cond.dtype(), dtypes::boolean);
      return b.CreateSelect(c, convert(expr(n->t), n->t.dtype(), t), convert(expr(n->f), n->f.dtype(), t));
    }
    case ExprKind::Cast: {
      auto n = e.as<CastNode>();
      return convert(expr(n->a), n->a.dtype(), t);
    }
    case ExprKind::Call: return call(*e.as<CallNode>());
  }
  throw InternalError("CPU emitter: unknown expression kind");
}

llvm::Value* Emitter::binary(const BinaryNode& n) {
  DataType ot = n.a.dtype(), t = n.dtype;
  llvm::Value* a = expr(n.a);
  llvm::Value* c = expr(n.b);
  if (t.is_pointer()) {  // pointer +- integer, in elements (bytes for void*), as C does
    llvm::Value* i = convert(c, n.b.dtype(), dtypes::int64);
    DataType e = ot.pointee();
    if (n.op == BinaryOp::Sub) i = b.CreateNeg(i);
    return b.CreateGEP(b.getInt8Ty(), a, b.CreateMul(i, i64(e.is_void() ? 1 : std::max<int64_t>(1, e.bits() / 8))));
  }
  if (n.b.dtype() != ot) c = convert(c, n.b.dtype(), ot);
  if (n.op == BinaryOp::And || n.op == BinaryOp::Or) {
    a = convert(a, ot, dtypes::boolean);
    c = convert(c, ot, dtypes::boolean);
    return n.op == BinaryOp::And ? b.CreateAnd(a, c) : b.CreateOr(a, c);
  }
  if (ot.is_float()) {
    llvm::Value* x = widen(a, ot);
    llvm::Value* y = widen(c, ot);
    switch (n.op) {
      case BinaryOp::Eq: return b.CreateFCmpOEQ(x, y);
      case BinaryOp::Ne: return b.CreateFCmpUNE(x, y);
      case BinaryOp::Lt: return b.CreateFCmpOLT(x, y);
      case BinaryOp::Le: return b.CreateFCmpOLE(x, y);
      case BinaryOp::Gt: return b.CreateFCmpOGT(x, y);
      case BinaryOp::Ge: return b.CreateFCmpOGE(x, y);
      default: break;
    }
    llvm::Value* r = nullptr;
    switch (n.op) {
      case BinaryOp::Add: r = b.CreateFAdd(x, y); break;
      case BinaryOp::Sub: r = b.CreateFSub(x, y); break;
      case BinaryOp::Mul: r = b.CreateFMul(x, y); break;
      case BinaryOp::Div: r = b.CreateFDiv(x, y); break;
      case BinaryOp::Mod: r = b.CreateFRem(x, y); break;
      case BinaryOp::FloorDiv:
        r = b.CreateCall(intrinsic(llvm::Intrinsic::floor, {x->getType()}), {b.CreateFDiv(x, y)});
        break;
      case BinaryOp::FloorMod: {
        llvm::Value* q = b.CreateCall(intrinsic(llvm::Intrinsic::floor, {x->getType()}), {b.CreateFDiv(x, y)});
        r = b.CreateFSub(x, b.CreateFMul(q, y));
        break;
      }
      case BinaryOp::Min: r = b.CreateCall(intrinsic(llvm::Intrinsic::minnum, {x->getType()}), {x, y}); break;
      case BinaryOp::Max: r = b.CreateCall(intrinsic(llvm::Intrinsic::maxnum, {x->getType()}), {x, y}); break;
      default:
        throw CompileError(fmt::format("the CPU backend cannot apply '{}' to {}", to_string(n.op), ot.name()));
    }
    return narrow(r, t);
  }
  bool is_signed = ot.is_int();
  switch (n.op) {
    case BinaryOp::Eq: return b.CreateICmpEQ(a, c);
    case BinaryOp::Ne: return b.CreateICmpNE(a, c);
    case BinaryOp::Lt: return is_signed ? b.CreateICmpSLT(a, c) : b.CreateICmpULT(a, c);
    case BinaryOp::Le: return is_signed ? b.CreateICmpSLE(a, c) : b.CreateICmpULE(a, c);
    case BinaryOp::Gt: return is_signed ? b.CreateICmpSGT(a, c) : b.CreateICmpUGT(a, c);
    case BinaryOp::Ge: return is_signed ? b.CreateICmpSGE(a, c) : b.CreateICmpUGE(a, c);
    case BinaryOp::Add: return b.CreateAdd(a, c);
    case BinaryOp::Sub: return b.CreateSub(a, c);
    case BinaryOp::Mul: return b.CreateMul(a, c);
    case BinaryOp::BitAnd: return b.CreateAnd(a, c);
    case BinaryOp::BitOr: return b.CreateOr(a, c);
    case BinaryOp::BitXor: return b.CreateXor(a, c);
    case BinaryOp::Min: return b.CreateSelect(is_signed ? b.CreateICmpSLT(c, a) : b.CreateICmpULT(c, a), c, a);
    case BinaryOp::Max: return b.CreateSelect(is_signed ? b.CreateICmpSLT(a, c) : b.CreateICmpULT(a, c), c, a);
    case BinaryOp::Shl:
    case BinaryOp::Shr: {
      // Shift amounts past the width give 0 (or the sign) as PTX shl/shr do; LLVM would
      // give poison.
      int bits = int(a->getType()->getIntegerBitWidth());
      llvm::Value* too_far = b.CreateICmpUGE(c, llvm::ConstantInt::get(c->getType(), bits));
      llvm::Value* amount = b.CreateSelect(too_far, llvm::ConstantInt::get(c->getType(), bits - 1), c);
      if (n.op == BinaryOp::Shr && is_signed) return b.CreateAShr(a, amount);
      llvm::Value* r = n.op == BinaryOp::Shl ? b.CreateShl(a, amount) : b.CreateLShr(a, amount);
      return b.CreateSelect(too_far, llvm::ConstantInt::get(a->getType(), 0), r);
    }
    default: break;
  }
  // Division: a zero divisor (and INT_MIN / -1) would trap the host; the GPU gives an
  // unspecified value, the CPU gives a / 1.
  llvm::Type* it = a->getType();
  llvm::Value* zero = llvm::ConstantInt::get(it, 0);
  llvm::Value* bad = b.CreateICmpEQ(c, zero);
  if (is_signed)
    bad = b.CreateOr(bad, b.CreateAnd(b.CreateICmpEQ(a, llvm::ConstantInt::get(it, llvm::APInt::getSignedMinValue(it->getIntegerBitWidth()))),
                                      b.CreateICmpEQ(c, llvm::ConstantInt::get(it, uint64_t(-1), true))));
  llvm::Value* d = b.CreateSelect(bad, llvm::ConstantInt::get(it, 1), c);
  llvm::Value* q = is_signed ? b.CreateSDiv(a, d) : b.CreateUDiv(a, d);
  llvm::Value* r = is_signed ? b.CreateSRem(a, d) : b.CreateURem(a, d);
  switch (n.op) {
    case BinaryOp::Div: return q;
    case BinaryOp::Mod: return r;
    case BinaryOp::FloorDiv:
    case BinaryOp::FloorMod: {
      if (!is_signed) return n.op == BinaryOp::FloorDiv ? q : r;
      // Round toward negative infinity: adjust when the remainder is non-zero and the signs differ.
      llvm::Value* adjust = b.CreateAnd(b.CreateICmpNE(r, zero), b.CreateICmpNE(b.CreateICmpSLT(a, zero), b.CreateICmpSLT(d, zero)));
      if (n.op == BinaryOp::FloorDiv) return b.CreateSelect(adjust, b.CreateSub(q, llvm::ConstantInt::get(it, 1)), q);
      return b.CreateSelect(adjust, b.CreateAdd(r, d), r);
    }
    default: break;
  }
  throw CompileError(fmt::format("the CPU backend cannot apply '{}' to {}", to_string(n.op), ot.name()));
}

llvm::Value* Emitter::call(const CallNode& n) {
  DataType t = n.dtype;
  std::vector<llvm::Value*> args;
  for (auto& a : n.args) args.push_back(widen(convert(expr(a), a.dtype(), t), t));
  const std::string& name = n.name;
  if (t.is_integer()) {
    if (name == "abs" && args.size() == 1) {
      if (t.is_uint()) return args[0];
      llvm::Value* x = args[0];
      return b.CreateSelect(b.CreateICmpSLT(x, llvm::ConstantInt::get(x->getType(), 0)), b.CreateNeg(x), x);
    }
    throw CompileError(fmt::format("the CPU backend has no integer '{}'", name));
  }
  if (!t.is_float()) throw CompileError(fmt::format("the CPU backend has no '{}' of {}", name, t.name()));
  llvm::Type* ft = args.empty() ? b.getFloatTy() : args[0]->getType();
  auto unary = [&](llvm::Intrinsic::ID id) { return b.CreateCall(intrinsic(id, {ft}), {args.at(0)}); };
  llvm::Value* r = nullptr;
  if (name == "exp") r = unary(llvm::Intrinsic::exp);
  else if (name == "exp2") {
    r = unary(llvm::Intrinsic::exp2);
    // The GPU's float exp2 flushes results below 2^-126 to zero (ex2.approx.ftz, tilus_device.cuh).
    if (ft->isFloatTy())
      r = b.CreateSelect(b.CreateFCmpOLT(args[0], llvm::ConstantFP::get(ft, -126.0)), llvm::ConstantFP::get(ft, 0.0), r);
  }
  else if (name == "log") r = unary(llvm::Intrinsic::log);
  else if (name == "log2") r = unary(llvm::Intrinsic::log2);
  else if (name == "sqrt") r = unary(llvm::Intrinsic::sqrt);
  else if (name == "rsqrt") r = b.CreateFDiv(llvm::ConstantFP::get(ft, 1.0), unary(llvm::Intrinsic::sqrt));
  else if (name == "rcp") {
    r = b.CreateFDiv(llvm::ConstantFP::get(ft, 1.0), args.at(0));
    // The GPU's float rcp flushes results below 2^-126 to zero (rcp.approx.ftz, tilus_device.cuh).
    if (ft->isFloatTy())
      r = b.CreateSelect(b.CreateFCmpOGT(unary(llvm::Intrinsic::fabs), llvm::ConstantFP::get(ft, 0x1p126)),
                         b.CreateCall(intrinsic(llvm::Intrinsic::copysign, {ft}), {llvm::ConstantFP::get(ft, 0.0), args.at(0)}), r);
  }
  else if (name == "sin") r = unary(llvm::Intrinsic::sin);
  else if (name == "cos") r = unary(llvm::Intrinsic::cos);
  else if (name == "round") r = unary(llvm::Intrinsic::rint);
  else if (name == "floor") r = unary(llvm::Intrinsic::floor);
  else if (name == "ceil") r = unary(llvm::Intrinsic::ceil);
  else if (name == "abs") r = unary(llvm::Intrinsic::fabs);
  else if (name == "pow") r = b.CreateCall(intrinsic(llvm::Intrinsic::pow, {ft}), {args.at(0), args.at(1)});
  else if (name == "tanh" || name == "erf") {  // libm's, no LLVM intrinsic
    llvm::FunctionCallee f = module.getOrInsertFunction(ft->isDoubleTy() ? name : name + "f", ft, ft);
    r = b.CreateCall(f, {args.at(0)});
  } else {
    throw CompileError(fmt::format("the CPU backend has no builtin '{}'", name));
  }
  return narrow(r, t);
}

// --- memory and register arrays -----------------------------------------------------------------

llvm::Value* Emitter::load_memory(llvm::Value* base, llvm::Value* elem_offset, DataType t) {
  if (t.is_subbyte()) {  // densely packed: the runtime's helper reads the element's bits
    llvm::FunctionCallee f = module.getOrInsertFunction("tilus_load_bits", b.getInt32Ty(), b.getInt8PtrTy(),
                                                        b.getInt64Ty(), b.getInt32Ty());
    llvm::Value* code = b.CreateCall(f, {b.CreateBitCast(base, b.getInt8PtrTy()),
                                         b.CreateSExtOrTrunc(elem_offset, b.getInt64Ty()), b.getInt32(t.bits())});
    return b.CreateTrunc(code, type(t));
  }
  llvm::Type* mt = memory_type(t);
  llvm::Value* p = b.CreateGEP(mt, b.CreateBitCast(base, llvm::PointerType::getUnqual(mt)), elem_offset);
  llvm::Value* v = b.CreateAlignedLoad(mt, p, llvm::Align(1));
  return t.is_bool() ? b.CreateICmpNE(v, b.getInt8(0)) : v;
}

void Emitter::store_memory(llvm::Value* base, llvm::Value* elem_offset, DataType t, llvm::Value* v) {
  if (t.is_subbyte()) {
    llvm::FunctionCallee f = module.getOrInsertFunction("tilus_store_bits", b.getVoidTy(), b.getInt8PtrTy(),
                                                        b.getInt64Ty(), b.getInt32Ty(), b.getInt32Ty());
    b.CreateCall(f, {b.CreateBitCast(base, b.getInt8PtrTy()), b.CreateSExtOrTrunc(elem_offset, b.getInt64Ty()),
                     b.getInt32(t.bits()), b.CreateZExt(v, b.getInt32Ty())});
    return;
  }
  llvm::Type* mt = memory_type(t);
  llvm::Value* p = b.CreateGEP(mt, b.CreateBitCast(base, llvm::PointerType::getUnqual(mt)), elem_offset);
  if (t.is_bool()) v = b.CreateZExt(v, b.getInt8Ty());
  b.CreateAlignedStore(v, p, llvm::Align(1));
}

llvm::Value* Emitter::alloca_in_entry(llvm::Type* t, int64_t n, const std::string& name) {
  llvm::IRBuilder<> eb(entry_, entry_->begin());
  llvm::AllocaInst* a = eb.CreateAlloca(t, eb.getInt64(uint64_t(std::max<int64_t>(n, 1))), name);
  a->setAlignment(llvm::Align(n > 1 ? 64 : 8));
  return a;
}

llvm::Value* Emitter::block_storage(const void* key, llvm::Type* t, int64_t n, const std::string& name) {
  if (llvm::Value* p = block_storage(key, t)) return p;
  if (!frame_) {
    llvm::Value* a = alloca_in_entry(t, n, name);
    block_storage_[key] = {a, -1};
    return a;
  }
  int64_t align = n > 1 ? 64 : 8;
  int64_t offset = (frame_bytes_ + align - 1) / align * align;
  frame_bytes_ = offset + int64_t(module.getDataLayout().getTypeAllocSize(t)) * std::max<int64_t>(n, 1);
  block_storage_[key] = {nullptr, offset};
  return frame_at(offset, t);
}

llvm::Value* Emitter::block_storage(const void* key, llvm::Type* t) {
  auto it = block_storage_.find(key);
  if (it == block_storage_.end()) return nullptr;
  return it->second.offset < 0 ? it->second.alloca : frame_at(it->second.offset, t);
}

llvm::Value* Emitter::declare_reg(const Tensor& t) {
  return block_storage(t.get(), memory_type(t.dtype()), t.num_elements(), t->name.empty() ? "r" : t->name);
}

llvm::Value* Emitter::reg(const Tensor& t) {
  if (llvm::Value* p = block_storage(t.get(), memory_type(t.dtype()))) return p;
  throw InternalError(fmt::format("CPU emitter: register tensor '{}' used before its definition", t->name));
}

llvm::Value* Emitter::reg_ptr(const Tensor& t, llvm::Value* linear_index) {
  return b.CreateInBoundsGEP(memory_type(t.dtype()), reg(t), b.CreateSExt(linear_index, b.getInt64Ty()));
}

llvm::Value* Emitter::load_reg(const Tensor& t, llvm::Value* linear_index) {
  llvm::Value* v = b.CreateLoad(memory_type(t.dtype()), reg_ptr(t, linear_index));
  return t.dtype().is_bool() ? b.CreateICmpNE(v, b.getInt8(0)) : v;
}

void Emitter::store_reg(const Tensor& t, llvm::Value* linear_index, llvm::Value* v) {
  if (t.dtype().is_bool()) v = b.CreateZExt(v, b.getInt8Ty());
  b.CreateStore(v, reg_ptr(t, linear_index));
}

llvm::Value* Emitter::linear(const std::vector<llvm::Value*>& idx, const std::vector<int64_t>& shape) {
  llvm::Value* l = b.getInt32(0);
  for (size_t d = 0; d < idx.size(); ++d) l = b.CreateAdd(b.CreateMul(l, b.getInt32(int32_t(shape[d]))), idx[d]);
  return l;
}

// --- control flow helpers -----------------------------------------------------------------------

void Emitter::loop(llvm::Value* n, const std::function<void(llvm::Value*)>& body) {
  llvm::BasicBlock* pre = b.GetInsertBlock();
  llvm::BasicBlock* head = llvm::BasicBlock::Create(ctx, "tile.head", fn);
  llvm::BasicBlock* bodyb = llvm::BasicBlock::Create(ctx, "tile.body", fn);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx, "tile.exit", fn);
  b.CreateBr(head);
  b.SetInsertPoint(head);
  llvm::PHINode* i = b.CreatePHI(b.getInt32Ty(), 2, "i");
  i->addIncoming(b.getInt32(0), pre);
  b.CreateCondBr(b.CreateICmpSLT(i, n), bodyb, exit);
  b.SetInsertPoint(bodyb);
  body(i);
  llvm::Value* next = b.CreateAdd(i, b.getInt32(1), "", true, true);
  i->addIncoming(next, b.GetInsertBlock());
  b.CreateBr(head);
  b.SetInsertPoint(exit);
}

void Emitter::tile_loop(const std::vector<int64_t>& shape,
                        const std::function<void(const std::vector<llvm::Value*>&)>& body) {
  std::vector<llvm::Value*> idx;
  std::function<void(size_t)> level = [&](size_t d) {
    if (d == shape.size()) {
      body(idx);
      return;
    }
    if (shape[d] == 1) {
      idx.push_back(b.getInt32(0));
      level(d + 1);
      idx.pop_back();
      return;
    }
    loop(b.getInt32(int32_t(shape[d])), [&](llvm::Value* i) {
      idx.push_back(i);
      level(d + 1);
      idx.pop_back();
    });
  };
  level(0);
}

std::vector<Expr> Emitter::bind_index(const std::vector<llvm::Value*>& idx) {
  std::vector<Expr> vars;
  for (auto* v : idx) {
    Var var(fmt::format("t{}", binder_ids_++), dtypes::int32, VarRole::Binder);
    values_[static_cast<const VarNode*>(var.get())] = v;
    vars.push_back(var);
  }
  return vars;
}

void Emitter::unbind(const std::vector<Expr>& vars) {
  for (auto& v : vars) values_.erase(static_cast<const VarNode*>(v.get()));
}

void Emitter::if_then(llvm::Value* cond, const std::function<void()>& then, const std::function<void()>& otherwise) {
  if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(cond)) {
    if (c->isOne()) then();
    else if (otherwise) otherwise();
    return;
  }
  llvm::BasicBlock* tb = llvm::BasicBlock::Create(ctx, "then", fn);
  llvm::BasicBlock* eb = otherwise ? llvm::BasicBlock::Create(ctx, "else", fn) : nullptr;
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx, "endif", fn);
  b.CreateCondBr(cond, tb, eb ? eb : done);
  b.SetInsertPoint(tb);
  then();
  b.CreateBr(done);
  if (eb) {
    b.SetInsertPoint(eb);
    otherwise();
    b.CreateBr(done);
  }
  b.SetInsertPoint(done);
}

// --- statements ------------------------------------------------------------------------------

void Emitter::emit_stmt(const Stmt& s) {
  if (!s) return;
  // Code after a break / continue is unreachable: give it a block of its own.
  if (b.GetInsertBlock()->getTerminator()) b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "dead", fn));
  switch (s->kind) {
    case StmtKind::Seq: emit_seq(static_cast<const SeqStmtNode&>(*s)); return;
    case StmtKind::For: {
      auto& n = static_cast<const ForStmtNode&>(*s);
      DataType vt = n.var.dtype();
      llvm::Value* begin = convert(expr(n.begin), n.begin.dtype(), vt);
      llvm::Value* end = convert(expr(n.end), n.end.dtype(), vt);
      llvm::Value* step = convert(expr(n.step), n.step.dtype(), vt);
      llvm::Value* var = alloca_in_entry(type(vt), 1, n.var.name());
      b.CreateStore(begin, var);
      llvm::BasicBlock* head = llvm::BasicBlock::Create(ctx, "for.head", fn);
      llvm::BasicBlock* body = llvm::BasicBlock::Create(ctx, "for.body", fn);
      llvm::BasicBlock* latch = llvm::BasicBlock::Create(ctx, "for.latch", fn);
      llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx, "for.exit", fn);
      b.CreateBr(head);
      b.SetInsertPoint(head);
      llvm::Value* cur = b.CreateLoad(type(vt), var);
      bool is_signed = vt.is_int();
      llvm::Value* zero = llvm::ConstantInt::get(type(vt), 0);
      llvm::Value* up = is_signed ? b.CreateICmpSLT(cur, end) : b.CreateICmpULT(cur, end);
      llvm::Value* down = is_signed ? b.CreateICmpSGT(cur, end) : b.CreateICmpUGT(cur, end);
      llvm::Value* positive = is_signed ? b.CreateICmpSGT(step, zero) : b.getInt1(true);
      b.CreateCondBr(b.CreateSelect(positive, up, down), body, exit);
      b.SetInsertPoint(body);
      values_[n.var.operator->()] = cur;
      loops_.push_back({exit, latch});
      emit_stmt(n.body);
      loops_.pop_back();
      values_.erase(n.var.operator->());
      if (!b.GetInsertBlock()->getTerminator()) b.CreateBr(latch);
      b.SetInsertPoint(latch);
      b.CreateStore(b.CreateAdd(b.CreateLoad(type(vt), var), step), var);
      check_cancel();
      b.CreateBr(head);
      b.SetInsertPoint(exit);
      return;
    }
    case StmtKind::If: {
      auto& n = static_cast<const IfStmtNode&>(*s);
      llvm::Value* c = convert(expr(n.cond), n.cond.dtype(), dtypes::boolean);
      llvm::BasicBlock* tb = llvm::BasicBlock::Create(ctx, "if.then", fn);
      llvm::BasicBlock* eb = n.else_body ? llvm::BasicBlock::Create(ctx, "if.else", fn) : nullptr;
      llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx, "if.end", fn);
      b.CreateCondBr(c, tb, eb ? eb : done);
      b.SetInsertPoint(tb);
      emit_stmt(n.then_body);
      if (!b.GetInsertBlock()->getTerminator()) b.CreateBr(done);
      if (eb) {
        b.SetInsertPoint(eb);
        emit_stmt(n.else_body);
        if (!b.GetInsertBlock()->getTerminator()) b.CreateBr(done);
      }
      b.SetInsertPoint(done);
      return;
    }
    case StmtKind::While: {
      auto& n = static_cast<const WhileStmtNode&>(*s);
      llvm::BasicBlock* head = llvm::BasicBlock::Create(ctx, "while.head", fn);
      llvm::BasicBlock* body = llvm::BasicBlock::Create(ctx, "while.body", fn);
      llvm::BasicBlock* latch = llvm::BasicBlock::Create(ctx, "while.latch", fn);
      llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx, "while.exit", fn);
      b.CreateBr(head);
      b.SetInsertPoint(head);
      b.CreateCondBr(convert(expr(n.cond), n.cond.dtype(), dtypes::boolean), body, exit);
      b.SetInsertPoint(body);
      loops_.push_back({exit, latch});
      emit_stmt(n.body);
      loops_.pop_back();
      if (!b.GetInsertBlock()->getTerminator()) b.CreateBr(latch);
      b.SetInsertPoint(latch);
      check_cancel();
      b.CreateBr(head);
      b.SetInsertPoint(exit);
      return;
    }
    case StmtKind::Return:
      // Statements that return are never split into parts (measure): this is the block function.
      if (fn != root_) throw InternalError("CPU emitter: a return inside a split part of the kernel");
      b.CreateRetVoid();
      return;
    case StmtKind::Break:
    case StmtKind::Continue:
      if (loops_.empty()) throw CompileError(fmt::format("{} outside a loop", s->kind == StmtKind::Break ? "break" : "continue"), s->loc);
      b.CreateBr(s->kind == StmtKind::Break ? loops_.back().brk : loops_.back().cont);
      return;
    case StmtKind::Let: {
      auto& n = static_cast<const LetStmtNode&>(*s);
      values_[n.var.operator->()] = convert(expr(n.value), n.value.dtype(), n.var.dtype());
      return;
    }
    case StmtKind::Declare: {
      auto& n = static_cast<const DeclareStmtNode&>(*s);
      llvm::Value* slot = block_storage(n.var.operator->(), type(n.var.dtype()), 1, n.var.name());
      b.CreateStore(convert(expr(n.init), n.init.dtype(), n.var.dtype()), slot);
      return;
    }
    case StmtKind::Assign: {
      auto& n = static_cast<const AssignStmtNode&>(*s);
      llvm::Value* slot = block_storage(n.var.operator->(), type(n.var.dtype()));
      if (!slot) throw InternalError(fmt::format("CPU emitter: assignment to undeclared '{}'", n.var.name()));
      b.CreateStore(convert(expr(n.value), n.value.dtype(), n.var.dtype()), slot);
      return;
    }
    case StmtKind::Inst: emit_inst(*static_cast<const InstStmtNode&>(*s).inst); return;
    case StmtKind::ThreadGroup: {
      // A thread group runs its tile instructions once, like the whole block.
      auto& n = static_cast<const ThreadGroupStmtNode&>(*s);
      group_begins_.push_back(group_begin() + n.thread_begin);
      emit_stmt(n.body);
      group_begins_.pop_back();
      return;
    }
  }
}

void Emitter::emit_inst(const InstNode& inst) {
  try {
    emit_inst_body(inst);
  } catch (const CompileError& e) {
    if (e.loc().valid()) throw;
    throw CompileError(fmt::format("{}: {} (CPU backend)", inst.display_name(), e.message()), inst.loc);
  }
}

void Emitter::emit_inst_body(const InstNode& inst) {
  // The family its definition names lowers it (inst_def.h). Asynchronous copies complete at
  // once and one block's tile instructions run in order: the cp.async groups (the memory family's
  // instructions that touch no memory) and wgmma's fences and groups have nothing to do; wgmma.mma
  // runs as memory.
  switch (inst.def().emit) {
    case EmitFamily::Memory:
      if (!inst.touches_memory()) return;
      emit_memory(inst);
      return;
    case EmitFamily::AsyncProxy: emit_async_proxy(inst); return;
    case EmitFamily::Wgmma:
      if (inst.touches_memory()) emit_memory(inst);
      return;
    case EmitFamily::Barrier:
    case EmitFamily::Builtin: emit_builtin(inst); return;
    case EmitFamily::Tcgen05: emit_tcgen05(inst); return;
    case EmitFamily::Hint: return;
    case EmitFamily::Auto: break;
  }
  if (inst.kind() == InstKind::Printf) {
    emit_printf(static_cast<const PrintfInst&>(inst));
    return;
  }
  // Everything whose traits name global or shared memory is the memory family's.
  if (inst.touches_memory()) emit_memory(inst);
  else emit_compute(inst);
}

void Emitter::emit_printf(const PrintfInst& inst) {
  llvm::FunctionCallee printf_fn = module.getOrInsertFunction(
      "printf", llvm::FunctionType::get(b.getInt32Ty(), {b.getInt8PtrTy()}, true));
  std::vector<llvm::Value*> args{b.CreateGlobalStringPtr(inst.format)};
  for (auto& a : inst.args) {
    DataType t = a.dtype();
    llvm::Value* v = expr(a);
    // printf's variadic arguments: floats as double, narrow integers as int.
    if (t.is_float()) v = convert(v, t, dtypes::float64);
    else if (t.is_bool()) v = b.CreateZExt(v, b.getInt32Ty());
    else if (t.is_integer() && t.bits() < 32) v = t.is_int() ? b.CreateSExt(v, b.getInt32Ty()) : b.CreateZExt(v, b.getInt32Ty());
    args.push_back(v);
  }
  b.CreateCall(printf_fn, args);
}

// --- the kernel ---------------------------------------------------------------------------------

void Emitter::run(const std::string& entry) {
  llvm::Type* i8p = b.getInt8PtrTy();
  auto* fty = llvm::FunctionType::get(b.getVoidTy(),
                                      {llvm::PointerType::getUnqual(b.getInt64Ty()), b.getInt32Ty(), b.getInt32Ty(),
                                       b.getInt32Ty(), i8p, i8p},
                                      false);
  fn = root_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, entry, module);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  order_[fn] = 0;
  entry_ = llvm::BasicBlock::Create(ctx, "entry", fn);
  llvm::BasicBlock* start = llvm::BasicBlock::Create(ctx, "start", fn);
  // Thread groups that wait on each other run concurrently, each a function of its own over a copy
  // of the block's frame: their values live in the frame.
  struct Forks : StmtVisitor {
    bool found = false;
    void visit_seq(const SeqStmtNode& s) override {
      std::vector<Stmt> run;
      for (auto& c : s.stmts) {
        if (c && c->kind == StmtKind::ThreadGroup) {
          run.push_back(c);
          continue;
        }
        found = found || Emitter::concurrent(run);
        run.clear();
      }
      found = found || Emitter::concurrent(run);
      StmtVisitor::visit_seq(s);
    }
  } forks;
  forks.visit(kernel.body);
  forks_ = forks.found;
  if (options.chunk_instructions > 0 || forks_) {
    llvm::IRBuilder<> eb(entry_);
    frame_ = eb.CreateAlloca(b.getInt8Ty(), b.getInt64(1), "frame");  // sized at the end
    frame_->setAlignment(llvm::Align(64));
  }
  b.SetInsertPoint(start);
  shared_base = fn->getArg(4);
  block_ctx = fn->getArg(5);
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    const Var& p = kernel.params[i];
    DataType t = p.dtype();
    llvm::Value* slot = b.CreateLoad(b.getInt64Ty(), b.CreateConstGEP1_64(b.getInt64Ty(), fn->getArg(0), i), p.name());
    llvm::Value* v;
    if (t.is_pointer()) v = b.CreateIntToPtr(slot, i8p);
    else if (t.is_float()) v = convert(b.CreateBitCast(slot, b.getDoubleTy()), dtypes::float64, t);
    else if (t.is_bool()) v = b.CreateICmpNE(slot, b.getInt64(0));
    else v = b.CreateTrunc(slot, type(t));
    values_[p.operator->()] = v;
  }
  // The global tensors' memory, in the slots after the parameters.
  for (size_t i = 0; i < kernel.global_tensors.size(); ++i) {
    const Var& p = kernel.global_tensors[i].ptr;
    llvm::Value* slot = b.CreateLoad(b.getInt64Ty(), b.CreateConstGEP1_64(b.getInt64Ty(), fn->getArg(0), kernel.params.size() + i), p.name());
    values_[p.operator->()] = b.CreateIntToPtr(slot, i8p);
  }
  emit_stmt(kernel.body);
  if (!b.GetInsertBlock()->getTerminator()) b.CreateRetVoid();
  finish_function(start);
  if (frame_) frame_->setOperand(0, i64(std::max<int64_t>(1, frame_bytes_)));
  if (frame_size_) frame_size_->setInitializer(b.getInt64(std::max<int64_t>(1, frame_bytes_)));
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyModule(module, &os)) throw InternalError(fmt::format("CPU emitter produced invalid LLVM IR: {}", os.str()));
}

void Emitter::finish_function(llvm::BasicBlock* start) {
  llvm::IRBuilder<> eb(entry_);
  eb.CreateBr(start);
  // Blocks left without a terminator (after a break that ends a branch) are unreachable.
  for (auto& bb : *fn)
    if (!bb.getTerminator()) {
      llvm::IRBuilder<> tb(&bb);
      tb.CreateUnreachable();
    }
}

// --- splitting a large kernel into functions -------------------------------------------------------

const StmtInfo& measure(const Stmt& s, std::unordered_map<const StmtNode*, StmtInfo>& memo) {
  static const StmtInfo none;
  if (!s) return none;
  auto it = memo.find(s.get());
  if (it != memo.end()) return it->second;
  StmtInfo r;
  auto add = [&](const Stmt& c, bool loop) {
    const StmtInfo& ci = measure(c, memo);
    r.instructions += ci.instructions;
    r.escapes |= ci.escapes && !loop;  // a loop is where its own breaks and continues end
    r.returns |= ci.returns;
  };
  switch (s->kind) {
    case StmtKind::Seq:
      for (auto& c : static_cast<const SeqStmtNode&>(*s).stmts) add(c, false);
      break;
    case StmtKind::For: add(static_cast<const ForStmtNode&>(*s).body, true); break;
    case StmtKind::While: add(static_cast<const WhileStmtNode&>(*s).body, true); break;
    case StmtKind::If:
      add(static_cast<const IfStmtNode&>(*s).then_body, false);
      add(static_cast<const IfStmtNode&>(*s).else_body, false);
      break;
    case StmtKind::ThreadGroup: add(static_cast<const ThreadGroupStmtNode&>(*s).body, false); break;
    case StmtKind::Break:
    case StmtKind::Continue: r.escapes = true; break;
    case StmtKind::Return: r.returns = true; break;
    case StmtKind::Inst: r.instructions = 1; break;
    case StmtKind::Let:
    case StmtKind::Declare:
    case StmtKind::Assign: break;
  }
  return memo[s.get()] = r;
}

bool Emitter::concurrent(const std::vector<Stmt>& groups) {
  if (groups.size() < 2) return false;
  std::unordered_map<const StmtNode*, StmtInfo> memo;
  for (auto& g : groups) {
    const StmtInfo& info = measure(g, memo);
    if (info.escapes || info.returns) return false;  // a break of an outer loop stays in its function
  }
  return waits_on_siblings(groups);
}

void Emitter::emit_seq(const SeqStmtNode& seq) {
  // Runs of sibling thread groups that wait on each other fork; the rest as chunking says.
  std::vector<Stmt> plain, groups;
  auto flush_groups = [&] {
    if (concurrent(groups)) {
      emit_stmts(plain);
      plain.clear();
      emit_fork(groups);
    } else {
      plain.insert(plain.end(), groups.begin(), groups.end());
    }
    groups.clear();
  };
  for (auto& c : seq.stmts) {
    if (c && c->kind == StmtKind::ThreadGroup) {
      groups.push_back(c);
      continue;
    }
    flush_groups();
    plain.push_back(c);
  }
  flush_groups();
  emit_stmts(plain);
}

void Emitter::emit_fork(const std::vector<Stmt>& groups) {
  std::vector<llvm::Function*> parts;
  for (auto& g : groups) parts.push_back(build_part({g}));
  llvm::Type* i8p = b.getInt8PtrTy();
  auto* at = llvm::ArrayType::get(i8p, parts.size());
  std::vector<llvm::Constant*> fs;
  for (auto* f : parts) fs.push_back(llvm::ConstantExpr::getBitCast(f, i8p));
  auto* table = new llvm::GlobalVariable(module, at, true, llvm::GlobalValue::PrivateLinkage,
                                         llvm::ConstantArray::get(at, fs), "fork_parts");
  if (!frame_size_)
    frame_size_ = new llvm::GlobalVariable(module, b.getInt64Ty(), true, llvm::GlobalValue::PrivateLinkage, b.getInt64(1),
                                           "frame_bytes");
  auto* ty = llvm::FunctionType::get(b.getVoidTy(), {i8p, b.getInt32Ty(), llvm::PointerType::getUnqual(i8p), i8p,
                                                      b.getInt64Ty(), llvm::PointerType::getUnqual(b.getInt64Ty())},
                                     false);
  llvm::Type* fp = llvm::PointerType::getUnqual(ty);
  llvm::Value* field = b.CreateConstGEP1_64(b.getInt8Ty(), b.CreateBitCast(block_ctx, i8p), offsetof(CpuBlockContext, fork));
  llvm::Value* fn_ptr = b.CreateLoad(fp, b.CreateBitCast(field, llvm::PointerType::getUnqual(fp)));
  b.CreateCall(ty, fn_ptr,
               {b.CreateBitCast(block_ctx, i8p), b.getInt32(int32_t(parts.size())),
                b.CreateBitCast(table, llvm::PointerType::getUnqual(i8p)), frame_of(fn),
                b.CreateLoad(b.getInt64Ty(), frame_size_), fn->getArg(0)});
  check_cancel();
}

void Emitter::emit_stmts(const std::vector<Stmt>& stmts) {
  int64_t limit = options.chunk_instructions;
  if (limit <= 0) {
    for (auto& c : stmts) emit_stmt(c);
    return;
  }
  // Consecutive statements are gathered into parts of at most `limit` instructions; a larger
  // statement is emitted here and splits its own body, one that escapes stays here.
  std::vector<Stmt> part;
  int64_t size = 0;
  auto flush = [&] {
    if (size > 0) emit_part(part);
    else
      for (auto& c : part) emit_stmt(c);  // no instruction: not worth a function
    part.clear();
    size = 0;
  };
  for (auto& c : stmts) {
    if (!c) continue;
    const StmtInfo& ci = measure(c, infos_);
    if (ci.escapes || ci.returns || ci.instructions > limit) {
      flush();
      emit_stmt(c);
      continue;
    }
    if (size + ci.instructions > limit) flush();
    part.push_back(c);
    size += ci.instructions;
  }
  flush();
}

llvm::Value* Emitter::frame_of(const llvm::Function* f) {
  return f == root_ ? static_cast<llvm::Value*>(frame_) : const_cast<llvm::Function*>(f)->getArg(6);
}

llvm::Value* Emitter::frame_at(int64_t offset, llvm::Type* t) {
  // Made once per function, in its entry block (which stays open until the function ends).
  llvm::Value*& p = frame_pointers_[{fn, offset, t}];
  if (!p) {
    llvm::IRBuilder<> eb(entry_);
    p = eb.CreateBitCast(eb.CreateConstInBoundsGEP1_64(eb.getInt8Ty(), frame_of(fn), uint64_t(offset)),
                         llvm::PointerType::getUnqual(t));
  }
  return p;
}

void Emitter::emit_part(const std::vector<Stmt>& stmts) {
  llvm::Function* part = build_part(stmts);
  std::vector<llvm::Value*> args;
  for (unsigned i = 0; i < 6; ++i) args.push_back(fn->getArg(i));
  args.push_back(frame_of(fn));
  b.CreateCall(part, args);
  check_cancel();
}

llvm::Function* Emitter::build_part(const std::vector<Stmt>& stmts) {
  llvm::Type* i8p = b.getInt8PtrTy();
  llvm::Type* i64p = llvm::PointerType::getUnqual(b.getInt64Ty());
  auto* fty = llvm::FunctionType::get(b.getVoidTy(), {i64p, b.getInt32Ty(), b.getInt32Ty(), b.getInt32Ty(), i8p, i8p, i8p},
                                      false);
  auto* part = llvm::Function::Create(fty, llvm::Function::InternalLinkage,
                                      fmt::format("{}.part{}", root_->getName().str(), order_.size()), module);
  part->addFnAttr(llvm::Attribute::NoUnwind);
  part->addFnAttr(llvm::Attribute::NoInline);  // each part optimized and compiled on its own
  order_[part] = int(order_.size());
  llvm::Function* caller = fn;
  llvm::BasicBlock* caller_entry = entry_;
  llvm::IRBuilderBase::InsertPoint ip = b.saveIP();
  std::vector<LoopTargets> loops = std::move(loops_);
  loops_.clear();
  fn = part;
  entry_ = llvm::BasicBlock::Create(ctx, "entry", part);
  llvm::BasicBlock* start = llvm::BasicBlock::Create(ctx, "start", part);
  shared_base = part->getArg(4);
  block_ctx = part->getArg(5);
  b.SetInsertPoint(start);
  for (auto& s : stmts) emit_stmt(s);
  if (!b.GetInsertBlock()->getTerminator()) b.CreateRetVoid();
  finish_function(start);
  fn = caller;
  entry_ = caller_entry;
  loops_ = std::move(loops);
  shared_base = fn->getArg(4);
  block_ctx = fn->getArg(5);
  b.restoreIP(ip);
  return part;
}

int64_t Emitter::frame_slot(llvm::Instruction* v) {
  auto [it, fresh] = slots_.try_emplace(v, 0);
  if (!fresh) return it->second;
  it->second = frame_bytes_ = (frame_bytes_ + 7) / 8 * 8;
  frame_bytes_ += 8;
  // Stored once, where it is made: after the block's phis for a phi, right after itself else.
  llvm::BasicBlock* bb = v->getParent();
  llvm::IRBuilder<> sb(ctx);
  if (llvm::isa<llvm::PHINode>(v)) sb.SetInsertPoint(bb, bb->getFirstInsertionPt());
  else if (llvm::Instruction* next = v->getNextNode()) sb.SetInsertPoint(next);
  else sb.SetInsertPoint(bb);
  llvm::Value* at = sb.CreateConstInBoundsGEP1_64(sb.getInt8Ty(), frame_of(v->getFunction()), uint64_t(it->second));
  sb.CreateStore(v, sb.CreateBitCast(at, llvm::PointerType::getUnqual(v->getType())));
  return it->second;
}

llvm::Value* Emitter::here(llvm::Value* v) {
  if (!frame_ || llvm::isa<llvm::Constant>(v)) return v;
  if (auto* a = llvm::dyn_cast<llvm::Argument>(v)) return fn->getArg(a->getArgNo());
  auto* inst = llvm::cast<llvm::Instruction>(v);
  const llvm::Function* def = inst->getFunction();
  if (def == fn) return v;
  int64_t slot = frame_slot(inst);
  auto load = [&](llvm::IRBuilder<>& lb) { return lb.CreateLoad(v->getType(), frame_at(slot, v->getType())); };
  // Made before this function was begun (by a caller, or by an earlier part): stored before
  // this function runs, so loaded once at its entry. Made after: by a part this function
  // called, so loaded where it is used.
  if (order_.at(def) < order_.at(fn)) {
    llvm::Value*& cached = entry_loads_[{fn, v}];
    if (!cached) {
      llvm::IRBuilder<> eb(entry_);  // the entry block ends when the function does
      cached = load(eb);
    }
    return cached;
  }
  return load(b);
}

const GlobalRec& Emitter::global(const Tensor& g) {
  auto it = globals.find(g.get());
  if (it == globals.end()) throw InternalError("CPU emitter: a global tensor used before its view");
  if (!frame_) return it->second;
  GlobalRec& rec = globals_here_.emplace_back(it->second);
  rec.base = here(rec.base);
  if (rec.param_base) rec.param_base = here(rec.param_base);
  return rec;
}

void Emitter::check_cancel() {
  // ctx->cancel: a pointer to the launch's flag, the fourth pointer-sized field.
  llvm::Type* i32p = llvm::PointerType::getUnqual(b.getInt32Ty());
  llvm::Value* fields = b.CreateBitCast(block_ctx, llvm::PointerType::getUnqual(i32p));
  llvm::Value* flag_ptr = b.CreateLoad(i32p, b.CreateConstGEP1_64(i32p, fields, 3));
  llvm::LoadInst* flag = b.CreateAlignedLoad(b.getInt32Ty(), flag_ptr, llvm::Align(4));
  flag->setAtomic(llvm::AtomicOrdering::Monotonic);
  llvm::BasicBlock* stop = llvm::BasicBlock::Create(ctx, "interrupted", fn);
  llvm::BasicBlock* go = llvm::BasicBlock::Create(ctx, "go", fn);
  llvm::MDBuilder md(ctx);
  b.CreateCondBr(b.CreateICmpNE(flag, b.getInt32(0)), stop, go, md.createBranchWeights(1, 1 << 20));
  b.SetInsertPoint(stop);
  b.CreateRetVoid();
  b.SetInsertPoint(go);
}

}  // namespace tilus::cpu

namespace tilus {

CpuLoweredKernel::CpuLoweredKernel() = default;
CpuLoweredKernel::CpuLoweredKernel(CpuLoweredKernel&&) noexcept = default;
CpuLoweredKernel& CpuLoweredKernel::operator=(CpuLoweredKernel&&) noexcept = default;
CpuLoweredKernel::~CpuLoweredKernel() = default;

int64_t count_instructions(const Kernel& kernel) {
  std::unordered_map<const StmtNode*, cpu::StmtInfo> memo;
  return cpu::measure(kernel.body, memo).instructions;
}

CpuLoweredKernel emit_llvm(const Kernel& kernel, llvm::LLVMContext& context, const CpuCodegenOptions& options) {
  CpuLoweredKernel out;
  out.entry = kernel.name + "_block";
  out.module = std::make_unique<llvm::Module>(kernel.name, context);
  cpu::Emitter em(kernel, context, *out.module, options);
  em.run(out.entry);
  out.sites = std::move(em.sites);
  out.shared_bytes = kernel.shared_memory_bytes;
  out.forks = em.uses_fork();
  return out;
}

}  // namespace tilus
