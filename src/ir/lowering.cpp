#include "tilus/ir/lowering.h"

#include <fmt/format.h>

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
  }
  return "?";
}

const char* to_string(Completion c) {
  switch (c) {
    case Completion::Synchronous: return "synchronous";
    case Completion::CpAsyncGroup: return "cp.async-group";
    case Completion::MbarrierTx: return "mbarrier-tx";
    case Completion::TmaStoreGroup: return "tma-store-group";
    case Completion::WgmmaGroup: return "wgmma-group";
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
                          : fmt::format(" {}=sw{}/sbo{}{}", name, o->swizzle_bytes, o->sbo, o->mn_major ? "/mn" : "");
      break;
    }
    case MachineOp::Atom:
      if (red) s += " red";
      break;
    case MachineOp::None: break;
  }
  s += fmt::format(" completion={}", to_string(completion));
  if (commits_group) s += " commits_group";
  if (thread_private) s += " thread_private";
  return s;
}

}  // namespace tilus
