#include "server/gate_set.h"

#include <utility>

namespace strata {

GateSet::GateSet(GateParts parts, const Consistency& mode)
    : parts_(parts), mode_(mode) {
  gates_.emplace_back(mode.ToString(), ConsistencyGate::Create(parts, mode));
  current_.store(gates_.back().second.get(), std::memory_order_release);
}

Consistency GateSet::mode() const {
  absl::MutexLock lock(&mu_);
  return mode_;
}

ConsistencyGate& GateSet::Get(const Consistency& mode) {
  absl::MutexLock lock(&mu_);
  return GetLocked(mode);
}

ConsistencyGate& GateSet::GetLocked(const Consistency& mode) {
  const std::string name = mode.ToString();
  for (const auto& [n, g] : gates_) {
    if (n == name) return *g;
  }
  gates_.emplace_back(name, ConsistencyGate::Create(parts_, mode));
  return *gates_.back().second;
}

void GateSet::SwitchTo(const Consistency& to) {
  absl::MutexLock lock(&mu_);
  ConsistencyGate& gate = GetLocked(to);
  mode_ = to;
  current_.store(&gate, std::memory_order_release);
}

}  // namespace strata
