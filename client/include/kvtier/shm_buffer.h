// ShmBuffer: a POSIX shared-memory region a client allocates as its KV arena
// and registers with kvtierd. Owns the mapping and the descriptor; unlinks
// the name on destruction. Not thread-safe to create/destroy; the bytes are the caller's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kvtier {

class ShmBuffer {
 public:
  // Creates "/kvtier-client-<pid>-<n>" (or `name`) of `size` bytes, mode 0600.
  static absl::StatusOr<std::unique_ptr<ShmBuffer>> Create(uint64_t size, std::string name = "");
  ~ShmBuffer();
  ShmBuffer(const ShmBuffer&) = delete;
  ShmBuffer& operator=(const ShmBuffer&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // The object's descriptor, kept open so the buffer can be handed to the
  // daemon by fd (Client::RegisterBuffer); close-on-exec.
  int fd() const { return fd_; }

 private:
  ShmBuffer(std::string name, int fd, uint8_t* data, uint64_t size)
      : name_(std::move(name)), fd_(fd), data_(data), size_(size) {}
  std::string name_;
  int fd_;
  uint8_t* data_;
  uint64_t size_;
};

}  // namespace kvtier
