// Default socket and state locations (XDG base directories).
#include "kvtier/paths.h"

#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvtier {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string HomeDir() {
  std::string home = Env("HOME");
  if (!home.empty()) return home;
  if (const passwd* pw = getpwuid(getuid())) return pw->pw_dir;
  return "/tmp";
}

}  // namespace

std::string DefaultSocketPath() {
  std::string runtime = Env("XDG_RUNTIME_DIR");
  if (!runtime.empty()) return runtime + "/kvtier/kvtierd.sock";
  return "/tmp/kvtier-" + std::to_string(getuid()) + "/kvtierd.sock";
}

std::string DefaultEndpoint() {
  std::string env = Env("KVTIER_ENDPOINT");
  if (!env.empty()) return env;
  return ChooseEndpoint(DefaultSocketPath(), kSystemSocketPath);
}

std::string ChooseEndpoint(const std::string& own_socket, const std::string& system_socket) {
  // A user's own daemon first; else the system service's socket (the
  // packaged kvtierd.service), so clients of the service need no setting.
  // A stale per-user file (a daemon that died) must not hide the service:
  // ZeroMQ would wait out the whole timeout on it.
  const SocketProbe own = ProbeUnixSocket(own_socket);
  struct stat st;
  if ((own == SocketProbe::kAbsent || own == SocketProbe::kRefused) &&
      stat(system_socket.c_str(), &st) == 0)
    return absl::StrCat("ipc://", system_socket);
  return "ipc://" + own_socket;
}

SocketProbe ProbeUnixSocket(const std::string& path, int type) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return SocketProbe::kAbsent;
  if (!S_ISSOCK(st.st_mode)) return SocketProbe::kNotSocket;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return SocketProbe::kUnknown;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  if (fd < 0) return SocketProbe::kUnknown;
  const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int err = errno;
  close(fd);
  errno = err;  // for the caller's message
  if (rc == 0) return SocketProbe::kAnswers;
  // EAGAIN: a listener whose backlog is full is alive.
  if (err == EAGAIN) return SocketProbe::kAnswers;
  return err == ECONNREFUSED ? SocketProbe::kRefused : SocketProbe::kUnknown;
}

std::string DefaultStateDir() {
  std::string state = Env("XDG_STATE_HOME");
  if (!state.empty()) return state + "/kvtier";
  return HomeDir() + "/.local/state/kvtier";
}

absl::Status EnsurePrivateDir(const std::string& dir, const std::string& what, bool* created) {
  if (created != nullptr) *created = false;
  if (dir.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": empty path"));
  // Create missing components one by one, each 0700 (mkdir applies the umask
  // on top, never widening it).
  for (size_t pos = dir.find('/', 1);; pos = dir.find('/', pos + 1)) {
    const std::string part = dir.substr(0, pos);
    if (!part.empty() && mkdir(part.c_str(), 0700) == 0 && pos == std::string::npos &&
        created != nullptr)
      *created = true;
    if (pos == std::string::npos) break;
  }
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0)
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", what, " ", dir, ": ", std::strerror(errno)));
  if (!S_ISDIR(st.st_mode))
    return absl::FailedPreconditionError(absl::StrCat(what, " ", dir, " is not a directory"));
  if (st.st_uid != geteuid() && st.st_uid != 0)
    return absl::FailedPreconditionError(absl::StrCat(
        what, " ", dir, " belongs to uid ", st.st_uid, ", not to this user (uid ", geteuid(),
        "): refusing to keep files where another user controls them"));
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s %s is writable by group or others (mode %04o): anyone there could replace kvtierd's "
        "files; give it a directory of its own (e.g. mkdir -m 0700 %s/kvtier), or a path that "
        "does not exist yet so kvtierd creates it 0700",
        what, dir, st.st_mode & 07777, dir));
  return absl::OkStatus();
}

}  // namespace kvtier
