// The floor under every kvtier request: a bare ZeroMQ DEALER->ROUTER echo
// over ipc:// between two processes, with LOOKUP-sized messages and the
// client library's send/poll/recv pattern. A child kvtier-bench process
// ("zmq-echo" section) is the echo server; the daemon does strictly more.
#include "bench/zmq_floor.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kvtier/status_macros.h"
#include "zmq.hpp"

extern char** environ;

namespace kvtier::bench {
namespace {

constexpr size_t kRequestBytes = 64 * 16 + 40;  // 64 packed keys + header
constexpr size_t kReplyBytes = 90;              // hits + 64 tier bytes + header

// One request/reply exchange as Client::Impl::Call does it.
bool Exchange(zmq::socket_t& s, const std::string& req) {
  if (!s.send(zmq::buffer(req), zmq::send_flags::dontwait)) return false;
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, std::chrono::milliseconds(5000)) == 0) return false;
  zmq::message_t m;
  return s.recv(m).has_value() && m.size() == kReplyBytes;
}

// Every DEALER of these measurements connects like this.
zmq::socket_t ConnectDealer(zmq::context_t& ctx, const std::string& endpoint) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.connect(endpoint);
  return s;
}

}  // namespace

int RunZmqEcho(const std::string& endpoint) {
  zmq::context_t ctx(1);
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.bind(endpoint);
  const std::string reply(kReplyBytes, 'r');
  for (;;) {
    zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(100));  // the daemon's loop shape
    while (router.get(zmq::sockopt::events) & ZMQ_POLLIN) {
      zmq::message_t id, body;
      if (!router.recv(id, zmq::recv_flags::dontwait)) break;
      while (router.recv(body) && body.more()) {
      }
      router.send(id, zmq::send_flags::sndmore);
      router.send(zmq::buffer(reply), zmq::send_flags::dontwait);
    }
    if (getppid() == 1) return 0;  // the benchmark died: do not linger
  }
}

absl::StatusOr<std::unique_ptr<ZmqEcho>> ZmqEcho::Start() {
  std::unique_ptr<ZmqEcho> e(new ZmqEcho());
  char dir[] = "/tmp/kvtier-bench-echo.XXXXXX";
  if (mkdtemp(dir) == nullptr) return absl::InternalError("mkdtemp failed");
  e->dir_ = dir;
  e->endpoint_ = absl::StrCat("ipc://", dir, "/echo.sock");
  char* argv[] = {const_cast<char*>("kvtier-bench"), const_cast<char*>("zmq-echo"),
                  const_cast<char*>(e->endpoint_.c_str()), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, environ) != 0)
    return absl::InternalError("cannot start the echo server");
  e->pid_ = pid;
  e->ctx_ = std::make_unique<zmq::context_t>(1);
  e->socket_ = std::make_unique<zmq::socket_t>(ConnectDealer(*e->ctx_, e->endpoint_));
  return e;
}

ZmqEcho::~ZmqEcho() {
  socket_.reset();
  ctx_.reset();
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  unlink((dir_ + "/echo.sock").c_str());
  rmdir(dir_.c_str());
}

bool ZmqEcho::RoundTrip() {
  static const std::string req(kRequestBytes, 'q');
  return Exchange(*socket_, req);
}

absl::StatusOr<nlohmann::json> RunZmqFloor(const BenchOptions& o, int calls) {
  ASSIGN_OR_RETURN(std::unique_ptr<ZmqEcho> echo, ZmqEcho::Start());
  const std::string req(kRequestBytes, 'q');
  std::vector<double> us;
  for (int i = 0; i < 1000 + calls; ++i) {
    auto t0 = Clock::now();
    if (!echo->RoundTrip()) return absl::UnavailableError("zmq echo did not answer");
    if (i >= 1000) us.push_back(Seconds(t0, Clock::now()) * 1e6);
  }
  // Several clients, each its own context like separate kvtier::Clients.
  std::vector<double> rates;
  for (int r = 0; r < o.repeats; ++r) {
    std::atomic<bool> go{false}, stop{false};
    std::atomic<uint64_t> total{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < o.lookup_threads; ++t)
      threads.emplace_back([&] {
        zmq::context_t c(1);
        zmq::socket_t d = ConnectDealer(c, echo->endpoint());
        Exchange(d, req);
        while (!go.load()) std::this_thread::yield();
        uint64_t n = 0;
        while (!stop.load(std::memory_order_relaxed) && Exchange(d, req)) ++n;
        total += n;
      });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let them connect
    auto t0 = Clock::now();
    go = true;
    std::this_thread::sleep_for(std::chrono::duration<double>(o.lookup_seconds));
    stop = true;
    for (auto& t : threads) t.join();
    rates.push_back(total / Seconds(t0, Clock::now()));
  }
  Summary rate = Summarize(rates);
  const double p50 = Percentile(us, 50), p99 = Percentile(us, 99);
  std::printf("zmq floor (bare DEALER/ROUTER echo over ipc, %zu-byte request, %zu-byte reply): "
              "p50 %.1f us, p99 %.1f us; %d clients %.0f round trips/s [%.0f..%.0f]\n",
              kRequestBytes, kReplyBytes, p50, p99, o.lookup_threads, rate.median, rate.min,
              rate.max);
  std::fflush(stdout);
  return nlohmann::json{{"latency_us", {{"p50", p50}, {"p99", p99}}},
                        {"calls", us.size()},
                        {"round_trips_per_s", ToJson(rate)}};
}

}  // namespace kvtier::bench
