#include "cluster/scheduler_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace strata {
namespace {

// Retry pacing while the scheduler is unreachable.
constexpr absl::Duration kMinBackoff = absl::Milliseconds(50);
constexpr absl::Duration kMaxBackoff = absl::Seconds(1);
// How long the destructor's best-effort Leave may take.
constexpr absl::Duration kLeaveTimeout = absl::Seconds(1);

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const Security& security) {
  grpc::ChannelArguments args;
  // Reconnect quickly after a scheduler restart (gRPC's default backoff
  // grows to two minutes).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return security.Dial(address, Role::kScheduler, args);
}

}  // namespace

SchedulerClient::SchedulerClient(SchedulerClientOptions options)
    : options_(std::move(options)),
      stub_(v1::Scheduler::NewStub(
          MakeChannel(options_.scheduler_address, *options_.security))),
      snapshots_(options_.snapshots) {}

absl::StatusOr<std::unique_ptr<SchedulerClient>> SchedulerClient::Connect(
    SchedulerClientOptions options) {
  if (options.scheduler_address.empty()) {
    return absl::InvalidArgumentError("scheduler client: no scheduler address");
  }
  if (options.clock == nullptr) {
    return absl::InvalidArgumentError("scheduler client: clock must be set");
  }
  // Checked here: gRPC would retry a malformed one until the deadline.
  absl::StatusOr<HostPort> dial = ParseHostPort(options.scheduler_address);
  if (dial.ok() && dial->port == 0) {
    dial = absl::InvalidArgumentError("port 0 cannot be dialed");
  }
  if (!dial.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler client: ", dial.status().message()));
  }
  const std::string address = options.scheduler_address;
  const absl::Duration timeout = options.connect_timeout;
  const bool tls = options.security->tls();
  std::unique_ptr<SchedulerClient> c(new SchedulerClient(std::move(options)));
  if (absl::Status s = c->Register(); !s.ok()) {
    if (absl::IsDeadlineExceeded(s) || absl::IsUnavailable(s)) {
      return absl::Status(
          s.code(),
          absl::StrCat("no scheduler answered at ", address, " within ",
                       absl::FormatDuration(timeout),
                       " (is it running, and is that its --listen address?",
                       tls ? " Under TLS: do its certificate and ours come "
                             "from the same --tls_ca, and are both valid?"
                           : "",
                       "): ", s.message()));
    }
    return absl::Status(s.code(),
                        absl::StrCat("scheduler ", address, ": ", s.message()));
  }
  c->heartbeat_thread_ = std::thread([p = c.get()] { p->HeartbeatLoop(); });
  c->watch_thread_ = std::thread([p = c.get()] { p->WatchLoop(); });
  return c;
}

SchedulerClient::~SchedulerClient() {
  bool leave;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    if (watch_ctx_ != nullptr) watch_ctx_->TryCancel();
    leave = options_.leave_on_destroy && !left_ && member_id_ != 0;
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
  if (!leave) return;
  v1::LeaveRequest req;
  req.set_member_id(member_id());
  v1::LeaveResponse resp;
  stub_->Leave(NewContext(kLeaveTimeout).get(), req, &resp);  // best effort
}

std::unique_ptr<grpc::ClientContext> SchedulerClient::NewContext(
    absl::Duration timeout) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(timeout));
  return ctx;
}

// Registers (again, after a lost lease): waits for the scheduler up to
// connect_timeout, adopts the new id and the view that comes with it.
absl::Status SchedulerClient::Register() {
  v1::RegisterRequest req;
  req.set_role(options_.role);
  req.set_address(options_.address);
  req.set_metrics_address(options_.metrics_address);
  req.set_devices(options_.devices);
  req.set_capacity(options_.capacity);
  req.set_shard(options_.shard);
  req.set_data_dir_id(options_.data_dir_id);
  {
    absl::MutexLock lock(&mu_);
    for (int64_t step : snapshots_) req.add_snapshots(step);
    if (first_id_ != 0) {  // again, after a lost lease
      req.set_worker(first_id_);
      req.set_incarnation(incarnation_ + 1);
    }
  }
  auto ctx = NewContext(options_.connect_timeout);
  ctx->set_wait_for_ready(true);
  v1::RegisterResponse resp;
  STRATA_RETURN_IF_ERROR(
      FromGrpcStatus(stub_->Register(ctx.get(), req, &resp)));
  uint64_t old_id;
  {
    absl::MutexLock lock(&mu_);
    old_id = member_id_;
    member_id_ = resp.member_id();
    if (first_id_ == 0) first_id_ = resp.member_id();
    ++incarnation_;
    lease_ = absl::Milliseconds(resp.lease_ms());
    last_renewed_ = options_.clock->Now();
    // The watch stream knows an epoch from before; start it afresh.
    if (watch_ctx_ != nullptr) watch_ctx_->TryCancel();
  }
  OfferView(resp.view(), /*force=*/true);
  if (old_id != 0) {
    spdlog::warn("scheduler client: lease of member {} was lost; now member {}",
                 old_id, resp.member_id());
    if (options_.on_reregistered)
      options_.on_reregistered(old_id, resp.member_id());
  }
  return absl::OkStatus();
}

uint64_t SchedulerClient::member_id() const {
  absl::MutexLock lock(&mu_);
  return member_id_;
}

v1::View SchedulerClient::view() const {
  absl::MutexLock lock(&mu_);
  return view_;
}

std::string SchedulerClient::ShardAddress(int slot) const {
  absl::MutexLock lock(&mu_);
  for (const v1::ShardSlot& s : view_.shard_map().slots()) {
    if (s.shard() == slot) return s.address();
  }
  return "";
}

absl::StatusOr<v1::View> SchedulerClient::WaitForView(
    std::function<bool(const v1::View&)> pred, absl::Duration timeout) {
  return WaitForMemberView(
      [&pred](const v1::View& v, uint64_t) { return pred(v); }, timeout);
}

absl::StatusOr<v1::View> SchedulerClient::WaitForMemberView(
    std::function<bool(const v1::View&, uint64_t member_id)> pred,
    absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return closing_ || pred(view_, member_id_);
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("no matching view within ", absl::FormatDuration(timeout),
                     " (latest epoch ", view_.epoch(), ")"));
  }
  if (closing_) return absl::CancelledError("scheduler client closing");
  return view_;
}

void SchedulerClient::SetProgress(int64_t clock, double samples_per_sec) {
  // The scheduler refuses a heartbeat with a speed that is not finite or
  // not in [0, 1e12] (scheduler/membership.cc): a step timed at zero
  // seconds must not cost the member its lease.
  if (!(samples_per_sec >= 0)) samples_per_sec = 0;  // NaN too
  samples_per_sec = std::min(samples_per_sec, 1e12);
  absl::MutexLock lock(&mu_);
  progress_clock_ = clock;
  samples_per_sec_ = samples_per_sec;
}

void SchedulerClient::NoteStep(int64_t step, uint64_t samples, double compute_s,
                               double wait_s, std::optional<double> idle_s) {
  if (samples == 0 || step < 0) return;
  auto clamp = [](double s) {
    return std::isfinite(s) ? std::clamp(s, 0.0, 86400.0) : 0.0;
  };
  v1::StepTiming t;
  t.set_step(step);
  t.set_samples(std::min<uint64_t>(samples, uint64_t{1} << 40));
  t.set_compute_s(clamp(compute_s));
  t.set_wait_s(clamp(wait_s));
  if (idle_s.has_value()) t.set_idle_s(std::min(clamp(*idle_s), t.wait_s()));
  absl::MutexLock lock(&mu_);
  steps_.push_back(std::move(t));
  while (steps_.size() > 64) steps_.pop_front();
}

int64_t SchedulerClient::common_snapshot() const {
  absl::MutexLock lock(&mu_);
  return common_snapshot_;
}

void SchedulerClient::SetWire(const v1::WirePaths& wire) {
  absl::MutexLock lock(&mu_);
  wire_ = wire;
}

void SchedulerClient::SetSnapshots(std::vector<int64_t> steps) {
  absl::MutexLock lock(&mu_);
  snapshots_ = std::move(steps);
}

void SchedulerClient::AddViewListener(std::function<void(const v1::View&)> cb) {
  absl::MutexLock lock(&listeners_mu_);
  listeners_.push_back(std::move(cb));
}

void SchedulerClient::OfferView(const v1::View& view, bool force) {
  absl::MutexLock listeners_lock(&listeners_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (!force && view.epoch() <= view_.epoch()) return;
    view_ = view;
  }
  for (const auto& cb : listeners_) cb(view);
}

bool SchedulerClient::SleepUnlessClosing(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&closing_), d);
  return !closing_;
}

// Heartbeats every interval. While the scheduler is unreachable, retries
// with a growing backoff (a restarted scheduler keeps our lease); NOT_FOUND
// means the lease is gone, so register again under a new id.
void SchedulerClient::HeartbeatLoop() {
  absl::Duration backoff = kMinBackoff;
  absl::Duration wait = HeartbeatInterval();
  bool failing = false;
  while (SleepUnlessClosing(wait)) {
    {
      absl::MutexLock lock(&mu_);
      if (left_) return;
    }
    absl::Status s = HeartbeatOnce();
    if (absl::IsNotFound(s)) {
      s = Register();
      if (absl::IsFailedPrecondition(s) || absl::IsInvalidArgument(s)) {
        spdlog::error("scheduler client: cannot register again: {}",
                      s.ToString());
        if (options_.on_refused) options_.on_refused(s);
        return;
      }
    }
    if (s.ok()) {
      if (failing) spdlog::info("scheduler client: heartbeats resumed");
      failing = false;
      backoff = kMinBackoff;
      wait = HeartbeatInterval();
      continue;
    }
    if (!failing) {  // once per run of failures
      spdlog::warn(
          "scheduler client: heartbeat failed ({} since the last "
          "renewal), retrying: {}",
          absl::FormatDuration(SinceRenewal()), s.ToString());
    }
    failing = true;
    wait = backoff;
    backoff = std::min(backoff * 2, std::min(kMaxBackoff, HeartbeatInterval()));
  }
}

absl::Duration SchedulerClient::SinceRenewal() const {
  absl::MutexLock lock(&mu_);
  return options_.clock->Now() - last_renewed_;
}

absl::Duration SchedulerClient::HeartbeatInterval() const {
  if (options_.heartbeat_interval > absl::ZeroDuration()) {
    return options_.heartbeat_interval;
  }
  absl::MutexLock lock(&mu_);
  return lease_ / 5;
}

absl::Status SchedulerClient::HeartbeatOnce() {
  v1::HeartbeatRequest req;
  {
    absl::MutexLock lock(&mu_);
    req.set_member_id(member_id_);
    req.set_clock(progress_clock_);
    req.set_samples_per_sec(samples_per_sec_);
    for (int64_t step : snapshots_) req.add_snapshots(step);
    for (const v1::StepTiming& t : steps_) *req.add_steps() = t;
    if (wire_) *req.mutable_wire() = *wire_;
  }
  v1::HeartbeatResponse resp;
  auto ctx =
      NewContext(std::min(options_.connect_timeout, HeartbeatInterval()));
  STRATA_RETURN_IF_ERROR(
      FromGrpcStatus(stub_->Heartbeat(ctx.get(), req, &resp)));
  absl::MutexLock lock(&mu_);
  // What went out; steps noted meanwhile go with the next one.
  steps_.erase(
      steps_.begin(),
      steps_.begin() + std::min<size_t>(req.steps_size(), steps_.size()));
  lease_ = absl::Milliseconds(resp.lease_ms());
  last_renewed_ = options_.clock->Now();
  if (resp.has_common_snapshot()) common_snapshot_ = resp.common_snapshot();
  return absl::OkStatus();
}

// Keeps a WatchView stream open, reopening it (after a backoff) whenever it
// ends: a scheduler restart, a network error, or a re-registration.
void SchedulerClient::WatchLoop() {
  absl::Duration backoff = kMinBackoff;
  absl::Duration wait = absl::ZeroDuration();
  while (SleepUnlessClosing(wait)) {
    bool got_any = false;
    absl::Status s = WatchOnce(got_any);
    if (got_any) backoff = kMinBackoff;
    wait = backoff;
    backoff = std::min(backoff * 2, kMaxBackoff);
    if (!absl::IsCancelled(s)) {
      spdlog::debug("scheduler client: view watch ended: {}", s.ToString());
    }
  }
}

absl::Status SchedulerClient::WatchOnce(bool& got_any) {
  grpc::ClientContext ctx;
  v1::WatchViewRequest req;
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return absl::CancelledError("closing");
    watch_ctx_ = &ctx;
    req.set_known_epoch(view_.epoch());
  }
  std::unique_ptr<grpc::ClientReader<v1::View>> reader =
      stub_->WatchView(&ctx, req);
  v1::View view;
  while (reader->Read(&view)) {
    got_any = true;
    OfferView(view, /*force=*/false);
  }
  absl::Status s = FromGrpcStatus(reader->Finish());
  absl::MutexLock lock(&mu_);
  watch_ctx_ = nullptr;
  return s;
}

absl::Status SchedulerClient::KvPut(const std::string& key,
                                    const std::string& value) {
  v1::KvPutRequest req;
  req.set_key(key);
  req.set_value(value);
  v1::KvPutResponse resp;
  return FromGrpcStatus(
      stub_->KvPut(NewContext(options_.connect_timeout).get(), req, &resp));
}

absl::StatusOr<uint64_t> SchedulerClient::KvCompareAndSet(
    const std::string& key, const std::string& value,
    uint64_t expected_revision) {
  v1::KvPutRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_cas(true);
  req.set_expected_revision(expected_revision);
  v1::KvPutResponse resp;
  auto ctx = NewContext(options_.connect_timeout);
  absl::Status s = FromGrpcStatus(stub_->KvPut(ctx.get(), req, &resp));
  if (s.ok()) return resp.revision();
  const auto& trailers = ctx->GetServerTrailingMetadata();
  if (auto it = trailers.find(kKvRevisionMetadata); it != trailers.end()) {
    s.SetPayload(
        kKvRevisionPayload,
        absl::Cord(absl::string_view(it->second.data(), it->second.size())));
  }
  return s;
}

absl::StatusOr<std::string> SchedulerClient::KvGet(const std::string& key,
                                                   absl::Duration wait) {
  v1::KvGetRequest req;
  req.set_key(key);
  if (wait > absl::ZeroDuration()) {
    req.set_wait_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(wait)));
  }
  v1::KvGetResponse resp;
  auto ctx = NewContext(std::max(wait, absl::ZeroDuration()) +
                        options_.connect_timeout);
  STRATA_RETURN_IF_ERROR(FromGrpcStatus(stub_->KvGet(ctx.get(), req, &resp)));
  return std::move(*resp.mutable_value());
}

absl::StatusOr<uint64_t> SchedulerClient::KvDeleteRange(
    const std::string& begin, const std::string& end) {
  v1::KvDeleteRangeRequest req;
  req.set_key(begin);
  req.set_range_end(end);
  v1::KvDeleteRangeResponse resp;
  STRATA_RETURN_IF_ERROR(FromGrpcStatus(stub_->KvDeleteRange(
      NewContext(options_.connect_timeout).get(), req, &resp)));
  return resp.deleted();
}

absl::StatusOr<v1::LeaseWorkResponse> SchedulerClient::LeaseWork(
    int64_t step, const v1::LedgerJob& job, int ahead, absl::Duration timeout) {
  v1::LeaseWorkRequest req;
  req.set_member_id(member_id());
  req.set_step(step);
  req.set_ahead(ahead);
  *req.mutable_job() = job;
  v1::LeaseWorkResponse resp;
  STRATA_RETURN_IF_ERROR(FromGrpcStatus(stub_->LeaseWork(
      NewContext(timeout > absl::ZeroDuration() ? timeout
                                                : options_.connect_timeout)
          .get(),
      req, &resp)));
  return resp;
}

absl::StatusOr<v1::ReportAppliedResponse> SchedulerClient::ReportApplied(
    const std::vector<v1::AppliedReport>& reports) {
  v1::ReportAppliedRequest req;
  req.set_member_id(member_id());
  for (const v1::AppliedReport& r : reports) *req.add_reports() = r;
  v1::ReportAppliedResponse resp;
  STRATA_RETURN_IF_ERROR(FromGrpcStatus(stub_->ReportApplied(
      NewContext(options_.connect_timeout).get(), req, &resp)));
  return resp;
}

absl::StatusOr<std::vector<v1::LedgerRecord>> SchedulerClient::ExportLedger() {
  auto ctx = NewContext(absl::Minutes(5));
  std::unique_ptr<grpc::ClientReader<v1::LedgerRecord>> reader =
      stub_->ExportLedger(ctx.get(), v1::ExportLedgerRequest());
  std::vector<v1::LedgerRecord> out;
  v1::LedgerRecord r;
  while (reader->Read(&r)) out.push_back(r);
  STRATA_RETURN_IF_ERROR(FromGrpcStatus(reader->Finish()));
  return out;
}

// A member whose lease ran out (a process stopped past its lease that wakes
// to find the job over) is already gone: NOT_FOUND is what it wanted, so it
// is logged, not returned.
absl::Status SchedulerClient::Leave() {
  v1::LeaveRequest req;
  {
    absl::MutexLock lock(&mu_);
    left_ = true;
    req.set_member_id(member_id_);
  }
  v1::LeaveResponse resp;
  absl::Status s = FromGrpcStatus(
      stub_->Leave(NewContext(options_.connect_timeout).get(), req, &resp));
  if (absl::IsNotFound(s)) {
    spdlog::warn("scheduler client: lease of member {} ran out before it left",
                 req.member_id());
    return absl::OkStatus();
  }
  return s;
}

absl::Status SchedulerClient::CaughtUp(uint64_t primary) {
  v1::CaughtUpRequest req;
  req.set_member_id(member_id());
  req.set_primary_member_id(primary);
  v1::CaughtUpResponse resp;
  return FromGrpcStatus(
      stub_->CaughtUp(NewContext(options_.connect_timeout).get(), req, &resp));
}

}  // namespace strata
