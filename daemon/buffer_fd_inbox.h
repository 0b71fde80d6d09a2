// BufferFdInbox: where a client hands kvtierd the file descriptor of a
// buffer it wants to register, over a Unix SOCK_SEQPACKET socket beside the
// ZeroMQ one (SCM_RIGHTS; docs/PROTOCOL.md, "Buffers by file descriptor").
//
// Why: an engine and the packaged daemon run as different users. A buffer
// registered by name must be openable by the daemon's uid, i.e. readable by
// more than its owner; a buffer handed over as an fd stays 0600 (or has no
// name at all: memfd), and the fd itself is the capability — no name to
// guess, alias or race.
//
// The handover: the client connects, sends one message of the 8 bytes
// "KVTFD001" with exactly one fd (a regular file: shm or memfd), and gets
// back "OK" + a 16-byte random ticket (or "ER" + why). It then sends
// REGISTER_BUFFER with that ticket on its session. The inbox records the
// sender's uid (SO_PEERCRED); the daemon maps the fd only for a session
// whose ZeroMQ connection has that uid, so a ticket alone is useless to
// another user. A ticket is taken once, and expires (its fd closed) after
// `ticket_ttl`.
//
// Hostile senders: every connection must send its message within
// `message_timeout`; at most `max_connections` wait at once; at most
// `max_pending_per_uid` tickets per uid and `max_pending` in all wait to be
// taken. Anything else (no fd, several fds, a socket or pipe, a wrong
// magic) is answered "ER …" and costs nothing kept.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kvtier::daemon {

inline constexpr absl::string_view kBufferFdMagic = "KVTFD001";
inline constexpr size_t kBufferFdTicketBytes = 16;

// An fd the inbox took from a client, with who sent it. Owns the fd.
class HandedFd {
 public:
  HandedFd(int fd, uid_t uid, pid_t pid) : fd_(fd), uid_(uid), pid_(pid) {}
  ~HandedFd();
  HandedFd(HandedFd&& o) noexcept : fd_(o.fd_), uid_(o.uid_), pid_(o.pid_) { o.fd_ = -1; }
  HandedFd& operator=(HandedFd&&) = delete;
  HandedFd(const HandedFd&) = delete;

  int fd() const { return fd_; }
  uid_t uid() const { return uid_; }
  pid_t pid() const { return pid_; }

 private:
  int fd_;
  uid_t uid_;
  pid_t pid_;
};

struct BufferFdInboxConfig {
  std::string path;               // the socket file; replaced if stale
  std::optional<gid_t> group;     // as --socket_group: 0660 with this group, else 0600
  size_t max_connections = 64;    // waiting for their message
  size_t max_pending = 256;       // tickets not yet taken, all uids
  size_t max_pending_per_uid = 16;
  absl::Duration message_timeout = absl::Seconds(2);
  absl::Duration ticket_ttl = absl::Seconds(10);
};

struct BufferFdInboxCounters {
  uint64_t handed = 0;    // tickets issued
  uint64_t taken = 0;     // tickets redeemed by REGISTER_BUFFER
  uint64_t expired = 0;   // tickets never redeemed
  uint64_t refused = 0;   // messages answered "ER"
};

class BufferFdInbox {
 public:
  // Binds `config.path` and starts the inbox's thread.
  static absl::StatusOr<std::unique_ptr<BufferFdInbox>> Start(BufferFdInboxConfig config);
  // Stops the thread, closes every fd not taken, removes the socket file.
  ~BufferFdInbox();

  // The fd handed over under `ticket`, once. NotFound for a ticket unknown,
  // already taken, or expired. Thread-safe (the frontend calls it).
  absl::StatusOr<HandedFd> Take(absl::string_view ticket) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& path() const { return config_.path; }
  BufferFdInboxCounters counters() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Pending {
    int fd;
    uid_t uid;
    pid_t pid;
    absl::Time expires;
  };
  explicit BufferFdInbox(BufferFdInboxConfig config) : config_(std::move(config)) {}
  void Loop();
  // One client message on `conn` (from uid/pid): the reply to send.
  std::string Receive(int conn, uid_t uid, pid_t pid);
  void Expire(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  const BufferFdInboxConfig config_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: the destructor wakes the loop
  std::atomic<bool> stop_{false};
  std::thread thread_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Pending> pending_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uid_t, size_t> pending_per_uid_ ABSL_GUARDED_BY(mu_);
  BufferFdInboxCounters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::daemon
