// kvtierctl internals: the options every command shares, output helpers and
// one function per command. Commands print to stdout and return the exit
// code; errors are one line on stderr ("kvtierctl: ...").
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "kvtier.pb.h"
#include "kvtier/client.h"
#include "nlohmann/json.hpp"

namespace kvtier::ctl {

struct Options {
  ClientOptions client;
  bool json = false;
  double interval_s = 1.0;  // top/watch
  int count = 0;            // top/watch refreshes, ping round trips; 0: command default
  std::string ns;           // evict
  std::string tier;         // evict: "", hbm, host, nvme
  uint64_t pages = 0;       // evict
  bool all = false;         // evict
  std::string curve_error;  // the CURVE flags are incomplete: why
};

// Exit codes.
inline constexpr int kOk = 0;
inline constexpr int kError = 1;  // the daemon refused or did not answer
inline constexpr int kUsage = 2;  // bad command line

int Fail(const std::string& message, int code = kError);
absl::StatusOr<std::unique_ptr<Client>> Connect(const Options& o);

// Formatting (format.cc).
std::string Bytes(uint64_t b);
std::string Percent(uint64_t hits, uint64_t misses);
std::string Micros(double us);  // "850us", "1.25ms", "2.10s"
nlohmann::json ToJson(const google::protobuf::Message& m);
void PrintJson(const nlohmann::json& j);  // one document, indented, newline-terminated
void PrintStatsTables(const wire::StatsReply& s);
void PrintLatencyTable(const wire::StatsReply& s);

// Commands (commands.cc, top.cc).
int CmdStats(const Options& o);
int CmdPing(const Options& o);
int CmdTenants(const Options& o);
int CmdEvict(const Options& o);
int CmdFlush(const Options& o);
int CmdTop(const Options& o);

}  // namespace kvtier::ctl
