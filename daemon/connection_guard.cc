// ConnectionGuard (connection_guard.h): one thread polling two sockets, the
// ZAP endpoint (a REP socket: libzmq asks, the guard answers) and the
// router's monitor (ACCEPTED / DISCONNECTED with the connection's fd).
// Monitor events are taken before ZAP requests in each round, so a
// connection is known (accepted) before its handshake asks about it.
#include "daemon/connection_guard.h"

#include <malloc.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "daemon/session.h"
#include "spdlog/spdlog.h"

namespace kvtier::daemon {
namespace {

constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";
// How long after an unauthenticated connection closes the guard keeps
// trimming, once a second (Loop).
constexpr absl::Duration kTrimWindow = absl::Seconds(5);

// A connection's peer as the guard counts it: "uid N" over ipc, "tcp ADDR"
// over tcp. pid: the ipc peer's (0 for tcp).
struct PeerId {
  std::string key;
  int64_t pid = 0;
  std::string Label() const {
    return pid != 0 ? absl::StrCat(key, " (pid ", pid, ")") : key;
  }
};

PeerId PeerOfFd(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && len == sizeof(cred) &&
      cred.pid != 0)
    return {absl::StrCat("uid ", cred.uid), cred.pid};
  sockaddr_storage addr{};
  socklen_t alen = sizeof(addr);
  char text[INET6_ADDRSTRLEN] = "?";
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &alen) == 0) {
    if (addr.ss_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, text, sizeof(text));
    else if (addr.ss_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, text, sizeof(text));
  }
  return {absl::StrCat("tcp ", text), 0};
}

// The same peer from the address libzmq puts in a ZAP request:
// "localhost:uid:gid:pid" over ipc (SO_PEERCRED), the IP address over tcp.
PeerId PeerOfZapAddress(absl::string_view address) {
  if (!address.empty() && address.front() != '[' && std::count(address.begin(), address.end(), ':') == 3) {
    std::vector<absl::string_view> parts = absl::StrSplit(address, ':');
    int64_t pid = 0;
    uint32_t uid = 0;
    if (absl::SimpleAtoi(parts[1], &uid) && absl::SimpleAtoi(parts[3], &pid))
      return {absl::StrCat("uid ", uid), pid};
  }
  return {absl::StrCat("tcp ", address), 0};
}

std::string Z85(absl::string_view key) {
  char out[41] = {};
  if (key.size() != 32 ||
      zmq_z85_encode(out, reinterpret_cast<const uint8_t*>(key.data()), key.size()) == nullptr)
    return "";
  return out;
}

}  // namespace

absl::StatusOr<std::string> LoadCurveSecretKey(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("--curve_secret_key_file ", path));
  struct stat st {};
  std::string text(128, '\0');
  ssize_t n = -1;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077) == 0)
    n = read(fd, text.data(), text.size());
  close(fd);
  if (!S_ISREG(st.st_mode) || (st.st_mode & 077) != 0)
    return absl::PermissionDeniedError(absl::StrCat(
        "--curve_secret_key_file ", path,
        ": must be a regular file that only its owner can read (chmod 600)"));
  if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat("read ", path));
  text.resize(static_cast<size_t>(n));
  const std::string key(absl::StripAsciiWhitespace(text));
  uint8_t raw[32];
  if (key.size() != 40 || zmq_z85_decode(raw, key.c_str()) == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(
        "--curve_secret_key_file ", path, ": not a Z85 CURVE secret key (40 characters)"));
  return key;
}

struct ConnectionGuard::Impl {
  Impl(zmq::context_t& ctx, const TenantRegistry* t, ConnectionGuardConfig c)
      : tenants(t), config(std::move(c)), zap(ctx, zmq::socket_type::rep),
        monitor(ctx, zmq::socket_type::pair) {}

  struct Conn {
    PeerId peer;
    bool authenticated = false;
    bool refused = false;  // shut down at accept; not counted
    absl::Time accepted;
  };

  void Loop();
  void OnMonitorEvent();
  void OnZapRequest();
  void Accepted(int fd);
  void Disconnected(int fd);
  void MarkAuthenticated(const PeerId& peer);
  void DropUnauthenticated(const Conn& c);
  // A refusal, logged at most ~10 times a second (a flood must not flood the
  // log), with how many were not logged since.
  void LogRefusal(const std::string& text);

  const TenantRegistry* const tenants;
  const ConnectionGuardConfig config;
  zmq::socket_t zap, monitor;
  std::string monitor_endpoint;
  std::atomic<bool> stop{false};
  std::thread thread;

  // Guard thread only.
  absl::flat_hash_map<int, Conn> conns;
  absl::flat_hash_map<std::string, size_t> unauth_by_peer;
  size_t unauth_total = 0;
  // ZAP successes seen before their connection's ACCEPTED (not expected:
  // libzmq emits ACCEPTED first; kept so counts never go wrong).
  absl::flat_hash_map<std::string, size_t> early_auth;
  // Whether an unauthenticated connection closed since the last trim.
  bool trim_due = false;
  absl::Time last_trim = absl::InfinitePast();
  absl::Time last_close = absl::InfinitePast();  // of an unauthenticated connection
  absl::Time log_window = absl::InfinitePast();
  int logged_in_window = 0;
  uint64_t suppressed = 0;

};

absl::StatusOr<std::unique_ptr<ConnectionGuard>> ConnectionGuard::Start(
    zmq::context_t& ctx, zmq::socket_t& router, const TenantRegistry* tenants,
    ConnectionGuardConfig config) {
  static std::atomic<int> seq{0};
  auto impl = std::make_unique<Impl>(ctx, tenants, std::move(config));
  try {
    impl->zap.set(zmq::sockopt::linger, 0);
    impl->zap.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot bind the ZAP handler (", kZapEndpoint, "): ", e.what()));
  }
  impl->monitor_endpoint = absl::StrCat("inproc://kvtier-guard-monitor-", seq++);
  if (zmq_socket_monitor(router.handle(), impl->monitor_endpoint.c_str(),
                         ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0)
    return absl::InternalError(absl::StrCat("zmq_socket_monitor: ", zmq_strerror(zmq_errno())));
  impl->monitor.set(zmq::sockopt::linger, 0);
  impl->monitor.connect(impl->monitor_endpoint);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Loop(); });
  return std::unique_ptr<ConnectionGuard>(new ConnectionGuard(std::move(impl)));
}

ConnectionGuard::ConnectionGuard(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ConnectionGuard::~ConnectionGuard() {
  impl_->stop.store(true);
  impl_->thread.join();
}

void ConnectionGuard::Impl::Loop() {
  zmq::pollitem_t items[] = {{monitor.handle(), 0, ZMQ_POLLIN, 0},
                             {zap.handle(), 0, ZMQ_POLLIN, 0}};
  while (!stop.load()) {
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(100));
      while (monitor.get(zmq::sockopt::events) & ZMQ_POLLIN) OnMonitorEvent();
      while (zap.get(zmq::sockopt::events) & ZMQ_POLLIN) OnZapRequest();
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) break;
      spdlog::warn("connection guard: {}", e.what());
    }
    // Give back what unauthenticated connections made the allocator keep
    // (libzmq's handshake buffers below the mmap threshold, now free
    // chunks inside a heap; daemon/allocator.h): at most once a second,
    // and only once none closed for 250 ms, since libzmq frees a
    // connection's buffers after it reports the connection closed, on its
    // I/O thread, later still under load; so the guard keeps trimming once
    // a second for kTrimWindow. A frame of kMmapThreshold or more needs no
    // trim: free() unmaps it.
    const absl::Time now = absl::Now();
    if ((trim_due || now - last_close < kTrimWindow) && now - last_trim >= absl::Seconds(1) &&
        now - last_close >= absl::Milliseconds(250)) {
      malloc_trim(0);
      trim_due = false;
      last_trim = now;
    }
  }
  monitor.close();
  zap.close();
}

void ConnectionGuard::Impl::OnMonitorEvent() {
  zmq::message_t event, endpoint;
  if (!monitor.recv(event, zmq::recv_flags::dontwait)) return;
  if (event.more()) (void)monitor.recv(endpoint, zmq::recv_flags::dontwait);
  if (event.size() < 6) return;
  uint16_t id = 0;
  uint32_t value = 0;
  std::memcpy(&id, event.data(), 2);
  std::memcpy(&value, static_cast<const char*>(event.data()) + 2, 4);
  switch (id) {
    case ZMQ_EVENT_ACCEPTED: Accepted(static_cast<int>(value)); break;
    case ZMQ_EVENT_DISCONNECTED: Disconnected(static_cast<int>(value)); break;
    default: break;
  }
}

void ConnectionGuard::Impl::Accepted(int fd) {
  Conn c;
  c.peer = PeerOfFd(fd);
  c.accepted = absl::Now();
  if (auto it = early_auth.find(c.peer.key); it != early_auth.end()) {
    c.authenticated = true;
    if (--it->second == 0) early_auth.erase(it);
    conns[fd] = std::move(c);
    return;
  }
  auto known = unauth_by_peer.find(c.peer.key);
  const size_t mine = known == unauth_by_peer.end() ? 0 : known->second;
  if (mine >= static_cast<size_t>(config.max_unauthenticated_per_peer) ||
      unauth_total >= static_cast<size_t>(config.max_unauthenticated)) {
    // libzmq owns the fd: shut it down (never close it), and libzmq closes
    // the connection as it sees the end of the stream. The event comes
    // after the accept, so in the rare case that libzmq has closed this fd
    // already and accepted another connection on the same number, that one
    // is shut instead: a libzmq client reconnects 100 ms later, and the
    // count stays right (its own ACCEPTED event follows).
    shutdown(fd, SHUT_RDWR);
    LogRefusal(absl::StrCat(
        "refused a connection from ", c.peer.Label(), ": ", mine,
        " of its connections and ", unauth_total,
        " in all have not authenticated yet (limits: ", config.max_unauthenticated_per_peer,
        " per peer, ", config.max_unauthenticated, " in all)"));
    c.refused = true;
    conns[fd] = std::move(c);
    return;
  }
  ++unauth_by_peer[c.peer.key];
  ++unauth_total;
  conns[fd] = std::move(c);
}

void ConnectionGuard::Impl::DropUnauthenticated(const Conn& c) {
  auto it = unauth_by_peer.find(c.peer.key);
  if (it != unauth_by_peer.end() && --it->second == 0) unauth_by_peer.erase(it);
  --unauth_total;
}

void ConnectionGuard::Impl::Disconnected(int fd) {
  auto it = conns.find(fd);
  if (it == conns.end()) return;
  if (!it->second.authenticated) {
    const Conn& c = it->second;
    if (!c.refused) {
      DropUnauthenticated(c);
      LogRefusal(absl::StrCat(
          "closed a connection from ", c.peer.Label(), " after ",
          absl::ToInt64Milliseconds(absl::Now() - c.accepted),
          " ms without authentication (no or wrong credentials, a client older than this "
          "daemon, or --handshake_timeout_ms)"));
    }
    trim_due = true;
    last_close = absl::Now();
  }
  conns.erase(it);
}

void ConnectionGuard::Impl::MarkAuthenticated(const PeerId& peer) {
  // The peer's oldest unauthenticated connection (of its process, over ipc):
  // which of one process's connections it was does not change any count.
  Conn* best = nullptr;
  for (auto& [fd, c] : conns) {
    if (c.authenticated || c.refused || c.peer.key != peer.key) continue;
    if (peer.pid != 0 && c.peer.pid != peer.pid) continue;
    if (best == nullptr || c.accepted < best->accepted) best = &c;
  }
  if (best == nullptr) {
    ++early_auth[peer.key];
    return;
  }
  best->authenticated = true;
  DropUnauthenticated(*best);
}

void ConnectionGuard::Impl::OnZapRequest() {
  std::vector<zmq::message_t> frames;
  for (bool more = true; more;) {
    zmq::message_t m;
    if (!zap.recv(m, zmq::recv_flags::dontwait)) break;
    more = m.more();
    frames.push_back(std::move(m));
  }
  auto text = [&](size_t i) { return i < frames.size() ? frames[i].to_string() : std::string(); };
  // RFC 27: version, request id, domain, address, routing id, mechanism,
  // credentials...
  const std::string request_id = text(1), domain = text(2), address = text(3),
                    mechanism = text(5);
  const PeerId peer = PeerOfZapAddress(address);
  std::string user, refusal;
  if (text(0) != "1.0" || frames.size() < 6) {
    refusal = "a malformed ZAP request";
  } else if (domain != kZapDomain) {
    refusal = absl::StrCat("ZAP domain '", LogSafe(domain), "'");
  } else if (mechanism == "PLAIN" && frames.size() >= 8) {
    const std::string name = text(6);
    if (tenants->Authenticate(name, text(7)).ok()) user = name;
    else refusal = absl::StrCat("tenant '", LogSafe(name), "' with a wrong token, or no such tenant");
  } else if (mechanism == "CURVE" && frames.size() >= 7) {
    const std::string key = Z85(text(6));
    auto it = config.curve_tenant_by_key.find(key);
    if (it != config.curve_tenant_by_key.end()) user = it->second;
    else refusal = absl::StrCat("CURVE key ", key, ", which no tenant has (curve_public_key)");
  } else {
    refusal = absl::StrCat("mechanism ", LogSafe(mechanism));
  }
  if (refusal.empty()) {
    MarkAuthenticated(peer);
  } else {
    LogRefusal(absl::StrCat("refused the handshake of ", peer.Label(), ": ", refusal));
  }
  const bool ok = refusal.empty();
  const std::string status = ok ? "200" : "400";
  const std::string status_text = ok ? "OK" : "authentication failed";
  zap.send(zmq::buffer(std::string("1.0")), zmq::send_flags::sndmore);
  zap.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
  zap.send(zmq::buffer(status), zmq::send_flags::sndmore);
  zap.send(zmq::buffer(status_text), zmq::send_flags::sndmore);
  zap.send(zmq::buffer(user), zmq::send_flags::sndmore);
  zap.send(zmq::message_t(), zmq::send_flags::none);  // no metadata
}

void ConnectionGuard::Impl::LogRefusal(const std::string& text) {
  const absl::Time now = absl::Now();
  if (now - log_window >= absl::Seconds(1)) {
    if (suppressed > 0)
      spdlog::warn("connection guard: {} more refusals in the last second (not logged)", suppressed);
    log_window = now;
    logged_in_window = 0;
    suppressed = 0;
  }
  if (logged_in_window++ < 10) spdlog::warn("connection guard: {}", text);
  else ++suppressed;
}

}  // namespace kvtier::daemon
