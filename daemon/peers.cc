// Peer liveness by socket identity (see peers.h).
#include "daemon/peers.h"

#include <sys/stat.h>

namespace kvtier::daemon {

bool Identity(int fd, dev_t* dev, ino_t* ino) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  *dev = st.st_dev;
  *ino = st.st_ino;
  return true;
}

ConnectionId ConnectionOf(int fd) {
  ConnectionId c;
  dev_t dev;
  ino_t ino;
  if (Identity(fd, &dev, &ino)) c = {static_cast<uint64_t>(dev), static_cast<uint64_t>(ino), true};
  return c;
}

void PeerTable::Note(absl::string_view routing_id, int fd) {
  auto it = peers_.find(routing_id);
  if (it != peers_.end() && it->second.fd == fd) return;  // the common case: no syscall
  Conn c;
  c.fd = fd;
  if (!Identity(fd, &c.dev, &c.ino)) c.fd = -1;
  peers_[routing_id] = c;
}

std::vector<std::string> PeerTable::TakeClosed() {
  std::vector<std::string> closed;
  for (const auto& [id, c] : peers_) {
    if (c.fd < 0) continue;
    dev_t dev;
    ino_t ino;
    if (!Identity(c.fd, &dev, &ino) || dev != c.dev || ino != c.ino) closed.push_back(id);
  }
  for (const std::string& id : closed) peers_.erase(id);
  return closed;
}

}  // namespace kvtier::daemon
