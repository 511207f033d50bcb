#include "cache-agent/fs/kept_root.h"

#include <fstream>
#include <sstream>

#include "common/file_io.h"

namespace spoke::agent {

void WriteAttrText(std::ostream& out, const FileAttr& a) {
  out << a.fsid << ' ' << a.file_id << ' ' << a.mode << ' ' << a.nlink << ' ' << a.uid << ' '
      << a.gid << ' ' << a.size << ' ' << a.used << ' ' << a.rdev;
  for (const timespec& t : {a.atime, a.mtime, a.ctime}) out << ' ' << t.tv_sec << ' ' << t.tv_nsec;
}

bool ReadAttrText(std::istream& in, FileAttr* a) {
  if (!(in >> a->fsid >> a->file_id >> a->mode >> a->nlink >> a->uid >> a->gid >> a->size >>
        a->used >> a->rdev)) {
    return false;
  }
  for (timespec* t : {&a->atime, &a->mtime, &a->ctime}) {
    if (!(in >> t->tv_sec >> t->tv_nsec)) return false;
  }
  return true;
}

Status SaveRootAttr(const std::string& file, const FileAttr& a) {
  std::ostringstream out;
  WriteAttrText(out, a);
  out << " end\n";
  return ReplaceFile(file, out.str());
}

std::optional<FileAttr> LoadRootAttr(const std::string& file) {
  std::ifstream f(file);
  FileAttr a;
  std::string end;
  if (!ReadAttrText(f, &a) || !(f >> end) || end != "end" || !a.is_dir()) return std::nullopt;
  return a;
}

}  // namespace spoke::agent
