// The Kubernetes example in deploy/kubernetes/ against the binary it deploys: every flag it passes
// exists, its probes, ports and drain fit together, and the server started with its flags answers
// the probes' paths and exports the metric its autoscaler queries, with the model label it asks.
#include <httplib.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <regex>

#include "tests/e2e/server_process.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kDeploy = fs::path(TESSERA_SOURCE_DIR) / "deploy" / "kubernetes";

YAML::Node find_kind(const std::vector<YAML::Node>& documents, const std::string& kind) {
  for (const YAML::Node& d : documents) {
    if (d["kind"] && d["kind"].as<std::string>() == kind) return d;
  }
  ADD_FAILURE() << "no " << kind << " in " << kDeploy;
  return YAML::Node();
}

// The container's `serve` flags, flag -> value ("" for a switch).
std::map<std::string, std::string> serve_flags(const YAML::Node& container) {
  const auto args = container["args"].as<std::vector<std::string>>();
  EXPECT_EQ(args.at(0), "serve");
  std::map<std::string, std::string> flags;
  for (size_t i = 1; i < args.size(); ++i) {
    EXPECT_EQ(args[i].rfind("--", 0), 0u) << args[i];
    const bool has_value = i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0;
    flags[args[i].substr(2)] = has_value ? args[i + 1] : "";
    if (has_value) ++i;
  }
  return flags;
}

TEST(DeployManifest, ProbesPortsAndMetricsMatchTheBinary) {
  const std::vector<YAML::Node> serve = YAML::LoadAllFromFile(kDeploy / "tessera-serve.yaml");
  const std::vector<YAML::Node> keda = YAML::LoadAllFromFile(kDeploy / "keda-scaledobject.yaml");
  const YAML::Node deployment = find_kind(serve, "Deployment");
  const YAML::Node service = find_kind(serve, "Service");
  const YAML::Node scaled = find_kind(keda, "ScaledObject");
  const YAML::Node pod = deployment["spec"]["template"];
  const YAML::Node container = pod["spec"]["containers"][0];
  const std::map<std::string, std::string> flags = serve_flags(container);

  const CliResult help = run_cli("serve --help");
  ASSERT_EQ(help.exit_code, 0) << help.output;
  for (const auto& [flag, value] : flags) {
    EXPECT_NE(help.output.find("--" + flag + " "), std::string::npos) << "--" << flag;
  }

  // Ports: the named container port is the one the server listens on, and everything refers to
  // it by name or number.
  const YAML::Node port = container["ports"][0];
  EXPECT_EQ(port["name"].as<std::string>(), "http");
  EXPECT_EQ(port["containerPort"].as<std::string>(), flags.at("port"));
  EXPECT_EQ(flags.at("host"), "0.0.0.0");
  EXPECT_EQ(service["spec"]["ports"][0]["targetPort"].as<std::string>(), "http");
  const YAML::Node annotations = pod["metadata"]["annotations"];
  EXPECT_EQ(annotations["prometheus.io/port"].as<std::string>(), flags.at("port"));
  EXPECT_EQ(annotations["prometheus.io/path"].as<std::string>(), "/metrics");

  // Probes: readiness on /ready (503 while draining or full), liveness and start-up on /health.
  EXPECT_EQ(container["readinessProbe"]["httpGet"]["path"].as<std::string>(), "/ready");
  EXPECT_EQ(container["livenessProbe"]["httpGet"]["path"].as<std::string>(), "/health");
  EXPECT_EQ(container["startupProbe"]["httpGet"]["path"].as<std::string>(), "/health");
  for (const char* probe : {"readinessProbe", "livenessProbe", "startupProbe"}) {
    EXPECT_EQ(container[probe]["httpGet"]["port"].as<std::string>(), "http") << probe;
  }

  // The grace period holds the preStop sleep, the drain and the flush that follows it.
  const int grace = pod["spec"]["terminationGracePeriodSeconds"].as<int>();
  const int sleep = container["lifecycle"]["preStop"]["sleep"]["seconds"].as<int>();
  const int drain = std::stoi(flags.at("drain-seconds"));
  EXPECT_GE(grace, sleep + drain + 5) << grace << " < " << sleep << " + " << drain << " + 5";

  // The autoscaler scales this Deployment on metrics the server exports, for its model name.
  EXPECT_EQ(scaled["spec"]["scaleTargetRef"]["name"].as<std::string>(),
            deployment["metadata"]["name"].as<std::string>());
  const std::string query = scaled["spec"]["triggers"][0]["metadata"]["query"].as<std::string>();
  std::vector<std::string> metrics;
  const std::regex metric_name("(tessera_|vllm:)[a-z_]+");
  for (std::sregex_iterator it(query.begin(), query.end(), metric_name), end; it != end; ++it) {
    metrics.push_back(it->str());
  }
  ASSERT_FALSE(metrics.empty()) << query;
  EXPECT_NE(query.find("model_name=\"" + flags.at("model-name") + "\""), std::string::npos)
      << query;

  // The server, started with the manifest's flags (on a test checkpoint, loopback and a free
  // port, and with an API key, as the Secret gives it), answers the probes without the key and
  // exports what the query reads.
  TempDir dir("deploy-manifest");
  std::string args = "--checkpoint " + train_servable_checkpoint(dir) + " --api-key k --threads 1";
  for (const auto& [flag, value] : flags) {
    if (flag != "checkpoint" && flag != "host" && flag != "port")
      args += " --" + flag + " " + value;
  }
  ServerProcess server(args);
  httplib::Client client("127.0.0.1", server.port());
  for (const char* path : {"/ready", "/health"}) {
    auto r = client.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path;
  }
  auto models = client.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);         // the key still guards the API
  auto scraped = client.Get("/metrics");  // open without the key, as a scraper needs
  ASSERT_TRUE(scraped);
  EXPECT_EQ(scraped->status, 200);
  for (const std::string& m : metrics) {
    EXPECT_NE(scraped->body.find(m + "{model_name=\"" + flags.at("model-name") + "\""),
              std::string::npos)
        << m << "\n"
        << scraped->body;
  }
}

}  // namespace
}  // namespace tessera::testing
