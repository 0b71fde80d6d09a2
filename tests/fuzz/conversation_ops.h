// What a conversation_fuzz input means: up to kMaxOps operations, each a
// request one of kPeers clients sends (or a harness action: truncating a
// peer's shm object). Visit() names every field once, so the decoder
// (FuzzedDataProvider) and the seed encoder cannot drift apart: a field is
// read only when the fields before it say it matters.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace kvtier::fuzz {

inline constexpr int kPeers = 3;
inline constexpr size_t kMaxOps = 32;
inline constexpr int kPoolKeys = 16;
inline constexpr uint64_t kObjectBytes = 256 << 10;  // each peer's shm object

enum OpKind : uint8_t {
  kHello, kRegister, kUnregister, kPut, kGet, kLookup, kDelete, kPrefetch,
  kStats, kPing, kEvict, kFlush, kTenants, kBye, kRaw, kTruncate, kOpKinds
};
// Which session id a request carries.
enum SessionPick : uint8_t { kOwn, kOtherPeer, kNoSession, kRandom, kShortId, kStale, kPicks };
// Key selectors: pool keys (salted per input), two unsalted special keys,
// or 16 raw bytes (salted).
enum KeySel : uint8_t { kZeroKey = kPoolKeys, kOnesKey, kRawKey, kKeySels };

struct Op {
  uint8_t kind = kPing;
  uint8_t peer = 0;
  bool wait = true;  // wait (up to 200 ms) for the reply before the next op
  uint8_t session = kOwn;
  uint8_t mangle = 0;  // 1: version, 2: extra garbage frames, 3: repeat the last request id
  uint32_t version = 1;
  std::vector<std::string> frames;  // kRaw: the message; mangle 2: appended frames
  // HELLO: tenant 0 alpha, 1 beta, 2 unknown, 3 text; token 0 right, 1 wrong,
  // 2 empty; layout 0 none, 1-3 presets, 4 raw fields.
  uint8_t tenant = 0, token = 0, layout = 1;
  uint32_t raw_layout[5] = {0, 0, 0, 0, 0};
  std::string text;  // raw tenant / shm name / namespace / parent
  // REGISTER: object 0 own, 1 next peer's, 2 missing, 3 daemon host arena,
  // 4 emulated-device pool, 5 text; size_mode 0 whole, 1 half, 2 raw (also
  // TRUNCATE: 0 empty, 1 half, 2 whole again, 3 raw); buffer_kind: wire value.
  uint8_t object = 0, size_mode = 0;
  uint32_t buffer_kind = 0;
  uint64_t size = 0;
  uint32_t raw_u32 = 0;  // raw buffer id
  // Keys: key_mode 0 list, 1 `many` generated keys (ManyKeys), 2 list +
  // key_tail bytes.
  uint8_t key_mode = 0, key_tail = 0, many = 0;
  std::vector<uint8_t> keys;  // KeySel or pool index
  std::string raw_keys;       // 16 bytes per kRawKey
  // PUT / GET transfer: buffer 0 inline, 1 latest registered, 2 first, 3 raw id.
  // offsets 0 consecutive pages from base, 1 all at base, 2 raw, 3 one too few.
  uint8_t buffer = 0, offsets = 0;
  uint64_t base = 0;
  std::vector<uint64_t> raw_offsets;
  // Inline PUT: page_size 0 session's, 1 + delta, 2 raw length (delta);
  // frame_count 0 one per key, 1 one fewer, 2 one more.
  uint8_t page_size = 0, frame_count = 0;
  int32_t delta = 0;
  bool stamped = true;  // page bytes: tenant tag + key, else a tag-free pattern
  uint8_t parent = 0, parent_key = 0;  // 0 zeros, 1 pool key, 2 empty, 3 text
  // GET: policy 0-2 or raw; progress 0 after the pages, 1 raw.
  uint32_t policy = 0, timeout_ms = 0;  // policy: wire value
  bool layerwise = false;
  uint8_t progress = 0;
  uint64_t progress_offset = 0;
  // PREFETCH
  uint32_t target = 0, deadline_ms = 0, lease_ms = 0;
  int32_t priority = 0;
  // EVICT: ns 0 own (empty), 1 alpha, 2 beta, 3 unknown, 4 text.
  uint8_t ns = 0;
  uint32_t tier = 0;
  uint64_t pages = 1;
  bool all = false;
};

// A small value (0..small), or small + 1 followed by any value of T.
template <class V, class T>
void SmallOrRaw(V& v, T& x, T small) {
  T sel = x <= small ? x : small + 1;  // the encoder's choice; the decoder overwrites it
  v.Int(sel, 0, small + 1);
  if (sel <= small) x = sel;
  else v.Int(x, std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
}

template <class V>
void VisitFrames(V& v, std::vector<std::string>& frames) {
  v.Count(frames, 1, 4);
  for (std::string& f : frames) v.Bytes(f, 512);
}

// `many` 0-251 keys, or around the per-request limit (4096): large requests
// are slow, so they stay rare.
inline uint32_t ManyKeys(uint8_t many) {
  static constexpr uint32_t kLimit[4] = {4095, 4096, 4097, 300};
  return many < 252 ? many : kLimit[many - 252];
}

template <class V>
void VisitKeys(V& v, Op& op) {
  v.Int(op.key_mode, 0, 2);
  if (op.key_mode == 1) return v.Int(op.many, 0, 255);
  if (op.key_mode == 2) v.Int(op.key_tail, 1, 15);
  v.Count(op.keys, 0, 8);
  size_t raw = 0;
  for (uint8_t& k : op.keys) {
    v.Int(k, 0, kKeySels - 1);
    raw += k == kRawKey;
  }
  if (raw > 0) v.Bytes(op.raw_keys, 16 * raw);
}

template <class V>
void VisitTransfer(V& v, Op& op) {
  v.Int(op.buffer, 0, 3);
  if (op.buffer == 3) v.Int(op.raw_u32, 0, ~0u);
  if (op.buffer == 0) return;
  v.Int(op.offsets, 0, 3);
  if (op.offsets == 2) {
    v.Count(op.raw_offsets, 0, 9);
    for (uint64_t& o : op.raw_offsets) v.Int(o, 0, ~uint64_t{0});
  } else {
    v.Int(op.base, 0, 2 * kObjectBytes);
  }
}

template <class V>
void VisitBody(V& v, Op& op) {
  switch (op.kind) {
    case kHello:
      v.Int(op.tenant, 0, 3), v.Int(op.token, 0, 2), v.Int(op.layout, 0, 4);
      if (op.layout == 4)
        for (uint32_t& f : op.raw_layout) v.Int(f, 0, ~0u);
      return v.Bytes(op.text, 300);
    case kRegister:
      v.Int(op.object, 0, 5), v.Int(op.size_mode, 0, 2), SmallOrRaw(v, op.buffer_kind, 2u);
      if (op.object == 5) v.Bytes(op.text, 300);
      if (op.size_mode == 2) v.Int(op.size, 0, ~uint64_t{0});
      return;
    case kUnregister:
      v.Int(op.buffer, 0, 3);
      if (op.buffer == 3) v.Int(op.raw_u32, 0, ~0u);
      return;
    case kPut:
      VisitKeys(v, op), VisitTransfer(v, op);
      v.Bool(op.stamped), v.Int(op.parent, 0, 3);
      if (op.parent == 1) v.Int(op.parent_key, 0, kPoolKeys - 1);
      if (op.parent == 3) v.Bytes(op.text, 40);
      if (op.buffer != 0) return;
      v.Int(op.page_size, 0, 2), v.Int(op.frame_count, 0, 2);
      if (op.page_size != 0) v.Int(op.delta, -70000, 70000);
      return;
    case kGet:
      VisitKeys(v, op), VisitTransfer(v, op);
      SmallOrRaw(v, op.policy, 2u);
      if (op.policy >= 2) v.Int(op.timeout_ms, 0, ~0u);
      v.Bool(op.layerwise);
      if (!op.layerwise) return;
      v.Int(op.progress, 0, 1);
      if (op.progress == 1) v.Int(op.progress_offset, 0, ~uint64_t{0});
      return;
    case kLookup:
    case kDelete: return VisitKeys(v, op);
    case kPrefetch:
      VisitKeys(v, op);
      SmallOrRaw(v, op.target, 3u);
      v.Int(op.priority, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
      v.Int(op.deadline_ms, 0, ~0u), v.Int(op.lease_ms, 0, ~0u);
      return;
    case kEvict:
      v.Int(op.ns, 0, 4);
      if (op.ns == 4) v.Bytes(op.text, 300);
      SmallOrRaw(v, op.tier, 3u);
      v.Int(op.pages, 0, ~uint64_t{0}), v.Bool(op.all);
      return;
    default: return;  // STATS, PING, FLUSH, TENANTS, BYE: no body
  }
}

template <class V>
void Visit(V& v, Op& op) {
  v.Int(op.kind, 0, kOpKinds - 1), v.Int(op.peer, 0, kPeers - 1), v.Bool(op.wait);
  if (op.kind == kTruncate) {
    v.Int(op.size_mode, 0, 3);
    if (op.size_mode == 3) v.Int(op.size, 0, kObjectBytes);
    return;
  }
  if (op.kind == kRaw) return VisitFrames(v, op.frames);
  if (op.kind != kHello) v.Int(op.session, 0, kPicks - 1);
  v.Int(op.mangle, 0, 3);
  if (op.mangle == 1) v.Int(op.version, 0, ~0u);
  if (op.mangle == 2) VisitFrames(v, op.frames);
  VisitBody(v, op);
}

// Reads ops off a FuzzedDataProvider (integers from the end, bytes from the front).
class OpDecoder {
 public:
  explicit OpDecoder(FuzzedDataProvider& in) : in_(in) {}
  template <class T>
  void Int(T& x, std::type_identity_t<T> lo, std::type_identity_t<T> hi) {
    x = in_.ConsumeIntegralInRange<T>(lo, hi);
  }
  void Bool(bool& b) { b = in_.ConsumeBool(); }
  void Bytes(std::string& s, size_t max) {
    s = in_.ConsumeBytesAsString(in_.ConsumeIntegralInRange<size_t>(0, max));
  }
  template <class T>
  void Count(std::vector<T>& v, size_t lo, size_t hi) {
    v.resize(in_.ConsumeIntegralInRange<size_t>(lo, hi));
  }

 private:
  FuzzedDataProvider& in_;
};

// The inverse, for seeds: what OpDecoder must read to get the same ops.
class OpEncoder {
 public:
  template <class T>
  void Int(T& x, std::type_identity_t<T> lo, std::type_identity_t<T> hi) {
    uint64_t value;
    if constexpr (std::is_signed_v<T>) value = uint64_t(int64_t(x) - int64_t(lo));
    else value = uint64_t(x) - uint64_t(lo);
    const uint64_t range = uint64_t(hi) - uint64_t(lo);
    int bytes = 0;
    for (size_t off = 0; off < sizeof(T) * 8 && (range >> off) > 0; off += 8) ++bytes;
    // The first byte consumed is the most significant.
    for (int i = bytes - 1; i >= 0; --i) back_.push_back(char(value >> (8 * i)));
  }
  void Bool(bool& b) {
    uint8_t v = b;
    Int<uint8_t>(v, 0, 255);
  }
  void Bytes(std::string& s, size_t max) {
    size_t n = s.size() < max ? s.size() : max;
    Int<size_t>(n, 0, max);
    front_.append(s, 0, n);
  }
  template <class T>
  void Count(std::vector<T>& v, size_t lo, size_t hi) {
    size_t n = v.size();
    Int<size_t>(n, lo, hi);
  }
  std::string Finish() const { return front_ + std::string(back_.rbegin(), back_.rend()); }

 private:
  std::string front_, back_;
};

inline std::vector<Op> DecodeOps(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  OpDecoder dec(in);
  std::vector<Op> ops;
  while (in.remaining_bytes() > 0 && ops.size() < kMaxOps) {
    ops.emplace_back();
    Visit(dec, ops.back());
  }
  return ops;
}

inline std::string EncodeOps(std::vector<Op> ops) {
  OpEncoder enc;
  for (Op& op : ops) Visit(enc, op);
  return enc.Finish();
}

}  // namespace kvtier::fuzz
