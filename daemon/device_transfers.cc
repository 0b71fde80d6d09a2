// The GPU data path of kvtierd; see device_transfers.h. The copy engine's
// workers call DeviceGet/DevicePut for jobs on device buffers; each submits
// its batches asynchronously and waits for their completion events, so a
// reply leaves only once the bytes are in place.
#include "daemon/device_transfers.h"

#include <unistd.h>

#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/daemon.h"
#include "daemon/data_path.h"
#include "kvtier/status_macros.h"
#include "spdlog/spdlog.h"

namespace kvtier::daemon {
namespace {

using tiers::hbm::CopyGroup;
using tiers::hbm::CopyKind;
using tiers::hbm::CopyRange;

uint64_t Sum(const std::vector<CopyRange>& ranges) {
  uint64_t n = 0;
  for (const CopyRange& r : ranges) n += r.bytes;
  return n;
}

// A copy-engine part runs on one worker; spreading parts over streams lets
// the batches of concurrent parts overlap.
int StreamFor(size_t begin) { return static_cast<int>(begin); }

// Copies of one kind, submitted in batches of about this many bytes as the
// pages come: they overlap the reads still in flight, without one device
// call per small page.
constexpr uint64_t kBatchBytes = 4ull << 20;

class CopyBatch {
 public:
  CopyBatch(CopyGroup& group, CopyKind kind, int stream)
      : group_(group), kind_(kind), stream_(stream) {}
  void Add(void* dst, const void* src, uint64_t n) {
    ranges_.push_back({dst, src, n});
    pending_ += n;
    total_ += n;
    if (pending_ >= kBatchBytes) Flush();
  }
  void Flush() {
    if (ranges_.empty()) return;
    group_.Add(kind_, tiers::hbm::Coalesce(std::move(ranges_)), stream_);
    ranges_.clear();
    pending_ = 0;
  }
  uint64_t total() const { return total_; }

 private:
  CopyGroup& group_;
  const CopyKind kind_;
  const int stream_;
  std::vector<CopyRange> ranges_;
  uint64_t pending_ = 0, total_ = 0;
};

// One copy-engine part of a GET into a device buffer. HBM pages go D2D at
// once. The others come through ReadPages, every NVMe read in flight
// together, and are copied as each is handed over: an NVMe page that
// ReadPages promoted into host memory moves on up into the HBM tier first
// (so the next GET of it is a D2D copy) and goes D2D from there; with no
// clean room in HBM it stays in host memory and goes H2D, as RAM pages do.
class DeviceGetPart {
 public:
  DeviceGetPart(tiers::TierManager& store, tiers::HbmTier* hbm, const ClientBuffer& buf,
                absl::Span<tiers::PagePin> pins, absl::Span<const uint64_t> offsets,
                std::string& tiers, size_t begin, size_t end)
      : store_(store), hbm_(hbm), buf_(buf), pins_(pins.subspan(begin, end - begin)),
        offsets_(offsets.subspan(begin, end - begin)), tiers_(tiers), begin_(begin),
        hbm_index_(hbm != nullptr ? store.TierIndex(tiers::TierKind::kHbm) : -1),
        group_(*buf.gpu()),
        d2d_(group_, CopyKind::kDeviceToDevice, StreamFor(begin)),
        h2d_(group_, CopyKind::kHostToDevice, StreamFor(begin) + 1) {}

  // Returns when every copy has completed; the first error otherwise.
  absl::Status Run(prefetch::Prefetcher* pf);

 private:
  uint8_t* Dst(size_t k) const { return buf_.device_ptr() + offsets_[k]; }
  void StartHbmCopies();
  void OnPage(size_t k, absl::StatusOr<const uint8_t*> src);
  bool PromoteIntoHbm(size_t k);

  tiers::TierManager& store_;
  tiers::HbmTier* const hbm_;
  const ClientBuffer& buf_;
  const absl::Span<tiers::PagePin> pins_;  // this part's pages
  const absl::Span<const uint64_t> offsets_;
  std::string& tiers_;  // the whole GET's reply
  const size_t begin_;
  const int hbm_index_;  // -1: no HBM tier
  // HBM pages, set aside (pinned) while ReadPages runs: it reads any
  // non-empty pin that is not host memory.
  std::vector<std::pair<size_t, tiers::PagePin>> on_hbm_;
  std::vector<bool> from_disk_;  // per page: below RAM when the GET began
  uint64_t hbm_bytes_ = 0;       // of the pages in HBM when the GET began
  absl::Status error_;
  // After what its copies read: destroyed (waited for) first.
  CopyGroup group_;
  CopyBatch d2d_, h2d_;
};

absl::Status DeviceGetPart::Run(prefetch::Prefetcher* pf) {
  StartHbmCopies();
  ReadPagesForGet(store_, pf, pins_, [this](size_t k, absl::StatusOr<const uint8_t*> src) {
    OnPage(k, std::move(src));
  });
  d2d_.Flush();
  h2d_.Flush();
  absl::Status st = group_.Wait();
  for (auto& [k, pin] : on_hbm_) pins_[k] = std::move(pin);
  const uint64_t out = hbm_bytes_ + d2d_.total();
  if (st.ok() && hbm_ != nullptr && out > 0) hbm_->CountOut(out);
  return st.ok() ? error_ : st;
}

// HBM pages go as one batch (coalesced as far as they are adjacent).
void DeviceGetPart::StartHbmCopies() {
  from_disk_.assign(pins_.size(), false);
  std::vector<CopyRange> d2d;
  for (size_t k = 0; k < pins_.size(); ++k) {
    tiers::PagePin& pin = pins_[k];
    if (!pin.valid()) continue;
    if (hbm_ != nullptr && pin.tier() == tiers::TierKind::kHbm) {
      d2d.push_back({Dst(k), hbm_->DevicePtr(pin.slot()), pin.bytes()});
      on_hbm_.emplace_back(k, std::move(pin));
    } else {
      from_disk_[k] = pin.data() == nullptr;
    }
  }
  hbm_bytes_ = Sum(d2d);
  group_.Add(CopyKind::kDeviceToDevice, tiers::hbm::Coalesce(std::move(d2d)), StreamFor(begin_));
}

void DeviceGetPart::OnPage(size_t k, absl::StatusOr<const uint8_t*> src) {
  if (absl::IsDataLoss(src.status())) {
    tiers_[begin_ + k] = 0;  // corrupt on disk: a miss, never wrong bytes
    return;
  }
  if (!src.ok()) {
    if (error_.ok()) error_ = src.status();
    return;
  }
  tiers::PagePin& pin = pins_[k];
  const uint64_t n = pin.bytes();
  const bool in_host_slot = *src == pin.data();  // stays put while pinned
  if (in_host_slot && from_disk_[k] && PromoteIntoHbm(k)) {
    d2d_.Add(Dst(k), hbm_->DevicePtr(pin.slot()), n);
    return;
  }
  if (in_host_slot) return h2d_.Add(Dst(k), *src, n);
  // Bounce bytes are lent for this call only: copied before it returns,
  // straight from the (warm, reused) bounce buffer. Staging them in fresh
  // memory instead cost a page fault per 4 KiB, 3x the whole GET here.
  CopyGroup one(*buf_.gpu());
  one.Add(CopyKind::kHostToDevice, {{Dst(k), *src, n}}, StreamFor(begin_) + 1);
  if (absl::Status st = one.Wait(); !st.ok() && error_.ok()) error_ = st;
}

// An NVMe page ReadPages just promoted into host memory (promote_on_get),
// verified, goes on up into HBM. Like every promotion on a GET it makes
// room only by dropping clean pages (or moving pages down to RAM): no disk
// I/O. False: it stays in host memory (no room, or busy).
bool DeviceGetPart::PromoteIntoHbm(size_t k) {
  if (hbm_index_ < 0) return false;
  const tiers::PromoteOutcome o =
      store_.PromoteTo(pins_[k], static_cast<size_t>(hbm_index_), tiers::EvictMode::kCleanOnly);
  return o == tiers::PromoteOutcome::kPromoted && pins_[k].tier() == tiers::TierKind::kHbm;
}

}  // namespace

bool IsOwnDeviceObject(absl::string_view name) {
  return absl::StartsWith(name, absl::StrCat("/kvtier-emu-", getpid(), "-"));
}

absl::Status Daemon::InitDevice(std::vector<std::unique_ptr<tiers::Tier>>& tiers) {
  const DeviceOptions& o = device_options_;
  std::string why;
  ASSIGN_OR_RETURN(device_, tiers::hbm::CreateDevice(o.mode, o.hbm_bytes, o.ordinal, &why));
  device_desc_ = device_ ? device_->description() : "none";
  spdlog::info("device: {}", why);
  if (o.hbm_bytes == 0) {
    spdlog::info("hbm tier: disabled (--hbm_bytes=0)");
    return absl::OkStatus();
  }
  if (device_ == nullptr)
    return absl::InvalidArgumentError("--hbm_bytes > 0 needs a device; --hbm_device=none has none");
  tiers::HbmTierConfig hc{.capacity_bytes = o.hbm_bytes, .slab_bytes = config_.host.slab_bytes};
  auto hbm = tiers::HbmTier::Create(hc, device_);
  if (!hbm.ok())
    return absl::Status(hbm.status().code(),
                        absl::StrCat("--hbm_bytes: ", hbm.status().message()));
  spdlog::info("hbm tier: {} MiB on {}", (*hbm)->capacity_bytes() >> 20, device_desc_);
  hbm_ = hbm->get();
  tiers.push_back(*std::move(hbm));
  return absl::OkStatus();
}

void Daemon::PinHostArena(tiers::Tier& host) {
  if (device_ == nullptr || device_->emulated()) return;
  auto [base, len] = host.Region();
  if (base == nullptr) return;
  // Pinned host pages make H2D/D2H true DMA; without it CUDA stages through
  // its own bounce buffers (slower, still correct), so failure is a warning.
  absl::Status st = device_->RegisterHost(base, len);
  if (st.ok()) {
    pinned_host_ = base;
    spdlog::info("host tier pinned for DMA ({} MiB)", len >> 20);
  } else {
    spdlog::warn("host tier not pinned ({}); host<->GPU copies will be staged", st.ToString());
  }
}

absl::StatusOr<std::shared_ptr<ClientBuffer>> Daemon::MapDeviceBuffer(
    const wire::RegisterBuffer& r) {
  if (device_ == nullptr)
    return absl::FailedPreconditionError(
        "REGISTER_BUFFER: this daemon runs without a device (--hbm_device=none)");
  const bool cuda = r.kind() == wire::BUFFER_CUDA_IPC;
  if (cuda == device_->emulated())
    return absl::FailedPreconditionError(absl::StrCat(
        "REGISTER_BUFFER: a ", cuda ? "CUDA IPC" : "emulated-device",
        " buffer, but this daemon's device is ", device_desc_,
        cuda ? " (start it on a GPU machine, --hbm_device=cuda)" : " (use a CUDA IPC handle)"));
  std::string label = cuda ? absl::StrCat("cuda-ipc buffer (client device ", r.device_ordinal(), ")")
                           : r.device_handle();
  if (!cuda && (IsOwnDeviceObject(r.device_handle()) ||
                absl::StartsWith(r.device_handle(), "/kvtier-host")))
    return absl::PermissionDeniedError(
        absl::StrCat("REGISTER_BUFFER: '", r.device_handle(), "' is reserved for the daemon"));
  return ClientBuffer::MapDevice(device_, r.device_handle(), r.size(), std::move(label));
}

absl::StatusOr<std::shared_ptr<ClientBuffer>> ClientBuffer::MapDevice(
    std::shared_ptr<tiers::hbm::Device> device, const std::string& handle, uint64_t size,
    std::string label) {
  auto mem = device->ImportHandle(handle, size);
  if (!mem.ok())
    return absl::Status(mem.status().code(),
                        absl::StrCat("REGISTER_BUFFER: ", label, ": ", mem.status().message()));
  std::shared_ptr<ClientBuffer> b(new ClientBuffer(std::move(label),
                                                   static_cast<uint8_t*>(mem->ptr), size,
                                                   mem->dev, mem->ino));
  b->gpu_ = std::move(device);
  return b;
}

absl::Status DeviceGet(tiers::TierManager& store, tiers::HbmTier* hbm, prefetch::Prefetcher* pf,
                       const ClientBuffer& buf,
                       absl::Span<tiers::PagePin> pins, absl::Span<const uint64_t> offsets,
                       std::string& tiers, size_t begin, size_t end) {
  return DeviceGetPart(store, hbm, buf, pins, offsets, tiers, begin, end).Run(pf);
}

absl::Status DevicePut(tiers::HbmTier* hbm, const ClientBuffer& buf,
                       absl::Span<tiers::Reservation> rs, absl::Span<const size_t> key_index,
                       absl::Span<const uint64_t> offsets, size_t begin, size_t end) {
  std::vector<CopyRange> d2d, d2h;
  std::vector<size_t> direct;  // filled by the DMA itself
  std::vector<std::pair<size_t, std::unique_ptr<uint8_t[]>>> staged;
  for (size_t r = begin; r < end; ++r) {
    tiers::Reservation& res = rs[r];
    const uint8_t* src = buf.device_ptr() + offsets[key_index[r]];
    const uint64_t n = res.bytes();
    if (!res.NeedsHostBytes() && res.tier() == tiers::TierKind::kHbm && hbm != nullptr) {
      d2d.push_back({hbm->DevicePtr(res.slot()), src, n});
      direct.push_back(r);
    } else if (uint8_t* p = res.NeedsHostBytes() ? nullptr : res.data()) {
      d2h.push_back({p, src, n});
      direct.push_back(r);
    } else {  // NVMe or write-through: Fill computes the checksum from host bytes
      staged.emplace_back(r, std::make_unique<uint8_t[]>(n));
      d2h.push_back({staged.back().second.get(), src, n});
    }
  }
  CopyGroup group(*buf.gpu());
  group.Add(CopyKind::kDeviceToDevice, tiers::hbm::Coalesce(std::move(d2d)), StreamFor(begin));
  group.Add(CopyKind::kDeviceToHost, tiers::hbm::Coalesce(std::move(d2h)), StreamFor(begin) + 1);
  RETURN_IF_ERROR(group.Wait());
  // MarkFilled counts the DMA'd bytes into their tier (HBM or host).
  for (size_t r : direct) RETURN_IF_ERROR(rs[r].MarkFilled());
  for (auto& [r, bytes] : staged) RETURN_IF_ERROR(rs[r].Fill(bytes.get()));
  return absl::OkStatus();
}

}  // namespace kvtier::daemon
