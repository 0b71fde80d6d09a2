// Page scatter/gather, number conversions and quantization: round trips
// within stated per-element error bounds, layer isolation, whole-page
// conversion, and attention over quantized pages within a bound derived from
// the element errors.
#include <cmath>
#include <cstring>

#include "kernel_test_util.h"
#include "kvtier/kernels/quant.h"
#include "reference/reference.h"

namespace kvtier::kernels::testing {
namespace {

TEST(Numeric, HalfRoundTripsEveryCode) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f))));
    } else {
      ASSERT_EQ(FloatToHalf(f), h) << h;
    }
  }
  EXPECT_EQ(FloatToHalf(1.f), 0x3C00);
  EXPECT_EQ(FloatToHalf(65504.f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.f), 0x7C00);  // rounds to inf
  EXPECT_EQ(FloatToHalf(0x1.0p-24f), 0x0001);
  EXPECT_EQ(FloatToHalf(0.1f), 0x2E66);
  EXPECT_EQ(FloatToHalf(1.f + 0x1.0p-11f), 0x3C00);  // tie -> even
}

TEST(Numeric, Bf16AndFp8RoundTripEveryCode) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = Bf16ToFloat(uint16_t(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(FloatToBf16(f), b) << b;
    }
  }
  for (uint32_t b = 0; b < 256; ++b) {
    const float f = Fp8E4M3ToFloat(uint8_t(b));
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(f));
    } else {
      ASSERT_EQ(FloatToFp8E4M3(f), b) << b << " " << f;
    }
  }
  EXPECT_EQ(Fp8E4M3ToFloat(0x7E), 448.f);
  EXPECT_EQ(FloatToFp8E4M3(1000.f), 0x7E);   // saturates
  EXPECT_EQ(FloatToFp8E4M3(-1000.f), 0xFE);
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), 0x1.0p-9f);  // smallest subnormal
  EXPECT_EQ(FloatToFp8E4M3(1.0625f), 0x38);    // tie between 1 and 1.125 -> even (1)
  EXPECT_EQ(FloatToFp8E4M3(1.1875f), 0x3A);    // tie between 1.125 and 1.25 -> even (1.25)
}

// Largest error a stored element may have after quantizing x, where amax is
// max |x| of its (token, head) row.
double ElemBound(KvDtype d, double x, double amax) {
  const double slack = 1 + 1e-5;
  switch (d) {
    case KvDtype::kFp32: return 0;
    case KvDtype::kFp16: return (std::fabs(x) * 0x1.0p-11 + 0x1.0p-25) * slack;
    case KvDtype::kBf16: return std::fabs(x) * 0x1.0p-8 * slack;
    case KvDtype::kInt8: return amax / 254 * slack;                  // half a step of amax/127
    case KvDtype::kFp8E4M3: return (std::fabs(x) * 0x1.0p-4 + amax / 448 * 0x1.0p-10) * slack;
  }
  return 0;
}

double RowAmax(const float* x, uint32_t d) {
  double m = 0;
  for (uint32_t i = 0; i < d; ++i) m = std::max(m, double(std::fabs(x[i])));
  return m;
}

// Checks got against want element by element with ElemBound per row.
void ExpectWithinBounds(KvDtype dt, uint32_t d, const std::vector<float>& want,
                        const std::vector<float>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t r = 0; r < want.size() / d; ++r) {
    const double amax = RowAmax(want.data() + r * d, d);
    for (uint32_t i = 0; i < d; ++i) {
      const size_t j = r * d + i;
      ASSERT_LE(std::fabs(double(got[j]) - want[j]), ElemBound(dt, want[j], amax))
          << Name(dt) << " row " << r << " elem " << i << " want " << want[j];
    }
  }
}

TEST(PageOps, ScatterGatherRoundTripWithinBounds) {
  for (KvDtype dt : kAllDtypes) {
    for (uint32_t tpp : {1u, 3u, 16u}) {
      SCOPED_TRACE(absl::StrCat(Name(dt), " tpp=", tpp));
      TestArena arena(3, 80, tpp, dt, 64);
      const uint32_t len = 45, row = 3 * 80;
      auto table = arena.TakeTable(len);
      auto [k, v] = arena.Fill(table, len);
      // Wide dynamic range in one row and an all-zero row.
      for (uint32_t i = 0; i < 80; ++i) k[5 * row + i] = std::ldexp(k[5 * row + i], -int(i % 20));
      std::fill(v.begin() + 7 * row, v.begin() + 8 * row, 0.f);
      KvCopyParams w{arena.kv(), table.data(), uint32_t(table.size()), 0, len, k.data(), v.data()};
      ASSERT_TRUE(ScatterKvCpu(w).ok());
      std::vector<float> k2(k.size(), NAN), v2(v.size(), NAN);
      KvCopyParams r{arena.kv(), table.data(), uint32_t(table.size()), 0, len, k2.data(), v2.data()};
      ASSERT_TRUE(GatherKvCpu(r).ok());
      ExpectWithinBounds(dt, 80, k, k2);
      ExpectWithinBounds(dt, 80, v, v2);
      for (uint32_t i = 0; i < 80; ++i) EXPECT_EQ(v2[7 * row + i], 0.f);
    }
  }
}

TEST(PageOps, ScatterTouchesOnlyItsLayerAndSlots) {
  TestArena arena(2, 64, 16, KvDtype::kInt8, 4);
  auto table = arena.TakeTable(32);
  const PagedKv kv = arena.kv();
  std::vector<uint8_t> before(static_cast<uint8_t*>(kv.arena),
                              static_cast<uint8_t*>(kv.arena) + kv.PageBytes() * 4);
  auto k = arena.Random(2 * 64), v = arena.Random(2 * 64);
  KvCopyParams w{kv, table.data(), 2, 17, 1, k.data(), v.data()};  // slot 1 of block 1
  ASSERT_TRUE(ScatterKvCpu(w).ok());
  const auto* after = static_cast<const uint8_t*>(kv.arena);
  for (size_t i = 0; i < before.size(); ++i) {
    const uint64_t page = i / kv.PageBytes(), in_page = i % kv.PageBytes();
    const bool in_layer = in_page >= kv.LayerBytes() && page == uint64_t(table[1]);
    if (!in_layer) {
      ASSERT_EQ(before[i], after[i]) << "byte " << i << " outside the written layer";
    }
  }
  std::vector<float> k2(k.size()), v2(v.size());
  KvCopyParams r{kv, table.data(), 2, 17, 1, k2.data(), v2.data()};
  ASSERT_TRUE(GatherKvCpu(r).ok());
  ExpectWithinBounds(KvDtype::kInt8, 64, k, k2);
}

TEST(PageOps, BatchScatterWritesEachSequenceAtItsPosition) {
  TestArena arena(2, 64, 3, KvDtype::kFp16, 16);
  const uint32_t stride = 4, row = 2 * 64;
  std::vector<int32_t> tables(3 * stride);
  for (int s = 0; s < 3; ++s) {
    auto t = arena.TakeTable(12);
    std::copy(t.begin(), t.end(), tables.begin() + s * stride);
  }
  std::vector<int32_t> pos = {0, 5, 11};
  auto k = arena.Random(3 * row), v = arena.Random(3 * row);
  KvBatchWriteParams b{arena.kv(), 3, tables.data(), stride, pos.data(), k.data(), v.data()};
  ASSERT_TRUE(ScatterKvBatchCpu(b).ok());
  for (int s = 0; s < 3; ++s) {
    std::vector<float> k2(row), v2(row);
    KvCopyParams r{arena.kv(), tables.data() + s * stride, stride, uint32_t(pos[s]), 1,
                   k2.data(), v2.data()};
    ASSERT_TRUE(GatherKvCpu(r).ok());
    ExpectWithinBounds(KvDtype::kFp16, 64, std::vector<float>(v.begin() + s * row,
                                                             v.begin() + (s + 1) * row), v2);
  }
  pos[1] = 12;  // block 4 of a 4-entry table
  EXPECT_NE(ScatterKvBatchCpu(b).message().find("need 5 blocks"), std::string::npos);
}

TEST(PageOps, RejectsBadTables) {
  TestArena arena(1, 64, 16, KvDtype::kFp32, 2);
  std::vector<int32_t> table = {0, 7};
  std::vector<float> k(64 * 20), v(64 * 20);
  KvCopyParams w{arena.kv(), table.data(), 2, 0, 20, k.data(), v.data()};
  EXPECT_NE(ScatterKvCpu(w).message().find("block_table[1] = 7"), std::string::npos);
  w.num_blocks = 1;
  EXPECT_NE(ScatterKvCpu(w).message().find("num_blocks = 1"), std::string::npos);
  w.kv.dtype = KvDtype(9);
  EXPECT_NE(ScatterKvCpu(w).message().find("dtype = 9"), std::string::npos);
}

TEST(Quant, ConvertPagesQuantizeAndBack) {
  for (KvDtype q : {KvDtype::kInt8, KvDtype::kFp8E4M3, KvDtype::kFp16, KvDtype::kBf16}) {
    SCOPED_TRACE(Name(q));
    TestArena src(2, 64, 16, KvDtype::kFp32, 3), dst(2, 64, 16, q, 3), back(2, 64, 16, KvDtype::kFp32, 3);
    auto table = src.TakeTable(48);
    std::vector<float> k[2], v[2];
    for (uint32_t layer = 0; layer < 2; ++layer) {
      PagedKv kv = src.kv();
      kv.layer = layer;
      k[layer] = src.Random(48 * 128);
      v[layer] = src.Random(48 * 128, -5, 5);
      ASSERT_TRUE(ScatterKvCpu({kv, table.data(), 3, 0, 48, k[layer].data(), v[layer].data()}).ok());
    }
    ASSERT_TRUE(ConvertPagesCpu({src.kv(), dst.kv(), table.data(), table.data(), 3}).ok());
    ASSERT_TRUE(ConvertPagesCpu({dst.kv(), back.kv(), table.data(), table.data(), 3}).ok());
    for (uint32_t layer = 0; layer < 2; ++layer) {
      PagedKv kv = back.kv();
      kv.layer = layer;
      std::vector<float> k2(48 * 128), v2(48 * 128);
      ASSERT_TRUE(GatherKvCpu({kv, table.data(), 3, 0, 48, k2.data(), v2.data()}).ok());
      ExpectWithinBounds(q, 64, k[layer], k2);
      ExpectWithinBounds(q, 64, v[layer], v2);
    }
  }
  TestArena a(2, 64, 16, KvDtype::kFp32, 1), b(2, 32, 16, KvDtype::kInt8, 1);
  int32_t page = 0;
  EXPECT_FALSE(ConvertPagesCpu({a.kv(), b.kv(), &page, &page, 1}).ok());
}

// Attention over quantized pages vs the exact attention over the original
// fp32 values. Bound: if every key element is off by at most ek, each score
// moves by at most D = sm_scale * sum|q_i| * ek, so each softmax weight
// changes by a factor within e^(+-2D) and the output by at most
// (e^(2D) - 1) * max|v| + ev (ev: max value-element error), plus fp32 slack.
TEST(Quant, AttentionOverQuantizedPagesWithinDerivedBound) {
  for (KvDtype dt : kAllDtypes) {
    SCOPED_TRACE(Name(dt));
    const uint32_t d = 64, q_heads = 4, len = 1000;
    TestArena exact(1, d, 16, KvDtype::kFp32, 64, 7), quant(1, d, 16, dt, 64, 7);
    auto t1 = exact.TakeTable(len), t2 = quant.TakeTable(len);
    auto [k, v] = exact.Fill(t1, len);
    ASSERT_TRUE(ScatterKvCpu({quant.kv(), t2.data(), uint32_t(t2.size()), 0, len, k.data(), v.data()}).ok());
    auto q = exact.Random(q_heads * d);
    double ek = 0, ev = 0, vmax = 0, qsum = 0;
    for (size_t r = 0; r < len; ++r) {
      const double ka = RowAmax(&k[r * d], d), va = RowAmax(&v[r * d], d);
      vmax = std::max(vmax, va);
      for (uint32_t i = 0; i < d; ++i) {
        ek = std::max(ek, ElemBound(dt, k[r * d + i], ka));
        ev = std::max(ev, ElemBound(dt, v[r * d + i], va));
      }
    }
    for (uint32_t h = 0; h < q_heads; ++h) {
      double s = 0;
      for (uint32_t i = 0; i < d; ++i) s += std::fabs(q[h * d + i]);
      qsum = std::max(qsum, s);
    }
    const double dev = 0.125 * qsum * ek;
    const double bound = (std::exp(2 * dev) - 1) * vmax + ev + kKernelVsReferenceTol;
    int32_t seq_len = len;
    std::vector<float> out(q.size());
    DecodeParams p{quant.kv(), 1, q_heads, 0.125f, 0, q.data(), out.data(), t2.data(),
                   uint32_t(t2.size()), &seq_len, len};
    auto ws = WsBuffer(DecodeWorkspaceBytesCpu(p));
    ASSERT_TRUE(PagedDecodeCpu(p, {ws.data(), ws.size()}).ok());
    DecodeParams pe = p;
    pe.kv = exact.kv();
    pe.block_tables = t1.data();
    const double err = MaxAbsDiff(out, reference::Decode(pe));
    EXPECT_LE(err, bound);
    std::printf("%s: attention error %.3g (bound %.3g)\n", Name(dt).c_str(), err, bound);
  }
}

}  // namespace
}  // namespace kvtier::kernels::testing
