// Prometheus text-format parser and raw HTTP client for the metrics tests.
#include "tests/metrics/prom_text.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvtier::mtest {
namespace {

bool NameChar(char c, bool first) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
         (!first && std::isdigit(static_cast<unsigned char>(c)));
}

absl::StatusOr<double> ParseValue(const std::string& v) {
  if (v == "+Inf") return INFINITY;
  if (v == "-Inf") return -INFINITY;
  if (v == "NaN") return NAN;
  double d = 0;
  if (!absl::SimpleAtod(v, &d)) return absl::InvalidArgumentError("bad value '" + v + "'");
  return d;
}

// Parses `{k="v",...}` at line[*pos], leaving *pos after the '}'.
absl::Status ParseLabels(const std::string& line, size_t* pos, Sample* s) {
  size_t i = *pos + 1;
  while (i < line.size() && line[i] != '}') {
    size_t eq = line.find('=', i);
    if (eq == std::string::npos) return absl::InvalidArgumentError("label without '='");
    std::string key = line.substr(i, eq - i);
    if (key.empty() || !NameChar(key[0], true)) return absl::InvalidArgumentError("bad label name");
    if (eq + 1 >= line.size() || line[eq + 1] != '"')
      return absl::InvalidArgumentError("label value not quoted");
    std::string value;
    size_t j = eq + 2;
    for (; j < line.size() && line[j] != '"'; ++j) {
      if (line[j] == '\\' && j + 1 < line.size()) {
        char e = line[++j];
        value += e == 'n' ? '\n' : e;
      } else {
        value += line[j];
      }
    }
    if (j >= line.size()) return absl::InvalidArgumentError("unterminated label value");
    if (!s->labels.emplace(key, value).second)
      return absl::InvalidArgumentError("label '" + key + "' twice");
    i = j + 1;
    if (i < line.size() && line[i] == ',') ++i;
  }
  if (i >= line.size()) return absl::InvalidArgumentError("unterminated label set");
  *pos = i + 1;
  return absl::OkStatus();
}

absl::StatusOr<Sample> ParseSample(const std::string& line) {
  Sample s;
  size_t i = 0;
  while (i < line.size() && NameChar(line[i], i == 0)) ++i;
  if (i == 0) return absl::InvalidArgumentError("no metric name");
  s.name = line.substr(0, i);
  if (i < line.size() && line[i] == '{') {
    absl::Status st = ParseLabels(line, &i, &s);
    if (!st.ok()) return st;
  }
  if (i >= line.size() || line[i] != ' ') return absl::InvalidArgumentError("no space before value");
  std::vector<std::string> rest = absl::StrSplit(line.substr(i + 1), ' ');
  if (rest.empty() || rest.size() > 2) return absl::InvalidArgumentError("want 'value [timestamp]'");
  auto v = ParseValue(rest[0]);
  if (!v.ok()) return v.status();
  s.value = *v;
  return s;
}

std::string Family(const std::string& name, const std::map<std::string, std::string>& types) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    if (!absl::EndsWith(name, suffix)) continue;
    std::string base = name.substr(0, name.size() - strlen(suffix));
    auto it = types.find(base);
    if (it != types.end() && it->second == "histogram") return base;
  }
  return name;
}

std::string SeriesKey(const Sample& s, bool drop_le) {
  std::string key = s.name;
  for (const auto& [k, v] : s.labels)
    if (!(drop_le && k == "le")) absl::StrAppend(&key, "|", k, "=", v);
  return key;
}

// Buckets cumulative in `le` order, a +Inf bucket, and _count == +Inf.
absl::Status CheckHistograms(const Exposition& x) {
  std::map<std::string, std::vector<std::pair<double, double>>> buckets;
  std::map<std::string, double> counts;
  for (const Sample& s : x.samples) {
    const std::string fam = Family(s.name, x.types);
    if (fam == s.name || x.types.at(fam) != "histogram") continue;
    Sample base = s;
    base.name = fam;
    const std::string key = SeriesKey(base, true);
    if (absl::EndsWith(s.name, "_bucket")) {
      auto le = s.labels.find("le");
      if (le == s.labels.end()) return absl::InvalidArgumentError(s.name + " without le");
      auto bound = ParseValue(le->second);
      if (!bound.ok()) return bound.status();
      buckets[key].push_back({*bound, s.value});
    } else if (absl::EndsWith(s.name, "_count")) {
      counts[key] = s.value;
    }
  }
  for (auto& [key, list] : buckets) {
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); ++i)
      if (list[i].second < list[i - 1].second)
        return absl::InvalidArgumentError(key + ": buckets are not cumulative");
    if (list.empty() || !std::isinf(list.back().first))
      return absl::InvalidArgumentError(key + ": no +Inf bucket");
    if (!counts.count(key) || counts[key] != list.back().second)
      return absl::InvalidArgumentError(key + ": _count differs from the +Inf bucket");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Exposition> ParseExposition(const std::string& text) {
  if (text.empty() || text.back() != '\n')
    return absl::InvalidArgumentError("exposition does not end with a newline");
  Exposition x;
  std::set<std::string> series;
  int n = 0;
  for (absl::string_view raw : absl::StrSplit(text.substr(0, text.size() - 1), '\n')) {
    ++n;
    const std::string line(raw);
    auto err = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("line ", n, ": ", why, ": ", line));
    };
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(' ', 3));
      if (f.size() >= 2 && f[1] == "TYPE") {
        static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                                     "untyped"};
        if (f.size() != 4 || !kTypes.count(f[3])) return err("bad TYPE line");
        if (!x.types.emplace(f[2], f[3]).second) return err("second TYPE for a family");
      }
      continue;
    }
    auto s = ParseSample(line);
    if (!s.ok()) return err(s.status().message());
    if (!x.types.count(Family(s->name, x.types))) return err("sample before its # TYPE");
    if (!series.insert(SeriesKey(*s, false)).second) return err("duplicate series");
    x.samples.push_back(*std::move(s));
  }
  absl::Status st = CheckHistograms(x);
  if (!st.ok()) return st;
  return x;
}

absl::StatusOr<double> Exposition::Value(const std::string& name,
                                         const std::map<std::string, std::string>& labels) const {
  for (const Sample& s : samples)
    if (s.name == name && s.labels == labels) return s.value;
  std::string want = name + "{";
  for (const auto& [k, v] : labels) absl::StrAppend(&want, k, "=\"", v, "\",");
  return absl::NotFoundError("no sample " + want + "}");
}

std::vector<Sample> Exposition::All(const std::string& name) const {
  std::vector<Sample> out;
  for (const Sample& s : samples)
    if (s.name == name) out.push_back(s);
  return out;
}

absl::StatusOr<HttpReply> HttpExchange(int port, const std::string& request, int timeout_ms) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect 127.0.0.1:", port, ": ", strerror(errno)));
  }
  if (!request.empty() && send(fd, request.data(), request.size(), MSG_NOSIGNAL) < 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("send: ", strerror(errno)));
  }
  std::string in;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) {
      close(fd);
      return absl::DeadlineExceededError("no complete reply; got: " + in.substr(0, 200));
    }
    char buf[65536];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  size_t end = in.find("\r\n\r\n");
  if (end == std::string::npos) return absl::DataLossError("reply without a header end: " + in.substr(0, 200));
  std::vector<std::string> lines = absl::StrSplit(in.substr(0, end), "\r\n");
  std::vector<std::string> status = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  HttpReply r;
  if (status.size() < 2 || !absl::StartsWith(status[0], "HTTP/1.") || !absl::SimpleAtoi(status[1], &r.status))
    return absl::DataLossError("bad status line: " + lines[0]);
  for (size_t i = 1; i < lines.size(); ++i) {
    size_t colon = lines[i].find(':');
    if (colon == std::string::npos) return absl::DataLossError("bad header: " + lines[i]);
    r.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  r.body = in.substr(end + 4);
  return r;
}

absl::StatusOr<HttpReply> HttpGet(int port, const std::string& path) {
  return HttpExchange(port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\n\r\n");
}

}  // namespace kvtier::mtest
