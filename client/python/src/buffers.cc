// kvtier.ShmBuffer: the writable 1-D byte buffer behind numpy.frombuffer and
// torch.frombuffer views. A view holds a reference to the ShmBuffer (the
// buffer protocol's view->obj), so the mapping outlives every view of it.
#include "buffers.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace kvtier::py {
namespace {

// start address -> the live PyShmBuffer there. Only touched with the GIL held
// (constructor, destructor and lookups all run in Python calls).
std::map<uintptr_t, PyShmBuffer*>& Registry() {
  static auto* r = new std::map<uintptr_t, PyShmBuffer*>();
  return *r;
}

}  // namespace

PyShmBuffer::PyShmBuffer(uint64_t size, const std::string& name) {
  absl::StatusOr<std::unique_ptr<ShmBuffer>> b;
  {
    py::gil_scoped_release nogil;
    b = ShmBuffer::Create(size, name);
  }
  buf_ = Check(std::move(b));
  Registry()[reinterpret_cast<uintptr_t>(buf_->data())] = this;
}

PyShmBuffer::PyShmBuffer(std::unique_ptr<ShmBuffer> buf) : buf_(std::move(buf)) {
  Registry()[reinterpret_cast<uintptr_t>(buf_->data())] = this;
}

PyShmBuffer::~PyShmBuffer() { Registry().erase(reinterpret_cast<uintptr_t>(buf_->data())); }

py::object FindShmBuffer(uintptr_t address, uint64_t size) {
  auto& r = Registry();
  auto it = r.upper_bound(address);
  if (it == r.begin()) return py::none();
  --it;
  uintptr_t start = it->first;
  uint64_t len = it->second->size();
  if (address < start || address - start > len || size > len - (address - start)) return py::none();
  // The pybind11 wrapper that owns this C++ object.
  py::handle h =
      py::detail::get_object_handle(it->second, py::detail::get_type_info(typeid(PyShmBuffer)));
  if (!h) return py::none();
  return py::reinterpret_borrow<py::object>(h);
}

void BindBuffers(py::module_& m) {
  py::class_<PyShmBuffer>(m, "ShmBuffer", py::buffer_protocol(),
                          "A POSIX shared-memory arena to register with kvtierd. Supports the "
                          "buffer protocol (writable bytes): numpy/torch.frombuffer view it "
                          "without a copy. Unlinked and unmapped when the last reference (views "
                          "included) goes.")
      .def(py::init([](int64_t size, const py::object& name) {
             if (size <= 0)
               throw py::value_error(absl::StrCat("ShmBuffer size must be > 0, got ", size));
             std::string n = name.is_none() ? std::string() : name.cast<std::string>();
             return std::make_unique<PyShmBuffer>(static_cast<uint64_t>(size), n);
           }),
           py::arg("size"), py::arg("name") = py::none())
      .def_static(
          "share",
          [](const py::sequence& regions) {
            std::vector<ShmBuffer::Region> rs;
            for (py::handle r : regions) {
              auto pair = r.cast<std::pair<uint64_t, uint64_t>>();
              rs.push_back({reinterpret_cast<const void*>(pair.first), pair.second});
            }
            std::vector<ShmBuffer::SharedRange> shared;
            absl::StatusOr<std::unique_ptr<ShmBuffer>> b;
            {
              py::gil_scoped_release nogil;
              b = ShmBuffer::Share(rs, &shared);
            }
            auto buf = std::make_unique<PyShmBuffer>(Check(std::move(b)));
            py::list ranges;
            for (const auto& s : shared) ranges.append(py::make_tuple(s.address, s.size, s.offset));
            return py::make_tuple(std::move(buf), ranges);
          },
          py::arg("regions"),
          "Makes memory this process already holds registrable in place: regions is "
          "[(address, size), ...] (e.g. an engine's KV tensors). The whole pages inside each "
          "are copied into a new shared-memory object mapped over them at the same addresses. "
          "Returns (ShmBuffer, [(address, size, offset), ...]): per region, the shared bytes and "
          "where they are in the buffer (size 0: no whole page). Call before other threads "
          "write the regions.")
      .def_static(
          "unshare",
          [](const py::sequence& ranges) {
            std::vector<ShmBuffer::SharedRange> rs;
            for (py::handle r : ranges) {
              auto t = r.cast<std::tuple<uint64_t, uint64_t, uint64_t>>();
              rs.push_back({std::get<0>(t), std::get<1>(t), std::get<2>(t)});
            }
            absl::Status st;
            {
              py::gil_scoped_release nogil;
              st = ShmBuffer::Unshare(rs);
            }
            Check(st);
          },
          py::arg("ranges"),
          "Undoes share(): the ranges it returned become private memory again, same bytes. "
          "Call once the daemon no longer uses the buffer (unregistered) and before the memory "
          "is freed.")
      .def_property_readonly("name", &PyShmBuffer::name)
      .def_property_readonly("size", &PyShmBuffer::size)
      .def_property_readonly(
          "address", [](const PyShmBuffer& b) { return reinterpret_cast<uintptr_t>(b.data()); })
      .def("__len__", &PyShmBuffer::size)
      .def("__repr__",
           [](const PyShmBuffer& b) {
             return absl::StrCat("kvtier.ShmBuffer(name='", b.name(), "', size=", b.size(), ")");
           })
      .def_buffer([](PyShmBuffer& b) {
        return py::buffer_info(b.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.size())}, {py::ssize_t{1}},
                               /*readonly=*/false);
      });
  m.def(
      "_find_shm_buffer",
      [](uintptr_t address, uint64_t size) { return FindShmBuffer(address, size); },
      py::arg("address"), py::arg("size"));
}

}  // namespace kvtier::py
