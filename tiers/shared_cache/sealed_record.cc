// Seal and Open (sealed_record.h): AES-256-GCM through OpenSSL's EVP, one
// context per call and no copy of the page besides the cipher's own pass:
// Seal encrypts into the record string, Open decrypts into the caller's page.
#include "tiers/shared_cache/sealed_record.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cstring>
#include <limits>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace kvtier::tiers::shared_cache {
namespace {

// Header field offsets; the layout is in sealed_record.h.
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 4;
constexpr size_t kOffReserved = 6;
constexpr size_t kOffKeyId = 8;
constexpr size_t kOffNonce = 16;
constexpr size_t kOffParent = kOffNonce + kSealNonceBytes;
constexpr size_t kOffBodyBytes = kOffParent + kPageKeyBytes;
static_assert(kOffBodyBytes + 8 == kSealHeaderBytes);

// GCM encrypts at most 2^39 - 256 bits under one nonce.
constexpr uint64_t kMaxGcmBytes = (uint64_t{1} << 36) - 32;
// EVP_CipherUpdate takes an int length.
constexpr size_t kUpdateChunk = size_t{1} << 30;

void StoreLe(uint64_t v, size_t n, uint8_t* p) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t LoadLe(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = v << 8 | p[i];
  return v;
}

struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree>;

// A GCM context keyed and nonced for one record; null if OpenSSL fails.
CipherCtx NewGcm(const SealKey& key, const uint8_t* nonce, bool encrypt) {
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  if (ctx == nullptr ||
      EVP_CipherInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.key.data(), nonce,
                        encrypt ? 1 : 0) != 1) {
    return nullptr;
  }
  return ctx;
}

// Feeds `n` bytes through the cipher: associated data when out is null.
bool Update(EVP_CIPHER_CTX* ctx, const uint8_t* in, uint8_t* out, size_t n) {
  while (n > 0) {
    const size_t chunk = n < kUpdateChunk ? n : kUpdateChunk;
    int out_len = 0;
    if (EVP_CipherUpdate(ctx, out, &out_len, in, static_cast<int>(chunk)) != 1) return false;
    in += chunk;
    if (out != nullptr) out += chunk;
    n -= chunk;
  }
  return true;
}

// The associated data: header || u32 len + namespace || key.
bool AddAssociatedData(EVP_CIPHER_CTX* ctx, const uint8_t* header, absl::string_view ns,
                       const PageKey& key) {
  uint8_t ns_len[4];
  StoreLe(ns.size(), sizeof(ns_len), ns_len);
  return Update(ctx, header, nullptr, kSealHeaderBytes) &&
         Update(ctx, ns_len, nullptr, sizeof(ns_len)) &&
         Update(ctx, reinterpret_cast<const uint8_t*>(ns.data()), nullptr, ns.size()) &&
         Update(ctx, key.bytes.data(), nullptr, key.bytes.size());
}

absl::Status OpenError(OpenFailure f, absl::string_view ns, const PageKey& key,
                       absl::string_view detail, OpenFailure* failure) {
  if (failure != nullptr) *failure = f;
  const std::string_view name = OpenFailureName(f);
  return absl::DataLossError(absl::StrCat("shared cache record ", absl::CHexEscape(ns), "/",
                                          key.ToHex(), ": ",
                                          absl::string_view(name.data(), name.size()), ": ",
                                          detail));
}

}  // namespace

std::string_view OpenFailureName(OpenFailure f) {
  switch (f) {
    case OpenFailure::kNone: return "none";
    case OpenFailure::kOversized: return "oversized";
    case OpenFailure::kSize: return "size";
    case OpenFailure::kFormat: return "format";
    case OpenFailure::kUnknownKey: return "unknown_key";
    case OpenFailure::kAuthentication: return "authentication";
  }
  return "unknown";
}

absl::StatusOr<std::string> Seal(const SealKey& key, absl::string_view ns,
                                 const PageKey& key_of_page, const PageKey& parent,
                                 absl::string_view body) {
  std::string record;
  if (absl::Status s = SealInto(key, ns, key_of_page, parent, body, &record); !s.ok()) return s;
  return record;
}

absl::Status SealInto(const SealKey& key, absl::string_view ns, const PageKey& key_of_page,
                      const PageKey& parent, absl::string_view body, std::string* out) {
  if (ns.size() > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError("shared cache: namespace name over 4 GiB");
  }
  if (body.size() > kMaxGcmBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared cache: a page of ", body.size(), " bytes is over GCM's limit"));
  }
  // Sized once (C++20 has no resize without initialization: a fresh
  // string is zero-filled, a recycled one keeps its old bytes); the header
  // is written below and the cipher writes every byte after it.
  out->resize(kSealOverheadBytes + body.size());
  uint8_t* p = reinterpret_cast<uint8_t*>(out->data());
  StoreLe(kSealMagic, 4, p + kOffMagic);
  StoreLe(kSealVersion, 2, p + kOffVersion);
  StoreLe(0, 2, p + kOffReserved);
  StoreLe(key.id, 8, p + kOffKeyId);
  if (RAND_bytes(p + kOffNonce, kSealNonceBytes) != 1) {
    return absl::InternalError("shared cache: RAND_bytes failed (no nonce)");
  }
  std::memcpy(p + kOffParent, parent.bytes.data(), kPageKeyBytes);
  StoreLe(body.size(), 8, p + kOffBodyBytes);

  uint8_t* ciphertext = p + kSealHeaderBytes;
  uint8_t* tag = ciphertext + body.size();
  int final_len = 0;
  CipherCtx ctx = NewGcm(key, p + kOffNonce, /*encrypt=*/true);
  if (ctx == nullptr || !AddAssociatedData(ctx.get(), p, ns, key_of_page) ||
      !Update(ctx.get(), reinterpret_cast<const uint8_t*>(body.data()), ciphertext,
              body.size()) ||
      EVP_EncryptFinal_ex(ctx.get(), tag, &final_len) != 1 || final_len != 0 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_AEAD_GET_TAG, kSealTagBytes, tag) != 1) {
    return absl::InternalError("shared cache: AES-256-GCM seal (OpenSSL) failed");
  }
  return absl::OkStatus();
}

absl::StatusOr<OpenedRecord> Open(const TenantKeys& keys, absl::string_view value,
                                  absl::string_view ns, const PageKey& key,
                                  uint64_t expected_bytes, uint8_t* dst, OpenFailure* failure) {
  if (failure != nullptr) *failure = OpenFailure::kNone;
  if (ns.size() > std::numeric_limits<uint32_t>::max() ||
      (dst == nullptr && expected_bytes > 0)) {
    return absl::InvalidArgumentError("shared cache Open: namespace over 4 GiB or null dst");
  }
  // Sizes first, without overflow: expected_bytes comes from the caller and
  // may be anything, value from the cluster and may be anything.
  if (value.size() > kSealOverheadBytes && value.size() - kSealOverheadBytes > expected_bytes) {
    return OpenError(OpenFailure::kOversized, ns, key,
                     absl::StrCat("value of ", value.size(), " bytes for a page of ",
                                  expected_bytes),
                     failure);
  }
  if (value.size() < kSealOverheadBytes || value.size() - kSealOverheadBytes != expected_bytes) {
    return OpenError(OpenFailure::kSize, ns, key,
                     absl::StrCat("value of ", value.size(), " bytes for a page of ",
                                  expected_bytes),
                     failure);
  }
  const uint8_t* p = reinterpret_cast<const uint8_t*>(value.data());
  const uint64_t body_bytes = LoadLe(p + kOffBodyBytes, 8);
  if (body_bytes != expected_bytes) {
    return OpenError(OpenFailure::kSize, ns, key,
                     absl::StrCat("header says ", body_bytes, " bytes, expected ",
                                  expected_bytes),
                     failure);
  }
  if (LoadLe(p + kOffMagic, 4) != kSealMagic || LoadLe(p + kOffVersion, 2) != kSealVersion ||
      LoadLe(p + kOffReserved, 2) != 0) {
    return OpenError(OpenFailure::kFormat, ns, key, "bad magic, version or reserved field",
                     failure);
  }
  const uint64_t key_id = LoadLe(p + kOffKeyId, 8);
  const SealKey* seal_key = nullptr;
  if (key_id == keys.current.id) {
    seal_key = &keys.current;
  } else if (keys.previous.has_value() && key_id == keys.previous->id) {
    seal_key = &*keys.previous;
  } else {
    return OpenError(OpenFailure::kUnknownKey, ns, key, "not sealed by this tenant's key",
                     failure);
  }

  const uint8_t* ciphertext = p + kSealHeaderBytes;
  const uint8_t* tag = ciphertext + expected_bytes;
  CipherCtx ctx = NewGcm(*seal_key, p + kOffNonce, /*encrypt=*/false);
  // OpenSSL copies the expected tag; the cast only fits its void* signature.
  if (ctx == nullptr || !AddAssociatedData(ctx.get(), p, ns, key) ||
      !Update(ctx.get(), ciphertext, dst, expected_bytes) ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_AEAD_SET_TAG, kSealTagBytes,
                          const_cast<uint8_t*>(tag)) != 1) {
    return absl::InternalError("shared cache: AES-256-GCM open (OpenSSL) failed");
  }
  int final_len = 0;
  if (EVP_DecryptFinal_ex(ctx.get(), dst + expected_bytes, &final_len) != 1) {
    if (expected_bytes > 0) std::memset(dst, 0, expected_bytes);
    return OpenError(OpenFailure::kAuthentication, ns, key,
                     "forged, another tenant's, or corrupt", failure);
  }
  return OpenedRecord{PageKey::FromBytes(p + kOffParent), expected_bytes};
}

}  // namespace kvtier::tiers::shared_cache
