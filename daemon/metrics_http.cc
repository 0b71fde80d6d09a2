// The metrics HTTP server: request classification (pure, unit-tested) and
// the poll loop. Connections are non-blocking; a slow or silent client costs
// one slot until its io_timeout, never the thread.
#include "daemon/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kvtier/status_macros.h"
#include "spdlog/spdlog.h"

namespace kvtier::daemon {
namespace {

HttpVerdict Verdict(int status, absl::string_view reason, absl::string_view problem = "") {
  HttpVerdict v;
  v.status = status;
  v.reason = std::string(reason);
  v.problem = std::string(problem);
  return v;
}

bool IsToken(absl::string_view s) {
  if (s.empty() || s.size() > 16) return false;
  for (char c : s)
    if (c < 'A' || c > 'Z') return false;
  return true;
}

bool PrintableHead(absl::string_view head) {
  for (unsigned char c : head)
    if ((c < 0x20 && c != '\r' && c != '\n' && c != '\t') || c == 0x7f) return false;
  return true;
}

struct SocketAddress {
  int family = AF_INET;
  sockaddr_storage storage{};
  socklen_t length = 0;
};

absl::StatusOr<SocketAddress> ParseAddress(absl::string_view address, int port) {
  const std::string text(address);
  SocketAddress a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
  if (inet_pton(AF_INET, text.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = a.family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    a.length = sizeof(sockaddr_in);
    return a;
  }
  if (inet_pton(AF_INET6, text.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = a.family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    a.length = sizeof(sockaddr_in6);
    return a;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--metrics_address='", address,
      "' is not an IPv4 or IPv6 address (a literal such as 127.0.0.1, ::1 or 10.0.0.5; no host names)"));
}

const char* kTextType = "text/plain; charset=utf-8";
const char* kMetricsType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace

absl::StatusOr<bool> IsLoopbackAddress(absl::string_view address) {
  ASSIGN_OR_RETURN(const SocketAddress a, ParseAddress(address, 0));
  if (a.family == AF_INET) {
    const uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in*>(&a.storage)->sin_addr.s_addr);
    return (ip >> 24) == 127;
  }
  const in6_addr& ip = reinterpret_cast<const sockaddr_in6*>(&a.storage)->sin6_addr;
  if (IN6_IS_ADDR_LOOPBACK(&ip)) return true;
  return IN6_IS_ADDR_V4MAPPED(&ip) && ip.s6_addr[12] == 127;
}

std::string HostPort(absl::string_view address, int port) {
  if (absl::StrContains(address, ':')) return absl::StrCat("[", address, "]:", port);
  return absl::StrCat(address, ":", port);
}

HttpVerdict ClassifyRequest(absl::string_view head) {
  if (!PrintableHead(head)) return Verdict(400, "Bad Request", "control bytes in the request head");
  absl::string_view line = head.substr(0, head.find('\n'));
  if (absl::EndsWith(line, "\r")) line.remove_suffix(1);
  std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || parts[1].empty())
    return Verdict(400, "Bad Request", "the request line is not 'METHOD /path HTTP/1.1'");
  if (!IsToken(parts[0])) return Verdict(400, "Bad Request", "malformed method");
  if (!absl::StartsWith(parts[2], "HTTP/")) return Verdict(400, "Bad Request", "not an HTTP request");
  if (parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0")
    return Verdict(505, "HTTP Version Not Supported", "only HTTP/1.0 and HTTP/1.1 are served");
  if (parts[1][0] != '/') return Verdict(400, "Bad Request", "the target must be a path");
  if (parts[0] != "GET" && parts[0] != "HEAD")
    return Verdict(405, "Method Not Allowed", "only GET and HEAD are served");
  absl::string_view path = parts[1].substr(0, parts[1].find('?'));
  if (path != "/metrics") return Verdict(404, "Not Found", "the only path is /metrics");
  HttpVerdict ok = Verdict(200, "OK");
  ok.head_only = parts[0] == "HEAD";
  return ok;
}

std::string HttpResponse(const HttpVerdict& v, absl::string_view body, absl::string_view type) {
  std::string text = v.status == 200 ? std::string(body)
                                     : absl::StrCat(v.status, " ", v.reason, ": ", v.problem, "\n");
  std::string out = absl::StrCat("HTTP/1.1 ", v.status, " ", v.reason, "\r\nContent-Type: ",
                                 v.status == 200 ? type : kTextType,
                                 "\r\nContent-Length: ", text.size(), "\r\nConnection: close\r\n");
  if (v.status == 405) out += "Allow: GET, HEAD\r\n";
  out += "\r\n";
  if (!v.head_only) out += text;
  return out;
}

struct MetricsHttpServer::Conn {
  int fd = -1;
  std::string in;
  std::string out;
  size_t sent = 0;
  // Reading the head, writing the response, then discarding what the client
  // still sends until it closes: closing with unread bytes would reset the
  // connection and could destroy the response in flight.
  enum class State { kReading, kWriting, kDraining } state = State::kReading;
  absl::Time deadline;
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricsHttpOptions& options, Render render) {
  if (options.port < 0 || options.port > 65535)
    return absl::InvalidArgumentError(absl::StrCat("metrics port ", options.port, " is not in [0, 65535]"));
  ASSIGN_OR_RETURN(const SocketAddress where, ParseAddress(options.address, options.port));
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer(options, std::move(render)));
  s->listen_fd_ = socket(where.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s->listen_fd_ < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  int one = 1;
  setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  // An IPv6 address means that address only, not the IPv4 side of a
  // dual-stack socket as well: the operator named one exposure.
  if (where.family == AF_INET6) setsockopt(s->listen_fd_, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  if (bind(s->listen_fd_, reinterpret_cast<const sockaddr*>(&where.storage), where.length) != 0 ||
      listen(s->listen_fd_, 64) != 0)
    return absl::FailedPreconditionError(absl::StrCat(
        "--metrics_address/--metrics_port: cannot listen on ", HostPort(options.address, options.port),
        ": ", strerror(errno)));
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  s->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  s->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->wake_fd_ < 0) return absl::InternalError(absl::StrCat("eventfd: ", strerror(errno)));
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void MetricsHttpServer::AcceptAll(std::vector<Conn>& conns) {
  while (conns.size() < static_cast<size_t>(options_.max_connections)) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a connection reset before we got to it
    Conn c;
    c.fd = fd;
    c.deadline = absl::Now() + options_.io_timeout;
    conns.push_back(std::move(c));
  }
}

bool MetricsHttpServer::OnReadable(Conn& c) {
  char buf[4096];
  for (;;) {
    ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n == 0) return false;  // closed (before a full head: nobody to answer)
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    if (c.state == Conn::State::kDraining) continue;
    c.in.append(buf, static_cast<size_t>(n));
    size_t end = c.in.find("\r\n\r\n");
    if (end == std::string::npos) end = c.in.find("\n\n");
    HttpVerdict v;
    if (end != std::string::npos && end <= options_.max_request_bytes) {
      v = ClassifyRequest(absl::string_view(c.in).substr(0, end));
    } else if (c.in.size() > options_.max_request_bytes) {
      v = Verdict(431, "Request Header Fields Too Large",
                  absl::StrCat("request head over ", options_.max_request_bytes, " bytes"));
    } else {
      continue;
    }
    c.out = HttpResponse(v, v.status == 200 ? render_() : "", kMetricsType);
    c.state = Conn::State::kWriting;
    c.in.clear();
    return OnWritable(c);
  }
}

bool MetricsHttpServer::OnWritable(Conn& c) {
  while (c.sent < c.out.size()) {
    ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.sent += static_cast<size_t>(n);
  }
  responses_.fetch_add(1, std::memory_order_relaxed);
  shutdown(c.fd, SHUT_WR);
  c.state = Conn::State::kDraining;
  c.deadline = std::min(c.deadline, absl::Now() + absl::Seconds(1));
  return true;
}

void MetricsHttpServer::Loop() {
  std::vector<Conn> conns;
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    const bool room = conns.size() < static_cast<size_t>(options_.max_connections);
    fds.push_back({room ? listen_fd_ : -1, POLLIN, 0});
    for (const Conn& c : conns)
      fds.push_back({c.fd, short(c.state == Conn::State::kWriting ? POLLOUT : POLLIN), 0});
    if (poll(fds.data(), fds.size(), 200) < 0 && errno != EINTR) {
      spdlog::error("metrics endpoint: poll failed: {}", strerror(errno));
      break;
    }
    if (fds[0].revents & POLLIN) break;
    if (fds[1].revents & POLLIN) AcceptAll(conns);
    const absl::Time now = absl::Now();
    std::vector<Conn> keep;
    for (size_t i = 0; i < conns.size() && i + 2 < fds.size(); ++i) {
      Conn& c = conns[i];
      const short ev = fds[i + 2].revents;
      bool open = now < c.deadline;
      if (open && (ev & (POLLERR | POLLNVAL))) open = false;
      else if (open && (ev & (POLLIN | POLLHUP)) && c.state != Conn::State::kWriting)
        open = OnReadable(c);
      else if (open && (ev & (POLLOUT | POLLHUP)) && c.state == Conn::State::kWriting)
        open = OnWritable(c);
      if (open) keep.push_back(std::move(c));
      else close(c.fd);
    }
    // Connections accepted in this round have no pollfd yet.
    for (size_t i = fds.size() - 2; i < conns.size(); ++i) keep.push_back(std::move(conns[i]));
    conns = std::move(keep);
  }
  for (const Conn& c : conns) close(c.fd);
}

}  // namespace kvtier::daemon
