// Unit tests of CLUSTER SLOTS parsing (replies fed as RESP bytes through
// hiredis's own reader) and of MOVED/ASK parsing.
#include "tiers/remote/cluster_map.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <string>

#include "tiers/remote/redis_conn.h"

namespace kvtier::tiers::remote {
namespace {

ReplyPtr Parse(const std::string& resp) {
  redisReader* reader = redisReaderCreate();
  redisReaderFeed(reader, resp.data(), resp.size());
  void* reply = nullptr;
  EXPECT_EQ(redisReaderGetReply(reader, &reply), REDIS_OK);
  redisReaderFree(reader);
  return ReplyPtr(static_cast<redisReply*>(reply));
}

std::string Node(const std::string& host, int port, const std::string& id) {
  return "*3\r\n$" + std::to_string(host.size()) + "\r\n" + host + "\r\n:" + std::to_string(port) +
         "\r\n$" + std::to_string(id.size()) + "\r\n" + id + "\r\n";
}

TEST(SlotMapTest, ParsesRangesMastersAndReplicas) {
  const std::string resp = "*2\r\n*4\r\n:0\r\n:8191\r\n" + Node("10.0.0.1", 7000, "aaa") +
                           Node("10.0.0.2", 7003, "ddd") + "*3\r\n:8192\r\n:16383\r\n" +
                           Node("", 7001, "bbb");  // empty host: the asked one
  ReplyPtr reply = Parse(resp);
  ASSERT_NE(reply, nullptr);
  auto map = SlotMap::FromClusterSlots(*reply, "10.0.0.9");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->covered_slots(), 16384u);
  EXPECT_EQ(*map->MasterOf(0), "10.0.0.1:7000");
  EXPECT_EQ(*map->MasterOf(8191), "10.0.0.1:7000");
  EXPECT_EQ(*map->MasterOf(8192), "10.0.0.9:7001");
  ASSERT_EQ(map->masters().size(), 2u);
  EXPECT_EQ(map->masters()[0].id, "aaa");
  EXPECT_EQ(map->masters()[0].replicas, std::vector<std::string>{"10.0.0.2:7003"});
  map->Assign(5, "10.0.0.3:7005");
  EXPECT_EQ(*map->MasterOf(5), "10.0.0.3:7005");
}

TEST(SlotMapTest, PartialCoverageAndMalformedReplies) {
  auto partial =
      SlotMap::FromClusterSlots(*Parse("*1\r\n*3\r\n:10\r\n:20\r\n" + Node("h", 1, "x")), "h");
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->covered_slots(), 11u);
  EXPECT_EQ(partial->MasterOf(9), nullptr);
  EXPECT_FALSE(SlotMap::FromClusterSlots(*Parse("*0\r\n"), "h").ok());  // nothing served
  EXPECT_FALSE(SlotMap::FromClusterSlots(*Parse("+OK\r\n"), "h").ok());
  EXPECT_FALSE(
      SlotMap::FromClusterSlots(*Parse("*1\r\n*3\r\n:20\r\n:10\r\n" + Node("h", 1, "x")), "h")
          .ok());
  EXPECT_FALSE(
      SlotMap::FromClusterSlots(*Parse("*1\r\n*3\r\n:0\r\n:16384\r\n" + Node("h", 1, "x")), "h")
          .ok());
  EXPECT_FALSE(SlotMap::FromClusterSlots(*Parse("*1\r\n*3\r\n:0\r\n:1\r\n:5\r\n"), "h").ok());
}

TEST(RedirectTest, MovedAndAsk) {
  auto moved = ParseRedirect("MOVED 3999 127.0.0.1:6381", "x");
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(moved->kind, Redirect::Kind::kMoved);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->endpoint, "127.0.0.1:6381");
  auto ask = ParseRedirect("ASK 12 :7002", "10.1.1.1");
  ASSERT_TRUE(ask.has_value());
  EXPECT_EQ(ask->kind, Redirect::Kind::kAsk);
  EXPECT_EQ(ask->endpoint, "10.1.1.1:7002");
  EXPECT_FALSE(ParseRedirect("MOVED 16384 h:1", "x").has_value());
  EXPECT_FALSE(ParseRedirect("CLUSTERDOWN The cluster is down", "x").has_value());
  EXPECT_FALSE(ParseRedirect("ERR wrong number of arguments", "x").has_value());
}

TEST(EndpointTest, ParseAndPrint) {
  auto v6 = ParseEndpoint("[::1]:7000");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->ToString(), "[::1]:7000");
  EXPECT_EQ(ParseEndpoint("a.b:1")->ToString(), "a.b:1");
  EXPECT_FALSE(ParseEndpoint("[]:1").ok());
}

}  // namespace
}  // namespace kvtier::tiers::remote
