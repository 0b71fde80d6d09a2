// api/: page keys (fixed vectors shared with page_key_vectors.py), layouts,
// error-code mapping and the status macros.
#include "gtest/gtest.h"
#include "kvtier/byte_size.h"
#include "kvtier/errors.h"
#include "kvtier/layout.h"
#include "kvtier/page_key.h"
#include "kvtier/status_macros.h"

namespace kvtier {
namespace {

Layout VectorLayout() { return Layout{2, 4, 64, 4, Dtype::kFp16}; }

TEST(LayoutTest, IdMatchesPythonReference) {
  EXPECT_EQ(VectorLayout().Id(), 0x552141601f62c93full);
}

TEST(PageKeyTest, ChainMatchesPythonReference) {
  std::vector<uint32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  auto keys = DeriveChain(VectorLayout().Id(), 4, tokens);
  ASSERT_EQ(keys.size(), 2u);  // the partial third block gets no key
  EXPECT_EQ(keys[0].ToHex(), "8496de4aca900290c039826d1d5cc69f");
  EXPECT_EQ(keys[1].ToHex(), "737bf54be7c67275451dbc738ce8cd9a");
}

TEST(PageKeyTest, SingleBlockMatchesPythonReference) {
  std::vector<uint32_t> tokens = {0xFFFFFFFFu, 0, 7, 42};
  EXPECT_EQ(DerivePageKey(VectorLayout().Id(), PageKey::Zero(), tokens).ToHex(),
            "9bad0f31b1d073a910f61681022cbd13");
}

TEST(PageKeyTest, PrefixDeterminesKey) {
  uint64_t lid = VectorLayout().Id();
  std::vector<uint32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint32_t> b = {1, 2, 3, 4, 5, 6, 7, 9};
  std::vector<uint32_t> c = {0, 2, 3, 4, 5, 6, 7, 8};
  auto ka = DeriveChain(lid, 4, a), kb = DeriveChain(lid, 4, b), kc = DeriveChain(lid, 4, c);
  EXPECT_EQ(ka[0], kb[0]);  // same first block
  EXPECT_NE(ka[1], kb[1]);
  EXPECT_NE(ka[1], kc[1]);  // same second block, different prefix
  EXPECT_NE(DeriveChain(Layout{2, 4, 64, 4, Dtype::kBf16}.Id(), 4, a)[0], ka[0]);
}

TEST(PageKeyTest, HexAndPackRoundTrip) {
  auto k = DerivePageKey(1, PageKey::Zero(), std::vector<uint32_t>{1, 2});
  auto back = PageKey::FromHex(k.ToHex());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, k);
  EXPECT_FALSE(PageKey::FromHex("zz").ok());
  EXPECT_FALSE(PageKey::FromHex(std::string(32, 'g')).ok());
  std::vector<PageKey> keys = {k, PageKey::Zero()};
  auto unpacked = UnpackKeys(PackKeys(keys));
  ASSERT_TRUE(unpacked.ok());
  EXPECT_EQ(*unpacked, keys);
  EXPECT_FALSE(UnpackKeys(std::string(17, 'x')).ok());
}

TEST(LayoutTest, PageBytes) {
  Layout l{32, 8, 128, 256, Dtype::kFp16};
  EXPECT_EQ(l.PageBytes(), 32ull * 2 * 8 * 256 * 128 * 2);
  EXPECT_EQ(l.LayerBytes() * 32, l.PageBytes());
  Layout q{1, 2, 64, 16, Dtype::kInt8};  // + one fp32 scale per token per head, K and V
  EXPECT_EQ(q.PageBytes(), 2ull * 2 * 16 * (64 + 4));
  EXPECT_TRUE(l.Validate().ok());
}

TEST(LayoutTest, ValidateNamesTheProblem) {
  Layout l{0, 8, 128, 256, Dtype::kFp16};
  auto st = l.Validate();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("layers"), std::string::npos);
  Layout huge{1024, 1024, 4096, 65536, Dtype::kFp32};
  EXPECT_NE(huge.Validate().message().find("exceeds"), std::string::npos);
  Layout bad_dtype{1, 1, 1, 1, static_cast<Dtype>(99)};
  EXPECT_FALSE(bad_dtype.Validate().ok());
  EXPECT_TRUE(ParseDtype("bf16").ok());
  EXPECT_FALSE(ParseDtype("fp64").ok());
}

TEST(ErrorsTest, RoundTrip) {
  for (int c = 0; c <= 12; ++c) {
    auto code = static_cast<ErrorCode>(c);
    EXPECT_EQ(ToErrorCode(ToStatusCode(code)), code);
  }
  auto st = MakeStatus(ErrorCode::kOutOfRange, "offset past end");
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(st.message(), "offset past end");
}

absl::StatusOr<int> Half(int x) {
  if (x % 2) return absl::InvalidArgumentError("odd");
  return x / 2;
}
absl::StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}
absl::Status Check(int x) {
  RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusMacrosTest, PropagateErrors) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().message(), "odd");
  EXPECT_TRUE(Check(2).ok());
  EXPECT_FALSE(Check(3).ok());
}

TEST(ByteSizeTest, Units) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("1GiB"), 1ull << 30);
  EXPECT_EQ(*ParseByteSize("512mb"), 512ull << 20);
  EXPECT_EQ(*ParseByteSize("1.5k"), 1536u);
  EXPECT_FALSE(ParseByteSize("lots").ok());
  EXPECT_FALSE(ParseByteSize("1XB").ok());
  EXPECT_FALSE(ParseByteSize("").ok());
}

}  // namespace
}  // namespace kvtier
