// The GPU data path of kvtierd; see device_transfers.h. The copy engine's
// workers call DeviceGet/DevicePut for jobs on device buffers; each submits
// its batches asynchronously and waits for their completion events, so a
// reply leaves only once the bytes are in place.
#include "daemon/device_transfers.h"

#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/daemon.h"
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
  std::vector<CopyRange> d2d, h2d;
  std::vector<std::vector<uint8_t>> staged;  // pages read from disk with no room above
  for (size_t i = begin; i < end; ++i) {
    tiers::PagePin& pin = pins[i];
    if (!pin.valid()) continue;
    uint8_t* dst = buf.device_ptr() + offsets[i];
    const uint64_t n = pin.bytes();
    if (pin.tier() == tiers::TierKind::kHbm && hbm != nullptr) {
      d2d.push_back({dst, hbm->DevicePtr(pin.slot()), n});
      continue;
    }
    // NVMe pages move up to the (pinned) host tier first, then go as host
    // pages; with no room there they go from a verified bounce copy.
    staged.emplace_back();
    absl::StatusOr<const uint8_t*> src = ReadForGet(store, pf, pin, staged.back());
    if (absl::IsDataLoss(src.status())) {
      tiers[i] = 0;  // corrupt on disk: a miss, never wrong bytes
      continue;
    }
    RETURN_IF_ERROR(src.status());
    h2d.push_back({dst, *src, n});
  }
  const uint64_t d2d_bytes = Sum(d2d);
  CopyGroup group(*buf.gpu());
  group.Add(CopyKind::kDeviceToDevice, tiers::hbm::Coalesce(std::move(d2d)), StreamFor(begin));
  group.Add(CopyKind::kHostToDevice, tiers::hbm::Coalesce(std::move(h2d)), StreamFor(begin) + 1);
  absl::Status st = group.Wait();
  if (st.ok() && hbm != nullptr && d2d_bytes > 0) hbm->CountOut(d2d_bytes);
  return st;
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
  const uint64_t d2d_bytes = Sum(d2d);
  CopyGroup group(*buf.gpu());
  group.Add(CopyKind::kDeviceToDevice, tiers::hbm::Coalesce(std::move(d2d)), StreamFor(begin));
  group.Add(CopyKind::kDeviceToHost, tiers::hbm::Coalesce(std::move(d2h)), StreamFor(begin) + 1);
  RETURN_IF_ERROR(group.Wait());
  if (hbm != nullptr && d2d_bytes > 0) hbm->CountIn(d2d_bytes);
  for (size_t r : direct) RETURN_IF_ERROR(rs[r].MarkFilled());
  for (auto& [r, bytes] : staged) RETURN_IF_ERROR(rs[r].Fill(bytes.get()));
  return absl::OkStatus();
}

}  // namespace kvtier::daemon
