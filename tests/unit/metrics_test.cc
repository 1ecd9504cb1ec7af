// metrics: Prometheus text exposition.
#include "metrics/metrics.h"

#include <gtest/gtest.h>

namespace kvgate {
namespace {

TEST(Metrics, CountersAndHistogramsRenderPrometheusText) {
  metrics::CounterFamily c{"x_total", "X.", {"route", "status"}};
  c.Add({"/v1/a\"b", "200"});
  c.Add({"/v1/a\"b", "200"}, 2);
  std::string out;
  c.Render(out);
  EXPECT_EQ(out,
            "# HELP x_total X.\n# TYPE x_total "
            "counter\nx_total{route=\"/v1/a\\\"b\",status=\"200\"} 3\n");
  metrics::HistogramFamily h{"lat_seconds", "L.", {}, {0.1, 1}};
  h.Observe({}, 0.05);
  h.Observe({}, 0.5);
  h.Observe({}, 5);
  out.clear();
  h.Render(out);
  EXPECT_NE(out.find("lat_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("lat_seconds_bucket{le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(out.find("lat_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(out.find("lat_seconds_count 3\n"), std::string::npos);
}

TEST(Metrics, GaugesSayGaugeAndKeepTheLastValue) {
  metrics::CounterFamily g{"queue_depth", "Q.", {}, true};
  g.Set({}, 4);
  g.Set({}, 2);
  std::string out;
  g.Render(out);
  EXPECT_EQ(out, "# HELP queue_depth Q.\n# TYPE queue_depth gauge\nqueue_depth 2\n");
}

}  // namespace
}  // namespace kvgate
