// The decoder's forward pass against the dense double-precision reference:
// prefill and cached decode across page boundaries, fp32 and fp16 pages,
// GQA, truncation/rollback, the sliding window and continuous batching.
#include <gtest/gtest.h>

#include "kvtier/decoder/model.h"
#include "kvtier/decoder/sampler.h"
#include "tests/decoder/decoder_test_util.h"

namespace kvtier::decoder::testing {
namespace {

// fp32 pages: only float rounding separates the decoder from the reference.
constexpr double kFp32Tol = 2e-3;
// fp16 pages: K/V rounded to 11 significant bits.
constexpr double kFp16Tol = 5e-2;

TEST(ModelTest, PrefillLogitsMatchReferenceAcrossPageBoundaries) {
  TinyModel m = MakeTiny(/*tpp=*/16);
  const uint32_t vocab = m.weights->config.vocab_size;
  for (uint32_t n : {1u, 15u, 16u, 17u, 40u}) {
    std::vector<uint32_t> prompt = PromptTokens(n);
    SeqId seq = m.cache->AddSequence();
    std::vector<float> logits;
    ASSERT_TRUE(m.model->Forward({{seq, prompt}}, &logits, /*all_logits=*/true).ok());
    ASSERT_EQ(logits.size(), size_t(n) * vocab);
    std::vector<double> ref = ReferenceLogits(*m.weights, prompt);
    EXPECT_LT(MaxAbsDiff(logits.data(), ref.data(), ref.size()), kFp32Tol) << "prompt of " << n;
    EXPECT_EQ(m.cache->Length(seq), n);
    ASSERT_TRUE(m.cache->RemoveSequence(seq).ok());
  }
  EXPECT_EQ(m.cache->free_pages(), m.cache->num_pages());
}

// Cached decode (one token at a time on the paged cache) equals recomputing
// the whole sequence at every step: same tokens, logits within tolerance.
void CheckCachedEqualsRecompute(Dtype dtype, double tol) {
  TinyModel m = MakeTiny(/*tpp=*/8, dtype);
  const uint32_t vocab = m.weights->config.vocab_size;
  std::vector<uint32_t> prompt = PromptTokens(5);
  std::vector<std::vector<float>> step_logits;
  std::vector<uint32_t> cached = GreedyCached(*m.model, prompt, 24, &step_logits);
  std::vector<uint32_t> seqtoks = prompt;
  for (size_t i = 0; i < cached.size(); ++i) {
    SeqId seq = m.cache->AddSequence();  // recompute from scratch
    std::vector<float> full;
    ASSERT_TRUE(m.model->Forward({{seq, seqtoks}}, &full).ok());
    ASSERT_TRUE(m.cache->RemoveSequence(seq).ok());
    EXPECT_EQ(Argmax(full), cached[i]) << "step " << i;
    std::vector<double> ref = ReferenceLogits(*m.weights, seqtoks);
    EXPECT_LT(MaxAbsDiff(step_logits[i].data(), ref.data() + (seqtoks.size() - 1) * vocab, vocab), tol)
        << "step " << i;
    seqtoks.push_back(cached[i]);
  }
}

TEST(ModelTest, CachedDecodeEqualsRecomputeFp32Pages) { CheckCachedEqualsRecompute(Dtype::kFp32, kFp32Tol); }
TEST(ModelTest, CachedDecodeEqualsRecomputeFp16Pages) { CheckCachedEqualsRecompute(Dtype::kFp16, kFp16Tol); }

TEST(ModelTest, ChunkedPrefillEqualsOneShot) {
  TinyModel m = MakeTiny(/*tpp=*/16);
  std::vector<uint32_t> prompt = PromptTokens(37);
  SeqId a = m.cache->AddSequence(), b = m.cache->AddSequence();
  std::vector<float> one, chunked;
  ASSERT_TRUE(m.model->Forward({{a, prompt}}, &one).ok());
  absl::Span<const uint32_t> p(prompt);
  ASSERT_TRUE(m.model->Forward({{b, p.subspan(0, 16)}}, &chunked).ok());
  ASSERT_TRUE(m.model->Forward({{b, p.subspan(16, 5)}}, &chunked).ok());
  ASSERT_TRUE(m.model->Forward({{b, p.subspan(21)}}, &chunked).ok());
  std::vector<double> ref = ReferenceLogits(*m.weights, prompt);
  const uint32_t vocab = m.weights->config.vocab_size;
  EXPECT_LT(MaxAbsDiff(chunked.data(), ref.data() + 36 * vocab, vocab), kFp32Tol);
  EXPECT_EQ(Argmax(one), Argmax(chunked));
}

// Rolling back (a rejected speculative draft) and regenerating gives what
// never having generated gives.
TEST(ModelTest, TruncateThenRegenerateEqualsNeverGenerated) {
  TinyModel m = MakeTiny(/*tpp=*/8);
  std::vector<uint32_t> prompt = PromptTokens(13);
  std::vector<uint32_t> expected = GreedyCached(*m.model, prompt, 12);
  SeqId seq = m.cache->AddSequence();
  std::vector<float> logits;
  ASSERT_TRUE(m.model->Forward({{seq, prompt}}, &logits).ok());
  const uint32_t free_before_draft = m.cache->free_pages();
  std::vector<uint32_t> draft = PromptTokens(11, /*salt=*/9);  // a wrong draft crossing pages
  ASSERT_TRUE(m.model->Forward({{seq, draft}}, &logits).ok());
  EXPECT_LT(m.cache->free_pages(), free_before_draft);
  ASSERT_TRUE(m.cache->Truncate(seq, 13).ok());
  EXPECT_EQ(m.cache->free_pages(), free_before_draft);  // draft pages came back
  // Recompute the last prompt token's logits by rolling back one more.
  ASSERT_TRUE(m.cache->Truncate(seq, 12).ok());
  ASSERT_TRUE(m.model->Forward({{seq, absl::MakeConstSpan(&prompt[12], 1)}}, &logits).ok());
  std::vector<uint32_t> got;
  for (int i = 0; i < 12; ++i) {
    got.push_back(Argmax(logits));
    ASSERT_TRUE(m.model->Forward({{seq, absl::MakeConstSpan(&got.back(), 1)}}, &logits).ok());
  }
  EXPECT_EQ(got, expected);
  EXPECT_FALSE(m.cache->Truncate(seq, 1000).ok());
}

TEST(ModelTest, SlidingWindowMatchesReferenceAndFreesPages) {
  const uint32_t window = 12;
  TinyModel m = MakeTiny(/*tpp=*/4, Dtype::kFp32, /*pages=*/64, window);
  const uint32_t vocab = m.weights->config.vocab_size;
  std::vector<uint32_t> prompt = PromptTokens(10);
  std::vector<std::vector<float>> logits;
  std::vector<uint32_t> out = GreedyCached(*m.model, prompt, 30, &logits);
  std::vector<uint32_t> all = prompt;
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<double> ref = ReferenceLogits(*m.weights, all, window);
    EXPECT_LT(MaxAbsDiff(logits[i].data(), ref.data() + (all.size() - 1) * vocab, vocab), kFp32Tol)
        << "step " << i;
    all.push_back(out[i]);
  }
  // A long sequence holds only the pages its window needs.
  SeqId seq = m.cache->AddSequence();
  std::vector<float> l;
  ASSERT_TRUE(m.model->Forward({{seq, PromptTokens(100)}}, &l).ok());
  // The next query (position 100) sees 89..100: blocks 22..24 (88..99) stay.
  EXPECT_EQ(m.cache->num_pages() - m.cache->free_pages(), 3u);
  EXPECT_EQ(m.cache->BlockTable(seq)[21], kNoPage);
  EXPECT_NE(m.cache->BlockTable(seq)[22], kNoPage);
  EXPECT_FALSE(m.cache->Truncate(seq, 50).ok());  // those pages are gone
  EXPECT_FALSE(m.cache->Truncate(seq, 98).ok());  // would need position 87 (block 21)
  EXPECT_TRUE(m.cache->Truncate(seq, 99).ok());
  ASSERT_TRUE(m.model->Forward({{seq, PromptTokens(1)}}, &l).ok());
}

// Sequences joining and leaving a shared decode batch produce exactly what
// each produces alone.
TEST(ModelTest, ContinuousBatchingEqualsOneAtATime) {
  TinyModel m = MakeTiny(/*tpp=*/8, Dtype::kFp32, /*pages=*/128);
  struct Req {
    std::vector<uint32_t> prompt;
    uint32_t join_step, new_tokens;
    std::vector<uint32_t> alone, batched;
    SeqId seq = 0;
    std::vector<float> last;
  };
  std::vector<Req> reqs = {{PromptTokens(5, 1), 0, 20}, {PromptTokens(17, 2), 3, 9},
                           {PromptTokens(8, 3), 5, 14}, {PromptTokens(30, 4), 5, 6}};
  for (Req& r : reqs) r.alone = GreedyCached(*m.model, r.prompt, r.new_tokens);
  for (uint32_t step = 0; step < 40; ++step) {
    for (Req& r : reqs) {  // joins: prefill, first token
      if (r.join_step != step) continue;
      r.seq = m.cache->AddSequence();
      ASSERT_TRUE(m.model->Forward({{r.seq, r.prompt}}, &r.last).ok());
      r.batched.push_back(Argmax(r.last));
    }
    std::vector<ForwardChunk> batch;
    std::vector<Req*> in_batch;
    for (Req& r : reqs) {
      if (r.seq == 0 || r.batched.size() >= r.new_tokens) continue;
      batch.push_back({r.seq, absl::MakeConstSpan(&r.batched.back(), 1)});
      in_batch.push_back(&r);
    }
    if (batch.empty()) continue;
    std::vector<float> logits;
    ASSERT_TRUE(m.model->Forward(batch, &logits).ok());
    const uint32_t vocab = m.weights->config.vocab_size;
    for (size_t i = 0; i < in_batch.size(); ++i) {
      in_batch[i]->batched.push_back(Argmax(absl::MakeConstSpan(logits).subspan(i * vocab, vocab)));
      if (in_batch[i]->batched.size() == in_batch[i]->new_tokens) {  // leaves
        ASSERT_TRUE(m.cache->RemoveSequence(in_batch[i]->seq).ok());
      }
    }
  }
  for (const Req& r : reqs) EXPECT_EQ(r.batched, r.alone);
  EXPECT_EQ(m.cache->free_pages(), m.cache->num_pages());
}

TEST(ModelTest, BadInputIsRejectedAndLeavesTheCacheAlone) {
  TinyModel m = MakeTiny(/*tpp=*/8, Dtype::kFp32, /*pages=*/4);
  SeqId seq = m.cache->AddSequence();
  std::vector<float> l;
  std::vector<uint32_t> bad = {1, 2, 999};
  absl::Status st = m.model->Forward({{seq, bad}}, &l);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("token 999 at index 2"), std::string::npos) << st;
  st = m.model->Forward({{seq, PromptTokens(40)}}, &l);  // needs 5 pages of 4
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_EQ(m.cache->Length(seq), 0u);
  EXPECT_EQ(m.cache->free_pages(), 4u);
  EXPECT_TRUE(m.model->Forward({{seq, PromptTokens(32)}}, &l).ok());
  EXPECT_EQ(m.model->Forward({{seq + 100, bad}}, &l).code(), absl::StatusCode::kNotFound);
}

TEST(SamplerTest, GreedySeededAndCuts) {
  std::vector<float> logits = {0.1f, 2.0f, 1.9f, -1.0f, 2.0f};
  EXPECT_EQ(Argmax(logits), 1u);  // lowest id on ties
  SamplingOptions o{.temperature = 1.0f, .seed = 42};
  Sampler a(o), b(o);
  std::vector<uint32_t> da, db;
  for (int i = 0; i < 50; ++i) {
    da.push_back(a.Sample(logits));
    db.push_back(b.Sample(logits));
  }
  EXPECT_EQ(da, db);  // same seed, same draws
  EXPECT_GT(std::count(da.begin(), da.end(), 2u), 0);  // not greedy
  Sampler k1({.temperature = 1.0f, .top_k = 1, .seed = 3});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(k1.Sample(logits), 1u);
  Sampler p({.temperature = 1.0f, .top_p = 0.5f, .seed = 5});
  for (int i = 0; i < 50; ++i) {
    uint32_t t = p.Sample(logits);
    EXPECT_TRUE(t == 1u || t == 4u) << t;  // the two 2.0 logits hold > 50% of the mass
  }
}

}  // namespace
}  // namespace kvtier::decoder::testing
