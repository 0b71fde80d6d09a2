// LoopbackCluster: shells out to scripts/redis_cluster.sh (the script under
// test too) and talks to single nodes through the client's own Connection.
#include "tests/remote/cluster_fixture.h"

#include <hiredis/hiredis.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kvtier::tiers::remote::testing {
namespace {

// Runs the cluster script; its output goes to <dir>/script.log.
absl::Status RunScript(const std::string& verb, const std::string& dir) {
  const std::string log = dir + "/script.log";
  const std::string cmd =
      absl::StrCat(KVTIER_REDIS_CLUSTER_SCRIPT, " ", verb, " ", dir, "/cluster >>", log, " 2>&1");
  if (std::system(cmd.c_str()) == 0) return absl::OkStatus();
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return absl::InternalError(absl::StrCat("redis_cluster.sh ", verb, " failed: ", text));
}

}  // namespace

bool RedisInstalled() {
  return std::system("command -v redis-server >/dev/null && command -v redis-cli >/dev/null") == 0;
}

absl::StatusOr<std::unique_ptr<LoopbackCluster>> LoopbackCluster::Start() {
  char tmpl[] = "/tmp/kvtier-redis-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  std::unique_ptr<LoopbackCluster> cluster(new LoopbackCluster(tmpl));
  cluster->running_ = true;  // stop whatever part started, even on failure
  absl::Status started = RunScript("start", cluster->dir_);
  if (!started.ok()) return started;
  std::ifstream in(cluster->dir_ + "/cluster/seeds");
  std::string line;
  std::getline(in, line);
  cluster->seeds_ = absl::StrSplit(absl::StripAsciiWhitespace(line), ',', absl::SkipEmpty());
  if (cluster->seeds_.size() != 6) return absl::InternalError("seeds file: " + line);
  return cluster;
}

LoopbackCluster::~LoopbackCluster() {
  (void)Stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

absl::Status LoopbackCluster::Stop() {
  if (!running_) return absl::OkStatus();
  running_ = false;
  return RunScript("stop", dir_);
}

RedisClusterConfig LoopbackCluster::Config() const {
  RedisClusterConfig config;
  config.seeds = seeds_;
  config.connect_timeout = absl::Milliseconds(300);
  config.command_timeout = absl::Milliseconds(500);
  return config;
}

pid_t LoopbackCluster::PidOf(const std::string& endpoint) const {
  const std::string port = endpoint.substr(endpoint.rfind(':') + 1);
  std::ifstream in(absl::StrCat(dir_, "/cluster/node-", port, "/redis.pid"));
  pid_t pid = -1;
  in >> pid;
  return in ? pid : -1;
}

absl::StatusOr<ReplyPtr> LoopbackCluster::Admin(const std::string& endpoint,
                                                const std::vector<std::string>& argv) const {
  ConnectOptions options;
  auto conn = Connection::Open(endpoint, options);
  if (!conn.ok()) return conn.status();
  std::vector<absl::string_view> views(argv.begin(), argv.end());
  return (*conn)->Command(views);
}

absl::Status LoopbackCluster::OnAllNodes(const std::vector<std::string>& argv) const {
  for (const std::string& node : seeds_) {
    auto reply = Admin(node, argv);
    if (!reply.ok()) return reply.status();
    if ((*reply)->type == REDIS_REPLY_ERROR) {
      return absl::InternalError(absl::StrCat(node, ": ", (*reply)->str));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier::tiers::remote::testing
