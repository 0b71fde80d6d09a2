// The buffer-fd inbox (buffer_fd_inbox.h): one thread polling the listening
// socket and the connections that have not yet sent their one message.
#include "daemon/buffer_fd_inbox.h"
#include "daemon/socket_file.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace kvtier::daemon {
namespace {

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif

// Most fds one message may carry before we call it malformed (each is
// received, then closed): room to see that a client sent more than one.
constexpr size_t kMaxFdsSeen = 8;

void CloseAll(const std::vector<int>& fds) {
  for (int fd : fds) close(fd);
}

// Why `fd` cannot be a client buffer, or empty. Only memory objects: a
// regular file on tmpfs (POSIX shm, memfd) or hugetlbfs. A file on a disk,
// NFS or FUSE file system would make every copy into it wait on that file
// system's I/O on a copy worker.
std::string NotABuffer(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return absl::StrCat("fstat failed: ", strerror(errno));
  if (!S_ISREG(st.st_mode))
    return "the fd is not a shared-memory object or memfd (not a regular file)";
  struct statfs fs;
  if (fstatfs(fd, &fs) != 0) return absl::StrCat("fstatfs failed: ", strerror(errno));
  if (static_cast<uint64_t>(fs.f_type) != TMPFS_MAGIC &&
      static_cast<uint64_t>(fs.f_type) != HUGETLBFS_MAGIC)
    return "the fd is a file, not memory (only POSIX shm, memfd or hugetlbfs objects)";
  return "";
}

}  // namespace

HandedFd::~HandedFd() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<std::unique_ptr<BufferFdInbox>> BufferFdInbox::Start(BufferFdInboxConfig config) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (config.path.empty() || config.path.size() >= sizeof(addr.sun_path))
    return absl::InvalidArgumentError(absl::StrCat("buffer socket path '", config.path,
                                                   "' is empty or longer than ",
                                                   sizeof(addr.sun_path) - 1, " bytes"));
  std::memcpy(addr.sun_path, config.path.data(), config.path.size());
  std::unique_ptr<BufferFdInbox> in(new BufferFdInbox(std::move(config)));
  const std::string& path = in->config_.path;
  // A socket file left by a daemon that died is replaced; a live one, or
  // anything else there, is not ours and stays.
  if (absl::Status st = ClaimSocketPath(path, "buffer socket", SOCK_SEQPACKET); !st.ok()) return st;
  in->listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (in->listen_fd_ < 0)
    return absl::InternalError(absl::StrCat("buffer socket: socket(): ", strerror(errno)));
  if (bind(in->listen_fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0)
    return absl::FailedPreconditionError(
        absl::StrCat("cannot bind buffer socket '", path, "': ", strerror(errno)));
  const bool group = in->config_.group.has_value();
  if ((group && chown(path.c_str(), static_cast<uid_t>(-1), *in->config_.group) != 0) ||
      chmod(path.c_str(), group ? 0660 : 0600) != 0)
    return absl::FailedPreconditionError(
        absl::StrCat("buffer socket '", path, "': cannot set its owner or mode: ", strerror(errno)));
  if (listen(in->listen_fd_, 64) != 0)
    return absl::InternalError(absl::StrCat("buffer socket: listen(): ", strerror(errno)));
  if (pipe2(in->wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    return absl::InternalError(absl::StrCat("buffer socket: pipe2(): ", strerror(errno)));
  in->thread_ = std::thread([p = in.get()] { p->Loop(); });
  return in;
}

BufferFdInbox::~BufferFdInbox() {
  stop_.store(true);
  if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  {
    absl::MutexLock lock(&mu_);
    for (auto& [ticket, p] : pending_) close(p.fd);
    pending_.clear();
  }
  for (int fd : wake_)
    if (fd >= 0) close(fd);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(config_.path.c_str());
  }
}

absl::StatusOr<HandedFd> BufferFdInbox::Take(absl::string_view ticket) {
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(ticket);
  if (it == pending_.end() || it->second.expires < absl::Now())
    return absl::NotFoundError(absl::StrCat(
        "no buffer was handed over under this ticket (unknown, already used, or older than ",
        absl::FormatDuration(config_.ticket_ttl), ")"));
  const Pending p = it->second;
  pending_.erase(it);
  if (--pending_per_uid_[p.uid] == 0) pending_per_uid_.erase(p.uid);
  ++counters_.taken;
  return HandedFd(p.fd, p.uid, p.pid);
}

BufferFdInboxCounters BufferFdInbox::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

void BufferFdInbox::Expire(absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.expires >= now) {
      ++it;
      continue;
    }
    close(it->second.fd);
    if (--pending_per_uid_[it->second.uid] == 0) pending_per_uid_.erase(it->second.uid);
    ++counters_.expired;
    pending_.erase(it++);
  }
}

std::string BufferFdInbox::Receive(int conn, uid_t uid, pid_t pid) {
  char data[64];
  iovec iov{data, sizeof(data)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsSeen)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = recvmsg(conn, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n < 0) return absl::StrCat("ER receive failed: ", strerror(errno));
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds.push_back(fd);
    }
  }
  std::string why;
  if (msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) {
    why = "message or its fds truncated: send the 8-byte magic with exactly one fd";
  } else if (absl::string_view(data, static_cast<size_t>(n)) != kBufferFdMagic) {
    why = absl::StrCat("not a buffer handover (expected the ", kBufferFdMagic.size(),
                       "-byte magic \"", kBufferFdMagic, "\", docs/PROTOCOL.md)");
  } else if (fds.size() != 1) {
    why = absl::StrCat("a handover carries exactly one fd, this one ", fds.size());
  } else {
    why = NotABuffer(fds[0]);
  }
  if (!why.empty()) {
    CloseAll(fds);
    return "ER " + why;
  }
  std::string ticket(kBufferFdTicketBytes, '\0');
  if (getrandom(ticket.data(), ticket.size(), 0) != static_cast<ssize_t>(ticket.size())) {
    CloseAll(fds);
    return "ER no randomness for a ticket";
  }
  absl::MutexLock lock(&mu_);
  size_t& mine = pending_per_uid_[uid];
  if (mine >= config_.max_pending_per_uid || pending_.size() >= config_.max_pending) {
    if (mine == 0) pending_per_uid_.erase(uid);
    CloseAll(fds);
    return absl::StrCat("ER too many buffers handed over and not yet registered (",
                        config_.max_pending_per_uid, " per user, ", config_.max_pending,
                        " in all; a ticket lasts ", absl::FormatDuration(config_.ticket_ttl), ")");
  }
  ++mine;
  pending_[ticket] = Pending{fds[0], uid, pid, absl::Now() + config_.ticket_ttl};
  ++counters_.handed;
  return "OK" + ticket;
}

void BufferFdInbox::Loop() {
  struct Conn {
    int fd;
    uid_t uid;
    pid_t pid;
    absl::Time deadline;
  };
  std::vector<Conn> conns;
  std::vector<pollfd> polled;
  auto refuse = [this] {
    absl::MutexLock lock(&mu_);
    ++counters_.refused;
  };
  while (!stop_.load()) {
    polled.clear();
    polled.push_back({wake_[0], POLLIN, 0});
    polled.push_back({listen_fd_, POLLIN, 0});
    for (const Conn& c : conns) polled.push_back({c.fd, POLLIN, 0});
    if (poll(polled.data(), polled.size(), 100) < 0 && errno != EINTR) {
      spdlog::error("buffer socket: poll failed: {}", strerror(errno));
      return;
    }
    const absl::Time now = absl::Now();
    // Connections first (their indexes match `polled` from 2 on).
    std::vector<Conn> kept;
    for (size_t i = 0; i < conns.size(); ++i) {
      const Conn& c = conns[i];
      if (polled[i + 2].revents != 0) {
        std::string reply = Receive(c.fd, c.uid, c.pid);
        if (reply.rfind("ER", 0) == 0) {
          refuse();
          spdlog::warn("buffer socket: refused a handover from uid {} (pid {}): {}", c.uid, c.pid,
                       reply.substr(3));
        }
        (void)send(c.fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        close(c.fd);
      } else if (now > c.deadline) {
        refuse();
        close(c.fd);  // said nothing in time
      } else {
        kept.push_back(c);
      }
    }
    conns.swap(kept);
    if (polled[1].revents & POLLIN) {
      for (;;) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        ucred cred{};
        socklen_t len = sizeof(cred);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
            conns.size() >= config_.max_connections) {
          refuse();
          close(fd);
          continue;
        }
        conns.push_back({fd, cred.uid, cred.pid, now + config_.message_timeout});
      }
    }
    Expire(now);
  }
  for (const Conn& c : conns) close(c.fd);
}

}  // namespace kvtier::daemon
