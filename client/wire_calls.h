// The operator requests' full wire replies, for kvtier's own tools, tests and
// Python binding. The installed API (kvtier/client.h) returns plain values
// (kvtier/stats.h) so its users need no protobuf; kvtierctl and the tests
// read fields those values leave out (prefetch, shared cache, GET stages),
// and print the whole reply as JSON. Not installed.
#pragma once

#include "absl/status/statusor.h"
#include "kvtier.pb.h"
#include "kvtier/client.h"

namespace kvtier {

absl::StatusOr<wire::StatsReply> WireStats(Client& client);
absl::StatusOr<wire::PingReply> WirePing(Client& client);
absl::StatusOr<wire::TenantsReply> WireTenants(Client& client);

// The plain values the installed API returns for these replies.
StatsResult ToStatsResult(const wire::StatsReply& reply);
PingResult ToPingResult(const wire::PingReply& reply);
std::vector<TenantSummary> ToTenantSummaries(const wire::TenantsReply& reply);

}  // namespace kvtier
