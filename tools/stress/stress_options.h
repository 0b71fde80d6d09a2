// kvtier-stress configuration: what to replay, against which daemon, with
// which page layout, and how trace blocks and page ids become page keys.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kvtier/layout.h"
#include "kvtier/page_key.h"
#include "tools/trace/trace.h"

namespace kvtier::stress {

struct StressOptions {
  std::string trace;               // trace spec (trace::LoadTrace)
  // Daemons to replay over: request i goes to endpoints[i % size()], and
  // every session holds one connection to each. An empty entry is the
  // default ipc endpoint; never empty itself.
  std::vector<std::string> endpoints = {""};
  std::string tenant = "default";
  std::string token;
  int concurrency = 1;             // sessions, one thread each
  // Page layout. page_bytes > 0 picks {1 layer, fp16, heads x head_dim to fit};
  // otherwise layers x kv_heads x head_dim x dtype. tokens_per_page is always
  // block_tokens / pages_per_block.
  uint64_t page_bytes = 0;
  uint32_t layers = 4, kv_heads = 2, head_dim = 64;  // 1 MiB pages at 512 tokens, fp16
  std::string dtype = "fp16";
  uint32_t pages_per_block = 1;
  double time_scale = 0;           // replay time = trace time x scale; 0: as fast as possible
  size_t max_requests = 0;         // 0: the whole trace
  // Parse errors, failed requests and corrupt pages stop the run; false:
  // skip the line / count the failure and go on (failover runs need this).
  bool stop_on_error = true;
  bool decode = true;              // PUT the pages the output completes
  uint32_t batch_pages = 32;       // pages per GET/PUT call (and buffer slots per session)
  // Before serving request i, send a PREFETCH hint for request i+N's pages,
  // as a scheduler with N requests queued would (0: no hints).
  uint32_t prefetch_ahead = 0;
  uint64_t timeout_ms = 60000;
  trace::AzurePrefixModel azure;   // for Azure CSV traces
};

// The layout pages are replayed with, validated.
absl::StatusOr<Layout> MakeLayout(const StressOptions& o, uint32_t block_tokens);

// Names a trace in its page keys, so two different traces replayed against
// one daemon never share pages while a rerun of the same trace does: FNV-1a
// 64 over the trace's source and prefix model (stable across runs).
inline uint64_t TraceSalt(const trace::Trace& t) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const std::string* s : {&t.source, &t.prefix_model})
    for (unsigned char ch : *s) h = (h ^ ch) * 0x100000001B3ull;
  return h;
}

// How a page id becomes a key. The trace's ids already name a whole prefix,
// so the key needs no chaining: it is the regular page-key derivation with a
// zero parent over the trace salt and the page id as the block's "tokens".
// Equal page ids of one trace give equal keys in every session.
inline PageKey KeyForPage(uint64_t layout_id, uint64_t salt, uint64_t page_id) {
  const std::array<uint32_t, 4> words = {
      static_cast<uint32_t>(salt), static_cast<uint32_t>(salt >> 32),
      static_cast<uint32_t>(page_id), static_cast<uint32_t>(page_id >> 32)};
  return DerivePageKey(layout_id, PageKey::Zero(), words);
}
inline constexpr char kKeyRule[] =
    "key = DerivePageKey(layout_id, parent = 0, tokens = {trace salt lo32, hi32, page id lo32, "
    "hi32}) (SHA-256 page-key encoding, docs/PROTOCOL.md), trace salt = FNV-1a 64 of the "
    "trace's source and prefix model; PUT parents chain the request's keys";
inline constexpr char kPatternRule[] =
    "page bytes = tools::FillFastPattern(key): word i = PatternSeed(key) ^ ((i + 1) * "
    "0x9E3779B97F4A7C15); every GET checks every byte";

}  // namespace kvtier::stress
