// STATS: a snapshot of the store plus process figures. A session sees its own
// namespace only, unless its tenant is an admin.
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "daemon/daemon.h"
#include "daemon/metrics.h"

namespace kvtier::daemon {
namespace {

void FillTier(const tiers::TierSnapshot& t, wire::TierStats* out) {
  out->set_name(std::string(tiers::TierName(t.kind)));
  out->set_capacity_bytes(t.capacity_bytes);
  out->set_used_bytes(t.used_bytes);
  out->set_pages(t.pages);
  out->set_hits(t.hits);
  out->set_misses(t.misses);
  out->set_evictions(t.evictions);
  out->set_bytes_in(t.bytes_in);
  out->set_bytes_out(t.bytes_out);
  out->set_pinned_pages(t.pinned_pages);
  out->set_backing(t.backing);
  out->set_demotions(t.demotions);
  out->set_promotions(t.promotions);
  out->set_dropped(t.dropped);
  out->set_admission_drops(t.admission_drops);
  out->set_checksum_errors(t.checksum_errors);
  out->set_io_inflight(t.io.io_inflight);
  out->set_io_errors(t.io.io_errors);
  out->set_recovered_pages(t.durable.recovered_pages);
  out->set_dropped_records(t.durable.dropped_records);
  out->set_clean_pages(t.clean_pages);
  out->set_cleaned(t.cleaned);
  out->set_durability_failures(t.durability_failures);
  out->set_frontend_io(t.io.forbidden_io);
  out->set_eviction(std::string(tiers::EvictionPolicyName(t.eviction)));
  out->set_protected_pages(t.protected_pages);
  out->set_ghost_entries(t.ghost_entries);
  if (t.io.class_ios[0] + t.io.class_ios[1] + t.io.class_ios[2] == 0) return;
  for (size_t c = 0; c < tiers::kIoClasses; ++c) {
    wire::IoClassStats* k = out->add_io_classes();
    k->set_name(tiers::IoClassName(static_cast<tiers::IoClass>(c)));
    k->set_ios(t.io.class_ios[c]);
    k->set_latency_us(t.io.class_latency_us[c]);
  }
}

void FillNamespace(const tiers::NamespaceSnapshot& n, wire::NamespaceStats* out) {
  out->set_name(n.name);
  out->set_pages(n.pages);
  out->set_bytes(n.bytes);
  out->set_lookup_hits(n.lookup_hits);
  out->set_lookup_misses(n.lookup_misses);
  out->set_get_hits(n.get_hits);
  out->set_get_misses(n.get_misses);
  out->set_puts(n.puts);
  out->set_dedup_puts(n.dedup_puts);
  out->set_quota_evictions(n.quota_evictions);
  for (const auto& [tier, bytes] : n.tier_bytes)
    (*out->mutable_tier_bytes())[std::string(tiers::TierName(tier))] = bytes;
  for (const auto& [tier, bytes] : n.tier_quota_bytes)
    if (bytes > 0) (*out->mutable_tier_quota_bytes())[std::string(tiers::TierName(tier))] = bytes;
  for (const auto& [tier, bytes] : n.tier_reserved_bytes)
    (*out->mutable_tier_reserved_bytes())[std::string(tiers::TierName(tier))] = bytes;
}

void FillWarmup(const WarmStats& w, wire::BufferWarmup* out) {
  out->set_pending_bytes(w.pending_bytes);
  out->set_warmed_bytes(w.warmed_bytes);
  out->set_skipped_bytes(w.skipped_bytes);
  out->set_buffers(w.buffers);
  out->set_cancelled(w.cancelled);
  out->set_failed(w.failed);
}

}  // namespace

wire::StatsReply Daemon::BuildStats(const Session& s) const {
  wire::StatsReply out;
  tiers::StoreSnapshot snap = store_->Snapshot();
  auto* d = out.mutable_daemon();
  d->set_version(KVTIER_VERSION);
  d->set_uptime_ms(absl::ToInt64Milliseconds(absl::Now() - started_));
  d->set_sessions(static_cast<uint32_t>(sessions_.size()));
  d->set_requests(requests_);
  d->set_request_errors(request_errors_);
  d->set_index_pages(snap.index_pages);
  d->set_device(device_desc_);
  d->set_metrics_port(metrics_http_ ? metrics_http_->port() : 0);
  bool admin = s.tenant && s.tenant->admin;
  // Tier-wide counters sum over every namespace, so only admins see them;
  // others get the shape of the tiers and their own namespace's figures.
  for (const auto& t : snap.tiers) {
    wire::TierStats* ts = out.add_tiers();
    if (admin) {
      FillTier(t, ts);
    } else {
      ts->set_name(std::string(tiers::TierName(t.kind)));
      ts->set_capacity_bytes(t.capacity_bytes);
      ts->set_backing(t.backing);
    }
  }
  if (admin) {
    // Process-wide memory moves with every tenant's traffic (a side
    // channel), so only admins see it.
    uint64_t rss = 0, anon = 0;
    ReadRss(&rss, &anon);
    d->set_rss_bytes(rss);
    d->set_rss_anon_bytes(anon);
  } else {
    d->set_sessions(0);
    d->set_requests(0);
    d->set_request_errors(0);
    d->set_index_pages(0);
  }
  for (const auto& n : snap.namespaces) {
    if (!admin && n.id != s.ns) continue;
    wire::NamespaceStats* ns = out.add_namespaces();
    FillNamespace(n, ns);
    FillWarmup(warmer_->Stats(n.id), ns->mutable_warmup());
  }
  // Latency sums over every namespace's requests: admins only, like the tiers.
  if (admin) FillLatency(metrics_, &out);
  if (admin) FillPrefetchStats(&out);  // daemon-wide, like the tier counters
  if (admin) FillSharedCacheStats(&out);
  return out;
}

}  // namespace kvtier::daemon
