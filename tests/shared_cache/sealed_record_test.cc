// Sealed shared-cache records and their keys: round trips, every region of a
// record tampered with, records of other tenants, fleets and names, key
// rotation, and the secret file's format and permissions.
#include "tiers/shared_cache/sealed_record.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tiers/shared_cache/cache_keys.h"

namespace kvtier::tiers::shared_cache {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::array<uint8_t, kClusterSecretBytes> MakeSecret(uint8_t seed) {
  std::array<uint8_t, kClusterSecretBytes> s;
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(seed * 31 + i + 1);
  return s;
}

ClusterSecrets Secrets(std::vector<uint8_t> seeds) {
  ClusterSecrets out;
  for (uint8_t seed : seeds) out.secrets.push_back(MakeSecret(seed));
  return out;
}

TenantKeys Keys(const ClusterSecrets& secrets, absl::string_view tenant = "tenant-a",
                absl::string_view tenant_secret = "s3cret") {
  auto keys = DeriveTenantKeys(secrets, tenant, tenant_secret);
  EXPECT_TRUE(keys.ok()) << keys.status();
  return *keys;
}

PageKey Key(uint8_t seed) {
  PageKey k;
  for (size_t i = 0; i < k.bytes.size(); ++i) k.bytes[i] = static_cast<uint8_t>(seed + 7 * i);
  return k;
}

std::string Body(size_t n, uint8_t seed = 1) {
  std::string b(n, '\0');
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<char>((i * 131 + seed) & 0xff);
  return b;
}

constexpr absl::string_view kNs = "tenant-a";

class SealTest : public ::testing::Test {
 protected:
  std::string SealOrDie(const SealKey& key, absl::string_view body, absl::string_view ns = kNs,
                        const PageKey& page = Key(1)) {
    auto rec = Seal(key, ns, page, Key(2), body);
    EXPECT_TRUE(rec.ok()) << rec.status();
    return rec.ok() ? *rec : std::string();
  }
  // Opens `value` as (ns, page) of `expected` bytes; returns the failure.
  OpenFailure OpenAs(const TenantKeys& keys, absl::string_view value, uint64_t expected,
                     absl::string_view ns = kNs, const PageKey& page = Key(1)) {
    dst_.assign(expected + 1, 0x5a);
    OpenFailure failure = OpenFailure::kAuthentication;
    auto opened = Open(keys, value, ns, page, expected, dst_.data(), &failure);
    EXPECT_EQ(opened.ok(), failure == OpenFailure::kNone);
    if (!opened.ok()) {
      EXPECT_EQ(opened.status().code(), absl::StatusCode::kDataLoss) << opened.status();
    }
    return failure;
  }

  TenantKeys keys_ = Keys(Secrets({1}));
  std::vector<uint8_t> dst_;
};

TEST_F(SealTest, RoundTripsAtSeveralSizes) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{4096}, size_t{256 * 1024 + 3}}) {
    SCOPED_TRACE(n);
    const std::string body = Body(n, static_cast<uint8_t>(n));
    const std::string rec = SealOrDie(keys_.current, body);
    ASSERT_EQ(rec.size(), kSealOverheadBytes + n);
    // The page bytes do not appear in the clear.
    if (n >= 16) {
      EXPECT_FALSE(absl::StrContains(rec, body.substr(0, 16)));
    }
    std::vector<uint8_t> dst(n + 1, 0xee);
    OpenFailure failure = OpenFailure::kFormat;
    auto opened = Open(keys_, rec, kNs, Key(1), n, dst.data(), &failure);
    ASSERT_TRUE(opened.ok()) << opened.status();
    EXPECT_EQ(failure, OpenFailure::kNone);
    EXPECT_EQ(opened->parent, Key(2));
    EXPECT_EQ(opened->bytes, n);
    EXPECT_EQ(std::string(dst.begin(), dst.begin() + n), body);
    EXPECT_EQ(dst[n], 0xee) << "wrote past expected_bytes";
  }
}

// A publisher recycles record buffers: sealing into one that held a larger
// or a smaller record (of another page, with other bytes) gives a record that
// opens as the new page only, with nothing of the old one left in it.
TEST_F(SealTest, SealIntoARecycledBufferLeavesNothingOfTheOldRecord) {
  std::string buf;
  ASSERT_TRUE(SealInto(keys_.current, kNs, Key(7), Key(8), Body(65536, 9), &buf).ok());
  for (size_t n : {size_t{4096}, size_t{65536}, size_t{65536 + 100}, size_t{0}}) {
    SCOPED_TRACE(n);
    const std::string body = Body(n, static_cast<uint8_t>(n + 3));
    ASSERT_TRUE(SealInto(keys_.current, kNs, Key(1), Key(2), body, &buf).ok());
    ASSERT_EQ(buf.size(), kSealOverheadBytes + n);
    std::vector<uint8_t> dst(n + 1, 0xee);
    auto opened = Open(keys_, buf, kNs, Key(1), n, dst.data(), nullptr);
    ASSERT_TRUE(opened.ok()) << opened.status();
    EXPECT_EQ(opened->parent, Key(2));
    EXPECT_EQ(std::string(dst.begin(), dst.begin() + n), body);
    EXPECT_EQ(OpenAs(keys_, buf, n, kNs, Key(7)), OpenFailure::kAuthentication);
  }
}

TEST_F(SealTest, NullFailurePointerIsAllowed) {
  const std::string rec = SealOrDie(keys_.current, Body(10));
  std::vector<uint8_t> dst(10);
  EXPECT_TRUE(Open(keys_, rec, kNs, Key(1), 10, dst.data(), nullptr).ok());
  EXPECT_FALSE(Open(keys_, rec, "other", Key(1), 10, dst.data(), nullptr).ok());
}

TEST_F(SealTest, NoncesDifferBetweenSealsOfTheSameBody) {
  const std::string body = Body(4096);
  const std::string a = SealOrDie(keys_.current, body);
  const std::string b = SealOrDie(keys_.current, body);
  EXPECT_NE(a.substr(16, kSealNonceBytes), b.substr(16, kSealNonceBytes));
  EXPECT_NE(a.substr(kSealHeaderBytes), b.substr(kSealHeaderBytes));
}

TEST_F(SealTest, TamperingWithEachRegionFails) {
  constexpr size_t n = 4096;
  const std::string body = Body(n);
  const std::string rec = SealOrDie(keys_.current, body);
  struct Case {
    const char* region;
    size_t offset;
    OpenFailure want;
  };
  const Case cases[] = {
      {"magic", 0, OpenFailure::kFormat},
      {"version", 4, OpenFailure::kFormat},
      {"reserved", 6, OpenFailure::kFormat},
      {"key id", 8, OpenFailure::kUnknownKey},
      {"nonce", 16, OpenFailure::kAuthentication},
      {"parent", 28, OpenFailure::kAuthentication},
      {"parent end", 43, OpenFailure::kAuthentication},
      {"body_bytes", 44, OpenFailure::kSize},
      {"body first", kSealHeaderBytes, OpenFailure::kAuthentication},
      {"body middle", kSealHeaderBytes + n / 2, OpenFailure::kAuthentication},
      {"body last", kSealHeaderBytes + n - 1, OpenFailure::kAuthentication},
      {"tag first", kSealHeaderBytes + n, OpenFailure::kAuthentication},
      {"tag last", rec.size() - 1, OpenFailure::kAuthentication},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.region);
    std::string bad = rec;
    bad[c.offset] ^= 0x01;
    EXPECT_EQ(OpenAs(keys_, bad, n), c.want);
    if (c.want == OpenFailure::kAuthentication) {
      // No unauthenticated plaintext lingers in dst.
      EXPECT_EQ(std::count(dst_.begin(), dst_.begin() + n, 0), static_cast<long>(n));
    }
  }
  EXPECT_EQ(OpenAs(keys_, rec, n), OpenFailure::kNone);
}

TEST_F(SealTest, WrongNamespaceOrKeyFailsAuthentication) {
  const std::string rec = SealOrDie(keys_.current, Body(100));
  EXPECT_EQ(OpenAs(keys_, rec, 100, "tenant-b"), OpenFailure::kAuthentication);
  EXPECT_EQ(OpenAs(keys_, rec, 100, ""), OpenFailure::kAuthentication);
  EXPECT_EQ(OpenAs(keys_, rec, 100, kNs, Key(3)), OpenFailure::kAuthentication);
  // The parent is stored, not asked for: a page under the parent as key fails.
  EXPECT_EQ(OpenAs(keys_, rec, 100, kNs, Key(2)), OpenFailure::kAuthentication);
  EXPECT_EQ(OpenAs(keys_, rec, 100), OpenFailure::kNone);
}

TEST_F(SealTest, FailureMessageNamesFailureNamespaceAndKey) {
  const std::string rec = SealOrDie(keys_.current, Body(100));
  std::vector<uint8_t> dst(100);
  OpenFailure failure;
  auto opened = Open(keys_, rec, "tenant-b", Key(1), 100, dst.data(), &failure);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(opened.status().message(), HasSubstr("authentication"));
  EXPECT_THAT(opened.status().message(), HasSubstr("tenant-b"));
  EXPECT_THAT(opened.status().message(), HasSubstr(Key(1).ToHex()));
  EXPECT_THAT(opened.status().message(), HasSubstr("forged, another tenant's, or corrupt"));
}

TEST_F(SealTest, AnotherTenantsRecordIsUnknownKeyOrForgery) {
  // Same namespace name, another daemon: another tenant secret, or another
  // cluster secret.
  const TenantKeys other_tenant = Keys(Secrets({1}), kNs, "other-secret");
  const TenantKeys other_fleet = Keys(Secrets({9}), kNs, "s3cret");
  for (const TenantKeys* other : {&other_tenant, &other_fleet}) {
    ASSERT_NE(other->current.id, keys_.current.id);
    ASSERT_NE(other->current.key, keys_.current.key);
    std::string rec = SealOrDie(other->current, Body(300));
    EXPECT_EQ(OpenAs(keys_, rec, 300), OpenFailure::kUnknownKey);
    EXPECT_THAT(Open(keys_, rec, kNs, Key(1), 300, dst_.data(), nullptr).status().message(),
                HasSubstr("not sealed by this tenant's key"));
    // Copying our key id in gets past the id check, not past the tag.
    std::string forged = rec;
    for (int i = 0; i < 8; ++i) forged[8 + i] = static_cast<char>(keys_.current.id >> (8 * i));
    EXPECT_EQ(OpenAs(keys_, forged, 300), OpenFailure::kAuthentication);
  }
}

TEST_F(SealTest, RotationOpensPreviousUntilDropped) {
  const TenantKeys before = Keys(Secrets({1}));
  const TenantKeys during = Keys(Secrets({2, 1}));
  const TenantKeys after = Keys(Secrets({2}));
  ASSERT_TRUE(during.previous.has_value());
  EXPECT_EQ(during.previous->id, before.current.id);
  EXPECT_FALSE(after.previous.has_value());

  const std::string old_rec = SealOrDie(before.current, Body(500));
  EXPECT_EQ(OpenAs(during, old_rec, 500), OpenFailure::kNone);
  EXPECT_EQ(std::string(dst_.begin(), dst_.begin() + 500), Body(500));
  EXPECT_EQ(OpenAs(after, old_rec, 500), OpenFailure::kUnknownKey);

  const std::string new_rec = SealOrDie(during.current, Body(500));
  EXPECT_EQ(OpenAs(after, new_rec, 500), OpenFailure::kNone);
  EXPECT_EQ(OpenAs(before, new_rec, 500), OpenFailure::kUnknownKey);
}

TEST_F(SealTest, SizesAreCheckedBeforeAnythingElse) {
  constexpr size_t n = 1000;
  const std::string rec = SealOrDie(keys_.current, Body(n));
  EXPECT_EQ(OpenAs(keys_, rec + "x", n), OpenFailure::kOversized);
  EXPECT_EQ(OpenAs(keys_, rec, n - 1), OpenFailure::kOversized);
  EXPECT_EQ(OpenAs(keys_, rec.substr(0, rec.size() - 1), n), OpenFailure::kSize);
  EXPECT_EQ(OpenAs(keys_, rec.substr(0, kSealHeaderBytes), n), OpenFailure::kSize);
  EXPECT_EQ(OpenAs(keys_, "", n), OpenFailure::kSize);
  EXPECT_EQ(OpenAs(keys_, rec, n + 1), OpenFailure::kSize);
  // Garbage of the right length: its body_bytes is checked, then its magic.
  EXPECT_EQ(OpenAs(keys_, std::string(rec.size(), '\xff'), n), OpenFailure::kSize);
  std::string garbage(rec.size(), '\0');
  for (int i = 0; i < 8; ++i) garbage[44 + i] = static_cast<char>(uint64_t{n} >> (8 * i));
  EXPECT_EQ(OpenAs(keys_, garbage, n), OpenFailure::kFormat);
  // A huge expected size must not overflow the size arithmetic.
  OpenFailure failure;
  EXPECT_FALSE(Open(keys_, rec, kNs, Key(1), std::numeric_limits<uint64_t>::max(), dst_.data(),
                    &failure)
                   .ok());
  EXPECT_EQ(failure, OpenFailure::kSize);
}

TEST_F(SealTest, ForgedRecordWithValidFramingFailsAuthentication) {
  constexpr size_t n = 64;
  std::string forged(kSealOverheadBytes + n, '\0');
  auto put = [&](size_t off, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) forged[off + i] = static_cast<char>(v >> (8 * i));
  };
  put(0, kSealMagic, 4);
  put(4, kSealVersion, 2);
  put(8, keys_.current.id, 8);
  put(44, n, 8);
  for (size_t i = 16; i < forged.size(); ++i) {
    if (i < 44 || i >= kSealHeaderBytes) forged[i] = static_cast<char>(i * 37);
  }
  EXPECT_EQ(OpenAs(keys_, forged, n), OpenFailure::kAuthentication);
}

TEST_F(SealTest, ConcurrentSealAndOpen) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> dst(8192);
      for (int i = 0; i < 200; ++i) {
        const std::string body = Body(8192, static_cast<uint8_t>(t * 7 + i));
        auto rec = Seal(keys_.current, kNs, Key(t), Key(2), body);
        if (!rec.ok() ||
            !Open(keys_, *rec, kNs, Key(t), body.size(), dst.data(), nullptr).ok() ||
            std::memcmp(dst.data(), body.data(), body.size()) != 0) {
          ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(OpenFailureNameTest, NamesAreStable) {
  EXPECT_EQ(OpenFailureName(OpenFailure::kNone), "none");
  EXPECT_EQ(OpenFailureName(OpenFailure::kOversized), "oversized");
  EXPECT_EQ(OpenFailureName(OpenFailure::kSize), "size");
  EXPECT_EQ(OpenFailureName(OpenFailure::kFormat), "format");
  EXPECT_EQ(OpenFailureName(OpenFailure::kUnknownKey), "unknown_key");
  EXPECT_EQ(OpenFailureName(OpenFailure::kAuthentication), "authentication");
}

// --- keys ---

TEST(DeriveTenantKeysTest, MatchesAnIndependentHkdf) {
  // Reproduced with `openssl kdf ... HKDF` and Python's hmac: daemons of a
  // fleet built from different versions must derive the same keys.
  auto secrets = ParseSecrets(
      "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n", "test");
  ASSERT_TRUE(secrets.ok()) << secrets.status();
  auto keys = DeriveTenantKeys(*secrets, "tenant-a", "s3cret");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(absl::BytesToHexString(absl::string_view(
                reinterpret_cast<const char*>(keys->current.key.data()), 32)),
            "bae248e4cd539b433e23873c56fbdc40a5fc0819156c5fc466d436c2843f2eef");
  EXPECT_EQ(keys->current.id, 0x27bcbb7243aba17eull);
  EXPECT_EQ(SealKeyId(keys->current.key), keys->current.id);
  EXPECT_FALSE(keys->previous.has_value());
}

TEST(DeriveTenantKeysTest, LengthPrefixesSeparateTenantAndSecret) {
  const ClusterSecrets s = Secrets({1});
  EXPECT_NE(Keys(s, "ab", "c").current.key, Keys(s, "a", "bc").current.key);
  EXPECT_NE(Keys(s, "a", "").current.key, Keys(s, "", "a").current.key);
  EXPECT_EQ(Keys(s, "a", "b").current.key, Keys(s, "a", "b").current.key);
}

TEST(DeriveTenantKeysTest, RefusesNoSecretOrThree) {
  EXPECT_EQ(DeriveTenantKeys(ClusterSecrets{}, "t", "s").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DeriveTenantKeys(Secrets({1, 2, 3}), "t", "s").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DeriveTenantKeys(Secrets({1}), std::string(600, 't'), std::string(600, 's'))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

constexpr absl::string_view kHexA =
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
constexpr absl::string_view kHexB =
    "FFEEDDCCBBAA99887766554433221100ffeeddccbbaa99887766554433221100";

TEST(ParseSecretsTest, OneOrTwoSecretsWithComments) {
  auto one = ParseSecrets(absl::StrCat("# fleet secret\n\n  ", kHexA, "  # current\n"), "f");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->secrets.size(), 1u);
  EXPECT_EQ(one->secrets[0][0], 0x00);
  EXPECT_EQ(one->secrets[0][1], 0x11);
  EXPECT_EQ(one->secrets[0][31], 0xff);

  auto two = ParseSecrets(absl::StrCat(kHexA, "\r\n# previous, until rotated\r\n", kHexB), "f");
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->secrets.size(), 2u);
  EXPECT_EQ(two->secrets[1][0], 0xff);
  EXPECT_EQ(two->secrets[1][31], 0x00);
}

TEST(ParseSecretsTest, ErrorsNameFileAndLineButNotTheSecret) {
  std::string bad_hex(kHexA);
  bad_hex[10] = 'g';
  auto s = ParseSecrets(absl::StrCat("# c\n", bad_hex, "\n"), "/etc/kvtier/secret");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("/etc/kvtier/secret:2:"));
  EXPECT_THAT(s.status().message(), HasSubstr("not hex"));
  EXPECT_THAT(s.status().message(), Not(HasSubstr(bad_hex)));

  s = ParseSecrets(kHexA.substr(0, 62), "f");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("f:1:"));
  EXPECT_THAT(s.status().message(), HasSubstr("64 hex digits"));
  EXPECT_FALSE(ParseSecrets(absl::StrCat(kHexA, "00"), "f").ok());

  s = ParseSecrets(absl::StrCat(kHexA, "\n", kHexB, "\n", kHexA, "\n"), "f");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("f:3:"));
  EXPECT_THAT(s.status().message(), HasSubstr("third secret"));

  s = ParseSecrets("# only a comment\n\n", "f");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("no secret"));
  EXPECT_FALSE(ParseSecrets(std::string(64, '0'), "f").ok());
}

class SecretFileTest : public ::testing::Test {
 protected:
  std::string WriteFile(absl::string_view name, absl::string_view text, mode_t mode) {
    const std::string path = absl::StrCat(::testing::TempDir(), "/seal_test_", getpid(), "_",
                                          name);
    paths_.push_back(path);
    std::ofstream(path, std::ios::trunc) << text;
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    return path;
  }
  void TearDown() override {
    for (const std::string& p : paths_) std::remove(p.c_str());
  }
  std::vector<std::string> paths_;
};

TEST_F(SecretFileTest, RefusesGroupOrOtherReadable) {
  const std::string path = WriteFile("open", absl::StrCat(kHexA, "\n"), 0644);
  auto s = LoadSecretFile(path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.status().message(), HasSubstr(path));
  EXPECT_THAT(s.status().message(), HasSubstr("0644"));
  EXPECT_THAT(s.status().message(), HasSubstr(absl::StrCat("chmod 600 ", path)));
  EXPECT_EQ(LoadSecretFile(WriteFile("g", kHexA, 0640)).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(SecretFileTest, AcceptsOwnerOnly) {
  auto s = LoadSecretFile(WriteFile("ok", absl::StrCat(kHexA, "\n", kHexB, "\n"), 0600));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->secrets.size(), 2u);
  EXPECT_TRUE(LoadSecretFile(WriteFile("ro", kHexA, 0400)).ok());
}

TEST_F(SecretFileTest, ParseErrorsNameThePath) {
  const std::string path = WriteFile("bad", "# x\nnot-a-secret\n", 0600);
  auto s = LoadSecretFile(path);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr(absl::StrCat(path, ":2:")));
}

TEST_F(SecretFileTest, MissingFileOrDirectoryFails) {
  EXPECT_EQ(LoadSecretFile(absl::StrCat(::testing::TempDir(), "/no_such_secret")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(LoadSecretFile(::testing::TempDir()).ok());
}

}  // namespace
}  // namespace kvtier::tiers::shared_cache
