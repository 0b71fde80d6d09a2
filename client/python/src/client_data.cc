// The data-moving calls of kvtier._native.Client: get / put (into and out of
// a registered buffer, no copy through Python), get_layers (layer-wise GET
// with a Python callback per layer), and the inline forms (bytes in messages).
#include <optional>

#include "absl/strings/str_cat.h"
#include "buffers.h"
#include "client.h"

namespace kvtier::py {
namespace {

GetOptions ParseGetOptions(const std::string& policy, int64_t timeout_ms) {
  GetOptions o;
  if (policy == "wait") {
    o.policy = GetPolicy::kWaitComplete;
  } else if (policy == "best_effort") {
    o.policy = GetPolicy::kBestEffort;
  } else if (policy == "timeout") {
    o.policy = GetPolicy::kTimeout;
  } else {
    throw py::value_error(
        absl::StrCat("policy must be 'wait', 'best_effort' or 'timeout', not '", policy, "'"));
  }
  if (timeout_ms < 0) throw py::value_error("timeout_ms must be >= 0");
  o.timeout = std::chrono::milliseconds(timeout_ms);
  return o;
}

// page_runs: None, or a sequence of (length, buffer_offset) pairs of ints
// >= 0 (docs/PROTOCOL.md, "Scattered pages"; the daemon checks the rest).
std::vector<PageRun> ParsePageRuns(const py::handle& runs) {
  std::vector<PageRun> out;
  if (runs.is_none()) return out;
  if (py::isinstance<py::str>(runs) || !PySequence_Check(runs.ptr()))
    throw py::type_error("page_runs must be None or a sequence of (length, buffer_offset) pairs");
  py::sequence seq = py::reinterpret_borrow<py::sequence>(runs);
  out.reserve(seq.size());
  for (size_t j = 0; j < seq.size(); ++j) {
    py::object r = seq[j];
    if (!PySequence_Check(r.ptr()) || py::len(r) != 2)
      throw py::type_error(absl::StrCat("page_runs[", j, "] is not a (length, buffer_offset) pair"));
    py::sequence pair = py::reinterpret_borrow<py::sequence>(r);
    int64_t len = py::int_(pair[0]).cast<int64_t>(), at = py::int_(pair[1]).cast<int64_t>();
    if (len <= 0 || at < 0)
      throw py::value_error(absl::StrCat("page_runs[", j, "] = (", len, ", ", at,
                                         "): a length > 0 and a buffer_offset >= 0"));
    out.push_back(PageRun{uint64_t(len), uint64_t(at)});
  }
  return out;
}

// Read-only views of the pages handed to put_inline, held while the GIL is
// released so the bytes cannot move or vanish under the call.
class PageViews {
 public:
  PageViews(const py::handle& pages, size_t n, uint64_t page_bytes) {
    if (py::isinstance<py::str>(pages) || py::isinstance<py::bytes>(pages) ||
        !PySequence_Check(pages.ptr()))
      throw py::type_error("pages must be a sequence of bytes-like objects, one per key");
    py::sequence seq = py::reinterpret_borrow<py::sequence>(pages);
    if (seq.size() != n)
      throw py::value_error(absl::StrCat("got ", seq.size(), " pages for ", n, " keys"));
    views_.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      py::object p = seq[i];
      Py_buffer v;
      if (PyObject_GetBuffer(p.ptr(), &v, PyBUF_SIMPLE) != 0) {
        PyErr_Clear();
        throw py::type_error(absl::StrCat("pages[", i, "] is not bytes-like"));
      }
      views_.push_back(v);
      if (page_bytes != 0 && uint64_t(v.len) != page_bytes)
        throw py::value_error(absl::StrCat("pages[", i, "] is ", v.len,
                                           " bytes; the session's page is ", page_bytes));
      pages_.emplace_back(static_cast<const char*>(v.buf), size_t(v.len));
    }
  }
  absl::Span<const absl::string_view> pages() const { return pages_; }

 private:
  // A member, so the views taken so far are released when the constructor throws.
  struct Views : std::vector<Py_buffer> {
    ~Views() {
      for (Py_buffer& v : *this) PyBuffer_Release(&v);
    }
  };
  Views views_;
  std::vector<absl::string_view> pages_;
};

py::list Get(PyClient& c, const py::handle& keys, int64_t buffer_id, const py::handle& offsets,
             const std::string& policy, int64_t timeout_ms, const py::handle& page_runs) {
  BufferId buffer = CheckedBufferId(buffer_id);
  std::vector<PageKey> k = ParseKeys(keys);
  std::vector<uint64_t> off = ParseOffsets(offsets, k.size());
  GetOptions o = ParseGetOptions(policy, timeout_ms);
  o.page_runs = ParsePageRuns(page_runs);
  return TierList(Check(c.Call("get", [&](Client& cl) { return cl.Get(k, buffer, off, o); })));
}

PutResult Put(PyClient& c, const py::handle& keys, int64_t buffer_id, const py::handle& offsets,
              const py::handle& parent, const py::handle& page_runs) {
  BufferId buffer = CheckedBufferId(buffer_id);
  std::vector<PageKey> k = ParseKeys(keys);
  std::vector<uint64_t> off = ParseOffsets(offsets, k.size());
  PageKey p = ParseKey(parent, "parent");
  PutOptions o{.page_runs = ParsePageRuns(page_runs)};
  return Check(c.Call("put", [&](Client& cl) { return cl.Put(k, p, buffer, off, o); }));
}

// on_layer(l) runs on the calling thread with the GIL taken back for it. An
// exception from it stops further callbacks and is raised once the GET ends
// (the C++ client is not unwound through). It runs under the session's mutex,
// so calls into `c` from it are refused (CallbackScope), never deadlocked.
py::list GetLayers(PyClient& c, const py::handle& keys, int64_t buffer_id,
                   const py::handle& offsets, const py::object& mapping, int64_t progress_offset,
                   const py::object& on_layer, const std::string& policy, int64_t timeout_ms,
                   const py::handle& page_runs) {
  BufferId buffer = CheckedBufferId(buffer_id);
  std::vector<PageKey> k = ParseKeys(keys);
  std::vector<uint64_t> off = ParseOffsets(offsets, k.size());
  GetOptions o = ParseGetOptions(policy, timeout_ms);
  o.page_runs = ParsePageRuns(page_runs);
  if (!py::isinstance<PyShmBuffer>(mapping))
    throw py::type_error("get_layers: buf must be the kvtier.ShmBuffer registered as buffer_id");
  if (progress_offset < 0) throw py::value_error("progress_offset must be >= 0");
  if (!on_layer.is_none() && !PyCallable_Check(on_layer.ptr()))
    throw py::type_error("on_layer must be callable (or None)");
  // The layer counter is read from `buf`: another buffer would never show progress.
  if (py::object kept = c.Kept(buffer); !kept.is_none() && !kept.is(mapping))
    throw py::value_error(
        absl::StrCat("get_layers: buf is not the kvtier.ShmBuffer registered as buffer ", buffer));
  const PyShmBuffer& b = mapping.cast<const PyShmBuffer&>();
  absl::Span<uint8_t> span(b.data(), b.size());
  std::optional<py::error_already_set> failure;
  LayerCallback cb = [&](uint32_t layer) {
    if (on_layer.is_none() || failure) return;
    py::gil_scoped_acquire gil;
    PyClient::CallbackScope busy(c, "get_layers", "on_layer");
    try {
      on_layer(layer);
    } catch (py::error_already_set& e) {
      failure.emplace(std::move(e));
    }
  };
  auto r = c.Call("get_layers", [&](Client& cl) {
    return cl.GetLayers(k, buffer, off, span, uint64_t(progress_offset), cb, o);
  });
  if (failure) throw std::move(*failure);
  return TierList(Check(std::move(r)));
}

py::list GetInline(PyClient& c, const py::handle& keys) {
  std::vector<PageKey> k = ParseKeys(keys);
  auto pages = Check(c.Call("get_inline", [&](Client& cl) { return cl.GetInline(k); }));
  py::list out(pages.size());
  for (size_t i = 0; i < pages.size(); ++i)
    out[i] = pages[i].empty() ? py::object(py::none()) : py::object(py::bytes(pages[i]));
  return out;
}

PutResult PutInline(PyClient& c, const py::handle& keys, const py::handle& pages,
                    const py::handle& parent) {
  std::vector<PageKey> k = ParseKeys(keys);
  PageViews views(pages, k.size(), c.page_bytes());
  PageKey p = ParseKey(parent, "parent");
  return Check(c.Call("put_inline", [&](Client& cl) { return cl.PutInline(k, p, views.pages()); }));
}

}  // namespace

void BindClientData(py::class_<PyClient>& c) {
  c.def("get", &Get, py::arg("keys"), py::arg("buffer_id"), py::arg("offsets"),
        py::arg("policy") = "wait", py::arg("timeout_ms") = 0, py::arg("page_runs") = py::none(),
        "Copies present pages into the registered buffer; each key's tier, None for a miss. "
        "page_runs: [(length, buffer_offset), ...] cuts every page into runs at its offset + "
        "buffer_offset (scattered pages).")
      .def("put", &Put, py::arg("keys"), py::arg("buffer_id"), py::arg("offsets"),
           py::arg("parent") = py::none(), py::arg("page_runs") = py::none(),
           "Stores pages from the registered buffer; keys[0]'s parent is `parent`. page_runs: "
           "as in get.")
      .def("get_layers", &GetLayers, py::arg("keys"), py::arg("buffer_id"), py::arg("offsets"),
           py::arg("buf"), py::arg("progress_offset"), py::arg("on_layer") = py::none(),
           py::arg("policy") = "wait", py::arg("timeout_ms") = 0,
           py::arg("page_runs") = py::none(),
           "Layer-wise GET: on_layer(l) runs as layer l of every hit lands. on_layer must not "
           "call this client (it is busy with the GET): such a call raises FailedPrecondition.")
      .def("get_inline", &GetInline, py::arg("keys"))
      .def("put_inline", &PutInline, py::arg("keys"), py::arg("pages"),
           py::arg("parent") = py::none());
}

}  // namespace kvtier::py
