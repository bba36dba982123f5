// examples::VectorAdd with its blocks in thread-block clusters (Hopper): the tests of the
// cluster shape from the Script down to the launch use it.
#pragma once

#include "../../examples/cpp/vector_add.h"

namespace tests {
using namespace tilus;

struct ClusteredVectorAdd : examples::VectorAdd {
  std::vector<int64_t> cluster;
  explicit ClusteredVectorAdd(std::vector<int64_t> cluster, int64_t block = 256) : VectorAdd(block), cluster(cluster) {}
  void operator()(Int32 n, Ptr<f32> a, Ptr<f32> b, Ptr<f32> c) {
    attrs.cluster_blocks = cluster;
    VectorAdd::operator()(n, a, b, c);
  }
};

}  // namespace tests
