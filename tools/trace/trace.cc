// Format-independent parts of the trace library: the trace spec
// ("mooncake:PATH", "azure:PATH", "synthetic:k=v,..."), the mapping from
// trace blocks to daemon pages, and the summary figures reports quote.
#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tools/trace/trace.h"
#include "tools/trace/trace_internal.h"

namespace kvtier::trace {
namespace {

// Sets one "key=value" of a synthetic spec.
absl::Status SetSyntheticField(SyntheticOptions* o, absl::string_view key, absl::string_view v) {
  auto u32 = [&](uint32_t* f) { return absl::SimpleAtoi(v, f); };
  bool ok = false;
  if (key == "seed") ok = absl::SimpleAtoi(v, &o->seed);
  else if (key == "requests") ok = u32(&o->requests);
  else if (key == "block_tokens") ok = u32(&o->block_tokens);
  else if (key == "max_context_tokens") ok = u32(&o->max_context_tokens);
  else if (key == "conversations") ok = u32(&o->conversations);
  else if (key == "documents") ok = u32(&o->documents);
  else if (key == "document_tokens") ok = u32(&o->document_tokens);
  else if (key == "document_probability") ok = absl::SimpleAtod(v, &o->document_probability);
  else if (key == "requests_per_second") ok = absl::SimpleAtod(v, &o->requests_per_second);
  else
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic trace: unknown option '", key, "' (want seed, requests, block_tokens, "
        "max_context_tokens, conversations, documents, document_tokens, document_probability, "
        "requests_per_second)"));
  if (!ok)
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic trace: option '", key, "' has a bad value '", v, "'"));
  return absl::OkStatus();
}

absl::StatusOr<Trace> LoadSynthetic(absl::string_view args, const ParseOptions& opts) {
  SyntheticOptions o;
  for (absl::string_view kv : absl::StrSplit(args, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    RETURN_IF_ERROR(SetSyntheticField(&o, p.first, p.second));
  }
  if (opts.max_requests > 0) o.requests = std::min<uint64_t>(o.requests, opts.max_requests);
  RETURN_IF_ERROR(o.Validate());
  return GenerateSynthetic(o);
}

}  // namespace

absl::StatusOr<Trace> LoadTrace(const std::string& spec, const ParseOptions& opts) {
  if (spec == "synthetic") return LoadSynthetic("", opts);
  if (absl::StartsWith(spec, "synthetic:")) return LoadSynthetic(spec.substr(10), opts);
  if (absl::StartsWith(spec, "mooncake:")) return LoadMooncakeJsonl(spec.substr(9), opts);
  if (absl::StartsWith(spec, "azure:")) return LoadAzureCsv(spec.substr(6), {}, opts);
  if (absl::EndsWith(spec, ".jsonl")) return LoadMooncakeJsonl(spec, opts);
  if (absl::EndsWith(spec, ".csv")) return LoadAzureCsv(spec, {}, opts);
  return absl::InvalidArgumentError(absl::StrCat(
      "trace '", spec, "': want mooncake:PATH, azure:PATH, synthetic[:k=v,...], or a path "
      "ending in .jsonl (Mooncake) or .csv (Azure)"));
}

std::string PageMapping::Describe(uint32_t block_tokens) const {
  if (pages_per_block <= 1)
    return absl::StrFormat("one %d-token trace block = one page; page id = block id",
                           block_tokens);
  return absl::StrFormat(
      "one %d-token trace block = %d pages of %d tokens; page id of sub-page s > 0 = "
      "SplitMix64(block id, s) with the top bit set, sub-page 0 keeps the block id",
      block_tokens, pages_per_block, block_tokens / pages_per_block);
}

uint64_t PageId(uint64_t block_id, uint32_t sub_page) {
  if (sub_page == 0) return block_id;
  return internal::Mix64(block_id * 0x9E3779B97F4A7C15ull ^ sub_page) | (1ull << 63);
}

std::vector<uint64_t> RequestPages(const Request& r, const PageMapping& m) {
  const uint32_t per = std::max<uint32_t>(1, m.pages_per_block);
  std::vector<uint64_t> pages;
  pages.reserve(r.block_ids.size() * per);
  for (uint64_t b : r.block_ids)
    for (uint32_t s = 0; s < per; ++s) pages.push_back(PageId(b, s));
  return pages;
}

std::vector<uint64_t> DecodePages(const Request& r, uint32_t block_tokens, const PageMapping& m) {
  // Without an input block there is nothing to derive ids from (and no
  // prefix for them to extend).
  if (r.block_ids.empty() || block_tokens == 0) return {};
  const uint64_t in_full = r.input_tokens / block_tokens;
  const uint64_t all_full = (uint64_t{r.input_tokens} + r.output_tokens) / block_tokens;
  const uint32_t per = std::max<uint32_t>(1, m.pages_per_block);
  std::vector<uint64_t> pages;
  uint64_t id = r.block_ids.back();
  for (uint64_t k = in_full; k < all_full; ++k) {
    // Chained like the trace's own ids: each decode block names its prefix.
    id = internal::Mix64(id ^ 0xD3C0DEull) | (1ull << 63);
    for (uint32_t s = 0; s < per; ++s) pages.push_back(PageId(id, s));
  }
  return pages;
}

TraceSummary Summarize(const Trace& t) {
  TraceSummary s;
  s.requests = t.requests.size();
  absl::flat_hash_set<uint64_t> seen;
  for (const Request& r : t.requests) {
    s.block_refs += r.block_ids.size();
    seen.insert(r.block_ids.begin(), r.block_ids.end());
  }
  s.unique_blocks = seen.size();
  if (s.block_refs > 0)
    s.infinite_cache_hit_rate = 1.0 - static_cast<double>(s.unique_blocks) / s.block_refs;
  return s;
}

}  // namespace kvtier::trace
