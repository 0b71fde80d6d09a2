// Page key derivation (see page_key.h and docs/PROTOCOL.md for the encoding).
#include "kvtier/page_key.h"

#include <openssl/sha.h>

#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace kvtier {
namespace {

constexpr absl::string_view kDomain = "kvtier/page-key";

// Tagged, length-prefixed fields: tag (1 byte) | length (u32 LE) | bytes.
// Tagging keeps field boundaries unambiguous whatever the token count.
class FieldHasher {
 public:
  FieldHasher() { SHA256_Init(&ctx_); }
  void Field(uint8_t tag, const void* data, uint32_t len) {
    uint8_t hdr[5] = {tag, uint8_t(len), uint8_t(len >> 8), uint8_t(len >> 16),
                      uint8_t(len >> 24)};
    SHA256_Update(&ctx_, hdr, sizeof(hdr));
    SHA256_Update(&ctx_, data, len);
  }
  void U32(uint8_t tag, uint32_t v) {
    uint8_t b[4] = {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)};
    Field(tag, b, 4);
  }
  void U64(uint8_t tag, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = uint8_t(v >> (8 * i));
    Field(tag, b, 8);
  }
  std::array<uint8_t, SHA256_DIGEST_LENGTH> Finish() {
    std::array<uint8_t, SHA256_DIGEST_LENGTH> out;
    SHA256_Final(out.data(), &ctx_);
    return out;
  }

 private:
  SHA256_CTX ctx_;
};

}  // namespace

bool PageKey::IsZero() const {
  for (uint8_t b : bytes)
    if (b) return false;
  return true;
}

std::string PageKey::ToHex() const {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

absl::StatusOr<PageKey> PageKey::FromHex(absl::string_view hex) {
  if (hex.size() != 2 * kPageKeyBytes)
    return absl::InvalidArgumentError(
        absl::StrCat("page key must be ", 2 * kPageKeyBytes, " hex digits, got ", hex.size()));
  for (char c : hex)
    if (!std::isxdigit(static_cast<unsigned char>(c)))
      return absl::InvalidArgumentError(absl::StrCat("page key is not hex: ", hex));
  return FromBytes(absl::HexStringToBytes(hex).data());
}

PageKey PageKey::FromBytes(const void* data) {
  PageKey k;
  std::memcpy(k.bytes.data(), data, kPageKeyBytes);
  return k;
}

PageKey DerivePageKey(uint64_t layout_id, const PageKey& parent,
                      absl::Span<const uint32_t> tokens) {
  FieldHasher h;
  h.Field(0x00, kDomain.data(), kDomain.size());
  h.U32(0x01, kPageKeyVersion);
  h.U64(0x02, layout_id);
  h.Field(0x03, parent.bytes.data(), kPageKeyBytes);
  std::string tok;
  tok.resize(tokens.size() * 4);
  for (size_t i = 0; i < tokens.size(); ++i)
    for (int b = 0; b < 4; ++b) tok[4 * i + b] = char(uint8_t(tokens[i] >> (8 * b)));
  h.Field(0x04, tok.data(), static_cast<uint32_t>(tok.size()));
  auto digest = h.Finish();
  return PageKey::FromBytes(digest.data());
}

std::vector<PageKey> DeriveChain(uint64_t layout_id, uint32_t tokens_per_page,
                                 absl::Span<const uint32_t> tokens, const PageKey& parent) {
  std::vector<PageKey> keys;
  if (tokens_per_page == 0) return keys;
  PageKey prev = parent;
  for (size_t start = 0; start + tokens_per_page <= tokens.size(); start += tokens_per_page) {
    prev = DerivePageKey(layout_id, prev, tokens.subspan(start, tokens_per_page));
    keys.push_back(prev);
  }
  return keys;
}

std::string PackKeys(absl::Span<const PageKey> keys) {
  std::string out;
  out.resize(keys.size() * kPageKeyBytes);
  for (size_t i = 0; i < keys.size(); ++i)
    std::memcpy(out.data() + i * kPageKeyBytes, keys[i].bytes.data(), kPageKeyBytes);
  return out;
}

absl::StatusOr<std::vector<PageKey>> UnpackKeys(absl::string_view packed) {
  if (packed.size() % kPageKeyBytes != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "packed keys are ", packed.size(), " bytes, not a multiple of ", kPageKeyBytes));
  std::vector<PageKey> keys(packed.size() / kPageKeyBytes);
  for (size_t i = 0; i < keys.size(); ++i)
    keys[i] = PageKey::FromBytes(packed.data() + i * kPageKeyBytes);
  return keys;
}

}  // namespace kvtier
