// Which key of a spec each GPU tunes next when a spec runs on several GPUs at once
// (`ktune tune --spec --gpus`).
//
// A spec's keys come in chains: the shapes of one entry and dtype (rmsnorm bf16 at 1 to
// 16384 tokens, one projection's GEMMs at every m). Along a chain each key warm-starts from
// the neighbours tuned before it and finds most of its candidates in the cubin cache, so
// one GPU keeps to one chain. Two GPUs walking the same chain side by side (taking the next
// key in spec order, as the first version did) had neither: each key's neighbour was still
// running on the other GPU, and both compiled the same candidates at the same time.
//
// So: a GPU takes a whole chain and walks it largest shape first; chains are handed out
// largest first (the longest jobs first is what keeps the last GPU from finishing long
// after the others); once every chain has an owner, a GPU that runs out takes the smallest
// untaken key of the chain with the most keys left, walking it from the other end, so the
// GPUs finish within about one small key of each other.
//
// A key's size is the product of its dims (each at least 1): the elements or the
// multiply-adds of a template's problem, which orders the shapes of one template well and
// puts GEMMs, by far the longest to tune, ahead of the memory-bound templates.
//
// Not thread-safe: the caller serialises Next.
#ifndef KTUNE_SERVER_TUNING_SPEC_SCHEDULE_H_
#define KTUNE_SERVER_TUNING_SPEC_SCHEDULE_H_

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "server/tuning/tuning_spec.h"

namespace ktune {

// The product of the shape's dims, each counted as at least 1 (a flag dim of 0 leaves the
// product alone).
double SpecKeySize(const SpecKey& key);

class SpecSchedule {
 public:
  // `keys` in spec order; Next returns indices into it.
  explicit SpecSchedule(const std::vector<SpecKey>& keys);

  // The key GPU `worker` tunes next, or nullopt when every key has been handed out. Each
  // index is returned once.
  std::optional<size_t> Next(int worker);

 private:
  struct Chain {
    std::deque<size_t> keys;  // untaken, largest first
    double size = 0;          // of all its keys
  };

  std::vector<Chain> chains_;   // largest first
  size_t next_chain_ = 0;       // chains_[next_chain_..] have no owner yet
  std::map<int, size_t> owned_;  // a worker's chain, while it has keys left
};

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_SPEC_SCHEDULE_H_
