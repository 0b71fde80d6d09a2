// Default socket and state locations (XDG base directories).
#include "kvtier/paths.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>

namespace kvtier {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string HomeDir() {
  std::string home = Env("HOME");
  if (!home.empty()) return home;
  if (const passwd* pw = getpwuid(getuid())) return pw->pw_dir;
  return "/tmp";
}

}  // namespace

std::string DefaultSocketPath() {
  std::string runtime = Env("XDG_RUNTIME_DIR");
  if (!runtime.empty()) return runtime + "/kvtier/kvtierd.sock";
  return "/tmp/kvtier-" + std::to_string(getuid()) + "/kvtierd.sock";
}

std::string DefaultEndpoint() {
  std::string env = Env("KVTIER_ENDPOINT");
  if (!env.empty()) return env;
  return "ipc://" + DefaultSocketPath();
}

std::string DefaultStateDir() {
  std::string state = Env("XDG_STATE_HOME");
  if (!state.empty()) return state + "/kvtier";
  return HomeDir() + "/.local/state/kvtier";
}

}  // namespace kvtier
