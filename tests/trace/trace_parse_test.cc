// Trace parsers against the shared files in tests/data (their published
// statistics) and against malformed lines: every error names file, 1-based
// line and the problem; stop_on_error=false skips the line and goes on.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tools/trace/trace.h"

namespace kvtier::trace {
namespace {

const std::string kData = KVTIER_TEST_DATA_DIR;

std::string Sha256File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < n; ++i) absl::StrAppend(&hex, absl::Hex(md[i], absl::kZeroPad2));
  return hex;
}

// Every id always follows the same predecessor: the ids are prefix-closed.
void ExpectPrefixClosed(const Trace& t) {
  absl::flat_hash_map<uint64_t, int64_t> parent;
  for (const Request& r : t.requests)
    for (size_t i = 0; i < r.block_ids.size(); ++i) {
      const int64_t p = i == 0 ? -1 : static_cast<int64_t>(r.block_ids[i - 1]);
      auto [it, fresh] = parent.emplace(r.block_ids[i], p);
      ASSERT_EQ(it->second, p) << "id " << r.block_ids[i] << " at line " << r.line;
    }
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(MooncakeTest, SharedTraceMatchesPublishedFigures) {
  const std::string path = kData + "/synthetic_trace.jsonl";
  EXPECT_EQ(Sha256File(path), "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131");
  auto t = LoadMooncakeJsonl(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->skipped.empty());
  EXPECT_EQ(t->block_tokens, 512u);
  EXPECT_TRUE(absl::StrContains(t->prefix_model, "hash_ids")) << t->prefix_model;
  const TraceSummary s = Summarize(*t);
  EXPECT_EQ(s.requests, 3993u);
  EXPECT_EQ(s.block_refs, 121877u);
  EXPECT_EQ(s.unique_blocks, 43924u);
  EXPECT_NEAR(s.infinite_cache_hit_rate, 0.6396, 0.00005);
  const Request& first = t->requests.front();
  EXPECT_EQ(first.line, 1u);
  EXPECT_EQ(first.timestamp_ms, 0);
  EXPECT_EQ(first.input_tokens, 40160u);
  EXPECT_EQ(first.output_tokens, 6u);
  ASSERT_EQ(first.block_ids.size(), 79u);
  EXPECT_EQ(first.block_ids[78], 78u);
  const Request& last = t->requests.back();
  EXPECT_EQ(last.line, 3993u);
  EXPECT_EQ(last.timestamp_ms, 1022025);
  EXPECT_EQ(last.input_tokens, 18440u);
  for (const Request& r : t->requests) ASSERT_EQ(r.block_ids.size(), (r.input_tokens + 511) / 512);
  ExpectPrefixClosed(*t);
}

TEST(MooncakeTest, MaxRequestsStopsEarly) {
  auto t = LoadMooncakeJsonl(kData + "/synthetic_trace.jsonl", {.max_requests = 300});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->requests.size(), 300u);
  EXPECT_EQ(Summarize(*t).block_refs, 7721u);
  EXPECT_EQ(t->requests.back().line, 300u);
}

TEST(MooncakeTest, MalformedLinesNameFileLineAndProblem) {
  const std::string good = R"({"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"timestamp": 5, "input_length": 600,)", "invalid JSON"},
      {R"([1, 2, 3])", "expected a JSON object"},
      {R"({"timestamp": 5, "output_length": 3, "hash_ids": [1, 2]})", "missing field 'input_length'"},
      {R"({"timestamp": 5, "input_length": 600, "output_length": 3})", "missing field 'hash_ids'"},
      {R"({"timestamp": 5, "input_length": -600, "output_length": 3, "hash_ids": [1, 2]})",
       "field 'input_length' = -600 is not a non-negative integer"},
      {R"({"timestamp": 5, "input_length": 600, "output_length": 2.5, "hash_ids": [1, 2]})",
       "field 'output_length' = 2.5 is not a non-negative integer"},
      {R"({"timestamp": "x", "input_length": 600, "output_length": 3, "hash_ids": [1, 2]})",
       "field 'timestamp'"},
      {R"({"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [1, "b"]})",
       "hash_ids[1] = \"b\" is not a non-negative integer"},
      {R"({"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [1, 2, 3]})",
       "hash_ids has 3 ids but input_length 600 needs ceil(600 / 512) = 2"},
      {R"({"timestamp": 5, "input_length": 99999999999, "output_length": 3, "hash_ids": []})",
       "is larger than"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = WriteTemp(absl::StrCat("bad", i, ".jsonl"),
                                       good + "\n" + good + "\n" + cases[i].first + "\n" + good + "\n");
    auto t = LoadMooncakeJsonl(path);
    ASSERT_FALSE(t.ok()) << cases[i].first;
    EXPECT_TRUE(absl::IsInvalidArgument(t.status()));
    EXPECT_TRUE(absl::StrContains(t.status().message(), path + ":3: ")) << t.status();
    EXPECT_TRUE(absl::StrContains(t.status().message(), cases[i].second)) << t.status();

    auto skipped = LoadMooncakeJsonl(path, {.stop_on_error = false});
    ASSERT_TRUE(skipped.ok()) << skipped.status();
    ASSERT_EQ(skipped->requests.size(), 3u);
    EXPECT_EQ(skipped->requests[2].line, 4u);  // the replay went on after the bad line
    ASSERT_EQ(skipped->skipped.size(), 1u);
    EXPECT_TRUE(absl::StartsWith(skipped->skipped[0], path + ":3: ")) << skipped->skipped[0];
  }
}

TEST(MooncakeTest, MissingFileIsNotFound) {
  auto t = LoadMooncakeJsonl("/nonexistent/trace.jsonl");
  EXPECT_TRUE(absl::IsNotFound(t.status())) << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(), "/nonexistent/trace.jsonl"));
}

TEST(AzureTest, SharedTracesParse) {
  struct Case {
    const char* file;
    const char* sha;
    size_t rows;
    uint64_t blocks;
  };
  for (const Case& c : {Case{"AzureLLMInferenceTrace_code.csv",
                             "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",
                             8819, 40014},
                        Case{"AzureLLMInferenceTrace_conv.csv",
                             "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8",
                             19366, 52913}}) {
    const std::string path = kData + "/" + c.file;
    EXPECT_EQ(Sha256File(path), c.sha);
    auto t = LoadAzureCsv(path);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->requests.size(), c.rows);
    EXPECT_TRUE(t->skipped.empty());
    const TraceSummary s = Summarize(*t);
    EXPECT_EQ(s.block_refs, c.blocks);  // ceil(ContextTokens / 512) per row
    EXPECT_GT(s.infinite_cache_hit_rate, 0.05) << "the sharing model shares nothing";
    EXPECT_LT(s.unique_blocks, s.block_refs);
    EXPECT_EQ(t->requests.front().line, 2u);  // after the header
    EXPECT_EQ(t->requests.front().timestamp_ms, 0);
    EXPECT_TRUE(absl::StrContains(t->prefix_model, "seed=1")) << t->prefix_model;
    ExpectPrefixClosed(*t);
  }
}

TEST(AzureTest, TimestampsKeepSevenFractionalDigits) {
  auto t = LoadAzureCsv(kData + "/AzureLLMInferenceTrace_code.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  // 18:17:03.9799600 -> 18:17:04.0319600 and -> 19:14:19.9280160.
  EXPECT_NEAR(t->requests[1].timestamp_ms, 52.0, 1e-6);
  EXPECT_NEAR(t->requests.back().timestamp_ms, 3435948.056, 1e-6);
  EXPECT_EQ(t->requests[0].input_tokens, 4808u);
  EXPECT_EQ(t->requests[0].output_tokens, 10u);
}

TEST(AzureTest, ModelIsSeeded) {
  const std::string path = kData + "/AzureLLMInferenceTrace_conv.csv";
  auto a = LoadAzureCsv(path, {.seed = 7}, {.max_requests = 2000});
  auto b = LoadAzureCsv(path, {.seed = 7}, {.max_requests = 2000});
  auto c = LoadAzureCsv(path, {.seed = 8}, {.max_requests = 2000});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_EQ(a->requests.size(), 2000u);
  bool all_equal = true, any_differs = false;
  for (size_t i = 0; i < a->requests.size(); ++i) {
    all_equal &= a->requests[i].block_ids == b->requests[i].block_ids;
    any_differs |= a->requests[i].block_ids != c->requests[i].block_ids;
  }
  EXPECT_TRUE(all_equal);
  EXPECT_TRUE(any_differs);
  auto none = LoadAzureCsv(path, {.system_prompts = 0, .multi_turn_probability = 0},
                           {.max_requests = 2000});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(Summarize(*none).infinite_cache_hit_rate, 0);  // nothing shared, nothing repeats
}

TEST(AzureTest, MalformedRowsNameFileLineAndProblem) {
  const std::string header = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  const std::string good = "2023-11-16 18:17:03.9799600,4808,10\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"2023-11-16 18:17:03.9799600,4808", "expected 3 comma-separated fields"},
      {"2023-13-45 18:17:03.9799600,4808,10", "field 'TIMESTAMP' = '2023-13-45 18:17:03.9799600'"},
      {"yesterday,4808,10", "field 'TIMESTAMP' = 'yesterday'"},
      {"2023-11-16 18:17:04.0000000,-5,10", "field 'ContextTokens' = '-5'"},
      {"2023-11-16 18:17:04.0000000,12.5,10", "field 'ContextTokens' = '12.5'"},
      {"2023-11-16 18:17:04.0000000,100,ten", "field 'GeneratedTokens' = 'ten'"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = WriteTemp(absl::StrCat("bad", i, ".csv"),
                                       header + good + cases[i].first + "\n" + good);
    auto t = LoadAzureCsv(path);
    ASSERT_FALSE(t.ok()) << cases[i].first;
    EXPECT_TRUE(absl::StrContains(t.status().message(), path + ":3: ")) << t.status();
    EXPECT_TRUE(absl::StrContains(t.status().message(), cases[i].second)) << t.status();
    auto skipped = LoadAzureCsv(path, {}, {.stop_on_error = false});
    ASSERT_TRUE(skipped.ok()) << skipped.status();
    EXPECT_EQ(skipped->requests.size(), 2u);
    ASSERT_EQ(skipped->skipped.size(), 1u);
    EXPECT_TRUE(absl::StartsWith(skipped->skipped[0], path + ":3: "));
  }
  const std::string no_header = WriteTemp("noheader.csv", good);
  auto t = LoadAzureCsv(no_header);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::StrContains(t.status().message(), no_header + ":1: expected the header"))
      << t.status();
}

}  // namespace
}  // namespace kvtier::trace
