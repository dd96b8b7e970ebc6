// The Prometheus endpoint scraped over loopback while real processes transfer (tcp on lo, two
// domains): the served text passes the strict validator mid-transfer and after it, and the
// counters equal what the test moved — requests, WRs, bytes per domain and per peer, imms at the
// target (an agent process serving its own endpoint, turned on by FABRIC_LIB_METRICS_ADDR) —
// and, with a target killed mid-stream, the failures by error code equal the outcomes the
// callbacks saw and the peer shows unreachable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>

#include "support/bounds.h"
#include "support/outcomes.h"
#include "support/peer_agent.h"
#include "support/prometheus_text.h"

namespace fabric_lib::testing {
namespace {

using namespace std::chrono_literals;

const ProviderConfig kTcp2{"tcp_2dom", "tcp", "lo", 2, 0};

PromText scrape(const std::string& endpoint) {
  std::string error;
  std::optional<std::string> body = http_get(endpoint, "/metrics", &error);
  EXPECT_TRUE(body) << error;
  if (!body) return {};
  std::optional<PromText> parsed = parse_prometheus_text(*body, &error);
  EXPECT_TRUE(parsed) << error;
  return parsed ? *parsed : PromText{};
}

double value(const PromText& t, const std::string& name, const std::map<std::string, std::string>& match = {}) {
  return t.sum(name, match).value_or(-1);
}

// An agent whose engine serves its own endpoint on a free port (FABRIC_LIB_METRICS_ADDR, read by
// its TransferEngineBuilder::build()).
std::unique_ptr<AgentProcess> agent_with_endpoint(size_t region, std::string* endpoint) {
  setenv("FABRIC_LIB_METRICS_ADDR", "127.0.0.1:0", 1);
  auto agent = std::make_unique<AgentProcess>(kTcp2, region);
  unsetenv("FABRIC_LIB_METRICS_ADDR");
  *endpoint = agent->started() ? agent->call("metrics_endpoint") : "";
  return agent;
}

TEST(EndpointScrapeTest, CountersEqualWhatATransferBetweenProcessesMoved) {
  constexpr size_t kWrites = 300, kLength = 256 * 1024, kRegion = 8 << 20;
  Outcomes out(kWrites);
  std::string agent_endpoint;
  auto agent = agent_with_endpoint(kRegion, &agent_endpoint);
  ASSERT_TRUE(agent->started());
  ASSERT_EQ(agent_endpoint.rfind("127.0.0.1:", 0), 0u) << agent_endpoint;
  auto engine = kTcp2.builder().metrics_endpoint("127.0.0.1:0").build();
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const std::string endpoint = (*engine)->metrics_endpoint();
  std::vector<uint8_t> src(kRegion, 0x3c);
  auto src_reg = (*engine)->register_memory(src.data(), src.size(), Access::kLocalOnly);
  ASSERT_TRUE(src_reg.ok());
  const WriteRequest first{src_reg->handle, 0, agent->desc(), 0, kLength, 21};
  const uint64_t imms_each = imm_count_of(first, 2);
  ASSERT_EQ(imms_each, 2u);

  size_t scraped_mid = 0;
  for (size_t i = 0; i < kWrites; ++i) {
    const uint64_t off = (i * kLength) % kRegion;
    ASSERT_TRUE((*engine)->submit_write({src_reg->handle, off, agent->desc(), off, kLength, 21}, out.sink(i)).ok());
    if (i == kWrites / 2) {  // mid-transfer: valid text, counts that only grow up to the totals
      const PromText mid = scrape(endpoint);
      const double submitted = value(mid, "fabric_lib_requests_submitted_total", {{"op", "write"}});
      EXPECT_EQ(submitted, static_cast<double>(i + 1));
      const double done = value(mid, "fabric_lib_requests_completed_total", {{"op", "write"}});
      EXPECT_GE(done, 0);
      EXPECT_LE(done, submitted);
      EXPECT_LE(value(mid, "fabric_lib_peer_bytes_written_total"), static_cast<double>((i + 1) * kLength));
      scraped_mid = mid.families.size();
    }
  }
  EXPECT_GT(scraped_mid, 20u);
  ASSERT_TRUE(out.all_ok());
  EXPECT_EQ(agent->expect_exactly(21, imms_each * kWrites), "ok");

  const PromText t = scrape(endpoint);
  const std::string peer = agent->address().to_hex();
  EXPECT_EQ(value(t, "fabric_lib_requests_submitted_total", {{"op", "write"}}), kWrites);
  EXPECT_EQ(value(t, "fabric_lib_requests_completed_total", {{"op", "write"}}), kWrites);
  EXPECT_EQ(t.sum("fabric_lib_requests_failed_total"), std::nullopt) << "no failure series at all";
  EXPECT_EQ(value(t, "fabric_lib_wrs_posted_total", {{"op", "write"}}), kWrites * imms_each);
  EXPECT_EQ(value(t, "fabric_lib_wrs_completed_total", {{"op", "write"}}), kWrites * imms_each);
  EXPECT_EQ(value(t, "fabric_lib_wrs_posted_total"), static_cast<double>((*engine)->stats().wrs_posted));
  EXPECT_EQ(value(t, "fabric_lib_domain_bytes_written_total"), kWrites * kLength);
  EXPECT_EQ(value(t, "fabric_lib_domain_bytes_written_total", {{"domain", "1"}}), kWrites * kLength / 2);
  EXPECT_EQ(value(t, "fabric_lib_peer_bytes_written_total", {{"peer", peer}}), kWrites * kLength);
  EXPECT_EQ(value(t, "fabric_lib_peer_wrs_completed_total", {{"peer", peer}}), kWrites * imms_each);
  EXPECT_EQ(value(t, "fabric_lib_peer_inflight_wrs", {{"peer", peer}}), 0);
  EXPECT_EQ(value(t, "fabric_lib_domain_inflight_wrs"), 0);
  EXPECT_EQ(value(t, "fabric_lib_peer_health", {{"peer", peer}}), 0);
  EXPECT_EQ(value(t, "fabric_lib_request_latency_seconds_count", {{"op", "write"}}), kWrites);
  EXPECT_EQ(value(t, "fabric_lib_request_latency_seconds_bucket", {{"op", "write"}, {"le", "+Inf"}}), kWrites);
  EXPECT_EQ(value(t, "fabric_lib_peer_wr_latency_seconds_count", {{"peer", peer}}), kWrites * imms_each);
  EXPECT_GT(value(t, "fabric_lib_request_latency_seconds_sum", {{"op", "write"}}), 0);
  // The target's own endpoint counted every imm that arrived, and wrote nothing itself.
  const PromText at = scrape(agent_endpoint);
  EXPECT_EQ(value(at, "fabric_lib_domain_imms_received_total"), kWrites * imms_each);
  EXPECT_EQ(value(at, "fabric_lib_domain_imms_received_total", {{"domain", "0"}}), kWrites);
  EXPECT_EQ(value(at, "fabric_lib_wrs_posted_total"), 0);
  (*engine)->stop();
}

TEST(EndpointScrapeTest, AKilledPeersFailuresAreCountedByCode) {
  constexpr size_t kWrites = 1500, kLength = 64 * 1024, kRegion = 8 << 20;
  Outcomes out(kWrites);
  std::string agent_endpoint;
  auto agent = agent_with_endpoint(kRegion, &agent_endpoint);
  ASSERT_TRUE(agent->started());
  const std::string peer = agent->address().to_hex();
  auto engine = kTcp2.builder().stall_timeout(1s).peer_retry_interval(10s).metrics_endpoint("127.0.0.1:0").build();
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const std::string endpoint = (*engine)->metrics_endpoint();
  std::vector<uint8_t> src(kRegion, 0x77);
  auto src_reg = (*engine)->register_memory(src.data(), src.size(), Access::kLocalOnly);
  ASSERT_TRUE(src_reg.ok());
  for (size_t i = 0; i < kWrites; ++i) {
    const uint64_t off = (i * kLength) % kRegion;
    ASSERT_TRUE((*engine)->submit_write({src_reg->handle, off, agent->desc(), off, kLength, 31}, out.sink(i)).ok());
    if (i == kWrites / 3) {
      ASSERT_TRUE(out.wait_until(100, bounds::kRequests));
      agent->kill_now();
    }
  }
  ASSERT_TRUE(out.wait_all(bounds::kRequests)) << out.finished.load() << " of " << kWrites;
  out.expect_exactly_once();
  ASSERT_EQ((*engine)->stats().groups_abandoned, 0u) << "tcp does not get stuck inside the provider";
  const PromText t = scrape(endpoint);
  const std::map<ErrorCode, size_t> codes = out.codes();
  size_t failed = 0;
  for (const auto& [code, n] : codes) {
    if (code == ErrorCode::kOk) {
      EXPECT_EQ(value(t, "fabric_lib_requests_completed_total", {{"op", "write"}}), n);
      continue;
    }
    failed += n;
    const std::string name(error_code_name(code));
    EXPECT_EQ(value(t, "fabric_lib_requests_failed_total", {{"op", "write"}, {"code", name}}), n) << name;
  }
  EXPECT_GT(failed, 0u) << "the kill failed nothing";
  EXPECT_EQ(value(t, "fabric_lib_requests_failed_total"), failed) << "no code the callbacks did not see";
  EXPECT_GE(out.count(ErrorCode::kOk), 100u);
  EXPECT_EQ(value(t, "fabric_lib_requests_submitted_total", {{"op", "write"}}), kWrites);
  // Every OK request's bytes landed; failed ones may have moved some of theirs.
  EXPECT_GE(value(t, "fabric_lib_peer_bytes_written_total", {{"peer", peer}}), out.count(ErrorCode::kOk) * kLength);
  EXPECT_EQ(value(t, "fabric_lib_peer_health", {{"peer", peer}}), 2) << "unreachable";
  EXPECT_EQ(value(t, "fabric_lib_peer_paths_up", {{"peer", peer}}), 0);
  EXPECT_EQ(value(t, "fabric_lib_peer_inflight_wrs", {{"peer", peer}}), 0);
  EXPECT_EQ(value(t, "fabric_lib_peer_unreachable_total", {{"peer", peer}}), 1);
  EXPECT_GE(value(t, "fabric_lib_peer_path_failures_total", {{"peer", peer}}), 1);
  EXPECT_EQ(value(t, "fabric_lib_health_events_total", {{"event", "peer_unreachable"}}), 1);
  // Posted = completed + failed for the peer's WRs once nothing is in flight.
  EXPECT_EQ(value(t, "fabric_lib_peer_wrs_posted_total", {{"peer", peer}}),
            value(t, "fabric_lib_peer_wrs_completed_total", {{"peer", peer}}) +
                value(t, "fabric_lib_peer_wrs_failed_total", {{"peer", peer}}));
  (*engine)->stop();
}

}  // namespace
}  // namespace fabric_lib::testing
