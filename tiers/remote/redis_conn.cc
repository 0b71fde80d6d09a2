// The hiredis calls behind Connection: its context keeps an error flag after
// the first I/O failure, so every failure here marks the connection broken.
#include "tiers/remote/redis_conn.h"

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tiers/remote/cluster_map.h"

namespace kvtier::tiers::remote {
namespace {

absl::Status Authenticate(Connection& conn, const ConnectOptions& options) {
  if (options.password.empty()) return absl::OkStatus();
  std::vector<absl::string_view> argv = {"AUTH"};
  if (!options.user.empty()) argv.push_back(options.user);
  argv.push_back(options.password);
  auto reply = conn.Command(argv);
  if (!reply.ok()) return reply.status();
  if ((*reply)->type == REDIS_REPLY_ERROR) {
    return absl::PermissionDeniedError(
        absl::StrCat("AUTH at ", conn.endpoint(),
                     " refused: ", absl::string_view((*reply)->str, (*reply)->len)));
  }
  return absl::OkStatus();
}

// hiredis writes with write(2), which raises SIGPIPE on a connection the
// peer reset (a killed node), and a library must not kill its host. Blocks
// SIGPIPE on this thread for the scope and swallows one raised meanwhile
// (unless one was already pending before: that one is not ours).
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeGuard() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero = {0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) == -1 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

}  // namespace

void ReplyDeleter::operator()(redisReply* r) const { freeReplyObject(r); }

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(absl::string_view endpoint,
                                                             const ConnectOptions& options) {
  auto ep = ParseEndpoint(endpoint);
  if (!ep.ok()) return ep.status();
  redisContext* ctx =
      redisConnectWithTimeout(ep->host.c_str(), ep->port, absl::ToTimeval(options.connect_timeout));
  if (ctx == nullptr) return absl::ResourceExhaustedError("hiredis: out of memory");
  if (ctx->err != 0) {
    absl::Status s =
        absl::UnavailableError(absl::StrCat("connect to ", endpoint, ": ", ctx->errstr));
    redisFree(ctx);
    return s;
  }
  std::unique_ptr<Connection> conn(new Connection(std::string(endpoint), ctx));
  if (redisSetTimeout(ctx, absl::ToTimeval(options.command_timeout)) != REDIS_OK) {
    return conn->Fail("set socket timeouts");
  }
  int one = 1;
  setsockopt(ctx->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // Keep the reply buffer between replies (hiredis's documented maxbuf = 0):
  // by default it frees a buffer grown past 16 KiB once drained, so every
  // 1 MiB page would grow it again from scratch.
  ctx->reader->maxbuf = 0;
  redisEnableKeepAlive(ctx);
  absl::Status auth = Authenticate(*conn, options);
  if (!auth.ok()) return auth;
  return conn;
}

Connection::~Connection() { redisFree(ctx_); }

absl::Status Connection::Fail(absl::string_view what) {
  if (error_.ok()) {
    const char* why = ctx_->err != 0 ? ctx_->errstr : "unknown error";
    error_ = absl::UnavailableError(absl::StrCat(endpoint_, ": ", what, ": ", why));
  }
  return error_;
}

absl::Status Connection::Fail(absl::string_view what, absl::string_view why) {
  if (error_.ok()) error_ = absl::UnavailableError(absl::StrCat(endpoint_, ": ", what, ": ", why));
  return error_;
}

void Connection::Append(absl::Span<const absl::string_view> argv) {
  if (broken()) return;
  // Key commands have at most 5 arguments: keep them off the heap.
  absl::InlinedVector<const char*, 8> ptrs(argv.size());
  absl::InlinedVector<size_t, 8> lens(argv.size());
  for (size_t i = 0; i < argv.size(); ++i) {
    ptrs[i] = argv[i].data();
    lens[i] = argv[i].size();
  }
  if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), ptrs.data(), lens.data()) !=
      REDIS_OK) {
    (void)Fail("append command");
  }
}

absl::Status Connection::Flush() {
  if (broken()) return error_;
  SigpipeGuard no_sigpipe;
  int done = 0;
  while (!done) {
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) return Fail("write");
  }
  return absl::OkStatus();
}

absl::StatusOr<ReplyPtr> Connection::Read() {
  if (broken()) return error_;
  void* reply = nullptr;
  if (redisGetReply(ctx_, &reply) != REDIS_OK || reply == nullptr) return Fail("read");
  return ReplyPtr(static_cast<redisReply*>(reply));
}

absl::StatusOr<ReplyPtr> Connection::ReadLarge(size_t direct_min, absl::string_view* bulk) {
  if (broken()) return error_;
  redisReader* r = ctx_->reader;
  // Only between replies: hiredis has no reply half parsed (ridx -1).
  if (r->ridx != -1) return Read();
  // The reply's first line, "$<length>\r\n", from what hiredis has buffered
  // or reads now (it may read past the line: those bytes are copied below).
  size_t line = 0;
  for (;;) {
    const char* p = r->buf + r->pos;
    const size_t n = r->len - r->pos;
    if (n > 0 && p[0] != '$') return Read();
    const void* cr = n > 0 ? std::memchr(p, '\r', n) : nullptr;
    if (cr != nullptr && static_cast<size_t>(static_cast<const char*>(cr) - p) + 1 < n) {
      line = static_cast<size_t>(static_cast<const char*>(cr) - p);
      break;
    }
    if (n > 24) return Read();  // no length line is that long: hiredis's error
    if (redisBufferRead(ctx_) != REDIS_OK) return Fail("read");
  }
  const char* p = r->buf + r->pos;
  int64_t length = 0;
  if (p[line + 1] != '\n' || !absl::SimpleAtoi(absl::string_view(p + 1, line - 1), &length) ||
      length < 0 || static_cast<uint64_t>(length) < direct_min)
    return Read();  // nil, short, or malformed: hiredis parses (and judges) it
  const size_t want = static_cast<size_t>(length) + 2;  // the string and its CRLF
  if (direct_cap_ < want) {
    direct_.reset(new char[want]);
    direct_cap_ = want;
  }
  const size_t buffered = r->len - r->pos - (line + 2);
  size_t got = std::min(want, buffered);
  std::memcpy(direct_.get(), p + line + 2, got);
  // Consume what was taken, as hiredis does after a parse (sdsrange, whose
  // header declares it without C linkage under C++: moved by hand here).
  r->pos += line + 2 + got;
  const size_t left = r->len - r->pos;
  std::memmove(r->buf, r->buf + r->pos, left);
  r->buf[left] = '\0';
  sdssetlen(r->buf, left);
  r->pos = 0;
  r->len = left;
  // The rest straight off the socket (blocking, bounded by the command
  // timeout hiredis set as SO_RCVTIMEO).
  while (got < want) {
    const ssize_t k = recv(ctx_->fd, direct_.get() + got, want - got, 0);
    if (k > 0) {
      got += static_cast<size_t>(k);
    } else if (k == 0) {
      return Fail("read", "server closed the connection");
    } else if (errno != EINTR) {
      return Fail("read", errno == EAGAIN || errno == EWOULDBLOCK ? "timed out" : strerror(errno));
    }
  }
  if (direct_[want - 2] != '\r' || direct_[want - 1] != '\n')
    return Fail("read", "bulk reply not ended by CRLF");
  *bulk = absl::string_view(direct_.get(), static_cast<size_t>(length));
  return ReplyPtr();
}

absl::StatusOr<ReplyPtr> Connection::Command(absl::Span<const absl::string_view> argv) {
  Append(argv);
  absl::Status s = Flush();
  if (!s.ok()) return s;
  return Read();
}

}  // namespace kvtier::tiers::remote
