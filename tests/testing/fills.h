// A buffer fill (manifest.proto's Fill) in one expression, for the tests of the worker's
// fills on the host and on the GPU.
#ifndef KTUNE_TESTS_TESTING_FILLS_H_
#define KTUNE_TESTS_TESTING_FILLS_H_

#include "ktune/v1/manifest.pb.h"

namespace ktune::testing {

inline v1::Fill MakeFill(v1::Fill::Kind kind, double lo = 0, double hi = 0) {
  v1::Fill f;
  f.set_kind(kind);
  f.set_lo(lo);
  f.set_hi(hi);
  return f;
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_FILLS_H_
