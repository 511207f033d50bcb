// HandleTable: NFSv3 file handles the hub gave in READDIRPLUS replies, by volume-relative
// path (the HandleStore of a RemoteFs used without a metadata cache), so that a read of a listed
// file is one READ round trip (no LOOKUP per path component, no ACCESS) and a listing of a listed
// directory is READDIRPLUS alone.
//
// A handle names one file for the file's whole life, whatever its name becomes, so the
// table may lag behind renames: every user checks the file id the entry was recorded with
// (and the reply's attributes) against the file it means, and a handle the hub calls stale
// is dropped. Bounded (least recently used entries go); shared by the pool's connections
// (NFS handles belong to the server, not to a connection). Thread-safe.
#pragma once

#if !__has_include("spoke_layer/remote.h")
#error "wrong-way include: cache-agent/remote/ is not among this target's dependencies"
#endif

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "cache-agent/remote/remote_fs.h"
#include "common/thread_annotations.h"

namespace spoke::agent {

// A RemoteFs's own store when no metadata cache is attached (a standalone client, tests).
class HandleTable final : public HandleStore {
 public:
  using Entry = HandleStore::Entry;

  explicit HandleTable(size_t capacity) : capacity_(capacity) {}

  std::optional<Entry> FindHandle(const std::string& path) override { return Find(path); }
  void DropHandles(const std::string& path) override { DropTree(path); }

  void Put(const std::string& path, std::string_view fh, uint64_t file_id);
  std::optional<Entry> Find(const std::string& path);
  // Drops `path` and every path under it ("a" drops "a/b"; not "ab").
  void DropTree(const std::string& path);
  size_t size() const;

 private:
  struct Slot;
  // Ordered: a directory's descendants are one range ("a/" .. "a0"), so dropping a tree
  // costs its size, not the table's.
  using Map = std::map<std::string, Slot, std::less<>>;
  struct Slot {
    Entry entry;
    std::list<Map::iterator>::iterator lru;
  };
  Map::iterator DropLocked(Map::iterator it) REQUIRES(mu_);

  const size_t capacity_;
  mutable spoke::Mutex mu_;
  Map map_ GUARDED_BY(mu_);
  std::list<Map::iterator> lru_ GUARDED_BY(mu_);  // front = most recently used
};

}  // namespace spoke::agent
