// Decoding and structural validation of client requests. Everything a client
// sends passes through DecodeRequest before any handler sees it, so this is
// the fuzzing surface (tests/fuzz/request_decoder_fuzz.cc). It checks shape
// only (version, sizes, counts); authorization and buffer bounds are checked
// by the handlers, which know the session.
#pragma once

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kvtier.pb.h"
#include "kvtier/errors.h"
#include "kvtier/page_key.h"

namespace kvtier::daemon {

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kMaxKeysPerRequest = 4096;
// Runs of a scattered page (Get/Put.page_runs): an engine's page is many
// runs per layer and head (vLLM: one per token, head, K/V and layer, 8192
// for a 16-token page of an 8-head, 32-layer model).
inline constexpr size_t kMaxPageRuns = 65536;
// A batched LOOKUP (Lookup.chain_lengths): chains of up to kMaxKeysPerRequest
// keys each, within these totals (the wire schema's LookupBatchLimit).
inline constexpr size_t kMaxLookupBatchChains = wire::LOOKUP_BATCH_MAX_CHAINS;
inline constexpr size_t kMaxLookupBatchKeys = wire::LOOKUP_BATCH_MAX_KEYS;
// Longest tenant name HELLO accepts; the tenants file refuses longer ones.
inline constexpr size_t kMaxTenantNameBytes = 256;
inline constexpr size_t kSessionIdBytes = 16;

struct DecodedRequest {
  wire::Request request;
  // LOOKUP/GET/PUT/DELETE. Empty for a batched LOOKUP, whose keys stay packed
  // in request.lookup().keys(), checked to split exactly by chain_lengths.
  std::vector<PageKey> keys;
  PageKey parent;                             // PUT
  std::vector<absl::string_view> payloads;     // inline PUT pages (views into frames)
};

// frames[0] is the serialized Request; frames[1..] are payload frames.
// On error the request id (when the header parsed) is kept in *request_id so
// the reply can echo it.
absl::StatusOr<DecodedRequest> DecodeRequest(absl::Span<const absl::string_view> frames,
                                             uint64_t* request_id);

// Name of the request type, for logs and errors ("GET", "PUT", ...).
absl::string_view RequestName(const wire::Request& request);

// `text` with every byte outside printable ASCII written as \xNN: safe in a
// proto3 string (valid UTF-8) and on one log line, whatever a client sent.
std::string PrintableText(absl::string_view text);

// An error Response with the code and message of `status` (PrintableText).
wire::Response ErrorResponse(uint64_t request_id, const absl::Status& status);
// A success reply's header for `request_id` (version set, code OK).
wire::Response OkResponse(uint64_t request_id);

}  // namespace kvtier::daemon
