// Reductions: within each thread's slots, then across lanes with xor shuffles, then across
// warps through a shared-memory workspace.
#include <functional>

#include "emitter.h"

namespace tilus::cuda {

namespace {
std::string combine(ReduceOp op, const std::string& a, const std::string& b) {
  switch (op) {
    case ReduceOp::Sum: return fmt::format("{} + {}", a, b);
    case ReduceOp::Max: return fmt::format("tilus::max_({}, {})", a, b);
    case ReduceOp::Min: return fmt::format("tilus::min_({}, {})", a, b);
    // Bitwise, not || / &&: both sides must run, since one may be a warp shuffle that every
    // lane has to join (short-circuiting skipped it in lanes whose value was already decided).
    case ReduceOp::Any: return fmt::format("bool({} | {})", a, b);
    case ReduceOp::All: return fmt::format("bool({} & {})", a, b);
  }
  return a;
}
}  // namespace

void Emitter::emit_reduce(const InstNode& inst) {
  auto& i = static_cast<const ReduceInst&>(inst);
  const RegisterLayout& l = i.x->layout;
  RegisterLayout expected = l.reduce(i.dims, i.keepdim);
  if (i.out->layout != expected)
    fail(inst, fmt::format("the result layout {} is not the reduction of the operand's {}", i.out->layout.str(), l.str()));
  // 16-bit floats accumulate in float32 (like torch), everything else in its own type.
  DataType acc_t = (i.x.dtype() == dtypes::float16 || i.x.dtype() == dtypes::bfloat16) ? dtypes::float32 : i.out.dtype();
  std::string acc_c = ctype(acc_t);
  auto reduced = [&](int d) { return std::find(i.dims.begin(), i.dims.end(), d) != i.dims.end(); };
  auto project = [&](const std::vector<int64_t>& idx) {
    std::vector<int64_t> r;
    for (int d = 0; d < int(idx.size()); ++d) {
      if (!reduced(d)) r.push_back(idx[d]);
      else if (i.keepdim) r.push_back(0);
    }
    return r;
  };
  // 1. Within the thread: group the operand's slots by the result slot they reduce into.
  int64_t out_slots = i.out->layout.local_size();
  std::vector<std::vector<int64_t>> groups(out_slots);
  for (int64_t s = 0; s < l.local_size(); ++s) {
    int64_t target = -1;
    for (int64_t t = 0; t < l.num_threads(); ++t) {
      int64_t found = -1;
      for (auto& [thread, slot] : i.out->layout.owners(project(l.map(t, s))))
        if (thread == t) found = slot;
      if (found < 0 || (target >= 0 && found != target)) fail(inst, "internal: inconsistent reduction slots");
      target = found;
    }
    groups[target].push_back(s);
  }
  // A group's slots combine as a balanced tree (pairs, then pairs of pairs): log2(n) dependent
  // steps instead of a chain of n - 1 (a chain of 31 FMNMX per row stalled flash attention's
  // softmax on each one's latency; the compiler keeps a float expression's order as written).
  const std::string& x = reg(i.x);
  std::string acc = fresh("acc");
  linef("{} {}[{}];", acc_c, acc, out_slots);
  std::function<std::string(const std::vector<int64_t>&, size_t, size_t)> tree = [&](const std::vector<int64_t>& g,
                                                                                   size_t lo, size_t hi) {
    if (hi - lo == 1) return fmt::format("tilus::cvt<{}>({}[{}])", acc_c, x, g[lo]);
    size_t mid = lo + (hi - lo + 1) / 2;
    auto side = [&](size_t a, size_t b) { return b - a == 1 ? tree(g, a, b) : fmt::format("({})", tree(g, a, b)); };
    return combine(i.op, side(lo, mid), side(mid, hi));
  };
  for (int64_t so = 0; so < out_slots; ++so) linef("{}[{}] = {};", acc, so, tree(groups[so], 0, groups[so].size()));
  // 2. Across threads: the thread digits of the reduced dims' spatial modes.
  struct Digit {
    int64_t stride, extent;
  };
  std::vector<Digit> lanes, warps;
  const auto& sp = l.spatial_modes();
  int64_t stride = 1;
  for (int p = int(sp.size()) - 1; p >= 0; --p) {
    int64_t ext = sp[p] < 0 ? -sp[p] : l.mode_shape()[sp[p]];
    if (sp[p] >= 0 && reduced(l.mode_dim(sp[p])) && ext > 1) {
      bool pow2 = (ext & (ext - 1)) == 0;
      if (pow2 && stride < 32) {
        // The part of the digit inside a warp reduces with shuffles, the rest in shared memory.
        int64_t in_warp = std::min<int64_t>(ext, 32 / stride);
        lanes.push_back({stride, in_warp});
        if (ext > in_warp) warps.push_back({stride * in_warp, ext / in_warp});
      } else {
        warps.push_back({stride, ext});
      }
    }
    stride *= ext;
  }
  const ThreadScope& sc = scope();
  std::string mask = "0xffffffffu";
  if (sc.threads < 32) mask = fmt::format("{:#x}u", ((1u << sc.threads) - 1) << (sc.begin % 32));
  for (auto& d : lanes)
    for (int64_t off = d.stride; off < d.stride * d.extent; off *= 2)
      for (int64_t so = 0; so < out_slots; ++so)
        linef("{0}[{1}] = {2};", acc, so,
              combine(i.op, fmt::format("{}[{}]", acc, so), fmt::format("tilus::shfl_xor({}[{}], {}, {})", acc, so, off, mask)));
  if (!warps.empty()) {
    int64_t threads = sc.threads;
    workspace(threads * out_slots * elem_bytes(acc_t));
    std::string ws = fresh("ws");
    std::string t = expr(sc.thread);
    open("");
    linef("{}* {} = {};", acc_c, ws, workspace_ptr(acc_t));
    emit_barrier(inst);  // earlier readers of the workspace are done
    for (int64_t so = 0; so < out_slots; ++so) linef("{}[{} * {} + {}] = {}[{}];", ws, so, threads, t, acc, so);
    emit_barrier(inst);
    // The peers differ from this thread only in the cross-warp reduced digits.
    std::string base = t;
    for (auto& d : warps) base = fmt::format("({} - ({} / {} % {}) * {})", base, t, d.stride, d.extent, d.stride);
    std::string b = fresh("peer_base");
    linef("const int32_t {} = {};", b, base);
    for (int64_t so = 0; so < out_slots; ++so) {
      std::string loops, peer = b;
      int depth = 0;
      for (auto& d : warps) {
        std::string j = fmt::format("tilus_j{}", depth++);
        open(fmt::format("for (int {0} = 0; {0} < {1}; ++{0})", j, d.extent));
        peer += fmt::format(" + {} * {}", j, d.stride);
      }
      std::string v = fmt::format("{}[{} * {} + {}]", ws, so, threads, peer);
      // The first peer initialises the result; the others combine into it.
      linef("{0}[{1}] = ({2}) ? {3} : ({4});", acc, so,
            [&] {
              std::string first;
              for (int q = 0; q < depth; ++q) first += fmt::format("{}tilus_j{} == 0", q ? " && " : "", q);
              return first;
            }(),
            v, combine(i.op, fmt::format("{}[{}]", acc, so), v));
      for (int q = 0; q < depth; ++q) close();
    }
    emit_barrier(inst);  // the workspace may be reused after everyone has read
    close();
  }
  // 3. The result in its dtype.
  std::string out = declare_reg(i.out);
  for (int64_t so = 0; so < out_slots; ++so) linef("{}[{}] = tilus::cvt<{}>({}[{}]);", out, so, ctype(i.out.dtype()), acc, so);
}

}  // namespace tilus::cuda
