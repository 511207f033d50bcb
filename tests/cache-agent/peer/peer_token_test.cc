#include "cache-agent/peer/peer_token.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/support/hub.h"

namespace spoke::agent {
namespace {

TEST(PeerToken, EqualOnlyWhenEveryByteAndTheLengthMatch) {
  const std::string t = "0123456789abcdef0123";
  EXPECT_TRUE(PeerTokenEquals(t, t));
  EXPECT_FALSE(PeerTokenEquals(t, "0123456789abcdef0124"));     // last byte
  EXPECT_FALSE(PeerTokenEquals(t, "x123456789abcdef0123"));     // first byte
  EXPECT_FALSE(PeerTokenEquals(t, t.substr(0, t.size() - 1)));  // prefix
  EXPECT_FALSE(PeerTokenEquals(t, t + "4"));                    // longer
  EXPECT_FALSE(PeerTokenEquals(t, ""));
  EXPECT_FALSE(PeerTokenEquals("", ""));  // no token configured: nobody gets in
}

class PeerTokenFile : public ::testing::Test {
 protected:
  std::string Write(const std::string& content) {
    std::string path = dir_.path() + "/token";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
    return path;
  }
  spoke::testing::TempDir dir_{"spoke-peer-token"};
};

TEST_F(PeerTokenFile, TrailingNewlineOfASecretIsNotPartOfTheToken) {
  auto t = LoadPeerToken(Write("s3cr3t-cluster-token-0001\n"));
  ASSERT_TRUE(t) << t.error().ToString();
  EXPECT_EQ(*t, "s3cr3t-cluster-token-0001");
}

TEST_F(PeerTokenFile, MissingFileIsNotFoundNamingTheSetting) {
  auto t = LoadPeerToken(dir_.path() + "/nope");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code(), Code::kNotFound);
  EXPECT_NE(t.error().message().find("peerTokenFile"), std::string::npos);
}

TEST_F(PeerTokenFile, ShortTokenIsRefused) {
  auto t = LoadPeerToken(Write("short\n"));
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code(), Code::kInvalidArgument);
  EXPECT_NE(t.error().message().find("at least 16 bytes"), std::string::npos);
}

TEST_F(PeerTokenFile, WhitespaceInsideTheTokenIsRefused) {
  auto t = LoadPeerToken(Write("0123456789 abcdef0123\n"));
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message().find("printable ASCII"), std::string::npos);
}

}  // namespace
}  // namespace spoke::agent
