// fork/exec of kvtierd for the crash loop. Everything the child needs (argv,
// envp, the log fd) is built before fork: between fork and exec only
// async-signal-safe calls.
#include "tests/crash/crash_daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kvtier/client.h"

extern char** environ;

namespace kvtier::crash {
namespace {

std::vector<std::string> Environment(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    // The driver's own kill-point settings never leak into the daemon.
    if (name == "KVTIER_KILL_POINT" || name == "KVTIER_KILL_SEED" || extra.count(name)) continue;
    env.push_back(std::move(kv));
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (std::string& s : strings) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

}  // namespace

CrashDaemon::CrashDaemon(DaemonSpec spec) : spec_(std::move(spec)) {}

CrashDaemon::~CrashDaemon() {
  if (pid_ > 0) Kill();
}

absl::Status CrashDaemon::Start(const std::map<std::string, std::string>& env_extra,
                               const std::vector<std::string>& flags, int ready_ms) {
  if (pid_ > 0) return absl::FailedPreconditionError("kvtierd is already running");
  std::vector<std::string> args = {spec_.binary,
                                   "--socket=" + spec_.socket,
                                   "--state_dir=" + spec_.dir + "/state",
                                   "--nvme_dir=" + spec_.dir + "/nvme",
                                   "--hugepages=off",
                                   "--log_level=warn"};
  args.insert(args.end(), spec_.flags.begin(), spec_.flags.end());
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<std::string> env = Environment(env_extra);
  std::vector<char*> argv = Pointers(args), envp = Pointers(env);
  const int log = open(log_path().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log < 0) return absl::InternalError(absl::StrCat("open ", log_path(), ": ", strerror(errno)));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log);
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {
    // Dies with the driver, whatever kills the driver.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, 0);
    dup2(log, 1);
    dup2(log, 2);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(log);
  pid_ = pid;
  how_ended_.clear();

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ready_ms);
  absl::Status last = absl::UnavailableError("not probed");
  while (std::chrono::steady_clock::now() < deadline) {
    if (!Alive())
      return absl::InternalError(absl::StrCat("kvtierd died during start (", how_ended_, ")"));
    ClientOptions o;
    o.endpoint = endpoint();
    o.client_name = "crash-probe";
    o.timeout = std::chrono::milliseconds(50);
    auto c = Client::Connect(o);
    if (c.ok()) return absl::OkStatus();
    last = c.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("kvtierd did not answer within ", ready_ms, " ms: ", last.ToString()));
}

void CrashDaemon::Reaped(int status) {
  pid_ = -1;
  if (WIFSIGNALED(status)) {
    how_ended_ = WTERMSIG(status) == SIGKILL ? "SIGKILL" : absl::StrCat("signal ", WTERMSIG(status));
  } else {
    how_ended_ = absl::StrCat("exit ", WEXITSTATUS(status));
  }
}

bool CrashDaemon::Alive() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == 0) return true;
  Reaped(status);
  return false;
}

bool CrashDaemon::Kill() {
  if (!Alive()) return false;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  Reaped(status);
  return true;
}

std::string CrashDaemon::LogTail(size_t bytes) const {
  std::ifstream in(log_path());
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

}  // namespace kvtier::crash
