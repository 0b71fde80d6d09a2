// The daemon's Unix socket files (the ipc socket, the buffer socket beside
// it): claimed at start only when no other process answers on them, and
// removed at a clean stop only while they are still the ones this process
// bound. libzmq removes whatever is at an ipc path before it binds, and
// leaves the file behind when it closes; both are settled here.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvtier::daemon {

// Makes `path` free for bind: nothing there, or a stale socket file (nobody
// accepts on it: its daemon died), which is removed and logged. A live
// socket (another daemon answers on it) or a file that is not a socket is
// refused, naming it and the way out, and marked NeedsOperator
// (kvtier/errors.h): kvtierd exits 2. `flag` names the setting the path
// came from; `type` is the listener's socket type.
absl::Status ClaimSocketPath(const std::string& path, absl::string_view flag, int type);

// A socket file this process bound. Remove() unlinks it if the path still
// names that file (not one another process has put there since).
class OwnedSocketFile {
 public:
  OwnedSocketFile() = default;
  // Records what is at `path` now (just after bind).
  explicit OwnedSocketFile(std::string path);
  OwnedSocketFile(OwnedSocketFile&& other) noexcept { *this = std::move(other); }
  OwnedSocketFile& operator=(OwnedSocketFile&& other) noexcept;
  ~OwnedSocketFile() { Remove(); }
  void Remove();

 private:
  std::string path_;  // empty: nothing owned
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

}  // namespace kvtier::daemon
