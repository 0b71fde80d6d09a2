// The client's side of the buffer socket (buffer_handover.h): one
// SOCK_SEQPACKET connection per handover, one message each way.
#include "buffer_handover.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvtier::client_internal {
namespace {

constexpr char kMagic[] = "KVTFD001";  // 8 bytes, no NUL sent
constexpr size_t kTicketBytes = 16;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<std::string> HandOverFd(const std::string& socket_path, int fd,
                                       std::chrono::milliseconds timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path))
    return absl::InvalidArgumentError(
        absl::StrCat("buffer socket path '", socket_path, "' is empty or too long"));
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  Fd s(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (s.get() < 0) return absl::InternalError(absl::StrCat("socket(): ", strerror(errno)));
  timeval tv{static_cast<time_t>(timeout.count() / 1000),
             static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(s.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(s.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0)
    return absl::UnavailableError(
        absl::StrCat("cannot reach kvtierd's buffer socket ", socket_path, ": ", strerror(errno)));
  char magic[8];
  std::memcpy(magic, kMagic, sizeof(magic));
  iovec iov{magic, sizeof(magic)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  if (sendmsg(s.get(), &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(magic)))
    return absl::UnavailableError(
        absl::StrCat("cannot hand the buffer to ", socket_path, ": ", strerror(errno)));
  char reply[512];
  const ssize_t n = recv(s.get(), reply, sizeof(reply), 0);
  if (n < 0)
    return absl::UnavailableError(absl::StrCat("no answer from kvtierd's buffer socket ",
                                               socket_path, ": ", strerror(errno)));
  const std::string r(reply, static_cast<size_t>(n));
  if (r.size() == 2 + kTicketBytes && r.compare(0, 2, "OK") == 0) return r.substr(2);
  if (r.compare(0, 3, "ER ") == 0)
    return absl::FailedPreconditionError(absl::StrCat("kvtierd refused the buffer: ", r.substr(3)));
  return absl::UnavailableError(
      absl::StrCat("kvtierd's buffer socket ", socket_path, " answered ", n,
                   " bytes that are not a ticket (is it a kvtierd?)"));
}

}  // namespace kvtier::client_internal
