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

std::optional<Consistency> GateSet::SwitchTo(const Consistency& to) {
  absl::MutexLock lock(&mu_);
  const std::string name = to.ToString();
  if (name == mode_.ToString()) return std::nullopt;
  ConsistencyGate* gate = nullptr;
  for (const auto& [n, g] : gates_) {
    if (n == name) gate = g.get();
  }
  if (gate == nullptr) {
    gates_.emplace_back(name, ConsistencyGate::Create(parts_, to));
    gate = gates_.back().second.get();
  }
  const Consistency before = mode_;
  mode_ = to;
  current_.store(gate, std::memory_order_release);
  return before;
}

}  // namespace strata
