// safetensors reading (mmap + up-front validation) and writing, with the
// fp16/bf16 <-> fp32 element conversions the loader needs.
#include "kvtier/decoder/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace kvtier::decoder {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

uint64_t ElemBytes(TensorDtype d) { return d == TensorDtype::kF32 ? 4 : 2; }

// Element bytes of the safetensors dtypes the reader does not convert; 0
// for a name it does not know (its byte span is then only bounds-checked).
uint64_t OtherElemBytes(const std::string& dtype) {
  static const std::map<std::string, uint64_t> kBytes = {
      {"F64", 8}, {"I64", 8}, {"U64", 8}, {"I32", 4}, {"U32", 4}, {"I16", 2}, {"U16", 2},
      {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  auto it = kBytes.find(dtype);
  return it == kBytes.end() ? 0 : it->second;
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Parses one header entry; `data_bytes` is the size of the data section.
absl::StatusOr<TensorInfo> ParseEntry(const std::string& name, const json& e, uint64_t data_bytes) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\": ", why));
  };
  if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
    return bad("entry needs dtype, shape and data_offsets");
  if (!e["dtype"].is_string()) return bad("dtype is not a string");
  TensorInfo t;
  t.dtype_name = e["dtype"].get<std::string>();
  auto dtype = ParseTensorDtype(t.dtype_name);
  t.supported = dtype.ok();
  if (t.supported) t.dtype = *dtype;
  if (!e["shape"].is_array()) return bad("shape is not an array");
  for (const json& d : e["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) return bad("shape has a non-integer or negative dim");
    t.shape.push_back(d.get<int64_t>());
  }
  const json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    return bad("data_offsets must be [begin, end]");
  t.begin = off[0].get<uint64_t>();
  t.end = off[1].get<uint64_t>();
  if (t.end < t.begin) return bad("data_offsets end before begin");
  const uint64_t elem = t.supported ? ElemBytes(t.dtype) : OtherElemBytes(t.dtype_name);
  uint64_t want = uint64_t(t.NumElements()) * elem;
  if (elem != 0 && t.end - t.begin != want)
    return bad(absl::StrCat("data_offsets span ", t.end - t.begin, " bytes but shape ",
                            ShapeString(t.shape), " of ", t.dtype_name, " needs ", want));
  if (t.end > data_bytes)
    return bad(absl::StrCat("data runs to byte ", t.end, " but the file's data section has only ",
                            data_bytes, " (truncated file?)"));
  return t;
}

}  // namespace

absl::string_view TensorDtypeName(TensorDtype d) {
  switch (d) {
    case TensorDtype::kF32: return "F32";
    case TensorDtype::kF16: return "F16";
    case TensorDtype::kBF16: return "BF16";
  }
  return "?";
}

absl::StatusOr<TensorDtype> ParseTensorDtype(absl::string_view name) {
  if (name == "F32") return TensorDtype::kF32;
  if (name == "F16") return TensorDtype::kF16;
  if (name == "BF16") return TensorDtype::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("dtype \"", name, "\" is not supported (F32, F16, BF16)"));
}

int64_t TensorInfo::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(float(man), -24);  // subnormal (or zero)
  } else if (exp == 31) {
    v = man ? NAN : INFINITY;
  } else {
    v = std::ldexp(float(man | 0x400), int(exp) - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits |= sign;
  std::memcpy(&v, &bits, 4);
  return v;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = uint16_t((x >> 16) & 0x8000);
  float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;                 // overflows to inf
  if (a < 6.103515625e-05f) {                              // subnormal half
    return sign | uint16_t(std::nearbyint(a * 16777216.0f));  // 2^24, ties to even
  }
  uint32_t ax = x & 0x7fffffff;
  uint32_t exp = (ax >> 23) - 112, man = ax & 0x7fffff;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // carries into exp correctly
  return sign | uint16_t(h);
}

float Bf16ToFloat(uint16_t b) {
  uint32_t x = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return uint16_t((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  struct stat st;
  fstat(fd, &st);
  uint64_t size = uint64_t(st.st_size);
  if (size < 8) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": truncated header: file is ", size, " bytes, less than the 8-byte length"));
  }
  void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) return absl::InternalError(absl::StrCat(path, ": mmap: ", std::strerror(errno)));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->map_ = static_cast<const uint8_t*>(m);
  f->map_size_ = size;
  uint64_t n = 0;
  std::memcpy(&n, f->map_, 8);  // little-endian hosts only (x86-64, arm64)
  if (n > kMaxHeaderBytes || n > size - 8)
    return absl::InvalidArgumentError(absl::StrCat(path, ": truncated header: header length ", n,
                                                   " but the file has ", size - 8, " bytes after it"));
  const char* h = reinterpret_cast<const char*>(f->map_ + 8);
  json j = json::parse(h, h + n, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return absl::InvalidArgumentError(absl::StrCat(path, ": header is not a JSON object"));
  f->data_ = f->map_ + 8 + n;
  uint64_t data_bytes = size - 8 - n;
  for (auto& [name, e] : j.items()) {
    if (name == "__metadata__") continue;
    auto t = ParseEntry(name, e, data_bytes);
    if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", t.status().message()));
    f->tensors_.emplace(name, *std::move(t));
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(const_cast<uint8_t*>(map_), map_size_);
}

const TensorInfo* SafetensorsFile::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::Status SafetensorsFile::ReadF32(const std::string& name, absl::Span<const int64_t> expected_shape,
                                      std::vector<float>* out) const {
  const TensorInfo* t = Find(name);
  if (!t) return absl::NotFoundError(absl::StrCat(path_, ": missing tensor \"", name, "\""));
  if (!std::equal(t->shape.begin(), t->shape.end(), expected_shape.begin(), expected_shape.end()))
    return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor \"", name, "\" has shape ",
                                                   ShapeString(t->shape), ", expected ",
                                                   ShapeString(expected_shape)));
  if (!t->supported)
    return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor \"", name, "\" has dtype ",
                                                   t->dtype_name, "; the decoder reads F32, F16 or BF16"));
  const size_t n = size_t(t->NumElements());
  out->resize(n);
  const uint8_t* src = data_ + t->begin;
  if (t->dtype == TensorDtype::kF32) {
    std::memcpy(out->data(), src, n * 4);
    return absl::OkStatus();
  }
  const bool bf16 = t->dtype == TensorDtype::kBF16;
  for (size_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, src + 2 * i, 2);
    (*out)[i] = bf16 ? Bf16ToFloat(v) : HalfToFloat(v);
  }
  return absl::OkStatus();
}

absl::Status WriteSafetensors(const std::string& path, absl::Span<const TensorToWrite> tensors,
                              TensorDtype dtype) {
  json header = json::object();
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    uint64_t bytes = uint64_t(n) * ElemBytes(dtype);
    header[t.name] = {{"dtype", TensorDtypeName(dtype)}, {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  header["__metadata__"] = {{"format", "pt"}, {"writer", "kvtier-make-checkpoint"}};
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(tmp, ": cannot create"));
  uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), std::streamsize(h.size()));
  std::vector<uint16_t> half;
  for (const TensorToWrite& t : tensors) {
    int64_t count = 1;
    for (int64_t d : t.shape) count *= d;
    if (dtype == TensorDtype::kF32) {
      out.write(reinterpret_cast<const char*>(t.data), std::streamsize(count * 4));
      continue;
    }
    half.resize(size_t(count));
    for (int64_t i = 0; i < count; ++i)
      half[size_t(i)] = dtype == TensorDtype::kBF16 ? FloatToBf16(t.data[i]) : FloatToHalf(t.data[i]);
    out.write(reinterpret_cast<const char*>(half.data()), std::streamsize(count * 2));
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(tmp, ": write failed"));
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("rename ", tmp, " -> ", path, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace kvtier::decoder
