// Trace contexts and sampling: the W3C Trace Context and X-Ray header formats, the
// parent-based ratio sampler, the bounded export queue.
#include "sluice/tracing.hpp"

#include <gtest/gtest.h>

#include <thread>

#include "support/process.hpp"
#include "tracing/http_post.hpp"

using namespace sluice::tracing;
using namespace std::chrono_literals;

TEST(TraceContext, ReadsAndWritesW3cTraceparent) {
  // The specification's example.
  const auto c = parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                                   "rojo=00f067aa0ba902b7");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->trace_id_hex(), "0af7651916cd43dd8448eb211c80319c");
  EXPECT_EQ(c->span_id_hex(), "b7ad6b7169203331");
  EXPECT_TRUE(c->sampled);
  EXPECT_EQ(c->trace_state, "rojo=00f067aa0ba902b7");
  EXPECT_EQ(format_traceparent(*c), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  EXPECT_FALSE(
      parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")->sampled);
  // Other flags than sampled are read past.
  EXPECT_TRUE(
      parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03")->sampled);
  // A later version: its first four fields, more may follow.
  EXPECT_TRUE(parse_traceparent("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra"));
  for (const char* bad : {
           "",
           "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",        // uppercase
           "00-00000000000000000000000000000000-b7ad6b7169203331-01",        // zero trace id
           "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",        // zero span id
           "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",        // version ff
           "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",  // 00 with more
           "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",         // short trace id
           "00_0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331_01",
           "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333g-01",
       })
    EXPECT_FALSE(parse_traceparent(bad)) << bad;
  // A tracestate longer than W3C allows is not passed on.
  EXPECT_EQ(parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                              std::string(600, 'a'))
                ->trace_state,
            "");
}

TEST(TraceContext, ReadsAndWritesXRaysAwsTraceHeader) {
  const auto c = parse_aws_trace_header(
      "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->trace_id_hex(), "5759e988bd862e3fe1be46a994272793");
  EXPECT_EQ(c->span_id_hex(), "53995c3f42cd8ad8");
  EXPECT_TRUE(c->sampled);
  EXPECT_EQ(format_aws_trace_header(*c),
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1");
  // Fields in any order, with spaces, Lineage and others ignored; unsampled.
  const auto d = parse_aws_trace_header(
      " Sampled=0 ; Lineage=a87bd80c:0 ;Parent=53995c3f42cd8ad8; Root=1-5759e988-"
      "bd862e3fe1be46a994272793");
  ASSERT_TRUE(d);
  EXPECT_FALSE(d->sampled);
  // The same trace as W3C says it.
  EXPECT_EQ(format_traceparent(*c), "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01");
  for (const char* bad : {
           "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1",  // no parent: nothing to join
           "Parent=53995c3f42cd8ad8;Sampled=1",
           "Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
           "Root=1-5759e988bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
           "Root=1-5759e988-bd862e3fe1be46a99427279z;Parent=53995c3f42cd8ad8",
           "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f",
       })
    EXPECT_FALSE(parse_aws_trace_header(bad)) << bad;
}

TEST(TraceContext, CurrentIsScopedToTheThread) {
  EXPECT_EQ(current(), nullptr);
  const auto c = *parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  {
    ScopedContext scope(&c);
    EXPECT_EQ(current(), &c);
    std::thread([] { EXPECT_EQ(current(), nullptr); }).join();
  }
  EXPECT_EQ(current(), nullptr);
}

TEST(Tracer, SamplesRootsByRatioAndFollowsAParentsDecision) {
  TracerOptions options;
  options.otlp_endpoint = "http://127.0.0.1:" + std::to_string(sluice::test::free_port());
  options.sampling_ratio = 0.25;
  auto tracer = Tracer::make(options);
  int sampled = 0;
  for (int i = 0; i < 20000; ++i) {
    auto span = tracer->start_span("root", SpanKind::internal, nullptr);
    EXPECT_TRUE(span.context().valid());
    EXPECT_EQ(span.recording(), span.context().sampled);
    sampled += span.context().sampled;
  }
  EXPECT_NEAR(sampled, 5000, 300);  // 0.25 of 20,000, well within 4 standard deviations
  auto parent = *parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  for (int i = 0; i < 100; ++i) {
    auto child = tracer->start_span("child", SpanKind::consumer, &parent);
    EXPECT_TRUE(child.recording());
    EXPECT_EQ(child.context().trace_id, parent.trace_id);
    EXPECT_NE(child.context().span_id, parent.span_id);
  }
  parent.sampled = false;
  auto unsampled = tracer->start_span("child", SpanKind::consumer, &parent);
  EXPECT_FALSE(unsampled.recording());
  EXPECT_EQ(unsampled.context().trace_id, parent.trace_id) << "passed on all the same";
  // A batch is recorded when any message it carries is.
  options.sampling_ratio = 0;
  auto never = Tracer::make(options);
  EXPECT_FALSE(never->start_linked_span("INSERT t", SpanKind::client, {{parent, {}}}).recording());
  parent.sampled = true;
  EXPECT_TRUE(never->start_linked_span("INSERT t", SpanKind::client, {{parent, {}}}).recording());
}

TEST(Tracer, WithoutAnEndpointItRecordsNothingButContextsStillPassOn) {
  auto tracer = Tracer::make({});
  auto span = tracer->start_span("x", SpanKind::internal, nullptr);
  EXPECT_FALSE(span.recording());
  EXPECT_TRUE(span.context().valid());
  EXPECT_EQ(tracer->stats().spans_started, 0u);
}

TEST(Tracer, AFullQueueDropsAndCountsAndNeverBlocks) {
  TracerOptions options;
  options.otlp_endpoint = "http://127.0.0.1:" + std::to_string(sluice::test::free_port());
  options.max_queue_spans = 10;
  options.max_export_batch = 1000;  // nothing leaves before the shutdown
  options.export_interval = std::chrono::hours(1);
  auto tracer = Tracer::make(options);
  const auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) tracer->start_span("s", SpanKind::internal, nullptr).end();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
  EXPECT_EQ(tracer->stats().spans_dropped, 990u);
  tracer->shutdown(2s);  // the 10 queued go to a closed port: dropped too
  const auto s = tracer->stats();
  EXPECT_EQ(s.spans_started, 1000u);
  EXPECT_EQ(s.spans_dropped, 1000u);
  EXPECT_EQ(s.spans_exported, 0u);
  EXPECT_EQ(s.export_failures, 1u);
}

TEST(Tracer, ValidatesItsOptions) {
  auto message = [](TracerOptions o) {
    try {
      validate(o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  TracerOptions o;
  o.sampling_ratio = 1.5;
  EXPECT_EQ(message(o), "sampling_ratio: got 1.500000, expected a number from 0 to 1");
  o = {};
  o.otlp_endpoint = "grpc://collector:4317";
  EXPECT_NE(message(o).find("otlp_endpoint: 'grpc://collector:4317' is not an http:// or https://"),
            std::string::npos);
  o.otlp_endpoint = "http://collector:99999";
  EXPECT_NE(message(o).find("the port is not a number from 1 to 65535"), std::string::npos);
  o.otlp_endpoint = "https://[::1]:4318/prefix";
  EXPECT_EQ(message(o), "");
  // RFC 3986: the scheme in any case, a query without a path.
  for (const char* url : {"HTTP://collector:4318", "Https://c:4318", "http://c:4318?tenant=a",
                          "http://c:4318/otlp?tenant=a#frag"}) {
    o.otlp_endpoint = url;
    EXPECT_EQ(message(o), "") << url;
  }
  // User information is refused, a '?' in it too (it would pass for a query).
  for (const char* url : {"http://user:pw@c:4318", "http://tok?en@c:4318", "http://u:p?w@c/x"}) {
    o.otlp_endpoint = url;
    EXPECT_NE(message(o).find("has user information"), std::string::npos) << url;
  }
  o.otlp_endpoint = "http://c:4318/v1/traces?tenant=a";
  EXPECT_NE(message(o).find("ends in /v1/traces"), std::string::npos);
  // The traces signal's own URL where the base is meant: refused, not posted to twice.
  for (const char* signal_url : {"http://collector:4318/v1/traces", "http://c:4318/v1/traces/"}) {
    o.otlp_endpoint = signal_url;
    EXPECT_NE(message(o).find("ends in /v1/traces; give the collector's base URL"),
              std::string::npos)
        << signal_url;
  }
}

TEST(Tracer, AnEndpointsSchemeIsCaseInsensitiveAndItsQueryNeedsNoPath) {
  const auto upper = Endpoint::parse("HTTPS://collector:4318");
  EXPECT_TRUE(upper.tls);
  EXPECT_EQ(upper.host, "collector");
  EXPECT_EQ(upper.target, "/");
  const auto query = Endpoint::parse("http://collector:4318?tenant=a#x");
  EXPECT_FALSE(query.tls);
  EXPECT_EQ(query.host, "collector");
  EXPECT_EQ(query.port, "4318");
  EXPECT_EQ(query.target, "/?tenant=a");
}

TEST(TraceContext, ATracestateThatBreaksW3csRulesIsDroppedAndTheTraceparentKept) {
  const std::string traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  EXPECT_EQ(
      parse_traceparent(traceparent, "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE,,tenant@vendor=x")
          ->trace_state,
      "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE,,tenant@vendor=x");
  for (const std::string bad :
       {"bad key=1", "Upper=1", "k=v\n", "k=\x01", "k=a,=b", "k==b", "k=", "a@b@c=1"}) {
    const auto c = parse_traceparent(traceparent, bad);
    ASSERT_TRUE(c) << bad;
    EXPECT_EQ(c->trace_state, "") << bad;
  }
  std::string many;
  for (int i = 0; i < 33; ++i) many += "k" + std::to_string(i) + "=v,";
  EXPECT_EQ(parse_traceparent(traceparent, many)->trace_state, "") << "33 members";
}
