// Test helpers for the metrics endpoint: a strict parser of the Prometheus
// text format (every line a comment or `name{labels} value`, families typed
// before their samples, histograms cumulative) and a raw HTTP/1.1 exchange
// over a loopback TCP socket.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier::mtest {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;  // family -> counter|gauge|histogram

  // The value of the one sample with this name and exactly these labels.
  absl::StatusOr<double> Value(const std::string& name,
                               const std::map<std::string, std::string>& labels = {}) const;
  // Every sample of `name` (any labels).
  std::vector<Sample> All(const std::string& name) const;
};

// Errors name the line number and what is wrong with it.
absl::StatusOr<Exposition> ParseExposition(const std::string& text);

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

// Connects to 127.0.0.1:port, sends `request` verbatim, reads to EOF (or
// until timeout_ms). The reply must be a well-formed HTTP/1.x response.
absl::StatusOr<HttpReply> HttpExchange(int port, const std::string& request, int timeout_ms = 5000);
absl::StatusOr<HttpReply> HttpGet(int port, const std::string& path = "/metrics");

}  // namespace kvtier::mtest
