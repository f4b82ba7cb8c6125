#include "common/metrics.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/check.h"

namespace strata {
namespace {

bool ValidName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                       c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// Label values and help text escape backslash and newline; values also '"'.
std::string Escape(const std::string& s, bool quote) {
  std::string out;
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return absl::StrFormat("%.17g", v);
}

// {a="x",b="y"}, with `extra` (a histogram's le) last; "" when none.
std::string LabelText(
    const MetricLabels& labels,
    const std::pair<std::string, std::string>* extra = nullptr) {
  if (labels.empty() && extra == nullptr) return "";
  std::string out = "{";
  auto add = [&out](const std::string& k, const std::string& v) {
    if (out.size() > 1) out += ',';
    absl::StrAppend(&out, k, "=\"", Escape(v, true), "\"");
  };
  for (const auto& [k, v] : labels) add(k, v);
  if (extra != nullptr) add(extra->first, extra->second);
  return out + "}";
}

}  // namespace

void Counter::Add(double v) {
  if (v > 0) value_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  STRATA_CHECK(std::is_sorted(bounds_.begin(), bounds_.end()));
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i] = 0;
}

void Histogram::Observe(double v) {
  const size_t i =
      std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

std::vector<double> Histogram::LatencyBounds() {
  std::vector<double> b;
  for (double s = 1e-4; s < 120; s *= 2) b.push_back(s);
  return b;
}

Metrics::Family& Metrics::FamilyFor(const std::string& name,
                                    const std::string& help, Type type,
                                    const MetricLabels& labels) {
  STRATA_CHECK(ValidName(name));
  for (const auto& [k, v] : labels) {
    STRATA_CHECK(ValidName(k) && k != "le");
  }
  for (auto& f : families_) {
    if (f->name != name) continue;
    STRATA_CHECK(f->type == type);
    for (const Series& s : f->series) {
      STRATA_CHECK(s.labels != labels);
    }
    return *f;
  }
  families_.push_back(std::make_unique<Family>(Family{name, help, type, {}}));
  return *families_.back();
}

Counter& Metrics::AddCounter(const std::string& name, const std::string& help,
                             MetricLabels labels) {
  absl::MutexLock lock(&mu_);
  Family& f = FamilyFor(name, help, Type::kCounter, labels);
  Counter& c = counters_.emplace_back();
  f.series.push_back(Series{std::move(labels), &c, nullptr, nullptr, {}});
  return c;
}

Counter& Metrics::CounterFor(const std::string& name, const std::string& help,
                             const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  for (auto& f : families_) {
    if (f->name != name || f->type != Type::kCounter) continue;
    for (const Series& s : f->series) {
      if (s.labels == labels && s.counter != nullptr) return *s.counter;
    }
  }
  Family& f = FamilyFor(name, help, Type::kCounter, labels);
  Counter& c = counters_.emplace_back();
  f.series.push_back(Series{labels, &c, nullptr, nullptr, {}});
  return c;
}

Gauge& Metrics::AddGauge(const std::string& name, const std::string& help,
                         MetricLabels labels) {
  absl::MutexLock lock(&mu_);
  Family& f = FamilyFor(name, help, Type::kGauge, labels);
  Gauge& g = gauges_.emplace_back();
  f.series.push_back(Series{std::move(labels), nullptr, &g, nullptr, {}});
  return g;
}

Histogram& Metrics::AddHistogram(const std::string& name,
                                 const std::string& help,
                                 std::vector<double> bounds,
                                 MetricLabels labels) {
  absl::MutexLock lock(&mu_);
  Family& f = FamilyFor(name, help, Type::kHistogram, labels);
  Histogram& h =
      *histograms_.emplace_back(std::make_unique<Histogram>(std::move(bounds)));
  f.series.push_back(Series{std::move(labels), nullptr, nullptr, &h, {}});
  return h;
}

void Metrics::AddCounterFn(const std::string& name, const std::string& help,
                           std::function<double()> read, MetricLabels labels) {
  absl::MutexLock lock(&mu_);
  FamilyFor(name, help, Type::kCounter, labels)
      .series.push_back(Series{std::move(labels), nullptr, nullptr, nullptr,
                               std::move(read)});
}

void Metrics::AddGaugeFn(const std::string& name, const std::string& help,
                         std::function<double()> read, MetricLabels labels) {
  absl::MutexLock lock(&mu_);
  FamilyFor(name, help, Type::kGauge, labels)
      .series.push_back(Series{std::move(labels), nullptr, nullptr, nullptr,
                               std::move(read)});
}

std::string Metrics::Render() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& f : families_) {
    static constexpr const char* kTypes[] = {"counter", "gauge", "histogram"};
    absl::StrAppend(&out, "# HELP ", f->name, " ", Escape(f->help, false),
                    "\n# TYPE ", f->name, " ",
                    kTypes[static_cast<int>(f->type)], "\n");
    for (const Series& s : f->series) {
      if (s.histogram != nullptr) {
        const Histogram& h = *s.histogram;
        uint64_t cumulative = 0;
        for (size_t i = 0; i <= h.bounds().size(); ++i) {
          cumulative += h.BucketCount(i);
          const std::pair<std::string, std::string> le = {
              "le",
              i < h.bounds().size() ? FormatValue(h.bounds()[i]) : "+Inf"};
          absl::StrAppend(&out, f->name, "_bucket", LabelText(s.labels, &le),
                          " ", cumulative, "\n");
        }
        absl::StrAppend(&out, f->name, "_sum", LabelText(s.labels), " ",
                        FormatValue(h.Sum()), "\n", f->name, "_count",
                        LabelText(s.labels), " ", h.Count(), "\n");
        continue;
      }
      const double v = s.counter != nullptr ? s.counter->Value()
                       : s.gauge != nullptr ? s.gauge->Value()
                                            : s.read();
      absl::StrAppend(&out, f->name, LabelText(s.labels), " ", FormatValue(v),
                      "\n");
    }
  }
  return out;
}

void AddProcessMetrics(Metrics& metrics, const std::string& data_dir) {
  metrics.AddGaugeFn(
      "process_resident_memory_bytes", "Resident memory size in bytes", [] {
        std::ifstream statm("/proc/self/statm");
        double pages = 0, resident = 0;
        statm >> pages >> resident;
        return resident * static_cast<double>(sysconf(_SC_PAGESIZE));
      });
  if (data_dir.empty()) return;
  metrics.AddGaugeFn(
      "strata_data_dir_bytes", "Bytes of the files under --data_dir",
      [data_dir] {
        namespace fs = std::filesystem;
        std::error_code ec;
        double bytes = 0;
        for (auto it = fs::recursive_directory_iterator(
                 data_dir, fs::directory_options::skip_permission_denied, ec);
             !ec && it != fs::recursive_directory_iterator();
             it.increment(ec)) {
          std::error_code size_ec;
          if (it->is_regular_file(size_ec)) {
            const auto n = it->file_size(size_ec);
            if (!size_ec) bytes += static_cast<double>(n);
          }
        }
        return bytes;
      });
  metrics.AddGaugeFn("strata_data_dir_free_bytes",
                     "Bytes free to this process on --data_dir's file system",
                     [data_dir] {
                       struct statvfs st;
                       if (statvfs(data_dir.c_str(), &st) != 0) return -1.0;
                       return static_cast<double>(st.f_bavail) *
                              static_cast<double>(st.f_frsize);
                     });
}

}  // namespace strata
