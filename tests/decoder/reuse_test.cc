// Prefix reuse through a real kvtierd: greedy generation with the prompt's
// prefix pages restored from the daemon gives the same tokens as generation
// from scratch (logits within tolerance) and restores the expected number of
// tokens, for prompts on, just past and short of page boundaries; pages
// completed during decode are stored too; kvtier-generate runs with and
// without a daemon. Layer-wise restore (the daemon's layer-wise GET, prefill
// gated per layer) gives exactly the output of whole-page restore, also when
// a page looked up is gone by the GET. DecoderSession::Create links to the
// daemon while its weights load, and runs without one with a note.
#include <gtest/gtest.h>

#include <cstring>

#include "kvtier/decoder/generator.h"
#include "kvtier/decoder/prefix_store.h"
#include "kvtier/decoder/session.h"
#include "kvtier/test_hooks.h"
#include "tests/decoder/decoder_test_util.h"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::decoder::testing {
namespace {

// fp16 pages; the restored pages hold the bytes a prefill wrote, the
// recomputed ones the bytes this run's prefill writes: only the split of
// the attention sum between cached and new tokens differs.
constexpr double kLogitTol = 1e-3;
constexpr uint32_t kTpp = 16;

class ReuseTest : public itest::DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    m_ = MakeTiny(kTpp, Dtype::kFp16, /*pages=*/32);
    ClientOptions o = itest::Options(daemon_->endpoint());
    auto store = PrefixStore::Connect(o, m_.cache.get(), ModelFingerprint(*m_.weights));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }
  void TearDown() override {
    store_.reset();
    DaemonTest::TearDown();
  }
  GenerateResult Run(const std::vector<uint32_t>& prompt, bool reuse, uint32_t n = 8,
                     bool layerwise = false) {
    Generator g(m_.model.get(), reuse ? store_.get() : nullptr);
    auto r = g.Generate(prompt, {.max_new_tokens = n, .keep_logits = true,
                                 .layerwise_restore = layerwise});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : GenerateResult{};
  }
  TinyModel m_;
  std::unique_ptr<PrefixStore> store_;
};

TEST_F(ReuseTest, RestoredPrefixGivesTheSameTokens) {
  // 16 and 32 end exactly on a page boundary: every page is restored and
  // the last token computed again for its logits. 17 and 33 are one past;
  // 10 is short of a page, 50 in the middle of one.
  const std::pair<uint32_t, uint32_t> cases[] = {{10, 0}, {16, 15}, {17, 16}, {32, 31}, {33, 32}, {50, 48}};
  uint32_t salt = 0;
  for (auto [len, expect_restored] : cases) {
    std::vector<uint32_t> prompt = PromptTokens(len, ++salt);
    GenerateResult scratch = Run(prompt, /*reuse=*/false);
    GenerateResult cold = Run(prompt, /*reuse=*/true);
    EXPECT_EQ(cold.stats.restored_tokens, 0u) << len;
    EXPECT_EQ(cold.stats.pages_put, (len + 8 - 1) / kTpp) << len;  // prompt + decoded full pages
    GenerateResult warm = Run(prompt, /*reuse=*/true);
    EXPECT_EQ(warm.stats.restored_tokens, expect_restored) << len;
    EXPECT_EQ(warm.stats.computed_tokens, len - expect_restored) << len;
    EXPECT_EQ(warm.stats.reuse_note, "") << len;
    EXPECT_EQ(warm.tokens, scratch.tokens) << len;
    EXPECT_EQ(cold.tokens, scratch.tokens) << len;
    for (size_t i = 0; i < scratch.logits.size(); ++i) {
      std::vector<double> ref(scratch.logits[i].begin(), scratch.logits[i].end());
      EXPECT_LT(MaxAbsDiff(warm.logits[i].data(), ref.data(), ref.size()), kLogitTol)
          << "prompt " << len << " token " << i;
    }
    for (TierKind t : warm.stats.restored_from) EXPECT_EQ(t, TierKind::kHost);
  }
  EXPECT_EQ(m_.cache->free_pages(), m_.cache->num_pages());
}

TEST_F(ReuseTest, PagesCompletedByDecodeAreStored) {
  std::vector<uint32_t> prompt = PromptTokens(20, 77);
  GenerateResult first = Run(prompt, /*reuse=*/true, /*n=*/30);  // reaches 49 tokens
  EXPECT_EQ(first.stats.pages_put, 3u);                            // blocks 0, 1 and 2
  // A follow-up turn: the prompt is the whole conversation so far.
  std::vector<uint32_t> next = prompt;
  next.insert(next.end(), first.tokens.begin(), first.tokens.end());
  next.push_back(5);
  GenerateResult scratch = Run(next, /*reuse=*/false);
  GenerateResult warm = Run(next, /*reuse=*/true);
  EXPECT_EQ(warm.stats.restored_tokens, 48u);
  EXPECT_EQ(warm.tokens, scratch.tokens);
}

TEST_F(ReuseTest, DifferentModelsDoNotShareKeys) {
  std::vector<uint32_t> prompt = PromptTokens(40, 3);
  Run(prompt, /*reuse=*/true);
  TinyModel other = MakeTiny(kTpp, Dtype::kFp16, 32, 0, /*seed=*/2);
  auto store = PrefixStore::Connect(itest::Options(daemon_->endpoint()), other.cache.get(),
                                    ModelFingerprint(*other.weights));
  ASSERT_TRUE(store.ok());
  Generator g(other.model.get(), store->get());
  auto r = g.Generate(prompt, {.max_new_tokens = 2});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stats.restored_tokens, 0u);  // same layout, same tokens, other weights
}

// A store connected before the model is known derives no key until its
// root is set, and keeps the root it was given.
TEST_F(ReuseTest, StoreWithoutRootDerivesNoKeysUntilSetRoot) {
  auto store = PrefixStore::Connect(itest::Options(daemon_->endpoint()), m_.cache.get());
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<uint32_t> prompt = PromptTokens(40, 11);
  Generator g(m_.model.get(), store->get());
  auto r = g.Generate(prompt, {.max_new_tokens = 2});
  ASSERT_TRUE(r.ok()) << r.status();  // reuse fails soft: the run computes everything
  EXPECT_NE(r->stats.reuse_note.find("no model fingerprint"), std::string::npos)
      << r->stats.reuse_note;
  EXPECT_EQ(r->stats.pages_put, 0u);
  SeqId seq = m_.cache->AddSequence();
  EXPECT_EQ((*store)->Restore(seq, prompt).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*store)->Publish(seq, prompt).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(m_.cache->RemoveSequence(seq).ok());
  const PageKey root = ModelFingerprint(*m_.weights);
  ASSERT_TRUE((*store)->SetRoot(root).ok());
  EXPECT_TRUE((*store)->SetRoot(root).ok());
  EXPECT_EQ((*store)->SetRoot(ModelFingerprint(*TinyWeights(2))).code(),
            absl::StatusCode::kFailedPrecondition);
  Run(prompt, /*reuse=*/true);  // stores through store_: the same root
  auto warm = g.Generate(prompt, {.max_new_tokens = 2});
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(warm->stats.restored_tokens, 32u);
}

SessionOptions TinySession(const std::string& endpoint) {
  SessionOptions o;
  o.size = "tiny";
  o.tokens_per_page = kTpp;
  o.kv_pages = 8;
  o.client = itest::Options(endpoint);
  return o;
}

// DecoderSession::Create as kvtier-generate runs it: HELLO + REGISTER on a
// helper thread while the weights load, the store rooted at the weights'
// fingerprint once they are hashed. A second session (a fresh process's
// first touch) restores what the first stored.
TEST_F(ReuseTest, SessionLinksWhileWeightsLoadAndRestores) {
  const SessionOptions o = TinySession(daemon_->endpoint());
  const std::vector<uint32_t> prompt = PromptTokens(40, 5);
  auto first = DecoderSession::Create(o);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_NE((*first)->store(), nullptr) << (*first)->daemon_note();
  EXPECT_EQ((*first)->daemon_note(), "");
  EXPECT_GT((*first)->timings().connect_ms, 0);
  EXPECT_GE((*first)->timings().connect_wait_ms, 0);
  EXPECT_LE((*first)->timings().connect_wait_ms, (*first)->timings().connect_ms);
  EXPECT_EQ((*first)->fingerprint(), ModelFingerprint((*first)->weights()));
  auto stored = (*first)->generator().Generate(prompt, {.max_new_tokens = 4});
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->stats.pages_put, 2u);
  auto second = DecoderSession::Create(o);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_NE((*second)->store(), nullptr) << (*second)->daemon_note();
  auto restored = (*second)->generator().Generate(prompt, {.max_new_tokens = 4});
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->stats.restored_tokens, 32u);
  EXPECT_EQ(restored->stats.reuse_note, "");
  EXPECT_EQ(restored->tokens, stored->tokens);
}

// No socket: no helper thread, the note at once. A daemon that does not
// answer: the helper thread's HELLO fails and becomes the note. Either way
// the session generates without reuse.
TEST_F(ReuseTest, SessionRunsWithoutDaemonWithTheNote) {
  SessionOptions o = TinySession("ipc://" + daemon_->dir() + "/no-such.sock");
  auto s = DecoderSession::Create(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->store(), nullptr);
  EXPECT_EQ((*s)->daemon_note(), "no daemon (no socket at ipc://" + daemon_->dir() +
                                     "/no-such.sock): running without reuse");
  EXPECT_EQ((*s)->timings().connect_ms, 0);
  EXPECT_EQ((*s)->timings().connect_wait_ms, 0);
  auto r = (*s)->generator().Generate(PromptTokens(40, 5), {.max_new_tokens = 2});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stats.restored_tokens, 0u);
  o.client.endpoint = "tcp://127.0.0.1:1";  // nothing listens: HELLO times out
  o.client.timeout = std::chrono::milliseconds(300);
  auto silent = DecoderSession::Create(o);
  ASSERT_TRUE(silent.ok()) << silent.status();
  EXPECT_EQ((*silent)->store(), nullptr);
  EXPECT_TRUE(absl::StartsWith((*silent)->daemon_note(), "no daemon ("))
      << (*silent)->daemon_note();
  EXPECT_GT((*silent)->timings().connect_ms, 0);
  r = (*silent)->generator().Generate(PromptTokens(40, 5), {.max_new_tokens = 2});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stats.restored_tokens, 0u);
  o.use_daemon = false;
  auto off = DecoderSession::Create(o);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ((*off)->daemon_note(), "daemon disabled (--no_daemon)");
}

TEST_F(ReuseTest, GenerateToolRunsWithAndWithoutDaemon) {
  const std::vector<std::string> common = {KVTIER_GENERATE_PATH, "--size=tiny", "--tokens_per_page=16",
                                           "--prompt=The quick brown fox jumps over the lazy dog!",
                                           "--max_new_tokens=6", "--print_ids"};
  auto with = common;
  with.push_back("--endpoint=" + daemon_->endpoint());
  with.push_back("--runs=2");
  itest::CommandResult r = itest::RunCommand(with, 60000);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("daemon: connected, prefix reuse on"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("run 1: prompt 44 tokens: restored 0 (none), computed 44"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("run 2: prompt 44 tokens: restored 32 (host,host), computed 12"), std::string::npos)
      << r.out;
  auto line = [](const std::string& out, const std::string& prefix) {
    size_t p = out.find(prefix);
    return p == std::string::npos ? std::string() : out.substr(p + prefix.size(), out.find('\n', p) - p - prefix.size());
  };
  EXPECT_EQ(line(r.out, "run 1: "), line(r.out, "run 2: "));
  auto without = common;
  without.push_back("--endpoint=ipc://" + daemon_->dir() + "/no-such.sock");
  itest::CommandResult n = itest::RunCommand(without, 60000);
  ASSERT_EQ(n.exit_code, 0) << n.out << n.err;
  EXPECT_NE(n.out.find("no daemon (no socket at"), std::string::npos) << n.out;
  EXPECT_NE(n.out.find("restored 0 (none), computed 44"), std::string::npos) << n.out;
  EXPECT_EQ(line(n.out, "run 1: "), line(r.out, "run 1: "));  // same tokens either way
  auto layerwise = with;  // the pages are stored now: both runs restore
  layerwise.push_back("--layerwise");
  itest::CommandResult l = itest::RunCommand(layerwise, 60000);
  ASSERT_EQ(l.exit_code, 0) << l.out << l.err;
  EXPECT_NE(l.out.find("run 1: prompt 44 tokens: restored 32 (host,host), computed 12"), std::string::npos)
      << l.out;
  EXPECT_NE(l.out.find(", layer-wise, prefill waited"), std::string::npos) << l.out;
  EXPECT_EQ(line(l.out, "run 1: "), line(r.out, "run 1: "));
}

// Reaching max_position_embeddings is a normal stop: exit 0, the tokens so
// far printed, the reason on stderr.
TEST_F(ReuseTest, GenerateToolStopsAtMaxPositions) {
  auto w = TinyWeights(8);
  w->config.max_position_embeddings = 24;
  const std::string dir = daemon_->dir() + "/short-model";
  ASSERT_TRUE(WriteCheckpoint(dir, *w, TensorDtype::kF32).ok());
  itest::CommandResult r = itest::RunCommand(
      {KVTIER_GENERATE_PATH, "--model=" + dir, "--no_daemon", "--tokens_per_page=16", "--print_ids",
       "--prompt=twenty bytes prompt!", "--max_new_tokens=10"}, 60000);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("run 1: 5 new tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("the sequence reached max_position_embeddings (24)"), std::string::npos) << r.err;
}

// With a sliding window the pages the window frees are stored before it
// frees them, and a restore looks up and fetches only the chain's tail the
// window needs: the leading pages may be gone from the daemon.
TEST_F(ReuseTest, SlidingWindowStoresAndRestoresTheWindowsPages) {
  constexpr uint32_t kWindow = 24;
  TinyModel wm = MakeTiny(kTpp, Dtype::kFp16, /*pages=*/32, kWindow, /*seed=*/3);
  auto store = PrefixStore::Connect(itest::Options(daemon_->endpoint()), wm.cache.get(),
                                    ModelFingerprint(*wm.weights));
  ASSERT_TRUE(store.ok()) << store.status();
  auto run = [&](const std::vector<uint32_t>& prompt, PrefixStore* s) {
    auto r = Generator(wm.model.get(), s).Generate(prompt, {.max_new_tokens = 8, .keep_logits = true});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : GenerateResult{};
  };
  std::unique_ptr<Client> other = Connect();
  // (length, tokens restored): 70 restores blocks 2..3 (the window at 64
  // sees 41..64); 64 ends on a page: 63 restored, the window at 63 needs block 2.
  for (auto [len, restored] : {std::pair{70u, 64u}, {64u, 63u}}) {
    std::vector<uint32_t> prompt = PromptTokens(len, 40 + len);
    GenerateResult scratch = run(prompt, nullptr);
    GenerateResult cold = run(prompt, store->get());
    EXPECT_EQ(cold.stats.pages_put, (len + 7) / kTpp) << len;  // blocks 0 and 1 too
    EXPECT_EQ(cold.tokens, scratch.tokens) << len;
    auto keys = DeriveChain(wm.cache->layout().Id(), kTpp, absl::MakeConstSpan(prompt).first(64),
                            ModelFingerprint(*wm.weights));
    auto gone = other->Delete(absl::MakeConstSpan(keys).first(2));  // behind the window: unneeded
    ASSERT_TRUE(gone.ok() && *gone == 2u) << gone.status();
    GenerateResult warm = run(prompt, store->get());
    EXPECT_EQ(warm.stats.restored_tokens, restored) << len;
    EXPECT_EQ(warm.stats.restored_from.size(), 2u) << len;
    EXPECT_EQ(warm.stats.reuse_note, "") << len;
    EXPECT_EQ(warm.tokens, scratch.tokens) << len;
    for (size_t i = 0; i < scratch.logits.size(); ++i) {
      std::vector<double> ref(scratch.logits[i].begin(), scratch.logits[i].end());
      EXPECT_LT(MaxAbsDiff(warm.logits[i].data(), ref.data(), ref.size()), kLogitTol) << len << " " << i;
    }
  }
  EXPECT_EQ(wm.cache->free_pages(), wm.cache->num_pages());
}

TEST_F(ReuseTest, LayerwiseRestoreGivesTheSameOutput) {
  const std::pair<uint32_t, uint32_t> cases[] = {{10, 0}, {16, 15}, {17, 16}, {33, 32}, {50, 48}};
  uint32_t salt = 100;
  for (auto [len, expect_restored] : cases) {
    std::vector<uint32_t> prompt = PromptTokens(len, ++salt);
    GenerateResult scratch = Run(prompt, /*reuse=*/false);
    GenerateResult cold = Run(prompt, /*reuse=*/true, 8, /*layerwise=*/true);  // stores the pages
    EXPECT_EQ(cold.stats.restored_tokens, 0u) << len;
    EXPECT_EQ(cold.tokens, scratch.tokens) << len;
    GenerateResult whole = Run(prompt, /*reuse=*/true);
    GenerateResult lw = Run(prompt, /*reuse=*/true, 8, /*layerwise=*/true);
    EXPECT_TRUE(lw.stats.layerwise) << len;
    EXPECT_FALSE(whole.stats.layerwise) << len;
    EXPECT_EQ(lw.stats.reuse_note, "") << len;
    EXPECT_EQ(lw.stats.redone_tokens, 0u) << len;
    EXPECT_EQ(lw.stats.restored_tokens, expect_restored) << len;
    EXPECT_EQ(whole.stats.restored_tokens, expect_restored) << len;
    EXPECT_EQ(lw.stats.restored_from, whole.stats.restored_from) << len;
    EXPECT_EQ(lw.tokens, scratch.tokens) << len;
    EXPECT_EQ(whole.tokens, scratch.tokens) << len;
    // The same bytes restored and the same arithmetic: identical logits.
    EXPECT_EQ(lw.logits, whole.logits) << len;
  }
  EXPECT_EQ(m_.cache->free_pages(), m_.cache->num_pages());
}

TEST_F(ReuseTest, LayerwiseRestoreDeliversEveryLayerOfEveryPage) {
  std::vector<uint32_t> prompt = PromptTokens(64, 9);  // 4 pages
  Run(prompt, /*reuse=*/true);
  TinyModel fresh = MakeTiny(kTpp, Dtype::kFp16, /*pages=*/32);  // a zeroed arena
  auto store = PrefixStore::Connect(itest::Options(daemon_->endpoint()), fresh.cache.get(),
                                    ModelFingerprint(*fresh.weights));
  ASSERT_TRUE(store.ok()) << store.status();
  SeqId seq = fresh.cache->AddSequence();
  auto pending = (*store)->StartRestore(seq, prompt);
  ASSERT_TRUE(pending.ok()) << pending.status();
  EXPECT_EQ((*pending)->planned_tokens(), 63u);
  EXPECT_EQ(fresh.cache->Length(seq), 63u);  // recorded before the bytes arrive
  const uint32_t layers = fresh.cache->layout().layers;
  for (uint32_t l = 0; l < layers; ++l) EXPECT_TRUE((*pending)->WaitLayer(l).ok()) << l;
  auto restored = (*pending)->Finish();
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->tokens, 63u);
  EXPECT_EQ(restored->tiers.size(), 4u);
  EXPECT_EQ((*pending)->WaitLayer(layers).code(), absl::StatusCode::kAborted);
  uint64_t progress;
  std::memcpy(&progress, fresh.cache->arena().data() + PagedKvCache::kProgressOffset, 8);
  EXPECT_EQ(progress, layers);  // the daemon's counter, in the arena header
  // Every byte of every page equals the stored page.
  auto keys = DeriveChain(fresh.cache->layout().Id(), kTpp, absl::MakeConstSpan(prompt),
                          ModelFingerprint(*fresh.weights));
  auto pages = (*store)->client().GetInline(keys);  // a session of the same layout
  ASSERT_TRUE(pages.ok()) << pages.status();
  const std::vector<int32_t>& table = fresh.cache->BlockTable(seq);
  ASSERT_EQ(table.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const uint8_t* got = fresh.cache->arena().data() + fresh.cache->PageOffset(table[i]);
    ASSERT_EQ((*pages)[i].size(), fresh.cache->layout().PageBytes());
    EXPECT_EQ(std::memcmp(got, (*pages)[i].data(), (*pages)[i].size()), 0) << "page " << i;
  }
}

TEST_F(ReuseTest, PageGoneByTheGetIsRecomputed) {
  if (!test_hooks::kEnabled) GTEST_SKIP() << "built without KVTIER_TEST_HOOKS";
  std::vector<uint32_t> prompt = PromptTokens(50, 31);  // 3 full pages
  GenerateResult scratch = Run(prompt, /*reuse=*/false);
  const auto keys = DeriveChain(m_.cache->layout().Id(), kTpp, absl::MakeConstSpan(prompt).first(48),
                                ModelFingerprint(*m_.weights));
  std::unique_ptr<Client> other = Connect();
  auto& sync = test_hooks::SyncPoints::Get();
  sync.SetCallback("decoder.restore.after_lookup", [&](void*) {
    auto n = other->Delete(absl::MakeConstSpan(keys).subspan(1, 1));  // page 1: hit, then gone
    EXPECT_TRUE(n.ok() && *n == 1u) << n.status();
  });
  for (bool layerwise : {false, true}) {
    Run(prompt, /*reuse=*/true);  // (re)stores all three pages
    sync.EnableProcessing();
    GenerateResult r = Run(prompt, /*reuse=*/true, 8, layerwise);
    sync.DisableProcessing();
    EXPECT_EQ(r.stats.restored_tokens, 16u) << layerwise;  // page 0 only
    EXPECT_EQ(r.stats.computed_tokens, 34u) << layerwise;
    // Layer-wise prefilled the 2 tokens after page 2 before the reply told
    // that page 1 was missing; those are computed again.
    EXPECT_EQ(r.stats.redone_tokens, layerwise ? 2u : 0u);
    EXPECT_EQ(r.stats.reuse_note, "") << layerwise;
    EXPECT_EQ(r.tokens, scratch.tokens) << layerwise;
    for (size_t i = 0; i < scratch.logits.size(); ++i) {
      std::vector<double> ref(scratch.logits[i].begin(), scratch.logits[i].end());
      EXPECT_LT(MaxAbsDiff(r.logits[i].data(), ref.data(), ref.size()), kLogitTol) << i;
    }
  }
  sync.ClearAll();
  EXPECT_EQ(m_.cache->free_pages(), m_.cache->num_pages());
}

}  // namespace
}  // namespace kvtier::decoder::testing
