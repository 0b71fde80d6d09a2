// Issue 24: authentication before the first byte. Peers that have not
// authenticated in the ZeroMQ handshake (daemon/connection_guard.h) get no
// message through, no session, and no memory beyond one bounded handshake
// frame each, for a bounded number of connections and a bounded time. The
// flood speaks ZMTP itself over the daemon's unix socket (a libzmq client
// would never send a handshake command this large); the takeover test
// presents a closed connection's routing id and session id.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/security/security_fixture.h"

namespace kvtier::security {
namespace {

constexpr double kVictimP99Ms = 20.0;
constexpr uint64_t kFrameCap = 16ull << 20;  // --host_slab_bytes below: the frame cap

// A raw connection to the daemon's unix socket (-1 on failure).
int ConnectUnix(const std::string& endpoint) {
  const std::string path = endpoint.substr(std::strlen("ipc://"));
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The ZMTP 3.0 greeting of a PLAIN client (64 bytes).
std::string PlainClientGreeting() {
  std::string g(64, '\0');
  g[0] = '\xff';
  g[9] = '\x7f';
  g[10] = 3;  // version 3.0
  g[11] = 0;
  std::memcpy(&g[12], "PLAIN", 5);
  return g;  // as-server 0, filler zeros
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// True once the daemon has closed (or reset) `fd`, within `ms`. What it
// sent before (its ZMTP greeting) is read and dropped on the way.
bool ClosedByDaemon(int fd, int ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, std::max<int>(0, static_cast<int>(left.count()))) <= 0) return false;
    const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
}

class HandshakeAttacks : public SecurityTest {
 protected:
  // The production default slab (16 MiB), so the frame cap a flood can
  // fill is the real one; a short handshake timeout keeps the tests quick.
  std::vector<std::string> Flags() const override {
    return {"--host_bytes=64MiB", "--host_slab_bytes=16MiB", "--handshake_timeout_ms=1500"};
  }
};

// 16 connections that each start the handshake with one command frame of
// the largest size the daemon's socket takes, send all of it but one byte,
// and hold it; twice over. Unauthenticated memory is one frame per
// connection, for at most 3 connections of one uid, for at most the
// handshake timeout; afterwards the allocator's keep is trimmed.
TEST_F(HandshakeAttacks, PreAuthFloodHoldsNoMoreThanItsBound) {
  const pid_t pid = daemon_->pid();
  VictimProbe victim(daemon_->endpoint(), kAlice, kAliceToken);
  ASSERT_TRUE(victim.connected());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const uint64_t anon0 = ProcStatusBytes(pid, "RssAnon");
  PeakSampler anon(pid, "RssAnon");
  std::atomic<int> shut_early{0}, filled{0};
  const std::string greeting = PlainClientGreeting();
  const std::string chunk(1 << 20, 'A');
  for (int round = 0; round < 2; ++round) {
    std::vector<std::thread> attackers;
    for (int i = 0; i < 16; ++i)
      attackers.emplace_back([&] {
        const int fd = ConnectUnix(daemon_->endpoint());
        if (fd < 0) return;
        char header[9] = {'\x06'};  // command frame, 8-byte size
        for (int b = 0; b < 8; ++b) header[1 + b] = static_cast<char>(kFrameCap >> (56 - 8 * b));
        bool ok = WriteAll(fd, greeting.data(), greeting.size()) && WriteAll(fd, header, 9);
        uint64_t sent = 0;
        while (ok && sent + chunk.size() < kFrameCap) {
          ok = WriteAll(fd, chunk.data(), chunk.size());
          if (ok) sent += chunk.size();
        }
        if (ok) ok = WriteAll(fd, chunk.data(), kFrameCap - sent - 1);
        (ok ? filled : shut_early).fetch_add(1);
        if (ok) ClosedByDaemon(fd, 2500);  // held until the daemon drops it
        close(fd);
      });
    for (auto& t : attackers) t.join();
  }
  const uint64_t peak = anon.Stop();
  // The last connections close (handshake timeout). Frames of the cap are
  // their own mappings (daemon/allocator.h), unmapped as libzmq frees
  // them; smaller ones go back with the guard's trim. Before kvtierd fixed
  // glibc's thresholds, one 16 MiB frame could stay in the top of libzmq's
  // I/O thread's arena for good, which malloc_trim does not shrink (it
  // failed in three clean-clone CI runs, even after waiting 15 s).
  uint64_t after = ProcStatusBytes(pid, "RssAnon");
  int waited_ms = 0;
  for (; waited_ms < 5000 && after > anon0 + (4ull << 20); waited_ms += 100) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    after = ProcStatusBytes(pid, "RssAnon");
  }
  std::printf("SECURITY_MEM attack=preauth_flood back_within_ms=%d\n", waited_ms);
  LatencySummary ping = victim.Stop("preauth_flood");
  std::printf("SECURITY_MEM attack=preauth_flood connections=32 filled=%d shut_early=%d "
              "rss_anon_before_mib=%.1f rss_anon_peak_mib=%.1f rss_anon_after_mib=%.1f\n",
              filled.load(), shut_early.load(), anon0 / 1048576.0, peak / 1048576.0,
              after / 1048576.0);
  ASSERT_TRUE(daemon_->Alive()) << "kvtierd died";
  EXPECT_GT(shut_early.load(), 0) << "no connection over the unauthenticated limit was shut";
  EXPECT_LE(peak - std::min(peak, anon0), 64ull << 20)
      << "unauthenticated peers made the daemon hold " << (peak - anon0) / 1048576.0 << " MiB";
  EXPECT_LE(after - std::min(after, anon0), 4ull << 20) << "the flood's memory was kept";
  EXPECT_LE(ping.p99_ms, kVictimP99Ms);
  EXPECT_EQ(ping.errors, 0u);
  const std::string log = daemon_->Log();
  EXPECT_TRUE(absl::StrContains(log, "refused a connection from uid")) << "no log line names the peer";
  auto alice = Alice();  // still served
  ASSERT_TRUE(alice);
  EXPECT_TRUE(alice->Ping().ok());
}

// The attack that found the hole: peers without credentials each send one
// multipart message of frames under the frame cap whose last frame keeps
// MORE set, and stay connected. Without the handshake check the daemon's
// ZeroMQ I/O thread buffered all of it (4 GiB in the report, for as long
// as the peers stayed).
TEST_F(HandshakeAttacks, UnfinishedMessagesBeforeAuthenticationCostNothing) {
  const std::string frame(8u << 20, 'M');
  const pid_t pid = daemon_->pid();
  VictimProbe victim(daemon_->endpoint(), kAlice, kAliceToken);
  ASSERT_TRUE(victim.connected());
  const uint64_t anon0 = ProcStatusBytes(pid, "RssAnon");
  PeakSampler anon(pid, "RssAnon");
  std::vector<std::unique_ptr<WirePeer>> peers;
  int taken = 0;
  for (int p = 0; p < 4; ++p) {
    peers.push_back(std::make_unique<WirePeer>(daemon_->endpoint(), "", ""));
    peers.back()->set_send_timeout_ms(200);
    taken += peers.back()->SendUnfinished(frame.data(), frame.size(), 16);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // the peers stay connected
  const uint64_t peak = anon.Stop();
  LatencySummary ping = victim.Stop("unfinished_before_auth");
  std::printf("SECURITY_MEM attack=unfinished_before_auth peers=4 frames_taken_by_zmq=%d "
              "rss_anon_before_mib=%.1f rss_anon_peak_mib=%.1f\n",
              taken, anon0 / 1048576.0, peak / 1048576.0);
  peers.clear();
  ASSERT_TRUE(daemon_->Alive());
  EXPECT_LE(peak - std::min(peak, anon0), 64ull << 20)
      << "peers without credentials made the daemon hold " << (peak - anon0) / 1048576.0 << " MiB";
  EXPECT_LE(ping.p99_ms, kVictimP99Ms);
  EXPECT_EQ(ping.errors, 0u);
}

// Connections that never say anything: a few wait for their handshake,
// the rest are shut at once, and all are gone after the handshake timeout.
TEST_F(HandshakeAttacks, IdleUnauthenticatedConnectionsAreBoundedAndDropped) {
  std::vector<int> fds;
  for (int i = 0; i < 200; ++i) {
    const int fd = ConnectUnix(daemon_->endpoint());
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
  }
  int shut_at_once = 0;
  for (int fd : fds) shut_at_once += ClosedByDaemon(fd, 20);
  int open_after_timeout = 0;
  for (int fd : fds)
    if (!ClosedByDaemon(fd, 3000)) ++open_after_timeout;
  for (int fd : fds) close(fd);
  std::printf("SECURITY_CONN idle_connections=200 shut_at_once=%d open_after_timeout=%d\n",
              shut_at_once, open_after_timeout);
  EXPECT_GE(shut_at_once, 190) << "more than 3 (+ slack) idle unauthenticated connections kept";
  EXPECT_EQ(open_after_timeout, 0) << "unauthenticated connections outlived the handshake timeout";
  auto alice = Alice();
  ASSERT_TRUE(alice);
  EXPECT_TRUE(alice->Ping().ok());
}

// No credentials, or wrong ones: nothing reaches the daemon, nothing is
// answered, and the log names the peer.
TEST_F(HandshakeAttacks, UnauthenticatedPeersGetNoMessageThrough) {
  const uint64_t r1 = AdminStats().daemon().requests();
  const uint64_t r2 = AdminStats().daemon().requests();  // what one AdminStats() adds
  WirePeer none(daemon_->endpoint(), "", "");
  WirePeer wrong(daemon_->endpoint(), kAlice, "not-alices-token");
  WirePeer unknown(daemon_->endpoint(), "nobody", kMalloryToken);
  for (WirePeer* p : {&none, &wrong, &unknown}) {
    // libzmq may not even take the message (no peer ever completed the
    // handshake); if it does, nothing comes back.
    p->set_send_timeout_ms(500);
    (void)p->SendFrames({PingReq().SerializeAsString()});
    EXPECT_FALSE(p->RecvFrames(800).has_value()) << "an unauthenticated peer was answered";
  }
  const uint64_t r3 = AdminStats().daemon().requests();
  EXPECT_EQ(r3 - r2, r2 - r1) << "requests of unauthenticated peers reached the daemon";
  const std::string log = daemon_->Log();
  EXPECT_TRUE(absl::StrContains(log, "refused the handshake of uid")) << log;
  EXPECT_TRUE(absl::StrContains(log, "tenant 'alice' with a wrong token, or no such tenant"));
  EXPECT_FALSE(absl::StrContains(log, "not-alices-token")) << "a token was logged";
}

// A closed connection's routing id and session id, presented at once (and
// later) by a new connection, by another tenant and by the same one.
TEST_F(HandshakeAttacks, ReusedRoutingIdDoesNotTakeOverASession) {
  for (int delay_ms : {0, 50}) {
    const std::string rid = absl::StrCat("alice-conn-", delay_ms);
    std::string session;
    {
      WirePeer alice(daemon_->endpoint(), kAlice, kAliceToken, rid);
      auto r = alice.Hello(kAlice, kAliceToken, std::nullopt, "alice");
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->response.code(), wire::OK) << r->response.message();
      session = alice.session();
      EXPECT_WIRE_CODE(alice.Call(PingReq()), OK);
    }  // closed without BYE
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    for (auto [tenant, token] : {std::pair<const char*, const char*>{kMallory, kMalloryToken},
                                 {kAlice, kAliceToken}}) {
      WirePeer thief(daemon_->endpoint(), tenant, token, rid);
      thief.set_session(session);
      wire::Request stats;
      stats.mutable_stats();
      for (const wire::Request& q : {PingReq(), stats}) {
        // Refused, or not answered at all (libzmq drops a connection that
        // presents a routing id still in use): either way not alice's.
        auto r = thief.Call(q, {}, 2000);
        const bool answered_ok = r.ok() && r->response.code() == wire::OK;
        EXPECT_FALSE(answered_ok) << tenant << " took over alice's session after " << delay_ms
                                  << " ms";
        std::printf("SECURITY_TAKEOVER tenant=%s delay_ms=%d outcome=%s\n", tenant, delay_ms,
                    r.ok() ? wire::Code_Name(r->response.code()).c_str() : "no reply");
      }
    }
  }
}

}  // namespace
}  // namespace kvtier::security
