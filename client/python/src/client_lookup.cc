// kvtier._native.Client.lookup_batch: many chains (a scheduler's waiting
// queue) in one LOOKUP round trip. The chains are copied out of Python into
// one flat key array first, so no Python object is touched without the GIL.
#include "absl/strings/str_cat.h"
#include "client.h"

namespace kvtier::py {
namespace {

std::string TypeName(const py::handle& h) {
  return std::string(py::str(h.get_type().attr("__name__")));
}

// ParseKeys for chains[i], its errors prefixed with the chain's index.
std::vector<PageKey> ParseChain(const py::handle& chain, size_t i) {
  try {
    return ParseKeys(chain);
  } catch (const py::value_error& e) {
    throw py::value_error(absl::StrCat("chains[", i, "]: ", e.what()));
  } catch (const py::type_error& e) {
    throw py::type_error(absl::StrCat("chains[", i, "]: ", e.what()));
  }
}

}  // namespace

std::vector<absl::Span<const PageKey>> ParsedChains::Spans() const {
  std::vector<absl::Span<const PageKey>> spans;
  spans.reserve(lengths.size());
  size_t at = 0;
  for (size_t n : lengths) {
    spans.push_back(absl::MakeConstSpan(keys).subspan(at, n));
    at += n;
  }
  return spans;
}

ParsedChains ParseChains(const py::handle& chains) {
  // bytes is a sequence too (of ints): one packed chain passed by mistake.
  if (py::isinstance<py::str>(chains) || py::isinstance<py::bytes>(chains) ||
      py::isinstance<py::bytearray>(chains) || py::isinstance<py::memoryview>(chains) ||
      !PySequence_Check(chains.ptr()))
    throw py::type_error(absl::StrCat(
        "chains must be a sequence of key chains (each a list of 16-byte keys or packed "
        "bytes), got ", TypeName(chains), "; for one chain use lookup()"));
  py::sequence seq = py::reinterpret_borrow<py::sequence>(chains);
  ParsedChains out;
  out.lengths.reserve(seq.size());
  for (size_t i = 0; i < seq.size(); ++i) {
    std::vector<PageKey> chain = ParseChain(seq[i], i);
    out.lengths.push_back(chain.size());
    out.keys.insert(out.keys.end(), chain.begin(), chain.end());
  }
  return out;
}

py::list ToPyList(const std::vector<LookupResult>& results) {
  py::list out(results.size());
  for (size_t i = 0; i < results.size(); ++i) out[i] = py::cast(ToPy(results[i]));
  return out;
}

void BindLookupBatch(py::class_<PyClient>& c) {
  c.def(
      "lookup_batch",
      [](PyClient& self, const py::handle& chains, int64_t lease_ms) {
        if (lease_ms < 0) throw py::value_error(absl::StrCat("lease_ms must be >= 0, got ", lease_ms));
        ParsedChains parsed = ParseChains(chains);
        std::vector<absl::Span<const PageKey>> spans = parsed.Spans();
        LookupOptions o{.lease = std::chrono::milliseconds(lease_ms)};
        return ToPyList(Check(self.Call("lookup_batch", [&](Client& cl) {
          return cl.LookupBatch(absl::MakeConstSpan(spans), o);
        })));
      },
      py::arg("chains"), py::arg("lease_ms") = 0,
      "LOOKUP of many chains in one round trip: a list of LookupResult, one per chain, "
      "each as lookup(chain, lease_ms) would answer it. An empty chain answers hits=0.");
}

}  // namespace kvtier::py
