// Cluster launch control (self.clc.*, sm_100): a running block cancels a cluster that has not
// started and takes over its work. Each instruction's definition (inst_def.h): name, group,
// emitters' family, traits, attributes and its verifier hook, the checks below.
#include "../verify_util.h"

namespace tilus {

namespace {
using namespace verify_detail;

// The 16-byte response of clusterlaunchcontrol.try_cancel: a shared tensor of 16 bytes.
void expect_response(const InstNode& i, const Tensor& t) {
  if (!t.defined() || !t.is_shared() || t.dtype().storage_bytes(t.num_elements()) != 16)
    fail(i, fmt::format("response must be a shared tensor of 16 bytes (int32[4]: s_response[stage] of a shared "
                        "int32[stages, 4]), got {}",
                        ty(t)));
}

void check_try_cancel(const InstNode& inst) {
  auto& i = static_cast<const DefinedInst&>(inst);
  expect_response(i, i.tensor("response"));
}

void check_query(const ClcQueryInst& i) { expect_response(i, i.response); }

}  // namespace

void insts::add_clc(std::vector<InstDef>& d) {
  using verify_detail::hook;
  d.push_back({.name = "clc.try_cancel", .group = "clc", .emit = EmitFamily::AsyncProxy,
               .traits = {.completion = Completion::MbarrierTx, .proxy = Proxy::Async, .min_sm = 100},
               .summary = "asks to cancel a cluster that has not started; its 16-byte response lands in response and "
                          "completes 16 bytes on the mbarrier (multicast: in every block of the cluster)",
               .attrs = {{"multicast", AttrType::Bool, "false"}},
               .operands = {{.name = "response", .scopes = kShared, .access = Access::Write,
                             .doc = "16 bytes of shared memory: s_response[stage] of a shared int32[stages, 4]"},
                            {.name = "mbarrier", .scopes = kShared, .access = Access::Read, .dtype = "uint64", .numel = 1,
                             .doc = "one mbarrier, mbarrier.alloc(...)[i]; the kernel expects the 16 bytes on it"}},
               .verify = check_try_cancel});
  d.push_back({.name = "clc.query_response", .group = "clc", .kind = InstKind::ClcQuery, .emit = EmitFamily::AsyncProxy,
               .traits = {.min_sm = 100},
               .summary = "decodes a try_cancel response: whether it canceled a cluster, and that cluster's first block "
                          "index",
               .verify = hook(check_query)});
}

}  // namespace tilus
