// kvtier-layer-read-bench: what a layer-wise read of NVMe pages costs against
// a whole-page read of the same pages, in the store alone (no daemon, no
// client). A host tier too small to hold them over an NVMe tier on a real
// file; `--pages` pages of `--layers` layers are PUT and flushed to NVMe,
// then each repeat reads them all into a destination buffer (as a GET copies
// into a client's buffer) both ways, alternating: TierManager::ReadPages
// (every read in flight at once, each page copied once verified) and
// TierManager::ReadLayers (layer-major reads, each layer copied once
// verified). Reports medians: total time, time to the first layer, GB/s.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "kvtier/byte_size.h"
#include "kvtier/cli.h"
#include "kvtier/status_macros.h"
#include "tiers/host/host_tier.h"
#include "tiers/nvme/nvme_tier.h"
#include "tiers/store/tier_manager.h"

ABSL_FLAG(std::string, dir, "", "directory on the disk to measure (required; emptied first)");
ABSL_FLAG(std::string, layer_bytes, "768KiB", "bytes per layer (124m fp16: 768 KiB)");
ABSL_FLAG(uint32_t, layers, 12, "layers per page");
ABSL_FLAG(uint32_t, pages, 30, "pages read per repeat");
ABSL_FLAG(int, repeats, 5, "repeats (the two ways alternate within each); medians reported");
ABSL_FLAG(uint32_t, queue_depth, 64, "the NVMe tier's queue depth");
ABSL_FLAG(bool, promote, false, "promote pages into RAM as they are read (then evict again)");

namespace {

namespace tiers = kvtier::tiers;
using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Copies each layer into its place in `out`, as the daemon's LayerCopy does.
class CopySink final : public tiers::LayerSink {
 public:
  CopySink(uint8_t* out, uint64_t page, uint64_t layer, Clock::time_point start)
      : out_(out), page_(page), layer_(layer), start_(start) {}
  void Layer(size_t i, uint32_t l, const uint8_t* bytes) override {
    std::memcpy(out_ + i * page_ + l * layer_, bytes, layer_);
  }
  void LayerDone(uint32_t l) override {
    if (l == 0) first_ms = Ms(start_, Clock::now());
  }
  void PageFailed(size_t i, absl::Status why) override { ++failed; }
  double first_ms = 0;
  int failed = 0;

 private:
  uint8_t* out_;
  uint64_t page_, layer_;
  Clock::time_point start_;
};

struct Store {
  std::unique_ptr<tiers::TierManager> mgr;
  tiers::NamespaceId ns = 0;
  std::vector<kvtier::PageKey> keys;
};

absl::StatusOr<Store> Open(const std::string& dir, uint64_t page, uint32_t pages) {
  const uint64_t slab = (page + (1 << 20) - 1) >> 20 << 20;
  std::vector<std::unique_ptr<tiers::Tier>> ts;
  tiers::HostTierConfig hc{.capacity_bytes = 2 * slab, .slab_bytes = slab};
  ASSIGN_OR_RETURN(auto host, tiers::CreateHostTier(hc));
  ts.push_back(std::move(host));
  tiers::NvmeTierConfig nc{.dir = dir, .capacity_bytes = (pages + 4) * slab, .slab_bytes = slab,
                           .queue_depth = absl::GetFlag(FLAGS_queue_depth)};
  ASSIGN_OR_RETURN(auto nvme, tiers::CreateNvmeTier(nc));
  ts.push_back(std::move(nvme));
  tiers::TierManagerConfig mc;
  mc.start_evictor_thread = false;
  mc.promote_on_get = absl::GetFlag(FLAGS_promote);
  Store s;
  ASSIGN_OR_RETURN(s.mgr, tiers::TierManager::Create(mc, std::move(ts)));
  ASSIGN_OR_RETURN(s.ns, s.mgr->AddNamespace(tiers::NamespaceConfig{.name = "bench"}));
  RETURN_IF_ERROR(s.mgr->RecoverPersistent());
  std::vector<uint8_t> bytes(page);
  for (uint32_t i = 0; i < pages; ++i) {
    kvtier::PageKey key;
    std::memcpy(key.bytes.data(), &i, sizeof(i));
    key.bytes[15] = 0x77;
    for (uint64_t k = 0; k < page; k += 8) std::memcpy(&bytes[k], &k, std::min<uint64_t>(8, page - k));
    bytes[0] = static_cast<uint8_t>(i);
    ASSIGN_OR_RETURN(auto r, s.mgr->Reserve(s.ns, key, kvtier::PageKey::Zero(), page));
    RETURN_IF_ERROR(r.reservation.Fill(bytes.data()));
    r.reservation.Commit();
    RETURN_IF_ERROR(s.mgr->FlushToPersistent().status());
    s.keys.push_back(key);
  }
  return s;
}

std::vector<tiers::PagePin> PinAll(Store& s) {
  std::vector<tiers::PagePin> pins;
  for (const auto& k : s.keys) {
    auto pin = s.mgr->PinForRead(s.ns, k);
    pins.push_back(pin ? *std::move(pin) : tiers::PagePin());
  }
  return pins;
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::ParseCommandLine(argc, argv,
                           "kvtier-layer-read-bench --dir=/var/tmp/x [--layer_bytes=768KiB "
                           "--layers=12 --pages=30 --repeats=5]: layer-wise vs whole-page "
                           "reads of NVMe pages in the store");
  const std::string dir = absl::GetFlag(FLAGS_dir);
  auto layer = kvtier::ParseByteSize(absl::GetFlag(FLAGS_layer_bytes));
  if (dir.empty() || !layer.ok()) {
    std::cerr << "--dir is required and --layer_bytes must be a size\n";
    return 2;
  }
  const uint32_t layers = absl::GetFlag(FLAGS_layers), pages = absl::GetFlag(FLAGS_pages);
  const uint64_t page = *layer * layers;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto store = Open(dir, page, pages);
  if (!store.ok()) {
    std::cerr << "setup: " << store.status() << "\n";
    return 1;
  }
  std::vector<uint8_t> out(page * pages, 1);  // faulted in, as a registered buffer is
  std::vector<double> whole, layered, first;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    std::vector<tiers::PagePin> pins = PinAll(*store);
    auto t0 = Clock::now();
    store->mgr->ReadPages(absl::MakeSpan(pins), tiers::ReadOptions{},
                          [&](size_t i, absl::StatusOr<const uint8_t*> b) {
                            if (b.ok()) std::memcpy(out.data() + i * page, *b, page);
                          });
    whole.push_back(Ms(t0, Clock::now()));
    pins.clear();
    if (absl::GetFlag(FLAGS_promote)) (void)store->mgr->FlushToPersistent();
    pins = PinAll(*store);
    t0 = Clock::now();
    CopySink sink(out.data(), page, *layer, t0);
    store->mgr->ReadLayers(absl::MakeSpan(pins), *layer, layers, tiers::ReadOptions{}, sink);
    layered.push_back(Ms(t0, Clock::now()));
    first.push_back(sink.first_ms);
    if (sink.failed > 0) std::cerr << sink.failed << " pages failed\n";
    pins.clear();
    if (absl::GetFlag(FLAGS_promote)) (void)store->mgr->FlushToPersistent();
  }
  const double gb = double(page) * pages / 1e9;
  absl::PrintF("%u pages x %u layers x %s (%.1f MiB), %d repeats, medians\n", pages, layers,
               absl::GetFlag(FLAGS_layer_bytes), double(page) * pages / (1 << 20), whole.size());
  absl::PrintF("  whole-page ReadPages  %8.1f ms  %.2f GB/s\n", Median(whole), gb / Median(whole) * 1e3);
  absl::PrintF("  layer-wise ReadLayers %8.1f ms  %.2f GB/s  (first layer after %.1f ms)  -> %.2fx\n",
               Median(layered), gb / Median(layered) * 1e3, Median(first),
               Median(whole) / Median(layered));
  return 0;
}
