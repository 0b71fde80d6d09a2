// Request traces for replay (kvtier-stress) and offline simulation
// (kvtier-sim): parsers for the Mooncake JSONL and Azure LLM inference CSV
// formats, a seeded synthetic long-context generator, and the mapping from a
// trace's token blocks to daemon pages. A trace is data only; nothing here
// talks to the daemon or the store.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier::trace {

// One inference request. `block_ids[i]` names the whole prefix up to and
// including block i (Mooncake's convention): two requests with equal
// block_ids[i] share their first i+1 blocks of `block_tokens` tokens.
struct Request {
  double timestamp_ms = 0;     // arrival, relative to the trace's first request
  uint32_t input_tokens = 0;
  uint32_t output_tokens = 0;
  // One id per input block, ceil(input_tokens / block_tokens) of them: the
  // trailing partial block has its own id (Mooncake's hash_ids do the same,
  // and the trace statistics count it), so every format follows that rule.
  std::vector<uint64_t> block_ids;
  uint64_t line = 0;           // 1-based line of the source file (0: generated)
};

struct Trace {
  std::string source;          // e.g. "mooncake:tests/data/synthetic_trace.jsonl"
  // How prefix sharing was obtained, named in every report: "from trace
  // (hash_ids)" for Mooncake, the seeded model and its parameters otherwise.
  std::string prefix_model;
  uint32_t block_tokens = 512;
  std::vector<Request> requests;
  // Malformed lines skipped when ParseOptions::stop_on_error is false, each
  // "path:line: reason".
  std::vector<std::string> skipped;
};

struct ParseOptions {
  bool stop_on_error = true;   // false: skip malformed lines, record them in Trace::skipped
  size_t max_requests = 0;     // 0: all
};

// Mooncake JSONL: one JSON object per line with `timestamp` (ms),
// `input_length`, `output_length` and `hash_ids` (one id per 512-token block).
// Errors name the file and 1-based line.
absl::StatusOr<Trace> LoadMooncakeJsonl(const std::string& path, const ParseOptions& opts = {});

// Azure LLM inference CSV (`TIMESTAMP,ContextTokens,GeneratedTokens`). The
// trace has no prefix information, so block ids come from a seeded model of
// prefix sharing: a pool of system prompts shared by many requests and
// multi-turn conversations whose next turn extends the previous one.
struct AzurePrefixModel {
  uint64_t seed = 1;
  uint32_t system_prompts = 8;        // distinct shared system prompts
  uint32_t system_prompt_tokens = 2048;
  double multi_turn_probability = 0.5;  // a request continues an open conversation
  uint32_t open_conversations = 64;   // conversations a new turn can continue
  std::string Describe() const;       // named in reports
};
absl::StatusOr<Trace> LoadAzureCsv(const std::string& path, const AzurePrefixModel& model = {},
                                   const ParseOptions& opts = {});

// Seeded synthetic long-context traffic: multi-turn conversations that grow
// turn by turn and shared documents read by many requests, context up to
// `max_context_tokens`.
struct SyntheticOptions {
  uint64_t seed = 1;
  uint32_t requests = 1000;
  uint32_t block_tokens = 512;
  uint32_t max_context_tokens = 128 * 1024;
  uint32_t conversations = 64;
  uint32_t documents = 16;
  uint32_t document_tokens = 32 * 1024;
  double document_probability = 0.3;  // a request reads a shared document
  double requests_per_second = 10;    // arrival rate (Poisson)
  std::string Describe() const;
  // Fields non-zero where they must be, probabilities in [0, 1], a document
  // shorter than max_context_tokens.
  absl::Status Validate() const;
};
Trace GenerateSynthetic(const SyntheticOptions& opts);

// "mooncake:PATH", "azure:PATH", "synthetic[:requests=N,seed=S,...]", or a
// bare PATH (format from the extension: .jsonl → Mooncake, .csv → Azure).
absl::StatusOr<Trace> LoadTrace(const std::string& spec, const ParseOptions& opts = {});

// Mapping from trace blocks to daemon pages: one trace block of
// `block_tokens` becomes `pages_per_block` pages of block_tokens /
// pages_per_block tokens each. Page (block id b, sub-page s) has the id
// PageId(b, s); equal prefixes map to equal page ids, and the id sequence of
// a request is again prefix-closed, so a page id names its whole prefix.
struct PageMapping {
  uint32_t pages_per_block = 1;
  std::string Describe(uint32_t block_tokens) const;
};
uint64_t PageId(uint64_t block_id, uint32_t sub_page);
// The request's page ids, first page first.
std::vector<uint64_t> RequestPages(const Request& r, const PageMapping& m);
// Page ids a decode adds as the output grows past full blocks: the blocks
// after the input's, derived from the last input block id so that the same
// request replayed twice produces the same ids. Count = full blocks of
// (input_tokens + output_tokens) minus the input's full blocks, times
// pages_per_block.
std::vector<uint64_t> DecodePages(const Request& r, uint32_t block_tokens, const PageMapping& m);

// Summary figures for reports: block references, unique blocks, the
// infinite-cache bound (share of block references that repeat an earlier one).
struct TraceSummary {
  uint64_t requests = 0;
  uint64_t block_refs = 0;
  uint64_t unique_blocks = 0;
  double infinite_cache_hit_rate = 0;
};
TraceSummary Summarize(const Trace& t);

}  // namespace kvtier::trace
