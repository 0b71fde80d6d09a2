// Secret files and per-tenant seal keys (cache_keys.h). The derivation is part
// of the record format: daemons of one fleet must derive the same key from
// the same secret, so change it only with a new salt ("...-v2").
#include "tiers/shared_cache/cache_keys.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace kvtier::tiers::shared_cache {
namespace {

constexpr absl::string_view kHkdfSalt = "kvtier-shared-cache-v1";
constexpr absl::string_view kKeyIdDomain = "kvtier-seal-key-id";
// A secret file is two short lines; anything bigger is not one.
constexpr size_t kMaxSecretFileBytes = 64 * 1024;
// OpenSSL 3.0's HKDF keeps `info` in a fixed 1 KiB buffer.
constexpr size_t kMaxHkdfInfoBytes = 1024;

// Wipes a buffer that held secret bytes when it goes out of scope.
class Wipe {
 public:
  explicit Wipe(std::string* s) : s_(s) {}
  ~Wipe() { OPENSSL_cleanse(s_->data(), s_->size()); }
  Wipe(const Wipe&) = delete;
  Wipe& operator=(const Wipe&) = delete;

 private:
  std::string* s_;
};

void AppendU32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* c) const { EVP_PKEY_CTX_free(c); }
};

absl::StatusOr<std::array<uint8_t, kSealKeyBytes>> Hkdf(
    const std::array<uint8_t, kClusterSecretBytes>& secret, absl::string_view info) {
  std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr));
  std::array<uint8_t, kSealKeyBytes> out;
  size_t out_len = out.size();
  if (ctx == nullptr || EVP_PKEY_derive_init(ctx.get()) <= 0 ||
      EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_salt(ctx.get(), reinterpret_cast<const uint8_t*>(kHkdfSalt.data()),
                                  static_cast<int>(kHkdfSalt.size())) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), secret.data(), static_cast<int>(secret.size())) <= 0 ||
      EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), reinterpret_cast<const uint8_t*>(info.data()),
                                  static_cast<int>(info.size())) <= 0 ||
      EVP_PKEY_derive(ctx.get(), out.data(), &out_len) <= 0 || out_len != out.size()) {
    return absl::InternalError("shared cache: HKDF-SHA256 (OpenSSL) failed");
  }
  return out;
}

// Checks the file behind `fd` before a byte of it is read: fstat on the open
// descriptor, so the file checked is the file read.
absl::Status CheckSecretFileMode(int fd, const std::string& path) {
  struct stat st;
  if (fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("secret file ", path, " is not a regular file"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "secret file %s has mode %04o: group and others may read it; run `chmod 600 %s`", path,
        st.st_mode & 07777, path));
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxSecretFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "secret file ", path, " is ", st.st_size, " bytes; a secret file is one or two lines"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClusterSecrets> ParseSecrets(absl::string_view text, absl::string_view origin) {
  ClusterSecrets out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = line.substr(0, line.find('#'));
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    // Errors never quote the line: it may be a secret with a typo in it.
    const std::string where = absl::StrCat(origin, ":", line_no, ": ");
    if (out.secrets.size() == 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "a third secret; the file holds the current secret and at most one previous"));
    }
    if (line.size() != 2 * kClusterSecretBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "a secret is 64 hex digits (32 bytes); this line has ", line.size(),
          " characters (make one with `openssl rand -hex 32`)"));
    }
    std::array<uint8_t, kClusterSecretBytes> secret{};
    bool all_zero = true;
    for (size_t i = 0; i < secret.size(); ++i) {
      const char hi = line[2 * i], lo = line[2 * i + 1];
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(hi)) ||
          !absl::ascii_isxdigit(static_cast<unsigned char>(lo))) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "not hex (a secret is 64 hex digits)"));
      }
      auto nibble = [](char c) {
        return static_cast<uint8_t>(absl::ascii_isdigit(static_cast<unsigned char>(c))
                                        ? c - '0'
                                        : absl::ascii_tolower(static_cast<unsigned char>(c)) -
                                              'a' + 10);
      };
      secret[i] = static_cast<uint8_t>(nibble(hi) << 4 | nibble(lo));
      all_zero = all_zero && secret[i] == 0;
    }
    // An all-zero line is a placeholder left in a template, not a secret.
    if (all_zero) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "the secret is all zeros (make one with `openssl rand -hex 32`)"));
    }
    out.secrets.push_back(secret);
  }
  if (out.secrets.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": no secret (expected one or two lines of 64 hex digits)"));
  }
  return out;
}

absl::StatusOr<ClusterSecrets> LoadSecretFile(const std::string& path) {
  // O_NONBLOCK: a FIFO in the secret's place must not hang the open; it is
  // refused as "not a regular file" right after.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open secret file ", path));
  std::string text;
  Wipe wipe(&text);
  absl::Status status = CheckSecretFileMode(fd, path);
  char buf[4096];
  while (status.ok()) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) status = absl::ErrnoToStatus(errno, absl::StrCat("read secret file ", path));
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxSecretFileBytes) {
      status = absl::InvalidArgumentError(absl::StrCat("secret file ", path, " is too large"));
    }
  }
  OPENSSL_cleanse(buf, sizeof(buf));
  close(fd);
  if (!status.ok()) return status;
  return ParseSecrets(text, path);
}

uint64_t SealKeyId(const std::array<uint8_t, kSealKeyBytes>& key) {
  uint8_t input[kKeyIdDomain.size() + kSealKeyBytes];
  std::memcpy(input, kKeyIdDomain.data(), kKeyIdDomain.size());
  std::memcpy(input + kKeyIdDomain.size(), key.data(), key.size());
  uint8_t digest[EVP_MAX_MD_SIZE];
  unsigned int digest_len = 0;
  const int ok = EVP_Digest(input, sizeof(input), digest, &digest_len, EVP_sha256(), nullptr);
  OPENSSL_cleanse(input, sizeof(input));
  // SHA-256 of a fixed-size buffer cannot fail short of a broken library,
  // which no caller could recover from either.
  if (ok != 1 || digest_len < 8) std::abort();
  uint64_t id = 0;
  for (int i = 7; i >= 0; --i) id = id << 8 | digest[i];
  return id;
}

absl::StatusOr<TenantKeys> DeriveTenantKeys(const ClusterSecrets& secrets,
                                           absl::string_view tenant,
                                           absl::string_view tenant_secret) {
  if (secrets.secrets.empty() || secrets.secrets.size() > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared cache: ", secrets.secrets.size(),
        " cluster secrets; expected the current one and at most one previous"));
  }
  if (8 + tenant.size() + tenant_secret.size() > kMaxHkdfInfoBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared cache: tenant name and tenant secret are ", tenant.size() + tenant_secret.size(),
        " bytes together; at most ", kMaxHkdfInfoBytes - 8));
  }
  std::string info;
  Wipe wipe(&info);
  info.reserve(8 + tenant.size() + tenant_secret.size());
  AppendU32(static_cast<uint32_t>(tenant.size()), &info);
  info.append(tenant.data(), tenant.size());
  AppendU32(static_cast<uint32_t>(tenant_secret.size()), &info);
  info.append(tenant_secret.data(), tenant_secret.size());

  std::vector<SealKey> keys;
  for (const auto& secret : secrets.secrets) {
    auto key = Hkdf(secret, info);
    if (!key.ok()) return key.status();
    keys.push_back(SealKey{*key, SealKeyId(*key)});
  }
  TenantKeys out;
  out.current = keys[0];
  if (keys.size() > 1) out.previous = keys[1];
  return out;
}

}  // namespace kvtier::tiers::shared_cache
