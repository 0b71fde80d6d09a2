// conversation_fuzz: an Op and the harness's state become one wire::Request
// (plus inline page frames), and the oracle learns what the request could do.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "tests/fuzz/conversation_harness.h"

namespace kvtier::fuzz {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
  x = (x ^ (x >> 27)) * 0x94d049bb133111eb;
  return x ^ (x >> 31);
}

std::string Bytes16(uint64_t a, uint64_t b) {
  std::string s(16, '\0');
  std::memcpy(s.data(), &a, 8);
  std::memcpy(s.data() + 8, &b, 8);
  return s;
}

// Small layouts: 4 KiB, 96 B and 16 KiB pages.
void SetLayout(const Op& op, wire::Layout* l) {
  static constexpr uint32_t kPresets[3][5] = {
      {2, 2, 16, 16, wire::FP16}, {1, 1, 8, 4, wire::INT8}, {2, 2, 32, 16, wire::FP32}};
  const uint32_t* f = op.layout == 4 ? op.raw_layout : kPresets[op.layout - 1];
  l->set_layers(f[0]), l->set_kv_heads(f[1]), l->set_head_dim(f[2]);
  l->set_tokens_per_page(f[3]), l->set_dtype(static_cast<wire::Dtype>(f[4]));
}

}  // namespace

std::string Conversation::PoolKey(uint32_t i) const {
  return Bytes16(Mix(salt_ + 2 * i), Mix(salt_ + 2 * i + 1));
}

// The keys of `op` (whole 16-byte keys) and their wire form.
std::vector<std::string> Conversation::Keys(const Op& op, std::string* wire_keys) const {
  std::vector<std::string> keys;
  if (op.key_mode == 1) {
    for (uint32_t i = 0; i < ManyKeys(op.many); ++i) keys.push_back(PoolKey(i));
  } else {
    size_t raw = 0;
    const std::string salt = PoolKey(0xfffffff);
    for (uint8_t k : op.keys) {
      if (k < kPoolKeys) keys.push_back(PoolKey(k));
      else if (k == kZeroKey) keys.emplace_back(16, '\0');
      else if (k == kOnesKey) keys.emplace_back(16, '\xff');
      else {
        std::string key = op.raw_keys.substr(std::min(op.raw_keys.size(), 16 * raw++), 16);
        key.resize(16, '\0');
        for (int b = 0; b < 16; ++b) key[b] ^= salt[b];
        keys.push_back(key);
      }
    }
  }
  for (const std::string& k : keys) *wire_keys += k;
  if (op.key_mode == 2) wire_keys->append(op.key_tail, '\xab');
  return keys;
}

// The session id `op` names; *session = the index of a live session of this
// peer with that id, else -1.
std::string Conversation::PickSession(const Op& op, int* session) const {
  const int own = CurrentSession(op.peer);
  std::string id = own >= 0 ? sessions_[own].id : "";
  switch (op.session) {
    case kOtherPeer:
      for (int d = 1; d < kPeers; ++d)
        if (int o = CurrentSession((op.peer + d) % kPeers); o >= 0) {
          id = sessions_[o].id;
          break;
        }
      break;
    case kNoSession: id.clear(); break;
    case kRandom: id = Bytes16(Mix(next_id_), Mix(~next_id_)); break;
    case kShortId: id = id.empty() ? "short" : id.substr(0, 15); break;
    case kStale:  // this peer's oldest session (closed or not), if it has another
      for (size_t i = 0; i < sessions_.size(); ++i)
        if (sessions_[i].peer == op.peer) {
          id = sessions_[i].id;
          break;
        }
      break;
    default: break;
  }
  *session = -1;
  for (size_t i = 0; i < sessions_.size(); ++i)
    if (sessions_[i].id == id && sessions_[i].peer == op.peer && !sessions_[i].closed)
      *session = int(i);
  return id;
}

void Conversation::Build(const Op& op, Sent& s, std::vector<std::string>& payloads) {
  wire::Request& q = s.request;
  s.kind = op.kind;
  s.peer = op.peer;
  q.set_version(op.mangle == 1 ? op.version : 1);
  q.set_request_id(op.mangle == 3 && last_id_ != 0 ? last_id_ : next_id_++);
  last_id_ = q.request_id();
  if (op.kind == kHello) {
    BuildHello(op, s);
  } else {
    q.set_session_id(PickSession(op, &s.session));
    if (s.session >= 0) {
      s.tenant = sessions_[s.session].tenant;
      s.page_bytes = sessions_[s.session].page_bytes;
    }
    BuildBody(op, s, payloads);
  }
  s.malformed = Malformed(op, s, payloads);
}

void Conversation::BuildBody(const Op& op, Sent& s, std::vector<std::string>& payloads) {
  wire::Request& q = s.request;
  std::string keys;
  switch (op.kind) {
    case kRegister: return BuildRegister(op, s);
    case kUnregister: {
      int object;
      const SessionRec* rec = s.session >= 0 ? &sessions_[s.session] : nullptr;
      q.mutable_unregister_buffer()->set_buffer_id(PickBuffer(op, rec, &object));
      return;
    }
    case kPut: return BuildPut(op, s, payloads);
    case kGet: return BuildGet(op, s);
    case kLookup: s.keys = Keys(op, &keys), q.mutable_lookup()->set_keys(keys); return;
    case kDelete: s.keys = Keys(op, &keys), q.mutable_delete_()->set_keys(keys); return;
    case kPrefetch: {
      s.keys = Keys(op, &keys);
      auto* p = q.mutable_prefetch();
      p->set_keys(keys), p->set_target(static_cast<wire::Tier>(op.target));
      p->set_priority(op.priority), p->set_deadline_ms(op.deadline_ms);
      p->set_lease_ms(op.lease_ms);
      return;
    }
    case kEvict: {
      auto* e = q.mutable_evict();
      const std::string names[] = {"", kTenantName[0], kTenantName[1], "nobody", op.text};
      e->set_namespace_(names[op.ns]), e->set_tier(static_cast<wire::Tier>(op.tier));
      e->set_pages(op.pages), e->set_all(op.all);
      return;
    }
    case kStats: q.mutable_stats(); return;
    case kPing: q.mutable_ping(); return;
    case kFlush: q.mutable_flush(); return;
    case kTenants: q.mutable_tenants(); return;
    case kBye: q.mutable_bye(); return;
    default: return;
  }
}

// Requests the decoder must refuse, whatever the session (docs/PROTOCOL.md).
bool Conversation::Malformed(const Op& op, const Sent& s,
                             const std::vector<std::string>& payloads) {
  const wire::Request& q = s.request;
  if (q.version() != 1 || op.mangle == 2) return true;  // extra frames: none expected
  const bool keyed = op.kind == kPut || op.kind == kGet || op.kind == kLookup ||
                     op.kind == kDelete || op.kind == kPrefetch;
  if (!keyed) return false;
  if (op.key_mode == 2 || s.keys.size() > 4096) return true;
  if (op.kind != kPrefetch && s.keys.empty()) return true;
  if (op.kind == kPut && q.put().parent().size() != 0 && q.put().parent().size() != 16) return true;
  if (op.kind != kPut && op.kind != kGet) return false;
  const bool via_buffer = op.kind == kPut ? q.put().buffer_id() != 0 : q.get().buffer_id() != 0;
  const int offsets = op.kind == kPut ? q.put().offsets_size() : q.get().offsets_size();
  if (via_buffer && size_t(offsets) != s.keys.size()) return true;
  if (op.kind == kGet && !via_buffer && offsets > 0) return true;
  if (op.kind == kPut && !via_buffer) {
    if (payloads.size() != s.keys.size()) return true;
    for (const std::string& p : payloads)
      if (s.session >= 0 && p.size() != s.page_bytes) return true;
  }
  return false;
}

void Conversation::BuildHello(const Op& op, Sent& s) {
  auto* h = s.request.mutable_hello();
  const std::string names[] = {kTenantName[0], kTenantName[1], "nobody", op.text};
  h->set_tenant(names[op.tenant]);
  if (op.token == 0) h->set_token(op.tenant < 2 ? kTenantToken[op.tenant] : "nobody-token");
  if (op.token == 1) h->set_token("wrong-token");
  if (op.layout != 0) SetLayout(op, h->mutable_layout());
  h->set_client_name(op.tenant == 3 ? "fuzz" : op.text);
}

void Conversation::BuildRegister(const Op& op, Sent& s) {
  auto* r = s.request.mutable_register_buffer();
  const int next = (op.peer + 1) % kPeers;
  const std::string names[] = {daemon_.object(op.peer).name, daemon_.object(next).name,
                               "/kvtier-fuzz-missing", absl::StrCat("/kvtier-host-", getpid()),
                               absl::StrCat("/kvtier-emu-", getpid(), "-0"), op.text};
  s.object = op.object == 0 ? op.peer : op.object == 1 ? next : -1;
  const uint64_t sizes[] = {kObjectBytes, kObjectBytes / 2, op.size};
  r->set_size(sizes[op.size_mode]);
  r->set_kind(static_cast<wire::BufferKind>(op.buffer_kind));
  if (op.buffer_kind == wire::BUFFER_SHM || op.buffer_kind > 2) r->set_shm_name(names[op.object]);
  if (op.buffer_kind != wire::BUFFER_SHM) r->set_device_handle(names[op.object]);
}

// The buffer id `op` names in `rec` and the harness object behind it (-1: unknown).
uint32_t Conversation::PickBuffer(const Op& op, const SessionRec* rec, int* object) const {
  *object = -1;
  uint32_t id = op.buffer == 3 ? op.raw_u32 : op.buffer == 0 ? 0 : 1;
  if (rec != nullptr && !rec->buffers.empty() && (op.buffer == 1 || op.buffer == 2))
    id = (op.buffer == 1 ? rec->buffers.back() : rec->buffers.front()).id;
  if (rec != nullptr)
    for (const BufferRec& b : rec->buffers)
      if (b.id == id) *object = b.object;
  return id;
}

std::vector<uint64_t> Conversation::Offsets(const Op& op, size_t n, uint64_t page_bytes) const {
  if (op.offsets == 2) return op.raw_offsets;
  std::vector<uint64_t> out;
  for (size_t i = 0; i < n; ++i) out.push_back(op.base + (op.offsets == 1 ? 0 : i * page_bytes));
  if (op.offsets == 3 && !out.empty()) out.pop_back();
  return out;
}

void Conversation::BuildPut(const Op& op, Sent& s, std::vector<std::string>& payloads) {
  auto* p = s.request.mutable_put();
  std::string wire_keys;
  s.keys = Keys(op, &wire_keys);
  p->set_keys(wire_keys);
  const std::string parents[] = {std::string(16, '\0'), PoolKey(op.parent_key), "", op.text};
  p->set_parent(parents[op.parent]);
  const int t = s.tenant;
  const uint64_t page_bytes = s.page_bytes != 0 ? s.page_bytes : 4096;
  if (op.buffer == 0) {
    size_t n = s.keys.size() + (op.frame_count == 2) - (op.frame_count == 1 && !s.keys.empty());
    const int64_t sizes[] = {int64_t(page_bytes), int64_t(page_bytes) + op.delta,
                             std::abs(int64_t(op.delta))};
    const size_t size = size_t(std::max<int64_t>(0, sizes[op.page_size]));
    for (size_t i = 0; i < n; ++i)
      payloads.push_back(PageBytes(std::max(t, 0), i < s.keys.size() ? s.keys[i] : PoolKey(99),
                                   size, op.stamped && t >= 0));
    if (t >= 0) oracle_.WillPut(t, s.keys, false);
    return;
  }
  int object;
  p->set_buffer_id(PickBuffer(op, t >= 0 ? &sessions_[s.session] : nullptr, &object));
  const std::vector<uint64_t> offsets = Offsets(op, s.keys.size(), page_bytes);
  for (uint64_t o : offsets) p->add_offsets(o);
  if (t < 0) return;
  oracle_.WillPut(t, s.keys, true);
  oracle_.PutFrom(object, t);
  if (object < 0) return;
  // The pages go into the object first (the last key written at an offset wins).
  ShmObject& obj = daemon_.object(object);
  std::set<uint64_t> written;
  for (size_t i = std::min(offsets.size(), s.keys.size()); i-- > 0;) {
    if (offsets[i] > obj.size || page_bytes > obj.size - offsets[i]) continue;
    if (!written.insert(offsets[i]).second) continue;
    std::string page = PageBytes(t, s.keys[i], page_bytes, op.stamped);
    std::memcpy(obj.map + offsets[i], page.data(), page.size());
  }
  if (op.stamped) oracle_.ObjectWritten(object, t);
}

void Conversation::BuildGet(const Op& op, Sent& s) {
  auto* g = s.request.mutable_get();
  std::string wire_keys;
  s.keys = Keys(op, &wire_keys);
  g->set_keys(wire_keys);
  g->set_policy(static_cast<wire::GetPolicy>(op.policy));
  g->set_timeout_ms(op.timeout_ms);
  g->set_layerwise(op.layerwise);
  g->set_layer_progress_offset(op.progress_offset);
  if (op.buffer == 0) return;
  const int t = s.tenant;
  int object;
  g->set_buffer_id(PickBuffer(op, t >= 0 ? &sessions_[s.session] : nullptr, &object));
  const uint64_t page_bytes = s.page_bytes != 0 ? s.page_bytes : 4096;
  const std::vector<uint64_t> offsets = Offsets(op, s.keys.size(), page_bytes);
  uint64_t end = 0;
  for (uint64_t o : offsets) {
    g->add_offsets(o);
    end = std::max(end, o + page_bytes);
  }
  if (op.layerwise && op.progress == 0) g->set_layer_progress_offset((end + 7) / 8 * 8);
  if (t < 0) return;
  // The daemon writes the tenant's pages there; into a buffer the harness
  // cannot name (a lost REGISTER reply), maybe into any object.
  for (int o = 0; o < kPeers; ++o)
    if (object == o || object < 0) oracle_.ObjectWritten(o, t);
}

}  // namespace kvtier::fuzz
