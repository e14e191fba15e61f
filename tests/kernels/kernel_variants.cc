#include "tests/kernels/kernel_variants.h"

#include <cstdint>
#include <map>

namespace ktune::testing {
namespace {

// A param's value in the config (0 when the template has no such param).
int64_t P(const Config &c, const char *name) {
  auto it = c.params.find(name);
  return it == c.params.end() ? 0 : it->second;
}

// The row norms' (rmsnorm, add_rmsnorm, layernorm) paths with edges (EDGE = 1: a row length
// no multiple of VEC, weight and bias read shifted): the row read twice, cached, cached with
// the weight prefetched, and a row per warp.
std::vector<KernelVariant> RowNormEdgeVariants() {
  return {{"edges, uncached",
           [](const Config &c) {
             return P(c, "EDGE") == 1 && P(c, "CACHE") == 0 && P(c, "ROWS_PER_WARP") == 0;
           }},
          {"edges, cached",
           [](const Config &c) {
             return P(c, "EDGE") == 1 && P(c, "CACHE") > 0 && P(c, "PREFETCH_W") == 0 &&
                    P(c, "ROWS_PER_WARP") == 0;
           }},
          {"edges, weight prefetched",
           [](const Config &c) { return P(c, "EDGE") == 1 && P(c, "PREFETCH_W") == 1; }},
          {"edges, row per warp",
           [](const Config &c) { return P(c, "EDGE") == 1 && P(c, "ROWS_PER_WARP") == 1; }},
          // The body compiled once per shift of the weight (ktune::WithShift): the cases
          // of 9 rows or more of 1001 take every shift.
          {"edges, compiled per shift, uncached",
           [](const Config &c) { return P(c, "PER_SHIFT") == 1 && P(c, "CACHE") == 0; }},
          {"edges, compiled per shift, cached",
           [](const Config &c) { return P(c, "PER_SHIFT") == 1 && P(c, "CACHE") > 0; }}};
}

// add_rmsnorm's: the edge paths, and bodies from a 128-byte line (EDGE 2).
std::vector<KernelVariant> AddRmsnormVariants() {
  std::vector<KernelVariant> v = RowNormEdgeVariants();
  v.push_back({"edges on lines", [](const Config &c) { return P(c, "EDGE") == 2; }});
  return v;
}

// rmsnorm's and layernorm's: the edge paths, and rows that share one shifted read of the
// weight (and bias).
std::vector<KernelVariant> RowNormReuseVariants() {
  std::vector<KernelVariant> v = RowNormEdgeVariants();
  v.push_back({"edges, weight reused across rows",
               [](const Config &c) {
                 return P(c, "EDGE") == 1 && P(c, "REUSE_W") > 1 && P(c, "PREFETCH_W") == 1;
               }});
  v.push_back({"edges, weight reused from shared memory",
               [](const Config &c) { return P(c, "REUSE_W") > 1 && P(c, "PREFETCH_W") == 2; }});
  v.push_back({"edges, weight reused, compiled per shift",
               [](const Config &c) { return P(c, "REUSE_W") > 1 && P(c, "PER_SHIFT") == 1; }});
  return v;
}

// rmsnorm's and layernorm's, with bodies from a 128-byte line (EDGE 2) besides, alone and
// with rows that share the weight (8 * VEC rows apart).
std::vector<KernelVariant> RowNormLineVariants() {
  std::vector<KernelVariant> v = RowNormReuseVariants();
  v.push_back({"edges on lines",
               [](const Config &c) { return P(c, "EDGE") == 2 && P(c, "REUSE_W") == 1; }});
  v.push_back({"edges on lines, weight reused across rows",
               [](const Config &c) { return P(c, "EDGE") == 2 && P(c, "REUSE_W") > 1; }});
  return v;
}

std::map<std::string, std::vector<KernelVariant>> AllVariants() {
  return {
      {"gemm",
       {{"Hopper, decode (SWAP)",
         [](const Config &c) { return P(c, "WGMMA") == 1 && P(c, "SWAP") == 1 && P(c, "SPLIT_K") == 1; }},
        {"Hopper, split-K",
         [](const Config &c) { return P(c, "WGMMA") == 1 && P(c, "SPLIT_K") > 1; }},
        {"Hopper, one consumer",
         [](const Config &c) { return P(c, "WGMMA") == 1 && P(c, "BM") == 64 && P(c, "SWAP") == 0; }},
        {"Hopper, cluster sharing x",
         [](const Config &c) {
           return P(c, "WGMMA") == 1 && P(c, "CLUSTER") > 1 && P(c, "SHARE_W") == 0 &&
                  P(c, "EPI") == 0;
         }},
        {"Hopper, cluster sharing w",
         [](const Config &c) {
           return P(c, "WGMMA") == 1 && P(c, "SHARE_W") == 1 && P(c, "EPI") == 0;
         }},
        {"Hopper, TMA-store epilogue",
         [](const Config &c) { return P(c, "WGMMA") == 1 && P(c, "EPI") == 1; }},
        // fp8 adds a slot's product to its accumulators in two halves of 128 columns here.
        {"Hopper, 256 columns",
         [](const Config &c) { return P(c, "WGMMA") == 1 && P(c, "BN") == 256 && P(c, "EPI") == 0; }},
        {"Hopper, 256 columns, TMA-store epilogue",
         [](const Config &c) { return P(c, "BN") == 256 && P(c, "EPI") == 1; }},
        {"Hopper, TMA-store epilogue, cluster sharing w",
         [](const Config &c) { return P(c, "EPI") == 1 && P(c, "SHARE_W") == 1; }},
        {"Hopper, last wave split (TAIL)",
         [](const Config &c) { return P(c, "TAIL") == 1 && P(c, "EPI") == 0 && P(c, "CLUSTER") == 1; }},
        {"Hopper, last wave split, TMA-store epilogue",
         [](const Config &c) { return P(c, "TAIL") == 1 && P(c, "EPI") == 1 && P(c, "CLUSTER") == 1; }},
        {"Hopper, last wave split, cluster sharing w",
         [](const Config &c) { return P(c, "TAIL") == 1 && P(c, "SHARE_W") == 1; }},
        {"portable (mma.sync)",
         [](const Config &c) { return P(c, "WGMMA") == 0 && P(c, "ROWS_X") == 0 && P(c, "SPLIT_K") == 1; }},
        {"portable, split-K",
         [](const Config &c) { return P(c, "WGMMA") == 0 && P(c, "ROWS_X") == 0 && P(c, "SPLIT_K") > 1; }},
        // CUDA cores at decode rows: several rows of x per block (at m = 3, chunks of 2 or 4
        // rows, the last one partial), one, and split-K.
        {"few rows (CUDA cores)",
         [](const Config &c) { return P(c, "ROWS_X") > 1 && P(c, "SPLIT_K") == 1; }},
        {"few rows, a row of x per block",
         [](const Config &c) { return P(c, "ROWS_X") == 1 && P(c, "SPLIT_K") == 1; }},
        {"few rows, split-K",
         [](const Config &c) { return P(c, "ROWS_X") > 0 && P(c, "SPLIT_K") > 1; }}}},
      {"gemv",
       {{"tensor cores",
         [](const Config &c) { return P(c, "MMA") == 1 && P(c, "SPLIT_K") == 1; }},
        {"tensor cores, split-K",
         [](const Config &c) { return P(c, "MMA") == 1 && P(c, "SPLIT_K") > 1; }},
        {"CUDA cores, split-K",
         [](const Config &c) { return P(c, "MMA") == 0 && P(c, "SPLIT_K") > 1; }}}},
      {"softmax",
       {{"row cached in registers",
         [](const Config &c) {
           return P(c, "SPLIT") == 1 && P(c, "CACHE") > 0 && P(c, "ROWS_PER_WARP") == 0;
         }},
        {"row per warp",
         [](const Config &c) { return P(c, "ROWS_PER_WARP") == 1; }},
        {"cluster",
         [](const Config &c) { return P(c, "SPLIT") > 1 && P(c, "CACHE") > 0; }},
        {"two launches",
         [](const Config &c) { return P(c, "SPLIT") > 1 && P(c, "CACHE") == 0; }},
        {"edges, online",
         [](const Config &c) {
           return P(c, "EDGE") == 1 && P(c, "SPLIT") == 1 && P(c, "CACHE") == 0 &&
                  P(c, "ROWS_PER_WARP") == 0;
         }},
        {"edges, row cached in registers",
         [](const Config &c) {
           return P(c, "EDGE") == 1 && P(c, "SPLIT") == 1 && P(c, "CACHE") > 0 &&
                  P(c, "ROWS_PER_WARP") == 0;
         }},
        {"edges, row per warp",
         [](const Config &c) { return P(c, "EDGE") == 1 && P(c, "ROWS_PER_WARP") == 1; }},
        {"edges, cluster",
         [](const Config &c) { return P(c, "EDGE") == 1 && P(c, "SPLIT") > 1 && P(c, "CACHE") > 0; }},
        {"edges, two launches",
         [](const Config &c) {
           return P(c, "EDGE") == 1 && P(c, "SPLIT") > 1 && P(c, "CACHE") == 0;
         }},
        // Bodies from a 128-byte line (EDGE 2): a block's row, and a row split over blocks.
        {"edges on lines",
         [](const Config &c) { return P(c, "EDGE") == 2 && P(c, "SPLIT") == 1; }},
        {"edges on lines, split rows",
         [](const Config &c) { return P(c, "EDGE") == 2 && P(c, "SPLIT") > 1; }}}},
      {"rmsnorm", RowNormLineVariants()},
      {"add_rmsnorm", AddRmsnormVariants()},
      {"layernorm", RowNormLineVariants()},
      {"silu_and_mul",
       {{"edges, tile per block",
         [](const Config &c) { return P(c, "EDGE") == 1 && P(c, "GRID_STRIDE") == 0; }},
        {"edges, grid-stride",
         [](const Config &c) { return P(c, "EDGE") == 1 && P(c, "GRID_STRIDE") == 1; }},
        {"edges on lines",
         [](const Config &c) { return P(c, "EDGE") == 2; }},
        {"edges, compiled per shift of gate",
         [](const Config &c) { return P(c, "EDGE") == 1 && P(c, "PER_SHIFT") == 1; }},
        {"edges on lines, compiled per shift of gate",
         [](const Config &c) { return P(c, "EDGE") == 2 && P(c, "PER_SHIFT") == 1; }},
        {"row-major tiles",
         [](const Config &c) { return P(c, "EDGE") == 0 && P(c, "GRID_STRIDE") == 2; }},
        {"edges, row-major tiles",
         [](const Config &c) { return P(c, "EDGE") == 1 && P(c, "GRID_STRIDE") == 2; }},
        {"flat tiles across rows",
         [](const Config &c) { return P(c, "EDGE") == 0 && P(c, "GRID_STRIDE") == 3; }},
        // Whole vectors across rows at any inter: gate and up shifted, a vector per row
        // crossing into the next, the last elements by the last block.
        {"edges, flat tiles across rows",
         [](const Config &c) { return P(c, "EDGE") == 1 && P(c, "GRID_STRIDE") == 3; }},
        {"edges, flat tiles across rows, 16-byte vectors unrolled",
         [](const Config &c) {
           return P(c, "EDGE") == 1 && P(c, "GRID_STRIDE") == 3 && P(c, "VEC_BYTES") == 16 &&
                  P(c, "UNROLL") > 1;
         }}}},
  };
}

} // namespace

const std::vector<KernelVariant> &KernelVariants(const std::string &template_name) {
  static const auto *all = new std::map<std::string, std::vector<KernelVariant>>(AllVariants());
  static const auto *none = new std::vector<KernelVariant>();
  auto it = all->find(template_name);
  return it == all->end() ? *none : it->second;
}

} // namespace ktune::testing
