#include "tests/support/test_certs.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace spoke::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Run(const std::string& cmd) {
  int rc = std::system((cmd + " >/dev/null 2>&1").c_str());
  if (rc != 0) ADD_FAILURE() << "failed (" << rc << "): " << cmd;
  return rc == 0;
}

}  // namespace

TestCa::TestCa(const std::string& dir, const std::string& name)
    : dir_(dir), ca_file_(dir + "/" + name + ".crt"), ca_key_file_(dir + "/" + name + ".key") {
  Run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2"
      " -subj /CN=" +
      name + " -keyout " + ca_key_file_ + " -out " + ca_file_);
  ca_pem_ = ReadAll(ca_file_);
}

TestCert TestCa::Issue(const std::string& file_prefix, const std::string& dns_name,
                       const std::vector<std::string>& ips) const {
  const std::string base = dir_ + "/" + file_prefix;
  TestCert c;
  c.cert_file = base + ".crt";
  c.key_file = base + ".key";
  std::string names = dns_name.empty() ? "" : "DNS:" + dns_name;
  for (const auto& ip : ips) names += (names.empty() ? "IP:" : ",IP:") + ip;
  std::ofstream(base + ".ext") << "subjectAltName=" << names << "\n";
  const std::string cn = dns_name.empty() ? ips.at(0) : dns_name;
  Run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=" + cn +
      " -keyout " + c.key_file + " -out " + base + ".csr");
  Run("openssl x509 -req -days 2 -in " + base + ".csr -CA " + ca_file_ + " -CAkey " + ca_key_file_ +
      " -CAcreateserial -extfile " + base + ".ext -out " + c.cert_file);
  c.cert_pem = ReadAll(c.cert_file);
  c.key_pem = ReadAll(c.key_file);
  return c;
}

}  // namespace spoke::testing
