// The warp-group MMA instructions (self.wgmma.*).
// Each instruction's definition (inst_def.h): name, group, emitters' family, traits, attributes
// and its verifier hook, the check below.
#include "../verify_util.h"

namespace tilus {

namespace {
using namespace verify_detail;

void check_wgmma_wait_group(const WgmmaWaitGroupInst& i) {
  if (i.n < 0 || i.n > 7) fail(i, fmt::format("n must be from 0 to 7 (the wgmma groups left pending), got {}", i.n));
}

// wgmma.mma's operand rules that do not depend on layouts (select_instructions checks those).
void check_wgmma_mma(const WgmmaMmaInst& i) {
  if (!i.a.defined() || !(i.a.is_shared() || i.a.is_register()) || i.a.rank() != 2)
    fail(i, fmt::format("a must be a rank-2 shared or register tensor [m, k], got {}", ty(i.a)));
  if (!i.b.defined() || !i.b.is_shared() || (i.b.rank() != 2 && i.b.rank() != 3))
    fail(i, fmt::format("b must be a rank-2 shared tensor [k, n] (a transposed [n, k] tile) or a rank-3 one [blocks, "
                        "k, n / blocks] (column blocks side by side along n), got {}",
                        ty(i.b)));
  if (!i.d.defined() || !i.d.is_register() || i.d.rank() != 2)
    fail(i, fmt::format("d must be a rank-2 register tensor [m, n], got {}", ty(i.d)));
  auto a = i.a.static_shape(), d = i.d.static_shape();
  auto b = i.b.static_shape();
  int64_t bk = b[b.size() - 2], n = i.n();
  if (a[1] != bk)
    fail(i, fmt::format("a is {} and b is {}: the inner dims differ ({} vs {})", ty(i.a), ty(i.b), a[1], bk));
  if (d[0] != a[0] || d[1] != n)
    fail(i, fmt::format("a is {} and b is {}, so d must be [{}, {}], got {}", ty(i.a), ty(i.b), a[0], n, ty(i.d)));
  DataType ab = i.a.dtype(), dt = i.d.dtype();
  auto is_f8 = [](DataType t) { return t == dtypes::float8_e4m3 || t == dtypes::float8_e5m2; };
  bool f16 = ab == dtypes::float16, bf16 = ab == dtypes::bfloat16;
  bool f8 = is_f8(ab) && is_f8(i.b.dtype());
  if (!f16 && !bf16 && !is_f8(ab))
    fail(i, fmt::format("a and b must be float16, bfloat16, float8_e4m3 or float8_e5m2, got a {} and b {}", ty(i.a),
                        ty(i.b)));
  // wgmma's kinds: f16 x f16, bf16 x bf16, and any pair of the fp8 types (e4m3 and e5m2 mix).
  if (ab != i.b.dtype() && !f8)
    fail(i, fmt::format("a is {} and b is {}: a and b must have one dtype (only the fp8 types e4m3 and e5m2 mix)",
                        ty(i.a), ty(i.b)));
  if (!(dt == dtypes::float32 || (dt == dtypes::float16 && !bf16)))
    fail(i, fmt::format("d must be float32{} for {} operands, got {}", bf16 ? "" : " or float16", ab.name(), ty(i.d)));
  if (i.a.is_register() && f8)
    fail(i, fmt::format("a in registers must be float16 or bfloat16 (PTX's fp8 wgmma takes a in registers too, but "
                        "tilus has no fp8 A-fragment layout: give fp8 a from shared memory), got {}",
                        ty(i.a)));
  int64_t k = f8 ? 32 : 16;
  if (a[0] % 64 != 0) fail(i, fmt::format("m (a is {}) must be a multiple of 64 (wgmma's m64)", ty(i.a)));
  if (n % 8 != 0) fail(i, fmt::format("n (b is {}) must be a multiple of 8", ty(i.b)));
  if (a[1] % k != 0) fail(i, fmt::format("k (a is {}) must be a multiple of {} for {}", ty(i.a), k, ab.name()));
}

}  // namespace

void insts::add_wgmma(std::vector<InstDef>& d) {
  using verify_detail::hook;
  d.push_back({.name = "wgmma.fence", .group = "wgmma", .kind = InstKind::WgmmaFence, .emit = EmitFamily::Wgmma,
               .traits = {.min_sm = 90},
               .summary = "orders the warp group's register and shared accesses before the next wgmma.mma"});
  d.push_back({.name = "wgmma.mma", .group = "wgmma", .kind = InstKind::WgmmaMma, .emit = EmitFamily::Wgmma,
               .traits = {.completion = Completion::WgmmaGroup, .proxy = Proxy::Async, .min_sm = 90},
               .summary = "d += a @ b over the warp groups, asynchronously (d = a @ b where enable_input_d is false)",
               .attrs = {{"from_dot", AttrType::Bool, "false"}, {"enable_input_d", AttrType::Bool, "true"}},
               .verify = hook(check_wgmma_mma)});
  d.push_back({.name = "wgmma.commit_group", .group = "wgmma", .kind = InstKind::WgmmaCommitGroup,
               .emit = EmitFamily::Wgmma,
               .traits = {.role = SyncRole::Commit, .completion = Completion::WgmmaGroup, .min_sm = 90},
               .summary = "closes the group of wgmma.mma issued since the last commit"});
  d.push_back({.name = "wgmma.wait_group", .group = "wgmma", .kind = InstKind::WgmmaWaitGroup,
               .emit = EmitFamily::Wgmma,
               .traits = {.role = SyncRole::Wait, .completion = Completion::WgmmaGroup, .min_sm = 90},
               .summary = "waits until at most n wgmma groups are pending", .attrs = {{"n", AttrType::Int, "0"}},
               .verify = hook(check_wgmma_wait_group)});

}

}  // namespace tilus
