// kvtier._native.Client: connect, buffers, lookup, delete, prefetch and the
// operator calls. Data-moving calls are in client_data.cc, lookup_batch in
// client_lookup.cc, lookup_async in lookup_async.cc, CUDA tensor registration
// in device.cc.
#include "client.h"

#include "absl/strings/str_cat.h"
#include "buffers.h"
#include "client/wire_calls.h"
#include "kvtier.pb.h"
#include "lookup_async.h"

namespace kvtier::py {
namespace {

using std::chrono::milliseconds;

milliseconds Millis(int64_t ms, const char* what) {
  if (ms < 0) throw py::value_error(absl::StrCat(what, " must be >= 0, got ", ms));
  return milliseconds(ms);
}

void BindResults(py::module_& m) {
  py::class_<PyLookupResult>(m, "LookupResult")
      .def_readonly("hits", &PyLookupResult::hits)
      .def_readonly("tiers", &PyLookupResult::tiers)
      .def_readonly("prefetching", &PyLookupResult::prefetching)
      .def_readonly("leased", &PyLookupResult::leased)
      .def("__repr__", [](const PyLookupResult& r) {
        return absl::StrCat("LookupResult(hits=", r.hits,
                            ", tiers=", std::string(py::repr(r.tiers)),
                            ", prefetching=", r.prefetching, ", leased=", r.leased, ")");
      });
  py::class_<PutResult>(m, "PutResult")
      .def_readonly("stored", &PutResult::stored)
      .def_readonly("deduplicated", &PutResult::deduplicated)
      .def_readonly("not_stored", &PutResult::not_stored)
      .def_readonly("not_stored_reason", &PutResult::not_stored_reason)
      // Per key: "stored", "deduplicated", "no_room", "not_durable",
      // "other_put_failed" (empty from an older daemon).
      .def_property_readonly("page_status",
                             [](const PutResult& r) {
                               static const char* kNames[] = {"stored", "deduplicated", "no_room",
                                                              "not_durable", "other_put_failed"};
                               std::vector<std::string> out;
                               for (PutPageStatus s : r.pages)
                                 out.push_back(kNames[static_cast<int>(s)]);
                               return out;
                             })
      .def_readonly("leading_kept", &PutResult::leading_kept)
      .def("__repr__", [](const PutResult& r) {
        return absl::StrCat("PutResult(stored=", r.stored, ", deduplicated=", r.deduplicated,
                            ", not_stored=", r.not_stored, ", leading_kept=", r.leading_kept,
                            ", not_stored_reason='", r.not_stored_reason, "')");
      });
  py::class_<PrefetchResult>(m, "PrefetchResult")
      .def_readonly("queued", &PrefetchResult::queued)
      .def_readonly("merged", &PrefetchResult::merged)
      .def_readonly("resident", &PrefetchResult::resident)
      .def_readonly("missing", &PrefetchResult::missing)
      .def_readonly("rejected", &PrefetchResult::rejected)
      .def("__repr__", [](const PrefetchResult& r) {
        return absl::StrCat("PrefetchResult(queued=", r.queued, ", merged=", r.merged,
                            ", resident=", r.resident, ", missing=", r.missing,
                            ", rejected=", r.rejected, ")");
      });
}

BufferId RegisterShm(PyClient& c, const py::object& buf) {
  if (!py::isinstance<PyShmBuffer>(buf))
    throw py::type_error(absl::StrCat(
        "register() takes a kvtier.ShmBuffer, got ",
        std::string(py::str(buf.get_type().attr("__name__"))),
        " (allocate the arena with kvtier.ShmBuffer(size), or use register_tensor for a "
        "CUDA tensor)"));
  const PyShmBuffer& b = buf.cast<const PyShmBuffer&>();
  // By fd where the daemon takes fds (any daemon user), else by name.
  const ShmBuffer& shm = b.buffer();
  BufferId id = Check(c.Call("register", [&](Client& cl) { return cl.RegisterBuffer(shm); }));
  c.Keep(id, buf);
  return id;
}

}  // namespace

PyClient::PyClient(const py::object& endpoint, const std::string& tenant, const std::string& token,
                   const py::object& layout, int64_t timeout_ms, const std::string& client_name,
                   const py::object& curve_keys) {
  options_.endpoint = endpoint.is_none() ? std::string() : endpoint.cast<std::string>();
  options_.tenant = tenant;
  if (!curve_keys.is_none()) {
    auto keys = curve_keys.cast<std::vector<std::string>>();
    if (keys.size() != 3)
      throw py::value_error(
          "curve_keys must be (daemon public key, tenant public key, tenant secret key), Z85");
    options_.curve_server_key = keys[0];
    options_.curve_public_key = keys[1];
    options_.curve_secret_key = keys[2];
  }
  options_.token = token;
  if (!layout.is_none()) {
    if (!py::isinstance<Layout>(layout))
      throw py::type_error("layout must be a kvtier.Layout or None");
    options_.layout = layout.cast<Layout>();
  }
  options_.client_name = client_name.empty() ? "python" : client_name;
  options_.timeout = Millis(timeout_ms, "timeout_ms");
  absl::StatusOr<std::unique_ptr<Client>> c;
  {
    py::gil_scoped_release nogil;
    c = Client::Connect(options_);
  }
  client_ = Check(std::move(c));
  namespace_ = client_->namespace_name();
  page_bytes_ = client_->page_bytes();
  layout_id_ = client_->layout_id();
}

PyClient::~PyClient() {
  if (closed_) return;
  if (_Py_IsFinalizing()) {
    // At interpreter exit the GIL must not be released: close in place.
    closed_ = true;
    async_.reset();
    client_.reset();
    return;
  }
  CloseSession();  // pybind11 destroys holders with the GIL held; the BYE may wait
}

void PyClient::Forget(BufferId id) {
  kept_.erase(id);
  for (auto it = device_regs_.begin(); it != device_regs_.end();)
    it = it->second.id == id ? device_regs_.erase(it) : std::next(it);
}

AsyncLookups& PyClient::async() {
  if (closed_) ThrowStatus(absl::FailedPreconditionError("kvtier.Client is closed"));
  if (!async_) async_ = std::make_unique<AsyncLookups>(options_);
  return *async_;
}

void PyClient::RefuseReentry(const char* method) const {
  if (busy_.op == nullptr || busy_.thread != std::this_thread::get_id()) return;
  ThrowStatus(absl::FailedPreconditionError(absl::StrCat(
      "kvtier.Client.", method, "() called from inside an ", busy_.callback,
      " callback of the same client: the client is busy with ", busy_.op, "; call it after ",
      busy_.op, " returns")));
}

PyClient::CallbackScope::CallbackScope(PyClient& c, const char* op, const char* callback)
    : c_(c) {
  c_.busy_ = Busy{std::this_thread::get_id(), op, callback};
}

PyClient::CallbackScope::~CallbackScope() { c_.busy_ = Busy{}; }

void PyClient::Close() {
  // Before anything changes: refused, the client stays open and usable.
  RefuseReentry("close");
  CloseSession();
}

void PyClient::CloseSession() {
  if (closed_) return;
  closed_ = true;
  std::unique_ptr<AsyncLookups> async = std::move(async_);
  {
    py::gil_scoped_release nogil;
    async.reset();  // joins its worker, failing pending futures
    std::lock_guard<std::mutex> lock(mu_);
    client_.reset();  // BYE: the daemon drops the session's registrations
  }
  kept_.clear();
  device_regs_.clear();
}

PyLookupResult ToPy(const LookupResult& r) {
  return PyLookupResult{r.hits, TierList(r.tiers), r.prefetching, r.leased};
}

void BindClient(py::module_& m) {
  BindResults(m);
  py::class_<PyClient> c(m, "Client");
  c.def(py::init<const py::object&, const std::string&, const std::string&, const py::object&,
                 int64_t, const std::string&, const py::object&>(),
        py::arg("endpoint") = py::none(), py::arg("tenant") = "default", py::arg("token") = "",
        py::arg("layout") = py::none(), py::arg("timeout_ms") = 10000, py::arg("client_name") = "",
        py::arg("curve_keys") = py::none())
      .def_property_readonly("namespace", &PyClient::namespace_name)
      .def_property_readonly("page_bytes", &PyClient::page_bytes)
      .def_property_readonly("layout_id", &PyClient::layout_id)
      .def_property_readonly("closed", &PyClient::closed)
      .def_property_readonly("endpoint", [](const PyClient& c) { return c.options().endpoint; })
      .def("close", &PyClient::Close)
      .def("register", &RegisterShm, py::arg("buffer"))
      .def(
          "unregister",
          [](PyClient& c, int64_t buffer_id) {
            BufferId id = CheckedBufferId(buffer_id);
            Check(c.Call("unregister", [&](Client& cl) { return cl.UnregisterBuffer(id); }));
            c.Forget(id);
          },
          py::arg("buffer_id"))
      .def(
          "lookup",
          [](PyClient& c, const py::handle& keys, int64_t lease_ms) {
            std::vector<PageKey> k = ParseKeys(keys);
            LookupOptions o{.lease = Millis(lease_ms, "lease_ms")};
            return ToPy(Check(c.Call("lookup", [&](Client& cl) { return cl.Lookup(k, o); })));
          },
          py::arg("keys"), py::arg("lease_ms") = 0)
      .def(
          "delete",
          [](PyClient& c, const py::handle& keys) {
            std::vector<PageKey> k = ParseKeys(keys);
            return Check(c.Call("delete", [&](Client& cl) { return cl.Delete(k); }));
          },
          py::arg("keys"))
      .def(
          "prefetch",
          [](PyClient& c, const py::handle& keys, const py::handle& target, int32_t priority,
             int64_t deadline_ms, int64_t lease_ms) {
            std::vector<PageKey> k = ParseKeys(keys);
            PrefetchOptions o{.target = ParseTier(target, false, "target"),
                              .priority = priority,
                              .deadline = Millis(deadline_ms, "deadline_ms"),
                              .lease = Millis(lease_ms, "lease_ms")};
            return Check(c.Call("prefetch", [&](Client& cl) { return cl.Prefetch(k, o); }));
          },
          py::arg("keys"), py::arg("target") = "host", py::arg("priority") = 0,
          py::arg("deadline_ms") = 0, py::arg("lease_ms") = 0)
      .def("stats",
           [](PyClient& c) {
             return MessageToDict(Check(c.Call("stats", [](Client& cl) { return WireStats(cl); })));
           })
      .def("ping",
           [](PyClient& c) {
             return MessageToDict(Check(c.Call("ping", [](Client& cl) { return WirePing(cl); })));
           })
      .def("tenants",
           [](PyClient& c) {
             return MessageToDict(
                 Check(c.Call("tenants", [](Client& cl) { return WireTenants(cl); })));
           })
      .def(
          "evict",
          [](PyClient& c, const std::string& ns, const py::handle& tier, int64_t pages) {
            TierKind t = ParseTier(tier, true, "tier");
            if (pages < 0) throw py::value_error("pages must be >= 0 (0: all)");
            auto r = Check(
                c.Call("evict", [&](Client& cl) { return cl.Evict(ns, t, uint64_t(pages)); }));
            py::dict d;
            d["evicted"] = r.evicted;
            d["remaining"] = r.remaining;
            return d;
          },
          py::arg("namespace") = "", py::arg("tier") = py::none(), py::arg("pages") = 0)
      .def("flush", [](PyClient& c) {
        auto r = Check(c.Call("flush", [](Client& cl) { return cl.Flush(); }));
        py::dict d;
        d["flushed"] = r.flushed;
        d["not_flushed"] = r.not_flushed;
        return d;
      });
  BindClientData(c);
  BindLookupBatch(c);
  BindAsyncMethods(m, c);
  BindDeviceMethods(c);
}

}  // namespace kvtier::py
