// The pages of `ktune cache report`: one self-contained HTML file per template (inline CSS
// and SVG, no scripts, no network) with, per entry, its roofline and the time of every
// candidate by param; and an index linking them. Plain functions, thread-safe.
#ifndef KTUNE_CLIENT_CLI_CACHE_REPORT_HTML_H_
#define KTUNE_CLIENT_CLI_CACHE_REPORT_HTML_H_

#include <string>
#include <utility>
#include <vector>

#include "server/store/store.h"

namespace ktune::cli {

// One entry as the report shows it.
struct ReportEntry {
  store::Entry entry;
  bool stale = false;
  std::vector<store::Trial> trials;  // its job's, any order; empty when the job was pruned
  store::Device device;              // copy_gbps 0 when the model was never measured
};

// The page for `template_id`; `source` says where the data came from (the database path).
std::string RenderTemplatePage(const std::string& template_id,
                               const std::vector<ReportEntry>& entries, const std::string& source);

// The index: (template id, page file name, entry count) per template.
struct ReportIndexRow {
  std::string template_id;
  std::string file;
  size_t entries = 0;
};
std::string RenderReportIndex(const std::vector<ReportIndexRow>& rows, const std::string& source);

}  // namespace ktune::cli

#endif  // KTUNE_CLIENT_CLI_CACHE_REPORT_HTML_H_
