// ParseAgentConfig on arbitrary YAML: never crashes or throws (a list as a key once ended in
// std::terminate), and what it accepts is a configuration the components start with.
#include "cache-agent/agent/agent_config.h"
#include "cache-agent/cache/block_cache.h"
#include "cache-agent/remote/libnfs_remote.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spoke;
  auto c = agent::ParseAgentConfig(fuzz::AsText(data, size), "fuzz.yaml");
  if (!c) return 0;
  // One validation per setting: the config's bounds are the components' bounds.
  agent::LibnfsRemote::Config hub;
  hub.connections = c->hub.connections;
  hub.inflight_per_connection = c->hub.inflight_per_connection;
  hub.request_timeout_seconds = c->hub.request_timeout_seconds;
  hub.retries = c->hub.retries;
  SPOKE_FUZZ_CHECK(hub.Validate().has_value());
  agent::BlockCache::Config cache;
  cache.dir = c->cache_dir;
  cache.block_size = c->block_size_bytes;
  cache.capacity_bytes = c->cache_size_bytes;
  SPOKE_FUZZ_CHECK(cache.Validate().has_value());
  SPOKE_FUZZ_CHECK(!c->mount_roots.empty());
  return 0;
}
