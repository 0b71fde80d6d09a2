// PrefixStore: the decoder's link to kvtierd. It registers the KV arena (a
// shared-memory buffer) with the daemon once; Restore then LOOKUPs a prompt's
// full pages and GETs the leading hits straight into the sequence's pages,
// and Publish PUTs every newly completed page of a sequence from the arena.
//
// Page keys are api/'s prefix chain over the sequence's tokens, rooted at a
// fingerprint of the model (config + weights) instead of zero: the layout id
// alone does not tell two models of one shape apart, and their KV differs.
//
// StartRestore is the layer-wise form: the GET runs on a helper thread and
// delivers layer 0 of every page, then layer 1, ..., so the forward pass of
// the remaining tokens computes layer l while later layers are still copied.
//
// Thread-safety: not thread-safe (a Client is one session on one socket). It
// may be made on one thread and used on another after a handoff that
// synchronizes (a thread join, a future): DecoderSession connects on a
// helper thread while its weights load.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "kvtier/client.h"
#include "kvtier/decoder/kv_cache.h"
#include "kvtier/decoder/weights.h"
#include "kvtier/page_key.h"

namespace kvtier::decoder {

// 128-bit XXH3 of the config and every weight: the root of the key chain.
PageKey ModelFingerprint(const ModelWeights& weights);

struct RestoreResult {
  uint32_t tokens = 0;           // tokens whose K/V were copied in
  uint32_t pages_looked_up = 0;  // full pages eligible for reuse
  std::vector<TierKind> tiers;   // tier each restored page came from
};

// What a restore asks the daemon for: the leading LOOKUP hits and where
// they go in the arena (their pages are reserved in the sequence).
// With a sliding window only the chain's tail the window needs is fetched:
// blocks [first_block, first_block + keys.size()); the blocks before are
// behind the window, never fetched, and their keys are `skipped`.
struct RestorePlan {
  uint32_t pages_looked_up = 0;
  uint32_t first_block = 0;
  std::vector<PageKey> skipped;   // keys of blocks [0, first_block)
  std::vector<PageKey> keys;      // the hits
  std::vector<uint64_t> offsets;  // arena offset of each hit's page
};

class PendingRestore;

class PrefixStore {
 public:
  // Connects with `options` (its layout is set to the cache's) and registers
  // the cache's arena, which must outlive the store. Unavailable when no
  // daemon answers. `root` is the fingerprint of the model the pages are
  // keyed under; without one the store connects before the weights are
  // hashed and derives no key until SetRoot.
  static absl::StatusOr<std::unique_ptr<PrefixStore>> Connect(
      ClientOptions options, PagedKvCache* cache, std::optional<PageKey> root = std::nullopt);
  ~PrefixStore();

  // Sets the root Connect was not given. Restore, StartRestore and Publish
  // fail with FailedPrecondition until a root is set. FailedPrecondition
  // when another root is set already: what Publish remembers was keyed
  // under it.
  absl::Status SetRoot(const PageKey& root);

  Client& client() { return *client_; }
  // The arena's registration (GETs into it land where Restore puts pages).
  BufferId buffer() const { return buffer_; }

  // For an empty sequence: restores the leading cached full pages of
  // `prompt`. At least the prompt's last token is left to compute (its
  // logits start generation): when every token was restored, the sequence
  // is rolled back by one. The sequence then holds RestoreResult.tokens.
  // With a sliding window only the pages the window needs at that length
  // are looked up and fetched (the earlier ones stay freed).
  absl::StatusOr<RestoreResult> Restore(SeqId seq, absl::Span<const uint32_t> prompt);

  // The layer-wise Restore (docs/PROTOCOL.md, "Layer-wise GET"): LOOKUPs,
  // then records the hits' tokens in the sequence at once (the sequence
  // holds PendingRestore::planned_tokens()) and starts the GET on a helper
  // thread. Run the forward pass of the rest with PendingRestore::WaitLayer
  // as its layer gate, then call Finish. Until Finish returns, nothing else
  // may use this store (its Client is busy on the helper thread) nor free
  // the sequence's pages. FailedPrecondition with a sliding window: pages
  // behind it would be freed, and reused, while the GET still writes them.
  absl::StatusOr<std::unique_ptr<PendingRestore>> StartRestore(SeqId seq,
                                                               absl::Span<const uint32_t> prompt);

  // PUTs the sequence's full pages not yet stored. `tokens` are the
  // sequence's tokens (at least Length(seq) of them). Pages rewritten after a
  // truncation are noticed by their keys and stored again.
  absl::StatusOr<PutResult> Publish(SeqId seq, absl::Span<const uint32_t> tokens);

  // Drops what Publish remembers about `seq` (call when it is removed).
  void Forget(SeqId seq) { published_.erase(seq); }

 private:
  friend class PendingRestore;
  // LOOKUP, then reserves the hits' pages in the empty sequence.
  absl::StatusOr<RestorePlan> Plan(SeqId seq, absl::Span<const uint32_t> prompt);
  // Plan's sliding-window form over the prompt's full-page `chain`.
  absl::StatusOr<RestorePlan> PlanWindowTail(SeqId seq, uint32_t prompt_tokens,
                                             std::vector<PageKey> chain, RestorePlan p);
  // After the GET: keeps the leading pages that arrived. `committed`: the
  // plan's tokens were recorded in the sequence before the GET (layer-wise).
  absl::StatusOr<RestoreResult> Settle(SeqId seq, uint32_t prompt_tokens, RestorePlan plan,
                                       const std::vector<TierKind>& tiers, bool committed);
  struct Published {
    std::vector<PageKey> keys;  // keys of the pages stored so far, in order
  };
  // The root, or FailedPrecondition before SetRoot.
  absl::StatusOr<PageKey> Root() const;
  PrefixStore(std::unique_ptr<Client> client, PagedKvCache* cache, std::optional<PageKey> root)
      : client_(std::move(client)), cache_(*cache), root_(root) {}

  std::unique_ptr<Client> client_;
  PagedKvCache& cache_;
  std::optional<PageKey> root_;
  BufferId buffer_ = 0;
  absl::flat_hash_map<SeqId, Published> published_;
};

// A layer-wise GET in flight (PrefixStore::StartRestore). WaitLayer runs on
// the decoder's thread; the helper thread only sets the layer count.
class PendingRestore {
 public:
  ~PendingRestore();  // finishes the restore if Finish was not called
  PendingRestore(const PendingRestore&) = delete;
  PendingRestore& operator=(const PendingRestore&) = delete;

  // Tokens the sequence holds now, if every looked-up page arrives.
  uint32_t planned_tokens() const { return planned_; }
  // Blocks until layer `layer` of every page is in the arena. Aborted when
  // the GET failed or ended before that layer.
  absl::Status WaitLayer(uint32_t layer);
  // Waits for the GET's reply and settles the sequence: when pages came back
  // missing it is truncated to RestoreResult.tokens (< planned_tokens(); a
  // forward pass run meanwhile read pages that never came and must be
  // redone from there); when the GET failed, to 0 and the error returned.
  absl::StatusOr<RestoreResult> Finish();
  // Time the forward pass spent blocked in WaitLayer; LOOKUP + GET time.
  double wait_ms() const { return wait_ms_; }
  double get_ms() const;

 private:
  friend class PrefixStore;
  PendingRestore(PrefixStore* store, SeqId seq, uint32_t prompt_tokens, uint32_t planned,
                 RestorePlan plan, std::chrono::steady_clock::time_point start);
  void Run();  // the helper thread

  PrefixStore& store_;
  const SeqId seq_;
  const uint32_t prompt_tokens_, planned_;
  RestorePlan plan_;
  const std::chrono::steady_clock::time_point start_;
  double wait_ms_ = 0;
  bool finished_ = false;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  uint32_t layers_ ABSL_GUARDED_BY(mu_) = 0;  // layers complete
  bool done_ ABSL_GUARDED_BY(mu_) = false;    // the GET replied or failed
  double get_ms_ ABSL_GUARDED_BY(mu_) = 0;
  absl::StatusOr<std::vector<TierKind>> tiers_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // runs Run(); joined by Finish
};

}  // namespace kvtier::decoder
