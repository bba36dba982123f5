// Blackwell's tensor memory and fifth-generation tensor cores (self.tcgen05.*, NVIDIA Tilus's
// names and parameters). Each instruction's definition (inst_def.h): name, group, emitters'
// family, traits, attributes and its verifier hook, the checks below. The instructions that
// define a tensor (alloc, slice, view, load) are typed (inst.h); the rest are data alone
// (DefinedInst).
#include "../verify_util.h"

namespace tilus {

namespace {
using namespace verify_detail;

// A tensor-memory element: 8, 16 or 32 bits (a 32-bit column holds 32 / bits of them).
bool tmem_dtype(DataType t) { return !t.is_pointer() && (t.bits() == 8 || t.bits() == 16 || t.bits() == 32); }

void expect_tmem(const InstNode& i, const char* role, const Tensor& t, int rank = 0) {
  if (!t.defined() || !t.is_tmem())
    fail(i, fmt::format("{} must be a tensor-memory tensor (tcgen05.alloc), got {}", role, ty(t)));
  if (rank && t.rank() != rank)
    fail(i, fmt::format("{} must be a rank-{} tensor-memory tensor [lanes, columns], got {}", role, rank, ty(t)));
}

void check_alloc(const Tcgen05AllocInst& i) {
  const Tensor& t = i.out;
  auto shape = dims_of(t);
  if (shape.size() < 2)
    fail(i, fmt::format("shape must have at least 2 dims ([lanes, columns...]), got {}", ty(t)));
  if (shape[0] != 32 && shape[0] != 64 && shape[0] != 128)
    fail(i, fmt::format("shape[0] (the lanes) must be 32, 64 or 128, got {} ({})", shape[0], ty(t)));
  if (!tmem_dtype(t.dtype()))
    fail(i, fmt::format("dtype must be of 8, 16 or 32 bits (a 32-bit tensor-memory column holds whole elements), got "
                        "{}",
                        t.dtype().name()));
  if (i.columns() > 512)
    fail(i, fmt::format("{} takes {} 32-bit columns of tensor memory; a block has 512", ty(t), i.columns()));
  if (i.cta_group != 1 && i.cta_group != 2) fail(i, fmt::format("cta_group must be 1 or 2, got {}", i.cta_group));
}

void check_slice(const Tcgen05SliceInst& i) {
  expect_tmem(i, "tensor", i.src);
  auto src = dims_of(i.src), out = dims_of(i.out);
  int rank = i.src.rank();
  if (int(i.offsets.size()) != rank)
    fail(i, fmt::format("offsets must give one offset per dim of {} ({}), got {}", ty(i.src), rank,
                        exprs_str(i.offsets)));
  for (auto& o : i.offsets)
    if (!is_integer_expr(o)) fail(i, fmt::format("offsets must be integers, got {}", exprs_str(i.offsets)));
  if (i.dims.size() != out.size() || i.dims.size() < 2)
    fail(i, fmt::format("dims {} must name one dim of {} per dim of the slice's shape {} (at least 2)",
                        ints_str(i.dims), ty(i.src), ints_str(out)));
  if (i.dims.front() != 0 || i.dims.back() != rank - 1)
    fail(i, fmt::format("dims {} must keep the lane dim (0) first and the last dim ({}) last", ints_str(i.dims),
                        rank - 1));
  for (size_t k = 1; k < i.dims.size(); ++k)
    if (i.dims[k] <= i.dims[k - 1]) fail(i, fmt::format("dims {} must be increasing", ints_str(i.dims)));
  if (!i.offsets[0].is_int_const())
    fail(i, fmt::format("the lane offset (offsets[0]) must be a constant, got {}", expr_str(i.offsets[0])));
  if (out[0] != 32 && out[0] != 64 && out[0] != 128)
    fail(i, fmt::format("the slice's lanes (shape[0]) must be 32, 64 or 128, got {}", out[0]));
  for (int d = 0; d < rank; ++d) {
    auto it = std::find(i.dims.begin(), i.dims.end(), d);
    int64_t extent = it == i.dims.end() ? 1 : out[size_t(it - i.dims.begin())];
    if (extent > src[size_t(d)])
      fail(i, fmt::format("the slice takes {} along dim {} of {}, which has {}", extent, d, ty(i.src), src[size_t(d)]));
    if (i.offsets[size_t(d)].is_int_const()) {
      int64_t o = i.offsets[size_t(d)].int_value();
      if (o < 0 || o + extent > src[size_t(d)])
        fail(i, fmt::format("offset {} along dim {} takes [{}, {}), outside {}'s [0, {})", o, d, o, o + extent,
                            ty(i.src), src[size_t(d)]));
    }
  }
  if (i.offsets[0].int_value() % 32 != 0)
    fail(i, fmt::format("the lane offset must be a multiple of 32 (a warp's lanes), got {}", i.offsets[0].int_value()));
}

void check_view(const Tcgen05ViewInst& i) {
  expect_tmem(i, "tensor", i.src);
  auto src = dims_of(i.src), out = dims_of(i.out);
  if (src.size() != out.size())
    fail(i, fmt::format("the view must keep the rank of {}, got shape {}", ty(i.src), ints_str(out)));
  for (size_t d = 0; d + 1 < src.size(); ++d)
    if (src[d] != out[d])
      fail(i, fmt::format("the view may change only the last dim of {}, got shape {}", ty(i.src), ints_str(out)));
  if (!tmem_dtype(i.out.dtype()))
    fail(i, fmt::format("dtype must be of 8, 16 or 32 bits, got {}", i.out.dtype().name()));
  if (src.back() * i.src.dtype().bits() != out.back() * i.out.dtype().bits())
    fail(i, fmt::format("the last dim must keep its bits: {} holds {} bits per lane there, {}{} {}",
                        ty(i.src), src.back() * i.src.dtype().bits(), i.out.dtype().name(), ints_str(out),
                        out.back() * i.out.dtype().bits()));
}

void check_load(const Tcgen05LoadInst& i) {
  expect_tmem(i, "tensor", i.src, 2);
  if (!i.out.is_register() || i.out.dtype() != i.src.dtype() || dims_of(i.out) != dims_of(i.src))
    fail(i, fmt::format("the result must be a register tensor of {}'s dtype and shape, got {}", ty(i.src), ty(i.out)));
}

void check_store(const InstNode& inst) {
  auto& i = static_cast<const DefinedInst&>(inst);
  const Tensor& t = i.tensor("tensor");
  const Tensor& src = i.tensor("src");
  expect_tmem(i, "tensor", t, 2);
  if (!src.is_register() || src.dtype() != t.dtype() || dims_of(src) != dims_of(t))
    fail(i, fmt::format("src must be a register tensor of {}'s dtype and shape, got {}", ty(t), ty(src)));
}

void check_copy(const InstNode& inst) {
  auto& i = static_cast<const DefinedInst&>(inst);
  const Tensor& src = i.tensor("src");
  const Tensor& dst = i.tensor("dst");
  expect_tmem(i, "dst", dst, 2);
  if (!src.is_shared() || src.rank() != 2)
    fail(i, fmt::format("src must be a rank-2 shared tensor, got {}", ty(src)));
  if (src.dtype() != dst.dtype() || dims_of(src) != dims_of(dst))
    fail(i, fmt::format("src {} and dst {} must have one dtype and shape", ty(src), ty(dst)));
  if (dims_of(dst)[0] != 128)
    fail(i, fmt::format("dst must have 128 lanes (tcgen05.cp's 128x256b shape), got {}", ty(dst)));
  if (dims_of(dst)[1] * dst.dtype().bits() % 256 != 0)
    fail(i, fmt::format("each lane of dst must hold a multiple of 256 bits (tcgen05.cp's 128x256b shape), got {}",
                        ty(dst)));
}

void check_cta_group(const InstNode& i) {
  std::optional<int64_t> g = int_attr(i, "cta_group");
  if (g && *g != 1 && *g != 2) fail(i, fmt::format("cta_group must be 1 or 2, got {}", *g));
}

void check_commit(const InstNode& inst) {
  auto& i = static_cast<const DefinedInst&>(inst);
  check_cta_group(inst);
  int64_t mask = std::stoll(i.attr("multicast_mask"));
  if (mask < 0 || mask >= (int64_t(1) << 16))
    fail(i, fmt::format("multicast_mask must name blocks of the cluster (bit i: rank i, below 2^16), got {}", mask));
}

// The MMA kinds: the operand dtypes each takes and the K of one instruction.
int64_t mma_k(DataType ab) {
  if (ab == dtypes::float16 || ab == dtypes::bfloat16) return 16;
  if (ab == dtypes::tfloat32) return 8;
  if (ab == dtypes::float8_e4m3 || ab == dtypes::float8_e5m2) return 32;
  return 0;
}

void check_mma(const InstNode& inst) {
  auto& i = static_cast<const DefinedInst&>(inst);
  const Tensor& a = i.tensor("a");
  const Tensor& b = i.tensor("b");
  const Tensor& d = i.tensor("d");
  int64_t cta_group = std::stoll(i.attr("cta_group"));
  check_cta_group(inst);
  if (!(a.is_shared() || a.is_tmem()) || a.rank() != 2)
    fail(i, fmt::format("a must be a rank-2 shared or tensor-memory tensor [m, k], got {}", ty(a)));
  if (!b.is_shared() || b.rank() != 2)
    fail(i, fmt::format("b must be a rank-2 shared tensor [k, n] (a transposed [n, k] tile: s_b.transpose()), got {}",
                        ty(b)));
  expect_tmem(i, "d", d, 2);
  auto as = dims_of(a), bs = dims_of(b), ds = dims_of(d);
  if (as[1] != bs[0])
    fail(i, fmt::format("a is {} and b is {}: the inner dims differ ({} vs {})", ty(a), ty(b), as[1], bs[0]));
  int64_t n = bs[1] * cta_group;
  if (ds[0] != as[0] || ds[1] != n)
    fail(i, fmt::format("a is {} and b is {}{}, so d must be [{}, {}], got {}", ty(a), ty(b),
                        cta_group == 2 ? " in each block of the pair (cta_group=2: d holds both halves of n)" : "",
                        as[0], n, ty(d)));
  DataType ab = a.dtype(), dt = d.dtype();
  if (ab != b.dtype()) fail(i, fmt::format("a is {} and b is {}: a and b must have one dtype", ty(a), ty(b)));
  int64_t k = mma_k(ab);
  if (!k)
    fail(i, fmt::format("a and b must be float16, bfloat16, tfloat32, float8_e4m3 or float8_e5m2 (tcgen05.mma's "
                        "f16, tf32 and f8f6f4 kinds), got {}",
                        ab.name()));
  bool f32_only = ab == dtypes::bfloat16 || ab == dtypes::tfloat32;
  if (!(dt == dtypes::float32 || (dt == dtypes::float16 && !f32_only)))
    fail(i, fmt::format("d must be float32{} for {} operands, got {}", f32_only ? "" : " or float16", ab.name(), ty(d)));
  if (as[0] != 128)
    fail(i, fmt::format("m (a is {}) must be 128{} (tcgen05.mma's M{})", ty(a),
                        cta_group == 2 ? " in each block of the pair" : "", cta_group == 2 ? "256" : "128"));
  if (cta_group == 1 && (n % 8 != 0 || n < 8))
    fail(i, fmt::format("n (b is {}) must be a multiple of 8", ty(b)));
  if (cta_group == 2 && (n % 16 != 0 || n > 256))
    fail(i, fmt::format("n (b is {} in each block, {} in all) must be a multiple of 16 up to 256 with cta_group=2",
                        ty(b), n));
  if (as[1] % k != 0) fail(i, fmt::format("k (a is {}) must be a multiple of {} for {}", ty(a), k, ab.name()));
  const Expr& e = i.scalar("enable_input_d");
  if (!e.dtype().is_bool() && !e.dtype().is_integer())
    fail(i, fmt::format("enable_input_d must be a bool, got {} of type {}", expr_str(e), dtype_str(e)));
}

}  // namespace

void insts::add_tcgen05(std::vector<InstDef>& d) {
  using verify_detail::hook;
  const InstTraits sm100{.min_sm = 100};
  const AttrDef cta_group{"cta_group", AttrType::Int, "1", {"1", "2"}};
  d.push_back({.name = "tcgen05.alloc", .group = "tcgen05", .kind = InstKind::Tcgen05Alloc, .emit = EmitFamily::Tcgen05,
               .traits = sm100, .summary = "a tensor in tensor memory [lanes, columns...], allocated by the group's first warp",
               .threads = GroupRule::Warps, .verify = hook(check_alloc)});
  d.push_back({.name = "tcgen05.dealloc", .group = "tcgen05", .emit = EmitFamily::Tcgen05, .traits = sm100,
               .summary = "frees a tcgen05.alloc tensor (the group's first warp)",
               .operands = {{.name = "tensor", .scopes = kTensorMemory, .access = Access::Read,
                             .doc = "the tensor tcgen05.alloc returned"}}, .threads = GroupRule::Warps});
  d.push_back({.name = "tcgen05.relinquish_alloc_permit", .group = "tcgen05", .emit = EmitFamily::Tcgen05, .traits = sm100,
               .summary = "gives up the block's right to allocate tensor memory (tcgen05.alloc after it is an error)",
               .attrs = {cta_group}, .threads = GroupRule::Warps, .verify = check_cta_group});
  d.push_back({.name = "tcgen05.slice", .group = "tcgen05", .kind = InstKind::Tcgen05Slice, .emit = EmitFamily::Tcgen05,
               .traits = sm100, .summary = "a view of a tensor-memory tensor at offsets (no data moves)",
               .verify = hook(check_slice)});
  d.push_back({.name = "tcgen05.view", .group = "tcgen05", .kind = InstKind::Tcgen05View, .emit = EmitFamily::Tcgen05,
               .traits = sm100, .summary = "a tensor-memory tensor's columns as another dtype and shape (no data moves)",
               .verify = hook(check_view)});
  d.push_back({.name = "tcgen05.load", .group = "tcgen05", .kind = InstKind::Tcgen05Load, .emit = EmitFamily::Tcgen05,
               .traits = {.completion = Completion::Tcgen05Load, .min_sm = 100},
               .summary = "a rank-2 tensor-memory tile into registers, asynchronously (tcgen05.wait_load before reading them)",
               .threads = GroupRule::Warps, .verify = hook(check_load)});
  d.push_back({.name = "tcgen05.store", .group = "tcgen05", .emit = EmitFamily::Tcgen05,
               .traits = {.completion = Completion::Tcgen05Store, .min_sm = 100},
               .summary = "a register tile into a rank-2 tensor-memory tile, asynchronously (tcgen05.wait_store before the "
                          "registers change)",
               .operands = {{.name = "tensor", .scopes = kTensorMemory, .access = Access::Write, .doc = "the destination"},
                            {.name = "src", .scopes = kRegister, .access = Access::Read, .doc = "the register tile"}},
               .threads = GroupRule::Warps, .verify = check_store});
  d.push_back({.name = "tcgen05.wait_load", .group = "tcgen05", .emit = EmitFamily::Tcgen05,
               .traits = {.role = SyncRole::Wait, .completion = Completion::Tcgen05Load, .min_sm = 100},
               .summary = "waits until the thread's tcgen05.load results are in its registers", .threads = GroupRule::Warps});
  d.push_back({.name = "tcgen05.wait_store", .group = "tcgen05", .emit = EmitFamily::Tcgen05,
               .traits = {.role = SyncRole::Wait, .completion = Completion::Tcgen05Store, .min_sm = 100},
               .summary = "waits until the thread's tcgen05.store writes have reached tensor memory", .threads = GroupRule::Warps});
  d.push_back({.name = "tcgen05.copy", .group = "tcgen05", .emit = EmitFamily::Tcgen05,
               .traits = {.completion = Completion::Tcgen05, .proxy = Proxy::Async, .min_sm = 100},
               .summary = "a shared tile into tensor memory, asynchronously (tcgen05.cp; tcgen05.commit tracks it)",
               .operands = {{.name = "src", .scopes = kShared, .access = Access::Read, .doc = "a rank-2 shared tile"},
                            {.name = "dst", .scopes = kTensorMemory, .access = Access::Write,
                             .doc = "a rank-2 tensor-memory tile of src's dtype and shape"}},
               .threads = GroupRule::OneWarp, .verify = check_copy});
  d.push_back({.name = "tcgen05.commit", .group = "tcgen05", .emit = EmitFamily::Tcgen05,
               .traits = {.role = SyncRole::HandOver, .completion = Completion::Tcgen05, .min_sm = 100},
               .summary = "arrives once on the mbarrier when the warp's earlier tcgen05.mma and tcgen05.copy have completed "
                          "(multicast_mask: on the barrier at its offset in each block of the mask)",
               .attrs = {cta_group, {"multicast_mask", AttrType::Int, "0"}},
               .operands = {{.name = "mbarrier", .scopes = kShared, .access = Access::Read, .dtype = "uint64", .numel = 1,
                             .doc = "one mbarrier, mbarrier.alloc(...)[i]"}},
               .threads = GroupRule::OneWarp, .verify = check_commit});
  d.push_back({.name = "tcgen05.mma", .group = "tcgen05", .emit = EmitFamily::Tcgen05,
               .traits = {.completion = Completion::Tcgen05, .proxy = Proxy::Async, .min_sm = 100},
               .summary = "d = a @ b + d (d = a @ b where enable_input_d is false) on the tensor cores, asynchronously",
               .attrs = {cta_group},
               .operands = {{.name = "a", .scopes = kShared | kTensorMemory, .access = Access::Read, .doc = "[m, k]"},
                            {.name = "b", .scopes = kShared, .access = Access::Read,
                             .doc = "[k, n], K-major (a transposed [n, k] tile)"},
                            {.name = "d", .scopes = kTensorMemory, .access = Access::ReadWrite,
                             .doc = "the [m, n] accumulator in tensor memory"}},
               .scalars = {{.name = "enable_input_d", .integer = false, .doc = "false: d = a @ b (the first k step)"}},
               .threads = GroupRule::OneWarp, .verify = check_mma});
}

}  // namespace tilus
