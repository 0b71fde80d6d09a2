// Child-process management for the integration tests: posix_spawn with the
// output redirected to a log file, readiness by HELLO, SIGTERM and waitpid.
#include "tests/integration/daemon_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tools/common/page_pattern.h"

extern char** environ;

namespace kvtier::itest {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<char*> Argv(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  return argv;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TempDir::TempDir() {
  char tmpl[] = "/tmp/kvtier-it-XXXXXX";
  const char* p = mkdtemp(tmpl);
  path_ = p ? p : "/tmp";
}

TempDir::~TempDir() {
  std::error_code ec;
  if (path_ != "/tmp") std::filesystem::remove_all(path_, ec);
}

absl::StatusOr<pid_t> DaemonProcess::Spawn(const std::vector<std::string>& args,
                                           const std::string& log_path) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<std::string> full = {KVTIERD_PATH};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv = Argv(full);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, KVTIERD_PATH, &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return absl::InternalError(absl::StrCat("posix_spawn(", KVTIERD_PATH, "): ", strerror(rc)));
  return pid;
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(
    const DaemonOptions& options, const std::string& probe_tenant,
    const std::string& probe_token, int ready_timeout_ms) {
  std::unique_ptr<DaemonProcess> d(new DaemonProcess());
  d->dir_ = std::make_unique<TempDir>();
  d->log_path_ = d->dir_->File("kvtierd.log");
  std::vector<std::string> args = {"--state_dir=" + d->dir_->File("state"),
                                   "--host_bytes=64MiB", "--host_slab_bytes=1MiB",
                                   "--hugepages=off", "--copy_threads=2",
                                   options.nvme ? "--nvme_bytes=64MiB" : "--nvme_bytes=0"};
  if (options.ipc) {
    std::string sock = d->dir_->File("kvtierd.sock");
    args.push_back("--socket=" + sock);
    d->ipc_endpoint_ = "ipc://" + sock;
  } else {
    args.push_back("--socket=none");
  }
  if (options.tcp) {
    d->tcp_endpoint_ = absl::StrCat("tcp://127.0.0.1:", FreeTcpPort());
    args.push_back("--tcp=" + d->tcp_endpoint_);
  }
  if (!options.tenants_json.empty()) {
    std::string path = d->dir_->File("tenants.json");
    std::ofstream(path) << options.tenants_json;
    args.push_back("--tenants_file=" + path);
  }
  // Later flags win, so the caller's override the defaults above.
  args.insert(args.end(), options.flags.begin(), options.flags.end());
  d->args_ = args;
  d->probe_tenant_ = probe_tenant;
  d->probe_token_ = probe_token;
  if (absl::Status st = d->SpawnAndWait(ready_timeout_ms); !st.ok()) return st;
  return d;
}

absl::Status DaemonProcess::SpawnAndWait(int ready_timeout_ms) {
  auto pid = Spawn(args_, log_path_);
  if (!pid.ok()) return pid.status();
  pid_ = spawned_pid_ = *pid;
  auto deadline = Clock::now() + std::chrono::milliseconds(ready_timeout_ms);
  absl::Status last = absl::UnavailableError("not probed");
  while (Clock::now() < deadline) {
    if (!Alive())
      return absl::InternalError(absl::StrCat("kvtierd exited during startup; log:\n", Log()));
    ClientOptions o = Options(endpoint(), probe_tenant_, probe_token_, /*with_layout=*/false);
    o.client_name = "itest-probe";
    o.timeout = std::chrono::milliseconds(200);
    auto c = Client::Connect(o);
    if (c.ok()) return absl::OkStatus();
    last = c.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat("kvtierd did not answer within ",
                                                  ready_timeout_ms, " ms (", last.ToString(),
                                                  "); log:\n", Log()));
}

absl::Status DaemonProcess::Restart(int sig, int ready_timeout_ms) {
  auto code = Stop(sig);
  if (sig == SIGTERM && !code.ok()) return code.status();
  if (sig == SIGTERM && *code != 0)
    return absl::InternalError(absl::StrCat("kvtierd exited with ", *code, " on SIGTERM"));
  return SpawnAndWait(ready_timeout_ms);
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
  // A daemon that did not exit cleanly leaves its host arena behind.
  if (spawned_pid_ > 0) shm_unlink(absl::StrCat("/kvtier-host-", spawned_pid_).c_str());
}

bool DaemonProcess::Alive() {
  if (pid_ <= 0) return false;
  int status;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == 0) return true;
  reaped_status_ = status;
  pid_ = -1;
  return false;
}

absl::StatusOr<int> WaitExit(pid_t pid, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return absl::AbortedError(absl::StrCat("pid ", pid, " died of signal ", WTERMSIG(status)));
    }
    if (r < 0) return absl::InternalError(absl::StrCat("waitpid: ", strerror(errno)));
    if (Clock::now() >= deadline)
      return absl::DeadlineExceededError(
          absl::StrCat("pid ", pid, " still running after ", timeout_ms, " ms"));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

absl::StatusOr<int> DaemonProcess::Stop(int sig, int timeout_ms) {
  if (pid_ <= 0)
    return absl::FailedPreconditionError(absl::StrCat(
        "kvtierd exited before Stop() (wait status ", reaped_status_, "); log:\n", Log()));
  kill(pid_, sig);
  auto code = WaitExit(pid_, timeout_ms);
  if (absl::IsDeadlineExceeded(code.status())) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
  pid_ = -1;
  if (!code.ok())
    return absl::Status(code.status().code(),
                        absl::StrCat(code.status().message(), "; log:\n", Log()));
  return code;
}

std::string DaemonProcess::Log() const { return ReadFile(log_path_); }

CommandResult RunCommand(const std::vector<std::string>& args, int timeout_ms) {
  CommandResult result;
  TempDir dir;
  std::string out = dir.File("out"), err = dir.File("err");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<char*> argv = Argv(args);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0].c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    result.err = absl::StrCat("posix_spawn(", args[0], "): ", strerror(rc));
    return result;
  }
  auto code = WaitExit(pid, timeout_ms);
  if (!code.ok()) {
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    result.exit_code = -1;
  } else {
    result.exit_code = *code;
  }
  result.out = ReadFile(out);
  result.err = ReadFile(err);
  if (!code.ok()) result.err += absl::StrCat("\n[harness] ", code.status().ToString());
  return result;
}

int FreeTcpPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

Layout SmallLayout() {
  return Layout{.layers = 2, .kv_heads = 2, .head_dim = 64, .tokens_per_page = 64,
                .dtype = Dtype::kFp16};
}

std::vector<PageKey> MakeChain(const Layout& layout, uint64_t seed, size_t n) {
  std::vector<uint32_t> tokens(n * layout.tokens_per_page);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<uint32_t>(seed * 1000003u + i * 7919u);
  return DeriveChain(layout.Id(), layout.tokens_per_page, tokens);
}

ClientOptions Options(const std::string& endpoint, const std::string& tenant,
                      const std::string& token, bool with_layout) {
  ClientOptions o;
  o.endpoint = endpoint;
  o.tenant = tenant;
  o.token = token;
  if (with_layout) o.layout = SmallLayout();
  o.client_name = "itest";
  o.timeout = std::chrono::milliseconds(10000);
  return o;
}

std::string PatternPage(const PageKey& key, uint64_t bytes) {
  std::string page(bytes, '\0');
  tools::FillPattern(key, reinterpret_cast<uint8_t*>(page.data()), bytes);
  return page;
}

bool CorruptOnDisk(const std::string& data_file, const std::string& page, off_t offset) {
  const int fd = open(data_file.c_str(), O_RDWR);
  if (fd < 0) return false;
  std::vector<char> block(4096);
  bool done = false;
  for (off_t at = 0; !done && pread(fd, block.data(), block.size(), at) == 4096; at += 4096) {
    if (std::memcmp(block.data(), page.data(), block.size()) != 0) continue;
    std::vector<char> junk(4096, '\x5a');
    done = pwrite(fd, junk.data(), junk.size(), at + offset) == 4096 && fdatasync(fd) == 0;
  }
  close(fd);
  return done;
}

std::string SaltedPage(const PageKey& key, uint64_t bytes, uint8_t salt) {
  std::string page = PatternPage(key, bytes);
  for (char& c : page) c = static_cast<char>(c ^ salt);
  return page;
}

}  // namespace kvtier::itest
