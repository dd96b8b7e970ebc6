// In-process tests of the metrics: histogram buckets and quantiles, the applications' registry,
// the engine's counters after a transfer between two engines of this process, metrics off, the
// Prometheus families through prometheus-cpp's serializer, and the strict validator itself.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "exporter/metric_families.h"
#include "fabric_lib/fabric_lib.h"
#include "support/bounds.h"
#include "support/prometheus_text.h"

namespace fabric_lib::testing {
namespace {

using namespace std::chrono_literals;

LatencyHistogram observed(std::initializer_list<int64_t> ns) {
  MetricsRegistry registry;
  Result<MetricHistogram> h = registry.histogram("t_seconds", "test");
  EXPECT_TRUE(h.ok());
  for (int64_t v : ns) h->observe(std::chrono::nanoseconds(v));
  return registry.snapshot().at(0).histogram;
}

TEST(LatencyHistogramTest, BucketsArePowersOfTwoMicroseconds) {
  EXPECT_DOUBLE_EQ(LatencyHistogram::upper_bound_seconds(0), 1e-6);
  EXPECT_DOUBLE_EQ(LatencyHistogram::upper_bound_seconds(3), 8e-6);
  EXPECT_TRUE(std::isinf(LatencyHistogram::upper_bound_seconds(LatencyHistogram::kBuckets - 1)));
  // Edges: <= 1 us in bucket 0, (1, 2] us in 1, (2, 4] us in 2, past 2^23 us in the last.
  LatencyHistogram h = observed({0, 1000, 1001, 2000, 2001, 4000, 8'388'608'000, 8'388'608'001, 60'000'000'000});
  EXPECT_EQ(h.buckets[0], 2u);
  EXPECT_EQ(h.buckets[1], 2u);
  EXPECT_EQ(h.buckets[2], 2u);
  EXPECT_EQ(h.buckets[23], 1u);
  EXPECT_EQ(h.buckets[24], 2u);
  EXPECT_EQ(h.count, 9u);
  EXPECT_NEAR(h.sum_seconds, (1000 + 1001 + 2000 + 2001 + 4000 + 8'388'608'000.0 * 2 + 1 + 60e9) * 1e-9, 1e-6);
}

TEST(LatencyHistogramTest, QuantilesInterpolateInsideTheirBucket) {
  // 100 samples in (16, 32] us: the median is halfway through that bucket.
  std::vector<int64_t> v(100, 20'000);
  MetricsRegistry registry;
  MetricHistogram h = *registry.histogram("q_seconds", "q");
  for (int64_t x : v) h.observe(std::chrono::nanoseconds(x));
  h.observe(std::chrono::nanoseconds(2'000'000));  // one outlier in (1024, 2048] us
  const LatencyHistogram s = registry.snapshot()[0].histogram;
  EXPECT_NEAR(s.quantile(0.5), 16e-6 + 0.505 * 16e-6, 1e-9);
  EXPECT_GT(s.quantile(1.0), 1.024e-3);
  EXPECT_LE(s.quantile(1.0), 2.048e-3);
  EXPECT_EQ(LatencyHistogram{}.quantile(0.99), 0);
}

TEST(MetricsRegistryTest, ValidatesNamesAndReturnsTheSameSeries) {
  MetricsRegistry r;
  EXPECT_EQ(r.counter("9bad", "x").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.counter("bad-name", "x").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.counter("ok_total", "x", {{"__reserved", "v"}}).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.counter("ok_total", "x", {{"a", "1"}, {"a", "2"}}).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.histogram("h_seconds", "x", {{"le", "1"}}).status().code(), ErrorCode::kInvalidArgument);
  MetricCounter a = *r.counter("app_requests_total", "requests", {{"state", "done"}});
  MetricCounter b = *r.counter("app_requests_total", "requests", {{"state", "done"}});
  MetricCounter c = *r.counter("app_requests_total", "requests", {{"state", "failed"}});
  a.add(2);
  b.add(3);
  c.add();
  EXPECT_EQ(a.value(), 5u);
  EXPECT_EQ(c.value(), 1u);
  EXPECT_EQ(r.gauge("app_requests_total", "requests").status().code(), ErrorCode::kInvalidArgument) << "other kind";
  EXPECT_EQ(r.counter("app_requests_total", "other help", {{"state", "x"}}).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.counter("app_requests_total", "requests", {{"phase", "x"}}).status().code(), ErrorCode::kInvalidArgument);
  MetricGauge g = *r.gauge("app_depth", "depth");
  g.set(4);
  g.add(-1.5);
  const std::vector<AppMetric> snap = r.snapshot();
  ASSERT_EQ(snap.size(), 3u);
  EXPECT_EQ(snap[0].value, 5);
  EXPECT_EQ(snap[1].value, 1);
  EXPECT_EQ(snap[2].value, 2.5);
  MetricCounter none;  // belongs to no registry: ignores updates
  none.add(7);
  EXPECT_EQ(none.value(), 0u);
}

// Two engines of this process over tcp on lo, two domains each.
struct EnginePair {
  std::unique_ptr<TransferEngine> sender, receiver;
  std::vector<uint8_t> src, dst;
  MrRegistration src_reg, dst_reg;

  EnginePair(bool metrics_on, size_t bytes) : src(bytes, 0x5a), dst(bytes, 0) {
    auto b = TransferEngineBuilder().provider("tcp").interfaces({"lo"}).domains_per_group(2).metrics(metrics_on);
    sender = std::move(b.build()).value();
    receiver = std::move(b.build()).value();
    src_reg = *sender->register_memory(src.data(), src.size(), Access::kLocalOnly);
    dst_reg = *receiver->register_memory(dst.data(), dst.size(), Access::kRemoteWrite);
  }
  ~EnginePair() {
    sender->stop();
    receiver->stop();
  }
};

TEST(EngineMetricsTest, CountersEqualWhatAWriteBurstMoved) {
  constexpr size_t kWrites = 40, kLength = 256 * 1024;
  EnginePair p(true, kLength);
  WriteRequest w{p.src_reg.handle, 0, p.dst_reg.desc, 0, kLength, 11};
  const uint64_t imms_each = imm_count_of(w, 2);
  ASSERT_EQ(imms_each, 2u) << "256 KiB over 2 domains: two shards";
  CompletionCounter arrived, sent;
  ASSERT_TRUE(p.receiver->imms().expect(11, imms_each * kWrites, Completion::counter(arrived)).ok());
  for (size_t i = 0; i < kWrites; ++i) ASSERT_TRUE(p.sender->submit_write(w, Completion::counter(sent)).ok());
  ASSERT_TRUE(sent.wait_for(kWrites, bounds::kRequests));
  ASSERT_TRUE(arrived.wait_for(1, bounds::kRequests));
  EXPECT_EQ(sent.errors.load(), 0u);

  const Metrics m = p.sender->metrics();
  const OpMetrics& op = m.op(OpType::kWrite);
  EXPECT_TRUE(m.detailed);
  EXPECT_EQ(op.requests_submitted, kWrites);
  EXPECT_EQ(op.requests_completed, kWrites);
  EXPECT_EQ(op.requests_failed_total(), 0u);
  EXPECT_EQ(op.wrs_posted, kWrites * imms_each);
  EXPECT_EQ(op.wrs_completed, kWrites * imms_each);
  EXPECT_EQ(op.request_latency.count, kWrites);
  EXPECT_EQ(op.submit_to_post.count, kWrites);
  EXPECT_GT(op.request_latency.sum_seconds, 0);
  EXPECT_EQ(m.bytes_written(), kWrites * kLength);
  ASSERT_EQ(m.domains.size(), 2u);
  EXPECT_EQ(m.domains[0].bytes_written, kWrites * kLength / 2) << "each shard is half";
  EXPECT_EQ(m.domains[0].inflight + m.domains[1].inflight, 0u);
  EXPECT_EQ(m.domains[0].name, "lo");
  ASSERT_EQ(m.peers.size(), 1u);
  EXPECT_EQ(m.peers[0].address, p.receiver->main_address());
  EXPECT_EQ(m.peers[0].bytes_written, kWrites * kLength);
  EXPECT_EQ(m.peers[0].wrs_completed, kWrites * imms_each);
  EXPECT_EQ(m.peers[0].wr_latency.count, kWrites * imms_each);
  EXPECT_EQ(m.peers[0].health, PeerHealth::kHealthy);
  EXPECT_EQ(m.peers[0].paths_up, 2u);
  for (const OpMetrics& other : m.ops) {
    if (other.op != OpType::kWrite) {
      EXPECT_EQ(other.requests_submitted + other.wrs_posted, 0u) << op_type_name(other.op);
    }
  }
  // The EngineStats of the same run agree (they are read from the same cells).
  const EngineStats st = p.sender->stats();
  EXPECT_EQ(st.requests_submitted, kWrites);
  EXPECT_EQ(st.requests_completed, kWrites);
  EXPECT_EQ(st.wrs_posted, op.wrs_posted);
  EXPECT_EQ(p.receiver->metrics().imms_received(), kWrites * imms_each);
  EXPECT_EQ(p.receiver->stats().imms_received, kWrites * imms_each);
}

// Paged writes over ipc post their pages as runs (one record per run, Domain::post_writes) and
// the ipc domain may report a run's pages in one event: the counters still count every WR.
TEST(EngineMetricsTest, PagedRunsCountEveryPage) {
  constexpr size_t kRequests = 20, kPages = 64, kPage = 4096;
  auto b = TransferEngineBuilder().provider("ipc").domains_per_group(1);
  auto sender = std::move(b.build()).value();
  auto receiver = std::move(b.build()).value();
  std::vector<uint8_t> src(kPages * kPage), dst(kPages * kPage, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  MrRegistration s = *sender->register_memory(src.data(), src.size(), Access::kLocalOnly);
  MrRegistration d = *receiver->register_memory(dst.data(), dst.size(), Access::kRemoteWrite);
  PagedWriteRequest w;
  w.src = s.handle;
  w.dst = d.desc;
  w.page_length = kPage;
  w.src_stride = w.dst_stride = kPage;
  for (uint32_t i = 0; i < kPages; ++i) {
    w.src_pages.push_back(i);
    w.dst_pages.push_back((i * 5) % kPages);
  }
  w.imm = 21;
  ASSERT_EQ(imm_count_of(w, 1), kPages);
  CompletionCounter arrived, sent;
  ASSERT_TRUE(receiver->imms().expect(21, kPages * kRequests, Completion::counter(arrived)).ok());
  for (size_t i = 0; i < kRequests; ++i) ASSERT_TRUE(sender->submit_paged_writes(w, Completion::counter(sent)).ok());
  ASSERT_TRUE(sent.wait_for(kRequests, bounds::kRequests));
  ASSERT_TRUE(arrived.wait_for(1, bounds::kRequests));
  EXPECT_EQ(sent.errors.load(), 0u);
  for (uint32_t i = 0; i < kPages; ++i) {
    ASSERT_EQ(std::memcmp(dst.data() + (i * 5) % kPages * kPage, src.data() + i * kPage, kPage), 0) << "page " << i;
  }
  const Metrics m = sender->metrics();
  const OpMetrics& op = m.op(OpType::kPagedWrite);
  EXPECT_EQ(op.requests_completed, kRequests);
  EXPECT_EQ(op.wrs_posted, kRequests * kPages);
  EXPECT_EQ(op.wrs_completed, kRequests * kPages);
  EXPECT_EQ(m.bytes_written(), kRequests * kPages * kPage);
  ASSERT_EQ(m.peers.size(), 1u);
  EXPECT_EQ(m.peers[0].wrs_completed, kRequests * kPages);
  EXPECT_EQ(m.peers[0].wr_latency.count, kRequests * kPages) << "one latency sample per WR";
  EXPECT_EQ(m.domains[0].inflight, 0u);
  EXPECT_EQ(receiver->metrics().imms_received(), kRequests * kPages);
  sender->stop();
  receiver->stop();
}

TEST(EngineMetricsTest, OffKeepsCountersButNoPeersOrHistograms) {
  constexpr size_t kWrites = 10, kLength = 4096;
  EnginePair p(false, kLength);
  CompletionCounter sent;
  for (size_t i = 0; i < kWrites; ++i) {
    ASSERT_TRUE(p.sender->submit_write({p.src_reg.handle, 0, p.dst_reg.desc, 0, kLength, std::nullopt}, Completion::counter(sent)).ok());
  }
  ASSERT_TRUE(sent.wait_for(kWrites, bounds::kRequests));
  const Metrics m = p.sender->metrics();
  EXPECT_FALSE(m.detailed);
  EXPECT_EQ(m.op(OpType::kWrite).requests_completed, kWrites);
  EXPECT_EQ(m.bytes_written(), kWrites * kLength);
  EXPECT_TRUE(m.peers.empty());
  EXPECT_EQ(m.op(OpType::kWrite).request_latency.count, 0u);
}

TEST(EngineMetricsTest, FamiliesSerializeToValidText) {
  EnginePair p(true, 4096);
  MetricCounter app = *p.sender->metrics_registry().counter("app_things_total", "things", {{"kind", "a\"b\\c\nd"}});
  app.add(3);
  MetricHistogram h = *p.sender->metrics_registry().histogram("app_step_seconds", "step", {{"stage", "x"}});
  h.observe(3ms);
  // An app series named like an engine family is left out, not served twice.
  p.sender->metrics_registry().counter("fabric_lib_requests_submitted_total", "clash")->add(1);
  CompletionCounter sent;
  ASSERT_TRUE(p.sender->submit_write({p.src_reg.handle, 0, p.dst_reg.desc, 0, 4096, 5}, Completion::counter(sent)).ok());
  ASSERT_TRUE(sent.wait_for(1, bounds::kRequests));
  const std::string text = prometheus::TextSerializer().Serialize(exporter::metric_families(p.sender->metrics()));
  std::string error;
  std::optional<PromText> parsed = parse_prometheus_text(text, &error);
  ASSERT_TRUE(parsed) << error << "\n" << text;
  EXPECT_EQ(parsed->sum("fabric_lib_requests_submitted_total", {{"op", "write"}}), 1);
  EXPECT_EQ(parsed->sum("fabric_lib_requests_submitted_total"), 1) << "the clashing app series is not there";
  EXPECT_EQ(parsed->sum("fabric_lib_request_latency_seconds_count", {{"op", "write"}}), 1);
  EXPECT_EQ(parsed->sum("fabric_lib_request_latency_seconds_bucket", {{"op", "write"}, {"le", "+Inf"}}), 1);
  EXPECT_EQ(parsed->sum("fabric_lib_peer_bytes_written_total", {{"peer", p.receiver->main_address().to_hex()}}), 4096);
  EXPECT_EQ(parsed->sum("app_things_total", {{"kind", "a\"b\\c\nd"}}), 3) << "escaped and read back";
  EXPECT_EQ(parsed->sum("app_step_seconds_count", {{"stage", "x"}}), 1);
  EXPECT_EQ(parsed->family("fabric_lib_peer_health")->type, "gauge");
}

TEST(PrometheusTextValidatorTest, RejectsWhatIsNotTheFormat) {
  std::string error;
  const std::string good =
      "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 3\n"
      "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.5\nh_count 2\n";
  ASSERT_TRUE(parse_prometheus_text(good, &error)) << error;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"a_total 1\n", "no TYPE"},
      {"# TYPE a counter\na 1", "no final newline"},
      {"# TYPE a counter\na 1\na 2\n", "repeated series"},
      {"# TYPE a counter\na{x=\"1\\q\"} 1\n", "bad escape"},
      {"# TYPE a counter\na{x=1} 1\n", "unquoted value"},
      {"# TYPE a counter\na one\n", "bad value"},
      {"# TYPE a counter\na -1\n", "negative counter"},
      {"# TYPE a counter\n# TYPE a gauge\na 1\n", "second TYPE"},
      {"# TYPE a counter\n# TYPE b counter\na 1\nb 1\na{y=\"2\"} 1\n", "not contiguous"},
      {"# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", "not cumulative"},
      {"# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", "no +Inf"},
      {"# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 2\n", "+Inf != count"},
      {"# TYPE a wat\na 1\n", "unknown type"},
  };
  for (const auto& [text, why] : bad) EXPECT_FALSE(parse_prometheus_text(text, &error)) << why;
}

TEST(MetricsEndpointTest, ServesOnAChosenPortAndRefusesBadAddresses) {
  auto engine = TransferEngineBuilder().provider("tcp").interfaces({"lo"}).metrics_endpoint("127.0.0.1:0").build();
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const std::string address = (*engine)->metrics_endpoint();
  ASSERT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address;
  EXPECT_NE(address, "127.0.0.1:0") << "the bound port is reported";
  std::string error, content_type;
  std::optional<std::string> body = http_get(address, "/metrics", &error, &content_type);
  ASSERT_TRUE(body) << error;
  EXPECT_NE(content_type.find("text/plain"), std::string::npos) << content_type;
  ASSERT_TRUE(parse_prometheus_text(*body, &error)) << error;
  // The same port again cannot be bound; malformed addresses are refused before that.
  auto twice = TransferEngineBuilder().provider("tcp").interfaces({"lo"}).metrics_endpoint(address).build();
  EXPECT_EQ(twice.status().code(), ErrorCode::kInvalidArgument);
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", ":9464", "127.0.0.1:99999", "127.0.0.1:12ab"}) {
    EXPECT_EQ(TransferEngineBuilder().provider("tcp").interfaces({"lo"}).metrics_endpoint(bad).build().status().code(),
              ErrorCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(TransferEngineBuilder().provider("tcp").interfaces({"lo"}).build().value()->metrics_endpoint(), "");
  (*engine)->stop();
  EXPECT_TRUE(http_get(address, "/metrics", &error)) << "served after stop() too: " << error;
}

}  // namespace
}  // namespace fabric_lib::testing
