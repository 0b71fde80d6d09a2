// Issue 12's daemon-side checks in isolation: tcp endpoint resolution,
// private directories, the session table's limits and accounting, peer
// liveness, log escaping and the tenants file's limits and reserves.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "daemon/config.h"
#include "daemon/endpoint.h"
#include "daemon/peers.h"
#include "daemon/request_codec.h"
#include "daemon/session.h"
#include "daemon/tenants.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtier/paths.h"
#include "kvtier/shm_buffer.h"

namespace kvtier::daemon {
namespace {

using ::testing::HasSubstr;

std::string Why(const absl::StatusOr<TcpEndpoint>& r) {
  return r.ok() ? "ok: " + r->bind : std::string(r.status().message());
}

// Hole 7: the text after "tcp://127." is not where libzmq binds.
TEST(EndpointTest, RefusesWhatLibzmqWouldBindElsewhere) {
  EXPECT_THAT(Why(ResolveTcpEndpoint("tcp://127.0.0.9:1;0.0.0.0:7450", false)),
              HasSubstr("source;address"));
  EXPECT_THAT(Why(ResolveTcpEndpoint("tcp://0.0.0.0:7450", false)), HasSubstr("not a loopback"));
  EXPECT_THAT(Why(ResolveTcpEndpoint("tcp://*:7450", false)), HasSubstr("not a loopback"));
  EXPECT_THAT(Why(ResolveTcpEndpoint("tcp://[::]:7450", false)), HasSubstr("not a loopback"));
  EXPECT_THAT(Why(ResolveTcpEndpoint("tcp://127.0.0.1:99999", false)), HasSubstr("port"));
  EXPECT_THAT(Why(ResolveTcpEndpoint("tcp://no-such-host.invalid:1", false)),
              HasSubstr("no address, interface or resolvable host"));
  EXPECT_THAT(Why(ResolveTcpEndpoint("ipc:///tmp/x", false)), HasSubstr("tcp://"));
  EXPECT_THAT(Why(ResolveTcpEndpoint("tcp://127.0.0.1%eth0:1", false)), HasSubstr("character"));
}

TEST(EndpointTest, BindsTheNumericLoopbackAddress) {
  auto v4 = ResolveTcpEndpoint("tcp://127.0.0.1:7450", false);
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->bind, "tcp://127.0.0.1:7450");
  auto any_port = ResolveTcpEndpoint("tcp://127.0.0.2:*", false);
  ASSERT_TRUE(any_port.ok()) << any_port.status();
  EXPECT_EQ(any_port->bind, "tcp://127.0.0.2:*");
  auto lo = ResolveTcpEndpoint("tcp://lo:7450", false);  // an interface name
  ASSERT_TRUE(lo.ok()) << lo.status();
  EXPECT_TRUE(lo->loopback);
  auto host = ResolveTcpEndpoint("tcp://localhost:7450", false);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_TRUE(host->loopback);
  auto v6 = ResolveTcpEndpoint("tcp://[::1]:7450", false);
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->bind, "tcp://[::1]:7450");
  EXPECT_TRUE(v6->ipv6);
  // Only with the explicit opt-in.
  EXPECT_TRUE(ResolveTcpEndpoint("tcp://0.0.0.0:7450", true).ok());
}

TEST(ConfigTest, ValidatesTheResolvedEndpoint) {
  DaemonConfig c;
  c.ipc_socket = "/tmp/x.sock";
  c.state_dir = "/tmp";
  c.nvme.dir = "/tmp/kvtier-nvme";
  c.tcp_endpoint = "tcp://127.0.0.9:1;0.0.0.0:7450";
  EXPECT_FALSE(c.Validate().ok());
  c.tcp_endpoint = "tcp://127.0.0.1:7450";
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c.max_sessions_per_connection = 0;
  EXPECT_FALSE(c.Validate().ok());
}

class PrivateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvtier-dir-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + root_).c_str()); }
  static mode_t Mode(const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0;
  }
  std::string root_;
};

// Holes 2 and 9: what the daemon creates is 0700; what it did not create is
// never chmodded, and refused when others can write to it.
TEST_F(PrivateDirTest, CreatesPrivateAndNeverChmodsExisting) {
  bool created = false;
  ASSERT_TRUE(EnsurePrivateDir(root_ + "/a/b", "state directory", &created).ok());
  EXPECT_TRUE(created);
  EXPECT_EQ(Mode(root_ + "/a"), 0700u);
  EXPECT_EQ(Mode(root_ + "/a/b"), 0700u);

  const std::string shared = root_ + "/shared";
  ASSERT_EQ(mkdir(shared.c_str(), 0700), 0);
  ASSERT_EQ(chmod(shared.c_str(), 01777), 0);
  absl::Status st = EnsurePrivateDir(shared, "socket directory", &created);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), HasSubstr("socket directory " + shared));
  EXPECT_THAT(std::string(st.message()), HasSubstr("mode 1777"));
  EXPECT_EQ(Mode(shared), 01777u) << "an existing directory was chmodded";

  const std::string readable = root_ + "/readable";
  ASSERT_EQ(mkdir(readable.c_str(), 0700), 0);
  ASSERT_EQ(chmod(readable.c_str(), 0755), 0);
  EXPECT_TRUE(EnsurePrivateDir(readable, "state directory", &created).ok());
  EXPECT_FALSE(created);
  EXPECT_EQ(Mode(readable), 0755u);

  const std::string file = root_ + "/file";
  ASSERT_EQ(close(creat(file.c_str(), 0600)), 0);
  EXPECT_THAT(std::string(EnsurePrivateDir(file, "state directory").message()),
              HasSubstr("not a directory"));
}

std::shared_ptr<ClientBuffer> Buffer(ShmBuffer& shm, uint64_t bytes) {
  auto b = ClientBuffer::Map(shm.name(), bytes);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *b : nullptr;
}

// Hole 6 and the registration limit: counts per peer, per namespace and of
// registered bytes follow every way a session ends.
TEST(SessionTableTest, CountsFollowEveryEnd) {
  auto shm = ShmBuffer::Create(1 << 20);
  ASSERT_TRUE(shm.ok()) << shm.status();
  SessionTable t;
  Session& a1 = t.Create("peer-a", 1);
  Session& a2 = t.Create("peer-a", 1);
  Session& b = t.Create("peer-b", 2);
  EXPECT_EQ(t.SessionsOfPeer("peer-a"), 2u);
  EXPECT_EQ(t.SessionsOfNamespace(1), 2u);
  EXPECT_EQ(t.SessionsOfNamespace(2), 1u);
  const uint32_t id = t.AddBuffer(a1, Buffer(**shm, 4096));
  t.AddBuffer(a2, Buffer(**shm, 8192));
  t.AddBuffer(b, Buffer(**shm, 4096));
  EXPECT_EQ(t.RegisteredBytes(1), 12288u);
  EXPECT_TRUE(t.RemoveBuffer(a1, id));
  EXPECT_FALSE(t.RemoveBuffer(a1, id));
  EXPECT_EQ(t.RegisteredBytes(1), 8192u);
  const std::string b_id = b.id;
  EXPECT_EQ(t.EraseByPeer("peer-a"), 2u);  // the connection closed
  EXPECT_EQ(t.SessionsOfNamespace(1), 0u);
  EXPECT_EQ(t.RegisteredBytes(1), 0u);
  EXPECT_FALSE(t.HasPeer("peer-a"));
  EXPECT_EQ(t.RegisteredBytes(2), 4096u);
  EXPECT_TRUE(t.Erase(b_id));
  EXPECT_EQ(t.RegisteredBytes(2), 0u);
  EXPECT_EQ(t.size(), 0u);
}

// Hole 6: a peer whose socket closed is reported, also when its fd number
// has been reused by another socket meanwhile.
TEST(PeerTableTest, ReportsClosedConnections) {
  int a[2], b[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, a), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, b), 0);
  PeerTable peers;
  peers.Note("a", a[0]);
  peers.Note("b", b[0]);
  peers.Note("inproc", -1);
  EXPECT_TRUE(peers.TakeClosed().empty());
  const int reused = a[0];
  close(a[0]);
  int c[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, c), 0);
  if (c[0] != reused) {
    ASSERT_EQ(dup2(c[0], reused), reused);  // same number, other socket
  }
  EXPECT_THAT(peers.TakeClosed(), ::testing::ElementsAre("a"));
  EXPECT_TRUE(peers.TakeClosed().empty());  // reported once
  close(b[0]);
  EXPECT_THAT(peers.TakeClosed(), ::testing::ElementsAre("b"));
  for (int fd : {a[1], b[1], c[0], c[1], reused}) close(fd);
}

// Hole 8: one log line per event, whatever the client sent.
TEST(LogSafeTest, EscapesControlCharacters) {
  EXPECT_EQ(LogSafe("vllm-worker-0"), "vllm-worker-0");
  const std::string forged = LogSafe("x\n2026-01-01T00:00:00.000 info kvtierd: FORGED\r\x1b[2J");
  EXPECT_EQ(forged.find('\n'), std::string::npos);
  EXPECT_EQ(forged.find('\r'), std::string::npos);
  EXPECT_EQ(forged.find('\x1b'), std::string::npos);
  EXPECT_THAT(forged, HasSubstr("x\\x0a2026"));
  EXPECT_EQ(PrintableText("\xff\xfe/name"), "\\xff\\xfe/name");  // valid UTF-8 for a reply
  EXPECT_EQ(LogSafe(std::string(1000, 'a')).size(), 128u + 3);
}

TEST(TenantsTest, ParsesLimitsAndReserves) {
  auto reg = TenantRegistry::Parse(
      R"({"tenants":[{"name":"a","token":"aaaaaaaa","quota":{"host":"2MiB"},
                      "reserve":{"host":"1MiB","nvme":"4MiB"},"max_sessions":8,
                      "max_registered_bytes":"1GiB"}]})",
      "t.json");
  ASSERT_TRUE(reg.ok()) << reg.status();
  const Tenant& t = reg->tenants()[0];
  EXPECT_EQ(t.reserved_bytes.at(tiers::TierKind::kHost), 1u << 20);
  EXPECT_EQ(t.reserved_bytes.at(tiers::TierKind::kNvme), 4u << 20);
  EXPECT_EQ(t.max_sessions, 8u);
  EXPECT_EQ(t.max_registered_bytes, 1ull << 30);
  // A misspelt field would silently protect nobody.
  auto typo = TenantRegistry::Parse(
      R"({"tenants":[{"name":"a","token":"aaaaaaaa","reserved":{"host":"1MiB"}}]})", "t.json");
  EXPECT_THAT(std::string(typo.status().message()), HasSubstr("unknown field \"reserved\""));
  auto zero = TenantRegistry::Parse(
      R"({"tenants":[{"name":"a","token":"aaaaaaaa","max_sessions":0}]})", "t.json");
  EXPECT_THAT(std::string(zero.status().message()), HasSubstr("max_sessions"));
}

}  // namespace
}  // namespace kvtier::daemon
