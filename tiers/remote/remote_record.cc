// Encoding and checking of remote records (remote_record.h). Parsing trusts
// nothing in the value: every length is checked against what is there.
#include "tiers/remote/remote_record.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvtier::tiers::remote {
namespace {

template <typename T>
void Put(std::string& out, T v) {
  char b[sizeof(T)];
  for (size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out.append(b, sizeof(T));
}

template <typename T>
T Get(const char* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

absl::Status Bad(absl::string_view why) {
  return absl::DataLossError(absl::StrCat("remote record: ", why));
}

}  // namespace

std::string RecordKey(absl::string_view ns, const PageKey& key) {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, ns.data(), ns.size());
  XXH3_64bits_update(&st, key.bytes.data(), key.bytes.size());
  const uint64_t h = XXH3_64bits_digest(&st);
  return absl::StrFormat("kvtier:{%04x}:%s:%s", static_cast<unsigned>(h & 0xffff), ns,
                         key.ToHex());
}

std::string AclKeyPattern(absl::string_view ns) {
  std::string out = "kvtier:{????}:";
  for (char c : ns) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back(':');
  out.append(2 * kPageKeyBytes, '?');
  return out;
}

std::string EncodeHeader(const RecordInfo& info, uint64_t body_bytes) {
  std::string out;
  out.reserve(kFixedHeaderBytes + info.ns.size());
  Put<uint32_t>(out, kRecordMagic);
  Put<uint16_t>(out, kRecordVersion);
  Put<uint16_t>(out, static_cast<uint16_t>(info.ns.size()));
  out.append(reinterpret_cast<const char*>(info.key.bytes.data()), kPageKeyBytes);
  out.append(reinterpret_cast<const char*>(info.parent.bytes.data()), kPageKeyBytes);
  Put<uint64_t>(out, body_bytes);
  Put<uint64_t>(out, info.checksum);
  out.append(info.ns.data(), info.ns.size());
  return out;
}

absl::StatusOr<ParsedRecord> ParseRecord(absl::string_view value) {
  if (value.size() < kFixedHeaderBytes) return Bad("shorter than its header");
  const char* p = value.data();
  if (Get<uint32_t>(p) != kRecordMagic) return Bad("bad magic");
  if (Get<uint16_t>(p + 4) != kRecordVersion)
    return Bad(absl::StrCat("unknown format version ", Get<uint16_t>(p + 4)));
  const size_t ns_len = Get<uint16_t>(p + 6);
  ParsedRecord r;
  r.info.key = PageKey::FromBytes(p + 8);
  r.info.parent = PageKey::FromBytes(p + 8 + kPageKeyBytes);
  const uint64_t body = Get<uint64_t>(p + 8 + 2 * kPageKeyBytes);
  r.info.checksum = Get<uint64_t>(p + 16 + 2 * kPageKeyBytes);
  if (value.size() - kFixedHeaderBytes < ns_len) return Bad("truncated namespace");
  r.info.ns = value.substr(kFixedHeaderBytes, ns_len);
  if (value.size() - kFixedHeaderBytes - ns_len != body) return Bad("size mismatch");
  r.body = value.substr(kFixedHeaderBytes + ns_len);
  if (XXH3_64bits(r.body.data(), r.body.size()) != r.info.checksum) return Bad("checksum mismatch");
  return r;
}

absl::StatusOr<ParsedRecord> ParseExpected(absl::string_view value, absl::string_view ns,
                                           const PageKey& key, uint64_t bytes) {
  absl::StatusOr<ParsedRecord> r = ParseRecord(value);
  if (!r.ok()) return r.status();
  if (r->info.ns != ns) return Bad("another namespace's page");
  if (r->info.key != key) return Bad("another key's page");
  if (r->body.size() != bytes) return Bad("unexpected page size");
  return r;
}

}  // namespace kvtier::tiers::remote
