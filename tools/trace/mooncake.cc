// Mooncake JSONL parser: one JSON object per line with `timestamp` (ms),
// `input_length`, `output_length` and `hash_ids`. Every field is checked and
// a bad line names its file, line and the field at fault.
#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "nlohmann/json.hpp"
#include "tools/trace/trace.h"
#include "tools/trace/trace_internal.h"

namespace kvtier::trace {
namespace {

using nlohmann::json;
using internal::BadLine;
using internal::LineReader;

// A non-negative integer field that fits in `max`; "" when fine, else why not.
std::string CheckCount(const json& obj, const char* field, uint64_t max, uint64_t* out) {
  auto it = obj.find(field);
  if (it == obj.end()) return absl::StrCat("missing field '", field, "'");
  if (it->is_number_unsigned() ||
      (it->is_number_integer() && it->get<int64_t>() >= 0)) {
    const uint64_t v = it->get<uint64_t>();
    if (v > max) return absl::StrCat("field '", field, "' = ", v, " is larger than ", max);
    *out = v;
    return "";
  }
  return absl::StrCat("field '", field, "' = ", it->dump(), " is not a non-negative integer");
}

std::string CheckTimestamp(const json& obj, double* out) {
  auto it = obj.find("timestamp");
  if (it == obj.end()) return "missing field 'timestamp'";
  if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0)
    return absl::StrCat("field 'timestamp' = ", it->dump(), " is not a non-negative number");
  *out = it->get<double>();
  return "";
}

std::string CheckHashIds(const json& obj, std::vector<uint64_t>* ids) {
  auto it = obj.find("hash_ids");
  if (it == obj.end()) return "missing field 'hash_ids'";
  if (!it->is_array()) return absl::StrCat("field 'hash_ids' is ", it->type_name(), ", not an array");
  ids->clear();
  ids->reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      return absl::StrCat("hash_ids[", i, "] = ", v.dump(), " is not a non-negative integer");
    ids->push_back(v.get<uint64_t>());
  }
  return "";
}

// Parses one line into `r`; returns "" or the reason it is malformed.
std::string ParseLine(const std::string& line, uint32_t block_tokens, Request* r) {
  json obj;
  // nlohmann reports where a parse failed only through its exception; the
  // exception never leaves this function.
  try {
    obj = json::parse(line);
  } catch (const json::parse_error& e) {
    return absl::StrCat("invalid JSON: ", e.what());
  }
  if (!obj.is_object()) return absl::StrCat("expected a JSON object, got ", obj.type_name());
  constexpr uint64_t kMax32 = std::numeric_limits<uint32_t>::max();
  uint64_t in = 0, out = 0;
  std::string why = CheckTimestamp(obj, &r->timestamp_ms);
  if (why.empty()) why = CheckCount(obj, "input_length", kMax32, &in);
  if (why.empty()) why = CheckCount(obj, "output_length", kMax32, &out);
  if (why.empty()) why = CheckHashIds(obj, &r->block_ids);
  if (!why.empty()) return why;
  r->input_tokens = static_cast<uint32_t>(in);
  r->output_tokens = static_cast<uint32_t>(out);
  const uint64_t want = internal::CeilDiv(in, block_tokens);
  if (r->block_ids.size() != want)
    return absl::StrCat("hash_ids has ", r->block_ids.size(), " ids but input_length ", in,
                        " needs ceil(", in, " / ", block_tokens, ") = ", want);
  return "";
}

}  // namespace

absl::StatusOr<Trace> LoadMooncakeJsonl(const std::string& path, const ParseOptions& opts) {
  LineReader reader(path);
  RETURN_IF_ERROR(reader.Open());
  Trace t;
  t.source = "mooncake:" + path;
  t.prefix_model = "from trace (hash_ids, cumulative per 512-token block)";
  t.block_tokens = 512;
  std::string line;
  bool have_first = false;
  double first_ms = 0;
  while (reader.Next(&line)) {
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    Request r;
    r.line = reader.line_no();
    std::string why = ParseLine(line, t.block_tokens, &r);
    if (!why.empty()) {
      RETURN_IF_ERROR(BadLine(reader, why, opts, &t));
      continue;
    }
    if (!have_first) first_ms = r.timestamp_ms, have_first = true;
    r.timestamp_ms -= first_ms;
    t.requests.push_back(std::move(r));
    if (opts.max_requests > 0 && t.requests.size() >= opts.max_requests) break;
  }
  return t;
}

}  // namespace kvtier::trace
