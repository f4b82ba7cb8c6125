// Forming a collective group through the scheduler's rendezvous KV: a Gloo
// rendezvous store over SchedulerClient's KvPut/KvGet, and the group join
// that workers call with the membership epoch, so a group re-formed after a
// view change never reads the addresses of an older one.
#ifndef STRATA_COLLECTIVE_KV_RENDEZVOUS_H_
#define STRATA_COLLECTIVE_KV_RENDEZVOUS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collective/communicator.h"
#include "collective/gloo_communicator.h"
#include "gloo/rendezvous/store.h"

namespace strata {

class SchedulerClient;

// A Gloo store whose keys live in the scheduler's KV under `prefix`. Gets
// and waits block up to `timeout` for a key to appear, asking `cancelled`
// (when given) every 200 ms whether to give up (a rank that will never come:
// the membership moved on). Gloo expects stores to throw: failures come out
// as gloo::IoException, which ConnectGloo turns back into a Status.
// `client` is not owned and must outlive the store.
class KvRendezvousStore : public gloo::rendezvous::Store {
 public:
  KvRendezvousStore(SchedulerClient* client, std::string prefix,
                    absl::Duration timeout,
                    std::function<bool()> cancelled = nullptr);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  // The key's value, waiting until `deadline`; throws on a failure, a
  // timeout or a cancellation.
  std::string Await(const std::string& key, absl::Time deadline);

  SchedulerClient* client_;
  const std::string prefix_;
  const absl::Duration timeout_;
  std::function<bool()> cancelled_;
};

// The KV prefix of group `name` at membership `epoch`:
// collective/<name>/<epoch, 20 digits>/, so the groups of one name sort by
// epoch.
std::string GroupPrefix(absl::string_view name, uint64_t epoch);

// Deletes the KV keys of the groups before group (name, epoch) whose names
// begin with `family`: the same name's earlier epochs, and names of the
// family that sort before `name` (give names a zero-padded counter, e.g.
// the rollback generation, so that means older). Call it once a group has
// formed: the groups before it are over (their members moved on to it or
// were abandoned), and its own keys stay. Returns the keys deleted; errors
// as the scheduler answers. REQUIRES: name begins with family.
absl::StatusOr<uint64_t> ForgetGroupsBefore(SchedulerClient* client,
                                            absl::string_view family,
                                            absl::string_view name,
                                            uint64_t epoch);

// Forms (or joins) Gloo group `name` at `epoch` as options.rank of
// options.size, rendezvousing through `client`'s scheduler; `cancelled`
// (optional) ends the wait for the other ranks early (UNAVAILABLE).
// Errors: as ConnectGloo. Each (name, epoch) is used by one group only:
// re-forming after a failure takes a new epoch. The group's address keys stay
// in the scheduler's KV (`size` keys of at most 192 bytes per rank) until
// ForgetGroupsBefore deletes them.
absl::StatusOr<std::unique_ptr<Communicator>> JoinGlooGroup(
    SchedulerClient* client, absl::string_view name, uint64_t epoch,
    const GlooOptions& options, std::function<bool()> cancelled = nullptr);

}  // namespace strata

#endif  // STRATA_COLLECTIVE_KV_RENDEZVOUS_H_
