#include "tilus/passes/select_instructions.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <unordered_set>

#include "tilus/ir/facts.h"
#include "tilus/ir/functor.h"
#include "tilus/ir/inst_def.h"
#include "tilus/passes/infer_layouts.h"
#include "thread_dependence.h"

namespace tilus {

namespace {

std::string exprs_str(const std::vector<Expr>& es) {
  std::string s = "[";
  for (size_t i = 0; i < es.size(); ++i) s += (i ? ", " : "") + to_string(es[i]);
  return s + "]";
}

std::string region_str(const CopyRegion& r) {
  return fmt::format("{} (offsets {}, extents {})", r.tensor.type_str(), exprs_str(r.offsets), exprs_str(r.extents));
}

int64_t bytes_of(DataType t) { return std::max<int64_t>(1, t.bits() / 8); }

// Bytes a vector of w elements moves (at least 1: a sub-byte element moves with its byte).
int64_t vector_bytes(DataType t, int64_t w) { return std::max<int64_t>(1, w * t.bits() / 8); }

// Whether a vector of w elements is whole bytes: sub-byte vectors longer than one element must
// be (and only 1-, 2- and 4-bit elements tile bytes in power-of-two vectors).
bool whole_bytes(DataType t, int64_t w) {
  if (w == 1 || t.bits() % 8 == 0) return true;
  return (w * t.bits()) % 8 == 0 && (t.bits() & (t.bits() - 1)) == 0;
}

// The span in bytes (32, 64, 128) of TMA's swizzle pattern that `z` is for elements of `eb`
// bytes (16-byte units, address bits 7.. XORed in); 0 for no swizzle, -1 for another pattern.
// The one rule TMA boxes and wgmma descriptors share.
int64_t tma_swizzle_span(const Swizzle& z, int64_t eb) {
  if (z.none()) return 0;
  if ((int64_t(1) << z.base) * eb != 16 || z.bits < 1 || z.bits > 3 || z.shift != 3) return -1;
  return int64_t(16) << z.bits;
}

}  // namespace

std::optional<WgmmaOperand> wgmma_shared_operand(const KernelFacts& facts, const InstNode& user, const Tensor& t,
                                                 int k_dim, int64_t k_instr, std::string* why, bool mn_major) {
  auto no = [&](std::string what) -> std::optional<WgmmaOperand> {
    if (why) *why = std::move(what);
    return std::nullopt;
  };
  int64_t eb = bytes_of(t.dtype());
  const SharedView& v = facts.shared(user, t);
  const SharedLayout& root = v.root->shared_layout;
  // A rank-3 operand is [blocks, k, n / blocks]: MN-major column blocks side by side along N.
  bool blocked = t.rank() == 3;
  if (blocked && (!mn_major || k_dim != 0))
    return no(fmt::format("is [blocks, k, n / blocks] ({}), which only an MN-major b may be", t.type_str()));
  int kd = blocked ? 1 : k_dim, nd = blocked ? 2 : 1 - k_dim;
  int rk = v.dims[kd], rr = v.dims[nd];
  int64_t span = tma_swizzle_span(root.swizzle(), eb);
  std::string layout = fmt::format("{} of {}", root.str(), v.root->name);
  // MN-major: the other dim contiguous, each row along K one swizzle span of M or N elements
  // (PTX's canonical MN-major layout with one atom across: its leading byte offset unused).
  bool mn = mn_major && rk >= 0 && rr >= 0 && root.strides()[rk] != 1 && root.strides()[rr] == 1;
  if (blocked && !mn)
    return no(fmt::format("is [blocks, k, n / blocks] and must be MN-major (its last dim contiguous), but its layout is "
                          "{}",
                          layout));
  if (!mn && (rk < 0 || rr < 0 || root.strides()[rk] != 1))
    return no(fmt::format("must be K-major (its K dim contiguous in shared memory){}, but its layout is {}",
                          mn_major ? " or MN-major (its N dim contiguous)" : "", layout));
  if (mn) {
    if (eb != 2)
      return no(fmt::format("is MN-major (its N dim contiguous), which wgmma reads only for 16-bit elements, not {}",
                            t.dtype().name()));
    if (span <= 0 || root.strides()[rk] * eb != span)
      return no(fmt::format("is MN-major and must be stored in rows of 32, 64 or 128 bytes along N with the matching "
                            "swizzle (the layout TMA writes and layout inference chooses for such tiles), but its "
                            "layout is {}",
                            layout));
    int64_t extent = t.static_shape()[nd];
    if (extent * eb != span)
      return no(fmt::format("is MN-major and must be one swizzle span wide along N{} ({} elements of its {}-byte rows), "
                            "but it has {} (split the product into such column blocks)",
                            blocked ? " in each column block" : "", span / eb, span, extent));
  } else if (span <= 0 || root.strides()[rr] * eb != span) {
    return no(fmt::format("must be stored in rows of 32, 64 or 128 bytes along K with the matching swizzle (the "
                          "layout TMA writes and layout inference chooses for such tiles), but its layout is {}",
                          layout));
  }
  // The first element: whole 8-row atoms along the rows; along the contiguous dim whole 16-byte
  // units (K-major: the instructions step through a swizzled row) or whole rows (MN-major).
  int contiguous = mn ? rr : rk;
  for (int d = 0; d < root.rank(); ++d) {
    Expr bytes = facts.simplify(v.offsets[d] * Expr(root.strides()[d] * eb));
    int64_t need = d == contiguous ? (mn ? span : 16) : 8 * span;
    if (bytes.is_int_const(0)) continue;
    if (facts.divisor(bytes) % need)
      return no(fmt::format("must start on a {}-byte boundary of {} along root dim {} (offset {} elements), which "
                            "cannot be proven",
                            need, v.root->name, d, to_string(v.offsets[d])));
  }
  WgmmaOperand o;
  o.swizzle_bytes = span;
  o.swizzle_code = span == 128 ? 1 : span == 64 ? 2 : 3;
  o.sbo = 8 * span;  // K-major: between 8-row groups along M/N; MN-major: between 8-row groups along K
  o.lbo = 16;        // unused by swizzled K-major layouts and by MN-major ones one atom wide
  o.mn_major = mn;
  o.row_bytes = mn ? eb : span;
  o.k_step_bytes = mn ? k_instr * span : k_instr * eb;
  if (blocked && t.static_shape()[0] > 1) {
    // Column blocks: the descriptor's leading byte offset is the step from one to the next (the
    // canonical MN-major layout's stride between swizzle atoms along N; with one atom it is
    // unused, and the emitter's column offsets, i / atom * lbo + i % atom * row_bytes, are
    // i * row_bytes), a whole number of 8-row
    // atoms (so that every block starts where the swizzle pattern does) in its 14-bit field of
    // 16-byte units.
    int rb = v.dims[0];
    int64_t stride = rb < 0 ? 0 : root.strides()[rb] * eb;
    if (stride <= 0 || stride % (8 * span) || stride / 16 >= (int64_t(1) << 14))
      return no(fmt::format("is [blocks, k, n / blocks] and its column blocks must lie a positive multiple of {} bytes "
                            "(whole 8-row swizzle atoms) apart, less than 256 KiB, but its layout is {}",
                            8 * span, layout));
    o.lbo = stride;
  }
  return o;
}

namespace {

std::string tma_shared_tile(const KernelFacts& facts_, const SharedView& view, const std::vector<int64_t>& box,
                            int64_t eb, int64_t& swizzle);

// Why the tensor map of global access `acc` cannot be encoded at launch, or "": the launcher
// encodes it on the host from the arguments, so its address offset, shape and strides may use
// only the kernel's parameters (a view whose extent is a value the kernel loaded, say).
std::string not_from_parameters(const KernelFacts& facts_, const GlobalAccess& acc) {
  const std::vector<Var>& params = facts_.kernel().params;
  std::vector<std::pair<const char*, Expr>> parts = {{"offset", acc.param_offset_bytes}};
  for (auto& e : acc.shape) parts.push_back({"shape", e});
  for (auto& e : acc.strides) parts.push_back({"stride", e});
  for (auto& [what, e] : parts) {
    Expr inlined = facts_.inline_lets(e);
    for (const Var& v : free_vars(inlined))
      if (std::none_of(params.begin(), params.end(), [&](const Var& p) { return p.same_as(v); }))
        return fmt::format("not legal: the global view's {} {} uses '{}', which is not a kernel parameter (a tensor map "
                           "is encoded on the host from the launch's arguments); give the view a shape of parameters "
                           "(TMA clips at its bounds)",
                           what, to_string(inlined), v->name);
  }
  return "";
}

// The TMA box of a global <-> shared copy (DESIGN 5's legality rules), or why there is none.
// `proven`: the base pointer's and the strides' 16-byte alignment must be known at compile
// time (automatic TMA); explicit TMA leaves them to the launch, which checks them.
std::string tma_plan(const KernelFacts& facts_, const Target& target_, const CopyInst& c, bool proven,
                     TensorMapSpec& spec) {
  if (!target_.has_tma()) return fmt::format("not legal on this target ({} has no TMA)", target_.arch);
  if (c.cta_group == 2 && !target_.has_tcgen05())
    return fmt::format("not legal on this target (a cta_group=2 load needs sm_100a or sm_103a, the target is {})",
                       target_.arch);
  bool g2s = c.src.tensor.is_global() && c.dst.tensor.is_shared();
  bool s2g = c.src.tensor.is_shared() && c.dst.tensor.is_global();
  if (!g2s && !s2g) return "not legal: TMA moves global <-> shared tiles";
  const CopyRegion& g = g2s ? c.src : c.dst;
  const CopyRegion& sm = g2s ? c.dst : c.src;
  DataType dt = g.tensor.dtype();
  if (dt.is_subbyte()) return "not legal: TMA moves whole bytes (a sub-byte dtype)";
  int64_t eb = bytes_of(dt);
  const GlobalAccess& acc = facts_.global(c, g.tensor);
  int rank = int(g.extents.size());
  if (rank < 1 || rank > 5) return fmt::format("not legal: a TMA box has 1 to 5 dims, the global tensor has {}", rank);
  std::vector<int64_t> box;
  for (int d = 0; d < rank; ++d) {
    Expr e = facts_.simplify(g.extents[d]);
    if (!e.is_int_const()) return fmt::format("not legal: box extent {} of dim {} is not a constant", to_string(e), d);
    if (e.int_value() > 256) return fmt::format("not legal: box extent {} of dim {} exceeds 256", e.int_value(), d);
    box.push_back(e.int_value());
  }
  int inner = rank - 1;
  if (!facts_.simplify(acc.strides[inner]).is_int_const(1)) return "not legal: the innermost global dim is not contiguous";
  int64_t inner_bytes = box[inner] * eb;
  if (inner_bytes % 16) return fmt::format("not legal: the innermost box is {} bytes, not a multiple of 16", inner_bytes);
  if (acc.param < 0 || !acc.param_offset_bytes.defined())
    return "not legal: the global view is not a pointer parameter moved by integers (a tensor map needs its address)";
  // The box's first element must be 16-byte aligned: a start proven misaligned is an error;
  // the automatic slot takes only starts proven aligned (the others are checked at run time
  // by the CPU backend and under TILUS_DEBUG_BOUNDS).
  TmaStartCheck start = facts_.tma_start(g.offsets[size_t(inner)], dt);
  if (start.aligned == false || (proven && start.aligned != true))
    return fmt::format("not legal: the box starts at innermost offset {}, {} a multiple of {} elements of {} (16 "
                       "bytes); the hardware faults (an illegal instruction) on a box whose first element is not "
                       "16-byte aligned",
                       to_string(start.offset), start.aligned == false ? "not" : "not known to be", start.multiple,
                       dt.name());
  // A TMA store traps at a negative coordinate (loads zero-fill there): the automatic slot
  // takes only boxes that provably start inside; explicit stores check at run time.
  if (proven && s2g)
    for (int d = 0; d < rank; ++d)
      if (!facts_.holds(g.offsets[d] >= int_const(0, g.offsets[d].dtype())))
        return fmt::format("not legal: a TMA store cannot start at a negative coordinate, and offset {} of dim {} is "
                           "not known to be >= 0",
                           to_string(facts_.simplify(g.offsets[d])), d);
  if (proven) {
    if (acc.pointer_alignment % 16 || facts_.divisor(acc.param_offset_bytes) % 16)
      return "not legal: the global base pointer is not known to be 16-byte aligned";
    for (int d = 0; d < inner; ++d)
      if (facts_.divisor(acc.strides[d]) * eb % 16)
        return fmt::format("not legal: global stride {} of dim {} is not a known multiple of 16 bytes",
                           to_string(acc.strides[d]), d);
  }
  int64_t swizzle = 0;
  if (std::string why = tma_shared_tile(facts_, facts_.shared_region(c, sm, rank), box, eb, swizzle); !why.empty()) return why;
  if (std::string why = not_from_parameters(facts_, acc); !why.empty()) return why;
  spec.param = acc.param;
  spec.offset = facts_.inline_lets(acc.param_offset_bytes);
  spec.dtype = dt;
  for (auto& e : acc.shape) spec.shape.push_back(facts_.inline_lets(e));
  for (auto& e : acc.strides) spec.strides.push_back(facts_.inline_lets(e));
  spec.box = box;
  spec.swizzle_bytes = int(swizzle);
  spec.loc = c.loc;
  spec.inst = c.display_name();
  return "";
}

// Why the shared tile `view` (whose dim d has extent box[d]) cannot be a TMA box of elements of
// `eb` bytes, or "" and its swizzle span: the box stored densely in row-major order (up to
// TMA's swizzle, whose span must be the box's rows), starting on 128 bytes.
std::string tma_shared_tile(const KernelFacts& facts_, const SharedView& view, const std::vector<int64_t>& box,
                            int64_t eb, int64_t& swizzle) {
  const Tensor& root = view.root;
  const SharedLayout& sl = root->shared_layout.defined() ? root->shared_layout : SharedLayout::row_major(root.static_shape());
  int64_t expect = 1;
  for (int d = int(box.size()) - 1; d >= 0; --d) {
    if (box[size_t(d)] == 1) continue;
    int rd = view.dims[size_t(d)];
    if (rd < 0 || sl.strides()[size_t(rd)] != expect)
      return "not legal: the shared tile is not the box stored densely in row-major order";
    expect *= box[size_t(d)];
  }
  Expr start = facts_.simplify(shared_start_unswizzled(view));
  if (facts_.divisor(start) * eb % 128) return "not legal: the shared tile does not start on 128 bytes";
  swizzle = tma_swizzle_span(sl.swizzle(), eb);
  if (swizzle < 0) return "not legal: the shared swizzle is not TMA's 32B / 64B / 128B pattern";
  int64_t inner_bytes = box.back() * eb;
  if (swizzle > 0 && inner_bytes != swizzle)
    return fmt::format("not legal: the box's rows are {} bytes, the {}-byte swizzle needs rows of {}", inner_bytes,
                       swizzle, swizzle);
  return "";
}

// c2d_im2col by TMA's im2col mode, or why not. One load brings, for one kernel position
// (kh, kw), `bk` channels of `bm` consecutive output pixels: the pixel walk starts at the
// tile's first pixel (its window's top-left corner in the image) and steps by the conv stride
// through the pixel box [-pad, size - 1 + pad - dilation * (kernel - 1)] of each spatial dim,
// wrapping to the next row and image like the [N, OH, OW] order; the kernel position is the
// load's offset. So a tile's channels must stay in one kernel position (C a known multiple
// of bk). The base pointer's and strides' 16-byte alignment must be proven, as for copy.
std::string tma_im2col_plan(const KernelFacts& facts_, const Target& target_, const Im2colInst& i,
                            TensorMapSpec& spec) {
  if (!target_.has_tma()) return fmt::format("not legal on this target ({} has no TMA)", target_.arch);
  DataType dt = i.col.dtype();
  if (dt.is_subbyte()) return "not legal: TMA moves whole bytes (a sub-byte dtype)";
  int64_t eb = bytes_of(dt);
  auto shape = i.col.static_shape();
  int64_t bm = shape[0], bk = shape[1];
  const GlobalAccess& acc = facts_.global(i, i.img);
  if (bm > 256 || bk > 256) return fmt::format("not legal: the tile [{}, {}] exceeds 256 pixels or channels", bm, bk);
  if (bk * eb % 16) return fmt::format("not legal: a pixel's {} channels are {} bytes, not a multiple of 16", bk, bk * eb);
  if (!facts_.simplify(acc.strides[3]).is_int_const(1)) return "not legal: the channels are not contiguous";
  if (facts_.divisor(acc.shape[3]) % bk)
    return fmt::format("not legal: C ({}) is not a known multiple of the tile's {} channels (a tile must stay in "
                       "one kernel position)",
                       to_string(facts_.simplify(acc.shape[3])), bk);
  if (acc.param < 0 || !acc.param_offset_bytes.defined())
    return "not legal: the image is not a pointer parameter moved by integers (a tensor map needs its address)";
  if (acc.pointer_alignment % 16 || facts_.divisor(acc.param_offset_bytes) % 16)
    return "not legal: the image's base pointer is not known to be 16-byte aligned";
  for (int d = 0; d < 3; ++d)
    if (facts_.divisor(acc.strides[d]) * eb % 16)
      return fmt::format("not legal: image stride {} of dim {} is not a known multiple of 16 bytes",
                         to_string(facts_.simplify(acc.strides[d])), d);
  // The pixel box's corners and the kernel offsets are 8-bit signed and unsigned in 2-D
  // im2col; traversal strides at most 8.
  int64_t reach = i.dilation * (i.kernel - 1);
  if (i.stride > 8) return fmt::format("not legal: stride {} exceeds TMA's traversal stride of 8", i.stride);
  if (i.pad > 128 || i.pad - reach < -128 || i.pad - reach > 127 || reach > 255)
    return fmt::format("not legal: pad {} and a dilated kernel reach of {} exceed TMA's 8-bit pixel box corners",
                       i.pad, reach);
  int64_t swizzle = 0;
  if (std::string why = tma_shared_tile(facts_, facts_.shared(i, i.col), {bm, bk}, eb, swizzle); !why.empty()) return why;
  spec.param = acc.param;
  spec.offset = facts_.inline_lets(acc.param_offset_bytes);
  spec.dtype = dt;
  for (auto& e : acc.shape) spec.shape.push_back(facts_.inline_lets(e));
  for (auto& e : acc.strides) spec.strides.push_back(facts_.inline_lets(e));
  spec.box = {bm, bk};
  spec.swizzle_bytes = int(swizzle);
  spec.im2col = true;
  spec.lower = -i.pad;
  spec.upper = i.pad - reach;
  spec.traversal_stride = i.stride;
  spec.loc = i.loc;
  spec.inst = i.display_name();
  return "";
}


int64_t pow2_floor(int64_t x) {
  int64_t p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

int64_t pow2_divisor(int64_t x, int64_t cap) {
  int64_t p = 1;
  while (p * 2 <= cap && x % (p * 2) == 0) p *= 2;
  return p;
}

// --- how wide an access may be ---------------------------------------------------------------

// The largest power of two w <= min(run, 16 bytes) with fits(w).
template <class Fits>
int64_t widest(int64_t run, DataType dtype, Fits fits) {
  int64_t w = pow2_floor(std::min<int64_t>(run, 128 / dtype.bits()));
  while (w > 1 && (run % w || !whole_bytes(dtype, w) || !fits(w))) w /= 2;
  return w;
}

// Why a vector of w elements along tile dim `dim` (of a run of `run` contiguous slots) is not
// contiguous and aligned on the global side for every vector start that is a multiple of
// itself ("" when it is). A checked global dim must also be all-in or all-out across a vector,
// unless `tail` (cp.async reads a straddling vector's in-bounds part, src-size).
std::string global_vector_obstacle(const KernelFacts& f, const GlobalAccess& g, int dim, int64_t run, int64_t w,
                                   bool tail = false) {
  if (dim < 0 || dim >= int(g.dims.size()) || g.dims[dim] < 0)
    return "no tile dim is contiguous in a thread's registers and in global memory";
  int gd = g.dims[dim];
  if (!g.strides[gd].is_int_const(1))
    return fmt::format("global dim {}, the tile's contiguous one, has stride {}, not 1", gd, to_string(g.strides[gd]));
  if (run % w)
    return fmt::format("each thread holds runs of {} contiguous element{}", run, run == 1 ? "" : "s");
  if (!whole_bytes(g.dtype, w)) return fmt::format("{} elements of {} are not whole bytes", w, g.dtype.name());
  int64_t bytes = vector_bytes(g.dtype, w);
  if (g.pointer_alignment % bytes)
    return fmt::format("the pointer is known aligned to {} byte{} only, and a {}-byte vector needs {}",
                       g.pointer_alignment, g.pointer_alignment == 1 ? "" : "s", bytes, bytes);
  if (f.divisor(g.offsets[gd]) % w)
    return fmt::format("the offset {} along global dim {} is not known to be a multiple of {}",
                       to_string(g.offsets[gd]), gd, w);
  for (size_t d = 0; d < g.strides.size(); ++d)
    if (int(d) != gd && f.divisor(g.strides[d]) % w)
      return fmt::format("the stride {} of global dim {} is not known to be a multiple of {} elements (a launch "
                         "specializes integer parameters on divisibility by 16 only: any other value is known to be "
                         "a multiple of 1)",
                         to_string(g.strides[d]), d, w);
  bool checked = std::find(g.checked.begin(), g.checked.end(), gd) != g.checked.end();
  if (checked && !tail && f.divisor(g.shape[gd]) % w)
    return fmt::format("the extent {} of global dim {} is not known to be a multiple of {} (a ragged end)",
                       to_string(g.shape[gd]), gd, w);
  return "";
}

// The largest vector (in elements, a power of two, at most 16 bytes, dividing `run`) that
// stays contiguous and aligned along tile dim `dim` for every vector start that is a
// multiple of itself; 1 when none is (global_vector_obstacle says why a width is not).
int64_t global_vector_width(const KernelFacts& f, const GlobalAccess& g, int dim, int64_t run, bool tail = false) {
  if (dim < 0 || dim >= int(g.dims.size()) || g.dims[dim] < 0) return 1;
  return widest(run, g.dtype, [&](int64_t w) { return global_vector_obstacle(f, g, dim, run, w, tail).empty(); });
}

std::string shared_vector_obstacle(const KernelFacts& f, const SharedView& s, int dim, int64_t run, int64_t w) {
  if (dim < 0 || dim >= int(s.dims.size()) || s.dims[dim] < 0)
    return "no tile dim is contiguous in a thread's registers and in shared memory";
  const SharedLayout& layout = s.root->shared_layout;
  int rd = s.dims[dim];
  if (layout.strides()[rd] != 1)
    return fmt::format("the shared tensor's dim {} has stride {}, not 1", rd, layout.strides()[rd]);
  if (run % w) return fmt::format("each thread holds runs of {} contiguous element{}", run, run == 1 ? "" : "s");
  DataType t = s.root.dtype();
  if (!whole_bytes(t, w)) return fmt::format("{} elements of {} are not whole bytes", w, t.name());
  // The swizzle leaves the low `base` bits of the offset alone.
  if (!layout.swizzle().none() && (int64_t(1) << layout.swizzle().base) % w)
    return fmt::format("the shared layout's swizzle moves groups of {} elements", int64_t(1) << layout.swizzle().base);
  if (s.base_bytes % vector_bytes(t, w))
    return fmt::format("the shared tile starts at byte {}, not a multiple of {}", s.base_bytes, vector_bytes(t, w));
  if (f.divisor(s.offsets[rd]) % w)
    return fmt::format("the offset {} in the shared tensor's dim {} is not known to be a multiple of {}",
                       to_string(s.offsets[rd]), rd, w);
  for (int d = 0; d < layout.rank(); ++d)
    if (d != rd && layout.strides()[d] % w)
      return fmt::format("the shared tensor's dim {} has stride {}, not a multiple of {}", d, layout.strides()[d], w);
  return "";
}

int64_t shared_vector_width(const KernelFacts& f, const SharedView& s, int dim, int64_t run) {
  if (dim < 0 || dim >= int(s.dims.size()) || s.dims[dim] < 0) return 1;
  return widest(run, s.root.dtype(), [&](int64_t w) { return shared_vector_obstacle(f, s, dim, run, w).empty(); });
}

// The run of consecutive slots that are consecutive elements of one tile dim: the innermost
// local mode, when it is also the minor-most mode of its dim.
struct Contiguity {
  int dim = -1;     // tile dim, -1 when slots are not contiguous
  int64_t run = 1;  // slots per run
};

Contiguity contiguity(const RegisterLayout& l) {
  Contiguity c;
  if (!l.defined() || l.local_modes().empty()) return c;
  int m = l.local_modes().back();
  int d = l.mode_dim(m);
  for (int later = m + 1; later < int(l.mode_shape().size()); ++later)
    if (l.mode_dim(later) == d && l.mode_shape()[later] > 1) return c;  // a more minor mode exists
  c.dim = d;
  c.run = l.mode_shape()[m];
  return c;
}

// --- ldmatrix / stmatrix fragments -----------------------------------------------------------

// In each group of 2N slots (N = 4, 2, 1 matrices) lane l of every warp holds, in slots 2j
// and 2j + 1, the elements (l / 4, 2 (l % 4) + {0, 1}) of 8x8 matrix j in the (row dim `rdim`,
// contiguous dim `cdim`) plane (`trans`: the transposed position; every other dim the same
// for the whole matrix), with the matrix's row start on a multiple of 8 along `cdim`. Checked
// for every thread and slot of a layout over `threads` threads; nullopt when some slot does
// not fit.
std::optional<std::vector<MatrixGroup>> match_matrix_fragments(const RegisterLayout& l, int cdim, int rdim,
                                                               int64_t threads) {
  if (!l.defined() || l.rank() < 2 || cdim < 0 || cdim >= l.rank() || rdim < 0 || rdim >= l.rank() || rdim == cdim ||
      threads % 32 || l.num_threads() != threads || l.local_size() % 2)
    return std::nullopt;
  // Where lane `lane`'s half `h` of a matrix sits relative to the matrix origin.
  auto expect = [&](bool trans, int64_t lane, int64_t h) {
    std::vector<int64_t> d(size_t(l.rank()), 0);
    d[size_t(trans ? cdim : rdim)] = lane / 4;
    d[size_t(trans ? rdim : cdim)] = 2 * (lane % 4) + h;
    return d;
  };
  auto matches = [&](int64_t s0, int64_t n, bool trans) {
    for (int64_t t = 0; t < threads; ++t)
      for (int64_t j = 0; j < n; ++j) {
        auto origin = l.map(t - t % 32, s0 + 2 * j);  // lane 0 of the warp, half 0
        if (origin[size_t(cdim)] % 8) return false;
        for (int64_t h = 0; h < 2; ++h) {
          auto got = l.map(t, s0 + 2 * j + h);
          auto d = expect(trans, t % 32, h);
          for (size_t k = 0; k < got.size(); ++k)
            if (got[k] != origin[k] + d[k]) return false;
        }
      }
    return true;
  };
  std::vector<MatrixGroup> groups;
  for (int64_t s = 0; s < l.local_size();) {
    std::optional<MatrixGroup> found;
    for (int64_t n : {4, 2, 1}) {
      if (found || s + 2 * n > l.local_size()) continue;
      for (bool trans : {false, true})
        if (!found && matches(s, n, trans)) found = MatrixGroup{s, n, trans};
    }
    if (!found) return std::nullopt;
    groups.push_back(*found);
    s += 2 * found->n;
  }
  return groups;
}

// ldmatrix (load) / stmatrix (store) between the shared view `view` and register tensor `reg`
// of the same rank for a thread scope of `threads` threads starting at thread `begin`:
// 16-bit data, fragments that match in the plane of the view's contiguous dim and one other
// (the first that matches), 16-byte aligned rows along the contiguous dim, sm_80+ (ldmatrix) /
// sm_90+ (stmatrix). An undefined record when any of it fails.
Lowering plan_matrix_copy(const KernelFacts& f, int sm, const SharedView& view, const Tensor& reg, int64_t threads,
                          int64_t begin, bool load) {
  Lowering none;
  DataType dt = reg.dtype();
  if (dt.bits() != 16 || dt.is_subbyte() || reg.rank() < 2 || view.dims.size() != size_t(reg.rank()) ||
      !reg->layout.defined())
    return none;
  if (sm < (load ? 80 : 90) || begin % 32) return none;
  const SharedLayout& root = view.root->shared_layout;
  int cdim = -1;
  for (int d = 0; d < reg.rank(); ++d)
    if (view.dims[size_t(d)] >= 0 && root.strides()[view.dims[size_t(d)]] == 1) cdim = d;
  if (cdim < 0) return none;
  // 16-byte aligned rows (the swizzle keeps 16-byte units).
  if (shared_vector_width(f, view, cdim, 8) < 8) return none;
  for (int rdim = 0; rdim < reg.rank(); ++rdim) {
    if (rdim == cdim || view.dims[size_t(rdim)] < 0) continue;
    auto groups = match_matrix_fragments(reg->layout, cdim, rdim, threads);
    if (!groups) continue;
    Lowering l;
    l.op = load ? MachineOp::Ldmatrix : MachineOp::Stmatrix;
    l.matrix_cdim = cdim;
    l.matrix_rdim = rdim;
    l.matrices = *groups;
    l.mapping = reg->layout;
    return l;
  }
  return none;
}

// The lane exchange that widens the stores of a register tile of layout `l` (lowering.h's
// LaneExchange), or nullopt. Where the minor-most mode of the layout's contiguous dim holds
// runs of `unit` slots (4 or 8 bytes) and the mode above it is spatial, the lanes of that mode
// together cover fewer than 32 bytes: every warp-wide store fills part of each sector it
// touches. Swapping the minor k-factor of that spatial mode (B) with the minor k-factor of a
// local mode above it in the same dim (A) keeps every element in its warp and makes the k
// units of a thread contiguous: runs of 16 bytes. The new layout: A's minor factor becomes
// the thread digit B's had, B's minor factor a slot digit just above the run.
std::optional<std::pair<RegisterLayout, LaneExchange>> plan_lane_exchange(const RegisterLayout& layout, DataType dt) {
  if (!layout.defined() || dt.is_subbyte() || dt.bits() % 8) return std::nullopt;
  RegisterLayout l = layout.canonical();
  Contiguity c = contiguity(l);
  if (c.dim < 0) return std::nullopt;
  int64_t unit_bytes = c.run * bytes_of(dt);
  if (unit_bytes % 4 || unit_bytes >= 16) return std::nullopt;
  std::vector<int> modes;  // the contiguous dim's modes, major to minor
  for (int m = 0; m < int(l.mode_shape().size()); ++m)
    if (l.mode_dim(m) == c.dim) modes.push_back(m);
  if (modes.size() < 3) return std::nullopt;
  const auto& sp = l.spatial_modes();
  const auto& lo = l.local_modes();
  int b = modes[modes.size() - 2];
  auto b_at = std::find(sp.begin(), sp.end(), b);
  if (b_at == sp.end()) return std::nullopt;  // the mode above the run is local: no lanes to trade with
  int64_t q = l.mode_shape()[size_t(b)];
  if (unit_bytes * q >= 32) return std::nullopt;  // those lanes fill whole sectors already
  int64_t k = std::min<int64_t>(q, 16 / unit_bytes);
  int64_t stride = 1;  // the thread stride of B's minor factor
  for (auto it = b_at + 1; it != sp.end(); ++it) stride *= *it < 0 ? -*it : l.mode_shape()[size_t(*it)];
  auto pow2 = [](int64_t x) { return x > 0 && (x & (x - 1)) == 0; };
  if (k < 2 || q % k || !pow2(k) || !pow2(stride) || stride * k > 32) return std::nullopt;
  int a = -1;  // the nearest local mode above B in the dim that k divides
  for (int i = int(modes.size()) - 3; i >= 0 && a < 0; --i)
    if (std::find(lo.begin(), lo.end(), modes[size_t(i)]) != lo.end() && l.mode_shape()[size_t(modes[size_t(i)])] % k == 0)
      a = modes[size_t(i)];
  if (a < 0) return std::nullopt;
  // The new modes: A -> [A / k, k], B -> [B / k, k]; the old mode m's first new index is at[m].
  std::vector<int64_t> shape;
  std::vector<int> at;
  for (int m = 0; m < int(l.mode_shape().size()); ++m) {
    at.push_back(int(shape.size()));
    int64_t n = l.mode_shape()[size_t(m)];
    if (m == a || m == b) {
      shape.push_back(n / k);
      shape.push_back(k);
    } else {
      shape.push_back(n);
    }
  }
  int a_hi = at[size_t(a)], a_lo = a_hi + 1, b_hi = at[size_t(b)], b_lo = b_hi + 1;
  std::vector<int> spatial, local;
  for (int m : sp) {
    if (m < 0) spatial.push_back(m);
    else if (m == b) spatial.insert(spatial.end(), {b_hi, a_lo});
    else spatial.push_back(at[size_t(m)]);
  }
  for (int m : lo) {
    if (m == a) local.push_back(a_hi);
    else if (m == lo.back()) local.insert(local.end(), {b_lo, at[size_t(m)]});
    else local.push_back(at[size_t(m)]);
  }
  // Canonical: B's minor factor and the run merge into one mode (contiguity() sees the new run).
  RegisterLayout after = RegisterLayout(l.shape(), shape, spatial, local).canonical();
  // A block: one value of every slot digit of the old layout but the run's and A's minor
  // factor; unit j of it (A's minor digit j) in the old slots, unit p (B's minor digit p) in the
  // new ones.
  std::vector<int64_t> radix;  // the old layout's slot digits, major to minor
  for (int m : lo) radix.push_back(l.mode_shape()[size_t(m)]);
  size_t a_pos = size_t(std::find(lo.begin(), lo.end(), a) - lo.begin());
  int64_t a_step = 1;  // slots per step of A's digit
  for (size_t i = a_pos + 1; i < lo.size(); ++i) a_step *= radix[i];
  LaneExchange x;
  x.lanes = k;
  x.lane_stride = stride;
  x.unit = c.run;
  std::vector<int64_t> digits(lo.size(), 0);
  for (int64_t s = 0; s < l.local_size(); s += c.run) {
    for (int64_t i = int64_t(lo.size()) - 1, rest = s; i >= 0; --i) {
      digits[size_t(i)] = rest % radix[size_t(i)];
      rest /= radix[size_t(i)];
    }
    if (digits[a_pos] % k) continue;
    for (int64_t j = 0; j < k; ++j) x.src.push_back(s + j * a_step);
    for (int64_t p = 0; p < k; ++p) {
      int64_t slot = 0;
      for (int m : local) {
        int64_t d = 0;
        if (m == a_hi) d = digits[a_pos] / k;
        else if (m == b_lo) d = p;
        else d = digits[size_t(std::find(lo.begin(), lo.end(), int(std::find(at.begin(), at.end(), m) - at.begin())) - lo.begin())];
        slot = slot * shape[size_t(m)] + d;
      }
      x.dst.push_back(slot);
    }
  }
  return std::make_pair(std::move(after), std::move(x));
}

// A per-thread access of register tensor `reg` (its layout maps the threads) with `vector`
// elements at a time.
Lowering simt_access(const Tensor& reg, int64_t vector) {
  Lowering l;
  l.op = MachineOp::Simt;
  l.vector = vector;
  l.mapping = reg->layout;
  // Replicated elements are stored by one replica and loaded by all: not private.
  l.thread_private = reg->layout.defined() && !reg->layout.is_replicated();
  return l;
}

// The cp.async instruction of a vector of `bytes` (Simt below 4 bytes: element by element).
MachineOp cp_async_op(int64_t bytes) {
  if (bytes >= 16) return MachineOp::CpAsyncCg;
  if (bytes >= 4) return MachineOp::CpAsyncCa;
  return MachineOp::Simt;
}

class Selector : public StmtMutator {
 public:
  Selector(const Kernel& k, const Target& t)
      : facts_(k), target_(t), read_(read_tensors(k)), kernel_cluster_size_(k.cluster[0] * k.cluster[1] * k.cluster[2]) {
    scopes_.push_back({0, k.num_threads()});
  }

  Kernel run(const Kernel& k) {
    Kernel out = mutate(k);
    out.tensor_maps = tensor_maps_;
    out.copy_barriers = copy_barriers_;
    // Once per kernel compiled for a GPU: copy_async calls that do not run asynchronously (the
    // CPU backend names them among its GPU warnings).
    if (!synchronous_copies_.empty() && !target_.is_cpu())
      spdlog::warn("tilus: kernel {}: {} copy_async call{} of it {} synchronously (TILUS_LOG_LEVEL=error silences "
                   "this):\n  {}",
                   k.name, synchronous_copies_.size(), synchronous_copies_.size() == 1 ? "" : "s",
                   synchronous_copies_.size() == 1 ? "runs" : "run", fmt::join(synchronous_copies_, "\n  "));
    return out;
  }

 protected:
  Stmt mutate_thread_group(const Stmt& s, const ThreadGroupStmtNode& n) override {
    scopes_.push_back({scopes_.back().begin + n.thread_begin, n.num_threads});
    Stmt r = StmtMutator::mutate_thread_group(s, n);
    scopes_.pop_back();
    return r;
  }

  // Branches and loops whose threads may part ways: no shuffle inside them (lane exchanges).
  Stmt mutate_if(const Stmt& s, const IfStmtNode& n) override {
    return diverging(threads_.depends(n.cond), [&] { return StmtMutator::mutate_if(s, n); });
  }
  Stmt mutate_while(const Stmt& s, const WhileStmtNode& n) override {
    return diverging(threads_.depends(n.cond), [&] { return StmtMutator::mutate_while(s, n); });
  }
  Stmt mutate_for(const Stmt& s, const ForStmtNode& n) override {
    return diverging(threads_.per_thread_loop(n), [&] { return StmtMutator::mutate_for(s, n); });
  }
  Stmt mutate_let(const Stmt& s, const LetStmtNode& n) override {
    threads_.bind(n.var, n.value);
    return StmtMutator::mutate_let(s, n);
  }
  Stmt mutate_declare(const Stmt& s, const DeclareStmtNode& n) override {
    threads_.bind(n.var, n.init);
    return StmtMutator::mutate_declare(s, n);
  }
  Stmt mutate_assign(const Stmt& s, const AssignStmtNode& n) override {
    threads_.bind(n.var, n.value);
    return StmtMutator::mutate_assign(s, n);
  }

  Stmt mutate_inst(const Stmt& s, const Inst& inst) override {
    Lowering l;
    switch (inst->kind()) {
      case InstKind::LoadGlobal: {
        auto& i = static_cast<const LoadGlobalInst&>(*inst);
        l = global_access(i, i.out, facts_.tile(i, i.src, i.offsets, i.dims, i.checked_dims));
        break;
      }
      case InstKind::StoreGlobal: {
        auto& i = static_cast<const StoreGlobalInst&>(*inst);
        GlobalAccess g = facts_.tile(i, i.dst, i.offsets, i.dims, i.checked_dims);
        l = global_access(i, i.src, g);
        widen_by_lane_exchange(l, i.src, g);
        break;
      }
      case InstKind::LoadShared: {
        auto& i = static_cast<const LoadSharedInst&>(*inst);
        l = shared_access(facts_.shared(i, i.src), i.out, true);
        break;
      }
      case InstKind::StoreShared: {
        auto& i = static_cast<const StoreSharedInst&>(*inst);
        l = shared_access(facts_.shared(i, i.dst), i.src, false);
        break;
      }
      case InstKind::CopyAsync: l = copy_async(static_cast<const CopyAsyncInst&>(*inst)); break;
      case InstKind::Copy: l = copy(static_cast<const CopyInst&>(*inst)); break;
      case InstKind::Im2col: l = im2col(static_cast<const Im2colInst&>(*inst)); break;
      case InstKind::Dot: l = dot(static_cast<const DotInst&>(*inst)); break;
      case InstKind::WgmmaMma: l = wgmma(static_cast<const WgmmaMmaInst&>(*inst)); break;
      case InstKind::LoadGlobalVector: {
        auto& i = static_cast<const LoadGlobalVectorInst&>(*inst);
        l = global_vector(i, i.src, i.out, i.bits);
        break;
      }
      case InstKind::StoreGlobalVector: {
        auto& i = static_cast<const StoreGlobalVectorInst&>(*inst);
        l = global_vector(i, i.dst, i.value, i.bits);
        break;
      }
      case InstKind::Atomic: l = atomic(static_cast<const AtomicInst&>(*inst)); break;
      case InstKind::Tcgen05Alloc:
      case InstKind::Tcgen05Slice:
      case InstKind::Tcgen05View:
      case InstKind::ClcQuery:
        check_blackwell(*inst);
        return s;
      case InstKind::Tcgen05Load: {
        auto& i = static_cast<const Tcgen05LoadInst&>(*inst);
        l = tcgen05_ldst(i, i.src, i.out, MachineOp::Tcgen05Ld);
        break;
      }
      case InstKind::Defined: {
        auto& i = static_cast<const DefinedInst&>(*inst);
        const std::string& name = i.definition->name;
        if (name == "tcgen05.mma") l = tcgen05_mma(i);
        else if (name == "tcgen05.copy") l = tcgen05_copy(i);
        else if (name == "tcgen05.store") l = tcgen05_ldst(i, i.tensor("tensor"), i.tensor("src"), MachineOp::Tcgen05St);
        else if (name == "clc.try_cancel") {
          check_blackwell(i);
          l.op = MachineOp::ClcTryCancel;
          l.completion = Completion::MbarrierTx;
        } else {
          if (name.rfind("tcgen05.", 0) == 0) check_blackwell(i);
          return s;
        }
        break;
      }
      default: return s;
    }
    auto c = inst->clone();
    c->lowering = std::move(l);
    return make_inst_stmt(c);
  }

 private:
  struct Scope {
    int64_t begin, threads;
  };
  KernelFacts facts_;
  const Target& target_;
  std::vector<Scope> scopes_;
  std::vector<TensorMapSpec> tensor_maps_;
  int64_t copy_barriers_ = 0;
  std::vector<std::string> synchronous_copies_;  // copy_async calls that fell back to a SIMT copy
  const std::unordered_set<const TensorNode*> read_;  // an atomic whose old values are not read is a red
  const int64_t kernel_cluster_size_;
  ThreadDependence threads_;  // the scalars that differ between threads
  int divergent_ = 0;         // branches and loops entered whose condition differs between threads

  Stmt diverging(bool differs, const std::function<Stmt()>& body) {
    divergent_ += differs;
    Stmt r = body();
    divergent_ -= differs;
    return r;
  }

  // A Simt store of a tile whose lanes fill parts of sectors (an mma accumulator's 4-byte pairs
  // of 16-bit values) trades units between lanes first, where the exchanged layout stores wider
  // vectors than the tile's own (the vector still stops at a ragged end: the predicates stay
  // per vector) and its threads are whole warps that do not diverge here (shuffles).
  void widen_by_lane_exchange(Lowering& l, const Tensor& reg, const GlobalAccess& g) const {
    if (target_.is_cpu() || l.op != MachineOp::Simt || divergent_ || scope().begin % 32 || scope().threads % 32)
      return;
    auto plan = plan_lane_exchange(reg->layout, reg.dtype());
    if (!plan) return;
    Contiguity c = contiguity(plan->first);
    int64_t w = global_vector_width(facts_, g, c.dim, c.run);
    if (w <= l.vector) return;
    l.vector = w;
    l.mapping = plan->first;
    l.exchange = plan->second;
    std::string why = lane_exchange_problem(reg->layout, l);
    if (!why.empty()) throw InternalError(fmt::format("the lane exchange {} {}", l.str(), why));
  }

  // Element by element; the old values return in the threads that hold the operands, so each
  // element must have one thread where they are read (replicas do not repeat the operation).
  Lowering atomic(const AtomicInst& i) const {
    const RegisterLayout& l = i.values->layout;
    if (!l.defined())
      throw CompileError(fmt::format("{}: values has no layout; run infer_layouts first", i.display_name()), i.loc);
    bool used = read_.count(i.out.get()) > 0;
    if (used && l.is_replicated())
      throw CompileError(fmt::format("{}: its old values are read, but values {} has the layout {}, which gives some "
                                     "elements to several threads, and only one of them does the operation: give "
                                     "values one thread per element (a single_thread() scope, or a tile of at least "
                                     "one element per thread)",
                                     i.display_name(), i.values.type_str(), l.str()),
                         i.loc);
    if (!target_.is_cpu() && target_.sm < 90) {
      if (i.values.dtype() == dtypes::bfloat16)
        throw CompileError(fmt::format("{}: atomic bfloat16 operations need sm_90, and the target is {}",
                                       i.display_name(), target_.arch),
                           i.loc);
      if (i.scope == "cluster")
        throw CompileError(fmt::format("{}: scope='cluster' needs sm_90, and the target is {}", i.display_name(),
                                       target_.arch),
                           i.loc);
    }
    Lowering r;
    r.op = MachineOp::Atom;
    r.vector = 1;
    // red has add / min / max (no exch, cas) and relaxed / release order only.
    bool reducible = i.op != AtomicOp::Exch && i.op != AtomicOp::Cas;
    r.red = !used && reducible && (i.sem == "relaxed" || i.sem == "release");
    // A 16-bit float add whose old values are never read goes by pairs (red .f16x2 / .bf16x2)
    // where each thread's two neighbouring elements are one aligned 4-byte word of dst, both in
    // bounds or both out: ptxas makes a scalar 16-bit red a compare-and-swap loop on sm_90, the
    // pair one REDG.
    DataType t = i.values.dtype();
    if (r.red && !i.store && !i.scatter() && i.dst.is_global() && (i.op == AtomicOp::Add || i.op == AtomicOp::Sub) &&
        (t == dtypes::float16 || t == dtypes::bfloat16)) {
      Contiguity c = contiguity(l);
      GlobalAccess g = facts_.tile(i, i.dst, i.offsets, i.dims, i.checked_dims);
      if (global_vector_obstacle(facts_, g, c.dim, c.run, 2).empty()) r.vector = 2;
    }
    if (i.store) r.op = MachineOp::Simt;  // a plain store, element by element
    return r;
  }

  const Scope& scope() const { return scopes_.back(); }

  Lowering global_access(const InstNode& inst, const Tensor& reg, const GlobalAccess& g) const {
    if (!reg->layout.defined()) throw CompileError(fmt::format("{}: the register tensor has no layout; run "
                                                               "infer_layouts first", inst.display_name()), inst.loc);
    Contiguity c = contiguity(reg->layout);
    return simt_access(reg, global_vector_width(facts_, g, c.dim, c.run));
  }

  // ldg / stg: the user chose the width; every thread moves the whole vector, which must be
  // provably aligned to its size (16 bytes for 256 bits: two 128-bit accesses).
  Lowering global_vector(const InstNode& inst, const CopyRegion& r, const Tensor& reg, int64_t bits) const {
    GlobalAccess g = facts_.global_region(inst, r, r.tensor.rank());
    std::vector<Expr> start(g.offsets.size(), int_const(0));
    Expr offset = facts_.simplify(global_offset(g, start));
    int64_t eb = bytes_of(g.dtype);
    int64_t need = std::min<int64_t>(bits / 8, 16);
    int64_t known = std::min<int64_t>(g.pointer_alignment, facts_.divisor(offset) * eb);
    if (known % need != 0)
      throw CompileError(fmt::format("{}: the {}-bit access needs a {}-byte aligned address, but only {} byte{} can be "
                                     "proven for {} at element offset {} (the pointer is known aligned to {} byte{}, the "
                                     "offset to a multiple of {} elements of {}); specialize or assume aligned "
                                     "offsets, or use a narrower width",
                                     inst.display_name(), bits, need, known, known == 1 ? "" : "s",
                                     region_str(r), to_string(offset), g.pointer_alignment,
                                     g.pointer_alignment == 1 ? "" : "s", facts_.divisor(offset), g.dtype.name()),
                         inst.loc);
    Lowering l = simt_access(reg, bits / std::max<int64_t>(1, g.dtype.bits()));
    l.thread_private = false;  // every thread touches the whole vector
    return l;
  }

  Lowering shared_access(const SharedView& view, const Tensor& reg, bool load) const {
    Lowering m = plan_matrix_copy(facts_, target_.sm, view, reg, scope().threads, scope().begin, load);
    if (m.defined()) return m;
    Contiguity c = contiguity(reg->layout);
    return simt_access(reg, shared_vector_width(facts_, view, c.dim, c.run));
  }

  // cp.async with the widest vector both sides allow. Where the global side's only obstacle to
  // a wider one is a ragged extent, the vectors straddling it copy their in-bounds part
  // (src-size) and zero-fill the rest: tail_dim. Below 4 bytes cp.async has no form, and the
  // copy is synchronous, element by element: the note says why, and so does a warning.
  Lowering copy_async(const CopyAsyncInst& i) {
    // The copy holds no registers: its thread mapping starts from 16-byte vectors per thread, not
    // from the register default's spread of a small tile (a 256-byte row of scales on 128 threads
    // is 16 cp.async of 16 bytes, not 128 synchronous 2-byte loads).
    int64_t widest = std::max<int64_t>(1, 128 / std::max(1, i.dst.dtype().bits()));
    RegisterLayout probe = default_register_layout(i.dst.static_shape(), i.dst.dtype(), scope().threads, widest);
    Contiguity cc = contiguity(probe);
    // check_bounds=false has no predicate (insert_bounds_predicates recorded no checked dims).
    GlobalAccess g = facts_.tile(i, i.src, i.offsets, i.dims, i.checked_dims);
    const SharedView& view = facts_.shared(i, i.dst);
    DataType dt = i.dst.dtype();
    int64_t shared_w = shared_vector_width(facts_, view, cc.dim, cc.run);
    int64_t w = std::min(global_vector_width(facts_, g, cc.dim, cc.run), shared_w);
    Lowering l;
    if (!dt.is_subbyte()) {
      int64_t tail_w = std::min(global_vector_width(facts_, g, cc.dim, cc.run, true), shared_w);
      if (tail_w > w && vector_bytes(dt, tail_w) >= 4) {
        w = tail_w;
        l.tail_dim = g.dims[size_t(cc.dim)];
      }
    }
    l.vector = w;
    l.op = cp_async_op(vector_bytes(dt, w));
    l.completion = l.op == MachineOp::Simt ? Completion::Synchronous : Completion::CpAsyncGroup;
    l.mapping = default_register_layout(i.dst.static_shape(), dt, scope().threads, w);
    if (l.op == MachineOp::Simt) {
      // The narrowest cp.async, 4 bytes: what stands in its way.
      int64_t w4 = dt.bits() <= 32 ? 32 / dt.bits() : 1;
      std::string why = global_vector_obstacle(facts_, g, cc.dim, cc.run, w4, !dt.is_subbyte());
      if (why.empty()) why = "in shared memory, " + shared_vector_obstacle(facts_, view, cc.dim, cc.run, w4);
      int64_t bytes = vector_bytes(dt, w);
      l.note = fmt::format("cp.async moves 4, 8 or 16 bytes, and {}-byte vectors are the widest legal here ({}): "
                           "a synchronous copy, {} byte{} at a time",
                           bytes, why, bytes, bytes == 1 ? "" : "s");
      synchronous_copies_.push_back(fmt::format("{} at {} ({} from {}): {}", i.display_name(), i.loc.str(),
                                                i.dst.type_str(), i.src.type_str(), l.note));
    }
    return l;
  }

  // c2d_im2col: vectorized SIMT gathers. A vector of w elements runs along the channels: its
  // elements share the pixel and the kernel position when w divides C and the tile's k
  // extent, and are contiguous and aligned when the channels are and every stride and the
  // pointer allow w.
  Lowering im2col(const Im2colInst& i) {
    TensorMapSpec spec;
    std::string why = tma_im2col_plan(i, spec);
    bool split = i.barrier.defined();  // completes on the kernel's barrier
    if (why.empty()) {
      Lowering l;  // else synchronous: every thread of the group waits on a copy barrier
      l.op = MachineOp::TmaLoad;
      l.completion = split ? Completion::MbarrierTx : Completion::Synchronous;
      l.tensor_map = tensor_map(spec);
      if (!split) l.copy_barrier = int(copy_barriers_++);
      return l;
    }
    // Split-phase gathers exist on the CPU backend only, where they complete before the arrival.
    if (split && !target_.is_cpu())
      throw CompileError(fmt::format("c2d_im2col with a barrier is a TMA im2col load, and this one cannot be: {} "
                                     "(img {}, col {})",
                                     why, i.img.type_str(), i.col.type_str()),
                         i.loc);
    DataType dt = i.col.dtype();
    auto shape = i.col.static_shape();
    int64_t eb = bytes_of(dt);
    const GlobalAccess& g = facts_.global(i, i.img);
    auto legal = [&](int64_t v) {
      if (v == 1) return true;
      if (shape[1] % v || !facts_.simplify(g.strides[3]).is_int_const(1) || facts_.divisor(g.shape[3]) % v) return false;
      for (int d = 0; d < 3; ++d)
        if (facts_.divisor(g.strides[d]) % v) return false;
      return g.pointer_alignment % (v * eb) == 0 && (!g.param_offset_bytes.defined() ||
                                                      facts_.divisor(g.param_offset_bytes) % (v * eb) == 0);
    };
    int64_t w = std::max<int64_t>(1, 16 / eb);
    while (!legal(w)) w /= 2;
    Lowering l;
    l.op = MachineOp::Simt;
    l.vector = w;
    l.mapping = default_register_layout(shape, dt, scope().threads, w);
    l.note = "tma im2col: " + why;
    if (split) l.completion = Completion::MbarrierTx;
    return l;
  }

  Lowering dot(const DotInst& i) const {
    if (i.a.rank() != 2 || i.b.rank() != 2)
      throw CompileError(fmt::format("dot: only rank-2 operands are lowered, got {} and {}", i.a.type_str(),
                                     i.b.type_str()),
                         i.loc);
    auto sa = i.a.static_shape(), sb = i.b.static_shape();
    // The plan whose layouts the operands have (layout inference chose among them).
    auto plans = dot_plans(i.a.dtype(), i.c.dtype(), sa[0], sb[1], sa[1], scope().threads);
    auto match = std::find_if(plans.begin(), plans.end(), [&](const DotPlan& p) {
      return i.a->layout == p.a && i.b->layout == p.b && i.c->layout == p.c && i.out->layout == p.c;
    });
    DotPlan p = match == plans.end() ? plans[0] : *match;
    if (match == plans.end())
      throw CompileError(fmt::format("dot: the operand layouts ({}, {}, {}) are not the ones layout inference gives a "
                                     "dot of this shape on {} threads; remove the annotations that changed them",
                                     i.a->layout.str(), i.b->layout.str(), i.c->layout.str(), scope().threads),
                         i.loc);
    Lowering l;
    l.op = p.op;
    l.dot = p.tiling;
    l.mapping = p.c;
    return l;
  }

  // wgmma.mma: the split into m64nNkK instructions and each shared operand's matrix
  // descriptor, read from the operand's layout: a K-major tile (K stride 1) whose rows are
  // exactly one TMA swizzle span (32, 64 or 128 bytes), starting on a whole 8-row swizzle atom.
  Lowering wgmma(const WgmmaMmaInst& i) const {
    auto fail = [&](const std::string& what) -> Lowering {
      throw CompileError(fmt::format("wgmma.mma: {}; a {}, b {}, d {}", what, i.a.type_str(), i.b.type_str(),
                                     i.d.type_str()),
                         i.loc);
    };
    if (!target_.has_wgmma())
      return fail(fmt::format("wgmma needs sm_90a, the target is {}", target_.arch));
    auto sa = i.a.static_shape();
    WgmmaPlan p = plan_wgmma(i.a.dtype(), sa[0], i.n(), sa[1], scope().threads);
    if (i.d->layout != p.d)
      return fail(fmt::format("d's layout {} is not the wgmma accumulator layout {} (remove the annotation that "
                              "changed it)",
                              i.d->layout.str(), p.d.str()));
    auto describe = [&](const char* name, const Tensor& t, int k_dim, WgmmaOperand& o, bool mn_major = false) {
      std::string why;
      auto d = wgmma_shared_operand(facts_, i, t, k_dim, p.tiling.k_instr, &why, mn_major);
      if (!d) fail(fmt::format("{} {}", name, why));
      o = *d;
    };
    if (i.a.is_register()) {
      if (i.a->layout != p.a)
        return fail(fmt::format("a's layout {} is not the wgmma A-fragment layout {} (remove the annotation that "
                                "changed it)",
                                i.a->layout.str(), p.a.str()));
      p.tiling.a.registers = true;
    } else {
      describe("a", i.a, 1, p.tiling.a);
    }
    describe("b", i.b, 0, p.tiling.b, true);
    // b in column blocks: an instruction reads whole blocks, or lies inside one.
    if (int64_t atom = i.b.static_shape()[i.b.rank() - 1];
        i.b.rank() == 3 && p.tiling.n_instr % atom && atom % p.tiling.n_instr)
      return fail(fmt::format("b's column blocks are {} wide, but n splits into instructions of n = {}: give the "
                              "product an n whose instructions take whole blocks",
                              atom, p.tiling.n_instr));
    Lowering l;
    l.op = MachineOp::Wgmma;
    l.completion = Completion::WgmmaGroup;
    l.wgmma = p.tiling;
    l.mapping = p.d;
    if (i.from_dot) l.note = "dot";
    return l;
  }

  // --- Blackwell: tcgen05 and cluster launch control ----------------------------------------

  // The target has the instruction (tcgen05: sm_100a / sm_103a; cluster launch control: sm_100).
  void check_blackwell(const InstNode& i) const {
    bool clc = i.def().group == "clc";
    if (clc ? target_.has_cluster_launch_control() : target_.has_tcgen05()) return;
    throw CompileError(fmt::format("{}: {} needs {}, the target is {}", i.display_name(),
                                   clc ? "cluster launch control" : "tensor memory (tcgen05)",
                                   clc ? "sm_100 or newer" : "sm_100a or sm_103a", target_.arch),
                       i.loc);
  }

  // tcgen05.ld / st of a rank-2 [lanes, n] tile: the group has one thread per lane, its warp w
  // (w % 4 being the lane quarter the SM gives it access to) on lanes 32w..32w+31 of the tile.
  Lowering tcgen05_ldst(const InstNode& i, const Tensor& tmem, const Tensor& regs, MachineOp op) const {
    check_blackwell(i);
    auto fail = [&](const std::string& what) -> Lowering {
      throw CompileError(fmt::format("{}: {}; tensor {}, registers {}", i.display_name(), what, tmem.type_str(),
                                     regs.type_str()),
                         i.loc);
    };
    const TmemView& v = facts_.tmem(i, tmem);
    auto shape = tmem.static_shape();
    const Scope& sc = scope();
    if (sc.threads != shape[0])
      return fail(fmt::format("the current thread group has {} threads but the tile {} lanes: one thread per lane "
                              "(thread t reads lane t)",
                              sc.threads, shape[0]));
    if (sc.begin % 128 != v.lane_offset)
      return fail(fmt::format("the tile starts at lane {}, but the group's first thread {} may only reach lanes {} "
                              "onwards (warp w of the block reads lanes 32 * (w % 4) ..): start the group at thread "
                              "128 * j + {}",
                              v.lane_offset, sc.begin, sc.begin % 128, v.lane_offset));
    if (v.col_strides_bits.size() != 2 || v.col_strides_bits[1] != tmem.dtype().bits())
      return fail("the tile's columns must be contiguous (a slice of the last dim keeps them)");
    int64_t words = shape[1] * tmem.dtype().bits();
    if (words % 32) return fail("each lane of the tile must hold whole 32-bit columns");
    words /= 32;
    if (facts_.divisor(v.col_bits) % 32)
      return fail(fmt::format("the tile must start on a 32-bit column (bit offset {})", to_string(v.col_bits)));
    if (regs->layout.defined() && regs->layout != tcgen05_ldst_layout(shape))
      return fail(fmt::format("the registers' layout {} is not tcgen05's {} (remove the annotation that changed it)",
                              regs->layout.str(), tcgen05_ldst_layout(shape).str()));
    Lowering l;
    l.op = op;
    l.completion = op == MachineOp::Tcgen05Ld ? Completion::Tcgen05Load : Completion::Tcgen05Store;
    l.ldst.columns = std::min<int64_t>(words, 32);
    while (words % l.ldst.columns) l.ldst.columns /= 2;
    l.ldst.instructions = words / l.ldst.columns;
    l.mapping = tcgen05_ldst_layout(shape);
    return l;
  }

  // A shared tcgen05 operand's matrix descriptor: wgmma's rule (K-major rows of one swizzle span)
  // with tcgen05's swizzle codes.
  WgmmaOperand tcgen05_operand(const InstNode& i, const char* name, const Tensor& t, int k_dim, int64_t k_instr) const {
    std::string why;
    auto d = wgmma_shared_operand(facts_, i, t, k_dim, k_instr, &why);
    if (!d)
      throw CompileError(fmt::format("{}: {} {}; {} is {}", i.display_name(), name, why, name, t.type_str()), i.loc);
    d->swizzle_code = d->swizzle_bytes == 128 ? 2 : d->swizzle_bytes == 64 ? 4 : 6;
    return *d;
  }

  Lowering tcgen05_mma(const DefinedInst& i) const {
    check_blackwell(i);
    const Tensor &a = i.tensor("a"), &b = i.tensor("b"), &d = i.tensor("d");
    int64_t cta_group = std::stoll(i.attr("cta_group"));
    auto fail = [&](const std::string& what) -> Lowering {
      throw CompileError(fmt::format("tcgen05.mma: {}; a {}, b {}, d {}", what, a.type_str(), b.type_str(),
                                     d.type_str()),
                         i.loc);
    };
    if (cta_group == 2 && kernel_cluster_size_ % 2)
      return fail("cta_group=2 computes with the two blocks of a pair of the cluster: set attrs.cluster_blocks to an "
                  "even number of blocks");
    auto sa = a.static_shape(), sb = b.static_shape();
    DataType ab = a.dtype();
    Tcgen05MmaTiling t;
    t.cta_group = cta_group;
    t.m = sa[0];
    bool f8 = ab.bits() == 8;
    t.kind = ab == dtypes::tfloat32 ? "tf32" : f8 ? "f8f6f4" : "f16";
    t.k_instr = ab == dtypes::tfloat32 ? 8 : f8 ? 32 : 16;
    t.k_steps = sa[1] / t.k_instr;
    int64_t n = sb[1] * cta_group;
    t.n_instr = cta_group == 2 ? n : std::min<int64_t>(n, 256);
    while (n % t.n_instr) t.n_instr -= 8;
    t.n_blocks = n / t.n_instr;
    if (a.is_tmem()) {
      const TmemView& v = facts_.tmem(i, a);
      if (v.lane_offset != 0 || facts_.divisor(v.col_bits) % 32)
        return fail("a in tensor memory must start at lane 0 on a 32-bit column");
      t.a_tmem = true;
    } else {
      t.a = tcgen05_operand(i, "a", a, 1, t.k_instr);
    }
    t.b = tcgen05_operand(i, "b", b, 0, t.k_instr);
    const TmemView& dv = facts_.tmem(i, d);
    if (dv.lane_offset != 0 || facts_.divisor(dv.col_bits) % 32 || dv.col_strides_bits.back() != d.dtype().bits())
      return fail("d must start at lane 0 on a 32-bit column, its columns contiguous");
    // The instruction descriptor (PTX ISA, "Instruction descriptor format" for .kind::tf32, f16,
    // f8f6f4): D type at bits 4-5, A and B types at 7-9 and 10-12, K-major operands (bits 15, 16
    // zero), N >> 3 at 17-22, M >> 4 at 24-28.
    auto format = [&](DataType x) -> uint32_t {
      if (x == dtypes::bfloat16) return 1;
      if (x == dtypes::tfloat32) return 2;
      if (x == dtypes::float8_e5m2) return 1;
      return 0;  // float16, float8_e4m3
    };
    uint32_t dfmt = d.dtype() == dtypes::float32 ? 1 : 0;
    t.idesc = (dfmt << 4) | (format(ab) << 7) | (format(ab) << 10) | (uint32_t(t.n_instr >> 3) << 17) |
              (uint32_t((t.m * cta_group) >> 4) << 24);
    Lowering l;
    l.op = MachineOp::Tcgen05Mma;
    l.completion = Completion::Tcgen05;
    l.tcgen05 = t;
    return l;
  }

  // tcgen05.cp.128x256b: the shared tile [128, n] K-major in rows of one swizzle span, 256 bits
  // of every lane per instruction.
  Lowering tcgen05_copy(const DefinedInst& i) const {
    check_blackwell(i);
    const Tensor &src = i.tensor("src"), &dst = i.tensor("dst");
    const TmemView& v = facts_.tmem(i, dst);
    if (v.lane_offset != 0 || facts_.divisor(v.col_bits) % 32 || v.col_strides_bits.back() != dst.dtype().bits())
      throw CompileError(fmt::format("tcgen05.copy: dst must start at lane 0 on a 32-bit column, its columns "
                                     "contiguous; dst {}",
                                     dst.type_str()),
                         i.loc);
    Tcgen05MmaTiling t;
    int64_t per = 256 / src.dtype().bits();  // elements of 256 bits
    t.a = tcgen05_operand(i, "src", src, 1, per);
    t.n_blocks = src.static_shape()[1] / per;
    Lowering l;
    l.op = MachineOp::Tcgen05Cp;
    l.completion = Completion::Tcgen05;
    l.tcgen05 = t;
    return l;
  }

  // --- copy --------------------------------------------------------------------------------

  [[noreturn]] void fail(const CopyInst& c, const std::string& what) const {
    throw CompileError(fmt::format("{}: {}; src {}, dst {}", c.display_name(), what, region_str(c.src),
                                   region_str(c.dst)),
                       c.loc);
  }

  // The widest vector a copy region allows along tile dim `dim`.
  int64_t region_vector(const CopyInst& c, const CopyRegion& r, int tile_rank, int dim, int64_t run) const {
    if (r.tensor.is_global()) return global_vector_width(facts_, facts_.global_region(c, r, tile_rank), dim, run);
    return shared_vector_width(facts_, facts_.shared_region(c, r, tile_rank), dim, run);
  }

  std::string tma_plan(const CopyInst& c, bool proven, TensorMapSpec& spec) const {
    return tilus::tma_plan(facts_, target_, c, proven, spec);
  }
  std::string tma_im2col_plan(const Im2colInst& i, TensorMapSpec& spec) const {
    return tilus::tma_im2col_plan(facts_, target_, i, spec);
  }

  // The kernel's tensor map `spec` (an equal one is shared).
  int tensor_map(const TensorMapSpec& spec) {
    for (size_t i = 0; i < tensor_maps_.size(); ++i)
      if (tensor_maps_[i].same(spec)) return int(i);
    tensor_maps_.push_back(spec);
    return int(tensor_maps_.size()) - 1;
  }

  // The lowering of a TMA copy through `spec` (added to the kernel's tensor maps).
  Lowering tma_copy(const CopyInst& c, const TensorMapSpec& spec, bool synchronous) {
    Lowering l;
    bool load = c.src.tensor.is_global();
    l.op = load ? MachineOp::TmaLoad : MachineOp::TmaStore;
    l.completion = synchronous ? Completion::Synchronous : load ? Completion::MbarrierTx : Completion::TmaStoreGroup;
    l.tensor_map = tensor_map(spec);
    if (synchronous && load) l.copy_barrier = int(copy_barriers_++);
    return l;
  }

  // Applies coalesced_width to the widest legal vector `legal` (of a run of `run` slots).
  int64_t force_width(const CopyInst& c, int64_t legal, int64_t run, std::vector<std::string>& notes) const {
    if (!c.coalesced_width) return legal;
    int64_t want = *c.coalesced_width;
    if (want <= legal) return want;
    std::string why = fmt::format("coalesced_width={} is not legal here (contiguous, aligned vectors of at most {} "
                                  "elements of {} on both sides{}); using {}",
                                  want, legal, c.dst.tensor.dtype().name(),
                                  run < want ? fmt::format(", runs of {}", run) : "", legal);
    spdlog::warn("{}: {} at {}", c.display_name(), why, c.loc.str());
    notes.push_back(why);
    return legal;
  }

  Lowering copy(const CopyInst& c) {
    const Tensor& s = c.src.tensor;
    const Tensor& d = c.dst.tensor;
    DataType dt = d.dtype();
    std::vector<std::string> notes;
    auto finish = [&](Lowering l) {
      l.note = fmt::format("{}", fmt::join(notes, "; "));
      return l;
    };
    bool g2s = s.is_global() && d.is_shared();
    bool s2g = s.is_shared() && d.is_global();
    bool cp_async = c.use_cp_async || c.api == CopyApi::AsyncCopy;
    TensorMapSpec spec;
    // 1. Explicit TMA (the TMA methods, or the use_tma annotation of a synchronous copy).
    if (c.use_tma) {
      std::string why = tma_plan(c, false, spec);
      if (!why.empty())
        fail(c, (c.api == CopyApi::Copy ? "use_tma asks for a TMA copy, which is " : "this TMA copy is ") + why);
      return finish(tma_copy(c, spec, c.api == CopyApi::Copy));
    }
    // 2. Explicit cp.async.
    if (cp_async) {
      if (!g2s) fail(c, "cp.async copies global to shared memory");
      if (!target_.has_cp_async()) fail(c, fmt::format("cp.async needs sm_80 or newer, the target is {}", target_.arch));
    } else {
      // 3. Automatic TMA.
      if ((g2s || s2g) && !c.disable_tma) {
        std::string why = tma_plan(c, true, spec);
        if (why.empty()) return finish(tma_copy(c, spec, true));
        notes.push_back("tma: " + why);
      }
      // 4. ldmatrix / stmatrix.
      bool load = s.is_shared() && d.is_register();
      bool store = s.is_register() && d.is_shared();
      if ((load || store) && !c.loop_layout.defined() && !c.coalesced_width) {
        const CopyRegion& mem = load ? c.src : c.dst;
        const Tensor& reg = load ? d : s;
        Lowering m = plan_matrix_copy(facts_, target_.sm, facts_.shared_region(c, mem, reg.rank()), reg,
                                      scope().threads, scope().begin, load);
        if (m.defined()) return finish(m);
      }
    }
    // 5. Vectorized SIMT (or the vectors of the explicit cp.async).
    if (s.is_register() || d.is_register()) {
      const Tensor& reg = s.is_register() ? s : d;
      const CopyRegion& mem = s.is_register() ? c.dst : c.src;
      if (c.loop_layout.defined())
        fail(c, "loop_layout maps the threads of memory-to-memory copies; here the register tensor's layout does");
      if (!reg->layout.defined()) fail(c, "the register tensor has no layout; run infer_layouts first");
      if (s.is_register())
        for (size_t k = 0; k < mem.extents.size(); ++k) {
          int rk = int(k) - int(mem.extents.size()) + reg.rank();
          int64_t re = rk >= 0 ? reg.static_shape()[rk] : 1;
          if (!facts_.simplify(mem.extents[k]).is_int_const(re))
            fail(c, "a register tensor is stored to a region of its own extents (right-aligned; extra leading "
                    "extents 1)");
        }
      Contiguity cc = contiguity(reg->layout);
      int64_t legal = region_vector(c, mem, reg.rank(), cc.dim, cc.run);
      Lowering l = simt_access(reg, force_width(c, legal, cc.run, notes));
      if (s.is_register() && mem.tensor.is_global() && !c.coalesced_width)
        widen_by_lane_exchange(l, reg, facts_.global_region(c, mem, reg.rank()));
      return finish(l);
    }
    std::vector<int64_t> extents;
    for (auto& e : c.dst.extents) {
      Expr v = facts_.simplify(e);
      if (!v.is_int_const())
        fail(c, fmt::format("memory-to-memory copies need constant extents, got {}", exprs_str(c.dst.extents)));
      extents.push_back(v.int_value());
    }
    int rank = int(extents.size());
    auto legal_along = [&](int dim, int64_t run) {
      return std::min(region_vector(c, c.src, rank, dim, run), region_vector(c, c.dst, rank, dim, run));
    };
    Lowering l;
    if (c.scalar) {
      l.mapping = replicated(scope().threads) * local(std::vector<int64_t>(rank, 1));
      l.vector = 1;
    } else if (c.loop_layout.defined()) {
      l.mapping = c.loop_layout;
      Contiguity cc = contiguity(c.loop_layout);
      l.vector = force_width(c, legal_along(cc.dim, cc.run), cc.run, notes);
    } else {
      int64_t run = rank ? pow2_divisor(extents.back(), std::max<int64_t>(1, 128 / dt.bits())) : 1;
      l.vector = force_width(c, rank ? legal_along(rank - 1, run) : 1, run, notes);
      l.mapping = default_register_layout(extents, dt, scope().threads, l.vector);
    }
    l.op = MachineOp::Simt;
    if (cp_async) {
      l.op = cp_async_op(vector_bytes(dt, l.vector));
      // A copy selected as cp.async commits its own group (async_copy too, even element by
      // element, so that the kernel's wait_group counts stay right).
      l.commits_group = l.op != MachineOp::Simt || c.api == CopyApi::AsyncCopy;
      l.completion = l.op == MachineOp::Simt ? Completion::Synchronous : Completion::CpAsyncGroup;
      if (l.op == MachineOp::Simt)
        notes.push_back(fmt::format("cp.async moves 4, 8 or 16 bytes; the widest legal vector here is {} byte{}: "
                                    "element by element, synchronously",
                                    vector_bytes(dt, l.vector), vector_bytes(dt, l.vector) == 1 ? "" : "s"));
    }
    return finish(l);
  }
};

}  // namespace

std::string tma_load_problem(const KernelFacts& facts, const Target& target, const CopyInst& c) {
  TensorMapSpec spec;
  return tma_plan(facts, target, c, true, spec);
}

std::string tma_im2col_problem(const KernelFacts& facts, const Target& target, const Im2colInst& i) {
  TensorMapSpec spec;
  return tma_im2col_plan(facts, target, i, spec);
}

Program select_instructions(const Program& program, const Target& target) {
  return map_kernels(program, [&](const Kernel& k) { return Selector(k, target).run(k); });
}

}  // namespace tilus
