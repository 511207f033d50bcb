#include "cache-agent/fs/kept_root.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace spoke::agent {

Status SaveRootAttr(const std::string& file, const FileAttr& a) {
  std::ostringstream out;
  out << a.fsid << ' ' << a.file_id << ' ' << a.mode << ' ' << a.nlink << ' ' << a.uid << ' '
      << a.gid << ' ' << a.size << ' ' << a.used << ' ' << a.rdev;
  for (const timespec& t : {a.atime, a.mtime, a.ctime}) out << ' ' << t.tv_sec << ' ' << t.tv_nsec;
  out << " end\n";
  const std::string tmp = file + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << out.str();
    f.flush();
    if (!f) return Fail(Code::kIo, "cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), file.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Fail(Code::kIo, "cannot rename " + tmp + " to " + file);
  }
  return Ok();
}

std::optional<FileAttr> LoadRootAttr(const std::string& file) {
  std::ifstream f(file);
  FileAttr a;
  std::string end;
  if (!(f >> a.fsid >> a.file_id >> a.mode >> a.nlink >> a.uid >> a.gid >> a.size >> a.used >>
        a.rdev)) {
    return std::nullopt;
  }
  for (timespec* t : {&a.atime, &a.mtime, &a.ctime}) {
    if (!(f >> t->tv_sec >> t->tv_nsec)) return std::nullopt;
  }
  if (!(f >> end) || end != "end" || !a.is_dir()) return std::nullopt;
  return a;
}

}  // namespace spoke::agent
