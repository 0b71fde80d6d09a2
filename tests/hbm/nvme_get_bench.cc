// kvtier-nvme-device-get-bench: GETs of NVMe pages into a device buffer (the
// emulated device, or CUDA) through running kvtierds with an HBM tier: the
// first GET of N pages that all sit on NVMe, then a second GET of the same
// pages (wherever the first left them), medians over repeats; with a
// baseline daemon, the same in the same run and the ratios. Driven by
// tests/hbm/nvme_get_bench.sh, which starts the daemons.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "kvtier/cli.h"
#include "kvtier/client.h"
#include "kvtier/gpu_arena.h"
#include "kvtier/page_key.h"
#include "kvtier/status_macros.h"
#include "tools/common/page_pattern.h"

ABSL_FLAG(std::string, endpoint, "", "the daemon under test (with an HBM tier and NVMe)");
ABSL_FLAG(std::string, baseline_endpoint, "", "a baseline daemon, measured in the same run");
ABSL_FLAG(int, pages, 32, "pages per GET");
ABSL_FLAG(int, page_kib, 1024, "page size in KiB (a multiple of 32)");
ABSL_FLAG(int, repeats, 7, "timed rounds (median reported), after one warm-up round");
ABSL_FLAG(bool, cuda, false, "a CUDA arena instead of the emulated device's");

namespace kvtier {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kTokenBytes = 8 * 2 * 8 * 128 * 2;  // layers x {K,V} x heads x dim x fp16

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Result {
  double first_ms = 0, second_ms = 0;
  std::string second_tiers;  // where the second GET found the pages
};

// A timed GET of every key; checks the bytes when `check`.
absl::StatusOr<double> TimedGet(Client& c, GpuArena& arena, BufferId id,
                                const std::vector<PageKey>& keys, uint64_t page, bool check,
                                std::map<std::string, int>* tiers) {
  std::vector<uint64_t> offsets(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) offsets[i] = i * page;
  const auto t0 = Clock::now();
  ASSIGN_OR_RETURN(std::vector<TierKind> got, c.Get(keys, id, offsets));
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::vector<uint8_t> bytes(page);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (tiers != nullptr) ++(*tiers)[std::string(TierKindName(got[i]))];
    if (got[i] == TierKind::kNone) return absl::DataLossError(absl::StrCat("page ", i, " missed"));
    if (!check) continue;
    RETURN_IF_ERROR(arena.Read(i * page, bytes.data(), page));
    if (tools::CheckPattern(keys[i], bytes.data(), page) != page)
      return absl::DataLossError(absl::StrCat("page ", i, " has wrong bytes"));
  }
  return ms;
}

// Sends every page of the daemon down to NVMe (HBM -> host -> NVMe). A
// daemon without an HBM tier (--hbm_bytes=0) says InvalidArgument to the first.
absl::Status AllToNvme(Client& c) {
  if (absl::Status st = c.Evict("", TierKind::kHbm, 0).status();
      !st.ok() && !absl::IsInvalidArgument(st))
    return st;
  RETURN_IF_ERROR(c.Evict("", TierKind::kHost, 0).status());
  return absl::OkStatus();
}

// One daemon's client, device arena and stored chain.
struct Rig {
  std::unique_ptr<Client> client;
  std::unique_ptr<GpuArena> arena;
  BufferId id = 0;
  std::vector<PageKey> keys;
  std::vector<double> first, second;
  std::map<std::string, int> second_tiers;  // of the last round
};

absl::StatusOr<Rig> Setup(const std::string& endpoint, size_t n, uint64_t page) {
  const uint32_t tokens = static_cast<uint32_t>(page / kTokenBytes);
  const Layout layout{8, 8, 128, tokens, Dtype::kFp16};
  Rig rig;
  ASSIGN_OR_RETURN(rig.client, Client::Connect({.endpoint = endpoint, .layout = layout,
                                                .client_name = "nvme-device-get-bench",
                                                .timeout = std::chrono::milliseconds(60000)}));
  ASSIGN_OR_RETURN(rig.arena, GpuArena::Create(n * page, absl::GetFlag(FLAGS_cuda)
                                                             ? ArenaKind::kCuda
                                                             : ArenaKind::kEmulatedDevice));
  ASSIGN_OR_RETURN(rig.id, rig.arena->Register(*rig.client));
  std::vector<uint32_t> ids(n * tokens);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>(i * 2654435761u + page);
  rig.keys = DeriveChain(layout.Id(), tokens, ids);
  std::vector<uint8_t> bytes(page);
  std::vector<uint64_t> offsets(n);
  for (size_t i = 0; i < n; ++i) {
    tools::FillPattern(rig.keys[i], bytes.data(), page);
    RETURN_IF_ERROR(rig.arena->Write(i * page, bytes.data(), page));
    offsets[i] = i * page;
  }
  ASSIGN_OR_RETURN(PutResult put, rig.client->Put(rig.keys, PageKey::Zero(), rig.id, offsets));
  if (put.stored != n) return absl::ResourceExhaustedError(put.not_stored_reason);
  return rig;
}

// One round: every page to NVMe, then the two GETs. Round 0 warms up and
// checks the bytes; the last one records where the second GET found them.
absl::Status Round(Rig& rig, uint64_t page, int r, int repeats) {
  RETURN_IF_ERROR(AllToNvme(*rig.client));
  ASSIGN_OR_RETURN(double a, TimedGet(*rig.client, *rig.arena, rig.id, rig.keys, page, r == 0,
                                      nullptr));
  ASSIGN_OR_RETURN(double b, TimedGet(*rig.client, *rig.arena, rig.id, rig.keys, page, r == 0,
                                      r == repeats ? &rig.second_tiers : nullptr));
  if (r == 0) return absl::OkStatus();
  rig.first.push_back(a);
  rig.second.push_back(b);
  return absl::OkStatus();
}

Result Summarize(const Rig& rig) {
  Result out{Median(rig.first), Median(rig.second), ""};
  for (const auto& [t, count] : rig.second_tiers)
    absl::StrAppend(&out.second_tiers, t, " x", count, " ");
  return out;
}

void Row(const char* name, const Result& r, uint64_t bytes) {
  std::printf("%-9s first GET %8.2f ms (%6.2f GB/s)   second GET %8.2f ms (%6.2f GB/s)   second "
              "from: %s\n",
              name, r.first_ms, bytes / r.first_ms / 1e6, r.second_ms, bytes / r.second_ms / 1e6,
              r.second_tiers.c_str());
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) {
  kvtier::ParseCommandLine(
      argc, argv,
      "GETs of NVMe pages into a device buffer through running kvtierds (HBM tier + NVMe): "
      "first GET from NVMe and second GET, medians, and the ratios to a baseline daemon "
      "measured in the same run.\n"
      "  kvtier-nvme-device-get-bench --endpoint=ipc://... [--baseline_endpoint=ipc://...]\n"
      "      [--pages=32] [--page_kib=1024] [--repeats=7] [--cuda]\n"
      "tests/hbm/nvme_get_bench.sh starts both daemons and runs it.");
  const std::string endpoint = absl::GetFlag(FLAGS_endpoint);
  const std::string base = absl::GetFlag(FLAGS_baseline_endpoint);
  if (endpoint.empty()) {
    std::fprintf(stderr, "--endpoint is required (see --help)\n");
    return 2;
  }
  const size_t n = static_cast<size_t>(absl::GetFlag(FLAGS_pages));
  const uint64_t page = uint64_t(absl::GetFlag(FLAGS_page_kib)) << 10;
  const int repeats = absl::GetFlag(FLAGS_repeats);
  std::printf("%zu pages x %lu KiB per GET, median of %d rounds (baseline and this interleaved)\n",
              n, page >> 10, repeats);
  std::vector<kvtier::Rig> rigs;  // [this, baseline]
  for (const std::string& e : {endpoint, base}) {
    if (e.empty()) continue;
    auto rig = kvtier::Setup(e, n, page);
    if (!rig.ok()) return (std::fprintf(stderr, "%s: %s\n", e.c_str(), rig.status().ToString().c_str()), 1);
    rigs.push_back(*std::move(rig));
  }
  for (int r = 0; r <= repeats; ++r) {
    for (kvtier::Rig& rig : rigs) {
      if (absl::Status st = kvtier::Round(rig, page, r, repeats); !st.ok())
        return (std::fprintf(stderr, "round %d: %s\n", r, st.ToString().c_str()), 1);
    }
  }
  const kvtier::Result mine = kvtier::Summarize(rigs[0]);
  if (rigs.size() > 1) kvtier::Row("baseline", kvtier::Summarize(rigs[1]), n * page);
  kvtier::Row("this", mine, n * page);
  if (rigs.size() > 1) {
    const kvtier::Result b = kvtier::Summarize(rigs[1]);
    std::printf("ratio (this / baseline, median time): first GET %.3f, second GET %.3f\n",
                mine.first_ms / b.first_ms, mine.second_ms / b.second_ms);
  }
  return 0;
}
