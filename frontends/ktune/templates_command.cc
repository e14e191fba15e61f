// `ktune templates`: the templates that loaded, with their dtypes, dims and how many
// candidates each has for a shape; with --configs TEMPLATE, the candidates themselves.
#include <iomanip>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "frontends/ktune/commands.h"
#include "server/base/config.h"
#include "server/templates/search_space.h"

namespace ktune::cli {
namespace {

struct TemplatesArgs {
  std::string templates_dir;
  std::string shape;
  std::string dtype;
  std::string arch = "sm_90";
  std::string configs;  // --configs TEMPLATE: its candidates instead of the table
};

// `--configs TEMPLATE`: every valid candidate of the space `ktune tune` searches for this
// key on --arch, one JSON object per line in EnumerateSearchSpace's order. The JSON is the
// store's (ConfigToJson), so a tool driving another tuner over the same space
// (bench/kernel_tuner_compare.py) can match its picks against ktune's trials byte for byte.
// Unlike the table, the key must be whole: a space listed for example dims nobody asked
// for would be compared with the wrong tune.
int RunConfigs(const TemplatesArgs& args) {
  if (args.dtype.empty() || args.shape.empty()) {
    return Fail(absl::InvalidArgumentError(
        "--configs: needs --dtype and --shape (every dim of the template), as `ktune tune`"));
  }
  absl::StatusOr<TargetInfo> target = TargetFromArch(args.arch);
  if (!target.ok()) return Fail(target.status());
  absl::StatusOr<TemplateRequest> request =
      ResolveTemplateRequest(args.templates_dir, args.configs, args.dtype, args.shape);
  if (!request.ok()) return Fail(request.status());
  absl::StatusOr<SearchSpace> space =
      EnumerateSearchSpace(request->tmpl, request->dtype, request->shape, *target);
  if (!space.ok()) return Fail(space.status());
  if (space->configs.empty()) {
    // Not an error of the listing, but a reader of stdout alone would see only silence.
    std::cerr << "ktune: " << args.configs << ": no valid candidate for "
              << DTypeName(request->dtype) << " " << ShapeString(request->shape) << "\n";
  }
  for (const Config& c : space->configs) std::cout << ConfigToJson(c) << "\n";
  return kExitOk;
}

int RunTemplates(const TemplatesArgs& args) {
  absl::StatusOr<TargetInfo> target = TargetFromArch(args.arch);
  if (!target.ok()) return Fail(target.status());
  Shape given;
  if (!args.shape.empty()) {
    absl::StatusOr<Shape> s = ParseShape(args.shape);
    if (!s.ok()) return Fail(s.status());
    given = *s;
  }
  std::optional<DType> wanted;
  if (!args.dtype.empty()) {
    absl::StatusOr<DType> d = ParseDTypeFlag(args.dtype);
    if (!d.ok()) return Fail(d.status());
    wanted = *d;
  }
  absl::StatusOr<std::unique_ptr<TemplateRegistry>> registry =
      LoadRegistryOrWarn(args.templates_dir);
  if (!registry.ok()) return Fail(registry.status());

  struct Row {
    std::string name, dtypes, dims, dtype, shape, candidates, params;
  };
  std::vector<Row> rows;
  rows.push_back({"TEMPLATE", "DTYPES", "DIMS", "DTYPE", "SHAPE", "CANDIDATES", "PARAM-POINTS"});
  for (const auto& [name, tmpl] : (*registry)->templates()) {
    const v1::TemplateManifest& m = tmpl->manifest();
    // Each template's shape: the given dims it has, its examples for the rest.
    Shape shape;
    std::vector<std::string> dims;
    for (const v1::Dim& d : m.dims()) {
      dims.push_back(d.name());
      auto it = given.find(d.name());
      shape[d.name()] = it != given.end() ? it->second : d.example();
    }
    DType dtype = tmpl->dtypes().front();
    if (wanted) {
      if (!tmpl->SupportsDType(*wanted)) continue;
      dtype = *wanted;
    }
    Row row{name, absl::StrJoin(m.dtypes(), ","), absl::StrJoin(dims, ","),
            std::string(DTypeName(dtype)), ShapeString(shape), "", ""};
    if (absl::Status s = ValidateRequest(*tmpl, dtype, shape); !s.ok()) {
      row.candidates = "-";
      row.params = "-";
      std::cerr << "ktune: " << name << ": " << s.message() << "\n";
    } else {
      absl::StatusOr<SearchSpace> all = EnumerateSearchSpace(tmpl, dtype, shape, *target);
      absl::StatusOr<SearchSpace> params =
          EnumerateParams(tmpl, dtype, shape, *target, DefaultConfig(*tmpl, *target).knobs);
      if (!all.ok() || !params.ok()) {
        // The template's own defect at this shape: said, and the others still listed.
        row.candidates = "-";
        row.params = "-";
        std::cerr << "ktune: " << name << ": "
                  << (all.ok() ? params.status() : all.status()).message() << "\n";
      } else {
        row.candidates = absl::StrCat(all->configs.size());
        row.params = absl::StrCat(params->configs.size(), "/", params->param_points);
      }
    }
    rows.push_back(std::move(row));
  }
  std::vector<size_t> width(7, 0);
  for (const Row& r : rows) {
    const std::string* cells[] = {&r.name, &r.dtypes, &r.dims, &r.dtype,
                                  &r.shape, &r.candidates, &r.params};
    for (int i = 0; i < 7; ++i) width[i] = std::max(width[i], cells[i]->size());
  }
  for (const Row& r : rows) {
    const std::string* cells[] = {&r.name, &r.dtypes, &r.dims, &r.dtype,
                                  &r.shape, &r.candidates, &r.params};
    std::string line;
    for (int i = 0; i < 7; ++i) {
      std::string cell = *cells[i];
      if (i < 6) cell.resize(width[i] + 2, ' ');
      line += cell;
    }
    std::cout << line << "\n";
  }
  return kExitOk;
}

}  // namespace

Command AddTemplatesCommand(CLI::App& parent) {
  auto args = std::make_shared<TemplatesArgs>();
  CLI::App* app = parent.add_subcommand(
      "templates",
      "List the kernel templates: dtypes, dims, and the number of valid candidates (params x "
      "knobs) and of valid param points at default knobs for a shape; or, with --configs, "
      "one template's candidates");
  app->add_option("--templates", args->templates_dir, "Templates folder (default: shipped)");
  app->add_option("--shape", args->shape,
                  "Dims to count for, e.g. tokens=4096,hidden=8192 (others: the examples)");
  app->add_option("--dtype", args->dtype, "Count for this dtype (default: each one's first)");
  app->add_option("--arch", args->arch, "Target, sm_XY or sm_XYa")->capture_default_str();
  app->add_option("--configs", args->configs,
                  "Instead of the table: every valid candidate of this template for --dtype "
                  "and --shape (both required), one JSON object per line "
                  "{\"params\":{..},\"knobs\":{..}}");
  return {app, [args] { return args->configs.empty() ? RunTemplates(*args) : RunConfigs(*args); }};
}

}  // namespace ktune::cli
