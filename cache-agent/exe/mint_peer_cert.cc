#include "cache-agent/exe/mint_peer_cert.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cache-agent/peer/peer_cert.h"
#include "cache-agent/peer/peer_token.h"

namespace spoke::agent {
namespace {

constexpr char kUsage[] =
    "usage: spoke-cache-agent mint-peer-cert --ca-cert FILE --ca-key FILE --out-dir DIR\n"
    "         [--dns NAME]... [--ip ADDRESS]... [--validity-days N]\n"
    "Writes DIR/tls.key (a new EC P-256 key), DIR/tls.crt (signed by the CA, naming every\n"
    "--dns and --ip, client and server use) and DIR/ca.crt.\n";

struct MintArgs {
  std::string ca_cert, ca_key, out_dir;
  PeerCertRequest request;
};

// Fills `out`; false (with the reason on stderr) for a bad argument.
bool ParseMintArgs(int argc, char** argv, MintArgs& out) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string flag = a.substr(0, a.find('='));
    std::string v;
    if (a.find('=') != std::string::npos) {
      v = a.substr(a.find('=') + 1);
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      std::fprintf(stderr, "%s needs a value\n%s", flag.c_str(), kUsage);
      return false;
    }
    if (flag == "--ca-cert") {
      out.ca_cert = v;
    } else if (flag == "--ca-key") {
      out.ca_key = v;
    } else if (flag == "--out-dir") {
      out.out_dir = v;
    } else if (flag == "--dns") {
      out.request.dns_names.push_back(v);
    } else if (flag == "--ip") {
      out.request.ips.push_back(v);
    } else if (flag == "--validity-days") {
      char* end = nullptr;
      long days = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || days < 1 || days > 3650) {
        std::fprintf(stderr, "--validity-days: want 1..3650, got '%s'\n", v.c_str());
        return false;
      }
      out.request.validity = std::chrono::hours(24 * days);
    } else {
      std::fprintf(stderr, "unknown argument '%s'\n%s", a.c_str(), kUsage);
      return false;
    }
  }
  if (out.ca_cert.empty() || out.ca_key.empty() || out.out_dir.empty()) {
    std::fprintf(stderr, "--ca-cert, --ca-key and --out-dir are required\n%s", kUsage);
    return false;
  }
  return true;
}

}  // namespace

int RunMintPeerCert(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  MintArgs args;
  if (!ParseMintArgs(argc, argv, args)) return 2;
  auto fail = [](const Error& e) {
    std::fprintf(stderr, "mint-peer-cert: %s\n", e.message().c_str());
    return 1;
  };
  auto ca_pem = ReadPemFile(args.ca_cert, "--ca-cert");
  if (!ca_pem) return fail(ca_pem.error());
  auto key_pem = ReadPemFile(args.ca_key, "--ca-key");
  if (!key_pem) return fail(key_pem.error());
  args.request.ca_cert_pem = *ca_pem;
  args.request.ca_key_pem = *key_pem;
  args.request.ca_cert_what = "--ca-cert " + args.ca_cert;
  args.request.ca_key_what = "--ca-key " + args.ca_key;
  auto cert = MintPeerCert(args.request);
  if (!cert) return fail(cert.error());
  if (auto s = WritePeerCertFiles(args.out_dir, *cert, *ca_pem); !s) return fail(s.error());
  std::string names;
  for (const auto& d : args.request.dns_names) names += " DNS:" + d;
  for (const auto& ip : args.request.ips) names += " IP:" + ip;
  std::printf("mint-peer-cert: wrote %s/tls.crt for%s\n", args.out_dir.c_str(), names.c_str());
  return 0;
}

}  // namespace spoke::agent
