#include "server/tuning/spec_schedule.h"

#include <algorithm>
#include <tuple>

namespace ktune {

double SpecKeySize(const SpecKey& key) {
  double size = 1;
  for (const auto& [name, value] : key.shape) size *= std::max<double>(1, static_cast<double>(value));
  return size;
}

SpecSchedule::SpecSchedule(const std::vector<SpecKey>& keys) {
  // Chains in order of first appearance: one per (entry, template, dtype). Two entries may
  // name the same template at other dims (one per projection): each is its own chain.
  std::map<std::tuple<int, std::string, DType>, size_t> chain_of;
  for (size_t i = 0; i < keys.size(); ++i) {
    const SpecKey& k = keys[i];
    auto [it, added] = chain_of.try_emplace({k.line, k.template_name, k.dtype}, chains_.size());
    if (added) chains_.emplace_back();
    Chain& c = chains_[it->second];
    c.keys.push_back(i);
    c.size += SpecKeySize(k);
  }
  for (Chain& c : chains_) {
    std::stable_sort(c.keys.begin(), c.keys.end(), [&](size_t a, size_t b) {
      return SpecKeySize(keys[a]) > SpecKeySize(keys[b]);
    });
  }
  std::stable_sort(chains_.begin(), chains_.end(),
                   [](const Chain& a, const Chain& b) { return a.size > b.size; });
}

std::optional<size_t> SpecSchedule::Next(int worker) {
  auto own = owned_.find(worker);
  if (own != owned_.end() && chains_[own->second].keys.empty()) {
    owned_.erase(own);
    own = owned_.end();
  }
  if (own == owned_.end() && next_chain_ < chains_.size()) {
    own = owned_.emplace(worker, next_chain_++).first;
  }
  if (own != owned_.end()) {
    std::deque<size_t>& chain = chains_[own->second].keys;
    const size_t i = chain.front();
    chain.pop_front();
    return i;
  }
  // Every chain has an owner: the smallest key of the chain with the most keys left (the
  // first such chain on a tie), which its owner would reach last.
  Chain* longest = nullptr;
  for (Chain& c : chains_) {
    if (!c.keys.empty() && (longest == nullptr || c.keys.size() > longest->keys.size())) {
      longest = &c;
    }
  }
  if (longest == nullptr) return std::nullopt;
  const size_t i = longest->keys.back();
  longest->keys.pop_back();
  return i;
}

}  // namespace ktune
