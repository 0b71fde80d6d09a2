// buffer_peer: one step of the cross-user buffer test
// (cross_user_buffers.sh), run as whichever user the script chooses:
//   buffer_peer handover SOCKET            memfd of 1 MiB handed over; prints
//                                          the ticket (hex), then waits for
//                                          stdin to close (the fd stays open)
//   buffer_peer register-ticket ENDPOINT TENANT TOKEN HEX
//   buffer_peer register-name ENDPOINT TENANT TOKEN NAME SIZE
// The register commands print "<CODE> <message>" of the daemon's answer and
// exit 0 (the script judges the answer); 1 when no answer came.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "kvtier.pb.h"
#include "tests/integration/daemon_process.h"
#include "tests/security/wire_peer.h"
#include "buffer_handover.h"

namespace {

using kvtier::security::WirePeer;

int Answer(const absl::StatusOr<kvtier::security::WireReply>& r) {
  if (!r.ok()) {
    std::printf("NO_ANSWER %s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  std::printf("%s %s\n", kvtier::wire::Code_Name(r->response.code()).c_str(),
              r->response.message().c_str());
  return 0;
}

int Register(WirePeer& peer, const std::string& tenant, const std::string& token,
             kvtier::wire::Request req) {
  auto hello = peer.Hello(tenant, token, kvtier::itest::SmallLayout(), "buffer-peer");
  if (!hello.ok() || hello->response.code() != kvtier::wire::OK) return Answer(hello);
  return Answer(peer.Call(std::move(req)));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "--help" || cmd.empty()) {
    std::printf(
        "usage: buffer_peer handover SOCKET | register-ticket ENDPOINT TENANT TOKEN HEX |\n"
        "       register-name ENDPOINT TENANT TOKEN NAME SIZE\n");
    return cmd.empty() ? 2 : 0;
  }
  if (cmd == "handover" && argc == 3) {
    int fd = memfd_create("kvtier-buffer-peer", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 1 << 20) != 0) return 1;
    auto ticket = kvtier::client_internal::HandOverFd(argv[2], fd, std::chrono::seconds(5));
    if (!ticket.ok()) {
      std::printf("ERROR %s\n", std::string(ticket.status().message()).c_str());
      return 1;
    }
    std::printf("%s\n", absl::BytesToHexString(*ticket).c_str());
    std::fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {
    }
    return 0;
  }
  if (cmd == "register-ticket" && argc == 6) {
    WirePeer peer(argv[2], argv[3], argv[4]);
    kvtier::wire::Request req;
    req.mutable_register_buffer()->set_fd_ticket(absl::HexStringToBytes(argv[5]));
    req.mutable_register_buffer()->set_size(1 << 20);
    return Register(peer, argv[3], argv[4], std::move(req));
  }
  if (cmd == "register-name" && argc == 7) {
    uint64_t size = 0;
    if (!absl::SimpleAtoi(argv[6], &size)) return 2;
    WirePeer peer(argv[2], argv[3], argv[4]);
    return Register(peer, argv[3], argv[4], kvtier::security::RegisterShmReq(argv[5], size));
  }
  std::fprintf(stderr, "buffer_peer: bad arguments (see --help)\n");
  return 2;
}
