#include "common/fd_passing.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace spoke {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

// Waits until `sock` is ready for `events` or `timeout` passes. Retries on EINTR with the
// remaining time.
Status WaitReady(int sock, short events, std::chrono::milliseconds timeout, const char* what) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() < 0) left = std::chrono::milliseconds(0);
    pollfd p{sock, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n > 0) return Ok();
    if (n == 0) {
      return Fail(Code::kTimeout, std::string(what) + ": no progress within " +
                                      std::to_string(timeout.count()) + " ms");
    }
    if (errno != EINTR) return Fail(Code::kIo, std::string(what) + ": poll: " + ErrnoText(errno));
  }
}

Result<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return Fail(Code::kInvalidArgument, "unix socket path '" + path + "' is empty or longer than " +
                                            std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) Reset(other.Release());
  return *this;
}

int UniqueFd::Release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Status SendFdMessage(int sock, std::string_view data, std::span<const int> fds,
                     std::chrono::milliseconds timeout) {
  if (data.empty() || data.size() > kMaxFdMessageBytes) {
    return Fail(Code::kInvalidArgument, "fd message payload must be 1.." +
                                            std::to_string(kMaxFdMessageBytes) + " bytes, got " +
                                            std::to_string(data.size()));
  }
  if (fds.size() > kMaxFdsPerMessage) {
    return Fail(Code::kInvalidArgument, "at most " + std::to_string(kMaxFdsPerMessage) +
                                            " descriptors per message, got " +
                                            std::to_string(fds.size()));
  }
  iovec iov{const_cast<char*>(data.data()), data.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)] = {};
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    ssize_t n = ::sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(data.size())) return Ok();
    if (n >= 0) return Fail(Code::kIo, "sendmsg: short write on a seqpacket socket");
    int err = errno;
    if (err == EINTR) continue;
    if (err == EPIPE || err == ECONNRESET || err == ENOTCONN) {
      return Fail(Code::kUnavailable, "sendmsg: peer closed the connection");
    }
    if (err != EAGAIN) return Fail(Code::kIo, "sendmsg: " + ErrnoText(err));
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return Fail(Code::kTimeout, "sendmsg: peer did not drain its queue within " +
                                      std::to_string(timeout.count()) + " ms");
    }
    SPOKE_RETURN_IF_ERROR(WaitReady(sock, POLLOUT, left, "sendmsg"));
  }
}

Result<FdMessage> RecvFdMessage(int sock, std::chrono::milliseconds timeout) {
  SPOKE_RETURN_IF_ERROR(WaitReady(sock, POLLIN, timeout, "recvmsg"));
  FdMessage out;
  out.data.resize(kMaxFdMessageBytes);
  iovec iov{out.data.data(), out.data.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    int err = errno;
    if (err == ECONNRESET) return Fail(Code::kUnavailable, "recvmsg: peer reset the connection");
    if (err == EAGAIN) return Fail(Code::kTimeout, "recvmsg: readiness without a message");
    return Fail(Code::kIo, "recvmsg: " + ErrnoText(err));
  }
  // Take ownership of every descriptor first, so that none leaks on the error paths below.
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      out.fds.emplace_back(fd);
    }
  }
  if (n == 0) return Fail(Code::kUnavailable, "recvmsg: peer closed the connection");
  if (msg.msg_flags & MSG_TRUNC) {
    return Fail(Code::kInvalidArgument,
                "recvmsg: message larger than " + std::to_string(kMaxFdMessageBytes) + " bytes");
  }
  if (msg.msg_flags & MSG_CTRUNC) {
    return Fail(Code::kInvalidArgument, "recvmsg: more than " + std::to_string(kMaxFdsPerMessage) +
                                            " descriptors in one message");
  }
  out.data.resize(static_cast<size_t>(n));
  return out;
}

Result<UniqueFd> ListenSeqpacket(const std::string& path, mode_t mode) {
  SPOKE_RETURN_IF_ERROR(UnixAddress(path));
  // Refuse to take over a socket someone is serving on.
  if (auto probe = ConnectSeqpacket(path, std::chrono::milliseconds(1000)); probe) {
    return Fail(Code::kAlreadyExists, "another process is listening on '" + path + "'");
  }
  // Bind inside a private 0700 directory next to the target, set the final mode, then rename
  // into place: the socket is never reachable with looser permissions, and no process-wide
  // umask change races with other threads.
  std::filesystem::path target(path);
  std::string tmpl = (target.parent_path() / (".keeper-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return Fail(Code::kIo,
                "cannot create a private directory next to '" + path + "': " + ErrnoText(errno));
  }
  std::string tmp_sock = tmpl + "/s";
  auto cleanup = [&] {
    ::unlink(tmp_sock.c_str());
    ::rmdir(tmpl.c_str());
  };
  auto tmp_addr = UnixAddress(tmp_sock);
  if (!tmp_addr) {
    cleanup();
    return std::unexpected(tmp_addr.error());
  }
  UniqueFd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!sock.valid()) {
    cleanup();
    return Fail(Code::kIo, "socket(AF_UNIX, SOCK_SEQPACKET): " + ErrnoText(errno));
  }
  if (::bind(sock.get(), reinterpret_cast<sockaddr*>(&*tmp_addr), sizeof(*tmp_addr)) != 0) {
    int err = errno;
    cleanup();
    return Fail(Code::kIo, "bind '" + tmp_sock + "': " + ErrnoText(err));
  }
  if (::chmod(tmp_sock.c_str(), mode) != 0 || ::listen(sock.get(), 64) != 0 ||
      ::rename(tmp_sock.c_str(), path.c_str()) != 0) {
    int err = errno;
    cleanup();
    return Fail(Code::kIo, "cannot publish socket at '" + path + "': " + ErrnoText(err));
  }
  ::rmdir(tmpl.c_str());
  return sock;
}

Result<UniqueFd> ConnectSeqpacket(const std::string& path, std::chrono::milliseconds timeout) {
  SPOKE_TRY(auto addr, UnixAddress(path));
  UniqueFd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!sock.valid()) return Fail(Code::kIo, "socket(AF_UNIX, SOCK_SEQPACKET): " + ErrnoText(errno));
  int rc;
  do {
    rc = ::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int err = errno;
    if (err == EAGAIN || err == EINPROGRESS) {
      // The listener's backlog is full: unix sockets do not complete asynchronously, so retry
      // until the deadline.
      auto deadline = std::chrono::steady_clock::now() + timeout;
      while (rc != 0 && (errno == EAGAIN || errno == EINPROGRESS || errno == EINTR) &&
             std::chrono::steady_clock::now() < deadline) {
        ::usleep(10000);
        rc = ::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
      }
      if (rc != 0 && (errno == EAGAIN || errno == EINPROGRESS)) {
        return Fail(Code::kTimeout, "connect '" + path + "': listener busy for " +
                                        std::to_string(timeout.count()) + " ms");
      }
      err = errno;
    }
    if (rc != 0) {
      if (err == ENOENT || err == ECONNREFUSED) {
        return Fail(Code::kUnavailable,
                    "nobody listens on '" + path + "' (" + ErrnoText(err) + ")");
      }
      return Fail(Code::kIo, "connect '" + path + "': " + ErrnoText(err));
    }
  }
  return sock;
}

Result<ucred> PeerCredentials(int sock) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return Fail(Code::kIo, "getsockopt(SO_PEERCRED): " + ErrnoText(errno));
  }
  return cred;
}

}  // namespace spoke
