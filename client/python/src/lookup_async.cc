// lookup_async's worker and kvtier.LookupFuture. The worker connects its own
// session lazily (so lookup_async never waits for a HELLO) and reconnects
// after a failed connect on the next job; it never touches Python objects.
#include "lookup_async.h"

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace kvtier::py {
namespace {

void Finish(LookupJob& job, absl::StatusOr<std::vector<LookupResult>> r) {
  {
    std::lock_guard<std::mutex> lock(job.mu);
    job.result = std::move(r);
    job.done = true;
  }
  job.cv.notify_all();
}

bool IsDone(LookupJob& job) {
  std::lock_guard<std::mutex> lock(job.mu);
  return job.done;
}

// The finished job's result in Python terms (a LookupResult, or a list of
// them for a batch); raises its error.
py::object Result(LookupJob& job) {
  absl::StatusOr<std::vector<LookupResult>> r;
  {
    std::lock_guard<std::mutex> lock(job.mu);
    r = job.result;
  }
  std::vector<LookupResult> results = Check(std::move(r));
  if (job.batch) return ToPyList(results);
  return py::cast(ToPy(results.at(0)));
}

// The LOOKUP a job asks for, on the worker's own session.
absl::StatusOr<std::vector<LookupResult>> RunJob(Client& client, LookupJob& job) {
  if (job.batch) {
    std::vector<absl::Span<const PageKey>> spans = job.chains.Spans();
    return client.LookupBatch(absl::MakeConstSpan(spans), job.options);
  }
  absl::StatusOr<LookupResult> one = client.Lookup(job.keys, job.options);
  if (!one.ok()) return one.status();
  std::vector<LookupResult> out;
  out.push_back(*std::move(one));
  return out;
}

class LookupFuture {
 public:
  explicit LookupFuture(std::shared_ptr<LookupJob> job) : job_(std::move(job)) {}
  bool Done() const { return IsDone(*job_); }
  // None while pending; the result (or its exception) once done.
  py::object Poll() const {
    if (!IsDone(*job_)) return py::none();
    return Result(*job_);
  }
  // Waits (GIL released) up to `timeout` seconds (None: forever).
  py::object Wait(const py::object& timeout) const {
    const bool forever = timeout.is_none();
    const double seconds = forever ? 0.0 : std::max(0.0, timeout.cast<double>());
    bool done;
    {
      py::gil_scoped_release nogil;  // no Python object below this line
      std::unique_lock<std::mutex> lock(job_->mu);
      if (forever) {
        job_->cv.wait(lock, [&] { return job_->done; });
      } else {
        job_->cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return job_->done; });
      }
      done = job_->done;
    }
    if (!done) {
      PyErr_SetString(PyExc_TimeoutError, "kvtier lookup still pending after the timeout");
      throw py::error_already_set();
    }
    return Result(*job_);
  }

 private:
  std::shared_ptr<LookupJob> job_;
};

}  // namespace

AsyncLookups::AsyncLookups(ClientOptions options) : options_(std::move(options)) {
  options_.client_name += "-async";
  worker_ = std::thread([this] { Run(); });
}

AsyncLookups::~AsyncLookups() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void AsyncLookups::Submit(std::shared_ptr<LookupJob> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void AsyncLookups::Run() {
  std::unique_ptr<Client> client;
  for (;;) {
    std::shared_ptr<LookupJob> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) {
        for (auto& j : queue_) Finish(*j, absl::CancelledError("kvtier.Client was closed"));
        queue_.clear();
        return;
      }
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    if (!client) {
      auto c = Client::Connect(options_);
      if (!c.ok()) {
        Finish(*job, c.status());
        continue;
      }
      client = *std::move(c);
    }
    Finish(*job, RunJob(*client, *job));
  }
}

void BindAsyncMethods(py::module_& m, py::class_<PyClient>& c) {
  py::class_<LookupFuture>(m, "LookupFuture",
                           "A LOOKUP in flight: done(), poll() (None while pending) and "
                           "result(timeout=None); never blocks unless result() is called.")
      .def("done", &LookupFuture::Done)
      .def("poll", &LookupFuture::Poll)
      .def("result", &LookupFuture::Wait, py::arg("timeout") = py::none(),
           "The LookupResult (a list of them for lookup_batch_async); raises its error.");
  c.def(
      "lookup_async",
      [](PyClient& self, const py::handle& keys, int64_t lease_ms) {
        if (lease_ms < 0) throw py::value_error("lease_ms must be >= 0");
        auto job = std::make_shared<LookupJob>();
        job->keys = ParseKeys(keys);
        job->options.lease = std::chrono::milliseconds(lease_ms);
        self.async().Submit(job);
        return LookupFuture(std::move(job));
      },
      py::arg("keys"), py::arg("lease_ms") = 0);
  c.def(
      "lookup_batch_async",
      [](PyClient& self, const py::handle& chains, int64_t lease_ms) {
        if (lease_ms < 0) throw py::value_error("lease_ms must be >= 0");
        auto job = std::make_shared<LookupJob>();
        job->batch = true;
        job->chains = ParseChains(chains);
        job->options.lease = std::chrono::milliseconds(lease_ms);
        self.async().Submit(job);
        return LookupFuture(std::move(job));
      },
      py::arg("chains"), py::arg("lease_ms") = 0,
      "lookup_batch without blocking: a LookupFuture whose result() is the list.");
}

}  // namespace kvtier::py
