// FetchReader: the bytes of one sent fetch, from its route. The BlockSource (a peer's copy)
// for a fetch routed there; on any failure of it or a reply of the wrong length, the fetcher
// takes the fetch back to queue it for the hub (or, when it does not, the hub now). A hub reply
// is checked: bytes only from the file and version the block belongs to (the name may have been
// replaced on the hub since), and only whole blocks, so that nothing cached mixes versions.
// No state but the counter of refused reads: thread-safe; `done` runs on the source's or the
// remote's threads.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <functional>
#include <vector>

#include "cache-agent/fs/block_fetch.h"
#include "cache-agent/fs/block_source.h"
#include "cache-agent/remote/remote_fs.h"
#include "common/metrics.h"
#include "common/status.h"

namespace spoke::agent {

class FetchReader {
 public:
  // The fetch's bytes or error; `from_hub` false when the source gave them.
  using Done =
      std::function<void(const BlockFetchPtr& f, Result<std::vector<char>> bytes, bool from_hub)>;

  // `f`'s source ask failed (`busy`: the owner refused it for its quota). true: the fetcher
  // took `f` back (it is sent again, to the hub); false: the reader reads the hub now.
  using SourceFailed = std::function<bool(const BlockFetchPtr& f, bool busy)>;

  // `source` may be null (hub only); it, `remote` and `registry` must outlive the reader.
  FetchReader(RemoteFs& remote, BlockSource* source, metrics::Registry& registry,
              const metrics::Labels& labels, Done done, SourceFailed source_failed);

  // Reads `f` (its key, path, offset, length); calls `done` exactly once.
  void Read(const BlockFetchPtr& f);

 private:
  void ReadFromHub(const BlockFetchPtr& f);
  // The bytes of a checked read, or an error when the hub's file is not the version `f`
  // belongs to (ESTALE, counted) or the reply is not the whole block (EIO).
  Result<std::vector<char>> Check(const BlockFetch& f, Result<RemoteFs::CheckedRead> r);

  RemoteFs& remote_;
  BlockSource* const source_;
  const Done done_;
  const SourceFailed source_failed_;
  metrics::Counter* changed_files_;
};

}  // namespace spoke::agent
