// Kernels of the thread-level builtins (seed 004), shared by the codegen tests (golden text and
// NVRTC compile-only for sm_90a) and the GPU / CPU runs (tests/cpp/test_gpu.cpp).
#pragma once

#include "tilus/lang/script.h"

namespace tests {
using namespace tilus;

// Per-thread indices of a 128-thread block, stored as tiles (one element per thread):
// idx[0:128] lane, [128:256] warp, [256:384] warp (sync), [384:512] warp group of 2 warps,
// [512:640] elect per 64 threads, [640:704] lanes in the thread group of threads [64, 128),
// [704:768] elect(0) in that group, [768:896] lane with warp_size 16.
struct ThreadIndices : Script {
  static constexpr const char* param_names = "idx";
  void operator()(Ptr<i32> idx) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto g = global_view(idx, {896});
    store_global(g, get_lane_idx(), {.offsets = {0}});
    store_global(g, get_warp_idx(), {.offsets = {128}});
    store_global(g, get_warp_idx_sync(), {.offsets = {256}});
    store_global(g, get_warp_group_idx(32, 2), {.offsets = {384}});
    store_global(g, shuffle_elect(64).to(dtypes::int32), {.offsets = {512}});
    thread_group(64, 64, [&] {
      store_global(g, get_lane_idx(), {.offsets = {640}});
      store_global(g, shuffle_elect(0).to(dtypes::int32), {.offsets = {704}});
    });
    store_global(g, get_lane_idx(16), {.offsets = {768}});
  }
};

// Shuffles of x [256] float32 with the layout local(2) * spatial(128) (thread t holds elements
// t and 128 + t): y[k * 256:(k + 1) * 256] for k = xor 1, down 3, up 2, shfl_sync(lane 5 of 8),
// shfl_xor by a run-time offset, and x shuffled as a spatial(128) tile of its first half.
struct Shuffles : Script {
  static constexpr const char* param_names = "offset, x, y";
  void operator()(Int32 offset, Ptr<f32> x, Ptr<f32> y) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto gx = global_view(x, {256});
    auto gy = global_view(y, {6 * 256});
    auto v = load_global(gx, {.offsets = {0}, .shape = {256}});
    annotate_layout(v, local({2}) * spatial({128}));
    store_global(gy, shfl_xor(v, 1), {.offsets = {0}});
    store_global(gy, shfl_down(v, 3), {.offsets = {256}});
    store_global(gy, shfl_up(v, 2), {.offsets = {512}});
    store_global(gy, shfl_sync(Expr(int64_t(0xffffffff)), v, 5, 8), {.offsets = {768}});
    store_global(gy, shfl_xor(v, offset), {.offsets = {1024}});
    // A per-thread value of another dtype (an int32 tile, shuffled through 32-bit registers).
    auto lane = get_lane_idx();
    store_global(gy, shfl_down(lane, 1).to(dtypes::float32), {.offsets = {1280}});
    store_global(gy, shfl_up(lane.to(dtypes::float16), 4).to(dtypes::float32), {.offsets = {1408}});
  }
};

// y = x + 1 vector by vector with ldgN / stgN (N = bits): block b moves elements
// [b * per, (b + 1) * per) of float32, per = N / 32; blocks at or past `live` load zeros
// (pred) and blocks past `stored` do not store.
struct VectorCopy : Script {
  static constexpr const char* param_names = "n, live, stored, x, y";
  int64_t bits = 128;
  explicit VectorCopy(int64_t bits = 128) : bits(bits) {}
  void operator()(Int32 n, Int32 live, Int32 stored, Ptr<f32> x, Ptr<f32> y) {
    int64_t per = bits / 32;
    attrs.blocks = {cdiv(n, per)};
    attrs.warps = 2;
    auto gx = global_view(x, {n});
    auto gy = global_view(y, {n});
    Expr i0 = blockIdx.x * int(per);
    auto src = gx.region({i0}, {(i0 + int(per)) - i0});
    auto dst = gy.region({i0}, {int(per)});
    Expr load_pred = blockIdx.x < live, store_pred = blockIdx.x < stored;
    RegisterTensor v;
    if (bits == 32) v = ldg32(gx.at({i0}), load_pred);
    else if (bits == 64) v = ldg64(src, load_pred);
    else if (bits == 128) v = ldg128(src, load_pred);
    else v = ldg256(src, load_pred);
    RegisterTensor w = v + 1.0f;
    if (bits == 32) stg32(dst, w, store_pred);
    else if (bits == 64) stg64(dst, w, store_pred);
    else if (bits == 128) stg128(dst, w, store_pred);
    else stg256(dst, w, store_pred);
  }
};

// Barriers and register budgets: named barriers over the block and over a thread group (and
// one warp group's arrival at a barrier another waits at), __syncwarp, a cluster barrier,
// loop_break, setmaxnreg in warp groups (sm_90a only). y[i] = x[i] * 2 for i < n, and y[n] =
// the trip count of a loop that breaks at `stop`.
struct Barriers : Script {
  static constexpr const char* param_names = "n, stop, x, y";
  bool registers = false;  // setmaxnreg (compiles for sm_90a only)
  void operator()(Int32 n, Int32 stop, Ptr<f32> x, Ptr<f32> y) {
    attrs.blocks = {1};
    attrs.warps = 8;
    auto gx = global_view(x, {n});
    auto gy = global_view(y, {n + 1});
    if (registers) {
      warp_group(0, 4, [&] { dec_max_nreg(40); });
      warp_group(4, 4, [&] { inc_max_nreg(232); });
    }
    auto s = shared_tensor(dtypes::float32, {256});
    store_shared(s, load_global(gx, {.offsets = {0}, .shape = {256}}) * 2.0f);
    sync_threads(1);
    store_global(gy, load_shared(s), {.offsets = {0}});
    warp_group(4, 4, [&] {
      sync_threads(2, 128);
      single_warp(1, [&] { sync_warp(); });
    });
    sync_threads(3, 256);
    // Two warp groups meet at a named barrier: one arrives without waiting, the other waits.
    warp_group(0, 4, [&] { named_barrier_arrive(4, 256); });
    warp_group(4, 4, [&] { sync_threads(4, 256); });
    cluster.sync();
    auto trips = declare("trips", dtypes::int32, 0);
    for (Expr i : range(100)) {
      if_(i == stop, [&] { loop_break(); });
      trips = trips + 1;
    }
    auto t = register_tensor(dtypes::float32, {1}, Init(tilus::cast(Expr(trips), dtypes::float32)));
    store_global(gy, t, {.offsets = {n}});
  }
};

// The cluster's builtins per block: out[4 * b + k] = cluster.blockIdx.x, .y, blockRank and
// clusterDim.x * 10 + clusterDim.y, for a grid of 4 x 2 blocks in clusters of 2 x 2.
struct ClusterIds : Script {
  static constexpr const char* param_names = "out";
  void operator()(Ptr<i32> out) {
    attrs.blocks = {4, 2};
    attrs.warps = 1;
    attrs.cluster_blocks = {2, 2};
    auto g = global_view(out, {32});
    Expr b = blockIdx.y * 4 + blockIdx.x;
    Expr values[4] = {cluster.blockIdx.x, cluster.blockIdx.y, cluster.blockRank,
                      cluster.clusterDim.x * 10 + cluster.clusterDim.y};
    for (int k = 0; k < 4; ++k) {
      auto t = register_tensor(dtypes::int32, {1}, Init(values[k]));
      store_global(g, t, {.offsets = {b * 4 + k}});
    }
  }
};

}  // namespace tests

namespace tests {

// A grid barrier between two phases: tmp[b] = x[b] * 2 for every block b, then after
// sync_grid y[b] = tmp[(b + 1) % blocks] (a neighbour's result, written by another block).
struct GridExchange : Script {
  static constexpr const char* param_names = "blocks, x, tmp, y";
  void operator()(Int32 blocks, Ptr<f32> x, Ptr<f32> tmp, Ptr<f32> y) {
    attrs.blocks = {blocks};
    attrs.warps = 4;
    auto gx = global_view(x, {blocks * 128});
    auto gt = global_view(tmp, {blocks * 128});
    auto gy = global_view(y, {blocks * 128});
    store_global(gt, load_global(gx, {.offsets = {blockIdx.x * 128}, .shape = {128}}) * 2.0f,
                 {.offsets = {blockIdx.x * 128}});
    sync_grid();
    Expr next = (blockIdx.x + 1) % blocks;
    store_global(gy, load_global(gt, {.offsets = {next * 128}, .shape = {128}}), {.offsets = {blockIdx.x * 128}});
  }
};

}  // namespace tests

namespace tests {

// Shuffles of every width of element: out[k * 64 + t] = int32(shfl_xor(lane as dtype k, 3)) for
// the dtypes below, over a 64-thread block.
inline const std::vector<DataType>& shuffle_dtypes() {
  static const std::vector<DataType> v = {dtypes::boolean, dtypes::int8,    dtypes::uint16,  dtypes::float16,
                                          dtypes::bfloat16, dtypes::int32,  dtypes::float32, dtypes::int64,
                                          dtypes::float64, dtypes::uint8};
  return v;
}
struct ShuffleDtypes : Script {
  static constexpr const char* param_names = "out";
  void operator()(Ptr<i32> out) {
    attrs.blocks = {1};
    attrs.warps = 2;
    auto g = global_view(out, {int64_t(shuffle_dtypes().size()) * 64});
    auto lane = get_lane_idx();
    for (size_t k = 0; k < shuffle_dtypes().size(); ++k)
      store_global(g, shfl_xor(lane.to(shuffle_dtypes()[k]), 3).to(dtypes::int32), {.offsets = {int64_t(k) * 64}});
  }
};

}  // namespace tests
