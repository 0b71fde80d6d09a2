// Helpers shared by the kvtier-bench sections; see bench_util.h.
#include "bench/bench_util.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/numbers.h"
#include "common/quantile.h"
#include "kvtier/byte_size.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/page_pattern.h"
#include "kvtier/status_macros.h"

namespace kvtier::bench {

Summary Summarize(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return Summary{med, v.front(), v.back()};
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return tools::NearestRank(v, p);
}

nlohmann::json ToJson(const Summary& s) {
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}};
}

absl::StatusOr<Layout> LayoutForPageBytes(uint64_t page_bytes) {
  if (page_bytes == 0 || page_bytes % 512 != 0)
    return absl::InvalidArgumentError(absl::StrCat("page size ", page_bytes,
                                                   " is not a multiple of 512 bytes"));
  Layout l{1, 1, 128, static_cast<uint32_t>(page_bytes / 512), Dtype::kFp16};
  RETURN_IF_ERROR(l.Validate());
  return l;
}

std::vector<PageKey> SyntheticChain(const Layout& layout, uint64_t seed, size_t pages) {
  std::vector<uint32_t> tokens(pages * layout.tokens_per_page);
  // The first two tokens are the 64 bits of a mix of the seed (splitmix64's
  // finalizer), so chains of different seeds differ from their first page
  // on. Drawn from a 128k vocabulary instead, two-token pages (1 KiB) of
  // consecutive seeds collided: the memory section's 3,908 chains met a
  // shared first page about once in 40 runs (a PUT "deduplicated 1").
  uint64_t z = seed + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  uint64_t x = z | 1;  // xorshift's state must not be zero
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i < 2) {
      tokens[i] = static_cast<uint32_t>(z >> (32 * i));
      continue;
    }
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    tokens[i] = static_cast<uint32_t>(x % 128000);
  }
  return DeriveChain(layout.Id(), layout.tokens_per_page, tokens);
}

uint64_t RunNonce() {
  static const uint64_t nonce =
      (static_cast<uint64_t>(getpid()) << 32) ^
      static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  return nonce;
}

std::string HumanBytes(uint64_t b) {
  if (b >= (1ull << 30) && b % (1ull << 30) == 0) return absl::StrCat(b >> 30, " GiB");
  if (b >= (1ull << 20) && b % (1ull << 20) == 0) return absl::StrCat(b >> 20, " MiB");
  if (b >= (1ull << 10) && b % (1ull << 10) == 0) return absl::StrCat(b >> 10, " KiB");
  return absl::StrCat(b, " B");
}

uint64_t ParseBytes(const std::string& s, bool* ok) {
  absl::StatusOr<uint64_t> v = ParseByteSize(s);
  *ok = v.ok();
  return v.value_or(0);
}

absl::StatusOr<Rig> Rig::Create(const BenchOptions& o, const std::string& endpoint,
                                uint64_t page_bytes, uint64_t buffer_bytes,
                                const std::string& name) {
  Rig r;
  ASSIGN_OR_RETURN(r.layout, LayoutForPageBytes(page_bytes));
  r.page_bytes = page_bytes;
  ClientOptions co{.endpoint = endpoint, .tenant = o.tenant, .token = o.token,
                   .layout = r.layout, .client_name = name,
                   .timeout = std::chrono::milliseconds(60000)};
  ASSIGN_OR_RETURN(r.client, Client::Connect(co));
  if (r.client->page_bytes() != page_bytes)
    return absl::InternalError(absl::StrCat("daemon says pages are ", r.client->page_bytes(),
                                            " bytes, expected ", page_bytes));
  ASSIGN_OR_RETURN(r.shm, ShmBuffer::Create(buffer_bytes));
  // First touch of shm is ~40x slower than a warm copy on VMs; an inference
  // engine's KV arena is long since touched, so fault it in before timing.
  std::memset(r.shm->data(), 0, r.shm->size());
  ASSIGN_OR_RETURN(r.buffer, r.client->RegisterBuffer(*r.shm));
  r.offsets.resize(buffer_bytes / page_bytes);
  for (size_t i = 0; i < r.offsets.size(); ++i) r.offsets[i] = i * page_bytes;
  return r;
}

void Rig::Fill(absl::Span<const PageKey> keys) {
  for (size_t i = 0; i < keys.size(); ++i) tools::FillPattern(keys[i], page(i), page_bytes);
}

size_t Rig::CountBad(absl::Span<const PageKey> keys) const {
  size_t bad = 0;
  for (size_t i = 0; i < keys.size(); ++i)
    bad += tools::CheckPattern(keys[i], page(i), page_bytes) != page_bytes;
  return bad;
}

absl::Status Rig::GetAll(absl::Span<const PageKey> keys, size_t batch) {
  for (size_t b = 0; b < keys.size(); b += batch) {
    const size_t n = std::min(batch, keys.size() - b);
    ASSIGN_OR_RETURN(auto tiers, client->Get(keys.subspan(b, n), buffer,
                                             absl::MakeConstSpan(offsets).subspan(b, n)));
    for (size_t i = 0; i < n; ++i)
      if (tiers[i] == TierKind::kNone)
        return absl::NotFoundError(absl::StrCat("GET missed page ", b + i, " of ", keys.size()));
  }
  return absl::OkStatus();
}

absl::Status Rig::PutAll(absl::Span<const PageKey> keys, size_t batch) {
  for (size_t b = 0; b < keys.size(); b += batch) {
    const size_t n = std::min(batch, keys.size() - b);
    const PageKey parent = b == 0 ? PageKey::Zero() : keys[b - 1];
    ASSIGN_OR_RETURN(PutResult r, client->Put(keys.subspan(b, n), parent, buffer,
                                              absl::MakeConstSpan(offsets).subspan(b, n)));
    if (r.stored != n)
      return absl::FailedPreconditionError(absl::StrFormat(
          "PUT of %u pages stored %u (deduplicated %u, not stored %u); is --host_bytes too "
          "small for the working set?", n, r.stored, r.deduplicated, r.not_stored));
  }
  return absl::OkStatus();
}

absl::Status Rig::DeleteAll(absl::Span<const PageKey> keys) {
  constexpr size_t kMaxKeys = 4096;  // the daemon's per-request limit
  for (size_t b = 0; b < keys.size(); b += kMaxKeys)
    RETURN_IF_ERROR(client->Delete(keys.subspan(b, std::min(kMaxKeys, keys.size() - b))).status());
  return absl::OkStatus();
}

}  // namespace kvtier::bench
