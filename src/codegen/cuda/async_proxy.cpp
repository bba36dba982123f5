// mbarriers, TMA copies and proxy fences (sm_90), as their instructions and lowering records
// say. A TMA copy is issued by the first thread of the current thread group; a synchronous
// `copy` lowered to TMA also waits, in every thread of the group, on its copy barrier.
#include "emitter.h"
#include "tilus/ir/inst_def.h"

namespace tilus::cuda {

namespace {

// "true, false" template arguments of the mbarrier helpers for a sem / scope.
std::string mbarrier_args(const MbarrierInst& i) {
  return fmt::format("<{}, {}>", i.sem == "relaxed" ? "true" : "false", i.scope == "cluster" ? "true" : "false");
}

}  // namespace

std::string Emitter::barrier_address(const InstNode& inst, const Tensor& barrier) {
  const SharedView& view = facts_.shared(inst, barrier);
  Expr off = simplify(shared_offset(view, std::vector<Expr>(size_t(barrier.rank()), int_const(0))));
  return fmt::format("(tilus::smem_addr(tilus_smem) + {}u + uint32_t({}) * 8u)", view.base_bytes, expr(off));
}

std::string Emitter::elected() { return fmt::format("{} == 0", expr(scope().thread)); }

void Emitter::emit_async_proxy(const InstNode& inst) {
  switch (inst.kind()) {
    case InstKind::MbarrierInit: {
      auto& i = static_cast<const MbarrierInitInst&>(inst);
      std::string base = barrier_address(inst, i.barriers);
      open(fmt::format("if ({})", elected()));
      for (size_t k = 0; k < i.counts.size(); ++k)
        linef("tilus::mbarrier_init({} + {}u, uint32_t({}));", base, 8 * k, expr(simplify(i.counts[k])));
      line("tilus::fence_mbarrier_init();");
      close();
      return;
    }
    case InstKind::Mbarrier: {
      auto& i = static_cast<const MbarrierInst&>(inst);
      std::string bar = barrier_address(inst, i.barrier);
      // A phase kept in a one-element register tensor: every thread holds it in slot 0.
      std::string v = i.value_tensor.defined() ? fmt::format("{}[0]", reg(i.value_tensor)) : expr(simplify(i.value));
      bool needs90 = i.op == MbarrierOp::ArriveExpectTx || i.op == MbarrierOp::ExpectTx || i.cta_id.defined() ||
                     i.sem == "relaxed" || i.scope == "cluster";
      if (needs90 && target.sm < 90)
        fail(inst, fmt::format("{}{} needs sm_90, the target is {}", inst.display_name(),
                               i.cta_id.defined() ? " on a peer block" : "", target.arch));
      switch (i.op) {
        case MbarrierOp::Arrive:
        case MbarrierOp::ArriveExpectTx: {
          const char* fn = i.op == MbarrierOp::Arrive ? "mbarrier_arrive" : "mbarrier_arrive_expect_tx";
          if (i.cta_id.defined())
            linef("tilus::{}_remote<{}>({}, uint32_t({}), uint32_t({}));", fn, i.scope == "cluster" ? "true" : "false",
                  bar, expr(simplify(i.cta_id)), v);
          else
            linef("tilus::{}{}({}, uint32_t({}));", fn, mbarrier_args(i), bar, v);
          return;
        }
        case MbarrierOp::ExpectTx:
          linef("tilus::mbarrier_expect_tx<{}>({}, uint32_t({}));", i.scope == "cluster" ? "true" : "false", bar, v);
          return;
        case MbarrierOp::Wait:
          linef("tilus::mbarrier_wait{}({}, uint32_t({}) & 1u);", mbarrier_args(i), bar, v);
          return;
        case MbarrierOp::CpAsyncArrive:
          if (target.sm < 80)
            fail(inst, fmt::format("{} (cp.async.mbarrier.arrive) needs sm_80, the target is {}", inst.display_name(),
                                   target.arch));
          linef("tilus::cp_async_mbarrier_arrive_noinc({});", bar);
          return;
      }
      return;
    }
    case InstKind::TmaCommitGroup: line("tilus::tma_commit_group();"); return;
    case InstKind::TmaWaitGroup: {
      auto& i = static_cast<const TmaWaitGroupInst&>(inst);
      linef("tilus::tma_wait_group<{}, {}>();", i.n, i.read ? "true" : "false");
      return;
    }
    case InstKind::FenceProxyAsync: {
      auto& i = static_cast<const FenceProxyAsyncInst&>(inst);
      if (target.sm < 90) fail(inst, fmt::format("fence.proxy.async needs sm_90, the target is {}", target.arch));
      linef("tilus::fence_proxy_async_{}();", i.space);
      return;
    }
    case InstKind::ClcQuery: {
      auto& i = static_cast<const ClcQueryInst&>(inst);
      const SharedView& view = facts_.shared(inst, i.response);
      Expr off = simplify(shared_offset(view, std::vector<Expr>(size_t(i.response.rank()), int_const(0))));
      std::string resp = fmt::format("(tilus::smem_addr(tilus_smem) + {}u + uint32_t({}) * {}u)", view.base_bytes,
                                     expr(off), elem_bytes(i.response.dtype()));
      std::string v = fresh("is_canceled"), x = fresh("clc_x"), y = fresh("clc_y"), z = fresh("clc_z");
      linef("bool {};", v);
      linef("int32_t {}, {}, {};", x, y, z);
      linef("tilus::clc_query({}, {}, {}, {}, {});", resp, v, x, y, z);
      var_names_[i.is_canceled.get()] = v;
      var_names_[i.x.get()] = x;
      var_names_[i.y.get()] = y;
      var_names_[i.z.get()] = z;
      return;
    }
    case InstKind::Defined: {
      auto& i = static_cast<const DefinedInst&>(inst);
      if (i.definition->name == "clc.try_cancel") {
        const Tensor& r = i.tensor("response");
        const SharedView& view = facts_.shared(inst, r);
        Expr off = simplify(shared_offset(view, std::vector<Expr>(size_t(r.rank()), int_const(0))));
        open(fmt::format("if ({})", elected()));
        linef("tilus::clc_try_cancel<{}>(tilus::smem_addr(tilus_smem) + {}u + uint32_t({}) * {}u, {});",
              i.attr("multicast"), view.base_bytes, expr(off), elem_bytes(r.dtype()),
              barrier_address(inst, i.tensor("mbarrier")));
        close();
        return;
      }
      if (i.definition->name == "tcgen05_mma_arrive") {
        linef("asm volatile(\"tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];\" :: "
              "\"r\"({}) : \"memory\");",
              barrier_address(inst, i.tensor("mbar")));
        return;
      }
      fail(inst, "not an mbarrier, TMA or fence instruction");
    }
    default: fail(inst, "not an mbarrier, TMA or fence instruction");
  }
}

void Emitter::emit_tma_copy(const CopyInst& i) {
  const Lowering& rec = i.lowering;
  bool load = rec.op == MachineOp::TmaLoad;
  if (rec.tensor_map < 0 || rec.tensor_map >= int(kernel.tensor_maps.size()))
    throw InternalError(fmt::format("{}: TMA copy without a tensor map", i.display_name()), i.loc);
  const TensorMapSpec& map = kernel.tensor_maps[size_t(rec.tensor_map)];
  const CopyRegion& g = load ? i.src : i.dst;
  const CopyRegion& s = load ? i.dst : i.src;
  int rank = int(g.extents.size());
  // Coordinates innermost first; the shared tile's address before the swizzle (TMA applies it).
  std::string coords;
  for (int d = rank - 1; d >= 0; --d)
    coords += fmt::format("{}int32_t({})", d == rank - 1 ? "" : ", ", expr(simplify(g.offsets[size_t(d)])));
  SharedView view = facts_.shared_region(i, s, rank);
  Expr start = shared_start_unswizzled(view);
  guard_shared_tile(i, view, map.box);
  int64_t eb = elem_bytes(map.dtype);
  std::string smem = fmt::format("(tilus::smem_addr(tilus_smem) + {}u + uint32_t({}) * {}u)", view.base_bytes,
                                 expr(simplify(start)), eb);
  int64_t bytes = eb;
  for (int64_t b : map.box) bytes *= b;
  std::string c = fresh("tma_coords");
  std::string tmap = fmt::format("&tilus_tensor_map_{}", rec.tensor_map);
  // TILUS_DEBUG_BOUNDS: a box whose first element is not 16-byte aligned (an innermost
  // coordinate select_instructions could not prove a multiple of 16 bytes) prints the
  // instruction, its line and the coordinate, and traps, before the hardware faults on it.
  auto guard_start = [&] {
    TmaStartCheck st = facts_.tma_start(g.offsets[size_t(rank - 1)], map.dtype);
    if (!options.debug_bounds || st.aligned == true) return;
    open(fmt::format("if ({}[0] % {} != 0)", c, st.multiple));
    std::string head = c_text(fmt::format("tilus: {}: {}: the TMA box starts at innermost offset ", i.loc.str(),
                                          i.display_name()),
                              true);
    std::string tail = c_text(fmt::format(", not a multiple of {} elements of {} (16 bytes): the hardware faults on a "
                                          "box whose first element is not 16-byte aligned (block (",
                                          st.multiple, map.dtype.name()),
                              true);
    linef("printf(\"{}%d{}%d, %d, %d))\\n\", int({}[0]), int(blockIdx.x), int(blockIdx.y), int(blockIdx.z));", head,
          tail, c);
    line("__trap();");
    close();
  };
  if (load) {
    std::string bar = rec.copy_barrier >= 0
                          ? fmt::format("(tilus::smem_addr(tilus_smem) + {}u)", kernel.copy_barrier_offset + 8 * rec.copy_barrier)
                          : barrier_address(i, i.barrier);
    open(fmt::format("if ({})", elected()));
    linef("const int32_t {}[{}] = {{{}}};", c, rank, coords);
    guard_start();
    std::string policy = declare_policy(*this, i.eviction_policy, i.cache_policy);  // the L2 hint, "" for none
    if (i.api == CopyApi::TmaCopy || rec.copy_barrier >= 0)
      linef("tilus::mbarrier_arrive_expect_tx<false, false>({}, {}u);", bar, bytes);
    if (i.cta_group == 2) {
      // One block of a pair: the bytes may complete on the pair's barrier in the peer.
      if (i.multicast_mask.defined() || !policy.empty())
        fail(i, "a cta_group=2 load takes no multicast_mask or cache policy here");
      std::string cbar = i.barrier_rank.defined()
                             ? fmt::format("tilus::map_shared_rank({}, uint32_t({}))", bar, expr(simplify(i.barrier_rank)))
                             : bar;
      linef("tilus::tma_load_cta_pair<{}>({}, {}, {}, {});", rank, smem, tmap, cbar, c);
    } else if (i.multicast_mask.defined())
      linef("tilus::tma_load_multicast<{}>({}, {}, {}, {}, uint16_t({}){});", rank, smem, tmap, bar, c,
            expr(simplify(i.multicast_mask)), policy.empty() ? "" : ", " + policy);
    else
      linef("tilus::tma_load<{}>({}, {}, {}, {}{});", rank, smem, tmap, bar, c, policy.empty() ? "" : ", " + policy);
    close();
    if (rec.copy_barrier >= 0) {
      // Synchronous: every thread of the group waits for the bytes, then flips its phase.
      std::string phase = fmt::format("tilus_copy_phase_{}", rec.copy_barrier);
      linef("tilus::mbarrier_wait<false, false>({}, {});", bar, phase);
      linef("{} ^= 1u;", phase);
    }
  } else {
    open(fmt::format("if ({})", elected()));
    linef("const int32_t {}[{}] = {{{}}};", c, rank, coords);
    guard_start();
    // The hardware traps on a store box starting at a negative coordinate: say which one,
    // except in a kernel with wgmma, where the printf would serialize every wgmma (has_wgmma_).
    std::string negative;
    for (int d = 0; d < rank && !has_wgmma_; ++d)
      if (!facts_.holds(g.offsets[size_t(d)] >= int_const(0, g.offsets[size_t(d)].dtype())))
        negative += fmt::format("{}{}[{}] < 0", negative.empty() ? "" : " || ", c, rank - 1 - d);  // innermost first
    if (!negative.empty()) {
      open(fmt::format("if ({})", negative));
      std::string head = c_text(fmt::format("tilus: {}: {}: a TMA store box cannot start at a negative coordinate "
                                            "(block (",
                                            i.loc.str(), i.display_name()),
                                true);
      linef("printf(\"{}%d, %d, %d)); store the part inside the tensor instead\\n\", int(blockIdx.x), "
            "int(blockIdx.y), int(blockIdx.z));",
            head);
      line("__trap();");
      close();
    }
    std::string policy = declare_policy(*this, i.eviction_policy, i.cache_policy);
    linef("tilus::tma_store<{}>({}, {}, {}{});", rank, tmap, smem, c, policy.empty() ? "" : ", " + policy);
    if (rec.completion == Completion::Synchronous) {
      line("tilus::tma_commit_group();");
      line("tilus::tma_wait_group<0, false>();");
    }
    close();
  }
}

void Emitter::emit_tma_im2col(const Im2colInst& i) {
  const Lowering& rec = i.lowering;
  bool split = i.barrier.defined();  // the kernel's barrier, which the kernel waits on
  if (rec.tensor_map < 0 || rec.tensor_map >= int(kernel.tensor_maps.size()) || (!split && rec.copy_barrier < 0))
    throw InternalError(fmt::format("{}: TMA im2col without a tensor map or copy barrier", i.display_name()), i.loc);
  const TensorMapSpec& map = kernel.tensor_maps[size_t(rec.tensor_map)];
  SharedView view = facts_.shared(i, i.col);
  guard_shared_tile(i, view, map.box);
  int64_t eb = elem_bytes(map.dtype), bm = map.box[0], bk = map.box[1];
  // The tile's first pixel m0 = (n0, oh0, ow0) and kernel position k0 = (kh, kw, c0), as the
  // gathers decompose them (im2col_position). A tile past the matrix (or an image smaller than
  // the window) loads from image n = N: out of bounds, all zero.
  const DataType i64 = dtypes::int64;
  auto k64 = [&](int64_t v) { return int_const(v, i64); };
  Im2colGeometry g = im2col_geometry(i, facts_.global(i, i.img));
  Expr m0 = cast(i.nhw_step, i64) * k64(bm), k0 = cast(i.c_step, i64) * k64(bk);
  Im2colPosition p = im2col_position(i, g, m0, k0);
  Expr inside = g.nonempty && m0 < g.rows && k0 < g.cols;
  Expr kh = select(inside, p.kh, k64(0)), kw = select(inside, p.kw, k64(0));
  std::vector<Expr> coords = {p.ch, p.ow * k64(i.stride) - k64(i.pad), p.oh * k64(i.stride) - k64(i.pad),
                              select(inside, p.n, g.n)};
  std::string cs;
  for (size_t d = 0; d < coords.size(); ++d) cs += fmt::format("{}int32_t({})", d ? ", " : "", expr(simplify(coords[d])));
  std::string smem = fmt::format("(tilus::smem_addr(tilus_smem) + {}u + uint32_t({}) * {}u)", view.base_bytes,
                                 expr(simplify(shared_start_unswizzled(view))), eb);
  std::string bar = split ? barrier_address(i, i.barrier)
                          : fmt::format("(tilus::smem_addr(tilus_smem) + {}u)",
                                        kernel.copy_barrier_offset + 8 * rec.copy_barrier);
  std::string cn = fresh("tma_coords");
  open(fmt::format("if ({})", elected()));
  linef("const int32_t {}[4] = {{{}}};", cn, cs);
  std::string policy = declare_policy(*this, i.eviction_policy);
  linef("tilus::mbarrier_arrive_expect_tx<false, false>({}, {}u);", bar, bm * bk * eb);
  linef("tilus::tma_load_im2col({}, &tilus_tensor_map_{}, {}, {}, uint16_t({}), uint16_t({}){});", smem, rec.tensor_map,
        bar, cn, expr(simplify(kw * k64(i.dilation))), expr(simplify(kh * k64(i.dilation))),
        policy.empty() ? "" : ", " + policy);
  close();
  if (split) return;
  // Synchronous: every thread of the group waits for the bytes, then flips its phase.
  std::string phase = fmt::format("tilus_copy_phase_{}", rec.copy_barrier);
  linef("tilus::mbarrier_wait<false, false>({}, {});", bar, phase);
  linef("{} ^= 1u;", phase);
}

}  // namespace tilus::cuda
