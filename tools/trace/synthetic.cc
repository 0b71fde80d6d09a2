// Seeded synthetic long-context traffic: multi-turn conversations whose
// context grows turn by turn (up to max_context_tokens) and shared documents
// that start many conversations. The same options give the same trace on
// every platform (internal::Rng, no std:: distributions).
#include "absl/strings/str_format.h"
#include "tools/trace/trace.h"
#include "tools/trace/trace_internal.h"

namespace kvtier::trace {
namespace {

using internal::CeilDiv;

// Token counts of one turn: the user's new message and the model's answer.
constexpr uint64_t kMinUserTokens = 128, kMaxUserTokens = 8192;
constexpr uint64_t kMinOutputTokens = 16, kMaxOutputTokens = 1024;

struct Conversation {
  uint64_t tokens = 0;            // context so far (inputs and outputs of earlier turns)
  std::vector<uint64_t> blocks;   // ids of its full blocks, first block first
};

class Generator {
 public:
  explicit Generator(const SyntheticOptions& o)
      : o_(o), rng_(o.seed), convs_(o.conversations), docs_(o.documents) {}

  Request Next() {
    now_ms_ += rng_.Exponential(1000.0 / o_.requests_per_second);
    Conversation& c = convs_[rng_.Uniform(convs_.size())];
    const uint64_t user = rng_.Between(kMinUserTokens, kMaxUserTokens);
    if (c.tokens == 0 || c.tokens + user > o_.max_context_tokens) Restart(&c);
    Request r;
    r.timestamp_ms = now_ms_;
    r.input_tokens = static_cast<uint32_t>(std::min<uint64_t>(c.tokens + user,
                                                              o_.max_context_tokens));
    r.output_tokens = static_cast<uint32_t>(rng_.Between(kMinOutputTokens, kMaxOutputTokens));
    const uint64_t full = r.input_tokens / o_.block_tokens;
    // The conversation's full blocks are this turn's prefix; the rest is new.
    r.block_ids.assign(c.blocks.begin(), c.blocks.begin() + std::min<uint64_t>(full, c.blocks.size()));
    while (r.block_ids.size() < CeilDiv(r.input_tokens, o_.block_tokens))
      r.block_ids.push_back(next_id_++);
    c.blocks.assign(r.block_ids.begin(), r.block_ids.begin() + full);
    c.tokens = uint64_t{r.input_tokens} + r.output_tokens;
    return r;
  }

 private:
  // A conversation starts empty or, with document_probability, with a shared
  // document (whose blocks every reader shares).
  void Restart(Conversation* c) {
    c->tokens = 0;
    c->blocks.clear();
    if (docs_.empty() || !rng_.Chance(o_.document_probability)) return;
    std::vector<uint64_t>& doc = docs_[rng_.Uniform(docs_.size())];
    if (doc.empty()) {
      doc.resize(o_.document_tokens / o_.block_tokens);
      for (auto& id : doc) id = next_id_++;
    }
    c->tokens = o_.document_tokens;
    c->blocks = doc;
  }

  SyntheticOptions o_;
  internal::Rng rng_;
  std::vector<Conversation> convs_;
  std::vector<std::vector<uint64_t>> docs_;
  uint64_t next_id_ = 0;
  double now_ms_ = 0;
};

}  // namespace

std::string SyntheticOptions::Describe() const {
  return absl::StrFormat(
      "synthetic(seed=%d, requests=%d, block_tokens=%d, max_context_tokens=%d, "
      "conversations=%d, documents=%d x %d tokens, document_probability=%.2f, "
      "requests_per_second=%g): each request is the next turn of a random conversation "
      "(user turn %d-%d tokens, output %d-%d); a conversation restarts when it would pass "
      "max_context_tokens, opening with a shared document at document_probability",
      seed, requests, block_tokens, max_context_tokens, conversations, documents,
      document_tokens, document_probability, requests_per_second, kMinUserTokens,
      kMaxUserTokens, kMinOutputTokens, kMaxOutputTokens);
}

absl::Status SyntheticOptions::Validate() const {
  auto bad = [](const std::string& why) {
    return absl::InvalidArgumentError("synthetic trace: " + why);
  };
  if (requests == 0) return bad("requests must be > 0");
  if (block_tokens == 0) return bad("block_tokens must be > 0");
  if (conversations == 0) return bad("conversations must be > 0");
  if (max_context_tokens < kMaxUserTokens)
    return bad(absl::StrCat("max_context_tokens ", max_context_tokens, " is below ",
                            kMaxUserTokens, " (one user turn)"));
  if (documents > 0 && document_tokens + kMaxUserTokens > max_context_tokens)
    return bad(absl::StrCat("document_tokens ", document_tokens, " plus a user turn of up to ",
                            kMaxUserTokens, " exceeds max_context_tokens ", max_context_tokens));
  if (!(document_probability >= 0 && document_probability <= 1))
    return bad(absl::StrCat("document_probability ", document_probability, " is not in [0, 1]"));
  if (!(requests_per_second > 0))
    return bad(absl::StrCat("requests_per_second ", requests_per_second, " must be > 0"));
  return absl::OkStatus();
}

Trace GenerateSynthetic(const SyntheticOptions& opts) {
  Trace t;
  t.source = "synthetic";
  t.prefix_model = opts.Describe();
  t.block_tokens = opts.block_tokens;
  // Callers validate first (LoadTrace does); an invalid request yields no
  // requests and says why rather than dividing by zero.
  if (absl::Status st = opts.Validate(); !st.ok()) {
    t.skipped.push_back(std::string(st.message()));
    return t;
  }
  Generator g(opts);
  t.requests.reserve(opts.requests);
  for (uint32_t i = 0; i < opts.requests; ++i) t.requests.push_back(g.Next());
  return t;
}

}  // namespace kvtier::trace
