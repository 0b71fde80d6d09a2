// PrefixStore: the decoder's link to kvtierd. It registers the KV arena (a
// shared-memory buffer) with the daemon once; Restore then LOOKUPs a prompt's
// full pages and GETs the leading hits straight into the sequence's pages,
// and Publish PUTs every newly completed page of a sequence from the arena.
//
// Page keys are api/'s prefix chain over the sequence's tokens, rooted at a
// fingerprint of the model (config + weights) instead of zero: the layout id
// alone does not tell two models of one shape apart, and their KV differs.
//
// Thread-safety: not thread-safe (a Client is one session on one socket).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
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

class PrefixStore {
 public:
  // Connects with `options` (its layout is set to the cache's) and registers
  // the cache's arena. Unavailable when no daemon answers.
  static absl::StatusOr<std::unique_ptr<PrefixStore>> Connect(ClientOptions options,
                                                              PagedKvCache* cache,
                                                              const PageKey& root);
  ~PrefixStore();

  Client& client() { return *client_; }

  // For an empty sequence: restores the leading cached full pages of
  // `prompt`. At least the prompt's last token is left to compute (its
  // logits start generation): when every token was restored, the sequence
  // is rolled back by one. The sequence then holds RestoreResult.tokens.
  absl::StatusOr<RestoreResult> Restore(SeqId seq, absl::Span<const uint32_t> prompt);

  // PUTs the sequence's full pages not yet stored. `tokens` are the
  // sequence's tokens (at least Length(seq) of them). Pages rewritten after a
  // truncation are noticed by their keys and stored again.
  absl::StatusOr<PutResult> Publish(SeqId seq, absl::Span<const uint32_t> tokens);

  // Drops what Publish remembers about `seq` (call when it is removed).
  void Forget(SeqId seq) { published_.erase(seq); }

 private:
  struct Published {
    std::vector<PageKey> keys;  // keys of the pages stored so far, in order
  };
  PrefixStore(std::unique_ptr<Client> client, PagedKvCache* cache, const PageKey& root)
      : client_(std::move(client)), cache_(*cache), root_(root) {}

  std::unique_ptr<Client> client_;
  PagedKvCache& cache_;
  PageKey root_;
  BufferId buffer_ = 0;
  absl::flat_hash_map<SeqId, Published> published_;
};

}  // namespace kvtier::decoder
