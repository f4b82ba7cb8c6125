#include "cli/plot.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "testing/temp_dir.h"

namespace strata {
namespace {

using ::strata::testing::FreshDir;

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

int Count(const std::string& text, const std::regex& re) {
  return static_cast<int>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), re),
                    std::sregex_iterator()));
}

TEST(Plot, DrawsEachCurvePerWorkerIntoOnePage) {
  const std::string dir = FreshDir("run");
  std::string w0, w1;
  for (int s = 0; s < 20; ++s) {
    w0 += "{\"step\":" + std::to_string(s) +
          ",\"loss\":" + std::to_string(5.0 - 0.1 * s) +
          ",\"tokens_per_s\":1000" +
          (s % 10 == 9 ? ",\"eval_loss\":" + std::to_string(4.0 - 0.1 * s)
                       : std::string()) +
          "}\n";
    w1 += "{\"step\":" + std::to_string(s) +
          ",\"loss\":" + std::to_string(5.2 - 0.1 * s) +
          ",\"tokens_per_s\":" + std::to_string(900 + s) + "}\n";
  }
  Write(dir + "/metrics-0.jsonl", w0);
  // A line still being written when the page is drawn is left out.
  Write(dir + "/metrics-1.jsonl", w1 + "{\"step\":20,\"lo");
  Write(dir + "/other.jsonl", "not metrics\n");

  auto charts = ReadRunCharts(dir);
  ASSERT_TRUE(charts.ok()) << charts.status();
  ASSERT_EQ(charts->size(), 3u);
  EXPECT_EQ((*charts)[0].title, "Training loss");
  ASSERT_EQ((*charts)[0].series.size(), 2u);
  EXPECT_EQ((*charts)[0].series[0].name, "worker 0");
  EXPECT_EQ((*charts)[0].series[0].points.size(), 20u);
  EXPECT_EQ((*charts)[0].series[1].points.size(), 20u);
  EXPECT_DOUBLE_EQ((*charts)[0].series[0].points[0].first, 1);  // steps done
  EXPECT_DOUBLE_EQ((*charts)[0].series[0].points[0].second, 5.0);
  EXPECT_EQ((*charts)[1].series[0].points.size(), 2u);  // eval every 10
  EXPECT_TRUE((*charts)[1].series[1].points.empty());

  auto path = PlotRun(dir, "");
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir + "/plot.html");
  std::ifstream f(*path);
  const std::string page((std::istreambuf_iterator<char>(f)),
                         std::istreambuf_iterator<char>());
  EXPECT_EQ(Count(page, std::regex("<svg ")), 3);
  // Loss and throughput for both workers; held-out loss for rank 0 only.
  EXPECT_EQ(Count(page, std::regex("<polyline class=\"series\" "
                                   "data-name=\"worker 0\"")),
            3);
  EXPECT_EQ(Count(page, std::regex("<polyline class=\"series\" "
                                   "data-name=\"worker 1\"")),
            2);
  // 20 points in the first polyline, all inside the plot area.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(page, m, std::regex("points=\"([^\"]*)\"")));
  const std::string points = m[1];
  EXPECT_EQ(Count(points, std::regex("[0-9.]+,[0-9.]+ ")), 20);
  const std::regex point("([0-9.]+),([0-9.]+)");
  for (std::sregex_iterator it(points.begin(), points.end(), point), end;
       it != end; ++it) {
    const double x = std::stod((*it)[1]), y = std::stod((*it)[2]);
    EXPECT_GE(x, 64);
    EXPECT_LE(x, 640 - 16 + 0.1);
    EXPECT_GE(y, 32 - 0.1);
    EXPECT_LE(y, 320 - 40 + 0.1);
  }
  EXPECT_EQ(page.find("<script"), std::string::npos);  // self-contained
  EXPECT_NE(page.find("</html>"), std::string::npos);
}

// A switch of the job's consistency (--consistency auto) is marked at the
// first step any worker ran in the new mode, on every chart.
TEST(Plot, MarksEachConsistencySwitch) {
  const std::string dir = FreshDir("switches");
  auto lines = [](int switch_at) {
    std::string out;
    for (int s = 0; s < 30; ++s) {
      out += "{\"step\":" + std::to_string(s) + ",\"loss\":2" +
             ",\"tokens_per_s\":100,\"consistency\":\"" +
             (s < switch_at ? "bsp" : "ssp:2") + "\"}\n";
    }
    return out;
  };
  Write(dir + "/metrics-0.jsonl", lines(14));
  Write(dir + "/metrics-1.jsonl", lines(12));
  auto charts = ReadRunCharts(dir);
  ASSERT_TRUE(charts.ok()) << charts.status();
  for (const PlotChart& c : *charts) {
    ASSERT_EQ(c.marks.size(), 1u) << c.title;
    EXPECT_EQ(c.marks[0].x, 13);  // step 12 done: 13 steps
    EXPECT_EQ(c.marks[0].label, "to ssp:2");
  }
  const std::string svg = RenderSvg((*charts)[0]);
  EXPECT_EQ(Count(svg, std::regex("class=\"mark\"")), 1) << svg;
  EXPECT_NE(svg.find(">to ssp:2<"), std::string::npos) << svg;
  // Without the field: no marks.
  Write(dir + "/metrics-0.jsonl", "{\"step\":0,\"loss\":1}\n");
  Write(dir + "/metrics-1.jsonl", "{\"step\":0,\"loss\":1}\n");
  charts = ReadRunCharts(dir);
  ASSERT_TRUE(charts.ok());
  EXPECT_TRUE((*charts)[0].marks.empty());
}

TEST(Plot, NamesWhatIsWrong) {
  EXPECT_TRUE(absl::IsNotFound(ReadRunCharts("/nonexistent/run").status()));
  const std::string empty = FreshDir("empty");
  auto none = ReadRunCharts(empty);
  EXPECT_TRUE(absl::IsNotFound(none.status()));
  EXPECT_NE(none.status().message().find("no metrics-*.jsonl"),
            std::string::npos);
  const std::string bad = FreshDir("bad");
  Write(bad + "/metrics-0.jsonl", "{\"step\":0,\"loss\":1}\ngarbage\n{}\n");
  auto broken = ReadRunCharts(bad);
  EXPECT_TRUE(absl::IsInvalidArgument(broken.status()));
  EXPECT_NE(broken.status().message().find("metrics-0.jsonl:2"),
            std::string::npos)
      << broken.status();
}

TEST(Plot, AChartWithoutPointsSaysSo) {
  const std::string svg = RenderSvg(PlotChart{"Held-out loss", "loss", {}});
  EXPECT_NE(svg.find("no points recorded"), std::string::npos);
  // One point, or a flat line, still gets a drawable range.
  const std::string flat =
      RenderSvg(PlotChart{"t", "y", {{"w", {{1, 2.0}, {2, 2.0}}}}});
  EXPECT_EQ(flat.find("nan"), std::string::npos);
  EXPECT_EQ(flat.find("inf"), std::string::npos);
  EXPECT_NE(flat.find("<polyline"), std::string::npos);
}

}  // namespace
}  // namespace strata
