// conversation_fuzz's oracle (conversation_oracle.h).
#include "tests/fuzz/conversation_oracle.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "tests/fuzz/conversation_harness.h"

namespace kvtier::fuzz {
namespace {

constexpr uint8_t kTagPrefix[5] = {0xF7, 'k', 'v', 'f', 'z'};

// The two unsalted keys (all zeros, all ones) outlive an input: their PUTs
// count for the whole process.
std::map<std::string, int> g_special_attempted[kTenantCount];

bool IsSpecial(const std::string& key) {
  return key == std::string(16, '\0') || key == std::string(16, '\xff');
}

bool HasTag(const uint8_t* p, size_t n) {
  return n >= 8 && std::memcmp(p, kTagPrefix, sizeof(kTagPrefix)) == 0;
}

std::string Hex(const std::string& key) { return absl::BytesToHexString(key); }

}  // namespace

// Only the first 24 bytes say whose page it is; the rest is a fixed pattern
// (cheap to make for large pages).
std::string PageBytes(int tenant, const std::string& key, size_t size, bool stamped) {
  static const std::string kPattern = [] {
    std::string p(4096, '\0');
    for (size_t i = 0; i < p.size(); ++i) p[i] = char(i * 7 + 0x3c);
    return p;
  }();
  std::string page(size, '\0');
  for (size_t at = 0; at < size; at += kPattern.size())
    std::memcpy(page.data() + at, kPattern.data(), std::min(kPattern.size(), size - at));
  if (!stamped) {
    std::memcpy(page.data(), key.data(), std::min<size_t>(16, size));
    if (HasTag(reinterpret_cast<const uint8_t*>(page.data()), size)) page[0] ^= 1;
    return page;
  }
  const uint8_t tag[8] = {0xF7, 'k', 'v', 'f', 'z', uint8_t('0' + tenant), 0x5A, 0xA5};
  std::memcpy(page.data(), tag, std::min<size_t>(8, size));
  if (size > 8) std::memcpy(page.data() + 8, key.data(), std::min<size_t>(16, size - 8));
  return page;
}

void Violation(const std::string& what, const wire::Request* request,
               const wire::Response* reply) {
  std::fprintf(stderr, "conversation_fuzz: VIOLATION: %s\n", what.c_str());
  if (request) std::fprintf(stderr, "  request: %s\n", request->ShortDebugString().c_str());
  if (reply) std::fprintf(stderr, "  reply:   %s\n", reply->ShortDebugString().c_str());
  std::abort();
}

void Oracle::WillPut(int tenant, const std::vector<std::string>& keys, bool via_buffer) {
  for (const std::string& k : std::set<std::string>(keys.begin(), keys.end())) {
    ++(IsSpecial(k) ? g_special_attempted : attempted_)[tenant][k];
    if (via_buffer) via_buffer_[tenant].insert(k);
  }
}

bool Oracle::Attempted(int tenant, const std::string& key) const {
  return (IsSpecial(key) ? g_special_attempted : attempted_)[tenant].count(key) > 0;
}

bool Oracle::FreshPut(int tenant, const std::vector<std::string>& keys) const {
  if (std::set<std::string>(keys.begin(), keys.end()).size() != keys.size()) return false;
  for (const std::string& k : keys) {
    const auto& counts = (IsSpecial(k) ? g_special_attempted : attempted_)[tenant];
    auto it = counts.find(k);
    if (it == counts.end() || it->second != 1) return false;
  }
  return true;
}

void Oracle::ObjectWritten(int object, int tenant) {
  writers_[object] |= 1u << tenant;
  UpdateTaint();
}

void Oracle::PutFrom(int object, int tenant) {
  if (object < 0) {
    tainted_[tenant] = true;  // a buffer the harness cannot name: anything may be there
    return;
  }
  putters_[object] |= 1u << tenant;
  UpdateTaint();
}

// Order-blind on purpose: a PUT and a later write to its object may overlap
// (replies not waited for), so any foreign writer of an object taints.
void Oracle::UpdateTaint() {
  for (int o = 0; o < kPeers; ++o)
    for (int t = 0; t < kTenantCount; ++t)
      if ((putters_[o] >> t & 1) && (writers_[o] & ~(1u << t))) tainted_[t] = true;
}

void Oracle::Check(const Sent& s, const wire::Response& r,
                   const std::vector<zmq::message_t>& payloads) {
  const wire::Request& q = s.request;
  if (r.code() != wire::OK) {
    if (r.message().empty()) Violation("error reply without a message", &q, &r);
    if (!payloads.empty()) Violation("error reply with payload frames", &q, &r);
    // A non-admin EVICT of another namespace is refused before the name is
    // looked up: NOT_FOUND would tell which namespaces exist.
    if (s.kind == kEvict && s.tenant == 1 && r.code() == wire::NOT_FOUND &&
        !q.evict().namespace_().empty() && q.evict().namespace_() != kTenantName[1])
      Violation("EVICT: a non-admin can probe namespace names", &q, &r);
    return;
  }
  if (s.malformed) Violation("accepted a request the protocol says is malformed", &q, &r);
  if (s.session < 0 && s.kind != kHello)
    Violation("accepted a session id that is not a live session of this connection", &q, &r);
  if (s.kind == kHello) {
    const wire::Hello& h = q.hello();
    int t = h.tenant() == kTenantName[0] ? 0 : h.tenant() == kTenantName[1] ? 1 : -1;
    if (t != PeerTenant(s.peer) || r.hello().namespace_() != kTenantName[t])
      Violation("HELLO accepted naming a tenant other than its connection's, or in another "
                "namespace", &q, &r);
    if (r.hello().session_id().size() != 16) Violation("HELLO: session id not 16 bytes", &q, &r);
    return;
  }
  if (s.kind == kGet) return CheckGet(s, r, payloads);
  if (!payloads.empty()) Violation("payload frames on a reply that has none", &q, &r);
  CheckKeysReply(s, r);
  CheckAdmin(s, r);
}

void Oracle::CheckKeysReply(const Sent& s, const wire::Response& r) {
  const wire::Request& q = s.request;
  const int t = s.tenant;
  size_t own = 0;
  for (const std::string& k : s.keys) own += Attempted(t, k);
  switch (s.kind) {
    case kLookup: {
      const auto& l = r.lookup();
      if (l.hits() > s.keys.size() || l.tiers().size() != l.hits())
        Violation("LOOKUP: hits/tiers do not match the keys", &q, &r);
      for (size_t i = 0; i < l.hits(); ++i)
        if (!Attempted(t, s.keys[i]))
          Violation(absl::StrCat("ISOLATION: LOOKUP hit on key ", Hex(s.keys[i]), " that tenant ",
                                 kTenantName[t], " never PUT"), &q, &r);
      return;
    }
    case kDelete:
      if (r.delete_().deleted() > own)
        Violation(absl::StrCat("ISOLATION: DELETE removed ", r.delete_().deleted(),
                               " pages, but only ", own, " keys were the tenant's"), &q, &r);
      return;
    case kPrefetch: {
      const auto& p = r.prefetch();
      if (uint64_t(p.queued()) + p.merged() + p.resident() > own)
        Violation("ISOLATION: PREFETCH found keys the tenant never PUT", &q, &r);
      return;
    }
    case kPut: {
      const auto& p = r.put();
      if (uint64_t(p.stored()) + p.deduplicated() + p.not_stored() != s.keys.size())
        Violation("PUT: stored + deduplicated + not_stored != keys", &q, &r);
      if (p.deduplicated() > 0 && FreshPut(t, s.keys))
        Violation("ISOLATION: PUT deduplicated keys the tenant never PUT", &q, &r);
      return;
    }
    default: return;
  }
}

void Oracle::CheckGet(const Sent& s, const wire::Response& r,
                      const std::vector<zmq::message_t>& payloads) {
  const wire::Request& q = s.request;
  const std::string& tiers = r.get().tiers();
  if (tiers.size() != s.keys.size()) Violation("GET: one tier per key expected", &q, &r);
  size_t hits = 0;
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (tiers[i] == 0) continue;
    if (!Attempted(s.tenant, s.keys[i]))
      Violation(absl::StrCat("ISOLATION: GET hit on key ", Hex(s.keys[i]), " that tenant ",
                             kTenantName[s.tenant], " never PUT"), &q, &r);
    if (q.get().buffer_id() == 0 && hits < payloads.size())
      CheckPage(s, r, s.keys[i], payloads[hits]);
    ++hits;
  }
  if (q.get().buffer_id() == 0 ? payloads.size() != hits : !payloads.empty())
    Violation("GET: payload frames do not match the hits", &q, &r);
}

void Oracle::CheckPage(const Sent& s, const wire::Response& r, const std::string& key,
                       const zmq::message_t& page) {
  const auto* p = static_cast<const uint8_t*>(page.data());
  if (page.size() != s.page_bytes)
    Violation(absl::StrCat("GET: a ", page.size(), "-byte page for a session of ", s.page_bytes,
                           "-byte pages"), &s.request, &r);
  if (!HasTag(p, page.size()) || tainted_[s.tenant] || IsSpecial(key)) return;
  const int owner = p[5] - '0';
  if (owner != s.tenant)
    Violation(absl::StrCat("ISOLATION: tenant ", kTenantName[s.tenant], " got bytes tagged by ",
                           owner == 0 || owner == 1 ? kTenantName[owner] : "?"),
              &s.request, &r);
  if (page.size() >= 24 && !via_buffer_[s.tenant].count(key) &&
      std::memcmp(p + 8, key.data(), 16) != 0)
    Violation(absl::StrCat("GET of key ", Hex(key), " returned the page of key ",
                           Hex(std::string(reinterpret_cast<const char*>(p + 8), 16))),
              &s.request, &r);
}

void Oracle::CheckAdmin(const Sent& s, const wire::Response& r) {
  const wire::Request& q = s.request;
  const bool admin = s.tenant == 0;
  switch (s.kind) {
    case kPing:
      if (r.ping().namespace_() != kTenantName[s.tenant] || r.ping().admin() != admin)
        Violation("PING: wrong namespace or admin flag", &q, &r);
      return;
    case kStats:
      for (const auto& n : r.stats().namespaces())
        if (!admin && n.name() != kTenantName[s.tenant])
          Violation("STATS: a non-admin sees another namespace", &q, &r);
      return;
    case kEvict:
      if (!admin && !q.evict().namespace_().empty() &&
          q.evict().namespace_() != kTenantName[s.tenant])
        Violation("EVICT of another namespace accepted from a non-admin", &q, &r);
      return;
    case kFlush:
    case kTenants:
      if (!admin) Violation("admin-only request accepted from a non-admin", &q, &r);
      return;
    default: return;
  }
}

}  // namespace kvtier::fuzz
