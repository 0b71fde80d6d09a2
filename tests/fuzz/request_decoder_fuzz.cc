// libFuzzer target for the daemon's request decoder (daemon/request_codec.h):
// everything a client sends passes DecodeRequest first. The input becomes
// 1-4 frames (fuzz_frames.h); a crash, leak, sanitizer report or a broken
// invariant of an accepted request (below) is a finding.
#include <cstdlib>

#include "daemon/request_codec.h"
#include "tests/fuzz/fuzz_frames.h"

namespace {

void Require(bool ok) {
  if (!ok) std::abort();
}

bool Inside(absl::string_view inner, const uint8_t* data, size_t size) {
  auto* b = reinterpret_cast<const char*>(data);
  return inner.empty() || (inner.data() >= b && inner.data() + inner.size() <= b + size);
}

// A batched LOOKUP's chains cut its keys exactly, none empty or over the
// single-chain limit (HandleLookupBatch walks them without checking).
void CheckChains(const kvtier::wire::Lookup& l, size_t keys) {
  Require(static_cast<size_t>(l.chain_lengths_size()) <= kvtier::daemon::kMaxLookupBatchChains);
  Require(keys >= 1 && keys <= kvtier::daemon::kMaxLookupBatchKeys);
  uint64_t sum = 0;
  for (uint32_t n : l.chain_lengths()) {
    Require(n >= 1 && n <= kvtier::daemon::kMaxKeysPerRequest);
    sum += n;
  }
  Require(sum == keys);
}

// What the handlers rely on once DecodeRequest said yes.
void CheckAccepted(const kvtier::daemon::DecodedRequest& d, size_t frames, const uint8_t* data,
                   size_t size) {
  using kvtier::wire::Request;
  const Request& r = d.request;
  Require(r.version() == kvtier::daemon::kProtocolVersion);
  Require(r.body_case() != Request::BODY_NOT_SET);
  Require(r.has_hello() || r.session_id().size() == kvtier::daemon::kSessionIdBytes);
  Require(kvtier::daemon::RequestName(r) != "UNKNOWN");
  const bool batch = r.has_lookup() && r.lookup().chain_lengths_size() > 0;
  Require(d.keys.size() <= kvtier::daemon::kMaxKeysPerRequest);
  switch (r.body_case()) {
    case Request::kLookup:
      Require(frames == 1);
      if (batch) {  // keys stay packed: whole keys, cut exactly by the chains
        Require(d.keys.empty() && r.lookup().keys().size() % kvtier::kPageKeyBytes == 0);
        CheckChains(r.lookup(), r.lookup().keys().size() / kvtier::kPageKeyBytes);
      } else {
        Require(!d.keys.empty());
      }
      break;
    case Request::kDelete: Require(!d.keys.empty() && frames == 1); break;
    case Request::kGet:
      Require(!d.keys.empty() && frames == 1);
      Require(r.get().buffer_id() == 0 ? r.get().offsets_size() == 0
                                       : size_t(r.get().offsets_size()) == d.keys.size());
      break;
    case Request::kPut:
      Require(!d.keys.empty());
      if (r.put().buffer_id() == 0) {
        Require(d.payloads.size() == d.keys.size());
        Require(d.payloads.size() + 1 == frames);
      } else {
        Require(size_t(r.put().offsets_size()) == d.keys.size() && d.payloads.empty());
      }
      for (absl::string_view p : d.payloads) Require(Inside(p, data, size));
      break;
    case Request::kRegisterBuffer: {
      const auto& rb = r.register_buffer();
      Require(rb.size() > 0);
      if (rb.kind() == kvtier::wire::BUFFER_SHM && !rb.fd_ticket().empty()) {
        // by descriptor: a 16-byte ticket; the name is only a label, maybe empty
        Require(rb.fd_ticket().size() == 16);
        Require(rb.shm_name().size() <= 255 && rb.shm_name().find('\0') == std::string::npos);
      } else if (rb.kind() == kvtier::wire::BUFFER_SHM) {
        Require(rb.shm_name().size() >= 2 && rb.shm_name()[0] == '/');
      } else {
        Require(rb.fd_ticket().empty());  // a GPU buffer: a device handle and no shm name
        Require(!rb.device_handle().empty() && rb.device_handle().size() <= 256);
        Require(rb.shm_name().empty());
      }
      break;
    }
    default: Require(frames == 1); break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<absl::string_view> frames = kvtier::fuzz::SplitFrames(data, size);
  uint64_t request_id = 0;
  auto decoded = kvtier::daemon::DecodeRequest(frames, &request_id);
  if (decoded.ok()) {
    CheckAccepted(*decoded, frames.size(), data, size);
    Require(request_id == decoded->request.request_id());
  } else {
    Require(!decoded.status().message().empty());
    // The error reply must serialize (it goes straight back on the wire).
    std::string wire =
        kvtier::daemon::ErrorResponse(request_id, decoded.status()).SerializeAsString();
    Require(!wire.empty());
  }
  return 0;
}
