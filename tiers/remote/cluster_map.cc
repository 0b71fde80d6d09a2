// CLUSTER SLOTS parsing and redirect parsing. Both read text that comes from
// the network, so every field is checked before use.
#include "tiers/remote/cluster_map.h"

#include <hiredis/hiredis.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tiers/remote/crc16.h"

namespace kvtier::tiers::remote {
namespace {

absl::string_view HostOrAsked(absl::string_view host, absl::string_view asked_host) {
  return (host.empty() || host == "?") ? asked_host : host;
}

// One [host, port, id, ...] node entry of a CLUSTER SLOTS range.
absl::StatusOr<std::pair<std::string, std::string>> NodeOf(const redisReply* node,
                                                           absl::string_view asked_host) {
  if (node == nullptr || node->type != REDIS_REPLY_ARRAY || node->elements < 2 ||
      node->element[0]->type != REDIS_REPLY_STRING ||
      node->element[1]->type != REDIS_REPLY_INTEGER) {
    return absl::InternalError("CLUSTER SLOTS: malformed node entry");
  }
  Endpoint ep{std::string(HostOrAsked(
                  absl::string_view(node->element[0]->str, node->element[0]->len), asked_host)),
              static_cast<int>(node->element[1]->integer)};
  std::string id;
  if (node->elements >= 3 && node->element[2]->type == REDIS_REPLY_STRING) {
    id.assign(node->element[2]->str, node->element[2]->len);
  }
  return std::make_pair(ep.ToString(), std::move(id));
}

}  // namespace

std::string Endpoint::ToString() const {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<Endpoint> ParseEndpoint(absl::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("endpoint '", text, "' is not host:port"));
  }
  absl::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = 0;
  if (host.empty() || !absl::SimpleAtoi(text.substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("endpoint '", text, "' is not host:port (port 1..65535)"));
  }
  return Endpoint{std::string(host), port};
}

SlotMap::SlotMap() : owner_(kNumSlots, kNone) {}

absl::StatusOr<SlotMap> SlotMap::FromClusterSlots(const redisReply& reply,
                                                  absl::string_view asked_host) {
  if (reply.type != REDIS_REPLY_ARRAY) {
    return absl::InternalError("CLUSTER SLOTS: reply is not an array");
  }
  SlotMap map;
  for (size_t i = 0; i < reply.elements; ++i) {
    absl::Status s = map.AddRange(*reply.element[i], asked_host);
    if (!s.ok()) return s;
  }
  if (map.covered_slots() == 0) {
    return absl::UnavailableError("CLUSTER SLOTS: no slot is served (cluster not set up?)");
  }
  return map;
}

absl::Status SlotMap::AddRange(const redisReply& entry, absl::string_view asked_host) {
  if (entry.type != REDIS_REPLY_ARRAY || entry.elements < 3 ||
      entry.element[0]->type != REDIS_REPLY_INTEGER ||
      entry.element[1]->type != REDIS_REPLY_INTEGER) {
    return absl::InternalError("CLUSTER SLOTS: malformed slot range");
  }
  const long long first = entry.element[0]->integer, last = entry.element[1]->integer;
  if (first < 0 || last >= kNumSlots || first > last) {
    return absl::InternalError(absl::StrCat("CLUSTER SLOTS: bad range ", first, "-", last));
  }
  auto master = NodeOf(entry.element[2], asked_host);
  if (!master.ok()) return master.status();
  const uint16_t index = IndexOf(master->first);
  if (masters_[index].id.empty()) masters_[index].id = master->second;
  for (size_t r = 3; r < entry.elements; ++r) {
    auto replica = NodeOf(entry.element[r], asked_host);
    if (!replica.ok()) return replica.status();
    auto& replicas = masters_[index].replicas;
    if (std::find(replicas.begin(), replicas.end(), replica->first) == replicas.end()) {
      replicas.push_back(replica->first);
    }
  }
  for (long long slot = first; slot <= last; ++slot) owner_[slot] = index;
  return absl::OkStatus();
}

uint16_t SlotMap::IndexOf(absl::string_view endpoint) {
  for (size_t i = 0; i < masters_.size(); ++i) {
    if (masters_[i].endpoint == endpoint) return static_cast<uint16_t>(i);
  }
  masters_.push_back(MasterInfo{std::string(endpoint), "", {}});
  return static_cast<uint16_t>(masters_.size() - 1);
}

const std::string* SlotMap::MasterOf(uint16_t slot) const {
  if (slot >= kNumSlots || owner_[slot] == kNone) return nullptr;
  return &masters_[owner_[slot]].endpoint;
}

void SlotMap::Assign(uint16_t slot, absl::string_view endpoint) {
  if (slot < kNumSlots) owner_[slot] = IndexOf(endpoint);
}

uint32_t SlotMap::covered_slots() const {
  uint32_t n = 0;
  for (uint16_t owner : owner_) n += owner != kNone;
  return n;
}

std::optional<Redirect> ParseRedirect(absl::string_view error, absl::string_view asked_host) {
  std::vector<absl::string_view> parts = absl::StrSplit(error, ' ');
  if (parts.size() != 3) return std::nullopt;
  Redirect r;
  if (parts[0] == "MOVED") {
    r.kind = Redirect::Kind::kMoved;
  } else if (parts[0] == "ASK") {
    r.kind = Redirect::Kind::kAsk;
  } else {
    return std::nullopt;
  }
  uint32_t slot = 0;
  if (!absl::SimpleAtoi(parts[1], &slot) || slot >= kNumSlots) return std::nullopt;
  absl::string_view target = parts[2];
  std::string with_host =
      absl::StartsWith(target, ":") ? absl::StrCat(asked_host, target) : std::string(target);
  auto ep = ParseEndpoint(with_host);
  if (!ep.ok()) return std::nullopt;
  r.slot = static_cast<uint16_t>(slot);
  r.endpoint = ep->ToString();
  return r;
}

}  // namespace kvtier::tiers::remote
