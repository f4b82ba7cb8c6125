#include "cli/plot.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

constexpr double kWidth = 640, kHeight = 320;
constexpr double kLeft = 64, kRight = 16, kTop = 32, kBottom = 40;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Tick positions covering [lo, hi] at a step of 1, 2 or 5 times a power of
// ten, about five of them.
std::vector<double> Ticks(double lo, double hi) {
  const double raw = (hi - lo) / 5;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9;
       t += step) {
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  }
  return ticks;
}

std::string TickLabel(double v) { return absl::StrFormat("%.4g", v); }

}  // namespace

std::string RenderSvg(const PlotChart& chart) {
  double x0 = HUGE_VAL, x1 = -HUGE_VAL, y0 = HUGE_VAL, y1 = -HUGE_VAL;
  for (const PlotSeries& s : chart.series) {
    for (const auto& [x, y] : s.points) {
      x0 = std::min(x0, x), x1 = std::max(x1, x);
      y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" "
      "viewBox=\"0 0 %g %g\" role=\"img\" aria-label=\"%s\">\n"
      "<text x=\"%g\" y=\"20\" class=\"title\">%s</text>\n",
      kWidth, kHeight, kWidth, kHeight, Escape(chart.title), kLeft,
      Escape(chart.title));
  if (x0 > x1) {
    return absl::StrCat(svg,
                        "<text x=\"64\" y=\"160\">no points recorded</text>\n"
                        "</svg>\n");
  }
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) y0 -= 0.5 * std::max(1.0, std::abs(y0)), y1 = 2 * y1 - y0;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return kTop + (y1 - y) / (y1 - y0) * ph; };
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" "
                        "class=\"frame\"/>\n",
                        kLeft, kTop, pw, ph);
  for (double t : Ticks(x0, x1)) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" "
                          "class=\"grid\"/><text x=\"%.1f\" y=\"%g\" "
                          "class=\"tick\" text-anchor=\"middle\">%s</text>\n",
                          px(t), kTop, px(t), kTop + ph, px(t), kTop + ph + 14,
                          TickLabel(t));
  }
  for (double t : Ticks(y0, y1)) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" "
                          "class=\"grid\"/><text x=\"%g\" y=\"%.1f\" "
                          "class=\"tick\" text-anchor=\"end\">%s</text>\n",
                          kLeft, py(t), kLeft + pw, py(t), kLeft - 4, py(t) + 4,
                          TickLabel(t));
  }
  absl::StrAppendFormat(&svg,
                        "<text x=\"%g\" y=\"%g\" class=\"tick\" "
                        "text-anchor=\"middle\">step</text>\n",
                        kLeft + pw / 2, kHeight - 6);
  absl::StrAppendFormat(
      &svg,
      "<text x=\"14\" y=\"%g\" class=\"tick\" text-anchor=\"middle\" "
      "transform=\"rotate(-90 14 %g)\">%s</text>\n",
      kTop + ph / 2, kTop + ph / 2, Escape(chart.y_label));
  int drawn = 0;
  for (const PlotSeries& s : chart.series) {
    if (s.points.empty()) continue;
    const char* color = kColors[drawn % std::size(kColors)];
    std::string points;
    for (const auto& [x, y] : s.points) {
      absl::StrAppendFormat(&points, "%.1f,%.1f ", px(x), py(y));
    }
    absl::StrAppendFormat(&svg,
                          "<polyline class=\"series\" data-name=\"%s\" "
                          "stroke=\"%s\" points=\"%s\"/>\n",
                          Escape(s.name), color, points);
    absl::StrAppendFormat(&svg,
                          "<text x=\"%g\" y=\"%g\" class=\"legend\" "
                          "fill=\"%s\">%s</text>\n",
                          kLeft + pw - 4, kTop + 14 + 14 * drawn, color,
                          Escape(s.name));
    ++drawn;
  }
  for (const PlotMark& m : chart.marks) {
    if (m.x < x0 || m.x > x1) continue;
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" "
                          "y2=\"%g\" class=\"mark\"/><text x=\"%.1f\" "
                          "y=\"%g\" class=\"tick\">%s</text>\n",
                          px(m.x), kTop, px(m.x), kTop + ph, px(m.x) + 3,
                          kTop + 12, Escape(m.label));
  }
  return svg + "</svg>\n";
}

absl::StatusOr<std::vector<PlotChart>> ReadRunCharts(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, " is not a directory"));
  }
  std::map<std::string, fs::path> files;  // sorted by name
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (absl::StartsWith(name, "metrics-") && absl::EndsWith(name, ".jsonl")) {
      files[name.substr(8, name.size() - 8 - 6)] = e.path();
    }
  }
  if (files.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no metrics-*.jsonl in ", dir,
                     " (workers write them with --metrics; strata local "
                     "does in its --dir)"));
  }
  PlotChart loss{"Training loss", "loss", {}};
  PlotChart eval{"Held-out loss", "loss", {}};
  PlotChart speed{"Throughput", "tokens/s", {}};
  std::map<std::string, double> switches;  // mode -> the first step in it
  for (const auto& [name, path] : files) {
    const std::string label = absl::StrCat("worker ", name);
    PlotSeries l{label, {}}, e{label, {}}, t{label, {}};
    std::string last_mode;
    std::ifstream f(path);
    std::stringstream all;
    all << f.rdbuf();
    const std::string text = all.str();
    std::istringstream lines(text);
    std::string line;
    int n = 0;
    size_t consumed = 0;
    while (std::getline(lines, line)) {
      ++n;
      consumed += line.size() + 1;
      if (line.empty()) continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("step") ||
          !j["step"].is_number()) {
        if (consumed > text.size()) break;  // the last line, half written
        return absl::InvalidArgumentError(
            absl::StrCat(path.string(), ":", n,
                         ": not a metrics line (a JSON object with "
                         "a numeric \"step\")"));
      }
      const double step = j["step"].get<double>() + 1;  // steps done
      auto add = [&](PlotSeries& s, const char* key) {
        if (j.contains(key) && j[key].is_number()) {
          const double v = j[key].get<double>();
          if (std::isfinite(v)) s.points.push_back({step, v});
        }
      };
      add(l, "loss");
      add(e, "eval_loss");
      add(t, "tokens_per_s");
      if (j.contains("consistency") && j["consistency"].is_string()) {
        std::string mode = j["consistency"].get<std::string>();
        if (!last_mode.empty() && mode != last_mode) {
          auto [it, fresh] = switches.emplace(mode, step);
          if (!fresh) it->second = std::min(it->second, step);
        }
        last_mode = std::move(mode);
      }
    }
    loss.series.push_back(std::move(l));
    eval.series.push_back(std::move(e));
    speed.series.push_back(std::move(t));
  }
  for (PlotChart* c : {&loss, &eval, &speed}) {
    for (const auto& [mode, step] : switches) {
      c->marks.push_back({step, absl::StrCat("to ", mode)});
    }
  }
  return std::vector<PlotChart>{loss, eval, speed};
}

absl::StatusOr<std::string> PlotRun(const std::string& dir, std::string out) {
  auto charts = ReadRunCharts(dir);
  if (!charts.ok()) return charts.status();
  if (out.empty()) out = dir + "/plot.html";
  std::string page = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<title>Strata run ",
      Escape(dir),
      "</title>\n<style>\n"
      "body{font-family:sans-serif;margin:24px;color:#222}\n"
      "svg{display:block;margin:12px 0}\n"
      ".title{font-size:15px;font-weight:bold}\n"
      ".tick{font-size:11px;fill:#555}\n"
      ".legend{font-size:12px;text-anchor:end}\n"
      ".frame{fill:none;stroke:#999}\n.grid{stroke:#eee}\n"
      ".series{fill:none;stroke-width:1.5}\n"
      ".mark{stroke:#888;stroke-dasharray:4 3}\n"
      "</style></head><body>\n<h1>Strata run</h1>\n<p>",
      Escape(dir), "</p>\n");
  for (const PlotChart& c : *charts) page += RenderSvg(c);
  page += "</body></html>\n";
  std::ofstream f(out, std::ios::trunc);
  f << page;
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", out));
  return out;
}

}  // namespace strata
