// `spoke-cache-agent mint-peer-cert`: the chart's init container mints this agent's own peer
// certificate at pod start (docs/peers.md): a fresh key, a certificate of the cluster's peer
// CA naming the node and the pod IP, written for the agent container to read.
#pragma once

#if !__has_include("spoke_layer/exe.h")
#error "wrong-way include: cache-agent/exe/ is not among this target's dependencies"
#endif

namespace spoke::agent {

// argv[0] is "mint-peer-cert". Returns the process exit code: 0 done, 1 failed (the reason
// on stderr, naming the flag or file), 2 bad usage.
int RunMintPeerCert(int argc, char** argv);

}  // namespace spoke::agent
