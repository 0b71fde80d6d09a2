// Azure LLM inference CSV parser (`TIMESTAMP,ContextTokens,GeneratedTokens`,
// TIMESTAMP like "2023-11-16 18:17:03.9799600") and the seeded prefix-sharing
// model that gives its requests block ids, since the trace itself has none.
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "tools/trace/trace.h"
#include "tools/trace/trace_internal.h"

namespace kvtier::trace {
namespace {

using internal::BadLine;
using internal::CeilDiv;
using internal::LineReader;

constexpr absl::string_view kHeader = "TIMESTAMP,ContextTokens,GeneratedTokens";

std::string ParseCount(absl::string_view field, absl::string_view text, uint32_t* out) {
  text = absl::StripAsciiWhitespace(text);
  uint32_t v = 0;
  // SimpleAtoi accepts a leading '+' or '-'; a token count is plain digits.
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == text.npos;
  if (!digits || !absl::SimpleAtoi(text, &v))
    return absl::StrCat("field '", field, "' = '", text,
                        "' is not a non-negative integer below 2^32");
  *out = v;
  return "";
}

std::string ParseRow(absl::string_view line, absl::Time* ts, Request* r) {
  std::vector<absl::string_view> f = absl::StrSplit(line, ',');
  if (f.size() != 3)
    return absl::StrCat("expected 3 comma-separated fields (", kHeader, "), got ", f.size());
  std::string err;
  const absl::string_view stamp = absl::StripAsciiWhitespace(f[0]);
  if (!absl::ParseTime("%Y-%m-%d %H:%M:%E*S", stamp, absl::UTCTimeZone(), ts, &err))
    return absl::StrCat("field 'TIMESTAMP' = '", stamp,
                        "' is not 'YYYY-MM-DD HH:MM:SS.fffffff': ", err);
  std::string why = ParseCount("ContextTokens", f[1], &r->input_tokens);
  if (why.empty()) why = ParseCount("GeneratedTokens", f[2], &r->output_tokens);
  return why;
}

// The sharing model of AzurePrefixModel. Block ids are handed out from a
// counter; a shared prefix reuses the ids of the blocks it shares, so the
// ids stay prefix-closed like Mooncake's.
class SharingModel {
 public:
  SharingModel(const AzurePrefixModel& m, uint32_t block_tokens)
      : m_(m), rng_(m.seed), block_tokens_(block_tokens) {
    const uint32_t sp_blocks = m.system_prompt_tokens / block_tokens;
    for (uint32_t p = 0; p < m.system_prompts; ++p) {
      std::vector<uint64_t> ids(sp_blocks);
      for (auto& id : ids) id = next_id_++;
      prompts_.push_back(std::move(ids));
    }
  }

  void Assign(Request* r) {
    const uint64_t full = r->input_tokens / block_tokens_;
    const uint64_t blocks = CeilDiv(r->input_tokens, block_tokens_);
    std::vector<uint64_t>* conv = nullptr;
    const std::vector<uint64_t>* prefix = nullptr;
    if (!open_.empty() && rng_.Chance(m_.multi_turn_probability)) {
      conv = &open_[rng_.Uniform(open_.size())];  // the next turn of a conversation
      prefix = conv;
    } else {
      if (!prompts_.empty()) prefix = &prompts_[rng_.Uniform(prompts_.size())];
      if (open_.size() < m_.open_conversations) {
        conv = &open_.emplace_back();
      } else if (!open_.empty()) {
        conv = &open_[rng_.Uniform(open_.size())];  // a new conversation replaces an old one
      }
    }
    // Only full blocks are shared: a trailing partial block always differs.
    const uint64_t shared = prefix ? std::min<uint64_t>(prefix->size(), full) : 0;
    r->block_ids.clear();
    if (prefix) r->block_ids.assign(prefix->begin(), prefix->begin() + shared);
    while (r->block_ids.size() < blocks) r->block_ids.push_back(next_id_++);
    if (conv) conv->assign(r->block_ids.begin(), r->block_ids.begin() + full);
  }

 private:
  AzurePrefixModel m_;
  internal::Rng rng_;
  uint32_t block_tokens_;
  uint64_t next_id_ = 0;
  std::vector<std::vector<uint64_t>> prompts_;
  std::vector<std::vector<uint64_t>> open_;
};

}  // namespace

std::string AzurePrefixModel::Describe() const {
  return absl::StrFormat(
      "azure-sharing(seed=%d, system_prompts=%d x %d tokens, multi_turn_probability=%.2f, "
      "open_conversations=%d): a new conversation starts with one of the system prompts "
      "(uniform); a request continues a random open conversation with the given probability "
      "and shares its full blocks; every other block is unique",
      seed, system_prompts, system_prompt_tokens, multi_turn_probability, open_conversations);
}

absl::StatusOr<Trace> LoadAzureCsv(const std::string& path, const AzurePrefixModel& model,
                                   const ParseOptions& opts) {
  if (model.multi_turn_probability < 0 || model.multi_turn_probability > 1)
    return absl::InvalidArgumentError(absl::StrCat("multi_turn_probability ",
                                                   model.multi_turn_probability,
                                                   " is not in [0, 1]"));
  LineReader reader(path);
  RETURN_IF_ERROR(reader.Open());
  Trace t;
  t.source = "azure:" + path;
  t.prefix_model = model.Describe();
  t.block_tokens = 512;
  std::string line;
  if (!reader.Next(&line) || absl::StripAsciiWhitespace(line) != kHeader)
    return absl::InvalidArgumentError(absl::StrCat(path, ":1: expected the header '", kHeader,
                                                   "', got '", line, "'"));
  SharingModel sharing(model, t.block_tokens);
  bool have_first = false;
  absl::Time first;
  while (reader.Next(&line)) {
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    Request r;
    r.line = reader.line_no();
    absl::Time ts;
    std::string why = ParseRow(line, &ts, &r);
    if (!why.empty()) {
      RETURN_IF_ERROR(BadLine(reader, why, opts, &t));
      continue;
    }
    if (!have_first) first = ts, have_first = true;
    r.timestamp_ms = absl::ToDoubleMilliseconds(ts - first);
    sharing.Assign(&r);
    t.requests.push_back(std::move(r));
    if (opts.max_requests > 0 && t.requests.size() >= opts.max_requests) break;
  }
  return t;
}

}  // namespace kvtier::trace
