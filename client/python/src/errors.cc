// absl::Status -> kvtier.Error subclasses (defined in kvtier/errors.py, so the
// hierarchy lives in one place), plus tier and layout conversions that raise.
#include <string>

#include "absl/strings/str_cat.h"
#include "common.h"

namespace kvtier::py {

void ThrowStatus(const absl::Status& status) {
  py::object make = py::module_::import("kvtier.errors").attr("_from_status");
  py::object exc = make(static_cast<int>(status.code()), std::string(status.message()));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

py::object TierObject(TierKind t) {
  // Interned once and never freed (a LOOKUP returns up to thousands of them;
  // leaking avoids destroying Python objects after the interpreter is gone).
  static PyObject* const names[] = {PyUnicode_InternFromString("hbm"),
                                    PyUnicode_InternFromString("host"),
                                    PyUnicode_InternFromString("nvme"),
                                    PyUnicode_InternFromString("remote")};
  switch (t) {
    case TierKind::kHbm:
      return py::reinterpret_borrow<py::object>(names[0]);
    case TierKind::kHost:
      return py::reinterpret_borrow<py::object>(names[1]);
    case TierKind::kNvme:
      return py::reinterpret_borrow<py::object>(names[2]);
    case TierKind::kRemote:
      return py::reinterpret_borrow<py::object>(names[3]);
    case TierKind::kNone:
      break;
  }
  return py::none();
}

py::list TierList(const std::vector<TierKind>& tiers) {
  py::list out(tiers.size());
  for (size_t i = 0; i < tiers.size(); ++i) out[i] = TierObject(tiers[i]);
  return out;
}

TierKind ParseTier(const py::handle& name, bool allow_none, const char* what) {
  if (name.is_none()) {
    if (allow_none) return TierKind::kNone;
    throw py::value_error(
        absl::StrCat(what, " must be 'hbm', 'host', 'nvme' or 'remote', not None"));
  }
  if (!py::isinstance<py::str>(name))
    throw py::type_error(absl::StrCat(what, " must be a str ('hbm', 'host', 'nvme' or 'remote')"));
  std::string s = name.cast<std::string>();
  if (s == "hbm") return TierKind::kHbm;
  if (s == "host") return TierKind::kHost;
  if (s == "nvme") return TierKind::kNvme;
  if (s == "remote") return TierKind::kRemote;
  throw py::value_error(
      absl::StrCat(what, " must be 'hbm', 'host', 'nvme' or 'remote', not '", s, "'"));
}

BufferId CheckedBufferId(int64_t id) {
  if (id < 0 || id > int64_t{UINT32_MAX})
    throw py::value_error(absl::StrCat("buffer_id ", id, " is not a registered buffer id"));
  return static_cast<BufferId>(id);
}

Layout MakeLayout(uint32_t layers, uint32_t kv_heads, uint32_t head_dim, uint32_t tokens_per_page,
                  const std::string& dtype) {
  auto d = ParseDtype(dtype);
  if (!d.ok()) throw py::value_error(std::string(d.status().message()));
  Layout l{.layers = layers,
           .kv_heads = kv_heads,
           .head_dim = head_dim,
           .tokens_per_page = tokens_per_page,
           .dtype = *d};
  if (absl::Status st = l.Validate(); !st.ok()) throw py::value_error(std::string(st.message()));
  return l;
}

void BindErrors(py::module_& m) {
  // Lets tests and callers turn a status code into the exception directly.
  m.def("_raise_status", [](int code, const std::string& message) {
    ThrowStatus(absl::Status(static_cast<absl::StatusCode>(code), message));
  });
}

}  // namespace kvtier::py
