// Layout validation, sizes and the stable layout id.
#include "kvtier/layout.h"

#include <openssl/sha.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kvtier {

absl::StatusOr<Dtype> ParseDtype(absl::string_view name) {
  std::string n = absl::AsciiStrToLower(name);
  if (n == "fp32" || n == "float32") return Dtype::kFp32;
  if (n == "fp16" || n == "float16") return Dtype::kFp16;
  if (n == "bf16" || n == "bfloat16") return Dtype::kBf16;
  if (n == "fp8" || n == "fp8_e4m3") return Dtype::kFp8E4M3;
  if (n == "int8") return Dtype::kInt8;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "' (want fp32, fp16, bf16, fp8, int8)"));
}

absl::string_view DtypeName(Dtype d) {
  switch (d) {
    case Dtype::kFp32: return "fp32";
    case Dtype::kFp16: return "fp16";
    case Dtype::kBf16: return "bf16";
    case Dtype::kFp8E4M3: return "fp8";
    case Dtype::kInt8: return "int8";
  }
  return "invalid";
}

uint32_t DtypeBytes(Dtype d) {
  switch (d) {
    case Dtype::kFp32: return 4;
    case Dtype::kFp16:
    case Dtype::kBf16: return 2;
    case Dtype::kFp8E4M3:
    case Dtype::kInt8: return 1;
  }
  return 0;
}

bool DtypeHasScales(Dtype d) { return d == Dtype::kFp8E4M3 || d == Dtype::kInt8; }

uint64_t Layout::LayerBytes() const {
  uint64_t per_token_head = uint64_t(head_dim) * DtypeBytes(dtype);
  if (DtypeHasScales(dtype)) per_token_head += sizeof(float);
  return 2ull * kv_heads * tokens_per_page * per_token_head;  // K and V
}

absl::Status Layout::Validate() const {
  auto bad = [this](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("invalid layout ", DebugString(), ": ", why));
  };
  if (DtypeBytes(dtype) == 0) return bad("unknown dtype");
  if (layers == 0 || layers > 1024) return bad("layers must be in [1, 1024]");
  if (kv_heads == 0 || kv_heads > 1024) return bad("kv_heads must be in [1, 1024]");
  if (head_dim == 0 || head_dim > 4096) return bad("head_dim must be in [1, 4096]");
  if (tokens_per_page == 0 || tokens_per_page > 65536)
    return bad("tokens_per_page must be in [1, 65536]");
  if (PageBytes() > kMaxPageBytes)
    return bad(absl::StrCat("page of ", PageBytes(), " bytes exceeds the limit of ",
                            kMaxPageBytes));
  return absl::OkStatus();
}

uint64_t Layout::Id() const {
  // Same tagged encoding as page keys: tag | u32 LE length | u32 LE value.
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  const absl::string_view domain = "kvtier/layout";
  auto field = [&ctx](uint8_t tag, const void* p, uint32_t n) {
    uint8_t hdr[5] = {tag, uint8_t(n), uint8_t(n >> 8), uint8_t(n >> 16), uint8_t(n >> 24)};
    SHA256_Update(&ctx, hdr, 5);
    SHA256_Update(&ctx, p, n);
  };
  auto u32 = [&field](uint8_t tag, uint32_t v) {
    uint8_t b[4] = {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)};
    field(tag, b, 4);
  };
  field(0x00, domain.data(), domain.size());
  u32(0x01, layers);
  u32(0x02, kv_heads);
  u32(0x03, head_dim);
  u32(0x04, tokens_per_page);
  u32(0x05, static_cast<uint32_t>(dtype));
  uint8_t digest[SHA256_DIGEST_LENGTH];
  SHA256_Final(digest, &ctx);
  uint64_t id = 0;
  for (int i = 0; i < 8; ++i) id |= uint64_t(digest[i]) << (8 * i);
  return id;
}

std::string Layout::DebugString() const {
  return absl::StrCat("{layers=", layers, " kv_heads=", kv_heads, " head_dim=", head_dim,
                      " tokens_per_page=", tokens_per_page, " dtype=", DtypeName(dtype), "}");
}

}  // namespace kvtier
