// A test's own directory, removed with everything in it at scope exit. Header-only, so that
// unit tests use it without linking spoke_test_support.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace spoke::testing {

// <base>/<prefix>-XXXXXX; `base` is the system temp directory when empty.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "spoke-test", const std::string& base = "") {
    std::string tmpl = (base.empty() ? std::filesystem::temp_directory_path().string() : base) +
                       "/" + prefix + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp " << tmpl << ": " << std::generic_category().message(errno);
      return;
    }
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace spoke::testing
