// kvtier-sim: offline capacity planning. Replays a trace through the real
// TierManager policy of tiers/ (accounting-only tiers, no daemon, no bytes)
// at each capacity asked for, next to Belady's optimum and the
// infinite-cache bound; prints a table and writes JSON and a PNG plot.
// With --nodes and --remote_pages: several daemons sharing one cache beside
// their stores (kvtierd --remote_seeds), as an in-memory LRU cluster.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "kvtier/cli.h"
#include "kvtier/status_macros.h"
#include "tools/sim/belady.h"
#include "tools/sim/capacity.h"
#include "tools/sim/cluster_study.h"
#include "tools/sim/policy_replay.h"
#include "tools/sim/sim_report.h"
#include "tools/sim/sizing.h"
#include "tools/sim/trace_input.h"

ABSL_FLAG(std::string, trace, "",
          "trace spec: mooncake:PATH, azure:PATH, synthetic[:k=v,...] or PATH (.jsonl/.csv)");
ABSL_FLAG(int64_t, max_requests, 0, "replay only the first N requests (0: all)");
ABSL_FLAG(bool, stop_on_error, true, "stop at a malformed trace line (false: skip it)");
ABSL_FLAG(int32_t, pages_per_block, 1, "pages per trace block (trace::PageMapping)");
ABSL_FLAG(std::string, capacities, "1k,4k,16k,32k",
          "host-tier capacities, comma-separated: pages (4k = 4000, 4Ki = 4096) or bytes "
          "(4GiB, 512MB; needs --page_bytes); empty: none");
ABSL_FLAG(std::string, page_bytes, "", "page size in bytes (e.g. 1MiB) for byte capacities");
ABSL_FLAG(std::string, slab_bytes, "16MiB", "slab size of the tiers (kvtierd --host_slab_bytes)");
ABSL_FLAG(std::string, host_pages, "", "two-tier mode: host tier capacity (pages or bytes)");
ABSL_FLAG(std::string, nvme_pages, "", "two-tier mode: NVMe tier capacity (pages or bytes)");
ABSL_FLAG(int32_t, nodes, 1,
          "daemons replayed side by side (needs --host_pages/--nvme_pages, per node): request i "
          "goes to node i % N; N > 1 also runs one node with N times the capacity and N nodes "
          "without the shared cache");
ABSL_FLAG(std::string, remote_pages, "",
          "the shared cache beside the stores (kvtierd --remote_seeds): capacity of the one "
          "cluster all nodes share (LRU, as maxmemory-policy allkeys-lru), pages or bytes; "
          "comma-separated for several runs. Its records belong to the cluster, not to a node, "
          "so there is no per-node budget in it (--remote_node_pages is gone)");
ABSL_FLAG(std::string, remote_admission, "all",
          "as kvtierd --remote_admission: all or reused (pages leaving a store's last tier are "
          "published to the cluster first), or put (every PUT's page is published when filled; "
          "evictions are not published again); comma-separated for several runs");
ABSL_FLAG(double, high_watermark, 0.95, "as kvtierd --high_watermark");
ABSL_FLAG(double, low_watermark, 0.90, "as kvtierd --low_watermark");
ABSL_FLAG(bool, promote_on_get, true, "as kvtierd --promote_on_get");
ABSL_FLAG(std::string, nvme_admission, "all", "as kvtierd --nvme_admission: all or reused");
ABSL_FLAG(std::string, write_policy, "write-back", "as kvtierd --write_policy");
ABSL_FLAG(
    uint32_t, index_shards, 16,
    "the store's index shards (kvtierd: 16); 2q and arc keep their protected share and ghosts "
    "per shard, which on tiers of a few hundred pages costs hit rate against one shard");
ABSL_FLAG(std::string, eviction, "lru",
          "eviction policies to replay side by side, comma-separated (lru, 2q, arc, s3fifo, "
          "prefix; as kvtierd "
          "--eviction, each for every tier): LRU always runs as the baseline, and each other "
          "policy adds a column with the share of the LRU -> Belady gap it closes");
ABSL_FLAG(uint32_t, batch_pages, 32,
          "pages per GET/PUT call, as kvtier-stress --batch_pages (0: a whole chain per call)");
ABSL_FLAG(bool, decode, true, "PUT the pages decode completes, as kvtier-stress does");
ABSL_FLAG(std::string, evict_at, "call",
          "when the stand-in evictor runs: call (after each GET/PUT) or page (after every page)");
ABSL_FLAG(std::string, model, "",
          "sizing: the model whose KV pages to size: llama3-8b, llama3-70b, mistral-7b, "
          "qwen2-7b or LAYERS:KV_HEADS:HEAD_DIM (sets --page_bytes and --pages_per_block from "
          "--kv_dtype and --tokens_per_page)");
ABSL_FLAG(std::string, kv_dtype, "fp16", "sizing: KV dtype (fp32, fp16, bf16, fp8, int8)");
ABSL_FLAG(uint32_t, tokens_per_page, 256,
          "sizing: tokens per page (must divide the trace's block tokens)");
ABSL_FLAG(double, target_hit_rate, 0,
          "sizing (with --model): print the GiB of host RAM, and of RAM + NVMe, that reach "
          "this hit rate on the trace (0 < x < 1), found by replays of the daemon's policy");
ABSL_FLAG(std::string, host_bytes, "",
          "sizing: the RAM of the RAM + NVMe split to check (default: a quarter of the total)");
ABSL_FLAG(std::string, json_out, "", "write the results as JSON to this file");
ABSL_FLAG(
    std::string, nvme_eviction, "same",
    "two-tier runs: the NVMe tier's policy beside each --eviction column's host "
    "policy: same (that column's, as kvtierd --eviction=NAME), or lru, 2q, arc, s3fifo or prefix "
    "for every column (as kvtierd --eviction=host=NAME,nvme=THIS)");
ABSL_FLAG(std::string, plot, "", "write a hit-rate-vs-capacity PNG (gnuplot) to this file");

namespace kvtier::sim {
namespace {

struct Options {
  ReplayConfig replay;
  uint64_t page_bytes = 0, slab_bytes = 0;
  std::vector<tiers::EvictionPolicy> others;  // --eviction besides lru
  std::optional<tiers::EvictionPolicy> nvme_policy;  // --nvme_eviction, unless "same"
};

// `rc` with `policy` for every tier it has (NVMe: --nvme_eviction's, if
// it names one).
ReplayConfig WithPolicy(ReplayConfig rc, tiers::EvictionPolicy policy,
                        std::optional<tiers::EvictionPolicy> nvme_policy = std::nullopt) {
  rc.store.eviction[tiers::TierKind::kHost] = policy;
  if (rc.nvme.has_value()) rc.store.eviction[tiers::TierKind::kNvme] = nvme_policy.value_or(policy);
  return rc;
}

absl::StatusOr<Options> OptionsFromFlags() {
  Options o;
  tiers::TierManagerConfig& s = o.replay.store;
  s.high_watermark = absl::GetFlag(FLAGS_high_watermark);
  s.low_watermark = absl::GetFlag(FLAGS_low_watermark);
  s.promote_on_get = absl::GetFlag(FLAGS_promote_on_get);
  s.index_shards = absl::GetFlag(FLAGS_index_shards);
  const std::string admission = absl::GetFlag(FLAGS_nvme_admission);
  if (admission == "reused")
    s.persistent_admission = tiers::TierManagerConfig::Admission::kReusedOnly;
  else if (admission != "all")
    return absl::InvalidArgumentError("--nvme_admission must be all or reused");
  const std::string policy = absl::GetFlag(FLAGS_write_policy);
  if (policy == "write-through")
    s.write_through = true;
  else if (policy != "write-back")
    return absl::InvalidArgumentError("--write_policy must be write-back or write-through");
  RETURN_IF_ERROR(s.Validate());
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_eviction), ',', absl::SkipWhitespace())) {
    auto p = tiers::ParseEvictionPolicy(absl::StripAsciiWhitespace(name));
    if (!p.ok()) return absl::InvalidArgumentError(absl::StrCat("--eviction: ", p.status().message()));
    if (*p != tiers::EvictionPolicy::kLru &&
        std::find(o.others.begin(), o.others.end(), *p) == o.others.end()) {
      o.others.push_back(*p);
    }
  }
  if (const std::string nvme = absl::GetFlag(FLAGS_nvme_eviction); nvme != "same") {
    auto p = tiers::ParseEvictionPolicy(nvme);
    if (!p.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("--nvme_eviction: same, or ", p.status().message()));
    o.nvme_policy = *p;
  }
  o.replay.decode = absl::GetFlag(FLAGS_decode);
  o.replay.batch_pages = absl::GetFlag(FLAGS_batch_pages);
  const std::string at = absl::GetFlag(FLAGS_evict_at);
  if (at == "page")
    o.replay.evict_at = ReplayConfig::EvictAt::kPage;
  else if (at != "call")
    return absl::InvalidArgumentError("--evict_at must be call or page");
  if (!absl::GetFlag(FLAGS_page_bytes).empty()) {
    ASSIGN_OR_RETURN(o.page_bytes, ParseByteSize(absl::GetFlag(FLAGS_page_bytes)));
  }
  ASSIGN_OR_RETURN(o.slab_bytes, ParseByteSize(absl::GetFlag(FLAGS_slab_bytes)));
  if (absl::GetFlag(FLAGS_host_pages).empty() != absl::GetFlag(FLAGS_nvme_pages).empty()) {
    return absl::InvalidArgumentError("two-tier mode needs both --host_pages and --nvme_pages");
  }
  if (absl::GetFlag(FLAGS_pages_per_block) < 1) {
    return absl::InvalidArgumentError("--pages_per_block must be >= 1");
  }
  return o;
}

std::string DescribePolicy(const Options& o) {
  const tiers::TierManagerConfig& s = o.replay.store;
  return absl::StrFormat(
      "TierManager, watermarks %.2f/%.2f, leaf-first scan %d, %d index shards, %s pages per "
      "GET/PUT, evictor after each %s, decode PUTs %s, %s, promote_on_get %s, nvme admission %s",
      s.high_watermark, s.low_watermark, s.leaf_scan_limit, s.index_shards,
      o.replay.batch_pages == 0 ? std::string("all") : std::to_string(o.replay.batch_pages),
      o.replay.evict_at == ReplayConfig::EvictAt::kPage ? "page" : "GET/PUT",
      o.replay.decode ? "on" : "off", s.write_through ? "write-through" : "write-back",
      s.promote_on_get ? "on" : "off",
      s.persistent_admission == tiers::TierManagerConfig::Admission::kAll ? "all" : "reused");
}

absl::Status RunCapacities(const std::vector<SimRequest>& reqs, const Options& o, SimReport& rep) {
  if (absl::GetFlag(FLAGS_capacities).empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<CapacitySpec> specs,
                   ParseCapacityList(absl::GetFlag(FLAGS_capacities)));
  for (const CapacitySpec& spec : specs) {
    CapacityRow row;
    row.label = spec.label;
    ReplayConfig rc = o.replay;
    ASSIGN_OR_RETURN(rc.host, ResolveTier(spec, o.page_bytes, o.slab_bytes, 64));
    row.capacity_pages = rc.host.slots;
    ASSIGN_OR_RETURN(row.lru, ReplayTierManager(reqs, rc));
    row.belady = RunBelady(reqs, row.capacity_pages);
    std::fprintf(stderr, "kvtier-sim: %s (%llu pages): LRU %.2f%% in %.2f s, Belady %.2f%%\n",
                 spec.label.c_str(), static_cast<unsigned long long>(row.capacity_pages),
                 100 * row.lru.hit_rate(), row.lru.seconds, 100 * row.belady.hit_rate());
    for (tiers::EvictionPolicy p : o.others) {
      ASSIGN_OR_RETURN(SimResult r, ReplayTierManager(reqs, WithPolicy(rc, p)));
      std::fprintf(stderr, "kvtier-sim: %s: %s %.2f%% in %.2f s\n", spec.label.c_str(),
                   r.policy.c_str(), 100 * r.hit_rate(), r.seconds);
      row.others.push_back(std::move(r));
    }
    rep.rows.push_back(std::move(row));
  }
  return absl::OkStatus();
}

absl::Status RunTwoTier(const std::vector<SimRequest>& reqs, const Options& o, SimReport& rep) {
  const std::string host = absl::GetFlag(FLAGS_host_pages), nvme = absl::GetFlag(FLAGS_nvme_pages);
  if (host.empty()) return absl::OkStatus();  // both or neither (OptionsFromFlags)
  ASSIGN_OR_RETURN(CapacitySpec h, ParseCapacity(host));
  ASSIGN_OR_RETURN(CapacitySpec n, ParseCapacity(nvme));
  ReplayConfig rc = o.replay;
  ASSIGN_OR_RETURN(rc.host, ResolveTier(h, o.page_bytes, o.slab_bytes, 64));
  ASSIGN_OR_RETURN(rc.nvme, ResolveTier(n, o.page_bytes, o.slab_bytes, 4096));
  TwoTierRun tt{h.label, n.label, rc.host.slots, rc.nvme->slots};
  ASSIGN_OR_RETURN(tt.lru, ReplayTierManager(reqs, rc));  // the baseline: LRU on both
  tt.belady = RunBelady(reqs, tt.host_pages + tt.nvme_pages);
  for (tiers::EvictionPolicy p : o.others) {
    ASSIGN_OR_RETURN(SimResult r, ReplayTierManager(reqs, WithPolicy(rc, p, o.nvme_policy)));
    if (o.nvme_policy.has_value() && *o.nvme_policy != p)
      absl::StrAppend(&r.policy, " (nvme ", tiers::EvictionPolicyName(*o.nvme_policy), ")");
    tt.others.push_back(std::move(r));
  }
  rep.two_tier = std::move(tt);
  return absl::OkStatus();
}

// The node's tiers, and one node with `nodes` times their capacity.
absl::Status NodeTiers(const Options& o, uint32_t nodes, ClusterStudyConfig& c) {
  ASSIGN_OR_RETURN(CapacitySpec h, ParseCapacity(absl::GetFlag(FLAGS_host_pages)));
  ASSIGN_OR_RETURN(CapacitySpec n, ParseCapacity(absl::GetFlag(FLAGS_nvme_pages)));
  c.node = c.big = o.replay;
  ASSIGN_OR_RETURN(c.node.host, ResolveTier(h, o.page_bytes, o.slab_bytes, 64));
  ASSIGN_OR_RETURN(c.node.nvme, ResolveTier(n, o.page_bytes, o.slab_bytes, 4096));
  c.host_label = h.label;
  c.nvme_label = n.label;
  c.big_label = absl::StrCat(nodes, "x (", h.label, " + ", n.label, ")");
  h.value *= nodes;
  n.value *= nodes;
  ASSIGN_OR_RETURN(c.big.host, ResolveTier(h, o.page_bytes, o.slab_bytes, 64));
  ASSIGN_OR_RETURN(c.big.nvme, ResolveTier(n, o.page_bytes, o.slab_bytes, 4096));
  return absl::OkStatus();
}

absl::Status RunCluster(const std::vector<SimRequest>& reqs, const Options& o, SimReport& rep) {
  const std::string remote = absl::GetFlag(FLAGS_remote_pages);
  const int32_t nodes = absl::GetFlag(FLAGS_nodes);
  if (nodes < 1) return absl::InvalidArgumentError("--nodes must be >= 1");
  if (remote.empty() && nodes == 1) return absl::OkStatus();
  if (absl::GetFlag(FLAGS_host_pages).empty()) {
    return absl::InvalidArgumentError("--remote_pages and --nodes need --host_pages and --nvme_pages");
  }
  ClusterStudyConfig c;
  c.nodes = static_cast<uint32_t>(nodes);
  RETURN_IF_ERROR(NodeTiers(o, c.nodes, c));
  if (!remote.empty()) {
    ASSIGN_OR_RETURN(std::vector<CapacitySpec> caps, ParseCapacityList(remote));
    for (const CapacitySpec& spec : caps) {
      ASSIGN_OR_RETURN(uint64_t pages, ResolveRecords(spec, o.page_bytes));
      c.remote.push_back({spec.label, pages});
    }
  }
  for (absl::string_view a :
       absl::StrSplit(absl::GetFlag(FLAGS_remote_admission), ',', absl::SkipWhitespace())) {
    ASSIGN_OR_RETURN(RemoteAdmission admission, ParseRemoteAdmission(a));
    c.admissions.push_back(admission);
  }
  ASSIGN_OR_RETURN(rep.cluster, RunClusterStudy(reqs, c));
  return absl::OkStatus();
}

absl::Status Main() {
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(Options o, OptionsFromFlags());
  if (absl::GetFlag(FLAGS_trace).empty()) return absl::InvalidArgumentError("--trace is required");
  trace::ParseOptions po;
  po.stop_on_error = absl::GetFlag(FLAGS_stop_on_error);
  po.max_requests = static_cast<size_t>(std::max<int64_t>(0, absl::GetFlag(FLAGS_max_requests)));
  ASSIGN_OR_RETURN(trace::Trace t, trace::LoadTrace(absl::GetFlag(FLAGS_trace), po));
  for (const std::string& s : t.skipped)
    std::fprintf(stderr, "kvtier-sim: skipped %s\n", s.c_str());
  trace::PageMapping mapping;
  mapping.pages_per_block = static_cast<uint32_t>(absl::GetFlag(FLAGS_pages_per_block));
  std::optional<SizingConfig> sizing;
  if (!absl::GetFlag(FLAGS_model).empty()) {
    // The model's pages: their size, and how many make one trace block.
    SizingConfig sc;
    ASSIGN_OR_RETURN(sc.layout, NamedModelLayout(absl::GetFlag(FLAGS_model)));
    ASSIGN_OR_RETURN(sc.layout.dtype, ParseDtype(absl::GetFlag(FLAGS_kv_dtype)));
    sc.layout.tokens_per_page = absl::GetFlag(FLAGS_tokens_per_page);
    if (sc.layout.tokens_per_page == 0 || t.block_tokens % sc.layout.tokens_per_page != 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "--tokens_per_page=", sc.layout.tokens_per_page, " must divide the trace's ",
          t.block_tokens, "-token blocks"));
    mapping.pages_per_block = t.block_tokens / sc.layout.tokens_per_page;
    o.page_bytes = sc.layout.PageBytes();
    sc.target = absl::GetFlag(FLAGS_target_hit_rate);
    sc.slab_bytes = o.slab_bytes;
    if (!absl::GetFlag(FLAGS_host_bytes).empty()) {
      ASSIGN_OR_RETURN(sc.host_bytes, ParseByteSize(absl::GetFlag(FLAGS_host_bytes)));
    }
    if (sc.target > 0) sizing = sc;
  } else if (absl::GetFlag(FLAGS_target_hit_rate) > 0) {
    return absl::InvalidArgumentError("--target_hit_rate needs --model (the page to size)");
  }
  const std::vector<SimRequest> reqs = FromTrace(t, mapping);

  SimReport rep;
  rep.trace = t.source;
  rep.prefix_model = t.prefix_model;
  rep.mapping = mapping.Describe(t.block_tokens);
  rep.policy = DescribePolicy(o);
  rep.infinite = RunInfinite(reqs);
  rep.requests = rep.infinite.requests;
  rep.refs = rep.infinite.refs;
  rep.unique_pages = rep.infinite.capacity_pages;
  for (const SimRequest& r : reqs) rep.decode_pages += o.replay.decode ? r.decode.size() : 0;
  RETURN_IF_ERROR(RunCapacities(reqs, o, rep));
  RETURN_IF_ERROR(RunTwoTier(reqs, o, rep));
  RETURN_IF_ERROR(RunCluster(reqs, o, rep));
  std::string sized;
  if (sizing) {
    ASSIGN_OR_RETURN(SizingResult sr, SizeFor(reqs, o.replay, rep.infinite, *sizing));
    sized = FormatSizing(*sizing, sr);
  }
  rep.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::fputs(FormatReport(rep).c_str(), stdout);
  std::fputs(sized.c_str(), stdout);
  std::fflush(stdout);
  if (!absl::GetFlag(FLAGS_json_out).empty()) {
    RETURN_IF_ERROR(WriteJson(rep, absl::GetFlag(FLAGS_json_out)));
  }
  if (!absl::GetFlag(FLAGS_plot).empty()) {
    RETURN_IF_ERROR(WritePlot(rep, absl::GetFlag(FLAGS_plot)));
    std::printf("plot written to %s\n", absl::GetFlag(FLAGS_plot).c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvtier::sim

int main(int argc, char** argv) {
  kvtier::ParseCommandLine(
      argc, argv,
      "offline capacity planning: replays a trace through the daemon's tier policy "
      "(accounting only: no daemon, no bytes) at each capacity asked for, next to Belady's "
      "optimum and the infinite-cache bound; prints a table, writes JSON and a PNG plot. "
      "With --nodes and --remote_pages: N daemons sharing one cache beside their stores, "
      "whose records belong to the cluster (so --remote_node_pages, a per-node budget "
      "there, no longer exists).\n"
      "  kvtier-sim --trace=SPEC [--capacities=1k,4k,16k,32k] [--eviction=lru,2q] [--page_bytes=1MiB] "
      "[--host_pages=N --nvme_pages=M [--nodes=K] [--remote_pages=CAP[,CAP...] "
      "--remote_admission=all|reused|put[,...]]] [--json_out=F] [--plot=F.png]\n"
      "  kvtier-sim --trace=SPEC --model=llama3-8b --target_hit_rate=0.3 [--capacities=] "
      "[--host_bytes=64GiB]   (sizing: GiB of RAM and NVMe for that hit rate)");
  absl::Status st = kvtier::sim::Main();
  if (!st.ok()) {
    std::fprintf(stderr, "kvtier-sim: %s\n", std::string(st.message()).c_str());
    return absl::IsFailedPrecondition(st) ? 3 : 2;
  }
  return 0;
}
