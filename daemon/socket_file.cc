// Claiming and removing the daemon's socket files; see socket_file.h.
#include "daemon/socket_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "kvtier/errors.h"
#include "kvtier/paths.h"
#include "spdlog/spdlog.h"

namespace kvtier::daemon {

absl::Status ClaimSocketPath(const std::string& path, absl::string_view flag, int type) {
  switch (ProbeUnixSocket(path, type)) {
    case SocketProbe::kAbsent:
      return absl::OkStatus();
    case SocketProbe::kRefused:
      // Nobody accepts on it: left by a daemon that died. Replacing it is safe.
      if (unlink(path.c_str()) != 0 && errno != ENOENT)
        return absl::FailedPreconditionError(absl::StrCat(
            flag, " '", path, "': cannot remove the stale socket file: ", strerror(errno)));
      spdlog::info("removed the stale socket file {} (nothing answered on it)", path);
      return absl::OkStatus();
    case SocketProbe::kAnswers:
      return MarkNeedsOperator(absl::FailedPreconditionError(absl::StrCat(
          flag, " '", path, "': another kvtierd is running and answering on this socket; stop it "
          "first (systemctl stop kvtierd, or SIGTERM its pid), or give this one another ",
          flag)));
    case SocketProbe::kNotSocket:
      return MarkNeedsOperator(absl::FailedPreconditionError(absl::StrCat(
          flag, " '", path, "' exists and is not a socket: remove it, or choose another ", flag)));
    case SocketProbe::kUnknown:
      break;
  }
  return MarkNeedsOperator(absl::FailedPreconditionError(absl::StrCat(
      flag, " '", path, "': cannot tell whether a daemon answers on it (connect: ",
      strerror(errno), "); remove it if none does, or choose another ", flag)));
}

OwnedSocketFile::OwnedSocketFile(std::string path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return;
  path_ = std::move(path);
  dev_ = st.st_dev;
  ino_ = st.st_ino;
}

OwnedSocketFile& OwnedSocketFile::operator=(OwnedSocketFile&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::exchange(other.path_, std::string());
    dev_ = other.dev_;
    ino_ = other.ino_;
  }
  return *this;
}

void OwnedSocketFile::Remove() {
  if (path_.empty()) return;
  struct stat st;
  if (lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_)
    unlink(path_.c_str());
  path_.clear();
}

}  // namespace kvtier::daemon
