// Sample rows and temporary files shared by the store tests.
//
// Plain helpers; each returns fresh values, so tests may use them from any thread.
#ifndef KTUNE_TESTS_STORE_STORE_FIXTURES_H_
#define KTUNE_TESTS_STORE_STORE_FIXTURES_H_

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/base/config.h"
#include "server/base/launch_spec.h"
#include "server/base/outcome.h"
#include "server/base/sha256.h"
#include "server/base/trial_metrics.h"
#include "server/store/store.h"

namespace ktune::store::testing {

// A fresh directory under the test's temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "ktune_store_XXXXXX";
    char* made = mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr) << "mkdtemp " << pattern;
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteBytes(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

inline bool FileExists(const std::string& path) { return std::filesystem::exists(path); }

inline EntryKey MakeKey(const std::string& shape, const std::string& dtype = "f16",
                        const std::string& template_id = "rmsnorm",
                        const std::string& device = "NVIDIA H200|sm_90|132sm|6144bit") {
  return EntryKey{device, template_id, dtype, shape};
}

// Every field set, none to its default.
inline Device MakeDevice(const std::string& model_key = "NVIDIA H200|sm_90|132sm|6144bit") {
  Device d;
  d.model_key = model_key;
  d.name = "NVIDIA H200";
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.l2_bytes = 52428800;
  d.memory_bus_bits = 6144;
  d.memory_clock_khz = 2619000;
  d.copy_gbps = 4123.5;
  d.uuid = "GPU-0b1c2d3e-aaaa-bbbb-cccc-123456789abc";
  d.driver_version = "580.65.06";
  return d;
}

inline Config MakeConfig(int64_t block) {
  Config c;
  c.params = {{"BLOCK", block}, {"VEC", 4}, {"UNROLL", 2}};
  c.knobs.maxrregcount = 64;
  c.knobs.min_blocks = 2;
  c.knobs.fast_math = true;
  c.knobs.target = "sm_90a";
  return c;
}

// Distinct, non-zero values derived from `seed`, so a mixed-up column shows.
inline TrialMetrics MakeMetrics(int64_t seed) {
  TrialMetrics m;
  m.time_ns = 1000.25 + seed;
  m.spread_ns = 12.5 + seed;
  m.repeats = 50 + seed;
  m.registers = 40 + seed;
  m.spill_bytes = 8 + seed;
  m.static_smem = 1024 + seed;
  m.dynamic_smem = 2048 + seed;
  m.occupancy = 0.75;
  m.waves = 3.5 + seed;
  m.gbps = 3000.125 + seed;
  m.gflops = 12.75 + seed;
  m.ceiling_fraction = 0.8125;
  m.last_wave = 0.375;
  m.batch = 4 + seed;
  m.l2_flushed = true;
  return m;
}

inline bool SameMetrics(const TrialMetrics& a, const TrialMetrics& b) {
  return a.time_ns == b.time_ns && a.spread_ns == b.spread_ns && a.repeats == b.repeats &&
         a.registers == b.registers && a.spill_bytes == b.spill_bytes &&
         a.static_smem == b.static_smem && a.dynamic_smem == b.dynamic_smem &&
         a.occupancy == b.occupancy && a.waves == b.waves && a.gbps == b.gbps &&
         a.gflops == b.gflops && a.ceiling_fraction == b.ceiling_fraction &&
         a.last_wave == b.last_wave && a.batch == b.batch && a.l2_flushed == b.l2_flushed;
}

inline Job MakeJob(const EntryKey& key, int64_t total = 20) {
  Job j;
  j.key = key;
  j.source_hash = "src-aaaa";
  j.nvrtc_version = "13.0";
  j.strategy = "random:64";
  j.state = JobState::kRunning;
  j.done = 0;
  j.total = total;
  return j;
}

inline Trial MakeTrial(int64_t job_id, int64_t i, Outcome outcome = Outcome::kOk) {
  Trial t;
  t.job_id = job_id;
  t.config = MakeConfig(64 * (i + 1));
  t.candidate_hash = absl::StrCat("cand-", job_id, "-", i);
  t.outcome = outcome;
  t.compile_ms = 150.5 + i;
  t.metrics = MakeMetrics(i);
  t.log = outcome == Outcome::kOk ? "" : absl::StrCat("failed: reason ", i);
  t.created_unix_ms = 1700000000000 + i;
  return t;
}

inline std::vector<Trial> MakeTrials(int64_t job_id, int n) {
  std::vector<Trial> out;
  for (int i = 0; i < n; ++i) out.push_back(MakeTrial(job_id, i));
  return out;
}

// Bytes that look nothing like text: embedded NULs and every byte value.
inline std::string MakeCubin(int64_t seed, size_t size = 4096) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) {
    s[i] = static_cast<char>(i % 7 == 0 ? 0 : (i * 31 + seed * 17) & 0xff);
  }
  s[0] = '\x7f';  // an ELF-ish start, then a NUL straight after
  s[1] = '\0';
  return s;
}

inline Entry MakeEntry(const EntryKey& key, int64_t job_id, int64_t seed,
                       size_t cubin_size = 4096) {
  Entry e;
  e.key = key;
  e.source_hash = "src-aaaa";
  e.nvrtc_version = "13.0";
  e.config = MakeConfig(128 + seed);
  e.cubin = MakeCubin(seed, cubin_size);
  e.cubin_sha256 = Sha256Hex(e.cubin);
  LaunchSpec reduce;
  reduce.lowered_name = "_Z7rmsnormILi256EEvPK6__halfPS0_i";
  reduce.grid = {4096, 1, 1};
  reduce.block = {256, 1, 1};
  reduce.shared_bytes = 1024;
  reduce.args = {"x", "weight", "y", "tokens"};
  LaunchSpec finish = reduce;
  finish.lowered_name = "_Z6finishv";
  finish.grid = {1, 2, 3};
  finish.block = {32, 4, 1};
  finish.shared_bytes = 0;
  finish.args = {};
  e.launches = {reduce, finish};
  e.metrics = MakeMetrics(seed);
  e.job_id = job_id;
  e.trials_total = 20;
  e.trials_ok = 17;
  e.tuning_seconds = 12.5 + seed;
  e.created_unix_ms = 1700000001000 + seed;
  e.default_time_ns = 2 * e.metrics.time_ns;  // the default config, twice the winner's time
  return e;
}

// Every stored field of two entries equal; `same_job` false where the entries live in
// different stores (an export imported elsewhere gets a job id of its own).
inline void ExpectSameEntry(const Entry& got, const Entry& want, bool same_job = true) {
  EXPECT_EQ(got.key, want.key);
  EXPECT_EQ(got.source_hash, want.source_hash);
  EXPECT_EQ(got.nvrtc_version, want.nvrtc_version);
  EXPECT_EQ(got.config, want.config);
  EXPECT_EQ(got.cubin.size(), want.cubin.size());
  EXPECT_TRUE(got.cubin == want.cubin) << "cubin bytes differ";
  EXPECT_EQ(got.cubin_sha256, want.cubin_sha256);
  EXPECT_EQ(got.launches, want.launches);
  EXPECT_TRUE(SameMetrics(got.metrics, want.metrics));
  if (same_job) {
    EXPECT_EQ(got.job_id, want.job_id);
  }
  EXPECT_EQ(got.trials_total, want.trials_total);
  EXPECT_EQ(got.trials_ok, want.trials_ok);
  EXPECT_EQ(got.tuning_seconds, want.tuning_seconds);
  EXPECT_EQ(got.created_unix_ms, want.created_unix_ms);
  EXPECT_EQ(got.default_time_ns, want.default_time_ns);
}

}  // namespace ktune::store::testing

#endif  // KTUNE_TESTS_STORE_STORE_FIXTURES_H_
