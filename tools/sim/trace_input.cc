// FromTrace: trace::RequestPages / trace::DecodePages per request, the same
// calls kvtier-stress makes, so both replay the same page ids.
#include "tools/sim/trace_input.h"

namespace kvtier::sim {

std::vector<SimRequest> FromTrace(const trace::Trace& t, const trace::PageMapping& mapping) {
  std::vector<SimRequest> out;
  out.reserve(t.requests.size());
  for (const trace::Request& r : t.requests) {
    SimRequest s;
    s.pages = trace::RequestPages(r, mapping);
    s.decode = trace::DecodePages(r, t.block_tokens, mapping);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace kvtier::sim
