// Shared pieces of the kvtier._native extension: status -> Python exception,
// key and name conversions, and the Bind* entry points each file defines.
// Every blocking call releases the GIL; callers hold it on entry.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvtier/client.h"
#include "kvtier/layout.h"
#include "kvtier/page_key.h"

namespace google::protobuf {
class Message;
}

namespace kvtier::py {

namespace py = pybind11;

// Raises the kvtier.Error subclass named after the status code (kvtier.errors),
// carrying the status message. Needs the GIL.
[[noreturn]] void ThrowStatus(const absl::Status& status);
inline void Check(const absl::Status& status) {
  if (!status.ok()) ThrowStatus(status);
}
template <typename T>
T Check(absl::StatusOr<T>&& v) {
  if (!v.ok()) ThrowStatus(v.status());
  return *std::move(v);
}

// Keys from Python: one bytes-like object of n*16 bytes, or a sequence of
// 16-byte bytes-like objects. ValueError names the offending index, TypeError
// a wrong type. Needs the GIL.
std::vector<PageKey> ParseKeys(const py::handle& keys);
// One 16-byte key, or None -> the zero key (a prompt's first parent).
PageKey ParseKey(const py::handle& key, const char* what);
py::bytes KeyBytes(const PageKey& k);
// Offsets: a sequence of ints >= 0, one per key (ValueError otherwise).
std::vector<uint64_t> ParseOffsets(const py::handle& offsets, size_t n);

// A buffer id from Python (ValueError outside [0, 2^32)).
BufferId CheckedBufferId(int64_t id);

// "hbm" / "host" / "nvme", None for a miss.
py::object TierObject(TierKind t);
py::list TierList(const std::vector<TierKind>& tiers);
// Parses "hbm" / "host" / "nvme" (and, with `allow_none`, None -> kNone).
TierKind ParseTier(const py::handle& name, bool allow_none, const char* what);

// The Python-visible Layout is the C++ struct; this validates and raises.
Layout MakeLayout(uint32_t layers, uint32_t kv_heads, uint32_t head_dim, uint32_t tokens_per_page,
                  const std::string& dtype);

// A protobuf message as a dict (nested messages -> dicts, repeated -> lists,
// enums -> their names, bytes -> bytes).
py::dict MessageToDict(const google::protobuf::Message& m);

void BindErrors(py::module_& m);
void BindKeys(py::module_& m);
void BindBuffers(py::module_& m);
void BindClient(py::module_& m);
void BindDevice(py::module_& m);
void BindKernels(py::module_& m);

}  // namespace kvtier::py
