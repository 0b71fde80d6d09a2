// Which ZeroMQ peers are still connected. libzmq 4.3's stable API has no
// disconnect notification for ROUTER peers (ZMQ_ROUTER_NOTIFY is a draft
// option, not built into Debian's libzmq), so the frontend remembers the
// socket each peer's messages came in on (ZMQ_SRCFD) and its identity
// (device + inode: an fd number is reused, a socket inode is not), and a
// sweep finds peers whose socket is gone. Frontend thread only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace kvtier::daemon {

// A connection's socket, by device and inode (an fd number is reused, a
// socket inode is not while the socket lives). known: false when libzmq
// could not tell the fd (e.g. inproc).
struct ConnectionId {
  uint64_t dev = 0, ino = 0;
  bool known = false;
  bool operator==(const ConnectionId& o) const {
    return dev == o.dev && ino == o.ino && known == o.known;
  }
};
ConnectionId ConnectionOf(int fd);
bool Identity(int fd, dev_t* dev, ino_t* ino);

class PeerTable {
 public:
  // A message from `routing_id` arrived on socket `fd` (-1: unknown, e.g.
  // inproc; such peers are never reported closed).
  void Note(absl::string_view routing_id, int fd);
  void Forget(absl::string_view routing_id) { peers_.erase(routing_id); }
  // Peers whose connection has closed since they were noted; forgets them.
  std::vector<std::string> TakeClosed();
  size_t size() const { return peers_.size(); }

 private:
  struct Conn {
    int fd = -1;
    dev_t dev = 0;
    ino_t ino = 0;
  };
  absl::flat_hash_map<std::string, Conn> peers_;
};

}  // namespace kvtier::daemon
