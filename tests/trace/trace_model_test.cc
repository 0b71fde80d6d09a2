// The synthetic generator (deterministic per seed, bounded context, real
// sharing), the block-to-page mapping and decode pages, and trace specs.
#include <gtest/gtest.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "tools/trace/trace.h"

namespace kvtier::trace {
namespace {

bool SameRequests(const Trace& a, const Trace& b) {
  if (a.requests.size() != b.requests.size()) return false;
  for (size_t i = 0; i < a.requests.size(); ++i) {
    const Request &x = a.requests[i], &y = b.requests[i];
    if (x.timestamp_ms != y.timestamp_ms || x.input_tokens != y.input_tokens ||
        x.output_tokens != y.output_tokens || x.block_ids != y.block_ids)
      return false;
  }
  return true;
}

TEST(SyntheticTest, SameSeedSameTraceOtherSeedOtherTrace) {
  SyntheticOptions o{.seed = 42, .requests = 500};
  const Trace a = GenerateSynthetic(o), b = GenerateSynthetic(o);
  ASSERT_EQ(a.requests.size(), 500u);
  EXPECT_TRUE(SameRequests(a, b));
  o.seed = 43;
  EXPECT_FALSE(SameRequests(a, GenerateSynthetic(o)));
  EXPECT_TRUE(absl::StrContains(a.prefix_model, "seed=42")) << a.prefix_model;
}

TEST(SyntheticTest, LongContextsThatShareAndStayBounded) {
  SyntheticOptions o{.seed = 5, .requests = 3000, .max_context_tokens = 64 * 1024,
                     .conversations = 16, .documents = 4, .document_tokens = 16 * 1024};
  ASSERT_TRUE(o.Validate().ok());
  const Trace t = GenerateSynthetic(o);
  ASSERT_EQ(t.requests.size(), 3000u);
  uint32_t longest = 0;
  double last_ms = -1;
  absl::flat_hash_set<uint64_t> firsts;
  for (const Request& r : t.requests) {
    ASSERT_LE(r.input_tokens, o.max_context_tokens);
    ASSERT_EQ(r.block_ids.size(), (r.input_tokens + o.block_tokens - 1) / o.block_tokens);
    ASSERT_GE(r.timestamp_ms, last_ms);
    last_ms = r.timestamp_ms;
    longest = std::max(longest, r.input_tokens);
    firsts.insert(r.block_ids.front());
  }
  EXPECT_GT(longest, 48u * 1024) << "conversations never grew long";
  // Poisson arrivals at 10/s: 3000 requests take about 300 s.
  EXPECT_GT(last_ms, 250e3);
  EXPECT_LT(last_ms, 350e3);
  const TraceSummary s = Summarize(t);
  EXPECT_GT(s.infinite_cache_hit_rate, 0.5) << "multi-turn reuse missing";
  // Shared documents: fewer distinct first blocks than conversations started.
  EXPECT_LT(firsts.size(), t.requests.size() / 4);
}

TEST(SyntheticTest, ValidateNamesTheBadOption) {
  SyntheticOptions o;
  o.document_probability = 1.5;
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "document_probability"));
  o = {};
  o.document_tokens = o.max_context_tokens;
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "document_tokens"));
  o = {};
  o.conversations = 0;
  EXPECT_FALSE(o.Validate().ok());
  EXPECT_TRUE(GenerateSynthetic(o).requests.empty());
}

TEST(MappingTest, OnePagePerBlockKeepsIds) {
  Request r{.input_tokens = 1500, .output_tokens = 10, .block_ids = {7, 8, 9}};
  EXPECT_EQ(RequestPages(r, {}), r.block_ids);
  EXPECT_TRUE(absl::StrContains(PageMapping{}.Describe(512), "one 512-token trace block = one page"));
}

TEST(MappingTest, SubPagesAreDistinctAndPrefixStable) {
  const PageMapping m{.pages_per_block = 4};
  Request a{.input_tokens = 1024, .block_ids = {1, 2}};
  Request b{.input_tokens = 1536, .block_ids = {1, 2, 3}};
  const auto pa = RequestPages(a, m), pb = RequestPages(b, m);
  ASSERT_EQ(pa.size(), 8u);
  ASSERT_EQ(pb.size(), 12u);
  EXPECT_TRUE(std::equal(pa.begin(), pa.end(), pb.begin()));  // shared prefix, shared pages
  absl::flat_hash_set<uint64_t> distinct(pb.begin(), pb.end());
  EXPECT_EQ(distinct.size(), 12u);
  EXPECT_EQ(pa[0], 1u);
  EXPECT_EQ(pa[4], 2u);
}

TEST(MappingTest, DecodePagesCountFullBlocksTheOutputCompletes) {
  const PageMapping one{}, two{.pages_per_block = 2};
  // 1000 input tokens: one full block (and a partial one); +100 output ->
  // 1100 tokens = two full blocks, so the output completes one block.
  Request r{.input_tokens = 1000, .output_tokens = 100, .block_ids = {5, 6}};
  auto d = DecodePages(r, 512, one);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NE(d[0], 5u);
  EXPECT_NE(d[0], 6u);
  EXPECT_EQ(DecodePages(r, 512, one), d);  // same request, same ids
  EXPECT_EQ(DecodePages(r, 512, two).size(), 2u);
  r.output_tokens = 2000;  // 3000 tokens = 5 full blocks
  auto d4 = DecodePages(r, 512, one);
  ASSERT_EQ(d4.size(), 4u);
  EXPECT_EQ(d4[0], d[0]);  // the output grows the same chain
  EXPECT_EQ(absl::flat_hash_set<uint64_t>(d4.begin(), d4.end()).size(), 4u);
  r.output_tokens = 20;  // stays inside the partial block
  EXPECT_TRUE(DecodePages(r, 512, one).empty());
  Request other{.input_tokens = 1000, .output_tokens = 100, .block_ids = {5, 7}};
  EXPECT_NE(DecodePages(other, 512, one), d);
  EXPECT_TRUE(DecodePages(Request{.output_tokens = 5000}, 512, one).empty());
}

TEST(LoadTraceTest, SpecsChooseTheFormat) {
  auto s = LoadTrace("synthetic:requests=50,seed=3,conversations=4");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->requests.size(), 50u);
  EXPECT_TRUE(absl::StrContains(s->prefix_model, "seed=3"));
  auto capped = LoadTrace("synthetic:requests=50", {.max_requests = 10});
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->requests.size(), 10u);
  auto bad = LoadTrace("synthetic:requets=50");
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "unknown option 'requets'"));
  EXPECT_TRUE(absl::StrContains(LoadTrace("synthetic:seed=x").status().message(), "'seed'"));
  EXPECT_TRUE(absl::StrContains(LoadTrace("trace.txt").status().message(), ".jsonl"));
  auto m = LoadTrace(std::string(KVTIER_TEST_DATA_DIR) + "/synthetic_trace.jsonl",
                     {.max_requests = 5});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(absl::StartsWith(m->source, "mooncake:"));
  auto a = LoadTrace("azure:" + std::string(KVTIER_TEST_DATA_DIR) +
                     "/AzureLLMInferenceTrace_code.csv", {.max_requests = 5});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->requests.size(), 5u);
}

}  // namespace
}  // namespace kvtier::trace
