// Structural validation of requests; see request_codec.h.
#include "daemon/request_codec.h"

#include "absl/strings/str_cat.h"
#include "kvtier/layout.h"
#include "kvtier/status_macros.h"

namespace kvtier::daemon {
namespace {

absl::Status Invalid(absl::string_view what) { return absl::InvalidArgumentError(what); }

absl::StatusOr<std::vector<PageKey>> DecodeKeys(const std::string& packed, absl::string_view op) {
  if (packed.empty()) return Invalid(absl::StrCat(op, ": no keys"));
  // Count before unpacking: a huge key list must not cost memory first.
  if (packed.size() / kPageKeyBytes > kMaxKeysPerRequest)
    return Invalid(absl::StrCat(op, ": ", packed.size() / kPageKeyBytes, " keys, at most ",
                                kMaxKeysPerRequest, " per request"));
  auto keys = UnpackKeys(packed);
  if (!keys.ok()) return Invalid(absl::StrCat(op, ": ", keys.status().message()));
  if (keys->size() > kMaxKeysPerRequest)
    return Invalid(absl::StrCat(op, ": ", keys->size(), " keys, at most ", kMaxKeysPerRequest,
                                " per request"));
  return keys;
}

// A batched LOOKUP's chain_lengths must cut `keys` into chains of 1 to
// kMaxKeysPerRequest keys with nothing left over; the handler relies on it.
absl::Status CheckChains(const wire::Lookup& l, uint64_t keys) {
  uint64_t sum = 0;  // 4096 lengths of up to 2^32 - 1: no overflow in 64 bits
  for (int i = 0; i < l.chain_lengths_size(); ++i) {
    const uint32_t n = l.chain_lengths(i);
    if (n == 0)
      return Invalid(absl::StrCat("LOOKUP: chain ", i, " has no keys (chain_lengths[", i,
                                  "] is 0; every chain needs at least one key)"));
    if (n > kMaxKeysPerRequest)
      return Invalid(absl::StrCat("LOOKUP: chain ", i, " has ", n, " keys, at most ",
                                  kMaxKeysPerRequest, " per chain"));
    sum += n;
  }
  if (sum != keys)
    return Invalid(absl::StrCat("LOOKUP: chain_lengths add up to ", sum, " keys, but keys holds ",
                                keys, " (", keys * kPageKeyBytes, " bytes)"));
  return absl::OkStatus();
}

absl::Status DecodeLookup(DecodedRequest& d) {
  const wire::Lookup& l = d.request.lookup();
  if (l.chain_lengths().empty()) {
    ASSIGN_OR_RETURN(d.keys, DecodeKeys(l.keys(), "LOOKUP"));
    return absl::OkStatus();
  }
  // Chains counted first: the cheapest check.
  if (static_cast<size_t>(l.chain_lengths_size()) > kMaxLookupBatchChains)
    return Invalid(absl::StrCat("LOOKUP: ", l.chain_lengths_size(), " chains, at most ",
                                kMaxLookupBatchChains, " per batched request"));
  // The keys stay packed (up to 512 KiB): the handler copies out one chain
  // at a time, so a batch costs no second buffer of its size.
  const std::string& packed = l.keys();
  if (packed.empty()) return Invalid("LOOKUP (batched): no keys");
  if (packed.size() % kPageKeyBytes != 0)
    return Invalid(absl::StrCat("LOOKUP (batched): packed keys are ", packed.size(),
                                " bytes, not a multiple of ", kPageKeyBytes));
  const uint64_t keys = packed.size() / kPageKeyBytes;
  if (keys > kMaxLookupBatchKeys)
    return Invalid(absl::StrCat("LOOKUP (batched): ", keys, " keys, at most ", kMaxLookupBatchKeys,
                                " per request"));
  return CheckChains(l, keys);
}

absl::Status CheckHello(const wire::Hello& h) {
  if (h.tenant().empty() || h.tenant().size() > kMaxTenantNameBytes)
    return Invalid(absl::StrCat("HELLO: tenant name must be 1-", kMaxTenantNameBytes, " bytes"));
  if (h.token().size() > 4096) return Invalid("HELLO: token longer than 4096 bytes");
  if (h.has_layout()) {
    const auto& l = h.layout();
    Layout layout{l.layers(), l.kv_heads(), l.head_dim(), l.tokens_per_page(),
                  static_cast<Dtype>(l.dtype())};
    RETURN_IF_ERROR(layout.Validate());
  }
  return absl::OkStatus();
}

absl::Status CheckRegister(const wire::RegisterBuffer& r) {
  if (!r.fd_ticket().empty() && r.kind() != wire::BUFFER_SHM)
    return Invalid("REGISTER_BUFFER: fd_ticket is for host memory (kind BUFFER_SHM) only");
  if (r.kind() != wire::BUFFER_SHM) {  // GPU buffer: the device backend checks the handle
    if (!wire::BufferKind_IsValid(r.kind()))
      return Invalid(absl::StrCat("REGISTER_BUFFER: unknown buffer kind ", static_cast<int>(r.kind())));
    if (r.device_handle().empty() || r.device_handle().size() > 256)
      return Invalid("REGISTER_BUFFER: device_handle must be 1-256 bytes");
    if (!r.shm_name().empty())
      return Invalid("REGISTER_BUFFER: shm_name must be empty for a device buffer");
    if (r.size() == 0) return Invalid("REGISTER_BUFFER: size must be > 0");
    return absl::OkStatus();
  }
  const std::string& n = r.shm_name();
  if (!r.fd_ticket().empty()) {  // by fd: the name is only a label
    if (r.fd_ticket().size() != 16)
      return Invalid(absl::StrCat("REGISTER_BUFFER: fd_ticket must be 16 bytes, got ",
                                  r.fd_ticket().size()));
    if (n.size() > 255 || n.find('\0') != std::string::npos)
      return Invalid("REGISTER_BUFFER: a label (shm_name) of at most 255 bytes, no NUL");
    if (r.size() == 0) return Invalid("REGISTER_BUFFER: size must be > 0");
    return absl::OkStatus();
  }
  if (n.size() < 2 || n.size() > 255 || n[0] != '/' || n.find('/', 1) != std::string::npos ||
      n.find('\0') != std::string::npos)
    return Invalid(absl::StrCat("REGISTER_BUFFER: shm name '", n.substr(0, 64),
                                "' must look like \"/name\" (one leading slash, <= 255 bytes)"));
  if (r.size() == 0) return Invalid("REGISTER_BUFFER: size must be > 0");
  return absl::OkStatus();
}

// Get/Put.page_runs: shape only (the session checks them against its page
// size and the buffer). Lengths are bounded so their sum cannot overflow.
absl::Status CheckPageRuns(absl::string_view op, uint32_t buffer_id,
                           const google::protobuf::RepeatedPtrField<wire::PageRun>& runs) {
  if (runs.empty()) return absl::OkStatus();
  if (buffer_id == 0)
    return Invalid(absl::StrCat(op, ": page_runs given without a buffer_id (inline pages are whole)"));
  if (static_cast<size_t>(runs.size()) > kMaxPageRuns)
    return Invalid(absl::StrCat(op, ": ", runs.size(), " page_runs, at most ", kMaxPageRuns));
  for (int j = 0; j < runs.size(); ++j)
    if (runs[j].length() == 0 || runs[j].length() > (uint64_t{1} << 40))
      return Invalid(absl::StrCat(op, ": page run ", j, " has length ", runs[j].length(),
                                  "; a run is 1 byte to 1 TiB"));
  return absl::OkStatus();
}

// GET/PUT: either a registered buffer with one offset per key, or inline.
absl::Status CheckTransfer(absl::string_view op, uint32_t buffer_id, int offsets, size_t keys,
                           size_t payloads, bool inline_payloads_expected) {
  if (buffer_id != 0) {
    if (static_cast<size_t>(offsets) != keys)
      return Invalid(absl::StrCat(op, ": ", offsets, " offsets for ", keys, " keys"));
    if (payloads != 0)
      return Invalid(absl::StrCat(op, ": payload frames sent with a buffer transfer"));
    return absl::OkStatus();
  }
  if (offsets != 0) return Invalid(absl::StrCat(op, ": offsets given without a buffer_id"));
  size_t want = inline_payloads_expected ? keys : 0;
  if (payloads != want)
    return Invalid(absl::StrCat(op, ": ", payloads, " payload frames, expected ", want));
  return absl::OkStatus();
}

// GET's prefetch fields (policy, timeout, layer-wise delivery): shape only.
absl::Status CheckGetPolicy(const wire::Get& g) {
  if (!wire::GetPolicy_IsValid(g.policy()))
    return Invalid(absl::StrCat("GET: unknown policy ", static_cast<int>(g.policy())));
  if (g.timeout_ms() != 0 && g.policy() != wire::GET_TIMEOUT)
    return Invalid("GET: timeout_ms is only meaningful with policy GET_TIMEOUT");
  if (g.layerwise() && g.buffer_id() == 0)
    return Invalid("GET: layerwise needs a registered buffer (buffer_id 0 is inline)");
  if (!g.layerwise() && g.layer_progress_offset() != 0)
    return Invalid("GET: layer_progress_offset given without layerwise");
  if (g.layerwise() && g.layer_progress_offset() % 8 != 0)
    return Invalid(absl::StrCat("GET: layer_progress_offset ", g.layer_progress_offset(),
                                " must be a multiple of 8"));
  return absl::OkStatus();
}

absl::Status DecodeBody(DecodedRequest& d, absl::Span<const absl::string_view> payloads) {
  const wire::Request& r = d.request;
  switch (r.body_case()) {
    case wire::Request::kHello: return CheckHello(r.hello());
    case wire::Request::kRegisterBuffer: return CheckRegister(r.register_buffer());
    case wire::Request::kUnregisterBuffer:
    case wire::Request::kStats:
    case wire::Request::kBye:
    case wire::Request::kPing:
    case wire::Request::kFlush:
    case wire::Request::kTenants: return absl::OkStatus();
    case wire::Request::kEvict: {
      const wire::Evict& e = r.evict();
      if (e.namespace_().size() > 256) return Invalid("EVICT: namespace name longer than 256 bytes");
      if (!e.all() && e.pages() == 0) return Invalid("EVICT: give pages > 0 or all");
      if (e.all() && e.pages() != 0) return Invalid("EVICT: give pages or all, not both");
      if (!wire::Tier_IsValid(e.tier()))
        return Invalid(absl::StrCat("EVICT: unknown tier ", static_cast<int>(e.tier())));
      return absl::OkStatus();
    }
    case wire::Request::kLookup: return DecodeLookup(d);
    case wire::Request::kDelete: {
      ASSIGN_OR_RETURN(d.keys, DecodeKeys(r.delete_().keys(), "DELETE"));
      return absl::OkStatus();
    }
    case wire::Request::kGet: {
      ASSIGN_OR_RETURN(d.keys, DecodeKeys(r.get().keys(), "GET"));
      RETURN_IF_ERROR(CheckGetPolicy(r.get()));
      RETURN_IF_ERROR(CheckPageRuns("GET", r.get().buffer_id(), r.get().page_runs()));
      return CheckTransfer("GET", r.get().buffer_id(), r.get().offsets_size(), d.keys.size(),
                           payloads.size(), false);
    }
    case wire::Request::kPrefetch: {
      ASSIGN_OR_RETURN(d.keys, DecodeKeys(r.prefetch().keys(), "PREFETCH"));
      if (!wire::Tier_IsValid(r.prefetch().target()))
        return Invalid(absl::StrCat("PREFETCH: unknown target tier ",
                                    static_cast<int>(r.prefetch().target())));
      return absl::OkStatus();
    }
    case wire::Request::kPut: {
      ASSIGN_OR_RETURN(d.keys, DecodeKeys(r.put().keys(), "PUT"));
      const std::string& parent = r.put().parent();
      if (!parent.empty() && parent.size() != kPageKeyBytes)
        return Invalid(absl::StrCat("PUT: parent key is ", parent.size(), " bytes, want 0 or 16"));
      if (!parent.empty()) d.parent = PageKey::FromBytes(parent.data());
      RETURN_IF_ERROR(CheckPageRuns("PUT", r.put().buffer_id(), r.put().page_runs()));
      RETURN_IF_ERROR(CheckTransfer("PUT", r.put().buffer_id(), r.put().offsets_size(),
                                    d.keys.size(), payloads.size(), true));
      d.payloads.assign(payloads.begin(), payloads.end());
      return absl::OkStatus();
    }
    case wire::Request::BODY_NOT_SET: break;
  }
  return Invalid("request has no body or an unknown request type");
}

}  // namespace

absl::StatusOr<DecodedRequest> DecodeRequest(absl::Span<const absl::string_view> frames,
                                             uint64_t* request_id) {
  *request_id = 0;
  if (frames.empty()) return Invalid("empty message: expected a request header frame");
  DecodedRequest d;
  if (!d.request.ParseFromArray(frames[0].data(), static_cast<int>(frames[0].size())))
    return Invalid(absl::StrCat("malformed request header (", frames[0].size(),
                                " bytes are not a kvtier.wire.Request)"));
  *request_id = d.request.request_id();
  if (d.request.version() != kProtocolVersion)
    return absl::FailedPreconditionError(
        absl::StrCat("unsupported protocol version ", d.request.version(), " (kvtierd speaks ",
                     kProtocolVersion, ")"));
  bool is_hello = d.request.body_case() == wire::Request::kHello;
  if (!is_hello && d.request.session_id().size() != kSessionIdBytes)
    return absl::UnauthenticatedError(absl::StrCat(
        "no session: send HELLO first (", RequestName(d.request), " without a session id)"));
  if (d.request.body_case() != wire::Request::kPut && frames.size() > 1)
    return Invalid(absl::StrCat(RequestName(d.request), ": unexpected ", frames.size() - 1,
                                " payload frames"));
  RETURN_IF_ERROR(DecodeBody(d, frames.subspan(1)));
  return d;
}

absl::string_view RequestName(const wire::Request& request) {
  switch (request.body_case()) {
    case wire::Request::kHello: return "HELLO";
    case wire::Request::kRegisterBuffer: return "REGISTER_BUFFER";
    case wire::Request::kUnregisterBuffer: return "UNREGISTER_BUFFER";
    case wire::Request::kLookup: return "LOOKUP";
    case wire::Request::kGet: return "GET";
    case wire::Request::kPut: return "PUT";
    case wire::Request::kDelete: return "DELETE";
    case wire::Request::kStats: return "STATS";
    case wire::Request::kBye: return "BYE";
    case wire::Request::kPing: return "PING";
    case wire::Request::kEvict: return "EVICT";
    case wire::Request::kFlush: return "FLUSH";
    case wire::Request::kTenants: return "TENANTS";
    case wire::Request::kPrefetch: return "PREFETCH";
    case wire::Request::BODY_NOT_SET: break;
  }
  return "UNKNOWN";
}

wire::Response OkResponse(uint64_t request_id) {
  wire::Response r;
  r.set_version(kProtocolVersion);
  r.set_request_id(request_id);
  return r;
}

wire::Response ErrorResponse(uint64_t request_id, const absl::Status& status) {
  wire::Response r;
  r.set_version(kProtocolVersion);
  r.set_request_id(request_id);
  r.set_code(static_cast<wire::Code>(ToErrorCode(status.code())));
  // Messages quote client bytes (shm names, device handles); the proto3
  // string field must be valid UTF-8 or the client cannot parse the reply.
  r.set_message(PrintableText(status.message()));
  return r;
}

std::string PrintableText(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace kvtier::daemon
