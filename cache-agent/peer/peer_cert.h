// An agent's own peer certificate, minted at pod start (`spoke-cache-agent mint-peer-cert`,
// the chart's init container): a key made here and never stored elsewhere, a certificate the
// cluster's peer CA signs naming this agent's addresses (docs/peers.md, "Protocol and trust").
#pragma once

#if !__has_include("spoke_layer/peer.h")
#error "wrong-way include: cache-agent/peer/ is not among this target's dependencies"
#endif

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace spoke::agent {

struct PeerCertRequest {
  std::string ca_cert_pem;
  std::string ca_key_pem;
  std::vector<std::string> dns_names;  // DNS subject alternative names (the node name)
  std::vector<std::string> ips;        // IP subject alternative names (the pod IP)
  std::chrono::hours validity{24 * 30};
  // Names the inputs in errors ("--ca-key /var/run/...").
  std::string ca_cert_what = "CA certificate";
  std::string ca_key_what = "CA key";
};

struct PeerCert {
  std::string cert_pem;  // signed by the CA; client and server use
  std::string key_pem;   // EC P-256, PKCS#8
};

// A new key and a certificate for it. kInvalidArgument for a name or address that is not
// one, no name at all, a validity outside 1 h..10 years, a CA certificate or key that does
// not parse, a key that is not the certificate's or a certificate that is not a CA (the
// message names the input); kInternal when OpenSSL fails otherwise.
Result<PeerCert> MintPeerCert(const PeerCertRequest& request);

// Writes tls.crt, tls.key (mode 0600) and ca.crt into `dir`, each through a temporary file
// renamed into place. kIo with the path when a write fails.
Status WritePeerCertFiles(const std::string& dir, const PeerCert& cert, const std::string& ca_pem);

// The IP and DNS subject alternative names of a PEM certificate (tests, diagnostics).
struct PeerCertNames {
  std::vector<std::string> ips, dns_names;
};
Result<PeerCertNames> PeerCertSubjectAltNames(const std::string& cert_pem);

// When a PEM certificate expires. kInvalidArgument when it does not parse.
Result<std::chrono::system_clock::time_point> PeerCertNotAfter(const std::string& cert_pem);

// The canonical text of an IP address (inet_ntop of inet_pton), brackets allowed; "" when
// `text` is not an address. Certificate and member addresses are compared in this form.
std::string CanonicalIp(std::string text);

}  // namespace spoke::agent
