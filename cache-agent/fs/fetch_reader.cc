#include "cache-agent/fs/fetch_reader.h"

#include <cerrno>
#include <string>
#include <utility>

namespace spoke::agent {

FetchReader::FetchReader(RemoteFs& remote, BlockSource* source, metrics::Registry& registry,
                         const metrics::Labels& labels, Done done, SourceFailed source_failed)
    : remote_(remote),
      source_(source),
      done_(std::move(done)),
      source_failed_(std::move(source_failed)),
      changed_files_(&registry.GetCounter(
          "spoke_hub_file_changed_total",
          "Hub reads refused because the file changed (or was replaced) since it was opened",
          labels)) {}

void FetchReader::Read(const BlockFetchPtr& f) {
  // A peer's copy is checked by its owner against the same file id and version.
  // `route` and `paced` are set when the fetch is sent (under the fetcher's lock, on this
  // thread). A source that declines at once is read around here: taken back, the fetch would
  // be sent again from this call.
  if (source_ == nullptr || f->route != kSourceRoute ||
      !source_->FetchAsync({f->key, f->path, f->offset, f->length, f->paced},
                           [this, f](Result<std::vector<char>> r) {
                             if (r && r->size() == f->length) return done_(f, std::move(r), false);
                             const bool busy = !r && r.error().ToErrno() == EBUSY;
                             if (!source_failed_(f, busy)) ReadFromHub(f);
                           })) {
    ReadFromHub(f);
  }
}

void FetchReader::ReadFromHub(const BlockFetchPtr& f) {
  auto checked = [this, f](Result<RemoteFs::CheckedRead> r) {
    done_(f, Check(*f, std::move(r)), true);
  };
  if (f->reader) {
    return remote_.ReadCheckedAsAsync(*f->reader, f->path, f->key.file_id, f->offset, f->length,
                                      std::move(checked));
  }
  remote_.ReadCheckedAsync(f->path, f->key.file_id, f->offset, f->length, std::move(checked));
}

Result<std::vector<char>> FetchReader::Check(const BlockFetch& f, Result<RemoteFs::CheckedRead> r) {
  if (!r) {
    if (r.error().ToErrno() == ESTALE) changed_files_->Inc();
    return std::unexpected(r.error());
  }
  if (f.written_here) return std::move(r->data);  // the writer's own bytes: no version to check
  if (r->attr.ContentVersion() != f.key.version) {
    changed_files_->Inc();
    return std::unexpected(Error::FromErrno(
        ESTALE, "hub file " + f.path + " changed since it was opened (size " +
                    std::to_string(r->attr.size) + "): block " + std::to_string(f.key.index) +
                    " not served, the file must be opened again"));
  }
  if (r->data.size() != f.length) {
    return std::unexpected(
        Error::FromErrno(EIO, "hub READ of " + f.path + " at " + std::to_string(f.offset) +
                                  " returned " + std::to_string(r->data.size()) + " of " +
                                  std::to_string(f.length) + " bytes of an unchanged file"));
  }
  return std::move(r->data);
}

}  // namespace spoke::agent
