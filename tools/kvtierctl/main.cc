// kvtierctl: shows and steers a running kvtierd.
//   stats            tier, namespace and latency tables (the default command)
//   top | watch      stats refreshed every --interval, with rates
//   ping             round-trip time and daemon version
//   tenants          every tenant's pages, bytes and quotas (admin)
//   evict            --namespace=X [--tier=hbm|host|nvme] (--pages=N | --all)
//   flush            demote every RAM page to NVMe, durably (admin)
//   curve-keygen     a new CURVE key pair, Z85: "public <key>" and "secret <key>"
// --json prints JSON instead of tables. Exit codes: 0 ok, 1 the daemon
// refused or did not answer (one line on stderr), 2 bad command line.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <zmq.h>

#include "absl/flags/flag.h"
#include "kvtier/cli.h"
#include "tools/kvtierctl/kvtierctl.h"

ABSL_FLAG(std::string, endpoint, "", "daemon endpoint (default: $KVTIER_ENDPOINT, else the default ipc socket)");
ABSL_FLAG(std::string, tenant, "", "tenant to authenticate as (default: $KVTIER_TENANT, else 'default')");
ABSL_FLAG(std::string, token, "", "tenant token (default: $KVTIER_TOKEN); admin commands need an admin tenant's token");
ABSL_FLAG(std::string, curve_server_key, "", "a CURVE daemon (--curve_secret_key_file): its public key, Z85 (default: $KVTIER_CURVE_SERVER_KEY)");
ABSL_FLAG(std::string, curve_keys_file, "", "with --curve_server_key: the key pair of the tenant --tenant names, as `kvtierctl curve-keygen` prints it (\"public ...\" and \"secret ...\" lines; default: $KVTIER_CURVE_KEYS_FILE)");
ABSL_FLAG(bool, json, false, "print JSON instead of tables");
ABSL_FLAG(int, timeout_ms, 2000, "how long to wait for the daemon");
ABSL_FLAG(int, admin_timeout_ms, 600000, "how long evict and flush may take");
ABSL_FLAG(double, interval, 1.0, "top/watch: seconds between refreshes");
ABSL_FLAG(int, count, 0, "top/watch: refreshes (0: until q or Ctrl-C); ping: round trips (default 1)");
ABSL_FLAG(std::string, namespace, "", "evict: the namespace (default: the session's own)");
ABSL_FLAG(std::string, tier, "", "evict: hbm, host or nvme (pages move one tier down); empty: drop from the store");
ABSL_FLAG(uint64_t, pages, 0, "evict: at most this many pages, least recently used first");
ABSL_FLAG(bool, all, false, "evict: every evictable page");

namespace {

std::string FlagOrEnv(const std::string& flag, const char* env, const std::string& fallback) {
  if (!flag.empty()) return flag;
  const char* v = std::getenv(env);
  return v != nullptr && *v != '\0' ? v : fallback;
}

// The "public <key>" and "secret <key>" lines of `kvtierctl curve-keygen`.
bool ReadCurveKeys(const std::string& path, std::string* pub, std::string* sec) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return false;
  char line[256];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    std::string l(line);
    while (!l.empty() && (l.back() == '\n' || l.back() == '\r' || l.back() == ' ')) l.pop_back();
    if (l.rfind("public ", 0) == 0) *pub = l.substr(7);
    if (l.rfind("secret ", 0) == 0) *sec = l.substr(7);
  }
  std::fclose(f);
  return !pub->empty() && !sec->empty();
}

kvtier::ctl::Options OptionsFromFlags(const std::string& cmd) {
  kvtier::ctl::Options o;
  o.client.endpoint = FlagOrEnv(absl::GetFlag(FLAGS_endpoint), "KVTIER_ENDPOINT", "");
  o.client.tenant = FlagOrEnv(absl::GetFlag(FLAGS_tenant), "KVTIER_TENANT", "default");
  o.client.token = FlagOrEnv(absl::GetFlag(FLAGS_token), "KVTIER_TOKEN", "");
  o.client.client_name = "kvtierctl " + cmd;
  o.client.curve_server_key =
      FlagOrEnv(absl::GetFlag(FLAGS_curve_server_key), "KVTIER_CURVE_SERVER_KEY", "");
  const std::string keys =
      FlagOrEnv(absl::GetFlag(FLAGS_curve_keys_file), "KVTIER_CURVE_KEYS_FILE", "");
  if (!o.client.curve_server_key.empty() &&
      !ReadCurveKeys(keys, &o.client.curve_public_key, &o.client.curve_secret_key))
    o.curve_error = "--curve_server_key needs --curve_keys_file with the tenant's \"public\" and "
                    "\"secret\" lines (kvtierctl curve-keygen)";
  const bool slow = cmd == "evict" || cmd == "flush";
  o.client.timeout = std::chrono::milliseconds(
      absl::GetFlag(slow ? FLAGS_admin_timeout_ms : FLAGS_timeout_ms));
  o.json = absl::GetFlag(FLAGS_json);
  o.interval_s = absl::GetFlag(FLAGS_interval);
  o.count = absl::GetFlag(FLAGS_count);
  o.ns = absl::GetFlag(FLAGS_namespace);
  o.tier = absl::GetFlag(FLAGS_tier);
  o.pages = absl::GetFlag(FLAGS_pages);
  o.all = absl::GetFlag(FLAGS_all);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args = kvtier::ParseCommandLine(
      argc, argv,
      "shows and steers a running kvtierd. Commands: stats (the default: tier, namespace "
      "and latency tables), top|watch (stats refreshed with rates), ping, tenants (admin), "
      "evict, flush (admin: every RAM page to NVMe, durably), curve-keygen (a CURVE key "
      "pair for --curve_secret_key_file and a tenant's curve_public_key). Exit codes: 0 ok, 1 refused "
      "or no daemon, 2 bad command line.\n"
      "  kvtierctl [stats|top|watch|ping|tenants|evict|flush] [--json] [--endpoint=...] "
      "[--tenant=... --token=...]\n"
      "  kvtierctl evict --namespace=NAME [--tier=hbm|host|nvme] (--pages=N | --all)");
  if (args.size() > 1) return kvtier::ctl::Fail("one command at a time", kvtier::ctl::kUsage);
  const std::string cmd = args.empty() ? "stats" : args[0];
  const kvtier::ctl::Options o = OptionsFromFlags(cmd);
  if (!o.curve_error.empty()) return kvtier::ctl::Fail(o.curve_error, kvtier::ctl::kUsage);
  if (cmd == "curve-keygen") {
    // For --curve_secret_key_file (the daemon's) and curve_public_key (a
    // tenant's, in the tenants file): libzmq makes the pair.
    char pub[41], sec[41];
    if (zmq_curve_keypair(pub, sec) != 0)
      return kvtier::ctl::Fail("zmq_curve_keypair failed (libzmq built without CURVE?)", 1);
    std::printf("public %s\nsecret %s\n", pub, sec);
    return 0;
  }
  if (cmd == "stats") return kvtier::ctl::CmdStats(o);
  if (cmd == "top" || cmd == "watch") return kvtier::ctl::CmdTop(o);
  if (cmd == "ping") return kvtier::ctl::CmdPing(o);
  if (cmd == "tenants") return kvtier::ctl::CmdTenants(o);
  if (cmd == "evict") return kvtier::ctl::CmdEvict(o);
  if (cmd == "flush") return kvtier::ctl::CmdFlush(o);
  return kvtier::ctl::Fail(
      "unknown command '" + cmd +
          "' (try: stats, top, watch, ping, tenants, evict, flush, curve-keygen)",
      kvtier::ctl::kUsage);
}
