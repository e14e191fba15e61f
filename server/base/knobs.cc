#include "server/base/knobs.h"

#include <tuple>

namespace ktune {

bool operator<(const Knobs& a, const Knobs& b) {
  return std::tie(a.maxrregcount, a.min_blocks, a.fast_math, a.target) <
         std::tie(b.maxrregcount, b.min_blocks, b.fast_math, b.target);
}

}  // namespace ktune
