// Reader and writer for the safetensors format (8-byte little-endian header
// length, a JSON header of {name: {dtype, shape, data_offsets}}, then the
// bytes). The reader memory-maps the file and validates every entry up front,
// so a malformed file fails at Open with the file and tensor named.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kvtier::decoder {

enum class TensorDtype { kF32, kF16, kBF16 };
absl::string_view TensorDtypeName(TensorDtype d);  // "F32", "F16", "BF16"
absl::StatusOr<TensorDtype> ParseTensorDtype(absl::string_view name);

struct TensorInfo {
  // A tensor of another dtype (I64 position_ids, F64 buffers, ...) is kept
  // with supported = false: a checkpoint may carry tensors the model never
  // reads, and only reading one is an error.
  TensorDtype dtype = TensorDtype::kF32;
  bool supported = true;
  std::string dtype_name;  // as the header spells it
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // offsets into the data section
  uint64_t end = 0;
  int64_t NumElements() const;
};

class SafetensorsFile {
 public:
  // Maps and validates `path`. Errors name the file and the problem:
  // truncated header, bad JSON, data offsets that do not match the shape
  // (for every dtype whose element size is known) or run past the end of the
  // file. Tensors of dtypes the reader cannot convert are listed, not refused.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* Find(const std::string& name) const;
  // Converts tensor `name` to fp32 into `out` (resized). Fails when it is
  // missing, its shape differs from `expected_shape`, or its dtype is not
  // F32, F16 or BF16.
  absl::Status ReadF32(const std::string& name, absl::Span<const int64_t> expected_shape,
                       std::vector<float>* out) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  const uint8_t* map_ = nullptr;
  uint64_t map_size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data section
  std::map<std::string, TensorInfo> tensors_;
};

// One tensor to write, given as fp32 and stored as `dtype`.
struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// Writes `tensors` (stored as `dtype`) to `path` atomically (temp + rename).
absl::Status WriteSafetensors(const std::string& path, absl::Span<const TensorToWrite> tensors,
                              TensorDtype dtype);

// Element conversions (round to nearest even on the way down).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float Bf16ToFloat(uint16_t b);
uint16_t FloatToBf16(float f);

}  // namespace kvtier::decoder
