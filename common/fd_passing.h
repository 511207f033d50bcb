// File descriptors across processes: SCM_RIGHTS over SOCK_SEQPACKET unix sockets, so a
// /dev/fuse connection can be held by a process that outlives the one serving it.
// Every wait is bounded; errors name the socket operation that failed.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace spoke {

// Owns one file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release();
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

// One datagram with the descriptors that came with it.
struct FdMessage {
  std::string data;
  std::vector<UniqueFd> fds;
};

// Largest payload and descriptor count one message may carry (SCM_MAX_FD is 253).
inline constexpr size_t kMaxFdMessageBytes = 64 * 1024;
inline constexpr size_t kMaxFdsPerMessage = 16;

// Sends `data` (non-empty, <= kMaxFdMessageBytes) with `fds` (<= kMaxFdsPerMessage) as one
// record. The descriptors are duplicated by the kernel; the caller keeps its own.
// Returns kTimeout when the peer does not drain its queue within `timeout`, kUnavailable when
// the peer is gone (EPIPE/ECONNRESET), kInvalidArgument for bad sizes, kIo otherwise.
Status SendFdMessage(int sock, std::string_view data, std::span<const int> fds,
                     std::chrono::milliseconds timeout);

// Receives one record. Returns kTimeout if none arrives within `timeout`, kUnavailable when the
// peer closed the connection, kInvalidArgument when the record or its descriptors were larger
// than allowed (truncated: any descriptors received are closed), kIo otherwise.
Result<FdMessage> RecvFdMessage(int sock, std::chrono::milliseconds timeout);

// A listening SOCK_SEQPACKET socket at `path`, created with `mode` from the start (umask is set
// around bind, so there is no window with looser permissions). A stale socket file left by a
// dead process is replaced; a live one (something accepts on it) is kAlreadyExists.
Result<UniqueFd> ListenSeqpacket(const std::string& path, mode_t mode);

// Connects to the SOCK_SEQPACKET socket at `path`. kUnavailable when nobody listens,
// kTimeout when the connect does not complete within `timeout`.
Result<UniqueFd> ConnectSeqpacket(const std::string& path, std::chrono::milliseconds timeout);

// The credentials of the process at the other end of a connected unix socket.
Result<ucred> PeerCredentials(int sock);

}  // namespace spoke
