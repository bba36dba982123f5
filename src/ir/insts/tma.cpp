// The TMA store groups (self.tma.commit_group / wait_group); the TMA copies are the memory family's.
// Each instruction's definition (inst_def.h): name, group, emitters' family, traits, attributes
// and its verifier hook, the check below.
#include "../verify_util.h"

namespace tilus {

namespace {
using namespace verify_detail;

void check_tma_wait_group(const TmaWaitGroupInst& i) {
  if (i.n < 0) fail(i, fmt::format("n must be >= 0 (the number of groups left pending), got {}", i.n));
}

}  // namespace

void insts::add_tma(std::vector<InstDef>& d) {
  using verify_detail::hook;
  d.push_back({.name = "tma.commit_group", .group = "tma", .kind = InstKind::TmaCommitGroup,
               .emit = EmitFamily::AsyncProxy,
               .traits = {.role = SyncRole::Commit, .completion = Completion::TmaStoreGroup, .proxy = Proxy::Async, .min_sm = 90},
               .summary = "closes the group of TMA stores issued since the last commit (tma_store_arrive)"});
  d.push_back({.name = "tma.wait_group", .group = "tma", .kind = InstKind::TmaWaitGroup, .emit = EmitFamily::AsyncProxy,
               .traits = {.role = SyncRole::Wait, .completion = Completion::TmaStoreGroup, .proxy = Proxy::Async, .min_sm = 90},
               .summary = "waits until at most n TMA store groups are pending (tma_store_wait)",
               .attrs = {{"n", AttrType::Int, "0"}, {"read", AttrType::Bool, "false"}},
               .verify = hook(check_tma_wait_group)});

}

}  // namespace tilus
