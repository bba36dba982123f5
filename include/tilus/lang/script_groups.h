// The C++ Script's instruction groups (part of tilus/lang/script.h, which includes it), NVIDIA
// Tilus's self.mbarrier, self.tma, self.wgmma, self.atomic and self.fence.
#pragma once

#include "tilus/lang/script_types.h"

namespace tilus {

class Script;

// A barrier of another block of the cluster (cluster.map_shared_addr(bars[i], rank), NVIDIA
// Tilus's name): arrivals on it (mbarrier.arrive, arrive_and_expect_tx, mbarrier_arrive) reach
// the barrier at `barrier`'s offset in block `rank`.
struct MappedBarrier {
  SharedTensor barrier;
  Expr rank;
};

// self.mbarrier.* (NVIDIA Tilus's names): mbarriers in shared memory. A barrier is one
// element of the tensor alloc() returns (`b[i]`; a one-barrier tensor may be passed whole).
struct MbarrierGroup {
  Script* script;
  // The initial phases of a producer / consumer pipeline (wait(b, phase) with these first).
  static constexpr int producer_initial_phase = 1;
  static constexpr int consumer_initial_phase = 0;
  SharedTensor alloc(std::vector<Expr> counts, Loc loc = Loc::current()) const;
  void arrive(const SharedTensor& barrier, const Expr& count = 1, MbarrierOptions opts = {},
              Loc loc = Loc::current()) const;
  void arrive_and_expect_tx(const SharedTensor& barrier, const Expr& transaction_bytes, MbarrierOptions opts = {},
                            Loc loc = Loc::current()) const;
  void expect_tx(const SharedTensor& barrier, const Expr& transaction_bytes, MbarrierOptions opts = {},
                 Loc loc = Loc::current()) const;
  // The same on a peer block's barrier (cluster.map_shared_addr).
  void arrive(const MappedBarrier& barrier, const Expr& count = 1, MbarrierOptions opts = {},
              Loc loc = Loc::current()) const;
  void arrive_and_expect_tx(const MappedBarrier& barrier, const Expr& transaction_bytes, MbarrierOptions opts = {},
                            Loc loc = Loc::current()) const;
  // Arrive on the barrier at the same offset in block `cta_id` of the cluster; `scope` "cta"
  // (release at block scope, the default) or "cluster" (the thread's earlier writes become
  // visible to the peer's waiters).
  void arrive_remote(const SharedTensor& barrier, const Expr& cta_id, const Expr& count = 1,
                     const std::string& scope = "cta", Loc loc = Loc::current()) const;
  // NVIDIA Tilus's arrive_and_expect_tx_remote: arrive on the barrier at the same offset in block
  // `target_rank` of the cluster and add `transaction_bytes` to its phase's expected bytes
  // (opts.scope: Tilus's default is "cluster").
  void arrive_and_expect_tx_remote(const SharedTensor& barrier, const Expr& transaction_bytes, const Expr& target_rank,
                                   MbarrierOptions opts = {.scope = "cluster"}, Loc loc = Loc::current()) const;
  void wait(const SharedTensor& barrier, const Expr& phase, MbarrierOptions opts = {}, Loc loc = Loc::current()) const;
  // The phase kept in a one-element register tensor.
  void wait(const SharedTensor& barrier, const RegisterTensor& phase, MbarrierOptions opts = {},
            Loc loc = Loc::current()) const;
};

// self.tma.*: bulk tensor copies (sm_90).
struct TmaGroup {
  Script* script;
  void global_to_shared(const GlobalTensor& src, const SharedTensor& dst, TmaTileOptions opts,
                        const SharedTensor& mbarrier, Loc loc = Loc::current()) const;
  void shared_to_global(const SharedTensor& src, const GlobalTensor& dst, TmaTileOptions opts,
                        Loc loc = Loc::current()) const;
  void commit_group(Loc loc = Loc::current()) const;
  void wait_group(int64_t n, bool read = false, Loc loc = Loc::current()) const;
};

// self.wgmma.* (NVIDIA Tilus's names; sm_90a): warp-group matrix multiply-accumulate.
// mma(a, b, d): d += a @ b with a [m, k] and b [k, n] shared and K-major (b typically a
// transposed [n, k] tile; a 16-bit b may also be a row-major [k, n] tile one swizzle span
// wide), d a float32 register tensor; asynchronous until a wait_group covers its commit group.
// enable_input_d = false: d = a @ b, d's values ignored (wgmma's scale-d 0 on the first k step;
// Python's wgmma.mma(..., enable_input_d=False)).
struct WgmmaGroup {
  Script* script;
  void fence(Loc loc = Loc::current()) const;
  void mma(const SharedTensor& a, const SharedTensor& b, const RegisterTensor& d, bool enable_input_d = true,
           Loc loc = Loc::current()) const;
  // a in registers (float16 / bfloat16): its layout becomes the wgmma A-fragment layout.
  void mma(const RegisterTensor& a, const SharedTensor& b, const RegisterTensor& d, bool enable_input_d = true,
           Loc loc = Loc::current()) const;
  void commit_group(Loc loc = Loc::current()) const;
  void wait_group(int64_t n, Loc loc = Loc::current()) const;
};

// self.atomic.* (NVIDIA Tilus's names): element-wise atomic read-modify-write of a global tile
// (opts.offsets / dims as store_global) or a whole shared tensor; each returns the elements'
// previous values (docs/instructions.md).
struct AtomicGroup {
  Script* script;
#define TILUS_ATOMIC_METHODS(space, Tensor)                                                                     \
  RegisterTensor space##_add(const Tensor& dst, const RegisterTensor& values, AtomicOptions opts = {},           \
                             Loc loc = Loc::current()) const;                                                   \
  RegisterTensor space##_sub(const Tensor& dst, const RegisterTensor& values, AtomicOptions opts = {},           \
                             Loc loc = Loc::current()) const;                                                   \
  RegisterTensor space##_min(const Tensor& dst, const RegisterTensor& values, AtomicOptions opts = {},           \
                             Loc loc = Loc::current()) const;                                                   \
  RegisterTensor space##_max(const Tensor& dst, const RegisterTensor& values, AtomicOptions opts = {},           \
                             Loc loc = Loc::current()) const;                                                   \
  RegisterTensor space##_exch(const Tensor& dst, const RegisterTensor& values, AtomicOptions opts = {},          \
                              Loc loc = Loc::current()) const;                                                  \
  RegisterTensor space##_cas(const Tensor& dst, const RegisterTensor& compare, const RegisterTensor& values,     \
                             AtomicOptions opts = {}, Loc loc = Loc::current()) const;
  TILUS_ATOMIC_METHODS(global, GlobalTensor)
  TILUS_ATOMIC_METHODS(shared, SharedTensor)
#undef TILUS_ATOMIC_METHODS
  // Scatter forms: element k of values to dst at k's coordinates, along `dim` at indices[k]
  // (Builder::atomic_scatter); opts.offsets / dims are not taken.
#define TILUS_ATOMIC_SCATTER(space, Tensor, op)                                                               \
  RegisterTensor space##_scatter_##op(const Tensor& dst, int dim, const RegisterTensor& indices,               \
                                      const RegisterTensor& values, AtomicOptions opts = {},                   \
                                      Loc loc = Loc::current()) const;
#define TILUS_ATOMIC_SCATTERS(space, Tensor) \
  TILUS_ATOMIC_SCATTER(space, Tensor, add)   \
  TILUS_ATOMIC_SCATTER(space, Tensor, sub)   \
  TILUS_ATOMIC_SCATTER(space, Tensor, min)   \
  TILUS_ATOMIC_SCATTER(space, Tensor, max)
  TILUS_ATOMIC_SCATTERS(global, GlobalTensor)
  TILUS_ATOMIC_SCATTERS(shared, SharedTensor)
#undef TILUS_ATOMIC_SCATTERS
#undef TILUS_ATOMIC_SCATTER
};

// self.fence.*: proxy fences.
struct FenceGroup {
  Script* script;
  void proxy_async(const std::string& space = "shared", Loc loc = Loc::current()) const;
};

}  // namespace tilus
