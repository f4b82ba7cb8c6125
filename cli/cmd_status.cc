// `strata status` (the cluster, read from the scheduler's view and every
// member's health and metrics) and `strata health` (one address's gRPC
// health, for container health checks).
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cli/commands.h"
#include "cli/ops.h"
#include "common/metrics_http.h"
#include "common/status.h"
#include "rpc/health.h"
#include "strata/v1/ps.grpc.pb.h"
#include "strata/v1/scheduler.grpc.pb.h"
#include "trainer/worker_metrics.h"

namespace strata {
namespace {

constexpr absl::Duration kAskTimeout = absl::Seconds(3);

// "SERVING", "NOT_SERVING", or why the address did not answer; "-" for a
// member that serves no health.
std::string HealthText(const std::string& address, const Security& security,
                       Role role) {
  if (address.empty()) return "-";
  absl::StatusOr<bool> h = CheckHealth(address, kAskTimeout, security, role);
  if (!h.ok()) return absl::StrCat("unreachable (", h.status().code(), ")");
  return *h ? "SERVING" : "NOT_SERVING";
}

// A sample from a member's metrics endpoint, or nullopt.
std::optional<double> Scraped(const absl::StatusOr<std::string>& text,
                              const std::string& series) {
  if (!text.ok()) return std::nullopt;
  absl::StatusOr<double> v = SampleValue(*text, series);
  if (!v.ok()) return std::nullopt;
  return *v;
}

std::string Fmt(std::optional<double> v, int decimals) {
  return v ? absl::StrFormat("%.*f", decimals, *v) : "-";
}

// A server's counters, and when they were read (a steady clock).
struct StatsSample {
  v1::StatsResponse stats;
  std::chrono::steady_clock::time_point at;
};

// The server of `slot`'s Stats, or nullopt if it has none or did not
// answer.
std::optional<StatsSample> AskStats(const v1::ShardSlot& slot,
                                    const Security& security) {
  if (slot.address().empty()) return std::nullopt;
  auto ps = v1::ParameterServer::NewStub(
      security.Dial(slot.address(), Role::kServer));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kAskTimeout));
  StatsSample sample;
  if (!ps->Stats(&ctx, v1::StatsRequest(), &sample.stats).ok()) {
    return std::nullopt;
  }
  sample.at = std::chrono::steady_clock::now();
  return sample;
}

// Whether two readings of a server's tier counters can give rates: both
// have a tier, in that order, and no counter went back (a restart).
bool Comparable(const std::optional<StatsSample>& before,
                const std::optional<StatsSample>& after) {
  if (!before || !after || !before->stats.has_tier() ||
      !after->stats.has_tier() || after->at <= before->at) {
    return false;
  }
  const v1::TierStats &b = before->stats.tier(), &a = after->stats.tier();
  return a.read_bytes() >= b.read_bytes() &&
         a.write_bytes() >= b.write_bytes() && a.hits() >= b.hits() &&
         a.misses() >= b.misses() &&
         after->stats.pulls() >= before->stats.pulls();
}

// " (12 MB/s now)": `after - before` bytes (10^6 to the MB) over `seconds`.
std::string RateNow(uint64_t before, uint64_t after, double seconds) {
  return absl::StrFormat(" (%.0f MB/s now)", (after - before) / 1e6 / seconds);
}

// One shard slot: its server's health and counters (`sample`), with the
// RAM tier's bandwidth over the second from `sample` to `later`.
void PrintServer(const v1::ShardSlot& slot, const v1::Member* member,
                 const Security& security,
                 const std::optional<StatsSample>& sample,
                 const std::optional<StatsSample>& later) {
  std::printf("  shard %d  %s", slot.shard(),
              slot.address().empty() ? "(no server)" : slot.address().c_str());
  if (slot.address().empty()) {
    std::printf("\n");
    return;
  }
  std::printf("  %s",
              HealthText(slot.address(), security, Role::kServer).c_str());
  if (sample) {
    // The later reading where there is one: the newest counters.
    const v1::StatsResponse& st = later ? later->stats : sample->stats;
    const bool rates = Comparable(sample, later);
    const double seconds =
        rates ? std::chrono::duration<double>(later->at - sample->at).count()
              : 0;
    std::printf(
        "  chunks %llu  applied %llu  pulls %llu  rejected(nonfinite) %llu  "
        "bsp_samples %llu  bsp_tiling_errors %llu  redone %llu  "
        "forwarded %llu  payloads shm %llu bulk %llu (sessions %llu)  "
        "state %.2f/param  summed %llu  in %.2f MiB  out %.2f MiB",
        static_cast<unsigned long long>(st.chunks()),
        static_cast<unsigned long long>(st.pushes_applied()),
        static_cast<unsigned long long>(st.pulls()),
        static_cast<unsigned long long>(st.pushes_rejected_nonfinite()),
        static_cast<unsigned long long>(st.bsp_samples_applied()),
        static_cast<unsigned long long>(st.bsp_tiling_errors()),
        static_cast<unsigned long long>(st.aborted_stale_epoch()),
        static_cast<unsigned long long>(st.replica_forwards()),
        static_cast<unsigned long long>(st.shm_payloads()),
        static_cast<unsigned long long>(st.bulk_payloads()),
        static_cast<unsigned long long>(st.bulk_attaches()),
        st.parameters() == 0
            ? 0.0
            : static_cast<double>(st.state_floats()) / st.parameters(),
        static_cast<unsigned long long>(st.summed_updates()),
        st.bytes_in() / 1048576.0, st.bytes_out() / 1048576.0);
    if (st.batch_calls() > 0) {
      // Small pushes and pulls that shared calls (PushBatch, PullBatch).
      std::printf("  batched %llu in %llu calls",
                  static_cast<unsigned long long>(st.batched_requests()),
                  static_cast<unsigned long long>(st.batch_calls()));
    }
    if (st.pushes_zero() > 0) {
      // MoE: pushes of experts no token reached, without payload.
      std::printf("  zero pushes %llu (steps closed on them %llu)",
                  static_cast<unsigned long long>(st.pushes_zero()),
                  static_cast<unsigned long long>(st.zero_steps()));
    }
    if (st.pulls_compressed() + st.pulls_rebased() > 0) {
      std::printf("  pulls compressed %llu whole %llu (copies %.1f MiB)",
                  static_cast<unsigned long long>(st.pulls_compressed()),
                  static_cast<unsigned long long>(st.pulls_rebased()),
                  st.pull_mirror_floats() * 4 / 1048576.0);
    }
    if (st.has_tier()) {
      const v1::TierStats& t = st.tier();
      const uint64_t uses = t.hits() + t.misses();
      std::printf(
          "  ram %.1f/%.1f MiB  spilled %.1f MiB  hit rate %.3f  "
          "read %.1f MiB%s  written %.1f MiB%s (behind %.2f)",
          t.resident_bytes() / 1048576.0, t.ram_budget() / 1048576.0,
          t.spilled_bytes() / 1048576.0,
          uses == 0 ? 1.0 : static_cast<double>(t.hits()) / uses,
          t.read_bytes() / 1048576.0,
          rates ? RateNow(sample->stats.tier().read_bytes(), t.read_bytes(),
                          seconds)
                      .c_str()
                : "",
          t.write_bytes() / 1048576.0,
          rates ? RateNow(sample->stats.tier().write_bytes(), t.write_bytes(),
                          seconds)
                      .c_str()
                : "",
          // The share of tile writes made off the requests' path.
          t.written_behind() + t.spills_written() == 0
              ? 1.0
              : static_cast<double>(t.written_behind()) /
                    (t.written_behind() + t.spills_written()));
      // Which uses missed (a pull of a spilled tile reads its weights
      // alone), and how many read-aheads went unused.
      std::printf(
          "  misses %llu (weights only %llu)  read ahead %llu (unused %llu)",
          static_cast<unsigned long long>(t.misses()),
          static_cast<unsigned long long>(t.weight_reads()),
          static_cast<unsigned long long>(t.prefetched()),
          static_cast<unsigned long long>(t.read_ahead_unused()));
      if (t.write_errors() > 0) {
        std::printf("  spill write errors %llu",
                    static_cast<unsigned long long>(t.write_errors()));
      }
    }
  }
  if (member != nullptr && !member->metrics_address().empty()) {
    std::printf("  metrics %s", member->metrics_address().c_str());
  }
  std::printf("\n");
}

// A worker's expert loads (kExpertLoadSeries) in its scraped metrics:
// per MoE layer, tokens per expert in its last step.
std::map<int, std::vector<int>> ExpertLoads(const std::string& text) {
  std::map<int, std::vector<int>> loads;
  const std::string prefix = absl::StrCat(kExpertLoadSeries, "{layer=\"");
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, prefix)) continue;
    // strata_worker_expert_load{layer="L",expert="E"} V
    const std::vector<absl::string_view> parts =
        absl::StrSplit(line.substr(prefix.size()), absl::ByAnyChar("\",} "),
                       absl::SkipEmpty());
    int layer = 0, expert = 0;
    double v = 0;
    if (parts.size() != 4 || !absl::SimpleAtoi(parts[0], &layer) ||
        parts[1] != "expert=" || !absl::SimpleAtoi(parts[2], &expert) ||
        !absl::SimpleAtod(parts[3], &v) || expert < 0 || expert > 1 << 20) {
      continue;
    }
    std::vector<int>& row = loads[layer];
    if (row.size() <= static_cast<size_t>(expert)) row.resize(expert + 1);
    row[expert] = static_cast<int>(v);
  }
  return loads;
}

// With MoE layers: the share of a dense sync's expert bytes the worker
// moved each way, and each layer's load per expert.
void PrintExperts(const absl::StatusOr<std::string>& text) {
  const std::optional<double> dense = Scraped(text, kExpertDenseSeries);
  if (!dense || *dense <= 0) return;
  std::printf(
      "    experts: pulled %.1f%% and pushed %.1f%% of a dense sync's "
      "bytes\n",
      100 * Scraped(text, kExpertPulledSeries).value_or(0) / *dense,
      100 * Scraped(text, kExpertPushedSeries).value_or(0) / *dense);
  for (const auto& [layer, load] : ExpertLoads(*text)) {
    std::printf("    layer %d load:", layer);
    for (int n : load) std::printf(" %d", n);
    std::printf("\n");
  }
}

// The slots a worker's payloads reach by each path, the paths with none
// left out: "region 2", "bulk 1, grpc 1".
std::string WireText(const v1::WirePaths& w) {
  std::vector<std::string> parts;
  for (const auto& [name, n] :
       {std::pair<const char*, uint32_t>{"region", w.region()},
        {"shm", w.shm()},
        {"bulk", w.bulk()},
        {"grpc", w.grpc()}}) {
    if (n > 0) parts.push_back(absl::StrCat(name, " ", n));
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

// Each worker: its health, step, speed, and its share of the job's
// samples (the ledger splits BSP steps by the speeds in the view).
void PrintWorkers(const v1::View& view, const Security& security) {
  double total_speed = 0;
  for (const auto& w : view.workers()) total_speed += w.samples_per_sec();
  for (const auto& w : view.workers()) {
    absl::StatusOr<std::string> text =
        w.metrics_address().empty()
            ? absl::StatusOr<std::string>(absl::NotFoundError("none"))
            : ScrapeMetrics(w.metrics_address(),
                            absl::ToDoubleSeconds(kAskTimeout));
    const double share = total_speed > 0 ? w.samples_per_sec() / total_speed
                                         : 1.0 / view.workers_size();
    std::printf(
        "  worker %llu  %s  step %lld  %.1f samples/s  share %.2f  tokens/s "
        "%s  loss %s",
        static_cast<unsigned long long>(w.id()),
        HealthText(w.address(), security, Role::kWorker).c_str(),
        static_cast<long long>(w.clock()), w.samples_per_sec(), share,
        Fmt(Scraped(text, "strata_worker_tokens_per_second"), 0).c_str(),
        Fmt(Scraped(text, "strata_worker_loss"), 4).c_str());
    if (const v1::StepTimes& st = w.step_times(); st.steps() > 0) {
      // Its last steps: a straggler computes slowly (per sample) or
      // unevenly (the spread), and the others wait at the BSP gate, their
      // processors idle or used by the host's other work.
      std::printf(
          "  compute %.3f s/step (%.2f ms/sample, spread %.0f%%)  waited "
          "%.0f%%, processors idle %.0f%% (last %u steps)",
          st.compute_s(), 1e3 * st.compute_s_per_sample(), 100 * st.jitter(),
          100 * st.wait_fraction(), 100 * st.idle_fraction(), st.steps());
    }
    std::printf("\n");
    if (w.has_wire()) std::printf("    wire %s\n", WireText(w.wire()).c_str());
    PrintExperts(text);
  }
}

// The job's consistency beyond its name: under --consistency auto the
// switches made and the one under way, and the rule's advice on the
// workers' step times (scheduler/consistency_policy.h; a fixed job keeps
// its setting).
void PrintConsistency(const v1::View& view) {
  if (!view.consistency_auto().empty()) {
    std::printf("consistency %s: %d switch(es)\n",
                view.consistency_auto().c_str(),
                view.consistency_switches_size());
  }
  for (const v1::ConsistencySwitch& sw : view.consistency_switches()) {
    std::printf("  switched at step %lld: %s -> %s (%s)\n",
                static_cast<long long>(sw.step()), sw.from().c_str(),
                sw.to().c_str(), sw.reason().c_str());
    if (sw.to() == "bsp") {
      std::printf("    its steps cover the samples from %lld; job step %lld\n",
                  static_cast<long long>(sw.first_sample()),
                  static_cast<long long>(sw.schedule_step()));
    }
  }
  if (view.has_consistency_pending() &&
      view.consistency_pending().to() == "bsp") {
    const v1::ConsistencySwitch& sw = view.consistency_pending();
    std::printf(
        "  switching back: %s -> bsp once the samples before %lld are "
        "applied (%s)\n",
        sw.from().c_str(), static_cast<long long>(sw.first_sample()),
        sw.reason().c_str());
  } else if (view.has_consistency_pending()) {
    const v1::ConsistencySwitch& sw = view.consistency_pending();
    std::printf(
        "  switching at step %lld: %s -> %s once every step before it is "
        "applied (%s)\n",
        static_cast<long long>(sw.step()), sw.from().c_str(), sw.to().c_str(),
        sw.reason().c_str());
  }
  if (const v1::ConsistencyAdvice& a = view.consistency_advice();
      !a.mode().empty()) {
    std::printf("consistency advice %s: %s\n", a.mode().c_str(),
                a.reason().c_str());
  }
}

}  // namespace

CommandFn AddStatusCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "status",
      "Show the cluster: view, members, their health, shard map, server "
      "counters, each worker's step, speed and share");
  auto address = std::make_shared<std::string>("127.0.0.1:7070");
  cmd->add_option("--scheduler", *address, "scheduler host:port")
      ->capture_default_str()
      ->check(DialAddress());
  auto tls = std::make_shared<TlsFlags>();
  AddTlsFlags(cmd, tls.get(), /*listens=*/false);
  return [address, tls] {
    auto loaded = LoadSecurity(*tls, std::nullopt);
    if (!loaded.ok()) return ReportStatus("status", loaded.status());
    const Security& security = **loaded;
    auto stub =
        v1::Scheduler::NewStub(security.Dial(*address, Role::kScheduler));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    v1::View view;
    absl::Status s =
        FromGrpcStatus(stub->GetView(&ctx, v1::GetViewRequest(), &view));
    if (!s.ok()) {
      return ReportStatus(
          "status", absl::Status(s.code(), absl::StrCat("scheduler ", *address,
                                                        ": ", s.message())));
    }
    std::printf(
        "scheduler %s  %s\nepoch %llu  consistency %s  shard map v%llu  "
        "generation %llu\n",
        address->c_str(),
        HealthText(*address, security, Role::kScheduler).c_str(),
        static_cast<unsigned long long>(view.epoch()),
        view.consistency().c_str(),
        static_cast<unsigned long long>(view.shard_map().version()),
        static_cast<unsigned long long>(view.generation()));
    PrintConsistency(view);
    // Every server's counters, and again a second later where one has a
    // RAM tier: its read and write bandwidth now.
    std::vector<std::optional<StatsSample>> samples, later;
    bool tiered = false;
    for (const auto& slot : view.shard_map().slots()) {
      samples.push_back(AskStats(slot, security));
      tiered = tiered || (samples.back() && samples.back()->stats.has_tier());
    }
    later.resize(samples.size());
    if (tiered) {
      absl::SleepFor(absl::Seconds(1));
      for (int i = 0; i < view.shard_map().slots_size(); ++i) {
        if (samples[i] && samples[i]->stats.has_tier()) {
          later[i] = AskStats(view.shard_map().slots(i), security);
        }
      }
    }
    for (int i = 0; i < view.shard_map().slots_size(); ++i) {
      const v1::ShardSlot& slot = view.shard_map().slots(i);
      const v1::Member* member = nullptr;
      for (const auto& m : view.servers()) {
        if (m.id() == slot.member_id()) member = &m;
      }
      PrintServer(slot, member, security, samples[i], later[i]);
      for (const v1::ShardReplica& b : slot.backups()) {
        std::printf("    backup %s (member %llu)  %s\n", b.address().c_str(),
                    static_cast<unsigned long long>(b.member_id()),
                    HealthText(b.address(), security, Role::kServer).c_str());
      }
      for (const v1::ShardReplica& j : slot.joining()) {
        std::printf("    joining %s (member %llu, catching up)\n",
                    j.address().c_str(),
                    static_cast<unsigned long long>(j.member_id()));
      }
    }
    PrintWorkers(view, security);
    return 0;
  };
}

CommandFn AddHealthCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "health",
      "Ask a role's gRPC health service; exit 0 when SERVING (for container "
      "health checks)");
  auto address = std::make_shared<std::string>();
  auto address_file = std::make_shared<std::string>();
  auto* by_address =
      cmd->add_option("--address", *address, "host:port of the role");
  auto* by_file = cmd->add_option(
      "--address_file", *address_file,
      "read host:port from this file (a role's --address_file)");
  by_address->excludes(by_file);
  auto timeout_s = std::make_shared<double>(5);
  cmd->add_option("--timeout_s", *timeout_s, "how long to wait for an answer")
      ->check(PositiveNumber())
      ->capture_default_str();
  auto role = std::make_shared<std::string>();
  cmd->add_option("--role", *role,
                  "under TLS, the role whose certificate the address must "
                  "hold: scheduler, server or worker (default: the role of "
                  "--tls_cert, as when a container checks itself)");
  auto tls = std::make_shared<TlsFlags>();
  AddTlsFlags(cmd, tls.get(), /*listens=*/false);
  return [address, address_file, timeout_s, role, tls] {
    auto security = LoadSecurity(*tls, std::nullopt);
    if (!security.ok()) return ReportStatus("health", security.status());
    std::optional<Role> peer = (*security)->role();
    if (!role->empty()) peer = ParseRole(*role);
    if (!peer || *peer == Role::kClient) {
      if (!role->empty() || (*security)->tls()) {
        return ReportStatus(
            "health",
            absl::InvalidArgumentError(absl::StrCat(
                "--role '", *role,
                "': name the role whose certificate the address holds "
                "(scheduler, server or worker)")));
      }
      peer = Role::kServer;  // plaintext: not checked
    }
    if (!address_file->empty()) {
      std::ifstream f(*address_file);
      std::getline(f, *address);
      if (address->empty()) {
        return ReportStatus(
            "health", absl::NotFoundError(absl::StrCat(
                          "no address in ", *address_file,
                          " (has the role started with --address_file?)")));
      }
    }
    if (address->empty()) {
      return ReportStatus("health", absl::InvalidArgumentError(
                                        "give --address or --address_file"));
    }
    absl::StatusOr<bool> h =
        CheckHealth(*address, absl::Seconds(*timeout_s), **security, *peer);
    if (!h.ok()) return ReportStatus("health", h.status());
    std::printf("%s %s\n", address->c_str(), *h ? "SERVING" : "NOT_SERVING");
    return *h ? 0 : 1;
  };
}

}  // namespace strata
