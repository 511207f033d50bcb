// Certificates for tests of the peer channel's mutual TLS: a CA and agent certificates it
// signs, made with the openssl command line in a directory of the test's.
#pragma once

#include <string>
#include <vector>

namespace spoke::testing {

struct TestCert {
  std::string cert_file, key_file;  // PEM files
  std::string cert_pem, key_pem;
};

class TestCa {
 public:
  // A new CA in `dir` (which must exist). Fails the test (ADD_FAILURE) if openssl fails.
  explicit TestCa(const std::string& dir, const std::string& name = "spoke-test-ca");
  // A certificate this CA signs, with `dns_name` (unless empty) and `ips` as its subject
  // alternative names.
  TestCert Issue(const std::string& file_prefix, const std::string& dns_name,
                 const std::vector<std::string>& ips = {}) const;

  const std::string& ca_file() const { return ca_file_; }
  const std::string& ca_key_file() const { return ca_key_file_; }
  const std::string& ca_pem() const { return ca_pem_; }

 private:
  std::string dir_, ca_file_, ca_key_file_, ca_pem_;
};

}  // namespace spoke::testing
