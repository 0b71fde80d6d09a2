// The CUDA backend's entry points in a build without CUDA (KVTIER_CUDA=OFF,
// or AUTO without nvcc): --device=cuda fails at start with the reason.
#include "kvtier/decoder/device.h"

namespace kvtier::decoder {

bool CudaDecoderBuilt() { return false; }

absl::StatusOr<std::unique_ptr<DeviceForward>> CreateCudaForward(const ModelWeights&, PagedKvCache&,
                                                                 const CudaForwardOptions&) {
  return absl::FailedPreconditionError(
      "the CUDA decoder is not in this build (configure with -DKVTIER_CUDA=ON)");
}

}  // namespace kvtier::decoder
