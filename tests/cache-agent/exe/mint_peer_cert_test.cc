// `spoke-cache-agent mint-peer-cert`, the real binary: what the chart's init container writes
// is a fresh key and a certificate the cluster CA signs for the node and pod IP, checked
// here with the openssl command line (an implementation other than the one that minted it).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "cache-agent/peer/peer_cert.h"
#include "tests/support/files.h"
#include "tests/support/hub.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

namespace spoke::agent {
namespace {

using spoke::testing::Capture;

class MintPeerCertTest : public ::testing::Test {
 protected:
  // Runs the subcommand with `args`; exit code and stdout + stderr.
  std::pair<int, std::string> Mint(const std::string& args) {
    return Capture(spoke::testing::AgentBinary() + " mint-peer-cert " + args + " 2>&1");
  }
  std::string StdArgs(const std::string& out) {
    return "--ca-cert " + ca_.ca_file() + " --ca-key " + ca_.ca_key_file() + " --out-dir " + out;
  }
  int Openssl(const std::string& args) { return Capture("openssl " + args + " 2>&1").first; }

  spoke::testing::TempDir dir_{"mint-peer-cert"};
  spoke::testing::TestCa ca_{dir_.path()};
};

TEST_F(MintPeerCertTest, WritesAKeyAndACertificateOfTheCaNamingTheNodeAndPodIp) {
  const std::string out = dir_.sub("out");
  ASSERT_EQ(::mkdir(out.c_str(), 0700), 0);
  auto [rc, text] =
      Mint(StdArgs(out) + " --dns node-a --ip 10.1.2.3 --ip fd00::7 --validity-days 30");
  ASSERT_EQ(rc, 0) << text;
  const std::string crt = out + "/tls.crt", key = out + "/tls.key", ca = out + "/ca.crt";
  // The chain verifies with the CA, for both ends of a TLS connection.
  EXPECT_EQ(Openssl("verify -CAfile " + ca + " -purpose sslserver " + crt), 0);
  EXPECT_EQ(Openssl("verify -CAfile " + ca + " -purpose sslclient " + crt), 0);
  EXPECT_EQ(spoke::testing::ReadWholeFile(ca), ca_.ca_pem());
  // The key is the certificate's, and only its owner reads it.
  auto pub_of_cert = Capture("openssl x509 -noout -pubkey -in " + crt);
  auto pub_of_key = Capture("openssl pkey -pubout -in " + key);
  ASSERT_EQ(pub_of_key.first, 0) << pub_of_key.second;
  EXPECT_EQ(pub_of_cert.second, pub_of_key.second);
  struct stat st {};
  ASSERT_EQ(::stat(key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Names: the node (DNS) and the pod's addresses (IP); not a CA.
  auto names = PeerCertSubjectAltNames(spoke::testing::ReadWholeFile(crt));
  ASSERT_TRUE(names) << names.error().ToString();
  EXPECT_EQ(names->dns_names, std::vector<std::string>{"node-a"});
  EXPECT_EQ(names->ips, (std::vector<std::string>{"10.1.2.3", "fd00::7"}));
  auto ext = Capture("openssl x509 -noout -ext basicConstraints,extendedKeyUsage -in " + crt);
  EXPECT_NE(ext.second.find("CA:FALSE"), std::string::npos) << ext.second;
  EXPECT_NE(ext.second.find("TLS Web Client Authentication"), std::string::npos) << ext.second;
  // Never outlives its CA (the test CA's ends in 2 days, before the 30 asked for).
  auto expires_within = [&](int hours) {
    return Openssl("x509 -noout -checkend " + std::to_string(hours * 3600) + " -in " + crt) != 0;
  };
  EXPECT_FALSE(expires_within(47));
  EXPECT_TRUE(expires_within(49));
  // Short-lived: --validity-days 1.
  ASSERT_EQ(Mint(StdArgs(out) + " --ip 10.1.2.3 --validity-days 1").first, 0);
  EXPECT_FALSE(expires_within(23));
  EXPECT_TRUE(expires_within(25));
  // A restarted pod mints a new key.
  const std::string first_key = spoke::testing::ReadWholeFile(key);
  ASSERT_EQ(Mint(StdArgs(out) + " --dns node-a --ip 10.1.2.3").first, 0);
  EXPECT_NE(spoke::testing::ReadWholeFile(key), first_key);
}

TEST_F(MintPeerCertTest, ABadCaKeyOrNameIsRefusedWithTheFileOrFlagNamed) {
  const std::string out = dir_.sub("out");
  ASSERT_EQ(::mkdir(out.c_str(), 0700), 0);
  const std::string ca_args = "--ca-cert " + ca_.ca_file() + " --out-dir " + out;
  // Another CA's key: the pair does not match.
  spoke::testing::TempDir other_dir("mint-other-ca");
  spoke::testing::TestCa other(other_dir.path(), "other-ca");
  auto [rc, text] = Mint(ca_args + " --ca-key " + other.ca_key_file() + " --ip 10.0.0.1");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(text.find("--ca-key " + other.ca_key_file() + ": is not the key"), std::string::npos)
      << text;
  // A missing key file, a file without PEM, a certificate where the key should be.
  auto missing = Mint(ca_args + " --ca-key " + dir_.sub("nope.key") + " --ip 10.0.0.1");
  EXPECT_EQ(missing.first, 1);
  EXPECT_NE(missing.second.find(dir_.sub("nope.key")), std::string::npos) << missing.second;
  spoke::testing::WriteFileWithDirs(dir_.sub("junk.key"), "not a key\n");
  auto junk = Mint(ca_args + " --ca-key " + dir_.sub("junk.key") + " --ip 10.0.0.1");
  EXPECT_EQ(junk.first, 1);
  EXPECT_NE(junk.second.find(dir_.sub("junk.key")), std::string::npos) << junk.second;
  auto swapped = Mint(ca_args + " --ca-key " + ca_.ca_file() + " --ip 10.0.0.1");
  EXPECT_EQ(swapped.first, 1);
  EXPECT_NE(swapped.second.find("not a PEM private key"), std::string::npos) << swapped.second;
  // Names that are not names; nothing to name; a missing flag.
  auto bad_ip = Mint(StdArgs(out) + " --ip 10.0.0.x");
  EXPECT_EQ(bad_ip.first, 1);
  EXPECT_NE(bad_ip.second.find("ip '10.0.0.x'"), std::string::npos) << bad_ip.second;
  auto bad_dns = Mint(StdArgs(out) + " --dns 'a,IP:1.2.3.4'");
  EXPECT_EQ(bad_dns.first, 1);
  EXPECT_NE(bad_dns.second.find("dns name"), std::string::npos) << bad_dns.second;
  EXPECT_EQ(Mint(StdArgs(out)).first, 1);
  EXPECT_EQ(Mint("--ca-cert " + ca_.ca_file() + " --ip 10.0.0.1").first, 2);
  EXPECT_NE(::access((out + "/tls.crt").c_str(), F_OK), 0);  // nothing written on failure
}

}  // namespace
}  // namespace spoke::agent
