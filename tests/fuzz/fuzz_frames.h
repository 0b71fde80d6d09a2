// How a fuzzer input becomes a multipart ZeroMQ message, shared by the
// fuzz target and the seed-corpus generator so seeds are well-formed:
//   byte 0: (frames - 1) in the low two bits (1-4 frames; other bits ignored)
//   then, for every frame but the last, its length as 2 bytes little-endian
//   (cut to what remains), then the frames' bytes; the last frame is the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kvtier::fuzz {

inline std::vector<absl::string_view> SplitFrames(const uint8_t* data, size_t size) {
  std::vector<absl::string_view> frames;
  if (size == 0) return frames;
  size_t n = 1 + (data[0] & 3);
  size_t pos = 1;
  std::vector<size_t> lens;
  for (size_t i = 0; i + 1 < n; ++i) {
    size_t len = 0;
    if (pos + 2 <= size) len = data[pos] | (size_t(data[pos + 1]) << 8), pos += 2;
    else pos = size;
    lens.push_back(len);
  }
  const char* p = reinterpret_cast<const char*>(data);
  for (size_t len : lens) {
    len = std::min(len, size - pos);
    frames.emplace_back(p + pos, len);
    pos += len;
  }
  frames.emplace_back(p + pos, size - pos);
  return frames;
}

// The inverse, for seeds: frames (1-4, all but the last < 64 KiB) to bytes.
inline std::string JoinFrames(const std::vector<std::string>& frames) {
  std::string out(1, static_cast<char>(frames.size() - 1));
  for (size_t i = 0; i + 1 < frames.size(); ++i) {
    out.push_back(static_cast<char>(frames[i].size() & 0xff));
    out.push_back(static_cast<char>(frames[i].size() >> 8));
  }
  for (const std::string& f : frames) out += f;
  return out;
}

}  // namespace kvtier::fuzz
