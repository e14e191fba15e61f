// `ktune cache report`: the pages hold one roofline per entry, and they render in headless
// Chromium (Debian's chromium package; deploy/install-deps.sh installs it) with the charts
// in the DOM and a screenshot that is not blank. Skips, saying why, only when no Chromium
// binary is found.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "tests/ktune/cache_fixture.h"
#include "tests/store/store_fixtures.h"
#include "tests/testing/subprocess.h"

namespace ktune {
namespace {

using ::ktune::store::testing::ReadBytes;
using ::ktune::store::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The first of chromium, chromium-browser, google-chrome on PATH; "" if none.
std::string FindChromium() {
  const char* path = std::getenv("PATH");
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    for (absl::string_view dir : absl::StrSplit(path ? path : "", ':')) {
      const std::string candidate = absl::StrCat(dir, "/", name);
      if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return "";
}

class CacheReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = dir_.File("main.db");
    cache_testing::BuildMainStore(db_);
    out_ = dir_.File("report");
    std::filesystem::create_directories(dir_.File("run"));
    const testing::RunResult r = testing::RunToEnd(
        KTUNE_BINARY_DIR "/bin/ktune",
        {"cache", "report", "--db", db_, "--nvrtc-version", "13.0", "--out", out_},
        dir_.File("run"), absl::Seconds(60));
    ASSERT_EQ(r.exit_code, 0) << r;
    report_out_ = r.out;
  }

  TempDir dir_;
  std::string db_, out_, report_out_;
};

TEST_F(CacheReportTest, OnePagePerTemplateOneRooflinePerEntry) {
  EXPECT_THAT(report_out_, HasSubstr("rmsnorm.html: 3 entries"));
  EXPECT_THAT(report_out_, HasSubstr("elementwise.html: 1 entries"));
  const std::string rms = ReadBytes(out_ + "/rmsnorm.html");
  const std::string ew = ReadBytes(out_ + "/elementwise.html");
  const std::string index = ReadBytes(out_ + "/index.html");
  EXPECT_EQ(Count(rms, "<svg class=\"roofline\""), 3u);
  EXPECT_EQ(Count(ew, "<svg class=\"roofline\""), 1u);
  // BLOCK and VEC vary in every fixture job; the knobs do not, so they get no plot.
  EXPECT_EQ(Count(rms, "<svg class=\"param-plot\""), 6u);
  EXPECT_EQ(Count(rms, "class=\"winner\""), 3u + 6u);
  EXPECT_EQ(Count(rms, "class=\"memory-roof\""), 3u);
  EXPECT_THAT(rms, HasSubstr("no compute ceiling measured: memory roof only"));
  EXPECT_THAT(rms, HasSubstr("memory roof 4124 GB/s"));
  EXPECT_THAT(ew, HasSubstr("memory roof 1720 GB/s"));
  EXPECT_THAT(index, HasSubstr("<a href=\"rmsnorm.html\">rmsnorm</a>"));
  // Self-contained: no scripts, nothing fetched.
  for (const std::string* page : {&rms, &ew, &index}) {
    // The SVG namespace is a name, not a fetch; any other URL would be.
    const std::string text =
        absl::StrReplaceAll(*page, {{"xmlns=\"http://www.w3.org/2000/svg\"", ""}});
    EXPECT_THAT(text, Not(HasSubstr("<script")));
    EXPECT_THAT(text, Not(HasSubstr("http://")));
    EXPECT_THAT(text, Not(HasSubstr("https://")));
  }
}

TEST_F(CacheReportTest, RendersInHeadlessChromium) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) {
    GTEST_SKIP() << "no chromium, chromium-browser or google-chrome on PATH (Debian: apt-get "
                    "install chromium; deploy/install-deps.sh does)";
  }
  const std::string page = absl::StrCat("file://", out_, "/rmsnorm.html");
  const std::vector<std::string> common = {"--headless", "--no-sandbox", "--disable-gpu",
                                           "--hide-scrollbars",
                                           absl::StrCat("--user-data-dir=", dir_.File("profile"))};
  std::filesystem::create_directories(dir_.File("dom"));
  std::vector<std::string> dom_args = common;
  dom_args.push_back("--dump-dom");
  dom_args.push_back(page);
  testing::Subprocess dump(chromium, dom_args, dir_.File("dom"));
  ASSERT_EQ(dump.Wait(absl::Seconds(120)), 0) << dump.Stderr();
  const std::string dom = dump.Stdout();
  EXPECT_EQ(Count(dom, "<svg class=\"roofline\""), 3u) << dom.substr(0, 2000);
  EXPECT_EQ(Count(dom, "<svg class=\"param-plot\""), 6u);
  EXPECT_GE(Count(dom, "<circle class=\"trial\""), 30u);

  const std::string png = dir_.File("rmsnorm.png");
  std::filesystem::create_directories(dir_.File("shot"));
  std::vector<std::string> shot_args = common;
  shot_args.push_back(absl::StrCat("--screenshot=", png));
  shot_args.push_back("--window-size=1280,1800");
  shot_args.push_back(page);
  testing::Subprocess shot(chromium, shot_args, dir_.File("shot"));
  ASSERT_EQ(shot.Wait(absl::Seconds(120)), 0) << shot.Stderr();
  const std::string bytes = ReadBytes(png);
  ASSERT_GE(bytes.size(), 8u) << "no screenshot at " << png;
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  // A blank 1280x1800 page compresses to a few kB; charts and text make it far larger.
  EXPECT_GT(bytes.size(), 40000u);
  if (const char* keep = std::getenv("KTUNE_KEEP_SCREENSHOT")) {
    std::filesystem::copy_file(png, keep, std::filesystem::copy_options::overwrite_existing);
  }
}

}  // namespace
}  // namespace ktune
