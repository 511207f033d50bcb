// Rendezvous (highest random weight) ownership of blocks among the cluster's peers: each
// block belongs to the member whose hash with the block's key is highest. Every agent that
// sees the same member set picks the same owner, and when a member joins or leaves only the
// blocks it gains or held move (about 1/n of them).
#pragma once

#if !__has_include("spoke_layer/peer.h")
#error "wrong-way include: cache-agent/peer/ is not among this target's dependencies"
#endif

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace spoke::agent {

// A member's weight for a block: a 64-bit mix of the member's name and the block's hash.
uint64_t RendezvousWeight(std::string_view member, uint64_t block_hash);

// The index in `members` of the block's owner; -1 when `members` is empty. Ties (equal
// weights) go to the lexicographically smaller name so that every agent agrees.
int RendezvousOwner(const std::vector<std::string>& members, uint64_t block_hash);

// The hash of one block of one hub file as every agent computes it: hub identity (hub +
// volume path), file id, version and block index. Agent-local keys (volume ids) stay out.
uint64_t PeerBlockHash(std::string_view hub_identity, uint64_t file_id, uint64_t version,
                       uint64_t block_index);

}  // namespace spoke::agent
