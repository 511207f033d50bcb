// The cluster token peers present to each other (a Kubernetes Secret mounted as a file).
#pragma once

#if !__has_include("spoke_layer/peer.h")
#error "wrong-way include: cache-agent/peer/ is not among this target's dependencies"
#endif

#include <string>
#include <string_view>

#include "common/status.h"

namespace spoke::agent {

// The metadata header every peer call carries.
inline constexpr char kPeerTokenHeader[] = "x-spoke-peer-token";
// Shortest token accepted: a guessable token would let anyone on the network read data.
inline constexpr size_t kPeerTokenMinBytes = 16;

// Reads the token from `path`: the file's content without trailing whitespace (Secrets
// often end in a newline). kNotFound when the file cannot be read; kInvalidArgument when
// the token is shorter than kPeerTokenMinBytes or holds whitespace or control characters
// (not valid in a gRPC metadata value).
Result<std::string> LoadPeerToken(const std::string& path);

// Compares in time independent of where the two differ (no early exit), so that a caller
// cannot find the token byte by byte from response times. Different lengths never match.
// The contents of a PEM file (certificate, key or CA) named by config key `what`; an error
// names the key and the path when it cannot be read or holds no PEM block.
Result<std::string> ReadPemFile(const std::string& path, std::string_view what);

bool PeerTokenEquals(std::string_view expected, std::string_view presented);

}  // namespace spoke::agent
