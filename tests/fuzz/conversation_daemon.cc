// The daemon under test for conversation_fuzz: one in-process
// kvtier::daemon::Daemon per fuzzing process, its temp dir and tenants file,
// the peers' shm objects, and the liveness probe run after every input.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "daemon/daemon.h"
#include "spdlog/spdlog.h"
#include "tests/fuzz/conversation_harness.h"

namespace kvtier::fuzz {
namespace {

constexpr char kObjectPrefix[] = "kvtier-fuzz-";

// What fuzzing processes that died left behind (a crash runs no atexit):
// shm objects /dev/shm/kvtier-fuzz-PID-* and daemon dirs /tmp/kvtier-fuzz-PID-*.
void RemoveLeftovers() {
  for (const char* dir : {"/dev/shm", "/tmp"}) {
    DIR* d = opendir(dir);
    if (d == nullptr) continue;
    while (dirent* e = readdir(d)) {
      const char* n = e->d_name;
      if (std::strncmp(n, kObjectPrefix, sizeof(kObjectPrefix) - 1) != 0) continue;
      char* end = nullptr;
      const long pid = std::strtol(n + sizeof(kObjectPrefix) - 1, &end, 10);
      if (pid <= 0 || *end != '-' || kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;
      std::error_code ec;
      if (std::strcmp(dir, "/tmp") == 0) std::filesystem::remove_all(absl::StrCat(dir, "/", n), ec);
      else shm_unlink(absl::StrCat("/", n).c_str());
    }
    closedir(d);
  }
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "conversation_fuzz: %s\n", what.c_str());
  std::abort();
}

bool EnvOff(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string(v) == "0";
}

}  // namespace

struct TestDaemon::Impl {
  std::unique_ptr<daemon::Daemon> daemon;
  std::atomic<bool> stop{false};
  std::thread thread;
};

TestDaemon& TestDaemon::Instance() {
  static TestDaemon* d = [] {
    auto* d = new TestDaemon;
    d->Start();
    std::atexit([] { Instance().Shutdown(); });
    return d;
  }();
  return *d;
}

void TestDaemon::Start() {
  const char* level = std::getenv("KVTIER_FUZZ_LOG");
  spdlog::set_level(spdlog::level::from_str(level ? level : "off"));
  RemoveLeftovers();
  std::string tmpl = absl::StrCat("/tmp/", kObjectPrefix, getpid(), "-XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp failed");
  dir_ = tmpl;
  std::ofstream(dir_ + "/tenants.json")
      << R"({"tenants": [{"name": "alpha", "token": ")" << kTenantToken[0]
      << R"(", "admin": true}, {"name": "beta", "token": ")" << kTenantToken[1]
      << R"(", "quota": {"host": "1MiB"}}]})";
  daemon::DaemonConfig c;
  c.ipc_socket = dir_ + "/kvtierd.sock";
  c.state_dir = dir_;
  c.tenants_file = dir_ + "/tenants.json";
  c.host.capacity_bytes = 4 << 20;
  c.host.slab_bytes = 1 << 20;
  c.host.hugepages = tiers::HugepageMode::kOff;
  c.nvme.dir = dir_ + "/nvme";
  c.nvme.capacity_bytes = EnvOff("KVTIER_FUZZ_NVME") ? 0 : 16 << 20;
  c.nvme.slab_bytes = 1 << 20;
  c.copy_threads = 2;
  c.session_idle_timeout = absl::Seconds(10);  // sessions whose HELLO reply was lost
  daemon::DeviceOptions dev{.mode = tiers::hbm::DeviceMode::kEmulated, .hbm_bytes = 2 << 20};
  auto d = daemon::Daemon::Create(c, dev);
  if (!d.ok() && c.nvme.capacity_bytes > 0) {  // e.g. no O_DIRECT under /tmp
    std::fprintf(stderr, "conversation_fuzz: no NVMe tier (%s)\n", d.status().ToString().c_str());
    c.nvme.capacity_bytes = 0;
    d = daemon::Daemon::Create(c, dev);
  }
  if (!d.ok()) Die("cannot start the daemon: " + d.status().ToString());
  impl_ = std::make_unique<Impl>();
  impl_->daemon = *std::move(d);
  endpoint_ = impl_->daemon->endpoints().at(0);
  impl_->thread = std::thread([this] {
    absl::Status st = impl_->daemon->Run(impl_->stop);
    if (!st.ok()) std::fprintf(stderr, "conversation_fuzz: Run: %s\n", st.ToString().c_str());
  });
  ResetObjects();
  probe_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::dealer);
  probe_->set(zmq::sockopt::linger, 0);
  probe_->set(zmq::sockopt::plain_username, std::string(kTenantName[0]));
  probe_->set(zmq::sockopt::plain_password, std::string(kTenantToken[0]));
  probe_->connect(endpoint_);
  std::fprintf(stderr, "conversation_fuzz: daemon on %s (hbm 2 MiB emulated, host 4 MiB, nvme %s)\n",
               endpoint_.c_str(), c.nvme.capacity_bytes ? "16 MiB" : "off");
}

// Fresh objects for every input: a copy of an earlier input still in flight
// (its reply not waited for) writes into the old ones, which nobody reads.
void TestDaemon::ResetObjects() {
  ++generation_;
  for (int i = 0; i < kPeers; ++i) {
    ShmObject& o = objects_[i];
    if (o.map) munmap(o.map, kObjectBytes);
    if (o.fd >= 0) close(o.fd), shm_unlink(o.name.c_str());
    o.name = absl::StrCat("/", kObjectPrefix, getpid(), "-", i, "-", generation_);
    o.fd = shm_open(o.name.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (o.fd < 0 || ftruncate(o.fd, kObjectBytes) != 0) Die("cannot create " + o.name);
    void* p = mmap(nullptr, kObjectBytes, PROT_READ | PROT_WRITE, MAP_SHARED, o.fd, 0);
    if (p == MAP_FAILED) Die("cannot map " + o.name);
    o.map = static_cast<uint8_t*>(p);
    o.size = kObjectBytes;
  }
}

void TestDaemon::Truncate(int i, uint64_t size) {
  if (ftruncate(objects_[i].fd, size) != 0) Die("ftruncate failed");
  objects_[i].size = size;
}

namespace {

// The reply to request `id` on the probe socket, or nullopt after `timeout`.
std::optional<wire::Response> AwaitReply(zmq::socket_t& s, uint64_t id,
                                         std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !PollIn(s, left)) return std::nullopt;
    std::vector<zmq::message_t> frames = RecvMessage(s);
    wire::Response resp;
    if (resp.ParseFromArray(frames[0].data(), frames[0].size()) && resp.request_id() == id)
      return resp;
  }
}

std::optional<wire::Response> Ask(zmq::socket_t& s, wire::Request r, uint64_t id,
                                  std::chrono::milliseconds timeout) {
  r.set_version(1);
  r.set_request_id(id);
  SendMessage(s, {r.SerializeAsString()});
  return AwaitReply(s, id, timeout);
}

// A request the daemon must answer within KVTIER_FUZZ_ALIVE_MS (3000); if it
// does not, how late the answer came (if within 5 s more) helps tell an
// overloaded machine from a stuck daemon. 1 s was too tight under ASan on a
// 2-core machine that is also compiling (a HELLO came 1.3 s late once; that
// input replays clean); a stuck daemon never answers at all.
wire::Response MustAnswer(zmq::socket_t& s, const wire::Request& r, uint64_t id, const char* what) {
  static const int kAliveMs = [] {
    const char* v = std::getenv("KVTIER_FUZZ_ALIVE_MS");
    return v ? std::atoi(v) : 3000;
  }();
  auto reply = Ask(s, r, id, std::chrono::milliseconds(kAliveMs));
  if (reply && reply->code() == wire::OK) return *reply;
  if (reply) Die(absl::StrCat("liveness ", what, " refused: ", reply->message()));
  const auto t0 = std::chrono::steady_clock::now();
  reply = AwaitReply(s, id, std::chrono::seconds(5));
  const auto late = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - t0).count();
  Die(absl::StrCat("the daemon did not answer ", what, " within ", kAliveMs, " ms (",
                   reply ? absl::StrCat("it answered ", late + kAliveMs, " ms late") : "nor 5 s later",
                   ")"));
}

}  // namespace

void TestDaemon::CheckAliveAndReset() {
  using namespace std::chrono_literals;
  wire::Request hello;
  hello.mutable_hello()->set_tenant(kTenantName[0]);
  hello.mutable_hello()->set_token(kTenantToken[0]);
  const wire::Response h = MustAnswer(*probe_, hello, ++probe_id_, "HELLO");
  wire::Request r;
  r.set_session_id(h.hello().session_id());
  r.mutable_ping();
  (void)MustAnswer(*probe_, r, ++probe_id_, "PING");
  for (const char* ns : kTenantName) {  // pages left by this input (pinned ones stay)
    auto* e = r.mutable_evict();
    e->set_namespace_(ns);
    e->set_all(true);
    (void)Ask(*probe_, r, ++probe_id_, 1000ms);
  }
  r.mutable_bye();
  (void)Ask(*probe_, r, ++probe_id_, 1000ms);
}

void TestDaemon::Shutdown() {
  probe_.reset();
  if (impl_) {
    impl_->stop = true;
    if (impl_->thread.joinable()) impl_->thread.join();
    impl_.reset();
  }
  ctx_.close();
  for (ShmObject& o : objects_) {
    if (o.map) munmap(o.map, kObjectBytes);
    if (o.fd >= 0) close(o.fd), shm_unlink(o.name.c_str());
  }
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

}  // namespace kvtier::fuzz
