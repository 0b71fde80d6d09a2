// The crash loop's view of kvtierd: a child process (fork/exec) on a private
// ipc socket with a fixed state and NVMe directory, so each restart finds what
// the last run left; killed with SIGKILL, or by its own armed kill point.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier::crash {

struct DaemonSpec {
  std::string binary;              // path to kvtierd
  std::string dir;                 // holds state/, nvme/ and the log (a real disk)
  std::string socket;              // ipc socket path (short: under 100 bytes)
  std::vector<std::string> flags;  // extra flags (later flags win)
};

class CrashDaemon {
 public:
  explicit CrashDaemon(DaemonSpec spec);
  ~CrashDaemon();  // SIGKILLs a running daemon

  // Starts kvtierd with `env` added to (and overriding) the driver's
  // environment and `flags` after the spec's, and waits up to `ready_ms`
  // until it answers a HELLO.
  absl::Status Start(const std::map<std::string, std::string>& env,
                     const std::vector<std::string>& flags, int ready_ms);

  // True while the child runs; reaps it (and records how) when it has died.
  bool Alive();
  // SIGKILL, then reap. Returns false when it had already died by itself.
  bool Kill();
  // How the last run ended: "SIGKILL", "exit 1", ... ("" while running).
  const std::string& how_ended() const { return how_ended_; }

  std::string endpoint() const { return "ipc://" + spec_.socket; }
  std::string log_path() const { return spec_.dir + "/kvtierd.log"; }
  std::string LogTail(size_t bytes) const;
  pid_t pid() const { return pid_; }

 private:
  void Reaped(int status);

  DaemonSpec spec_;
  pid_t pid_ = -1;
  std::string how_ended_;
};

}  // namespace kvtier::crash
