#include "common/metrics_http.h"

#include <httplib.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace strata {

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& host, int port, const Metrics* metrics) {
  auto e = Bind(host, port);
  if (e.ok()) (*e)->Serve(metrics);
  return e;
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Bind(
    const std::string& host, int port) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_port ", port, " is not a port (0..65535)"));
  }
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  e->http_ = std::make_unique<httplib::Server>();
  e->host_ = host;
  // httplib's default also sets SO_REUSEPORT, which lets a second process
  // bind the same port and take half the scrapes: only SO_REUSEADDR here.
  e->http_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  e->port_ = port == 0 ? e->http_->bind_to_any_port(host)
                       : (e->http_->bind_to_port(host, port) ? port : -1);
  if (e->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", host,
                                               ":", port, " (in use?)"));
  }
  MetricsEndpoint* self = e.get();
  e->http_->Get("/metrics",
                [self](const httplib::Request&, httplib::Response& res) {
                  const Metrics* m = self->metrics_.load();
                  if (m == nullptr) {
                    res.status = 503;
                    res.set_content("starting\n", "text/plain");
                    return;
                  }
                  res.set_content(m->Render(), "text/plain; version=0.0.4");
                });
  httplib::Server* http = e->http_.get();
  e->thread_ = std::thread([http] { http->listen_after_bind(); });
  return e;
}

void MetricsEndpoint::Serve(const Metrics* metrics) { metrics_ = metrics; }

MetricsEndpoint::~MetricsEndpoint() {
  http_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string MetricsEndpoint::address() const {
  return absl::StrCat(host_, ":", port_);
}

absl::StatusOr<std::string> ScrapeMetrics(const std::string& address,
                                          double timeout_s) {
  httplib::Client client(absl::StrCat("http://", address));
  const auto sec = static_cast<time_t>(timeout_s);
  const auto usec = static_cast<time_t>((timeout_s - sec) * 1e6);
  client.set_connection_timeout(sec, usec);
  client.set_read_timeout(sec, usec);
  httplib::Result res = client.Get("/metrics");
  if (!res) {
    return absl::UnavailableError(
        absl::StrCat("no metrics from http://", address,
                     "/metrics: ", httplib::to_string(res.error())));
  }
  if (res->status != 200) {
    return absl::InternalError(absl::StrCat(
        "http://", address, "/metrics answered HTTP ", res->status));
  }
  return res->body;
}

absl::StatusOr<double> SampleValue(const std::string& text,
                                   const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    if (line.size() <= series.size() || line[series.size()] != ' ' ||
        line.substr(0, series.size()) != series) {
      continue;
    }
    const absl::string_view value = line.substr(series.size() + 1);
    double v = 0;
    if (value == "+Inf") return HUGE_VAL;
    if (value == "-Inf") return -HUGE_VAL;
    if (!absl::SimpleAtod(value, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sample ", series, " has value '", value, "'"));
    }
    return v;
  }
  return absl::NotFoundError(absl::StrCat("no sample ", series));
}

}  // namespace strata
