#include "cache-agent/peer/peer_cert.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

namespace spoke::agent {
namespace {

template <auto Free>
struct Deleter {
  template <typename T>
  void operator()(T* p) const {
    Free(p);
  }
};
using BioPtr = std::unique_ptr<BIO, Deleter<BIO_free_all>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;
using BnPtr = std::unique_ptr<BIGNUM, Deleter<BN_free>>;
using NamesPtr = std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES_free>>;

// The oldest OpenSSL error of this thread, for a message; clears the queue.
std::string SslError() {
  unsigned long e = ERR_get_error();
  char buf[256] = "unknown OpenSSL error";
  if (e != 0) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

BioPtr MemBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string BioText(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

// A DNS name of letters, digits and hyphens in dot-separated labels (Kubernetes node names).
bool IsDnsName(const std::string& name) {
  if (name.empty() || name.size() > 253 || name.front() == '.' || name.back() == '.') return false;
  size_t label = 0;
  for (char c : name) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
    if (!ok || ++label > 63) return false;
  }
  return true;
}

// "DNS:a,IP:b" for the subjectAltName extension, from checked names only.
Result<std::string> AltNames(const PeerCertRequest& r) {
  std::string out;
  for (const auto& d : r.dns_names) {
    if (!IsDnsName(d))
      return Fail(Code::kInvalidArgument, "dns name '" + d + "': want a DNS name (the node name)");
    out += (out.empty() ? "DNS:" : ",DNS:") + d;
  }
  for (const auto& ip : r.ips) {
    std::string canonical = CanonicalIp(ip);
    if (canonical.empty())
      return Fail(Code::kInvalidArgument, "ip '" + ip + "': want an IPv4 or IPv6 address");
    out += (out.empty() ? "IP:" : ",IP:") + canonical;
  }
  if (out.empty()) return Fail(Code::kInvalidArgument, "no DNS name or IP to certify");
  return out;
}

// The CA certificate and key, checked to be a CA and a matching pair.
Result<std::pair<X509Ptr, KeyPtr>> LoadCa(const PeerCertRequest& r) {
  X509Ptr ca(PEM_read_bio_X509(MemBio(r.ca_cert_pem).get(), nullptr, nullptr, nullptr));
  if (!ca)
    return Fail(Code::kInvalidArgument,
                r.ca_cert_what + ": not a PEM certificate (" + SslError() + ")");
  KeyPtr key(PEM_read_bio_PrivateKey(MemBio(r.ca_key_pem).get(), nullptr, nullptr, nullptr));
  if (!key)
    return Fail(Code::kInvalidArgument,
                r.ca_key_what + ": not a PEM private key (" + SslError() + ")");
  if (X509_check_ca(ca.get()) == 0)
    return Fail(Code::kInvalidArgument, r.ca_cert_what + ": not a CA certificate");
  if (X509_check_private_key(ca.get(), key.get()) != 1) {
    ERR_clear_error();
    return Fail(Code::kInvalidArgument,
                r.ca_key_what + ": is not the key of " + r.ca_cert_what + " (another CA's key?)");
  }
  return std::make_pair(std::move(ca), std::move(key));
}

// A random positive 127-bit serial (RFC 5280: unique per CA, at most 20 bytes).
bool SetRandomSerial(X509* cert) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return false;
  bytes[0] &= 0x7f;
  BnPtr bn(BN_bin2bn(bytes, sizeof bytes, nullptr));
  return bn && BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert)) != nullptr;
}

bool AddExtension(X509* cert, X509V3_CTX* ctx, int nid, const std::string& value) {
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, ctx, nid, value.c_str());
  if (ext == nullptr) return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// Fills `cert` for `key`, signed by the CA: an end-entity certificate for TLS client and
// server use, valid from 5 minutes ago (clock skew between nodes) for `validity`, never
// beyond the CA.
bool BuildCert(X509* cert, EVP_PKEY* key, X509* ca, EVP_PKEY* ca_key, const std::string& alt,
               const std::string& subject_cn, std::chrono::seconds validity) {
  X509_NAME* subject = X509_get_subject_name(cert);
  if (X509_set_version(cert, 2) != 1 || !SetRandomSerial(cert) ||
      X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(subject_cn.c_str()), -1, -1,
                                 0) != 1 ||
      X509_set_issuer_name(cert, X509_get_subject_name(ca)) != 1 ||
      X509_gmtime_adj(X509_getm_notBefore(cert), -300) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert), static_cast<long>(validity.count())) == nullptr ||
      X509_set_pubkey(cert, key) != 1) {
    return false;
  }
  if (ASN1_TIME_compare(X509_get0_notAfter(cert), X509_get0_notAfter(ca)) > 0 &&
      X509_set1_notAfter(cert, X509_get0_notAfter(ca)) != 1) {
    return false;
  }
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, ca, cert, nullptr, nullptr, 0);
  return AddExtension(cert, &ctx, NID_basic_constraints, "critical,CA:FALSE") &&
         AddExtension(cert, &ctx, NID_key_usage, "critical,digitalSignature,keyEncipherment") &&
         AddExtension(cert, &ctx, NID_ext_key_usage, "serverAuth,clientAuth") &&
         AddExtension(cert, &ctx, NID_subject_key_identifier, "hash") &&
         AddExtension(cert, &ctx, NID_authority_key_identifier, "keyid:always") &&
         AddExtension(cert, &ctx, NID_subject_alt_name, alt) &&
         X509_sign(cert, ca_key, EVP_sha256()) > 0;
}

Status WriteFileAtomically(const std::string& path, const std::string& data, mode_t mode) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return std::unexpected(Error::FromErrno(errno, "open " + tmp));
  bool ok = ::fchmod(fd, mode) == 0 &&
            ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size()) &&
            ::fsync(fd) == 0;
  int err = errno;
  ::close(fd);
  if (!ok) return std::unexpected(Error::FromErrno(err, "write " + tmp));
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return std::unexpected(Error::FromErrno(errno, "rename " + tmp + " to " + path));
  return Ok();
}

}  // namespace

std::string CanonicalIp(std::string text) {
  if (text.size() > 2 && text.front() == '[' && text.back() == ']')
    text = text.substr(1, text.size() - 2);
  unsigned char buf[sizeof(in6_addr)];
  char out[INET6_ADDRSTRLEN] = {};
  if (::inet_pton(AF_INET, text.c_str(), buf) == 1) {
    return ::inet_ntop(AF_INET, buf, out, sizeof out) ? out : "";
  }
  if (::inet_pton(AF_INET6, text.c_str(), buf) == 1) {
    return ::inet_ntop(AF_INET6, buf, out, sizeof out) ? out : "";
  }
  return "";
}

Result<PeerCert> MintPeerCert(const PeerCertRequest& r) {
  if (r.validity < std::chrono::hours(1) || r.validity > std::chrono::hours(24 * 3650))
    return Fail(Code::kInvalidArgument, "validity: want 1 hour .. 3650 days");
  SPOKE_TRY(std::string alt, AltNames(r));
  SPOKE_TRY(auto ca, LoadCa(r));
  KeyPtr key(EVP_EC_gen("P-256"));
  X509Ptr cert(X509_new());
  const std::string cn = r.dns_names.empty() ? CanonicalIp(r.ips.front()) : r.dns_names.front();
  if (!key || !cert ||
      !BuildCert(cert.get(), key.get(), ca.first.get(), ca.second.get(), alt, cn,
                 std::chrono::duration_cast<std::chrono::seconds>(r.validity))) {
    return Fail(Code::kInternal, "minting the peer certificate: " + SslError());
  }
  BioPtr cert_out(BIO_new(BIO_s_mem()));
  BioPtr key_out(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_X509(cert_out.get(), cert.get()) != 1 ||
      PEM_write_bio_PrivateKey(key_out.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) !=
          1) {
    return Fail(Code::kInternal, "writing the peer certificate as PEM: " + SslError());
  }
  return PeerCert{.cert_pem = BioText(cert_out.get()), .key_pem = BioText(key_out.get())};
}

Status WritePeerCertFiles(const std::string& dir, const PeerCert& cert, const std::string& ca_pem) {
  // The key first and the certificate last: a reader that finds tls.crt finds its key.
  SPOKE_RETURN_IF_ERROR(WriteFileAtomically(dir + "/tls.key", cert.key_pem, 0600));
  SPOKE_RETURN_IF_ERROR(WriteFileAtomically(dir + "/ca.crt", ca_pem, 0644));
  return WriteFileAtomically(dir + "/tls.crt", cert.cert_pem, 0644);
}

Result<PeerCertNames> PeerCertSubjectAltNames(const std::string& cert_pem) {
  X509Ptr cert(PEM_read_bio_X509(MemBio(cert_pem).get(), nullptr, nullptr, nullptr));
  if (!cert) return Fail(Code::kInvalidArgument, "not a PEM certificate: " + SslError());
  NamesPtr names(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr)));
  PeerCertNames out;
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names.get(), i);
    if (n->type == GEN_DNS) {
      const ASN1_STRING* s = n->d.dNSName;
      out.dns_names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                 ASN1_STRING_length(s));
    } else if (n->type == GEN_IPADD) {
      const ASN1_STRING* s = n->d.iPAddress;
      char text[INET6_ADDRSTRLEN] = {};
      int family = ASN1_STRING_length(s) == 4 ? AF_INET : AF_INET6;
      if (ASN1_STRING_length(s) == 4 || ASN1_STRING_length(s) == 16) {
        ::inet_ntop(family, ASN1_STRING_get0_data(s), text, sizeof text);
        out.ips.emplace_back(text);
      }
    }
  }
  return out;
}

Result<std::chrono::system_clock::time_point> PeerCertNotAfter(const std::string& cert_pem) {
  X509Ptr cert(PEM_read_bio_X509(MemBio(cert_pem).get(), nullptr, nullptr, nullptr));
  if (!cert) return Fail(Code::kInvalidArgument, "not a PEM certificate: " + SslError());
  int days = 0, seconds = 0;
  // From the Unix epoch (a null "from" is now): the difference is exact in days and seconds.
  std::unique_ptr<ASN1_TIME, Deleter<ASN1_TIME_free>> epoch(ASN1_TIME_set(nullptr, 0));
  if (!epoch || ASN1_TIME_diff(&days, &seconds, epoch.get(), X509_get0_notAfter(cert.get())) != 1)
    return Fail(Code::kInvalidArgument, "certificate expiry: " + SslError());
  return std::chrono::system_clock::time_point(
      std::chrono::seconds(int64_t{days} * 86400 + seconds));
}

}  // namespace spoke::agent
