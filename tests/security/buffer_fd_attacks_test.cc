// Buffers by file descriptor (docs/PROTOCOL.md, "Buffers by file
// descriptor"): the handover socket speaks only what the document says,
// malformed handovers are answered with a reason and cost nothing kept, a
// ticket opens its buffer once and only for the uid that handed it over.
// The hostile side speaks the socket with raw sendmsg, not libkvtier-client.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "absl/strings/escaping.h"
#include "kvtier/shm_buffer.h"
#include "tests/security/security_fixture.h"

namespace kvtier::security {
namespace {

// The daemon's buffer socket, as its HELLO names it.
std::string BufferSocket(WirePeer& p, const std::string& tenant, const std::string& token) {
  auto r = p.Hello(tenant, token, itest::SmallLayout(), "fd-attacker");
  if (!r.ok() || r->response.code() != wire::OK) return "";
  return r->response.hello().buffer_socket();
}

int DialBufferSocket(const std::string& path) {
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), std::min(path.size(), sizeof(addr.sun_path) - 1));
  timeval tv{5, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(s);
    return -1;
  }
  return s;
}

// One handover message: `payload` with `fds` as SCM_RIGHTS; the answer.
std::string Handover(const std::string& path, const std::string& payload,
                     const std::vector<int>& fds) {
  int s = DialBufferSocket(path);
  if (s < 0) return "connect failed";
  iovec iov{const_cast<char*>(payload.data()), payload.size()};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * std::max<size_t>(fds.size(), 1)));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  std::string out;
  if (sendmsg(s, &msg, MSG_NOSIGNAL) >= 0) {
    char buf[512];
    ssize_t n = recv(s, buf, sizeof(buf), 0);
    if (n > 0) out.assign(buf, static_cast<size_t>(n));
  }
  close(s);
  return out;
}

int Memfd(uint64_t size) {
  int fd = memfd_create("kvtier-fd-test", MFD_CLOEXEC);
  if (fd >= 0 && ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

wire::Request RegisterTicketReq(const std::string& ticket, uint64_t size) {
  wire::Request r;
  r.mutable_register_buffer()->set_fd_ticket(ticket);
  r.mutable_register_buffer()->set_size(size);
  return r;
}

class BufferFdAttacks : public WithAlicePages<301> {};

TEST_F(BufferFdAttacks, ClientRegistersByFdAndCopiesThroughIt) {
  auto alice = Alice();
  ASSERT_TRUE(alice);
  EXPECT_TRUE(alice->takes_buffer_fds());
  auto buf = ShmBuffer::Create(4 * alice->page_bytes());
  ASSERT_TRUE(buf.ok()) << buf.status();
  // Unlinked: no name left for anyone to open, the fd is the only way in.
  shm_unlink((*buf)->name().c_str());
  auto id = alice->RegisterBuffer(**buf);
  ASSERT_TRUE(id.ok()) << id.status();
  const auto keys = itest::MakeChain(itest::SmallLayout(), 302, 4);
  const uint64_t page = alice->page_bytes();
  std::vector<uint64_t> offsets;
  for (size_t i = 0; i < keys.size(); ++i) {
    offsets.push_back(i * page);
    std::memset((*buf)->data() + i * page, 0x40 + static_cast<int>(i), page);
  }
  auto put = alice->Put(keys, PageKey::Zero(), *id, offsets);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->stored, keys.size());
  std::memset((*buf)->data(), 0, 4 * page);
  auto got = alice->Get(keys, *id, offsets);
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ((*buf)->data()[i * page + page - 1], 0x40 + static_cast<int>(i)) << "page " << i;
}

TEST_F(BufferFdAttacks, MalformedHandoversAreRefusedWithAReason) {
  WirePeer peer(daemon_->endpoint(), kMallory, kMalloryToken);
  const std::string path = BufferSocket(peer, kMallory, kMalloryToken);
  ASSERT_FALSE(path.empty()) << "HELLO named no buffer socket";
  const int mem = Memfd(1 << 20);
  ASSERT_GE(mem, 0);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  EXPECT_EQ(Handover(path, "KVTFD001", {}).substr(0, 3), "ER ") << "no fd";
  EXPECT_EQ(Handover(path, "KVTFD001", {mem, mem}).substr(0, 3), "ER ") << "two fds";
  EXPECT_EQ(Handover(path, "KVTFD999", {mem}).substr(0, 3), "ER ") << "wrong magic";
  EXPECT_EQ(Handover(path, std::string(40, 'x'), {mem}).substr(0, 3), "ER ") << "garbage";
  const std::string piped = Handover(path, "KVTFD001", {pipe_fds[0]});
  EXPECT_NE(piped.find("not a regular file"), std::string::npos) << piped;
  // A file on a disk file system is not memory: a copy into it would wait
  // on that file system's I/O. (Skipped where the build dir is tmpfs.)
  const std::string disk_path = absl::StrCat(daemon_->dir(), "/not-memory");
  int disk = open(disk_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(disk, 0);
  ASSERT_EQ(ftruncate(disk, 1 << 20), 0);
  struct statfs fs;
  ASSERT_EQ(fstatfs(disk, &fs), 0);
  if (fs.f_type != 0x01021994) {  // TMPFS_MAGIC
    const std::string on_disk = Handover(path, "KVTFD001", {disk});
    EXPECT_NE(on_disk.find("not memory"), std::string::npos) << on_disk;
  }
  // A connection that never speaks is dropped; the socket still serves.
  int silent = DialBufferSocket(path);
  ASSERT_GE(silent, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  char b;
  EXPECT_EQ(recv(silent, &b, 1, 0), 0) << "a silent connection is closed after 2 s";
  close(silent);
  const std::string ok = Handover(path, "KVTFD001", {mem});
  ASSERT_EQ(ok.size(), 18u) << ok;
  EXPECT_EQ(ok.substr(0, 2), "OK");
  for (int fd : {mem, pipe_fds[0], pipe_fds[1], disk}) close(fd);
}

TEST_F(BufferFdAttacks, TicketOpensOnceAndBadTicketsAreRefused) {
  WirePeer peer(daemon_->endpoint(), kMallory, kMalloryToken);
  const std::string path = BufferSocket(peer, kMallory, kMalloryToken);
  ASSERT_FALSE(path.empty());
  const int mem = Memfd(1 << 20);
  ASSERT_GE(mem, 0);
  const std::string ok = Handover(path, "KVTFD001", {mem});
  ASSERT_EQ(ok.substr(0, 2), "OK") << ok;
  const std::string ticket = ok.substr(2);
  EXPECT_WIRE_CODE(peer.Call(RegisterTicketReq(ticket, 2 << 20)), INVALID_ARGUMENT);
  // The failed REGISTER spent the ticket.
  EXPECT_WIRE_CODE(peer.Call(RegisterTicketReq(ticket, 1 << 20)), NOT_FOUND);
  const std::string again = Handover(path, "KVTFD001", {mem});
  ASSERT_EQ(again.substr(0, 2), "OK") << again;
  EXPECT_WIRE_CODE(peer.Call(RegisterTicketReq(again.substr(2), 1 << 20)), OK);
  EXPECT_WIRE_CODE(peer.Call(RegisterTicketReq(again.substr(2), 1 << 20)), NOT_FOUND);
  EXPECT_WIRE_CODE(peer.Call(RegisterTicketReq(std::string(16, '\0'), 1 << 20)), NOT_FOUND);
  EXPECT_WIRE_CODE(peer.Call(RegisterTicketReq("short", 1 << 20)), INVALID_ARGUMENT);
  close(mem);
}

TEST_F(BufferFdAttacks, HandoversNotRegisteredAreBoundedPerUser) {
  WirePeer peer(daemon_->endpoint(), kMallory, kMalloryToken);
  const std::string path = BufferSocket(peer, kMallory, kMalloryToken);
  ASSERT_FALSE(path.empty());
  const int mem = Memfd(1 << 20);
  ASSERT_GE(mem, 0);
  int ok = 0;
  std::string refused;
  for (int i = 0; i < 40; ++i) {
    const std::string r = Handover(path, "KVTFD001", {mem});
    if (r.substr(0, 2) == "OK") ++ok;
    else refused = r;
  }
  EXPECT_EQ(ok, 16) << "at most 16 tickets per uid wait to be used";
  EXPECT_NE(refused.find("too many buffers"), std::string::npos) << refused;
  close(mem);
  // The flood's tickets expire (10 s), their fds closed, and the socket
  // serves that uid again.
  std::this_thread::sleep_for(std::chrono::seconds(11));
  auto alice = Alice();
  ASSERT_TRUE(alice);
  auto buf = ShmBuffer::Create(alice->page_bytes());
  ASSERT_TRUE(buf.ok());
  EXPECT_TRUE(alice->RegisterBuffer(**buf).ok());
}

// Another uid's ticket opens nothing: a child that drops to `nobody` hands a
// memfd over, and this process (root) presents its ticket.
TEST_F(BufferFdAttacks, AnotherUsersTicketIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a second uid";
  WirePeer peer(daemon_->endpoint(), kMallory, kMalloryToken);
  const std::string path = BufferSocket(peer, kMallory, kMalloryToken);
  ASSERT_FALSE(path.empty());
  // The socket is 0600 to the daemon's uid (root here): let the child in.
  ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  ASSERT_EQ(chmod(std::string(path.substr(0, path.rfind('/'))).c_str(), 0711), 0);
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(out[0]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    const int mem = Memfd(1 << 20);
    const std::string r = Handover(path, "KVTFD001", {mem});
    (void)!write(out[1], r.data(), r.size());
    _exit(0);
  }
  close(out[1]);
  char buf[64];
  ssize_t n = read(out[0], buf, sizeof(buf));
  close(out[0]);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_EQ(n, 18) << std::string(buf, n > 0 ? n : 0);
  auto r = peer.Call(RegisterTicketReq(std::string(buf + 2, 16), 1 << 20));
  EXPECT_WIRE_CODE(r, PERMISSION_DENIED);
  EXPECT_NE(r->response.message().find("uid 65534"), std::string::npos) << r->response.message();
}

}  // namespace
}  // namespace kvtier::security
