#include "collective/kv_rendezvous.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cluster/scheduler_client.h"
#include "gloo/common/error.h"

namespace strata {

KvRendezvousStore::KvRendezvousStore(SchedulerClient* client,
                                     std::string prefix, absl::Duration timeout,
                                     std::function<bool()> cancelled)
    : client_(client),
      prefix_(std::move(prefix)),
      timeout_(timeout),
      cancelled_(std::move(cancelled)) {}

std::string KvRendezvousStore::Await(const std::string& key,
                                     absl::Time deadline) {
  constexpr absl::Duration kPoll = absl::Milliseconds(200);
  absl::Status last = absl::DeadlineExceededError("not asked yet");
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      // Gloo's own stores say "Timed out" for a key that never came; keep
      // that word so the caller sees DEADLINE_EXCEEDED. (Checked before
      // asking: a get with no time left does not wait, and a missing key
      // would be NOT_FOUND, not a timeout.)
      throw gloo::IoException(absl::StrCat("rendezvous KV wait for ", prefix_,
                                           key,
                                           ": Timed out: ", last.ToString()));
    }
    absl::StatusOr<std::string> value = client_->KvGet(
        prefix_ + key, cancelled_ ? std::min(left, kPoll) : left);
    if (value.ok()) return *std::move(value);
    if (!absl::IsDeadlineExceeded(value.status())) {
      throw gloo::IoException(absl::StrCat("rendezvous KV get ", prefix_, key,
                                           ": ", value.status().ToString()));
    }
    last = value.status();
    if (cancelled_ && cancelled_()) {
      throw gloo::IoException(absl::StrCat("rendezvous for ", prefix_, key,
                                           " cancelled: the group changed"));
    }
  }
}

void KvRendezvousStore::set(const std::string& key,
                            const std::vector<char>& data) {
  absl::Status status =
      client_->KvPut(prefix_ + key, std::string(data.begin(), data.end()));
  if (!status.ok()) {
    throw gloo::IoException(absl::StrCat("rendezvous KV put ", prefix_, key,
                                         ": ", status.ToString()));
  }
}

std::vector<char> KvRendezvousStore::get(const std::string& key) {
  const std::string value = Await(key, absl::Now() + timeout_);
  return std::vector<char>(value.begin(), value.end());
}

void KvRendezvousStore::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
}

void KvRendezvousStore::wait(const std::vector<std::string>& keys,
                             const std::chrono::milliseconds& timeout) {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout.count());
  for (const std::string& key : keys) Await(key, deadline);
}

std::string GroupPrefix(absl::string_view name, uint64_t epoch) {
  return absl::StrFormat("collective/%s/%020d/", name, epoch);
}

absl::StatusOr<uint64_t> ForgetGroupsBefore(SchedulerClient* client,
                                            absl::string_view family,
                                            absl::string_view name,
                                            uint64_t epoch) {
  return client->KvDeleteRange(absl::StrCat("collective/", family),
                               GroupPrefix(name, epoch));
}

absl::StatusOr<std::unique_ptr<Communicator>> JoinGlooGroup(
    SchedulerClient* client, absl::string_view name, uint64_t epoch,
    const GlooOptions& options, std::function<bool()> cancelled) {
  KvRendezvousStore store(client, GroupPrefix(name, epoch),
                          options.connect_timeout, std::move(cancelled));
  return ConnectGloo(options, store);
}

}  // namespace strata
