// Global and shared memory: views, loads, stores, cp.async and the synchronous copy.

#include "emitter.h"

namespace tilus::cuda {

namespace {

// One side of a tile access: where element `index` of the tile lives, and how wide a
// vector it can move at once.
struct Side {
  // Element offset of a tile index (as IR, in elements of the underlying array).
  std::function<Expr(const std::vector<Expr>&)> offset;
  // Pointer expression (C) of element offset `off`.
  std::function<std::string(const std::string& off)> address;
  // In-bounds predicate of a tile index (true when unchecked).
  std::function<Expr(const std::vector<Expr>&)> predicate;
  // The array's start (C) and its element type: sub-byte arrays are addressed by bytes
  // (`address` of an offset whose bits start a byte) or element by element (load_bits).
  std::string base;
  DataType dtype;
};

// The address of a sub-byte array's element `off` (off * bits a multiple of 8).
std::string byte_address(const std::string& base, DataType t, const std::string& off) {
  return fmt::format("(reinterpret_cast<uint8_t*>({}) + ({}) * {} / 8)", base, off, t.bits());
}

Side global_side(Emitter& em, const Tensor& g, const GlobalAccess& acc) {
  Side s;
  s.offset = [acc](const std::vector<Expr>& tile) { return global_offset(acc, tile); };
  std::string ptr = em.global_ptr(g);
  s.base = ptr;
  s.dtype = g.dtype();
  if (s.dtype.is_subbyte())
    s.address = [ptr, t = s.dtype](const std::string& off) { return byte_address(ptr, t, off); };
  else
    s.address = [ptr](const std::string& off) { return fmt::format("({} + {})", ptr, off); };
  s.predicate = [acc](const std::vector<Expr>& tile) { return global_predicate(acc, tile); };
  return s;
}

Side shared_side(const SharedView& view) {
  if (!view.planned) throw InternalError("a shared tensor has no planned offset; run the pass pipeline first");
  Side s;
  s.offset = [view](const std::vector<Expr>& tile) { return shared_offset(view, tile); };
  s.dtype = view.root.dtype();
  if (s.dtype.is_subbyte()) {
    s.base = fmt::format("(tilus_smem + {})", view.base_bytes);
    s.address = [base = s.base, t = s.dtype](const std::string& off) { return byte_address(base, t, off); };
    s.predicate = [](const std::vector<Expr>&) { return bool_const(true); };
    return s;
  }
  std::string base = fmt::format("reinterpret_cast<{}*>(tilus_smem + {})", ctype(view.root.dtype()), view.base_bytes);
  s.base = base;
  s.address = [base](const std::string& off) { return fmt::format("({} + {})", base, off); };
  s.predicate = [](const std::vector<Expr>&) { return bool_const(true); };
  return s;
}

// One end of a copy as a side over a `tile_rank`-dim tile.
Side region_side(Emitter& em, const InstNode& inst, const CopyRegion& r, int tile_rank) {
  if (r.tensor.is_global()) return global_side(em, r.tensor, em.facts().global_region(inst, r, tile_rank));
  return shared_side(em.facts().shared_region(inst, r, tile_rank));
}

// TILUS_DEBUG_BOUNDS: a shared tile of `shape` at a run-time offset that leaves its allocation
// (KernelFacts::shared_bounds) prints the instruction, its line and the offending index, and
// traps, before it is touched.
void guard_shared(Emitter& em, const InstNode& inst, const SharedView& view, const std::vector<int64_t>& shape) {
  if (!em.options.debug_bounds) return;
  for (const SharedBoundsCheck& c : em.facts().shared_bounds(view, shape)) {
    std::string head = c_text(fmt::format("tilus: {}: {}: out-of-bounds access of {} at a run-time offset: dim "
                                               "{} takes [",
                                               inst.loc.str(), inst.display_name(), view.root.type_str(), c.dim),
                             true);
    std::string tail = c_text(fmt::format("), outside the tensor's [0, {}) (block (", c.size), true);
    std::string offset = em.expr(em.simplify(c.offset));
    em.open(fmt::format("if (!({}))", em.expr(em.simplify(c.ok))));
    em.linef("printf(\"{}%lld, %lld{}%d, %d, %d), thread %d)\\n\", (long long)({}), (long long)({}) + {}LL, "
             "int(blockIdx.x), int(blockIdx.y), int(blockIdx.z), int(threadIdx.x));",
             head, tail, offset, offset, c.extent);
    em.line("__trap();");
    em.close();
  }
}


// The tile index (as IR) of a slot: the thread part plus the slot's constant part.
std::vector<Expr> slot_index(const std::vector<Expr>& spatial, const std::vector<int64_t>& local) {
  std::vector<Expr> idx;
  for (size_t d = 0; d < spatial.size(); ++d) idx.push_back(spatial[d] + int_const(local[d], spatial[d].dtype()));
  return idx;
}

// Moves a register tensor to or from memory, vector by vector: `w` elements per access (the
// record's), with an L2 policy variable for global memory. A load fills the elements whose
// predicate fails with `fill` (load_global's other=; undefined: zero).
// `l`, `name`, `dtype`: the register array as the access sees it (the tensor's own, or a store's
// exchanged copy).
void register_access(Emitter& em, bool load, const Tensor& r, const RegisterLayout& l, const std::string& name,
                     const Side& mem, DataType mem_dtype, int64_t w, const std::string& policy = "",
                     const Expr& fill = Expr()) {
  int64_t bytes = w * elem_bytes(mem_dtype);
  bool sub = mem_dtype.is_subbyte();
  if (sub && r.dtype() != mem_dtype)
    throw CompileError(fmt::format("moving {} between registers and {} memory needs a cast first", r.type_str(),
                                   mem_dtype.name()));
  // Sub-byte data: whole bytes move as vectors (the packed array's bytes), single elements
  // through load_bits / store_bits.
  bool sub_elements = sub && w * mem_dtype.bits() < 8;
  if (sub) bytes = std::max<int64_t>(1, w * mem_dtype.bits() / 8);
  std::string slot_ptr_fmt = sub ? "{}.ptr({})" : "&{}[{}]";
  auto spatial = em.spatial_index(l);
  std::string zero = em.literal(r.dtype(), 0);
  if (load && fill.defined()) {
    zero = em.fresh("other");
    em.linef("const {} {} = {};", ctype(r.dtype()), zero, em.expr(em.simplify(fill)));
  }
  bool guarded = false;
  if (!load) {
    Expr primary = em.primary_replica(l);
    if (!primary.is_const()) {
      em.open(fmt::format("if ({})", em.expr(primary)));
      guarded = true;
    }
  }
  std::string hint = policy.empty() ? "" : "_hint";
  std::string hint_arg = policy.empty() ? "" : ", " + policy;
  for (int64_t s = 0; s < l.local_size(); s += w) {
    auto idx = slot_index(spatial, Emitter::local_index(l, s));
    std::string off = em.expr(em.simplify(mem.offset(idx)));
    Expr pred = em.simplify(mem.predicate(idx));
    std::string addr = mem.address(off);
    bool always = pred.as<BoolImmNode>() && pred.as<BoolImmNode>()->value;
    bool never = pred.as<BoolImmNode>() && !pred.as<BoolImmNode>()->value;
    std::string p = em.expr(pred);
    std::string slot_ptr = fmt::format(fmt::runtime(slot_ptr_fmt), name, s);
    if (sub_elements) {
      std::string elem = fmt::format("tilus::load_bits<{}>({}, {})", mem_dtype.bits(), mem.base, off);
      if (load) {
        if (always) em.linef("{}.set_code({}, {});", name, s, elem);
        else if (never) em.linef("{}.set_code({}, 0u);", name, s);
        else em.linef("{}.set_code({}, {} ? {} : 0u);", name, s, p, elem);
      } else if (!never) {
        em.linef("{}tilus::store_bits<{}>({}, {}, {}.code({}));", always ? "" : fmt::format("if ({}) ", p),
                 mem_dtype.bits(), mem.base, off, name, s);
      }
      continue;
    }
    bool scalar = w == 1 && policy.empty() && !sub;
    if (load) {
      std::string ld = scalar ? fmt::format("{}[{}] = *{};", name, s, addr)
                              : fmt::format("tilus::load_vec{}<{}>({}, {}{});", hint, bytes, slot_ptr, addr, hint_arg);
      std::string zero_fill = scalar ? fmt::format("{}[{}] = {};", name, s, zero)
                                     : fmt::format("tilus::zero_vec<{}>({});", bytes, slot_ptr);
      if (fill.defined() && !scalar) {
        zero_fill = "{";
        for (int64_t k = 0; k < w; ++k) zero_fill += fmt::format(" {}[{}] = {};", name, s + k, zero);
        zero_fill += " }";
      }
      if (always) em.line(ld);
      else if (never) em.line(zero_fill);
      else if (scalar) em.linef("{}[{}] = {} ? *{} : {};", name, s, p, addr, zero);
      else em.linef("if ({}) {} else {}", p, ld, zero_fill);
    } else {
      if (never) continue;
      std::string stmt = scalar ? fmt::format("*{} = {}[{}];", addr, name, s)
                                : fmt::format("tilus::store_vec{}<{}>({}, {}{});", hint, bytes, addr, slot_ptr, hint_arg);
      if (always) em.line(stmt);
      else em.linef("if ({}) {}", p, stmt);
    }
  }
  if (guarded) em.close();
}

void register_access(Emitter& em, bool load, const Tensor& r, const Side& mem, DataType mem_dtype, int64_t w,
                     const std::string& policy = "", const Expr& fill = Expr()) {
  register_access(em, load, r, r->layout, em.reg(r), mem, mem_dtype, w, policy, fill);
}

// A store's lane exchange (lowering.h's LaneExchange): a copy of `r` in the record's mapping, its
// units traded block by block through tilus::transpose_lanes; returns the copy's name.
std::string exchange_lanes(Emitter& em, const Tensor& r, const Lowering& rec) {
  const LaneExchange& x = rec.exchange;
  int64_t unit_bytes = x.unit * elem_bytes(r.dtype());
  if (r.dtype().is_subbyte() || unit_bytes % 4)
    throw InternalError(fmt::format("a lane exchange of {} moves units of {} bytes, not whole 32-bit words",
                                    r.type_str(), unit_bytes));
  const std::string& src = em.reg(r);
  std::string dst = em.fresh(src + "_x");
  em.linef("__align__(16) {} {}[{}];", ctype(r.dtype()), dst, rec.mapping.local_size());
  std::string words = em.fresh("tilus_w");
  for (size_t b = 0; b * size_t(x.lanes) < x.src.size(); ++b)
    for (int64_t word = 0; word < unit_bytes / 4; ++word) {
      std::string in, out;
      for (int64_t j = 0; j < x.lanes; ++j) {
        in += fmt::format("{}tilus::word32(&{}[{}], {})", j ? ", " : "", src, x.src[b * size_t(x.lanes) + size_t(j)],
                          word);
        out += fmt::format(" tilus::set_word32(&{}[{}], {}, {}[{}]);", dst, x.dst[b * size_t(x.lanes) + size_t(j)],
                           word, words, j);
      }
      em.linef("{{ uint32_t {}[{}] = {{{}}}; tilus::transpose_lanes<{}, {}>({});{} }}", words, x.lanes, in, x.lanes,
               x.lane_stride, words, out);
    }
  return dst;
}

// A store of register tensor `r` as its record says: through the record's lane exchange when it
// has one, else from `r` as it is.
void store_registers(Emitter& em, const Tensor& r, const Lowering& rec, const Side& mem, DataType mem_dtype,
                     const std::string& policy = "") {
  if (rec.exchange.defined())
    register_access(em, false, r, rec.mapping, exchange_lanes(em, r, rec), mem, mem_dtype, rec.vector, policy);
  else
    register_access(em, false, r, mem, mem_dtype, rec.vector, policy);
}

// atom / red element by element: each element by its primary replica, where its predicate
// holds; the old value lands in out's slot (zero where the element is out of bounds). The PTX
// instruction is spelled out here: atom{.sem}{.scope}{.space}.op.type (red: no result).
void emit_atomic(Emitter& em, const AtomicInst& i, const Lowering& rec, const Side& mem) {
  const RegisterLayout& l = i.values->layout;
  DataType t = i.values.dtype();
  bool shared = i.dst.is_shared();
  int bits = t.bits();
  const char* reg_c = bits == 16 ? "h" : bits == 32 ? "r" : "l";
  const char* raw_t = bits == 16 ? "unsigned short" : bits == 32 ? "unsigned int" : "unsigned long long";
  std::string type;
  switch (i.op) {
    case AtomicOp::Add:
    case AtomicOp::Sub:
      type = t == dtypes::float16    ? "noftz.f16"
             : t == dtypes::bfloat16 ? "noftz.bf16"
             : t.is_float()          ? fmt::format("f{}", bits)
             : bits == 64            ? "u64"  // two's complement: one add for both signs
                                     : (t.is_int() ? "s32" : "u32");
      break;
    case AtomicOp::Min:
    case AtomicOp::Max: type = fmt::format("{}{}", t.is_int() ? "s" : "u", bits); break;
    case AtomicOp::Exch:
    case AtomicOp::Cas: type = fmt::format("b{}", bits); break;
  }
  const char* op = i.op == AtomicOp::Sub ? "add" : to_string(i.op);
  std::string ptx = fmt::format("{}.{}.{}.{}.{}.{}", rec.red ? "red" : "atom", i.sem, i.scope,
                                shared ? "shared::cta" : "global", op, type);
  const std::string& vals = em.reg(i.values);
  const std::string& out = em.reg(i.out);
  std::string cmp = i.compare.defined() ? em.reg(i.compare) : "";
  std::string zero = em.literal(t, 0);
  auto spatial = em.spatial_index(l);
  Expr primary = em.primary_replica(l);
  bool guarded = !primary.is_const();
  if (!rec.red && !i.store)
    for (int64_t s = 0; s < l.local_size(); ++s) em.linef("{}[{}] = {};", out, s, zero);
  if (guarded) em.open(fmt::format("if ({})", em.expr(primary)));
  // rec.vector 2: a 16-bit float red by pairs of neighbouring slots, one aligned word
  // (select_instructions proves it), as .f16x2 / .bf16x2.
  int64_t w = rec.vector == 2 ? 2 : 1;
  for (int64_t s = 0; s < l.local_size(); s += w) {
    auto idx = slot_index(spatial, Emitter::local_index(l, s));
    Expr in_range = bool_const(true);
    if (i.scatter()) {
      // The element's coordinate along the scatter dim is its index; outside dst: skipped.
      std::string name = em.fresh("scatter_index");
      em.linef("const int64_t {} = int64_t({}[{}]);", name, em.reg(i.indices), s);
      Var index(name, dtypes::int64, VarRole::Local);
      em.name_var(index, name);
      idx[size_t(i.scatter_dim)] = index;
      in_range = i.scatter_in_bounds(index);
    }
    std::string off = em.expr(em.simplify(mem.offset(idx)));
    Expr pred = em.simplify(logical_and(mem.predicate(idx), in_range));
    if (pred.as<BoolImmNode>() && !pred.as<BoolImmNode>()->value) continue;
    if (i.store) {
      bool always_store = pred.as<BoolImmNode>() != nullptr;
      em.linef("{}*{} = {}[{}];", always_store ? "" : fmt::format("if ({}) ", em.expr(pred)), mem.address(off), vals, s);
      continue;
    }
    std::string addr = shared ? fmt::format("tilus::smem_addr({})", mem.address(off)) : mem.address(off);
    std::string v = fmt::format("{}[{}]", vals, s);
    if (i.op == AtomicOp::Sub) v = fmt::format("(({})(-{}))", ctype(t), v);
    std::string a = fmt::format("\"{}\"({})", shared ? "r" : "l", addr);
    std::string in = fmt::format("\"{}\"(tilus::raw_bits({}))", reg_c, v);
    bool always = pred.as<BoolImmNode>() != nullptr;
    if (!always) em.open(fmt::format("if ({})", em.expr(pred)));
    if (rec.red && w == 2) {
      std::string v1 = fmt::format("{}[{}]", vals, s + 1);
      if (i.op == AtomicOp::Sub) v1 = fmt::format("(({})(-{}))", ctype(t), v1);
      em.linef("asm volatile(\"{}x2 [%0], %1;\" :: {}, \"r\"(uint32_t(tilus::raw_bits({})) | "
               "(uint32_t(tilus::raw_bits({})) << 16)) : \"memory\");",
               ptx, a, v, v1);
    } else if (rec.red) {
      em.linef("asm volatile(\"{} [%0], %1;\" :: {}, {} : \"memory\");", ptx, a, in);
    } else {
      em.open("");
      em.linef("{} old_;", raw_t);
      if (i.op == AtomicOp::Cas)
        em.linef("asm volatile(\"{} %0, [%1], %2, %3;\" : \"={}\"(old_) : {}, \"{}\"(tilus::raw_bits({}[{}])), {} : "
                 "\"memory\");",
                 ptx, reg_c, a, reg_c, cmp, s, in);
      else
        em.linef("asm volatile(\"{} %0, [%1], %2;\" : \"={}\"(old_) : {}, {} : \"memory\");", ptx, reg_c, a, in);
      em.linef("{}[{}] = tilus::from_raw<{}>(old_);", out, s, ctype(t));
      em.close();
    }
    if (!always) em.close();
  }
  if (guarded) em.close();
}

// ldmatrix (load) / stmatrix (store) between a shared view and a register tensor, matrix
// group by matrix group as the record lists them (rows of 16 contiguous, aligned bytes).
void emit_matrix(Emitter& em, const Lowering& plan, const SharedView& view, const Tensor& reg, bool load) {
  const RegisterLayout& l = reg->layout;
  const ThreadScope& sc = em.scope();
  int rdim = plan.matrix_rdim;
  Side sm = shared_side(view);
  // Lane l gives row l % 8 of matrix j = l / 8 (lanes past the N matrices repeat valid
  // rows). When the matrices' origins are linear in the bits of j (as in every mma
  // fragment) the row address is arithmetic in the lane, so it is loop-invariant apart from
  // the tile's own offsets; otherwise a select over j.
  Expr thread = sc.thread;
  Expr warp_base = thread / 32 * 32;
  Expr row = thread % 8;
  Expr matrix = thread % 32 / 8;
  for (auto& g : plan.matrices) {
    auto origin = [&](int64_t j) {
      std::vector<Expr> idx = l.index_exprs(warp_base, g.slot + 2 * j);
      idx[rdim] = idx[rdim] + row;
      return idx;
    };
    auto delta = [&](int64_t j) {
      auto a = l.map(0, g.slot + 2 * j), b = l.map(0, g.slot);
      for (size_t d = 0; d < a.size(); ++d) a[d] -= b[d];
      return a;
    };
    Expr off;
    bool linear = g.n < 4;
    if (!linear) {
      auto d1 = delta(1), d2 = delta(2), d3 = delta(3);
      linear = true;
      for (size_t d = 0; d < d3.size(); ++d) linear = linear && d3[d] == d1[d] + d2[d];
    }
    if (linear) {
      std::vector<Expr> idx = origin(0);
      for (int64_t bit = 1; bit < g.n; bit *= 2) {
        Expr on = thread / (8 * bit) % 2;
        auto db = delta(bit);
        for (size_t d = 0; d < db.size(); ++d)
          if (db[d]) idx[d] = idx[d] + on * db[d];
      }
      off = sm.offset(idx);
    } else {
      for (int64_t j = g.n - 1; j >= 0; --j) {
        Expr o = sm.offset(origin(j));
        off = off.defined() ? select(matrix == j, o, off) : o;
      }
    }
    std::string addr = sm.address(em.expr(em.simplify(off)));
    if (load)
      em.linef("tilus::ldmatrix<{}, {}>(&{}[{}], {});", g.n, g.trans ? "true" : "false", em.reg(reg), g.slot, addr);
    else
      em.linef("tilus::stmatrix<{}, {}>({}, &{}[{}]);", g.n, g.trans ? "true" : "false", addr, em.reg(reg), g.slot);
  }
}

// A memory-to-memory tile move as the record says: its thread mapping over the tile, its
// vector per access (both sides index the same tile), cp.async or plain loads and stores.
// `evict` is the L2 hint of the global side(s).
struct TransferOptions {
  std::optional<EvictPolicy> evict;
  bool src_global = false, dst_global = false;
  // cp.async with a tail_dim (Lowering::tail_dim): the source's access, whose vectors may
  // straddle the end of that global dim.
  const GlobalAccess* tail = nullptr;
};

// The bytes of a cp.async vector of `w` elements starting at tile index `idx` that lie inside
// the global tensor: 0 where another checked dim is out of bounds, else the elements before
// the end of `tail_dim` (a vector starts on a multiple of w, so none lies on both sides of 0).
Expr tail_bytes(const GlobalAccess& g, int tail_dim, const std::vector<Expr>& idx, int64_t w) {
  GlobalAccess others = g;
  others.checked.erase(std::remove(others.checked.begin(), others.checked.end(), tail_dim), others.checked.end());
  Expr at = cast(global_index(g, idx)[size_t(tail_dim)], dtypes::int64);
  Expr left = cast(g.shape[size_t(tail_dim)], dtypes::int64) - at;
  Expr count = tilus::max(int_const(0, dtypes::int64), tilus::min(left, int_const(w, dtypes::int64)));
  Expr bytes = cast(count * int_const(elem_bytes(g.dtype), dtypes::int64), dtypes::int32);
  return select(global_predicate(others, idx), bytes, int_const(0));
}

void transfer(Emitter& em, const Lowering& rec, const Side& src, const Side& dst, DataType dtype,
              const TransferOptions& o) {
  const RegisterLayout& l = rec.mapping;
  int64_t w = rec.vector;
  int64_t bytes = w * elem_bytes(dtype);
  bool sub = dtype.is_subbyte();
  if (sub) bytes = std::max<int64_t>(1, w * dtype.bits() / 8);
  bool sub_elements = sub && w * dtype.bits() < 8;  // element by element: load_bits / store_bits
  bool cp_async = rec.op == MachineOp::CpAsyncCa || rec.op == MachineOp::CpAsyncCg;
  auto spatial = em.spatial_index(l);
  em.open("");
  Expr primary = em.primary_replica(l);
  bool guarded = !primary.is_const();
  if (guarded) em.open(fmt::format("if ({})", em.expr(primary)));
  std::string policy = o.src_global || o.dst_global ? declare_policy(em, o.evict) : "";
  std::string src_hint = o.src_global && !policy.empty() ? "_hint" : "";
  std::string dst_hint = o.dst_global && !policy.empty() && !cp_async ? "_hint" : "";
  auto hint_arg = [&](const std::string& hint) { return hint.empty() ? std::string() : ", " + policy; };
  std::string zero = em.literal(dtype, 0);
  bool direct = !cp_async && w == 1 && src_hint.empty() && dst_hint.empty() && !sub;
  std::string buf;
  if (!cp_async && !direct && !sub_elements) {
    buf = em.fresh("v");
    if (sub) em.linef("__align__(16) uint8_t {}[{}];", buf, bytes);
    else em.linef("{} {}[{}];", ctype(dtype), buf, w);
  }
  auto is_true = [](const Expr& e) { return e.as<BoolImmNode>() && e.as<BoolImmNode>()->value; };
  for (int64_t s = 0; s < l.local_size(); s += w) {
    auto didx = slot_index(spatial, Emitter::local_index(l, s));
    std::string soff = em.expr(em.simplify(src.offset(didx)));
    std::string doff = em.expr(em.simplify(dst.offset(didx)));
    std::string saddr = src.address(soff);
    std::string daddr = dst.address(doff);
    Expr sp = em.simplify(src.predicate(didx));
    Expr dp = em.simplify(dst.predicate(didx));
    if (sub_elements) {
      std::string value = fmt::format("tilus::load_bits<{}>({}, {})", dtype.bits(), src.base, soff);
      if (!is_true(sp)) value = fmt::format("({} ? {} : 0u)", em.expr(sp), value);
      em.linef("{}tilus::store_bits<{}>({}, {}, {});", is_true(dp) ? "" : fmt::format("if ({}) ", em.expr(dp)),
               dtype.bits(), dst.base, doff, value);
      continue;
    }
    if (cp_async && o.tail && rec.tail_dim >= 0) {
      std::string n = em.expr(em.simplify(tail_bytes(*o.tail, rec.tail_dim, didx, w)));
      em.linef("tilus::cp_async_n{}<{}>({}, {}, {}{});", src_hint, bytes, daddr, saddr, n, hint_arg(src_hint));
      continue;
    }
    if (cp_async) {
      em.linef("tilus::cp_async{}<{}>({}, {}, {}{});", src_hint, bytes, daddr, saddr, em.expr(sp), hint_arg(src_hint));
      continue;
    }
    std::string guard = is_true(dp) ? "" : fmt::format("if ({}) ", em.expr(dp));
    if (direct) {
      if (is_true(sp)) em.linef("{}*{} = *{};", guard, daddr, saddr);
      else em.linef("{}*{} = {} ? *{} : {};", guard, daddr, em.expr(sp), saddr, zero);
      continue;
    }
    std::string ld = fmt::format("tilus::load_vec{}<{}>({}, {}{});", src_hint, bytes, buf, saddr, hint_arg(src_hint));
    if (is_true(sp)) em.line(ld);
    else em.linef("if ({}) {} else tilus::zero_vec<{}>({});", em.expr(sp), ld, bytes, buf);
    em.linef("{}tilus::store_vec{}<{}>({}, {}{});", guard, dst_hint, bytes, daddr, buf, hint_arg(dst_hint));
  }
  if (guarded) em.close();
  em.close();
}

}  // namespace

// The L2 policy variable for an eviction policy ("" for evict_normal).
std::string declare_policy(Emitter& em, std::optional<EvictPolicy> e, const Expr& raw) {
  if (raw.defined()) {
    std::string policy = em.fresh("policy");
    em.linef("const uint64_t {} = uint64_t({});", policy, em.expr(simplify(raw)));
    return policy;
  }
  if (!e || *e == EvictPolicy::Normal) return "";
  std::string policy = em.fresh("policy");
  em.linef("const uint64_t {} = tilus::policy_evict_{}();", policy, *e == EvictPolicy::First ? "first" : "last");
  return policy;
}

void Emitter::guard_shared_tile(const InstNode& inst, const SharedView& view, const std::vector<int64_t>& shape) {
  guard_shared(*this, inst, view, shape);
}

void Emitter::emit_memory(const InstNode& inst) {
  const Lowering& rec = inst.lowering;
  auto selected = [&] {
    if (!rec.defined()) fail(inst, "no instruction selected; run the pass pipeline first");
  };
  auto matrix = rec.op == MachineOp::Ldmatrix || rec.op == MachineOp::Stmatrix;
  switch (inst.kind()) {
    case InstKind::GlobalView: {
      auto& i = static_cast<const GlobalViewInst&>(inst);
      DataType dt = i.out.dtype();
      std::string name = fresh(i.out->name.empty() ? "g" : i.out->name);
      std::string p = expr(simplify(i.ptr));
      if (i.ptr.dtype().pointee() != dt) p = fmt::format("reinterpret_cast<{}*>({})", ctype(dt), p);
      // A view read only through TMA tensor maps leaves its pointer unused: no NVRTC warning.
      linef("[[maybe_unused]] {}* const {} = {};", ctype(dt), name, p);
      global_ptrs_[i.out.get()] = name;
      return;
    }
    case InstKind::AllocateShared:
    case InstKind::FreeShared:
    case InstKind::SliceShared:
    case InstKind::ReshapeShared: return;  // address maps: the facts
    case InstKind::LoadGlobal: {
      auto& i = static_cast<const LoadGlobalInst&>(inst);
      selected();
      declare_reg(i.out);
      register_access(*this, true, i.out, global_side(*this, i.src, facts_.tile(i, i.src, i.offsets, i.dims, i.checked_dims)),
                      i.src.dtype(), rec.vector, "", i.other);
      return;
    }
    case InstKind::StoreGlobal: {
      auto& i = static_cast<const StoreGlobalInst&>(inst);
      selected();
      store_registers(*this, i.src, rec, global_side(*this, i.dst, facts_.tile(i, i.dst, i.offsets, i.dims, i.checked_dims)),
                      i.dst.dtype());
      return;
    }
    case InstKind::Atomic: {
      auto& i = static_cast<const AtomicInst&>(inst);
      selected();
      declare_reg(i.out);
      if (i.dst.is_global()) {
        emit_atomic(*this, i, rec, global_side(*this, i.dst, facts_.tile(i, i.dst, i.offsets, i.dims, i.checked_dims)));
      } else {
        const SharedView& view = facts_.shared(i, i.dst);
        guard_shared(*this, inst, view, i.values.static_shape());
        emit_atomic(*this, i, rec, shared_side(view));
      }
      return;
    }
    case InstKind::LoadShared:
    case InstKind::StoreShared: {
      bool load = inst.kind() == InstKind::LoadShared;
      auto* l = static_cast<const LoadSharedInst*>(&inst);
      auto* s = static_cast<const StoreSharedInst*>(&inst);
      const Tensor& mem = load ? l->src : s->dst;
      const Tensor& r = load ? l->out : s->src;
      selected();
      if (load) declare_reg(r);
      const SharedView& view = facts_.shared(inst, mem);
      guard_shared(*this, inst, view, r.static_shape());
      if (matrix) emit_matrix(*this, rec, view, r, load);
      else register_access(*this, load, r, shared_side(view), mem.dtype(), rec.vector);
      return;
    }
    case InstKind::CopyAsync: {
      auto& i = static_cast<const CopyAsyncInst&>(inst);
      selected();
      GlobalAccess acc = facts_.tile(i, i.src, i.offsets, i.dims, i.checked_dims);
      Side g = global_side(*this, i.src, acc);
      guard_shared(*this, inst, facts_.shared(i, i.dst), i.dst.static_shape());
      transfer(*this, rec, g, shared_side(facts_.shared(i, i.dst)), i.dst.dtype(),
               {.evict = i.evict, .src_global = true, .tail = &acc});
      return;
    }
    case InstKind::Im2col: {
      auto& i = static_cast<const Im2colInst&>(inst);
      selected();
      if (rec.op == MachineOp::TmaLoad) {
        emit_tma_im2col(i);
        return;
      }
      GlobalAccess g = facts_.global(i, i.img);
      Side src = global_side(*this, i.img, g);
      src.offset = [&i, g](const std::vector<Expr>& tile) { return im2col_map(i, g, tile).offset; };
      src.predicate = [&i, g](const std::vector<Expr>& tile) { return im2col_map(i, g, tile).predicate; };
      const SharedView& view = facts_.shared(i, i.col);
      guard_shared(*this, inst, view, i.col.static_shape());
      transfer(*this, rec, src, shared_side(view), i.col.dtype(), {.evict = i.eviction_policy, .src_global = true});
      return;
    }
    case InstKind::CopyAsyncCommitGroup: line("tilus::cp_async_commit();"); return;
    case InstKind::CopyAsyncWaitGroup:
      linef("tilus::cp_async_wait<{}>();", static_cast<const CopyAsyncWaitGroupInst&>(inst).n);
      return;
    case InstKind::CopyAsyncWaitAll: line("tilus::cp_async_wait_all();"); return;
    case InstKind::Copy: {
      auto& i = static_cast<const CopyInst&>(inst);
      selected();
      if (rec.op == MachineOp::TmaLoad || rec.op == MachineOp::TmaStore) {
        emit_tma_copy(i);
        return;
      }
      if (i.src.tensor.is_register() || i.dst.tensor.is_register()) {
        // A whole register tensor to or from memory: the register layout maps the threads.
        bool load = i.dst.tensor.is_register();
        const CopyRegion& mem = load ? i.src : i.dst;
        const Tensor& r = load ? i.dst.tensor : i.src.tensor;
        // The copy writes every slot: into the tensor's own array where it is in scope (a
        // register_tensor declared for it), else into a new one.
        if (load && !visible(r.get())) declare_reg(r);
        if (mem.tensor.is_shared()) guard_shared(*this, inst, facts_.shared_region(i, mem, r.rank()), r.static_shape());
        if (matrix) {
          emit_matrix(*this, rec, facts_.shared_region(i, mem, r.rank()), r, load);
          return;
        }
        std::string policy = mem.tensor.is_global() ? declare_policy(*this, i.eviction_policy) : "";
        if (load)
          register_access(*this, true, r, region_side(*this, i, mem, r.rank()), mem.tensor.dtype(), rec.vector, policy);
        else
          store_registers(*this, r, rec, region_side(*this, i, mem, r.rank()), mem.tensor.dtype(), policy);
        return;
      }
      // Memory to memory over the destination's extents; the source's broadcast dims stay at
      // their offsets (region_dims).
      int rank = int(i.dst.extents.size());
      std::vector<int64_t> shape;
      for (const Expr& e : i.dst.extents)
        if (Expr v = simplify(e); v.is_int_const()) shape.push_back(v.int_value());
      for (const CopyRegion* r : {&i.src, &i.dst})
        if (r->tensor.is_shared() && int(shape.size()) == rank)
          guard_shared(*this, inst, facts_.shared_region(i, *r, rank), shape);
      Side src = region_side(*this, i, i.src, rank), dst = region_side(*this, i, i.dst, rank);
      transfer(*this, rec, src, dst, i.dst.tensor.dtype(),
               {.evict = i.eviction_policy,
                .src_global = i.src.tensor.is_global(),
                .dst_global = i.dst.tensor.is_global()});
      if (rec.commits_group) line("tilus::cp_async_commit();");  // its own group
      return;
    }
    default: fail(inst, "not a memory instruction");
  }
}

}  // namespace tilus::cuda
