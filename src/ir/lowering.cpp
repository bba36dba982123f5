#include "tilus/ir/lowering.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tilus {

const char* to_string(MachineOp op) {
  switch (op) {
    case MachineOp::None: return "none";
    case MachineOp::Simt: return "simt";
    case MachineOp::CpAsyncCa: return "cp.async.ca";
    case MachineOp::CpAsyncCg: return "cp.async.cg";
    case MachineOp::Ldmatrix: return "ldmatrix";
    case MachineOp::Stmatrix: return "stmatrix";
    case MachineOp::TmaLoad: return "tma.load";
    case MachineOp::TmaStore: return "tma.store";
    case MachineOp::MmaSync: return "mma.sync.m16n8k16";
    case MachineOp::SimtFma: return "simt.fma";
    case MachineOp::Atom: return "atom";
    case MachineOp::Wgmma: return "wgmma";
    case MachineOp::Tcgen05Mma: return "tcgen05.mma";
    case MachineOp::Tcgen05Cp: return "tcgen05.cp";
    case MachineOp::Tcgen05Ld: return "tcgen05.ld";
    case MachineOp::Tcgen05St: return "tcgen05.st";
    case MachineOp::ClcTryCancel: return "clusterlaunchcontrol.try_cancel";
  }
  return "?";
}

bool reads_through_async_proxy(MachineOp op) {
  return op == MachineOp::TmaStore || op == MachineOp::Wgmma || op == MachineOp::Tcgen05Mma ||
         op == MachineOp::Tcgen05Cp;
}

const char* to_string(Completion c) {
  switch (c) {
    case Completion::Synchronous: return "synchronous";
    case Completion::CpAsyncGroup: return "cp.async-group";
    case Completion::MbarrierTx: return "mbarrier-tx";
    case Completion::TmaStoreGroup: return "tma-store-group";
    case Completion::WgmmaGroup: return "wgmma-group";
    case Completion::Tcgen05: return "tcgen05-commit";
    case Completion::Tcgen05Load: return "tcgen05-wait-load";
    case Completion::Tcgen05Store: return "tcgen05-wait-store";
  }
  return "?";
}

std::string Lowering::str() const {
  std::string s = to_string(op);
  switch (op) {
    case MachineOp::Simt:
    case MachineOp::CpAsyncCa:
    case MachineOp::CpAsyncCg:
      s += fmt::format(" vector={}", vector);
      if (tail_dim >= 0) s += fmt::format(" tail_dim={}", tail_dim);
      if (exchange.defined())
        s += fmt::format(" exchange=lanes{}/stride{}/unit{}x{}", exchange.lanes, exchange.lane_stride, exchange.unit,
                         exchange.src.size() / size_t(exchange.lanes));
      break;
    case MachineOp::Ldmatrix:
    case MachineOp::Stmatrix: {
      std::string groups;
      for (auto& g : matrices)
        groups += fmt::format("{}x{}{}@{}", groups.empty() ? "" : ", ", g.n, g.trans ? ".trans" : "", g.slot);
      s += fmt::format(" groups=[{}] contiguous_dim={}", groups, matrix_cdim);
      if (matrix_rdim != 1 - matrix_cdim) s += fmt::format(" row_dim={}", matrix_rdim);  // beyond 2-D tiles
      break;
    }
    case MachineOp::MmaSync:
      s += fmt::format(" warps={}x{} tiles={}x{}x{}", dot.warps_m, dot.warps_n, dot.rep_m, dot.rep_n, dot.rep_k);
      if (dot.replicas > 1) s += fmt::format(" replicas={}", dot.replicas);
      if (dot.warps_major) s += " warps_major";
      break;
    case MachineOp::SimtFma:
      s += fmt::format(" threads={}x{} per_thread={}x{}", dot.threads_m, dot.threads_n, dot.per_m, dot.per_n);
      if (dot.replicas > 1) s += fmt::format(" replicas={}", dot.replicas);
      break;
    case MachineOp::TmaLoad:
    case MachineOp::TmaStore:
      s += fmt::format(" tensor_map={}", tensor_map);
      if (copy_barrier >= 0) s += fmt::format(" copy_barrier={}", copy_barrier);
      break;
    case MachineOp::Wgmma: {
      const WgmmaTiling& w = wgmma;
      s += fmt::format(" m64n{}k{} groups={} tiles={}x{}x{}", w.n_instr, w.k_instr, w.groups, w.m_blocks, w.n_blocks,
                       w.k_steps);
      for (auto [name, o] : {std::pair<const char*, const WgmmaOperand*>{"a", &w.a}, {"b", &w.b}})
        s += o->registers ? fmt::format(" {}=regs", name)
                          : fmt::format(" {}=sw{}/sbo{}{}{}", name, o->swizzle_bytes, o->sbo,
                                        o->mn_major && o->lbo > 16 ? fmt::format("/lbo{}", o->lbo) : "",
                                        o->mn_major ? "/mn" : "");
      break;
    }
    case MachineOp::Atom:
      if (red) s += " red";
      if (vector > 1) s += " pairs";
      break;
    case MachineOp::Tcgen05Mma: {
      const Tcgen05MmaTiling& t = tcgen05;
      s += fmt::format(" cta_group::{}.kind::{} m{}n{}k{} tiles={}x{} idesc={:#x}", t.cta_group, t.kind,
                       t.m * t.cta_group, t.n_instr, t.k_instr, t.n_blocks, t.k_steps, t.idesc);
      s += t.a_tmem ? std::string(" a=tmem") : fmt::format(" a=sw{}/sbo{}", t.a.swizzle_bytes, t.a.sbo);
      s += fmt::format(" b=sw{}/sbo{}", t.b.swizzle_bytes, t.b.sbo);
      break;
    }
    case MachineOp::Tcgen05Cp:
      s += fmt::format(" 128x256b x{} src=sw{}/sbo{}", tcgen05.n_blocks, tcgen05.a.swizzle_bytes, tcgen05.a.sbo);
      break;
    case MachineOp::Tcgen05Ld:
    case MachineOp::Tcgen05St: s += fmt::format(" 32x32b.x{} x{}", ldst.columns, ldst.instructions); break;
    case MachineOp::ClcTryCancel: break;
    case MachineOp::None: break;
  }
  s += fmt::format(" completion={}", to_string(completion));
  if (commits_group) s += " commits_group";
  if (thread_private) s += " thread_private";
  return s;
}

std::string lane_exchange_problem(const RegisterLayout& from, const Lowering& l) {
  const LaneExchange& x = l.exchange;
  if (!x.defined()) return "";
  const RegisterLayout& to = l.mapping;
  if (!from.defined() || !to.defined()) return "needs the layouts before and after it";
  if (from.shape() != to.shape() || from.num_threads() != to.num_threads() || from.local_size() != to.local_size())
    return fmt::format("keeps the tile, the threads and the slots, but it goes from {} to {}", from.str(), to.str());
  auto pow2 = [](int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
  int64_t k = x.lanes, stride = x.lane_stride, slots = from.local_size();
  if (!pow2(k) || !pow2(stride) || k * stride > 32 || from.num_threads() % 32)
    return fmt::format("trades between {} lanes {} apart, not within whole warps of its {} threads", k, stride,
                       from.num_threads());
  if (x.unit < 1 || x.src.size() != x.dst.size() || int64_t(x.src.size()) * x.unit != slots)
    return fmt::format("moves {} units of {} slots, not the {} slots of a thread", x.src.size(), x.unit, slots);
  std::vector<int> src_seen(size_t(slots), 0), dst_seen(size_t(slots), 0);
  for (size_t i = 0; i < x.src.size(); ++i)
    for (int64_t u = 0; u < x.unit; ++u) {
      if (x.src[i] < 0 || x.dst[i] < 0 || x.src[i] + u >= slots || x.dst[i] + u >= slots ||
          src_seen[size_t(x.src[i] + u)]++ || dst_seen[size_t(x.dst[i] + u)]++)
        return fmt::format("does not take every slot once (unit {}: from slot {} to slot {})", i, x.src[i], x.dst[i]);
    }
  int64_t blocks = int64_t(x.src.size()) / k;
  for (int64_t t = 0; t < from.num_threads(); ++t) {
    int64_t q = t / stride % k;
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t p = 0; p < k; ++p) {
        int64_t peer = t + (p - q) * stride;
        for (int64_t u = 0; u < x.unit; ++u) {
          int64_t d = x.dst[size_t(b * k + p)] + u, s = x.src[size_t(b * k + q)] + u;
          if (to.map(t, d) != from.map(peer, s))
            return fmt::format("puts, in thread {}'s slot {}, thread {}'s slot {}: element [{}] where {} holds [{}]", t,
                               d, peer, s, fmt::join(from.map(peer, s), ", "), to.str(), fmt::join(to.map(t, d), ", "));
        }
      }
  }
  return "";
}

}  // namespace tilus
