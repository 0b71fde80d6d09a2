// The page pattern kvtier-stress writes and checks (tools/common/page_pattern.h,
// FillFastPattern/CheckFastPattern): intact pages pass, and every kind of
// damage the replay must catch is found at its exact first wrong byte.
#include <gtest/gtest.h>

#include <vector>

#include "tools/common/page_pattern.h"
#include "tools/stress/stress_options.h"

namespace kvtier::tools {
namespace {

PageKey Key(uint64_t id) { return stress::KeyForPage(0x1234, 0x5678, id); }

TEST(FastPatternTest, IntactPagesPassAtOddSizes) {
  for (uint64_t n : std::vector<uint64_t>{0, 1, 7, 8, 4095, 4096, 4100, 65536 + 3}) {
    std::vector<uint8_t> page(n);
    FillFastPattern(Key(1), page.data(), n);
    EXPECT_EQ(CheckFastPattern(Key(1), page.data(), n), n) << n;
  }
}

TEST(FastPatternTest, FindsTheFirstWrongByte) {
  const uint64_t n = 65536 + 5;
  std::vector<uint8_t> page(n);
  for (uint64_t at : std::vector<uint64_t>{0, 1, 4095, 4096, 40000, n - 6, n - 1}) {
    FillFastPattern(Key(2), page.data(), n);
    page[at] ^= 0x10;
    EXPECT_EQ(CheckFastPattern(Key(2), page.data(), n), at);
  }
}

TEST(FastPatternTest, OtherKeysShiftedCopiesAndZerosFail) {
  const uint64_t n = 1 << 16;
  std::vector<uint8_t> page(n), zeros(n, 0);
  FillFastPattern(Key(3), page.data(), n);
  EXPECT_EQ(CheckFastPattern(Key(4), page.data(), n), 0u);  // another page's bytes
  EXPECT_EQ(CheckFastPattern(Key(3), zeros.data(), n), 0u);
  // The same page copied 8 bytes late (its first word intact).
  std::vector<uint8_t> shifted(page.begin(), page.begin() + 8);
  shifted.insert(shifted.end(), page.begin(), page.end() - 8);
  EXPECT_EQ(CheckFastPattern(Key(3), shifted.data(), n), 8u);
  // Keys of neighbouring page ids differ, so their patterns do too.
  EXPECT_NE(Key(5), Key(6));
}

}  // namespace
}  // namespace kvtier::tools
