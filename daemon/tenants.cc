// Tenants file parsing and token checks.
#include "daemon/tenants.h"

#include <zmq.h>

#include <openssl/crypto.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/request_codec.h"
#include "kvtier/byte_size.h"
#include "kvtier/status_macros.h"
#include "nlohmann/json.hpp"

namespace kvtier::daemon {
namespace {

absl::StatusOr<tiers::TierKind> ParseTierName(absl::string_view name) {
  if (name == "hbm") return tiers::TierKind::kHbm;
  if (name == "host") return tiers::TierKind::kHost;
  if (name == "nvme") return tiers::TierKind::kNvme;
  if (name == "remote") return tiers::TierKind::kRemote;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown tier '", name, "' (want hbm, host, nvme or remote)"));
}

// A byte size given as a number or a string like "512MiB".
absl::StatusOr<uint64_t> ByteValue(const nlohmann::json& value, absl::string_view what) {
  std::string text = value.is_number_unsigned() ? std::to_string(value.get<uint64_t>())
                     : value.is_string()         ? value.get<std::string>()
                                                 : std::string("?");
  auto bytes = ParseByteSize(text);
  if (!bytes.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", bytes.status().message()));
  return bytes;
}

// {"host": "512MiB", "nvme": "4GiB"} under `field`, if present.
absl::Status ParseTierBytes(const nlohmann::json& t, const char* field, absl::string_view where,
                            absl::flat_hash_map<tiers::TierKind, uint64_t>* out) {
  if (!t.contains(field)) return absl::OkStatus();
  if (!t[field].is_object())
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"", field, "\" must be an object"));
  for (const auto& [tier_name, value] : t[field].items()) {
    auto tier = ParseTierName(tier_name);
    if (!tier.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", tier.status().message()));
    ASSIGN_OR_RETURN((*out)[*tier], ByteValue(value, absl::StrCat(where, ": ", field, ".", tier_name)));
  }
  return absl::OkStatus();
}

// "redis_user" and "redis_password" come together, both non-empty strings.
absl::Status ParseRedisUser(const nlohmann::json& t, absl::string_view where, Tenant* tenant) {
  const bool user = t.contains("redis_user"), password = t.contains("redis_password");
  if (!user && !password) return absl::OkStatus();
  if (!user || !password || !t["redis_user"].is_string() || !t["redis_password"].is_string() ||
      t["redis_user"].get<std::string>().empty() || t["redis_password"].get<std::string>().empty())
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": \"redis_user\" and \"redis_password\" go together, as non-empty strings"));
  tenant->redis_user = t["redis_user"].get<std::string>();
  tenant->redis_password = t["redis_password"].get<std::string>();
  return absl::OkStatus();
}

absl::StatusOr<Tenant> ParseTenant(const nlohmann::json& t, absl::string_view where) {
  if (!t.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, " is not an object"));
  // A misspelt limit would silently protect nobody: refuse unknown fields.
  for (const auto& [field, value] : t.items()) {
    static constexpr const char* kFields[] = {"name",    "token",        "admin",
                                              "quota",   "reserve",      "max_sessions",
                                              "max_registered_bytes", "redis_user",
                                              "redis_password", "curve_public_key"};
    if (std::find(std::begin(kFields), std::end(kFields), field) == std::end(kFields))
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown field \"", field, "\""));
  }
  Tenant tenant;
  if (!t.contains("name") || !t["name"].is_string() || t["name"].get<std::string>().empty())
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"name\" must be a non-empty string"));
  tenant.name = t["name"].get<std::string>();
  // A tenant HELLO could never name would be unreachable (and its pages too).
  if (tenant.name.size() > kMaxTenantNameBytes)
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"name\" is ", tenant.name.size(),
                                                   " bytes; HELLO accepts 1 to ",
                                                   kMaxTenantNameBytes));
  if (!t.contains("token") || !t["token"].is_string() || t["token"].get<std::string>().size() < 8)
    return absl::InvalidArgumentError(absl::StrCat(
        where, " (", tenant.name, "): \"token\" must be a string of at least 8 characters"));
  tenant.token = t["token"].get<std::string>();
  if (t.contains("admin")) {
    if (!t["admin"].is_boolean())
      return absl::InvalidArgumentError(absl::StrCat(where, ": \"admin\" must be true or false"));
    tenant.admin = t["admin"].get<bool>();
  }
  RETURN_IF_ERROR(ParseTierBytes(t, "quota", where, &tenant.quota_bytes));
  RETURN_IF_ERROR(ParseTierBytes(t, "reserve", where, &tenant.reserved_bytes));
  if (t.contains("max_sessions")) {
    const auto& v = t["max_sessions"];
    if (!v.is_number_unsigned() || v.get<uint64_t>() == 0 || v.get<uint64_t>() > 1000000)
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": \"max_sessions\" must be a number from 1 to 1000000"));
    tenant.max_sessions = static_cast<uint32_t>(v.get<uint64_t>());
  }
  if (t.contains("max_registered_bytes")) {
    ASSIGN_OR_RETURN(tenant.max_registered_bytes,
                     ByteValue(t["max_registered_bytes"], absl::StrCat(where, ": max_registered_bytes")));
  }
  RETURN_IF_ERROR(ParseRedisUser(t, where, &tenant));
  if (t.contains("curve_public_key")) {
    uint8_t raw[32];
    if (!t["curve_public_key"].is_string() || t["curve_public_key"].get<std::string>().size() != 40 ||
        zmq_z85_decode(raw, t["curve_public_key"].get<std::string>().c_str()) == nullptr)
      return absl::InvalidArgumentError(absl::StrCat(
          where, " (", tenant.name, "): \"curve_public_key\" must be a Z85 CURVE public key "
          "(40 characters; kvtierctl curve-keygen)"));
    tenant.curve_public_key = t["curve_public_key"].get<std::string>();
  }
  return tenant;
}

}  // namespace

absl::StatusOr<TenantRegistry> TenantRegistry::Parse(absl::string_view json, absl::string_view origin) {
  nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded())
    return absl::InvalidArgumentError(absl::StrCat(origin, ": not valid JSON"));
  if (!doc.is_object() || !doc.contains("tenants") || !doc["tenants"].is_array())
    return absl::InvalidArgumentError(absl::StrCat(origin, ": expected {\"tenants\": [...]}"));
  TenantRegistry reg;
  size_t index = 0;
  for (const auto& t : doc["tenants"]) {
    auto tenant = ParseTenant(t, absl::StrCat(origin, ": tenants[", index++, "]"));
    if (!tenant.ok()) return tenant.status();
    for (const Tenant& other : reg.tenants_)
      if (other.name == tenant->name)
        return absl::InvalidArgumentError(
            absl::StrCat(origin, ": tenant '", tenant->name, "' is listed twice"));
    for (const Tenant& other : reg.tenants_)
      if (!tenant->curve_public_key.empty() && other.curve_public_key == tenant->curve_public_key)
        return absl::InvalidArgumentError(absl::StrCat(
            origin, ": tenants '", other.name, "' and '", tenant->name,
            "' have the same curve_public_key"));
    reg.tenants_.push_back(*std::move(tenant));
  }
  if (reg.tenants_.empty())
    return absl::InvalidArgumentError(absl::StrCat(origin, ": no tenants defined"));
  return reg;
}

absl::StatusOr<TenantRegistry> TenantRegistry::LoadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read tenants file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return Parse(ss.str(), path);
}

const Tenant* TenantRegistry::Find(absl::string_view name) const {
  for (const Tenant& t : tenants_)
    if (t.name == name) return &t;
  return nullptr;
}

TenantRegistry TenantRegistry::Default() {
  TenantRegistry reg;
  reg.tenants_.push_back(Tenant{.name = "default", .token = "", .admin = true, .quota_bytes = {}});
  return reg;
}

absl::StatusOr<const Tenant*> TenantRegistry::Authenticate(absl::string_view name,
                                                           absl::string_view token) const {
  for (const Tenant& t : tenants_) {
    if (t.name != name) continue;
    if (t.token.empty()) return &t;
    if (t.token.size() == token.size() &&
        CRYPTO_memcmp(t.token.data(), token.data(), token.size()) == 0)
      return &t;
    break;
  }
  return absl::UnauthenticatedError("unknown tenant or bad token");
}

}  // namespace kvtier::daemon
