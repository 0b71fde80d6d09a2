// kvtier._native.Client: one C++ client session behind a mutex (the C++
// Client is not thread-safe), every daemon call made with the GIL released.
// Keeps the Python buffers it registered alive while they are registered.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "common.h"

namespace kvtier::py {

class AsyncLookups;  // lookup_async's worker (lookup_async.h)

class PyClient {
 public:
  // curve_keys: None (PLAIN with tenant and token), or (daemon's public key,
  // the tenant's public key, the tenant's secret key), Z85 strings.
  PyClient(const py::object& endpoint, const std::string& tenant, const std::string& token,
           const py::object& layout, int64_t timeout_ms, const std::string& client_name,
           const py::object& curve_keys);
  ~PyClient();

  // Runs fn(Client&) with the GIL released and the session's mutex held.
  // FailedPrecondition when the client is closed. `method` is the Python
  // method's name: a call from inside one of this client's own callbacks
  // raises FailedPrecondition naming it (RefuseReentry). Needs the GIL on entry.
  template <typename F>
  auto Call(const char* method, F&& fn) -> decltype(fn(std::declval<Client&>())) {
    RefuseReentry(method);
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    if (!client_) return absl::FailedPreconditionError("kvtier.Client is closed");
    return fn(*client_);
  }

  const ClientOptions& options() const { return options_; }
  const std::string& namespace_name() const { return namespace_; }
  uint64_t page_bytes() const { return page_bytes_; }
  uint64_t layout_id() const { return layout_id_; }
  bool closed() const { return closed_; }

  // Registration bookkeeping (GIL held): the object kept alive for `id`.
  void Keep(BufferId id, py::object owner) { kept_[id] = std::move(owner); }
  void Forget(BufferId id);
  // The object registered as `id` by this client, or None.
  py::object Kept(BufferId id) const {
    auto it = kept_.find(id);
    return it == kept_.end() ? py::object(py::none()) : it->second;
  }
  // CUDA registrations by (device, allocation base): see device.cc.
  struct DeviceReg {
    BufferId id;
    uint64_t size;
    std::string handle;
  };
  std::map<std::pair<int, uintptr_t>, DeviceReg>& device_regs() { return device_regs_; }

  AsyncLookups& async();  // created on first use
  // close(): FailedPrecondition from inside one of this client's callbacks.
  void Close();

  // While one lives, this thread runs a Python callback (`callback`, e.g.
  // "on_layer") of this client's `op` (e.g. "get_layers"), which holds the
  // session's mutex: a call into the client from this thread would wait on
  // itself forever, so it raises instead. Other threads are not refused; they
  // wait for the mutex. Create and destroy with the GIL held.
  class CallbackScope {
   public:
    CallbackScope(PyClient& c, const char* op, const char* callback);
    ~CallbackScope();
    CallbackScope(const CallbackScope&) = delete;
    CallbackScope& operator=(const CallbackScope&) = delete;

   private:
    PyClient& c_;
  };

 private:
  // Raises FailedPrecondition when this thread is inside one of this client's
  // callbacks (a CallbackScope). Needs the GIL.
  void RefuseReentry(const char* method) const;
  void CloseSession();  // Close() without the callback check (the destructor)

  ClientOptions options_;
  std::mutex mu_;
  std::unique_ptr<Client> client_;  // null once closed
  std::string namespace_;
  uint64_t page_bytes_ = 0, layout_id_ = 0;
  bool closed_ = false;
  std::map<BufferId, py::object> kept_;
  std::map<std::pair<int, uintptr_t>, DeviceReg> device_regs_;
  std::unique_ptr<AsyncLookups> async_;
  // The callback running now (CallbackScope), guarded by the GIL. At most one:
  // callbacks run under mu_, and a callback cannot start another call.
  struct Busy {
    std::thread::id thread;
    const char* op = nullptr;  // null: no callback is running
    const char* callback = nullptr;
  };
  Busy busy_;
};

// Python-visible results.
struct PyLookupResult {
  uint32_t hits = 0;
  py::list tiers;
  uint32_t prefetching = 0;
  uint32_t leased = 0;
};
PyLookupResult ToPy(const LookupResult& r);
py::list ToPyList(const std::vector<LookupResult>& results);

// lookup_batch's chains, copied out of Python (GIL held) into one array.
struct ParsedChains {
  std::vector<PageKey> keys;   // every chain, one after another
  std::vector<size_t> lengths;  // keys per chain (0 for an empty one)
  // Views of each chain into `keys` (valid while this lives, unmoved).
  std::vector<absl::Span<const PageKey>> Spans() const;
};
// A sequence of chains, each what ParseKeys takes; errors name chains[i].
ParsedChains ParseChains(const py::handle& chains);

void BindClientData(py::class_<PyClient>& c);     // get/put/get_layers/inline (client_data.cc)
void BindDeviceMethods(py::class_<PyClient>& c);  // _register_cuda (device.cc)
void BindLookupBatch(py::class_<PyClient>& c);    // lookup_batch (client_lookup.cc)

}  // namespace kvtier::py
