// The binaries as a user runs them: kvtierctl against a live daemon and
// without one, kvtierd --help / --flagfile / bad flags, and shutdown by signal.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>

#include "client/wire_calls.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "kvtier/shm_buffer.h"
#include "nlohmann/json.hpp"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::itest {
namespace {

using KvtierctlTest = DaemonTest;

TEST_F(KvtierctlTest, StatsPrintsTables) {
  auto c = Connect();
  ASSERT_TRUE(c);
  auto keys = MakeChain(SmallLayout(), 9, 3);
  std::vector<std::string> pages;
  for (const auto& k : keys) pages.push_back(PatternPage(k, kSmallPageBytes));
  std::vector<absl::string_view> views(pages.begin(), pages.end());
  ASSERT_TRUE(c->PutInline(keys, PageKey::Zero(), views).ok());

  auto r = RunCommand({KVTIERCTL_PATH, "stats", "--endpoint=" + daemon_->endpoint()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "TIER")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "host")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "NAMESPACE")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "default")) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST_F(KvtierctlTest, StatsJsonIsValidJson) {
  auto r = RunCommand({KVTIERCTL_PATH, "stats", "--json", "--endpoint=" + daemon_->endpoint()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(doc.is_discarded()) << r.out;
  ASSERT_TRUE(doc.contains("daemon")) << r.out;
  EXPECT_EQ(doc["daemon"]["version"], KVTIER_TEST_VERSION);
  ASSERT_TRUE(doc.contains("tiers") && doc["tiers"].is_array()) << r.out;
  EXPECT_EQ(doc["tiers"][0]["name"], "host");
  ASSERT_TRUE(doc.contains("namespaces") && doc["namespaces"].is_array()) << r.out;
  EXPECT_EQ(doc["namespaces"][0]["name"], "default");
  // 64-bit fields are JSON numbers (the protobuf mapping would write "0"),
  // in messages, repeated messages and maps alike; strings stay strings.
  EXPECT_TRUE(doc["daemon"]["uptime_ms"].is_number_integer()) << r.out;
  EXPECT_TRUE(doc["daemon"]["requests"].is_number_unsigned()) << r.out;
  EXPECT_TRUE(doc["tiers"][0]["capacity_bytes"].is_number_unsigned()) << r.out;
  EXPECT_GT(doc["tiers"][0]["capacity_bytes"].get<uint64_t>(), 0u) << r.out;
  EXPECT_TRUE(doc["namespaces"][0]["pages"].is_number_unsigned()) << r.out;
  for (const auto& [tier, bytes] : doc["namespaces"][0]["tier_bytes"].items())
    EXPECT_TRUE(bytes.is_number_unsigned()) << tier << ": " << r.out;
  EXPECT_TRUE(doc["daemon"]["version"].is_string()) << r.out;
  EXPECT_TRUE(doc["tiers"][0]["backing"].is_string()) << r.out;
}

TEST(KvtierctlNoDaemonTest, FailsWithOneLineError) {
  TempDir dir;
  auto r = RunCommand({KVTIERCTL_PATH, "stats", "--endpoint=ipc://" + dir.File("nobody.sock"),
                       "--timeout_ms=300"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(r.out.empty()) << r.out;
  ASSERT_FALSE(r.err.empty());
  std::string err = r.err;
  if (err.back() == '\n') err.pop_back();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 0) << "not one line: " << r.err;
  EXPECT_TRUE(absl::StartsWith(err, "kvtierctl: ")) << err;
  EXPECT_TRUE(absl::StrContains(err, "kvtierd")) << err;

  auto tcp = RunCommand({KVTIERCTL_PATH, "stats", "--json",
                         "--endpoint=tcp://127.0.0.1:" + std::to_string(FreeTcpPort()),
                         "--timeout_ms=300"});
  EXPECT_NE(tcp.exit_code, 0);
  EXPECT_TRUE(absl::StartsWith(tcp.err, "kvtierctl: ")) << tcp.err;
}

TEST(KvtierdFlagsTest, HelpListsFlags) {
  auto r = RunCommand({KVTIERD_PATH, "--help"});
  // Abseil exits 1 after --help; what matters is that it exits and lists the flags.
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.exit_code;
  std::string text = r.out + r.err;
  for (const char* flag : {"--socket", "--tcp", "--state_dir", "--tenants_file", "--host_bytes",
                           "--host_slab_bytes", "--high_watermark", "--low_watermark",
                           "--copy_threads", "--log_level"})
    EXPECT_TRUE(absl::StrContains(text, flag)) << flag << " missing from:\n" << text;
}

TEST(KvtierdFlagsTest, BadFlagValueFailsFast) {
  TempDir dir;
  auto r = RunCommand({KVTIERD_PATH, "--socket=" + dir.File("s.sock"),
                       "--state_dir=" + dir.File("state"), "--host_bytes=lots"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.err, "--host_bytes")) << r.err;
  auto long_copy = RunCommand({KVTIERD_PATH, "--socket=" + dir.File("s.sock"),
                               "--state_dir=" + dir.File("state"), "--frontend_copy_bytes=1GiB"});
  EXPECT_NE(long_copy.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(long_copy.err, "--frontend_copy_bytes")) << long_copy.err;
  auto bad_tenants = RunCommand({KVTIERD_PATH, "--socket=" + dir.File("s.sock"),
                                 "--state_dir=" + dir.File("state"),
                                 "--tenants_file=" + dir.File("missing.json")});
  EXPECT_NE(bad_tenants.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(bad_tenants.err, "missing.json")) << bad_tenants.err;
}

TEST(KvtierdFlagsTest, FlagfileIsRead) {
  TempDir dir;
  std::string sock = dir.File("ff.sock");
  std::string flagfile = dir.File("kvtierd.flags");
  std::ofstream(flagfile) << "--socket=" << sock << "\n--state_dir=" << dir.File("state")
                          << "\n--host_bytes=24MiB\n--host_slab_bytes=1MiB\n--hugepages=off\n";
  auto pid = DaemonProcess::Spawn({"--flagfile=" + flagfile}, dir.File("log"));
  ASSERT_TRUE(pid.ok()) << pid.status();
  std::unique_ptr<Client> c;
  for (int i = 0; i < 500 && !c; ++i) {
    ClientOptions o = Options("ipc://" + sock, "default", "", false);
    o.timeout = std::chrono::milliseconds(200);
    auto r = Client::Connect(o);
    if (r.ok()) c = *std::move(r);
  }
  ASSERT_TRUE(c) << "daemon started from a flagfile never answered";
  auto stats = WireStats(*c);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_GE(stats->tiers_size(), 1);
  EXPECT_EQ(stats->tiers(0).capacity_bytes(), 24u << 20);
  c.reset();
  kill(*pid, SIGTERM);
  auto code = WaitExit(*pid, 10000);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

using ShutdownTest = DaemonTest;

// TearDown sends SIGTERM with a session open, a buffer mapped and pages
// stored, and checks for exit status 0.
TEST_F(ShutdownTest, SigtermWithLiveSessionsExitsZero) {
  ClientOptions o = Options(daemon_->endpoint());
  o.timeout = std::chrono::milliseconds(1000);
  auto connected = Client::Connect(o);
  ASSERT_TRUE(connected.ok()) << connected.status();
  auto c = *std::move(connected);
  auto buf = ShmBuffer::Create(4 * kSmallPageBytes);
  ASSERT_TRUE(buf.ok());
  auto id = c->RegisterBuffer((*buf)->name(), (*buf)->size());
  ASSERT_TRUE(id.ok()) << id.status();
  auto keys = MakeChain(SmallLayout(), 3, 4);
  std::vector<uint64_t> offsets = {0, kSmallPageBytes, 2 * kSmallPageBytes, 3 * kSmallPageBytes};
  ASSERT_TRUE(c->Put(keys, PageKey::Zero(), *id, offsets).ok());
  auto code = daemon_->Stop(SIGTERM);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  // The socket is gone: the client now gets an error, not a hang.
  auto look = c->Lookup(keys);
  EXPECT_FALSE(look.ok());
  daemon_.reset();
}

TEST_F(ShutdownTest, SigintExitsZero) {
  auto c = Connect();
  ASSERT_TRUE(c);
  auto code = daemon_->Stop(SIGINT);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  daemon_.reset();
}

}  // namespace
}  // namespace kvtier::itest
