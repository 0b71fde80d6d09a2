// Generation limits without a daemon: reaching max_position_embeddings ends
// generation like EOS (the tokens so far are kept, and a note says why)
// instead of failing the whole call.
#include <gtest/gtest.h>

#include "kvtier/decoder/generator.h"
#include "tests/decoder/decoder_test_util.h"

namespace kvtier::decoder::testing {
namespace {

struct Built {
  std::unique_ptr<ModelWeights> w;
  std::unique_ptr<PagedKvCache> cache;
  std::unique_ptr<Model> model;
};

Built Build(uint32_t max_positions) {
  Built b;
  b.w = TinyWeights(6);
  b.w->config.max_position_embeddings = max_positions;
  b.cache = *PagedKvCache::Create({KvLayoutFor(b.w->config, 8, Dtype::kFp32), 16});
  b.model = *Model::Create(b.w.get(), b.cache.get());
  return b;
}

TEST(GeneratorTest, MaxPositionEndsGenerationAndKeepsTheTokens) {
  std::vector<uint32_t> prompt = PromptTokens(20);
  Built roomy = Build(2048), tight = Build(24);
  Generator g(roomy.model.get(), nullptr);
  auto all = g.Generate(prompt, {.max_new_tokens = 10, .stop_at_eos = false});
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->tokens.size(), 10u);
  EXPECT_EQ(all->stats.stop_note, "");
  Generator t(tight.model.get(), nullptr);
  auto cut = t.Generate(prompt, {.max_new_tokens = 10, .stop_at_eos = false});
  ASSERT_TRUE(cut.ok()) << cut.status();
  // Positions 0..23: the prompt's 20, then 4 generated tokens fed back; the
  // 5th generated token needs no position of its own.
  ASSERT_EQ(cut->tokens.size(), 5u);
  EXPECT_EQ(cut->stats.new_tokens, 5u);
  EXPECT_EQ(cut->tokens, std::vector<uint32_t>(all->tokens.begin(), all->tokens.begin() + 5));
  EXPECT_NE(cut->stats.stop_note.find("reached max_position_embeddings (24)"), std::string::npos)
      << cut->stats.stop_note;
  EXPECT_EQ(tight.cache->free_pages(), tight.cache->num_pages());
  // A prompt that does not fit at all is still an error.
  auto too_long = t.Generate(PromptTokens(25), {.max_new_tokens = 2});
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kOutOfRange) << too_long.status();
}

}  // namespace
}  // namespace kvtier::decoder::testing
