// Test harness for the integration tests: runs a real kvtierd as a child
// process on a private ipc socket (and optionally a loopback tcp port) under
// a fresh temporary directory, and stops it with SIGTERM at the end.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvtier/client.h"
#include "kvtier/layout.h"
#include "kvtier/page_key.h"

namespace kvtier::itest {

// A directory under /tmp, removed (recursively) on destruction. Short, so an
// ipc socket path inside it stays under the 100-byte limit.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct DaemonOptions {
  std::vector<std::string> flags;  // extra kvtierd flags, e.g. "--host_bytes=8MiB"
  std::string tenants_json;        // non-empty: written to a file, --tenants_file
  bool tcp = false;                // also listen on tcp://127.0.0.1:<free port>
  bool ipc = true;
  // Off by default (--nvme_bytes=0): host-only eviction drops pages, which
  // the eviction and quota tests rely on, and no test writes a 4 GiB file.
  // On: a 64 MiB NVMe tier under the state dir (needs O_DIRECT, not tmpfs).
  bool nvme = false;
};

class DaemonProcess {
 public:
  // Starts kvtierd and waits (up to `ready_timeout_ms`) until it answers a
  // HELLO. `probe` authenticates the readiness check (tenant/token).
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(
      const DaemonOptions& options, const std::string& probe_tenant = "default",
      const std::string& probe_token = "", int ready_timeout_ms = 10000);
  // Spawns kvtierd with exactly `args` (no defaults added); stdout/stderr go
  // to `log_path`. For tests of flag handling.
  static absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& args,
                                     const std::string& log_path);
  ~DaemonProcess();  // SIGKILLs the daemon if Stop() was not called

  // SIGTERM (or `sig`), then waits up to `timeout_ms`. Returns the exit code,
  // or an error when it died of a signal or had to be killed.
  absl::StatusOr<int> Stop(int sig = 15, int timeout_ms = 10000);
  // Stops it with `sig` (SIGTERM: must exit 0) and starts it again with the
  // same flags and state directory, waiting until it answers.
  absl::Status Restart(int sig = 15, int ready_timeout_ms = 10000);
  bool Alive();

  const std::string& ipc_endpoint() const { return ipc_endpoint_; }
  const std::string& tcp_endpoint() const { return tcp_endpoint_; }
  // ipc endpoint when there is one, else tcp.
  const std::string& endpoint() const { return ipc_endpoint_or_tcp(); }
  const std::string& dir() const { return dir_->path(); }
  pid_t pid() const { return pid_; }
  std::string Log() const;  // the daemon's stdout+stderr so far

 private:
  DaemonProcess() = default;
  const std::string& ipc_endpoint_or_tcp() const {
    return ipc_endpoint_.empty() ? tcp_endpoint_ : ipc_endpoint_;
  }
  absl::Status SpawnAndWait(int ready_timeout_ms);
  std::unique_ptr<TempDir> dir_;
  std::vector<std::string> args_;
  std::string probe_tenant_, probe_token_;
  pid_t pid_ = -1;
  pid_t spawned_pid_ = -1;
  int reaped_status_ = -1;  // wait status when Alive() found it gone
  std::string ipc_endpoint_, tcp_endpoint_, log_path_;
};

// Waits up to timeout_ms for pid to exit. Returns its exit code, or an error
// when it died of a signal or is still running (it is then left running).
absl::StatusOr<int> WaitExit(pid_t pid, int timeout_ms);

// Runs a program to completion, capturing stdout and stderr.
struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};
CommandResult RunCommand(const std::vector<std::string>& argv, int timeout_ms = 20000);

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreeTcpPort();

// 64 KiB pages: 2 layers x {K,V} x 2 heads x 64 tokens x 64 dims x fp16.
Layout SmallLayout();
inline constexpr uint64_t kSmallPageBytes = 64 << 10;

// Buffer offsets of `n` pages of `page_bytes` laid end to end from `base`.
inline std::vector<uint64_t> Offsets(size_t n, uint64_t page_bytes = kSmallPageBytes,
                                     uint64_t base = 0) {
  std::vector<uint64_t> o(n);
  for (size_t i = 0; i < n; ++i) o[i] = base + i * page_bytes;
  return o;
}

// A prefix chain of `n` page keys whose tokens derive from `seed` (equal
// seeds give equal chains, in any namespace).
std::vector<PageKey> MakeChain(const Layout& layout, uint64_t seed, size_t n);

// Client options for `endpoint` with the small layout.
ClientOptions Options(const std::string& endpoint, const std::string& tenant = "default",
                      const std::string& token = "", bool with_layout = true);

// Page bytes that are a function of the key (tools/common/page_pattern.h).
std::string PatternPage(const PageKey& key, uint64_t bytes);
// Salted variant: same key, different bytes (another tenant's copy).
std::string SaltedPage(const PageKey& key, uint64_t bytes, uint8_t salt);

// Overwrites 4 KiB at `offset` (block-aligned) in the page whose bytes are
// `page` in an NVMe data file (found by content: slots are 4 KiB-aligned),
// and syncs. False when the page is not there.
bool CorruptOnDisk(const std::string& data_file, const std::string& page, off_t offset = 0);

}  // namespace kvtier::itest
