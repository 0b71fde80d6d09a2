// tcp endpoint parsing and resolution (see endpoint.h).
#include "daemon/endpoint.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvtier::daemon {
namespace {

struct Address {
  std::string text;  // numeric form
  bool ipv6 = false;
  bool loopback = false;
};

Address FromSockaddr(const sockaddr* sa) {
  Address a;
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    a.loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  } else {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    a.ipv6 = true;
    a.loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) ||
                 (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127);
  }
  a.text = buf;
  return a;
}

// The addresses of a network interface called `name` (libzmq binds an
// interface name to its address).
std::vector<Address> InterfaceAddresses(const std::string& name) {
  std::vector<Address> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next)
    if (i->ifa_addr != nullptr && name == i->ifa_name &&
        (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6))
      out.push_back(FromSockaddr(i->ifa_addr));
  freeifaddrs(list);
  return out;
}

std::vector<Address> Resolve(const std::string& host, bool literal_only) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = literal_only ? AI_NUMERICHOST : 0;
  addrinfo* res = nullptr;
  std::vector<Address> out;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  for (addrinfo* r = res; r != nullptr; r = r->ai_next)
    if (r->ai_family == AF_INET || r->ai_family == AF_INET6) out.push_back(FromSockaddr(r->ai_addr));
  freeaddrinfo(res);
  return out;
}

absl::Status Bad(const std::string& endpoint, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--tcp '", endpoint, "': ", why));
}

}  // namespace

absl::StatusOr<TcpEndpoint> ResolveTcpEndpoint(const std::string& endpoint,
                                               bool allow_non_loopback) {
  if (!absl::StartsWith(endpoint, "tcp://"))
    return Bad(endpoint, "must look like tcp://127.0.0.1:PORT");
  const std::string rest = endpoint.substr(6);
  if (rest.find(';') != std::string::npos)
    return Bad(endpoint, "the 'source;address' form is for connecting; give one address to bind");
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) return Bad(endpoint, "no HOST:PORT");
  std::string host = rest.substr(0, colon);
  const std::string port = rest.substr(colon + 1);
  uint32_t port_number = 0;
  if (port != "*" && (!absl::SimpleAtoi(port, &port_number) || port_number > 65535))
    return Bad(endpoint, absl::StrCat("port '", port, "' is not a number from 0 to 65535 or '*'"));
  bool bracketed = false;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    bracketed = true;
  }
  if (host.empty()) return Bad(endpoint, "no host");
  if (host == "*") host = "0.0.0.0";  // libzmq's "every interface"
  for (char c : host)
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':' &&
        c != '_')
      return Bad(endpoint, absl::StrCat("host '", host, "' has a character no address or name has"));
  std::vector<Address> addrs = Resolve(host, /*literal_only=*/true);
  if (addrs.empty() && !bracketed) addrs = InterfaceAddresses(host);
  if (addrs.empty() && !bracketed) addrs = Resolve(host, /*literal_only=*/false);
  if (addrs.empty())
    return Bad(endpoint, absl::StrCat("'", host, "' is no address, interface or resolvable host"));
  for (const Address& a : addrs) {
    if (a.loopback || allow_non_loopback) continue;
    return Bad(endpoint, absl::StrCat("'", host, "' stands for ", a.text,
                                      ", not a loopback address (pass --allow_non_loopback_tcp "
                                      "to expose page data beyond this host)"));
  }
  // Bind the first address: exactly one, numeric, validated above.
  const Address& a = addrs.front();
  TcpEndpoint out;
  out.ipv6 = a.ipv6;
  out.loopback = a.loopback;
  out.bind = a.ipv6 ? absl::StrCat("tcp://[", a.text, "]:", port) : absl::StrCat("tcp://", a.text, ":", port);
  return out;
}

}  // namespace kvtier::daemon
