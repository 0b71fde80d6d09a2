// One blocking hiredis connection to one node, with connect and command
// timeouts and optional AUTH. Pipelining is Append (buffer) + Flush (write
// everything) + Read (one reply per appended command, in order).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

struct redisContext;  // hiredis
struct redisReply;

namespace kvtier::tiers::remote {

struct ReplyDeleter {
  void operator()(redisReply* r) const;
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

struct ConnectOptions {
  absl::Duration connect_timeout = absl::Milliseconds(500);
  absl::Duration command_timeout = absl::Seconds(2);  // per socket read/write
  std::string user;                                   // ACL user; empty: "default"
  std::string password;                               // empty: no AUTH
};

// Not thread-safe: the owner serializes calls. Once an I/O error happened the
// connection is broken() for good; every later call fails Unavailable and the
// owner drops it and opens a new one.
class Connection {
 public:
  // Connects (TCP, TCP_NODELAY, keepalive) and authenticates. Unavailable when
  // the node cannot be reached in time; PermissionDenied when AUTH is refused.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(absl::string_view endpoint,
                                                          const ConnectOptions& options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Buffers one command; its arguments are binary-safe (argv + lengths) and
  // copied, so they need not outlive the call.
  void Append(absl::Span<const absl::string_view> argv);
  // Writes every buffered command (blocking, bounded by command_timeout).
  absl::Status Flush();
  // The next reply, in Append order. A Redis error reply is a reply, not a
  // failed status; a failed status means the connection broke.
  absl::StatusOr<ReplyPtr> Read();
  // Read, except that a bulk string reply of at least `direct_min` bytes is
  // read from the socket straight into this connection's own buffer: the
  // reply is then null and `*bulk` views the string, valid until the next
  // call on this connection. hiredis reads 16 KiB at a time and copies each
  // reply twice (into its buffer, then into the reply object); for 1 MiB
  // pages those copies and 64 reads per page cost as much as the network.
  // Any other reply (nil, error, short string) is Read's.
  absl::StatusOr<ReplyPtr> ReadLarge(size_t direct_min, absl::string_view* bulk);
  // Append + Flush + Read of one command.
  absl::StatusOr<ReplyPtr> Command(absl::Span<const absl::string_view> argv);

  bool broken() const { return !error_.ok(); }
  const std::string& endpoint() const { return endpoint_; }

 private:
  Connection(std::string endpoint, redisContext* ctx) : endpoint_(std::move(endpoint)), ctx_(ctx) {}
  absl::Status Fail(absl::string_view what);
  absl::Status Fail(absl::string_view what, absl::string_view why);

  std::string endpoint_;
  redisContext* ctx_;
  absl::Status error_;
  std::unique_ptr<char[]> direct_;  // ReadLarge's buffer, grown as needed
  size_t direct_cap_ = 0;
};

}  // namespace kvtier::tiers::remote
