#include "cache-agent/remote/remote_fs.h"

#include <future>

namespace spoke::agent {

uint64_t FileAttr::ContentVersion() const {
  // Size and mtime (ns) identify a version of the content; ctime catches same-size rewrites
  // within one mtime tick where the hub keeps ctime finer.
  uint64_t h = size;
  h = h * 1000003u ^ static_cast<uint64_t>(mtime.tv_sec);
  h = h * 1000003u ^ static_cast<uint64_t>(mtime.tv_nsec);
  h = h * 1000003u ^ static_cast<uint64_t>(ctime.tv_sec);
  h = h * 1000003u ^ static_cast<uint64_t>(ctime.tv_nsec);
  return h;
}

Result<std::vector<char>> RemoteFs::Read(const std::string& path, uint64_t offset,
                                         uint32_t length) {
  std::promise<Result<std::vector<char>>> p;
  auto f = p.get_future();
  ReadAsync(path, offset, length, [&p](Result<std::vector<char>> r) { p.set_value(std::move(r)); });
  return f.get();
}

}  // namespace spoke::agent
