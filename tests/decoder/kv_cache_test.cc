// PagedKvCache bookkeeping: page allocation per block, commit limits,
// truncation, reset and the page layout the daemon sees.
#include <gtest/gtest.h>

#include "kvtier/decoder/kv_cache.h"

namespace kvtier::decoder {
namespace {

KvCacheOptions Opts(uint32_t pages, uint32_t window = 0) {
  return {Layout{2, 2, 64, 16, Dtype::kFp16}, pages, window};
}

TEST(KvCacheTest, PagesFollowTheBlockTable) {
  auto c = PagedKvCache::Create(Opts(8));
  ASSERT_TRUE(c.ok()) << c.status();
  PagedKvCache& cache = **c;
  // A header (the layer-wise GET's progress word), then the pages.
  EXPECT_EQ(cache.arena().size(), kArenaHeaderBytes + 8 * cache.layout().PageBytes());
  EXPECT_LE(PagedKvCache::kProgressOffset + 8, cache.PageOffset(0));
  EXPECT_EQ(cache.View().PageBytes(), cache.layout().PageBytes());  // kernels and daemon agree
  SeqId a = cache.AddSequence(), b = cache.AddSequence();
  ASSERT_TRUE(cache.Reserve(a, 17).ok());  // 2 pages
  EXPECT_EQ(cache.BlockTable(a).size(), 2u);
  EXPECT_EQ(cache.Length(a), 0u);
  ASSERT_TRUE(cache.Commit(a, 17).ok());
  EXPECT_FALSE(cache.Commit(a, 16).ok());  // past the reserved pages
  ASSERT_TRUE(cache.Reserve(a, 15).ok());  // still fits in page 2
  EXPECT_EQ(cache.BlockTable(a).size(), 2u);
  ASSERT_TRUE(cache.Reserve(b, 16 * 6).ok());
  EXPECT_EQ(cache.free_pages(), 0u);
  absl::Status st = cache.Reserve(b, 200);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("only 0 of 8 are free"), std::string::npos) << st;
  ASSERT_TRUE(cache.Truncate(a, 5).ok());
  EXPECT_EQ(cache.BlockTable(a).size(), 1u);
  EXPECT_EQ(cache.free_pages(), 1u);
  ASSERT_TRUE(cache.RemoveSequence(b).ok());
  EXPECT_EQ(cache.RemoveSequence(b).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(cache.free_pages(), 7u);
  cache.Reset();
  EXPECT_EQ(cache.free_pages(), 8u);
  EXPECT_FALSE(cache.HasSequence(a));
}

TEST(KvCacheTest, DistinctPagesDistinctOffsets) {
  auto c = PagedKvCache::Create(Opts(4));
  ASSERT_TRUE(c.ok());
  SeqId s = (*c)->AddSequence();
  ASSERT_TRUE((*c)->Reserve(s, 64).ok());
  std::vector<int32_t> t = (*c)->BlockTable(s);
  std::sort(t.begin(), t.end());
  EXPECT_EQ(t, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ((*c)->PageOffset(3), kArenaHeaderBytes + 3 * (*c)->layout().PageBytes());
  // The kernels' view starts at page 0, past the header.
  EXPECT_EQ((*c)->View().arena, (*c)->arena().data() + (*c)->PageOffset(0));
}

TEST(KvCacheTest, SlidingWindowFreesWholePagesOnly) {
  auto c = PagedKvCache::Create(Opts(8, /*window=*/20));
  ASSERT_TRUE(c.ok());
  PagedKvCache& cache = **c;
  SeqId s = cache.AddSequence();
  ASSERT_TRUE(cache.Reserve(s, 36).ok());
  ASSERT_TRUE(cache.Commit(s, 36).ok());  // next query (36) sees 17..36: block 0 (0..15) dead
  EXPECT_EQ(cache.BlockTable(s)[0], kNoPage);
  EXPECT_NE(cache.BlockTable(s)[1], kNoPage);
  EXPECT_EQ(cache.free_pages(), 6u);
  EXPECT_TRUE(cache.Truncate(s, 35).ok());   // needs 16..: block 1, still there
  EXPECT_FALSE(cache.Truncate(s, 30).ok());  // needs 11..: block 0, freed
  EXPECT_FALSE((KvCacheOptions{Layout{}, 4}.Validate().ok()));
  EXPECT_FALSE(PagedKvCache::Create(Opts(0)).ok());
}

// A page must be PUT before the window frees it: a held sequence keeps its
// pages until Release says they are stored.
TEST(KvCacheTest, HeldPagesWaitForRelease) {
  auto c = PagedKvCache::Create(Opts(8, /*window=*/20));
  ASSERT_TRUE(c.ok());
  PagedKvCache& cache = **c;
  SeqId s = cache.AddSequence();
  ASSERT_TRUE(cache.HoldForStore(s).ok());
  ASSERT_TRUE(cache.Reserve(s, 36).ok());
  ASSERT_TRUE(cache.Commit(s, 36).ok());
  EXPECT_NE(cache.BlockTable(s)[0], kNoPage);  // behind the window, but not stored yet
  ASSERT_TRUE(cache.Release(s, 2).ok());
  EXPECT_EQ(cache.BlockTable(s)[0], kNoPage);
  EXPECT_EQ(cache.free_pages(), 6u);
}

// A windowed restore fetches only the tail the window needs.
TEST(KvCacheTest, ReserveWindowTailSkipsBlocksBehindTheWindow) {
  auto c = PagedKvCache::Create(Opts(8, /*window=*/20));
  ASSERT_TRUE(c.ok());
  PagedKvCache& cache = **c;
  SeqId s = cache.AddSequence();
  EXPECT_EQ(cache.FirstNeededBlock(70), 3u);             // the query at 70 sees 51..70
  EXPECT_FALSE(cache.ReserveWindowTail(s, 70, 4).ok());  // block 3 is still needed
  ASSERT_TRUE(cache.ReserveWindowTail(s, 70, 3).ok());
  EXPECT_EQ(cache.free_pages(), 6u);                     // blocks 3 and 4 only
  EXPECT_EQ(cache.BlockTable(s)[2], kNoPage);
  ASSERT_TRUE(cache.Commit(s, 70).ok());
  EXPECT_TRUE(cache.Truncate(s, 70).ok());
  ASSERT_TRUE(cache.RemoveSequence(s).ok());
  EXPECT_EQ(cache.free_pages(), 8u);
}

}  // namespace
}  // namespace kvtier::decoder
