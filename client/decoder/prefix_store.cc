// Prefix reuse through kvtierd: LOOKUP + GET into the arena before prefill,
// PUT of completed pages after it and during decode.
#include "kvtier/decoder/prefix_store.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kvtier/status_macros.h"
#include "kvtier/test_hooks.h"

namespace kvtier::decoder {
namespace {

void HashFloats(XXH3_state_t* st, const std::vector<float>& v) {
  XXH3_128bits_update(st, v.data(), v.size() * sizeof(float));
}

}  // namespace

PageKey ModelFingerprint(const ModelWeights& w) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset(st);
  const std::string config = w.config.ToJson();
  XXH3_128bits_update(st, config.data(), config.size());
  HashFloats(st, w.embed);
  for (const LayerWeights& l : w.layers) {
    for (const auto* t : {&l.input_norm, &l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.post_norm,
                          &l.gate_proj, &l.up_proj, &l.down_proj})
      HashFloats(st, *t);
    // Empty (hashing nothing) unless the checkpoint has biases.
    for (const auto* t : {&l.q_bias, &l.k_bias, &l.v_bias, &l.o_bias, &l.gate_bias, &l.up_bias,
                          &l.down_bias})
      HashFloats(st, *t);
  }
  HashFloats(st, w.final_norm);
  HashFloats(st, w.lm_head);
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, h);
  return PageKey::FromBytes(canon.digest);
}

absl::StatusOr<std::unique_ptr<PrefixStore>> PrefixStore::Connect(ClientOptions options,
                                                                  PagedKvCache* cache,
                                                                  std::optional<PageKey> root) {
  options.layout = cache->layout();
  if (options.client_name.empty()) options.client_name = "kvtier-decoder";
  ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(options));
  std::unique_ptr<PrefixStore> s(new PrefixStore(std::move(client), cache, root));
  // Registered once; GETs land in the arena and PUTs read from it in place
  // (for a GPU arena: the daemon's device copies, no host staging here).
  if (cache->on_gpu()) {
    ASSIGN_OR_RETURN(s->buffer_, cache->gpu_arena()->Register(*s->client_));
  } else {
    ASSIGN_OR_RETURN(s->buffer_, s->client_->RegisterBuffer(cache->arena()));
  }
  return s;
}

PrefixStore::~PrefixStore() {
  if (client_) (void)client_->UnregisterBuffer(buffer_);
}

absl::Status PrefixStore::SetRoot(const PageKey& root) {
  if (root_.has_value() && !(*root_ == root))
    return absl::FailedPreconditionError(absl::StrCat(
        "prefix store: keyed under model ", root_->ToHex(), " already, not ", root.ToHex()));
  root_ = root;
  return absl::OkStatus();
}

absl::StatusOr<PageKey> PrefixStore::Root() const {
  if (!root_.has_value())
    return absl::FailedPreconditionError("prefix store: no model fingerprint yet (SetRoot)");
  return *root_;
}

absl::StatusOr<RestorePlan> PrefixStore::Plan(SeqId seq, absl::Span<const uint32_t> prompt) {
  ASSIGN_OR_RETURN(const PageKey root, Root());
  RestorePlan p;
  if (cache_.Length(seq) != 0)
    return absl::FailedPreconditionError(absl::StrCat("restore: sequence ", seq, " is not empty"));
  const uint32_t tpp = cache_.tokens_per_page();
  p.pages_looked_up = uint32_t(prompt.size() / tpp);
  if (p.pages_looked_up == 0) return p;
  std::vector<PageKey> keys =
      DeriveChain(cache_.layout().Id(), tpp, prompt.first(size_t(p.pages_looked_up) * tpp), root);
  if (cache_.sliding_window() > 0) return PlanWindowTail(seq, uint32_t(prompt.size()), std::move(keys), p);
  ASSIGN_OR_RETURN(LookupResult hit, client_->Lookup(keys));
  // Tests evict a page here: a hit on LOOKUP that is gone by the GET.
  KVTIER_SYNC_POINT("decoder.restore.after_lookup");
  if (hit.hits == 0) return p;
  keys.resize(hit.hits);
  RETURN_IF_ERROR(cache_.Reserve(seq, hit.hits * tpp));
  const std::vector<int32_t>& table = cache_.BlockTable(seq);
  for (uint32_t i = 0; i < hit.hits; ++i) p.offsets.push_back(cache_.PageOffset(table[i]));
  p.keys = std::move(keys);
  return p;
}

absl::StatusOr<RestorePlan> PrefixStore::PlanWindowTail(SeqId seq, uint32_t prompt_tokens,
                                                        std::vector<PageKey> chain, RestorePlan p) {
  const uint32_t tpp = cache_.tokens_per_page();
  // Restoring blocks [0, k) leaves min(k * tpp, prompt - 1) tokens, whose
  // window needs blocks [first, k). LOOKUP answers the leading hits of the
  // keys it is given, so it is given that tail; when the tail is cut short
  // (eviction takes a chain's end first), the shorter prefix is tried.
  uint32_t k = uint32_t(chain.size());
  for (int tries = 0; tries < 3 && k > 0; ++tries) {
    const uint32_t first = cache_.FirstNeededBlock(std::min(k * tpp, prompt_tokens - 1));
    if (first >= k) break;
    auto tail = absl::MakeConstSpan(chain).subspan(first, k - first);
    ASSIGN_OR_RETURN(LookupResult hit, client_->Lookup(tail));
    KVTIER_SYNC_POINT("decoder.restore.after_lookup");
    if (hit.hits < tail.size()) {
      k = first + hit.hits;
      continue;
    }
    RETURN_IF_ERROR(cache_.ReserveWindowTail(seq, k * tpp, first));
    const std::vector<int32_t>& table = cache_.BlockTable(seq);
    for (uint32_t b = first; b < k; ++b) p.offsets.push_back(cache_.PageOffset(table[b]));
    p.first_block = first;
    p.keys.assign(tail.begin(), tail.end());
    p.skipped.assign(chain.begin(), chain.begin() + first);
    return p;
  }
  return p;
}

absl::StatusOr<RestoreResult> PrefixStore::Settle(SeqId seq, uint32_t prompt_tokens, RestorePlan plan,
                                                  const std::vector<TierKind>& tiers, bool committed) {
  RestoreResult r;
  r.pages_looked_up = plan.pages_looked_up;
  const uint32_t tpp = cache_.tokens_per_page();
  // A page evicted between LOOKUP and GET ends the usable prefix there.
  uint32_t got = 0;
  while (got < tiers.size() && got < plan.keys.size() && tiers[got] != TierKind::kNone) ++got;
  // Generation needs the logits of the prompt's last token, so when every
  // prompt token was restored the last one is computed again (its K/V slot
  // is rewritten in place; the page is already stored).
  const uint32_t end = plan.first_block + got;
  r.tokens = got == 0 ? 0 : std::min<uint32_t>(end * tpp, prompt_tokens - 1);
  // A window-tail GET cut short: the shorter prefix's window reaches blocks
  // that were never fetched, so nothing is usable.
  if (r.tokens > 0 && cache_.FirstNeededBlock(r.tokens) < plan.first_block) r.tokens = got = 0;
  r.tiers.assign(tiers.begin(), tiers.begin() + got);
  if (!committed) RETURN_IF_ERROR(cache_.Commit(seq, r.tokens));
  // Releases pages of a cut-short GET (and, layer-wise, what was computed on them).
  if (!committed || got < plan.keys.size()) RETURN_IF_ERROR(cache_.Truncate(seq, r.tokens));
  // The restored pages are stored already; Publish starts after them.
  plan.keys.resize(got);
  if (got > 0) plan.keys.insert(plan.keys.begin(), plan.skipped.begin(), plan.skipped.end());
  published_[seq].keys = std::move(plan.keys);
  return r;
}

absl::StatusOr<RestoreResult> PrefixStore::Restore(SeqId seq, absl::Span<const uint32_t> prompt) {
  ASSIGN_OR_RETURN(RestorePlan plan, Plan(seq, prompt));
  if (plan.keys.empty()) return RestoreResult{.pages_looked_up = plan.pages_looked_up};
  auto tiers = client_->Get(plan.keys, buffer_, plan.offsets);
  if (!tiers.ok()) {
    (void)cache_.Truncate(seq, 0);
    return tiers.status();
  }
  return Settle(seq, uint32_t(prompt.size()), std::move(plan), *tiers, /*committed=*/false);
}

absl::StatusOr<PutResult> PrefixStore::Publish(SeqId seq, absl::Span<const uint32_t> tokens) {
  ASSIGN_OR_RETURN(const PageKey root, Root());
  PutResult total;
  const uint32_t tpp = cache_.tokens_per_page();
  const uint32_t length = cache_.Length(seq);
  if (tokens.size() < length)
    return absl::InvalidArgumentError(absl::StrCat("publish: ", tokens.size(), " tokens for a sequence of ", length));
  const uint32_t full = length / tpp;
  Published& pub = published_[seq];
  if (full == 0) return total;
  std::vector<PageKey> keys =
      DeriveChain(cache_.layout().Id(), tpp, tokens.first(size_t(full) * tpp), root);
  // Stored pages whose key changed (rolled back and regenerated) are redone.
  size_t done = 0;
  while (done < pub.keys.size() && done < keys.size() && pub.keys[done] == keys[done]) ++done;
  const std::vector<int32_t>& table = cache_.BlockTable(seq);
  while (done < full && table[done] == kNoPage) ++done;  // freed by the sliding window
  if (done >= full) return total;
  std::vector<uint64_t> offsets;
  for (size_t i = done; i < full; ++i) offsets.push_back(cache_.PageOffset(table[i]));
  const PageKey parent = done == 0 ? root : keys[done - 1];
  ASSIGN_OR_RETURN(total, client_->Put(absl::MakeConstSpan(keys).subspan(done), parent, buffer_, offsets));
  // Only the leading pages kept: a page may fail anywhere in the chain.
  keys.resize(done + total.leading_kept);
  pub.keys = std::move(keys);
  return total;
}

}  // namespace kvtier::decoder
