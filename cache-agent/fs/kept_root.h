// The volume root's attributes as the last agent saw them, kept in the mount's state
// directory. An agent taking a mount over starts from them without a hub round trip (the hub
// may be unreachable: the mount must not be detached for it), and numbers files as before:
// the root's fsid is part of every inode number the kernel holds.
#pragma once

#if !__has_include("spoke_layer/fs.h")
#error "wrong-way include: cache-agent/fs/ is not among this target's dependencies"
#endif

#include <iosfwd>
#include <optional>
#include <string>

#include "cache-agent/remote/remote_fs.h"
#include "common/status.h"

namespace spoke::agent {

// Written whole (temp file + rename). kIo when it cannot be written.
Status SaveRootAttr(const std::string& file, const FileAttr& attr);
// nullopt when the file is missing or not a complete record of a directory.
std::optional<FileAttr> LoadRootAttr(const std::string& file);

// The text form of FileAttr in the state directory's files: numbers separated by spaces.
void WriteAttrText(std::ostream& out, const FileAttr& attr);
bool ReadAttrText(std::istream& in, FileAttr* attr);

}  // namespace spoke::agent
