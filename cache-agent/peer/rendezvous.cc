#include "cache-agent/peer/rendezvous.h"

#include <xxhash.h>

namespace spoke::agent {

uint64_t RendezvousWeight(std::string_view member, uint64_t block_hash) {
  // Seeding the member's hash with the block's gives independent weights per block.
  return XXH3_64bits_withSeed(member.data(), member.size(), block_hash);
}

int RendezvousOwner(const std::vector<std::string>& members, uint64_t block_hash) {
  int best = -1;
  uint64_t best_weight = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    uint64_t w = RendezvousWeight(members[i], block_hash);
    if (best < 0 || w > best_weight || (w == best_weight && members[i] < members[best])) {
      best = static_cast<int>(i);
      best_weight = w;
    }
  }
  return best;
}

uint64_t PeerBlockHash(std::string_view hub_identity, uint64_t file_id, uint64_t version,
                       uint64_t block_index) {
  uint64_t h = XXH3_64bits(hub_identity.data(), hub_identity.size());
  const uint64_t parts[3] = {file_id, version, block_index};
  return XXH3_64bits_withSeed(parts, sizeof parts, h);
}

}  // namespace spoke::agent
