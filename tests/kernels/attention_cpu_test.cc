// CPU paged attention vs the double-precision reference: sweeps of odd sizes
// (head_dim 64/80/128, tokens_per_page 1/3/16/256, GQA 1/4/8, partial last
// pages, batches of different lengths, shuffled pages) for every dtype, on
// both the AVX2 and the portable path; decode equals prefill's last row.
#include <cmath>

#include "kernel_test_util.h"
#include "reference/reference.h"

namespace kvtier::kernels::testing {
namespace {

struct Shape {
  uint32_t head_dim, tpp, group;
};

// Max of run() on the run-time-selected path (AVX2 where the CPU has it)
// and on the portable path.
template <typename Fn>
double BothIsas(Fn run) {
  const double native = run();
  ForcePortableCpuKernels(true);
  const double portable = run();
  ForcePortableCpuKernels(false);
  return std::max(native, portable);
}

// Runs a batched decode over sequences of `lens` and checks it against the
// reference; returns the max abs difference.
double DecodeVsReference(const Shape& s, KvDtype dtype, const std::vector<uint32_t>& lens,
                         uint32_t window = 0) {
  const uint32_t kv_heads = 2, q_heads = kv_heads * s.group;
  uint32_t total = 0, max_len = 0;
  for (uint32_t l : lens) total += l, max_len = std::max(max_len, l);
  TestArena arena(kv_heads, s.head_dim, s.tpp, dtype,
                  total / s.tpp + 2 * uint32_t(lens.size()) + 4);
  const uint32_t stride = (max_len + s.tpp - 1) / s.tpp + 1;
  std::vector<int32_t> tables(lens.size() * stride, -1);
  std::vector<int32_t> seq_lens;
  for (size_t i = 0; i < lens.size(); ++i) {
    auto t = arena.TakeTable(lens[i]);
    std::copy(t.begin(), t.end(), tables.begin() + i * stride);
    arena.Fill(t, lens[i]);
    seq_lens.push_back(int32_t(lens[i]));
  }
  auto q = arena.Random(lens.size() * q_heads * s.head_dim);
  std::vector<float> out(q.size(), NAN);
  DecodeParams p{arena.kv(), uint32_t(lens.size()), q_heads, 1.f / std::sqrt(float(s.head_dim)),
                 window, q.data(), out.data(), tables.data(), stride, seq_lens.data(), max_len};
  auto ws = WsBuffer(DecodeWorkspaceBytesCpu(p));
  const auto want = reference::Decode(p);
  return BothIsas([&] {
    std::fill(out.begin(), out.end(), NAN);
    EXPECT_TRUE(PagedDecodeCpu(p, {ws.data(), ws.size()}).ok());
    return MaxAbsDiff(out, want);
  });
}

double PrefillVsReference(const Shape& s, KvDtype dtype, uint32_t cached, uint32_t num_new,
                          uint32_t window = 0) {
  const uint32_t kv_heads = 2, q_heads = kv_heads * s.group, len = cached + num_new;
  TestArena arena(kv_heads, s.head_dim, s.tpp, dtype, len / s.tpp + 3);
  auto table = arena.TakeTable(len);
  arena.Fill(table, len);
  auto q = arena.Random(size_t(num_new) * q_heads * s.head_dim);
  std::vector<float> out(q.size(), NAN);
  PrefillParams p{arena.kv(), q_heads, 1.f / std::sqrt(float(s.head_dim)), window, q.data(),
                  out.data(), table.data(), uint32_t(table.size()), cached, num_new};
  auto ws = WsBuffer(PrefillWorkspaceBytesCpu(p));
  const auto want = reference::Prefill(p);
  return BothIsas([&] {
    std::fill(out.begin(), out.end(), NAN);
    EXPECT_TRUE(PagedPrefillCpu(p, {ws.data(), ws.size()}).ok());
    return MaxAbsDiff(out, want);
  });
}

TEST(AttentionCpu, DecodeSweepMatchesReference) {
  for (uint32_t d : {64u, 80u, 128u}) {
    for (uint32_t tpp : {1u, 3u, 16u, 256u}) {
      for (uint32_t g : {1u, 4u, 8u}) {
        for (KvDtype dt : kAllDtypes) {
          SCOPED_TRACE(absl::StrCat("d=", d, " tpp=", tpp, " group=", g, " ", Name(dt)));
          // Lengths: 1, one past a page, a partial page, several pages.
          const std::vector<uint32_t> lens = {1, tpp + 1, 2 * tpp + tpp / 2 + 1, 5 * tpp + 2, 300};
          EXPECT_LE(DecodeVsReference({d, tpp, g}, dt, lens), kKernelVsReferenceTol);
        }
      }
    }
  }
}

TEST(AttentionCpu, PrefillSweepMatchesReference) {
  for (uint32_t d : {64u, 80u, 128u}) {
    for (uint32_t tpp : {1u, 3u, 16u, 256u}) {
      for (uint32_t g : {1u, 4u, 8u}) {
        for (KvDtype dt : kAllDtypes) {
          SCOPED_TRACE(absl::StrCat("d=", d, " tpp=", tpp, " group=", g, " ", Name(dt)));
          EXPECT_LE(PrefillVsReference({d, tpp, g}, dt, 0, 37), kKernelVsReferenceTol);
          EXPECT_LE(PrefillVsReference({d, tpp, g}, dt, tpp + 5, 21), kKernelVsReferenceTol);
        }
      }
    }
  }
}

TEST(AttentionCpu, LongContextsUpTo4kMatchReference) {
  // Long enough that decode splits each sequence (split-K + combine).
  for (KvDtype dt : kAllDtypes) {
    SCOPED_TRACE(Name(dt));
    EXPECT_LE(DecodeVsReference({64, 16, 1}, dt, {4096}), kKernelVsReferenceTol);
    EXPECT_LE(DecodeVsReference({128, 256, 4}, dt, {4000, 1, 2049}), kKernelVsReferenceTol);
  }
  EXPECT_LE(PrefillVsReference({64, 256, 4}, KvDtype::kFp16, 1000, 300), kKernelVsReferenceTol);
}

TEST(AttentionCpu, SlidingWindowMatchesReference) {
  for (uint32_t w : {1u, 7u, 100u, 5000u}) {
    SCOPED_TRACE(absl::StrCat("window=", w));
    EXPECT_LE(DecodeVsReference({64, 16, 4}, KvDtype::kFp16, {1, 50, 1030}, w),
              kKernelVsReferenceTol);
    EXPECT_LE(PrefillVsReference({64, 16, 4}, KvDtype::kBf16, 90, 40, w), kKernelVsReferenceTol);
  }
}

TEST(AttentionCpu, MqaSingleKvHead) {
  // MQA: every query head shares kv head 0.
  TestArena arena(1, 64, 16, KvDtype::kFp32, 8);
  auto table = arena.TakeTable(40);
  arena.Fill(table, 40);
  const uint32_t q_heads = 6;
  auto q = arena.Random(q_heads * 64);
  std::vector<float> out(q.size());
  int32_t len = 40;
  DecodeParams p{arena.kv(), 1, q_heads, 0.125f, 0, q.data(), out.data(), table.data(),
                 uint32_t(table.size()), &len, 40};
  auto ws = WsBuffer(DecodeWorkspaceBytesCpu(p));
  ASSERT_TRUE(PagedDecodeCpu(p, {ws.data(), ws.size()}).ok());
  EXPECT_LE(MaxAbsDiff(out, reference::Decode(p)), kKernelVsReferenceTol);
}

// Decoding position n-1 must give exactly what prefill computed for its
// last row (same pages, same query).
TEST(AttentionCpu, DecodeEqualsPrefillLastRow) {
  for (KvDtype dt : kAllDtypes) {
    SCOPED_TRACE(Name(dt));
    const uint32_t d = 64, q_heads = 8, len = 700, tpp = 16;
    TestArena arena(2, d, tpp, dt, 64);
    auto table = arena.TakeTable(len);
    arena.Fill(table, len);
    auto q = arena.Random(size_t(len) * q_heads * d);
    std::vector<float> pre(q.size()), dec(q_heads * d);
    PrefillParams pp{arena.kv(), q_heads, 0.125f, 0, q.data(), pre.data(), table.data(),
                     uint32_t(table.size()), 0, len};
    auto ws = WsBuffer(PrefillWorkspaceBytesCpu(pp));
    ASSERT_TRUE(PagedPrefillCpu(pp, {ws.data(), ws.size()}).ok());
    int32_t seq_len = len;
    DecodeParams dp{arena.kv(), 1, q_heads, 0.125f, 0, q.data() + size_t(len - 1) * q_heads * d,
                    dec.data(), table.data(), uint32_t(table.size()), &seq_len, len};
    auto ws2 = WsBuffer(DecodeWorkspaceBytesCpu(dp));
    ASSERT_TRUE(PagedDecodeCpu(dp, {ws2.data(), ws2.size()}).ok());
    for (uint32_t i = 0; i < q_heads * d; ++i)
      ASSERT_NEAR(dec[i], pre[size_t(len - 1) * q_heads * d + i], 1e-5) << i;
  }
}

TEST(AttentionCpu, RejectsBadInputWithNamedField) {
  TestArena arena(2, 64, 16, KvDtype::kFp16, 4);
  auto table = arena.TakeTable(32);
  std::vector<float> q(4 * 64), out(4 * 64);
  int32_t len = 32;
  DecodeParams p{arena.kv(), 1, 4, 0.125f, 0, q.data(), out.data(), table.data(), 2, &len, 32};
  auto ws = WsBuffer(DecodeWorkspaceBytesCpu(p));
  Workspace good{ws.data(), ws.size()};
  ASSERT_TRUE(PagedDecodeCpu(p, good).ok());

  DecodeParams bad = p;
  bad.num_q_heads = 3;
  EXPECT_NE(PagedDecodeCpu(bad, good).message().find("num_q_heads = 3"), std::string::npos);
  len = 33;
  EXPECT_NE(PagedDecodeCpu(p, good).message().find("seq_lens[0] = 33 outside"),
            std::string::npos);
  len = 40;
  bad = p;
  bad.max_seq_len = 40;
  EXPECT_NE(PagedDecodeCpu(bad, good).message().find("need 3 blocks"), std::string::npos);
  len = 0;
  EXPECT_NE(PagedDecodeCpu(p, good).message().find("seq_lens[0] = 0"), std::string::npos);
  len = 32;
  table[1] = 4;  // == num_pages
  EXPECT_NE(PagedDecodeCpu(p, good).message().find("block_table[1] = 4"), std::string::npos);
  table[1] = 1;
  EXPECT_NE(PagedDecodeCpu(p, {ws.data(), 16}).message().find("workspace of 16 bytes"),
            std::string::npos);
  bad = p;
  bad.kv.layer = 2;
  EXPECT_NE(PagedDecodeCpu(bad, good).message().find("layer = 2"), std::string::npos);

  PrefillParams pp{arena.kv(), 4, 0.125f, 0, q.data(), out.data(), table.data(), 1, 10, 7};
  auto ws3 = WsBuffer(PrefillWorkspaceBytesCpu(pp));
  EXPECT_NE(PagedPrefillCpu(pp, {ws3.data(), ws3.size()}).message().find("need 2 blocks"),
            std::string::npos);
}

}  // namespace
}  // namespace kvtier::kernels::testing
