// Layout, page keys and hashing for Python: kvtier.Layout, page_keys() (the
// C++ chain of api/page_key.h, so keys match the C++ client's byte for byte),
// key/offset parsing shared by the client calls, and xxh3-128 (the hash the
// C++ decoder's model fingerprint uses).
#include <pybind11/numpy.h>
#include <xxhash.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common.h"

namespace kvtier::py {
namespace {

// A contiguous read-only byte view of any bytes-like object (bytes, bytearray,
// memoryview, numpy array, ShmBuffer). Released on destruction.
class ByteView {
 public:
  explicit ByteView(const py::handle& obj) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_SIMPLE) != 0) throw py::error_already_set();
  }
  ~ByteView() { PyBuffer_Release(&view_); }
  const uint8_t* data() const { return static_cast<const uint8_t*>(view_.buf); }
  size_t size() const { return static_cast<size_t>(view_.len); }

 private:
  Py_buffer view_;
};

bool IsBytesLike(const py::handle& h) {
  return PyBytes_Check(h.ptr()) || PyByteArray_Check(h.ptr()) || PyMemoryView_Check(h.ptr());
}

uint32_t CheckedU32(int64_t v, const char* what) {
  if (v < 0 || v > int64_t{UINT32_MAX})
    throw py::value_error(absl::StrCat(what, " must be in [0, 2^32), got ", v));
  return static_cast<uint32_t>(v);
}

// Token ids as uint32: lists, tuples, numpy arrays and CPU tensors of integers.
std::vector<uint32_t> ParseTokens(const py::handle& tokens) {
  py::module_ np = py::module_::import("numpy");
  py::array arr = np.attr("asarray")(tokens);
  if (arr.size() == 0) return {};
  char kind = arr.dtype().kind();
  if (kind != 'i' && kind != 'u')
    throw py::type_error(
        absl::StrCat("token_ids must be integers, got dtype ", std::string(py::str(arr.dtype()))));
  if (arr.ndim() != 1) throw py::value_error("token_ids must be one-dimensional");
  auto ids = py::array_t<int64_t, py::array::forcecast>::ensure(arr);
  if (!ids) throw py::error_already_set();
  std::vector<uint32_t> out(ids.size());
  auto r = ids.unchecked<1>();
  for (py::ssize_t i = 0; i < r.shape(0); ++i) {
    if (r(i) < 0 || r(i) > int64_t{UINT32_MAX})
      throw py::value_error(absl::StrCat("token_ids[", i, "] = ", r(i), " is not a uint32"));
    out[i] = static_cast<uint32_t>(r(i));
  }
  return out;
}

void BindLayout(py::module_& m) {
  py::class_<Layout>(m, "Layout",
                     "The shape of one page (layers, kv_heads, head_dim, "
                     "tokens_per_page, dtype); ValueError when invalid.")
      .def(py::init([](int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t tokens_per_page,
                       const std::string& dtype) {
             return MakeLayout(CheckedU32(layers, "layers"), CheckedU32(kv_heads, "kv_heads"),
                               CheckedU32(head_dim, "head_dim"),
                               CheckedU32(tokens_per_page, "tokens_per_page"), dtype);
           }),
           py::arg("layers"), py::arg("kv_heads"), py::arg("head_dim"),
           py::arg("tokens_per_page") = 256, py::arg("dtype") = "fp16")
      .def_readonly("layers", &Layout::layers)
      .def_readonly("kv_heads", &Layout::kv_heads)
      .def_readonly("head_dim", &Layout::head_dim)
      .def_readonly("tokens_per_page", &Layout::tokens_per_page)
      .def_property_readonly("dtype",
                             [](const Layout& l) { return std::string(DtypeName(l.dtype)); })
      .def_property_readonly("dtype_bytes", [](const Layout& l) { return DtypeBytes(l.dtype); })
      .def_property_readonly("page_bytes", &Layout::PageBytes)
      .def_property_readonly("layer_bytes", &Layout::LayerBytes)
      .def_property_readonly("layout_id", &Layout::Id)
      .def("__eq__", [](const Layout& a, const Layout& b) { return a == b; })
      .def("__hash__", [](const Layout& l) { return py::hash(py::int_(l.Id())); })
      .def("__repr__",
           [](const Layout& l) {
             return absl::StrCat("kvtier.Layout(layers=", l.layers, ", kv_heads=", l.kv_heads,
                                 ", head_dim=", l.head_dim, ", tokens_per_page=", l.tokens_per_page,
                                 ", dtype='", DtypeName(l.dtype), "')");
           })
      .def(py::pickle(
          [](const Layout& l) {
            return py::make_tuple(l.layers, l.kv_heads, l.head_dim, l.tokens_per_page,
                                  std::string(DtypeName(l.dtype)));
          },
          [](const py::tuple& t) {
            return MakeLayout(t[0].cast<uint32_t>(), t[1].cast<uint32_t>(), t[2].cast<uint32_t>(),
                              t[3].cast<uint32_t>(), t[4].cast<std::string>());
          }));
}

// Streaming xxh3-128; digest() is the canonical (big-endian) form, as
// XXH128_canonicalFromHash writes it (the decoder's ModelFingerprint bytes).
class Xxh3 {
 public:
  explicit Xxh3(uint64_t seed) : st_(XXH3_createState(), &XXH3_freeState) {
    if (!st_) throw std::bad_alloc();
    XXH3_128bits_reset_withSeed(st_.get(), seed);
  }
  void Update(const py::handle& data) {
    ByteView v(data);
    py::gil_scoped_release nogil;  // large weights: let other threads run
    XXH3_128bits_update(st_.get(), v.data(), v.size());
  }
  py::bytes Digest() const {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st_.get()));
    return py::bytes(reinterpret_cast<const char*>(c.digest), sizeof(c.digest));
  }

 private:
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> st_;
};

}  // namespace

PageKey ParseKey(const py::handle& key, const char* what) {
  if (key.is_none()) return PageKey::Zero();
  if (!IsBytesLike(key))
    throw py::type_error(absl::StrCat(what, " must be 16 bytes or None, got ",
                                      std::string(py::str(key.get_type().attr("__name__")))));
  ByteView v(key);
  if (v.size() != kPageKeyBytes)
    throw py::value_error(absl::StrCat(what, " must be 16 bytes, got ", v.size()));
  return PageKey::FromBytes(v.data());
}

std::vector<PageKey> ParseKeys(const py::handle& keys) {
  if (IsBytesLike(keys)) {
    ByteView v(keys);
    if (v.size() % kPageKeyBytes != 0)
      throw py::value_error(absl::StrCat("packed keys must be a multiple of 16 bytes, got ",
                                         v.size(), " (key ", v.size() / kPageKeyBytes,
                                         " is cut short)"));
    std::vector<PageKey> out(v.size() / kPageKeyBytes);
    for (size_t i = 0; i < out.size(); ++i) out[i] = PageKey::FromBytes(v.data() + 16 * i);
    return out;
  }
  if (py::isinstance<py::str>(keys) || !PySequence_Check(keys.ptr()))
    throw py::type_error("keys must be bytes (n*16) or a sequence of 16-byte bytes");
  py::sequence seq = py::reinterpret_borrow<py::sequence>(keys);
  std::vector<PageKey> out(seq.size());
  for (size_t i = 0; i < out.size(); ++i) {
    py::object k = seq[i];
    // The usual form (a list of bytes), without taking a buffer view.
    if (PyBytes_Check(k.ptr()) && PyBytes_GET_SIZE(k.ptr()) == kPageKeyBytes) {
      out[i] = PageKey::FromBytes(PyBytes_AS_STRING(k.ptr()));
      continue;
    }
    if (!IsBytesLike(k))
      throw py::type_error(absl::StrCat("keys[", i, "] must be 16 bytes, got ",
                                        std::string(py::str(k.get_type().attr("__name__")))));
    ByteView v(k);
    if (v.size() != kPageKeyBytes)
      throw py::value_error(absl::StrCat("keys[", i, "] must be 16 bytes, got ", v.size()));
    out[i] = PageKey::FromBytes(v.data());
  }
  return out;
}

py::bytes KeyBytes(const PageKey& k) {
  return py::bytes(reinterpret_cast<const char*>(k.bytes.data()), k.bytes.size());
}

std::vector<uint64_t> ParseOffsets(const py::handle& offsets, size_t n) {
  if (py::isinstance<py::str>(offsets) || py::isinstance<py::bytes>(offsets) ||
      !PySequence_Check(offsets.ptr()))
    throw py::type_error("offsets must be a sequence of ints, one per key");
  py::sequence seq = py::reinterpret_borrow<py::sequence>(offsets);
  if (seq.size() != n)
    throw py::value_error(absl::StrCat("got ", seq.size(), " offsets for ", n, " keys"));
  std::vector<uint64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    py::object o = seq[i];
    // numpy integers are index-able; floats and bools are refused.
    if (PyBool_Check(o.ptr()) || !PyIndex_Check(o.ptr()))
      throw py::type_error(absl::StrCat("offsets[", i, "] must be an int"));
    py::int_ v = py::reinterpret_steal<py::int_>(PyNumber_Index(o.ptr()));
    if (!v) throw py::error_already_set();
    long long x = PyLong_AsLongLong(v.ptr());
    if (x == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      throw py::value_error(absl::StrCat("offsets[", i, "] is out of range"));
    }
    if (x < 0) throw py::value_error(absl::StrCat("offsets[", i, "] = ", x, " is negative"));
    out[i] = static_cast<uint64_t>(x);
  }
  return out;
}

void BindKeys(py::module_& m) {
  BindLayout(m);
  m.def(
      "page_keys",
      [](const Layout& layout, const py::handle& tokens, const py::handle& root) {
        std::vector<uint32_t> ids = ParseTokens(tokens);
        PageKey parent = ParseKey(root, "root");
        std::vector<PageKey> keys;
        {
          py::gil_scoped_release nogil;
          keys = DeriveChain(layout.Id(), layout.tokens_per_page, ids, parent);
        }
        py::list out(keys.size());
        for (size_t i = 0; i < keys.size(); ++i) out[i] = KeyBytes(keys[i]);
        return out;
      },
      py::arg("layout"), py::arg("token_ids"), py::arg("root") = py::none(),
      "Keys of every full block of token_ids, chained from root (None: a prompt's start).");
  m.def(
      "pack_keys",
      [](const py::handle& keys) {
        std::vector<PageKey> k = ParseKeys(keys);
        std::string packed = PackKeys(k);
        return py::bytes(packed);
      },
      py::arg("keys"), "Keys (any accepted form) as one bytes object of n*16 bytes.");

  py::class_<Xxh3>(m, "Xxh3_128", "Streaming XXH3-128; digest() is the canonical big-endian form.")
      .def(py::init<uint64_t>(), py::arg("seed") = 0)
      .def(
          "update",
          [](Xxh3& h, const py::handle& d) {
            h.Update(d);
            return &h;
          },
          py::arg("data"), py::return_value_policy::reference_internal)
      .def("digest", &Xxh3::Digest)
      .def("hexdigest", [](const Xxh3& h) { return py::bytes(h.Digest()).attr("hex")(); });
  m.def(
      "xxh3_128",
      [](const py::handle& data, uint64_t seed) {
        Xxh3 h(seed);
        h.Update(data);
        return h.Digest();
      },
      py::arg("data"), py::arg("seed") = 0, "XXH3-128 of a bytes-like object (canonical bytes).");
}

}  // namespace kvtier::py
