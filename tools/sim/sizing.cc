// kvtier-sim's sizing mode (sizing.h).
#include "tools/sim/sizing.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "kvtier/status_macros.h"
#include "tools/sim/accounting_tier.h"

namespace kvtier::sim {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

absl::StatusOr<double> HitRateAt(absl::Span<const SimRequest> requests, ReplayConfig rc,
                                 uint64_t host_pages, uint64_t nvme_pages, int* probes) {
  rc.host = PagesTier(host_pages);
  rc.nvme.reset();
  if (nvme_pages > 0) rc.nvme = PagesTier(nvme_pages);
  ++*probes;
  ASSIGN_OR_RETURN(SimResult r, ReplayTierManager(requests, rc));
  return r.hit_rate();
}

}  // namespace

absl::StatusOr<Layout> NamedModelLayout(const std::string& name) {
  Layout l;
  if (name == "llama3-8b" || name == "mistral-7b") {
    l.layers = 32, l.kv_heads = 8, l.head_dim = 128;
  } else if (name == "llama3-70b") {
    l.layers = 80, l.kv_heads = 8, l.head_dim = 128;
  } else if (name == "qwen2-7b") {
    l.layers = 28, l.kv_heads = 4, l.head_dim = 128;
  } else {
    std::vector<std::string> parts = absl::StrSplit(name, ':');
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &l.layers) ||
        !absl::SimpleAtoi(parts[1], &l.kv_heads) || !absl::SimpleAtoi(parts[2], &l.head_dim))
      return absl::InvalidArgumentError(absl::StrCat(
          "--model '", name,
          "': llama3-8b, llama3-70b, mistral-7b, qwen2-7b or LAYERS:KV_HEADS:HEAD_DIM"));
  }
  return l;
}

absl::StatusOr<SizingResult> SizeFor(absl::Span<const SimRequest> requests,
                                     const ReplayConfig& base, const SimResult& infinite,
                                     const SizingConfig& config) {
  SizingResult r;
  r.page_bytes = config.layout.PageBytes();
  r.bytes_per_token = static_cast<double>(r.page_bytes) / config.layout.tokens_per_page;
  r.infinite = infinite.hit_rate();
  if (!(config.target > 0 && config.target < 1))
    return absl::InvalidArgumentError("--target_hit_rate must be in (0, 1)");
  if (config.target >= r.infinite)
    return absl::FailedPreconditionError(absl::StrFormat(
        "a hit rate of %.2f%% is out of reach: this trace repeats only %.2f%% of its page "
        "references (the infinite-cache bound)",
        100 * config.target, 100 * r.infinite));
  // RAM only: the smallest capacity that reaches the target, lo failing and
  // hi reaching it, until they are within 2% of each other.
  uint64_t lo = 0, hi = std::max<uint64_t>(infinite.capacity_pages, 64);
  ASSIGN_OR_RETURN(double at_hi, HitRateAt(requests, base, hi, 0, &r.probes));
  while (at_hi < config.target && hi < (1ull << 40)) {  // the watermarks keep some room free
    hi *= 2;
    ASSIGN_OR_RETURN(at_hi, HitRateAt(requests, base, hi, 0, &r.probes));
  }
  double best = at_hi;
  while (hi - lo > 1 && static_cast<double>(hi) > 1.02 * static_cast<double>(std::max<uint64_t>(lo, 1))) {
    const uint64_t mid = lo == 0 ? hi / 2
                                 : static_cast<uint64_t>(std::sqrt(static_cast<double>(lo) * hi));
    if (mid <= lo || mid >= hi) break;
    ASSIGN_OR_RETURN(double at, HitRateAt(requests, base, mid, 0, &r.probes));
    if (at >= config.target) {
      hi = mid;
      best = at;
    } else {
      lo = mid;
    }
  }
  r.pages = hi;
  r.hit_rate = best;
  // A RAM + NVMe split of the same total, grown by 10% of the total until
  // its two-tier replay reaches the target (at most 20 steps).
  uint64_t host = config.host_bytes > 0 ? std::max<uint64_t>(1, config.host_bytes / r.page_bytes)
                                        : std::max<uint64_t>(1, r.pages / 4);
  host = std::min(host, r.pages);
  uint64_t nvme = std::max<uint64_t>(r.pages - host, 1);
  double at = 0;
  for (int step = 0; step <= 20; ++step) {
    ASSIGN_OR_RETURN(at, HitRateAt(requests, base, host, nvme, &r.probes));
    if (at >= config.target) break;
    nvme += std::max<uint64_t>(r.pages / 10, 1);
  }
  r.split_host_pages = host;
  r.split_nvme_pages = nvme;
  r.split_hit_rate = at;
  return r;
}

std::string FormatSizing(const SizingConfig& config, const SizingResult& r) {
  const Layout& l = config.layout;
  const double pages_per_gib = kGiB / static_cast<double>(r.page_bytes);
  auto gib = [&](uint64_t pages) { return static_cast<double>(pages) * r.page_bytes / kGiB; };
  std::string out = absl::StrFormat(
      "\nsizing: %u layers x %u KV heads x %u head dim, %s, %u tokens per page\n"
      "  %.0f bytes of KV per token (K and V), %.2f MiB per page, %.1f pages per GiB\n"
      "  target hit rate %.2f%% (this trace's bound: %.2f%%)\n"
      "  RAM only:   %llu pages = %.2f GiB reach %.2f%%   -> kvtierd --host_bytes=%.0fGiB "
      "--nvme_bytes=0\n",
      l.layers, l.kv_heads, l.head_dim, std::string(DtypeName(l.dtype)), l.tokens_per_page,
      r.bytes_per_token, static_cast<double>(r.page_bytes) / (1 << 20), pages_per_gib,
      100 * config.target, 100 * r.infinite, static_cast<unsigned long long>(r.pages),
      gib(r.pages), 100 * r.hit_rate, std::ceil(gib(r.pages)));
  if (r.page_bytes > config.slab_bytes)
    absl::StrAppendFormat(&out,
                          "  pages of %.0f MiB exceed a %.0f MiB slab: also "
                          "--host_slab_bytes=%lluMiB (or fewer --tokens_per_page)\n",
                          static_cast<double>(r.page_bytes) / (1 << 20),
                          static_cast<double>(config.slab_bytes) / (1 << 20),
                          static_cast<unsigned long long>((r.page_bytes + (1 << 20) - 1) >> 20));
  absl::StrAppendFormat(
      &out,
      "  RAM + NVMe: %.2f GiB + %.2f GiB reach %.2f%%%s   -> kvtierd --host_bytes=%.0fGiB "
      "--nvme_bytes=%.0fGiB\n"
      "  (%d replays of the trace through the daemon's policy; GiB of pages, before the "
      "arena's slab rounding: add a slab, --host_slab_bytes, per tier)\n",
      gib(r.split_host_pages), gib(r.split_nvme_pages), 100 * r.split_hit_rate,
      r.split_hit_rate >= config.target ? "" : " (short of the target after 20 steps)",
      std::ceil(gib(r.split_host_pages)), std::ceil(gib(r.split_nvme_pages)), r.probes);
  return out;
}

}  // namespace kvtier::sim
