// Lowering records: how an instruction becomes machine instructions.
//
// select_instructions writes one on every memory instruction (load_*, store_*, copy,
// copy_async, async_copy) and every dot. It is the single place where the choice is made:
// the CUDA emitter, the CPU emitter, insert_async_waits and insert_barriers read the record
// and decide nothing again. The printer shows it under the instruction in IR dumps:
//
//   copy(src=s, ..., dst=r, ...)
//     lowering: ldmatrix groups=[x4@0, x4@8] completion=synchronous
//
// Adding a machine instruction is a new MachineOp (and, where it completes another way, a
// new Completion) plus one branch in each consumer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tilus/ir/layout.h"

namespace tilus {

enum class MachineOp : uint8_t {
  None,       // not selected (no memory effect, or before select_instructions)
  Simt,       // per-thread loads / stores of `vector` elements (1: element by element)
  CpAsyncCa,  // cp.async.ca, 4 or 8 bytes per copy (L1-allocating)
  CpAsyncCg,  // cp.async.cg, 16 bytes per copy (L2 only)
  Ldmatrix,   // ldmatrix.x1/.x2/.x4 [.trans], one per matrix group
  Stmatrix,   // stmatrix.x1/.x2/.x4 [.trans], one per matrix group
  TmaLoad,    // cp.async.bulk.tensor global -> shared, one box, issued by the group's first thread
  TmaStore,   // cp.async.bulk.tensor shared -> global, one box, issued by the group's first thread
  MmaSync,    // mma.sync.aligned.m16n8k16 over the warps of the thread group
  SimtFma,    // a per-thread outer product of multiply-adds
  Wgmma,      // wgmma.mma_async.m64nNkK per warp group, shared operands through matrix descriptors
  Atom,       // atom.* per element by its primary replica; red.* where `red` (the old values unused)
  // Blackwell (tcgen05): issued by one thread of a warp (mma, cp) or by whole warps (ld, st).
  Tcgen05Mma,  // tcgen05.mma.cta_group::N.kind::K, shared operands through matrix descriptors
  Tcgen05Cp,   // tcgen05.cp.cta_group::1.128x256b, shared source through a matrix descriptor
  Tcgen05Ld,   // tcgen05.ld.sync.aligned.32x32b.xN: warp w of the group, lanes 32w..32w+31
  Tcgen05St,   // tcgen05.st.sync.aligned.32x32b.xN
  ClcTryCancel,  // clusterlaunchcontrol.try_cancel.async[.multicast::cluster::all], by one thread
};
// Whether an instruction reads shared memory through the async proxy after it is issued (TMA
// stores, wgmma, tcgen05.mma / cp): generic writes of that memory need a proxy fence first.
bool reads_through_async_proxy(MachineOp op);
const char* to_string(MachineOp op);

// When the memory an instruction writes may be read.
enum class Completion : uint8_t {
  Synchronous,   // once the instruction returns in the threads that ran it
  CpAsyncGroup,  // once a cp.async.wait_group that covers its commit group returns
  MbarrierTx,    // once a wait on its mbarrier sees the phase its bytes completed
  TmaStoreGroup, // once a tma.wait_group that covers its commit group returns (read: its source)
  WgmmaGroup,    // once a wgmma.wait_group that covers its commit group returns (d and its shared operands)
  // tcgen05.mma / cp: once a wait on the mbarrier that a later tcgen05.commit of the same thread
  // arrives on sees that phase (the shared operands are read, tensor memory written).
  Tcgen05,
  Tcgen05Load,   // tcgen05.ld: once tcgen05.wait_load returns (its registers hold the values)
  Tcgen05Store,  // tcgen05.st: once tcgen05.wait_store returns (its registers may change)
};
const char* to_string(Completion c);

// One ldmatrix / stmatrix: slots [slot, slot + 2n) of every thread, n 8x8 matrices.
struct MatrixGroup {
  int64_t slot = 0, n = 1;
  bool trans = false;
  bool operator==(const MatrixGroup& o) const { return slot == o.slot && n == o.n && trans == o.trans; }
};

// How a dot's threads share the product (the layouts infer_layouts gave the operands).
struct DotTiling {
  // MmaSync: warps_m x warps_n warps (each `replicas` times), each rep_m x rep_n m16n8 tiles,
  // rep_k k16 steps.
  int64_t warps_m = 1, warps_n = 1, rep_m = 1, rep_n = 1, rep_k = 1, replicas = 1;
  // Which comes major in the operands' m and n: the warps (NVIDIA Tilus's mma_dot_config order:
  // warp i holds rows [i * rep_m * 16, (i + 1) * rep_m * 16)) or the repeats (tilus's default:
  // repeat r holds rows [r * warps_m * 16, ...)). The slots are ordered alike either way.
  bool warps_major = false;
  // SimtFma: threads_m x threads_n threads, each a per_m x per_n block of the product.
  int64_t threads_m = 1, threads_n = 1, per_m = 1, per_n = 1;
};

// A shared wgmma operand as its matrix descriptor sees it (PTX ISA, "Matrix Descriptor
// Format"): a K-major tile whose rows (of M for a, of N for b) are one swizzle span long, or an
// MN-major one (the instruction's transpose flag) whose rows along K are one span of M or N.
struct WgmmaOperand {
  bool registers = false;   // a only: the fragments come from registers (no descriptor)
  bool mn_major = false;    // b only: its N dim contiguous (a row-major [k, n] tile), transposed by wgmma
  int swizzle_code = 0;     // descriptor bits 62-63: 1 = 128B, 2 = 64B, 3 = 32B
  int64_t swizzle_bytes = 0;
  int64_t lbo = 0, sbo = 0;  // leading / stride byte offsets
  int64_t row_bytes = 0;     // bytes from one row (of M or N) to the next
  int64_t k_step_bytes = 0;  // bytes from one instruction's K slice to the next
};

// How a wgmma.mma is split: every warp group (of `groups`) takes m / groups rows as m_blocks
// m64 instructions by n_blocks instructions of n_instr columns, k_steps times along K.
struct WgmmaTiling {
  int64_t groups = 1, m_blocks = 1, n_blocks = 1, n_instr = 8, k_instr = 16, k_steps = 1;
  WgmmaOperand a, b;
};

// How a tcgen05.mma is split: instructions of m x n_instr x k_instr, n_blocks of them along N
// and k_steps along K (each K step of every N block one instruction), with the instruction
// descriptor and each shared operand's matrix descriptor (the same rule as wgmma's, with
// tcgen05's swizzle codes). `a_tmem`: a comes from tensor memory (no descriptor).
struct Tcgen05MmaTiling {
  int64_t m = 128, n_instr = 8, k_instr = 16, n_blocks = 1, k_steps = 1, cta_group = 1;
  std::string kind;           // "f16", "tf32", "f8f6f4"
  uint32_t idesc = 0;         // the instruction descriptor (PTX ISA, "Instruction descriptor")
  bool a_tmem = false;
  WgmmaOperand a, b;          // swizzle_code holds tcgen05's 3-bit code: 2 = 128B, 4 = 64B, 6 = 32B
};

// How a tcgen05.ld / st moves a [lanes, n] tile: each warp of the group its 32 lanes, in
// instructions of `columns` 32-bit columns (32x32b.x<columns>), `instructions` of them.
struct Tcgen05LdSt {
  int64_t columns = 1, instructions = 1;
};

// A Simt store whose threads first trade parts of their registers, so that each stores wider
// contiguous vectors than its own layout holds (an mma / wgmma accumulator's pairs of 16-bit
// values, 4 bytes of each 32-byte sector per lane, become 16-byte vectors: whole sectors). In
// every group of `lanes` lanes whose lane indices differ only in the multiples of `lane_stride`
// (lane / lane_stride % lanes: the lane's digit), the lanes transpose `lanes` x `lanes` blocks of
// units of `unit` slots (4 or 8 bytes): in block b, lane digit q takes from lane digit p the unit
// at slot src[b * lanes + q] and puts it at slot dst[b * lanes + p] of the stored tile, whose
// layout is the record's `mapping`. Shuffles within a warp: chosen only for whole warps outside
// thread-dependent branches.
struct LaneExchange {
  int64_t lanes = 0, lane_stride = 1, unit = 1;
  std::vector<int64_t> src, dst;
  bool defined() const { return lanes > 1; }
};

struct Lowering {
  MachineOp op = MachineOp::None;
  Completion completion = Completion::Synchronous;
  // Elements per access (Simt, CpAsync*).
  int64_t vector = 0;
  // The thread -> tile-element mapping of the accesses: the register operand's layout for
  // register <-> memory moves, the chosen mapping for memory <-> memory ones (slot s of
  // thread t moves tile element mapping.map(t, s)).
  RegisterLayout mapping;
  // Every element is touched only by the thread(s) `mapping` gives it, so two accesses of
  // one box with one such mapping need no barrier between them (false for warp-collective
  // instructions and for mappings with replicas, whose stores only one replica does).
  bool thread_private = false;
  // Issues a cp.async commit of its own after its copies (a `copy` selected as cp.async,
  // and async_copy, whose group the kernel waits for).
  bool commits_group = false;
  // Ldmatrix / Stmatrix: the tile dim along which a matrix row is contiguous, the tile dim of
  // its rows, and the groups.
  int matrix_cdim = 1, matrix_rdim = 0;
  std::vector<MatrixGroup> matrices;
  DotTiling dot;
  WgmmaTiling wgmma;
  Tcgen05MmaTiling tcgen05;
  Tcgen05LdSt ldst;
  // TmaLoad / TmaStore: the kernel's tensor map (Kernel::tensor_maps) the box goes through;
  // for a synchronous `copy`, the kernel's copy barrier it completes on (-1: the copy's own
  // barrier, which the kernel waits on).
  int tensor_map = -1;
  int copy_barrier = -1;
  // Atom: the old values are never read, so each element is a red (a reduction without a
  // result) where the memory order allows it (relaxed / release).
  bool red = false;
  // CpAsync*: the global dim whose ragged end a vector may straddle (-1: none): its copy reads
  // only the elements inside (cp.async's src-size) and zero-fills the rest of the vector.
  int tail_dim = -1;
  // Simt stores: the lane exchange before them (mapping: the layout the exchange leaves).
  LaneExchange exchange;
  // Why faster instructions were not taken (shown in the IR dump).
  std::string note;

  bool defined() const { return op != MachineOp::None; }
  bool is_async() const { return completion != Completion::Synchronous; }
  // "ldmatrix groups=[x4@0] completion=synchronous" (no mapping; the printer adds it where it
  // is not the register operand's layout).
  std::string str() const;
};

// Why the lane exchange of `l` does not move a register tile of layout `from` into l.mapping
// (each thread's unit p of block b from the lane of digit p, as LaneExchange says); "" when it
// does (checked for every thread and slot), or when `l` has no exchange.
std::string lane_exchange_problem(const RegisterLayout& from, const Lowering& l);

}  // namespace tilus
