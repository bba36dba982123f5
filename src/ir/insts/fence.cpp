// The proxy fences (self.fence.*).
// Each instruction's definition (inst_def.h): name, group, emitters' family, traits, attributes
// and its verifier hook, the check below.
#include "../verify_util.h"

namespace tilus {

namespace {
using namespace verify_detail;

void check_fence_proxy_async(const FenceProxyAsyncInst& i) {
  if (i.space != "shared" && i.space != "global")
    fail(i, fmt::format("space='{}' is not one of 'shared', 'global'", i.space));
}

}  // namespace

void insts::add_fence(std::vector<InstDef>& d) {
  using verify_detail::hook;
  d.push_back({.name = "fence.proxy_async", .group = "fence", .kind = InstKind::FenceProxyAsync,
               .emit = EmitFamily::AsyncProxy, .traits = {.role = SyncRole::ProxyFence, .proxy = Proxy::Async},
               .summary = "orders generic-proxy accesses with async-proxy ones",
               .attrs = {{"space", AttrType::String, "shared", {"shared", "global"}}},
               .verify = hook(check_fence_proxy_async)});

}

}  // namespace tilus
