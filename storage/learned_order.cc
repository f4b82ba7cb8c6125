#include "storage/learned_order.h"

#include <algorithm>

namespace strata {

void LearnedOrder::Use(uint64_t id) {
  if (seen_ > 0 && last_ == id) return;
  // Records `next` as what follows `key` in `map`, noting a change.
  auto learn = [this](auto& map, const auto& key, uint64_t next) {
    auto [it, inserted] = map.try_emplace(key, next);
    if (inserted || it->second != next) {
      it->second = next;
      ++version_;
    }
  };
  if (seen_ >= 1) {
    learn(next_, last_, id);
    before_[id] = last_;
  }
  if (seen_ >= 2) learn(next2_, std::make_pair(last2_, last_), id);
  last2_ = last_;
  last_ = id;
  seen_ = std::min(seen_ + 1, 2);
}

bool LearnedOrder::Successor(bool have_prev, uint64_t prev, uint64_t at,
                             uint64_t* next) const {
  if (have_prev) {
    if (auto it = next2_.find({prev, at}); it != next2_.end()) {
      *next = it->second;
      return true;
    }
  }
  if (auto it = next_.find(at); it != next_.end()) {
    *next = it->second;
    return true;
  }
  return false;
}

std::vector<uint64_t> LearnedOrder::Next(uint64_t id, size_t n) const {
  std::vector<uint64_t> out;
  auto before = before_.find(id);
  bool have_prev = before != before_.end();
  uint64_t prev = have_prev ? before->second : 0, at = id, next;
  while (out.size() < n && Successor(have_prev, prev, at, &next)) {
    // Back at the start, or a cycle shorter than n (a tiny model): done.
    if (next == id || std::find(out.begin(), out.end(), next) != out.end())
      break;
    out.push_back(next);
    prev = at;
    at = next;
    have_prev = true;
  }
  return out;
}

void LearnedOrder::BuildCycle() {
  place_.clear();
  cycle_version_ = version_;
  built_from_ = last_;
  closed_ = false;
  if (seen_ == 0) return;
  bool have_prev = seen_ >= 2;
  uint64_t prev = last2_, at = last_, next;
  place_[at] = 0;
  while (Successor(have_prev, prev, at, &next)) {
    if (!place_.try_emplace(next, place_.size()).second) {
      closed_ = next == last_;
      return;
    }
    prev = at;
    at = next;
    have_prev = true;
  }
}

std::vector<uint64_t> LearnedOrder::FarthestFirst(
    const std::vector<uint64_t>& ids) {
  // A closed cycle holds from any of its places; a walk that ended
  // elsewhere (a tile met twice, a successor unknown) only from its start.
  if (cycle_version_ != version_ || !place_.contains(last_) ||
      (!closed_ && built_from_ != last_)) {
    BuildCycle();
  }
  const size_t length = place_.size();
  auto latest = place_.find(last_);
  // How many uses ahead each tile's next use is: the tile just used a
  // whole cycle; tiles off the cycle more than any.
  auto ahead = [&](uint64_t id) -> size_t {
    auto it = place_.find(id);
    if (it == place_.end() || latest == place_.end()) return length + 1;
    const size_t d = (it->second + length - latest->second) % length;
    return d == 0 ? length : d;
  };
  std::vector<std::pair<size_t, uint64_t>> keyed;
  keyed.reserve(ids.size());
  for (uint64_t id : ids) keyed.emplace_back(ahead(id), id);
  std::stable_sort(
      keyed.begin(), keyed.end(),
      [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<uint64_t> out;
  out.reserve(keyed.size());
  for (const auto& [d, id] : keyed) out.push_back(id);
  return out;
}

}  // namespace strata
