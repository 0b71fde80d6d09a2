// kvtier.ShmBuffer for Python: a client-owned POSIX shared-memory arena with
// the buffer protocol, so numpy/torch views are the registered memory itself.
#pragma once

#include <memory>

#include "common.h"
#include "kvtier/shm_buffer.h"

namespace kvtier::py {

class PyShmBuffer {
 public:
  PyShmBuffer(uint64_t size, const std::string& name);
  explicit PyShmBuffer(std::unique_ptr<ShmBuffer> buf);
  ~PyShmBuffer();
  uint8_t* data() const { return buf_->data(); }
  uint64_t size() const { return buf_->size(); }
  const std::string& name() const { return buf_->name(); }
  const ShmBuffer& buffer() const { return *buf_; }

 private:
  std::unique_ptr<ShmBuffer> buf_;
};

// The live ShmBuffer (a Python object) whose memory holds [address,
// address+size), or None. Lets register_tensor() find the buffer a CPU tensor
// views. Needs the GIL (the registry is guarded by it).
py::object FindShmBuffer(uintptr_t address, uint64_t size);

}  // namespace kvtier::py
