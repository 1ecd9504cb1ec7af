// gateway/config: YAML with flags on top; unknown keys are errors.
#include "gateway/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace kvgate {
namespace {

TEST(Config, YamlSectionsAndUnknownKeys) {
  const std::string path = ::testing::TempDir() + "/kvgate_config_test.yaml";
  {
    std::ofstream f(path);
    f << "listen: {host: 0.0.0.0, port: 9000}\n"
         "block_size: 32\n"
         "workers:\n"
         "  - url: http://10.0.0.1:8000\n"
         "    engine: sglang\n"
         "    kv_events: tcp://10.0.0.1:5557\n"
         "    dp_size: 2\n"
         "routing: {policy: round_robin, prefill_weight: 4, decode_weight: 0.5, reuse_weight: 2}\n"
         "limits: {max_in_flight: 10, first_byte_timeout_ms: 1500}\n";
  }
  gateway::GatewayConfig c;
  ASSERT_TRUE(gateway::LoadConfigFile(path, &c).ok());
  EXPECT_EQ(c.host, "0.0.0.0");
  EXPECT_EQ(c.port, 9000);
  EXPECT_EQ(c.block_size, 32u);
  ASSERT_EQ(c.workers.size(), 1u);
  EXPECT_EQ(c.workers[0].engine, engines::EngineKind::kSglang);
  EXPECT_EQ(c.workers[0].dp_size, 2u);
  EXPECT_EQ(c.routing.policy, routing::Policy::kRoundRobin);
  EXPECT_EQ(c.routing.kv.prefill_weight, 4);
  EXPECT_EQ(c.routing.kv.decode_weight, 0.5);
  EXPECT_EQ(c.routing.kv.reuse_weight, 2);
  EXPECT_EQ(c.limits.first_byte_timeout, std::chrono::milliseconds(1500));
  ASSERT_TRUE(gateway::FinishConfig(&c).ok());
  EXPECT_EQ(c.models, std::vector<std::string>{"kvgate-mock"});

  {
    std::ofstream f(path);
    f << "routing: {polcy: kv}\n";
  }
  gateway::GatewayConfig bad;
  const Status s = gateway::LoadConfigFile(path, &bad);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("routing.polcy"), std::string::npos) << s.message();
  std::remove(path.c_str());
}

TEST(Config, FleetSectionsAndWorkerRecords) {
  const std::string path = ::testing::TempDir() + "/kvgate_fleet_config_test.yaml";
  auto load = [&](const std::string& yaml, gateway::GatewayConfig* c) {
    std::ofstream(path) << yaml;
    Status s = gateway::LoadConfigFile(path, c);
    return s.ok() ? gateway::FinishConfig(c) : s;
  };
  gateway::GatewayConfig c;
  ASSERT_TRUE(
      load("etcd: {url: 'http://10.0.0.9:2379', prefix: /prod}\n"
           "cluster: {nats: 'nats://10.0.0.9:4222', name: east, replica_id: '7'}\n"
           "workers:\n"
           "  - {url: 'http://10.0.0.1:8000', id: gpu-1, role: decode, bootstrap_port: 8998}\n"
           "  - {url: 'http://10.0.0.2:8000'}\n",
           &c)
          .ok());
  EXPECT_EQ(c.fleet.etcd_url, "http://10.0.0.9:2379");
  EXPECT_EQ(c.fleet.etcd_prefix, "/prod");
  EXPECT_EQ(c.fleet.nats_url, "nats://10.0.0.9:4222");
  EXPECT_EQ(c.fleet.cluster_name, "east");
  EXPECT_EQ(c.fleet.replica_id, "7");
  ASSERT_EQ(c.workers.size(), 2u);
  EXPECT_EQ(c.workers[0].id, "gpu-1");
  EXPECT_EQ(c.workers[0].role, discovery::WorkerRole::kDecode);
  EXPECT_EQ(c.workers[0].bootstrap_port, 8998);
  EXPECT_EQ(c.workers[1].id, discovery::DefaultWorkerId("http://10.0.0.2:8000"));

  // With etcd, a gateway may start with no worker at all.
  gateway::GatewayConfig etcd_only;
  EXPECT_TRUE(load("etcd: {url: 'http://10.0.0.9:2379'}\n", &etcd_only).ok());

  for (const char* bad : {
           "workers: [{url: 'http://h:1', id: a}, {url: 'http://h:2', id: a}]\n",  // twice
           "workers: [{url: 'http://h:1', role: leader}]\n",
           "workers: [{url: 'http://h:1', colour: red}]\n",
           "workers: [{url: 'http://h:1'}]\ncluster: {replica_id: '0'}\n",
           "workers: [{url: 'http://h:1'}]\ncluster: {replica_id: '70000'}\n",
           "workers: [{url: 'http://h:1'}]\ncluster: {nats: 'nats://h:1', peers: 3}\n",
       }) {
    gateway::GatewayConfig b;
    EXPECT_FALSE(load(bad, &b).ok()) << bad;
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kvgate
