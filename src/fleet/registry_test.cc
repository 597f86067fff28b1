#include "fleet/registry.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "testlib/temp_dir.h"

namespace kiln::fleet {
namespace {

using kiln::testing::TempDir;

TEST(NodeIds, ValidIdsAndSessionIds) {
  EXPECT_TRUE(IsValidNodeId("kiln-0"));
  EXPECT_TRUE(IsValidNodeId(std::string(32, 'a')));
  for (const char* bad : {"", "Kiln", "a.b", "a_b", "a b"}) EXPECT_FALSE(IsValidNodeId(bad)) << bad;
  EXPECT_FALSE(IsValidNodeId(std::string(33, 'a')));
  EXPECT_TRUE(IsValidNodeId(NodeIdFromHostname())) << NodeIdFromHostname();
  const std::string sid = SessionIdFor("kiln-2", "0123456789abcdef0123456789abcdef");
  EXPECT_EQ(sid, "kiln-2-0123456789abcdef0123456789abcdef");
  EXPECT_EQ(NodeOfSessionId(sid), "kiln-2");
  EXPECT_EQ(NodeOfSessionId("0123456789abcdef0123456789abcdef"), "");
  EXPECT_EQ(NodeOfSessionId("-0123"), "");
  EXPECT_EQ(NodeOfSessionId("A.B-0123"), "");
}

TEST(LiveNodes, CountsFreshBeatsAndSelf) {
  const std::map<std::string, int64_t> beats{{"a", 10'000}, {"b", 6'000}, {"c", 4'999}};
  // Timeout 5 s at t = 10 s: a and b are live, c (5001 ms old) is not.
  EXPECT_EQ(CountLiveNodes(beats, "a", 10'000, 5'000), 2);
  // Self counts even when its row is stale or missing from the snapshot.
  EXPECT_EQ(CountLiveNodes(beats, "c", 10'000, 5'000), 3);
  EXPECT_EQ(CountLiveNodes(beats, "new", 10'000, 5'000), 3);
  EXPECT_EQ(CountLiveNodes({}, "a", 10'000, 5'000), 1);
  EXPECT_EQ(CountLiveNodes(beats, "a", 10'001, 4'000), 1);  // b at the edge: 4001 ms old
  EXPECT_EQ(CountLiveNodes(beats, "a", 10'000, 4'000), 2);  // exactly the timeout: still live
}

class RegistryTest : public ::testing::Test {
 protected:
  std::unique_ptr<store::Store> OpenStore(const std::string& node) {
    store::OpenOptions o;
    o.now_ms = [this] { return now_; };
    o.node_id = node;
    auto s = store::Store::Open(tmp_.path(), o);
    EXPECT_TRUE(s.ok()) << s.error().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  Options For(const std::string& node) {
    Options o;
    o.node_id = node;
    o.address = "127.0.0.1:1";
    o.heartbeat_ms = 1000;
    o.timeout_ms = 5000;
    o.now_ms = [this] { return now_; };
    return o;
  }
  TempDir tmp_;
  int64_t now_ = 1'000'000;
};

TEST_F(RegistryTest, ANodeThatStopsBeatingIsGoneAndItsRowsInterrupted) {
  auto sa = OpenStore("a");
  auto sb = OpenStore("b");
  ASSERT_TRUE(sa && sb);
  Registry a(sa.get(), For("a"));
  Registry b(sb.get(), For("b"));
  ASSERT_TRUE(a.Tick().ok());
  ASSERT_TRUE(b.Tick().ok());
  store::AuditStart st;
  st.id = "on-a";
  st.tenant = "acme";
  st.started_ms = now_;
  ASSERT_TRUE(sa->BeginExecution(st).ok());
  EXPECT_FALSE(b.IsGone("a"));
  EXPECT_TRUE(b.IsGone("never-was"));
  EXPECT_FALSE(b.IsGone("b"));

  now_ += 4000;  // a is quiet, within the timeout
  ASSERT_TRUE(b.Tick().ok());
  EXPECT_FALSE(b.IsGone("a"));
  now_ += 2000;                // past it
  EXPECT_TRUE(b.IsGone("a"));  // from the snapshot, no store round trip
  ASSERT_TRUE(b.Tick().ok());
  store::AuditQuery q;
  auto rows = sb->Query(q);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].status, "interrupted");

  // a beats again: back.
  ASSERT_TRUE(a.Tick().ok());
  ASSERT_TRUE(b.Tick().ok());
  EXPECT_FALSE(b.IsGone("a"));
  // a leaves cleanly: gone at b's next round, not after the timeout.
  a.Stop(/*leave=*/true);
  ASSERT_TRUE(b.Tick().ok());
  EXPECT_TRUE(b.IsGone("a"));
}

TEST_F(RegistryTest, EachRoundReportsTheLiveNodes) {
  auto sa = OpenStore("a");
  auto sb = OpenStore("b");
  ASSERT_TRUE(sa && sb);
  std::vector<int> seen;
  Options oa = For("a");
  oa.on_live_nodes = [&](int n) { seen.push_back(n); };
  Registry a(sa.get(), oa);
  Registry b(sb.get(), For("b"));
  EXPECT_EQ(a.LiveNodes(), 1);  // before any round
  ASSERT_TRUE(a.Tick().ok());
  ASSERT_TRUE(b.Tick().ok());
  ASSERT_TRUE(a.Tick().ok());
  EXPECT_EQ(a.LiveNodes(), 2);
  now_ += 6000;  // b silent past the timeout; a beats
  ASSERT_TRUE(a.Tick().ok());
  EXPECT_EQ(a.LiveNodes(), 1);
  ASSERT_TRUE(b.Tick().ok());  // back
  ASSERT_TRUE(a.Tick().ok());
  b.Stop(/*leave=*/true);  // leaves cleanly
  ASSERT_TRUE(a.Tick().ok());
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 1, 2, 1}));
}

TEST_F(RegistryTest, StartMarksThisNodesOldRowsAndDrainingIsWritten) {
  auto s = OpenStore("a");
  ASSERT_TRUE(s);
  store::AuditStart st;
  st.id = "left-running";
  st.tenant = "acme";
  st.started_ms = now_;
  ASSERT_TRUE(s->BeginExecution(st).ok());
  Registry a(s.get(), For("a"));
  ASSERT_TRUE(a.Start().ok());
  auto rows = s->Query(store::AuditQuery{});
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].status, "interrupted");
  a.SetDraining(true);
  ASSERT_TRUE(a.Tick().ok());
  auto nodes = s->ListNodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_TRUE((*nodes)[0].draining);
  a.Stop(/*leave=*/false);
}

}  // namespace
}  // namespace kiln::fleet
