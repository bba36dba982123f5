#pragma once

#include "tilus/ir/program.h"
#include "tilus/ir/target.h"

namespace tilus {

// Where `dot` may become wgmma (TILUS_DOT_WGMMA; PipelineOptions::dot_wgmma).
enum class DotWgmma {
  Auto,    // on GPU targets with wgmma (sm_90a); the CPU backend keeps dot   (unset, "auto")
  Always,  // wherever the target has wgmma, the CPU backend's sm_90a rules included   ("1")
  Never,   // every dot stays mma.sync / SIMT   ("0")
};
// TILUS_DOT_WGMMA read now (Auto when unset; a CompileError names any other value).
DotWgmma dot_wgmma_from_env();

// The dot -> wgmma pass (issue 15): on a target with wgmma, a `dot` that a whole number of
// warp groups computes becomes a synchronous wgmma (fence, mma, commit_group, wait_group(0)),
// its shared operands read in place by matrix descriptors instead of through registers:
//
//   - b loaded whole from a K-major shared tile wgmma can describe (rows of one TMA swizzle
//     span: a [n, k] tile viewed transposed): d = a @ b with b from shared memory, and a from
//     shared memory too when it is such a load (else a in registers, as loaded);
//   - otherwise, a loaded whole from a row-major [m, k] tile wgmma can describe and b loaded
//     from shared memory in any layout (the usual row-major [k, n] tile): the transposed
//     product d^T = b^T @ a^T, b^T in registers (ldmatrix.trans), a^T from shared memory;
//     d and c are register transposes of the accumulator (copies the CUDA compiler removes).
//
// It needs f16/bf16 operands and an f32 (or, for f16, f16) accumulator, the thread group at a
// warp-group boundary, the accumulator's rows a multiple of 64 per warp group (m, or n in the
// transposed form), the other dim a multiple of 8 and k a multiple of 16; the shared operands'
// layouts are choose_shared_layouts' (the pass runs after it). Any other dot stays as it is.
// The load_shared a descriptor replaces is removed when the dot was its only reader. The
// wgmma.mma is marked from_dot; its lowering record says so. Fences come from
// insert_wgmma_fences, the waits and barriers around the shared reads from the async-wait
// and barrier passes, as for a wgmma the kernel writes itself.
Program lower_dots_to_wgmma(const Program& program, const Target& target, DotWgmma mode = DotWgmma::Auto);

}  // namespace tilus
