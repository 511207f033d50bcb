#include "cache-agent/peer/peer_token.h"

#include <fstream>
#include <sstream>

namespace spoke::agent {

Result<std::string> LoadPeerToken(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Fail(Code::kNotFound, "peerTokenFile: cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string token = ss.str();
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ' ||
                            token.back() == '\t')) {
    token.pop_back();
  }
  if (token.size() < kPeerTokenMinBytes) {
    return Fail(Code::kInvalidArgument, "peerTokenFile: the token in " + path +
                                            " must be at least " +
                                            std::to_string(kPeerTokenMinBytes) + " bytes");
  }
  for (unsigned char c : token) {
    if (c <= 0x20 || c >= 0x7f) {
      return Fail(Code::kInvalidArgument, "peerTokenFile: the token in " + path +
                                              " may hold only printable ASCII without spaces");
    }
  }
  return token;
}

Result<std::string> ReadPemFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Fail(Code::kNotFound, std::string(what) + ": cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string pem = ss.str();
  if (pem.find("-----BEGIN ") == std::string::npos) {
    return Fail(Code::kInvalidArgument, std::string(what) + ": " + path + " holds no PEM block");
  }
  return pem;
}

bool PeerTokenEquals(std::string_view expected, std::string_view presented) {
  // Every byte of the expected token is compared whatever the presented one holds.
  unsigned char diff = expected.size() == presented.size() && !expected.empty() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    unsigned char p = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    diff |= static_cast<unsigned char>(expected[i]) ^ p;
  }
  // Keep the compiler from turning the loop into an early-exit comparison.
  volatile unsigned char result = diff;
  return result == 0;
}

}  // namespace spoke::agent
