// Backend-independent parts of the device interface: copy coalescing, the
// synchronous Copy helper, and the factory that picks CUDA or the emulated
// device. Builds without CUDA provide the CUDA entry points as stubs here.
#include "tiers/hbm/device.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace kvtier::tiers::hbm {

absl::string_view CopyKindName(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice: return "H2D";
    case CopyKind::kDeviceToHost: return "D2H";
    case CopyKind::kDeviceToDevice: return "D2D";
  }
  return "?";
}

std::vector<CopyRange> Coalesce(std::vector<CopyRange> ranges) {
  std::sort(ranges.begin(), ranges.end(), [](const CopyRange& a, const CopyRange& b) {
    return std::less<const void*>()(a.src, b.src);
  });
  std::vector<CopyRange> out;
  for (const CopyRange& r : ranges) {
    if (r.bytes == 0) continue;
    if (!out.empty()) {
      CopyRange& last = out.back();
      const auto* src_end = static_cast<const uint8_t*>(last.src) + last.bytes;
      const auto* dst_end = static_cast<const uint8_t*>(last.dst) + last.bytes;
      if (src_end == r.src && dst_end == r.dst) {
        last.bytes += r.bytes;
        continue;
      }
    }
    out.push_back(r);
  }
  return out;
}

absl::Status Device::Copy(CopyKind kind, std::vector<CopyRange> ranges, int stream) {
  absl::Notification done;
  absl::Status result;
  absl::Status st = CopyAsync(kind, std::move(ranges), stream, [&](absl::Status s) {
    result = std::move(s);
    done.Notify();
  });
  if (!st.ok()) return st;
  done.WaitForNotification();
  return result;
}

void CopyGroup::Add(CopyKind kind, std::vector<CopyRange> ranges, int stream) {
  if (ranges.empty()) return;
  {
    absl::MutexLock lock(&mu_);
    ++pending_;
  }
  absl::Status st =
      device_.CopyAsync(kind, std::move(ranges), stream, [this](absl::Status s) { Done(s); });
  if (!st.ok()) Done(std::move(st));  // not submitted: no callback will come
}

void CopyGroup::Done(absl::Status st) {
  absl::MutexLock lock(&mu_);
  if (error_.ok() && !st.ok()) error_ = std::move(st);
  --pending_;
}

absl::Status CopyGroup::Wait() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_ == 0; };
  mu_.Await(absl::Condition(&idle));
  return error_;
}

absl::StatusOr<DeviceMode> ParseDeviceMode(absl::string_view text) {
  if (text == "auto") return DeviceMode::kAuto;
  if (text == "cuda") return DeviceMode::kCuda;
  if (text == "emulated") return DeviceMode::kEmulated;
  if (text == "none") return DeviceMode::kNone;
  return absl::InvalidArgumentError(
      absl::StrCat("device mode '", text, "' is not one of auto, cuda, emulated, none"));
}

absl::string_view DeviceModeName(DeviceMode mode) {
  switch (mode) {
    case DeviceMode::kAuto: return "auto";
    case DeviceMode::kCuda: return "cuda";
    case DeviceMode::kEmulated: return "emulated";
    case DeviceMode::kNone: return "none";
  }
  return "?";
}

absl::StatusOr<std::shared_ptr<Device>> CreateDevice(DeviceMode mode, uint64_t hbm_bytes,
                                                     int ordinal, std::string* why) {
  std::string reason;
  switch (mode) {
    case DeviceMode::kNone:
      *why = "none (--hbm_device=none): no HBM tier, no GPU buffers";
      return std::shared_ptr<Device>();
    case DeviceMode::kEmulated:
      *why = "emulated (--hbm_device=emulated)";
      return CreateEmulatedDevice();
    case DeviceMode::kCuda: {
      auto dev = CreateCudaDevice(ordinal);
      if (dev.ok()) *why = absl::StrCat((*dev)->description(), " (--hbm_device=cuda)");
      return dev;
    }
    case DeviceMode::kAuto:
      break;
  }
  const int count = CudaDeviceCount(&reason);
  if (count > 0 && hbm_bytes > 0) {
    auto dev = CreateCudaDevice(ordinal);
    if (dev.ok()) {
      *why = absl::StrCat((*dev)->description(), " (auto: CUDA device present)");
      return dev;
    }
    reason = std::string(dev.status().message());
  } else if (count > 0) {
    reason = "--hbm_bytes=0";
  }
  *why = absl::StrCat("emulated (auto: ", reason, ")");
  return CreateEmulatedDevice();
}

#if !KVTIER_HAVE_CUDA
bool BuiltWithCuda() { return false; }

int CudaDeviceCount(std::string* why) {
  if (why != nullptr) *why = "built without CUDA (KVTIER_CUDA=OFF or no nvcc)";
  return 0;
}

absl::StatusOr<std::shared_ptr<Device>> CreateCudaDevice(int ordinal, int streams) {
  return absl::FailedPreconditionError(
      "CUDA device requested, but kvtier was built without CUDA (configure with -DKVTIER_CUDA=ON)");
}
#endif

}  // namespace kvtier::tiers::hbm
