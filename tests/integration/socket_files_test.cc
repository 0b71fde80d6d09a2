// Socket hygiene (issue 26, item 5): a clean stop removes the daemon's socket
// files; a start replaces a stale file (nobody answers on it) but refuses a
// live one (another daemon's), exit 2, naming it; and a client's default
// endpoint falls back to the system socket past a stale per-user file.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "kvtier/paths.h"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::itest {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// A socket file nobody listens on: what a daemon killed with -9 leaves.
void MakeStaleSocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
  close(fd);
  ASSERT_EQ(ProbeUnixSocket(path), SocketProbe::kRefused);
}

std::string SocketPath(const DaemonProcess& d) { return d.ipc_endpoint().substr(6); }

TEST(SocketFilesTest, CleanStopRemovesBothSocketFiles) {
  auto d = DaemonProcess::Start({});
  ASSERT_TRUE(d.ok()) << d.status();
  const std::string sock = SocketPath(**d);
  ASSERT_TRUE(Exists(sock));
  ASSERT_TRUE(Exists(sock + ".fds"));
  auto code = (*d)->Stop();
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  EXPECT_FALSE(Exists(sock)) << "the ipc socket file outlived a clean stop";
  EXPECT_FALSE(Exists(sock + ".fds")) << "the buffer socket file outlived a clean stop";
}

TEST(SocketFilesTest, AStaleSocketIsReplacedAfterACrash) {
  auto d = DaemonProcess::Start({});
  ASSERT_TRUE(d.ok()) << d.status();
  // kill -9 leaves both files; the restart replaces them and says so.
  ASSERT_TRUE((*d)->Restart(SIGKILL).ok()) << (*d)->Log();
  EXPECT_TRUE(absl::StrContains((*d)->Log(), "removed the stale socket file " + SocketPath(**d)))
      << (*d)->Log();
  auto c = ConnectClient((*d)->endpoint());
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->Ping().ok());
  c.reset();
  ASSERT_TRUE((*d)->Stop().ok());
}

TEST(SocketFilesTest, ASecondDaemonOnALiveSocketRefusesAndTheFirstKeepsIt) {
  auto d = DaemonProcess::Start({});
  ASSERT_TRUE(d.ok()) << d.status();
  const std::string sock = SocketPath(**d);
  TempDir other;
  CommandResult second =
      RunCommand({KVTIERD_PATH, "--socket=" + sock, "--state_dir=" + other.File("state"),
                  "--host_bytes=16MiB", "--host_slab_bytes=1MiB", "--hugepages=off",
                  "--nvme_bytes=0", "--copy_threads=1"});
  EXPECT_EQ(second.exit_code, 2) << second.out << second.err;
  const std::string says = second.out + second.err;
  EXPECT_TRUE(absl::StrContains(says, sock)) << says;
  EXPECT_TRUE(absl::StrContains(says, "another kvtierd is running")) << says;
  EXPECT_FALSE(Exists(other.File("state"))) << "the refused daemon created its state";
  // The first one still owns and answers on its socket.
  auto c = ConnectClient((*d)->endpoint());
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->Ping().ok());
  EXPECT_EQ(ProbeUnixSocket(sock + ".fds", SOCK_SEQPACKET), SocketProbe::kAnswers);
  c.reset();
  auto code = (*d)->Stop();
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

TEST(SocketFilesTest, StartRefusesAPathThatIsNotASocket) {
  TempDir dir;
  const std::string path = dir.File("not.sock");
  { std::ofstream(path) << "operator's file"; }
  CommandResult r = RunCommand({KVTIERD_PATH, "--socket=" + path, "--state_dir=" + dir.File("s"),
                                "--host_bytes=16MiB", "--hugepages=off", "--nvme_bytes=0"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out + r.err, "exists and is not a socket")) << r.out << r.err;
  EXPECT_TRUE(Exists(path));
}

TEST(SocketFilesTest, ClientFallsBackToTheSystemSocketPastAStaleOne) {
  auto d = DaemonProcess::Start({});
  ASSERT_TRUE(d.ok()) << d.status();
  const std::string system = SocketPath(**d);  // stands in for /run/kvtier/kvtierd.sock
  TempDir dir;
  const std::string own = dir.File("kvtierd.sock");
  // No per-user socket, and a stale one: the system socket.
  EXPECT_EQ(ChooseEndpoint(own, system), "ipc://" + system);
  MakeStaleSocket(own);
  EXPECT_EQ(ChooseEndpoint(own, system), "ipc://" + system);
  // And it is reached at once, not after a timeout on the stale file.
  const auto t0 = std::chrono::steady_clock::now();
  auto c = ConnectClient(ChooseEndpoint(own, system));
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->Ping().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1500));
  c.reset();
  // A live per-user daemon wins; with no system socket the per-user path stays.
  EXPECT_EQ(ChooseEndpoint(system, own + ".none"), "ipc://" + system);
  EXPECT_EQ(ChooseEndpoint(own, own + ".none"), "ipc://" + own);
  ASSERT_TRUE((*d)->Stop().ok());
}

}  // namespace
}  // namespace kvtier::itest
