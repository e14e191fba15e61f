#include "server/templates/kernel_template.h"


#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/file.h"
#include "server/base/sha256.h"
#include "server/base/status_macros.h"
#include "server/base/text_proto_file.h"
#include "server/templates/search_space.h"
#include "server/templates/shape.h"

namespace ktune {
namespace {

bool IsLowerName(absl::string_view s) {
  if (s.empty() || !absl::ascii_islower(s[0])) return false;
  for (char c : s) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '_') return false;
  }
  return true;
}

bool IsUpperName(absl::string_view s) {
  if (s.empty() || !absl::ascii_isupper(s[0])) return false;
  for (char c : s) {
    if (!absl::ascii_isupper(c) && !absl::ascii_isdigit(c) && c != '_') return false;
  }
  return true;
}

// `source` with its // and /* */ comments blanked out (newlines kept), so a scan of the
// code does not read commas or parentheses in prose.
std::string WithoutComments(absl::string_view source) {
  std::string out(source);
  for (size_t i = 0; i + 1 < out.size(); ++i) {
    if (out[i] == '"') {  // skip string literals
      for (++i; i < out.size() && out[i] != '"' && out[i] != '\n'; ++i) {
        if (out[i] == '\\') ++i;
      }
    } else if (out[i] == '/' && out[i + 1] == '/') {
      for (; i < out.size() && out[i] != '\n'; ++i) out[i] = ' ';
    } else if (out[i] == '/' && out[i + 1] == '*') {
      size_t end = out.find("*/", i + 2);
      end = end == std::string::npos ? out.size() : end + 2;
      for (; i < end; ++i) {
        if (out[i] != '\n') out[i] = ' ';
      }
      --i;
    }
  }
  return out;
}

bool IsIdentChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

// The parameter counts of the __global__ functions named `name` in `code` (comments
// removed), read from the text: after `__global__`, the first identifier followed by '('
// that is not an attribute (`__x__(...)`, KTUNE_LAUNCH_BOUNDS) is the kernel's name, and its
// parameters are the commas at depth 0 of its list, plus one. Empty when `code` declares no
// kernel by that name (a macro may write it): then nothing can be said.
std::vector<int> KernelArities(const std::string& code, absl::string_view name) {
  std::vector<int> arities;
  for (size_t at = code.find("__global__"); at != std::string::npos;
       at = code.find("__global__", at + 1)) {
    size_t i = at + 10;
    std::string ident;
    while (i < code.size()) {
      if (IsIdentChar(code[i])) {
        size_t start = i;
        while (i < code.size() && IsIdentChar(code[i])) ++i;
        ident = code.substr(start, i - start);
        continue;
      }
      if (code[i] == '(') {
        const bool attribute = (absl::StartsWith(ident, "__") && absl::EndsWith(ident, "__")) ||
                               ident == "KTUNE_LAUNCH_BOUNDS";
        if (!attribute) break;
        int depth = 0;  // skip the attribute's arguments
        for (; i < code.size(); ++i) {
          if (code[i] == '(') ++depth;
          if (code[i] == ')' && --depth == 0) break;
        }
      }
      if (code[i] == ';' || code[i] == '{') break;
      ++i;
    }
    if (i >= code.size() || code[i] != '(' || ident != name) continue;
    int depth = 0, commas = 0;
    bool any = false;
    std::string first;
    for (++i; i < code.size(); ++i) {
      const char c = code[i];
      if (c == '(' || c == '<' || c == '[' || c == '{') ++depth;
      if (c == '>' || c == ']' || c == '}') --depth;
      if (c == ')') {
        if (depth == 0) break;
        --depth;
      }
      if (c == ',' && depth == 0) ++commas;
      if (!absl::ascii_isspace(c)) {
        any = true;
        if (commas == 0) first.push_back(c);
      }
    }
    arities.push_back(!any || (commas == 0 && first == "void") ? 0 : commas + 1);
  }
  return arities;
}

// Validates one parsed manifest, turning each defect into "FILE:LINE: field: reason".
class Validator {
 public:
  Validator(const TextProtoFile& file, const v1::TemplateManifest& m,
            absl::flat_hash_map<std::string, Expression>* expressions)
      : file_(file), m_(m), expressions_(expressions) {}

  absl::Status Run(const std::string& folder_name, std::vector<DType>* dtypes);

 private:
  absl::Status Fail(std::initializer_list<FieldStep> path, absl::string_view field,
                    absl::string_view reason) const {
    return file_.Fail(path, field, reason);
  }

  // Parses `text` unless already known and checks that it names only known identifiers.
  absl::Status CheckExpr(std::initializer_list<FieldStep> path, absl::string_view field,
                         const std::string& text, bool allow_max_threads = true) {
    auto it = expressions_->find(text);
    if (it == expressions_->end()) {
      absl::StatusOr<Expression> e = Expression::Parse(text);
      if (!e.ok()) return Fail(path, field, e.status().message());
      it = expressions_->emplace(text, *std::move(e)).first;
    }
    for (const std::string& id : it->second.identifiers()) {
      if (!identifiers_.count(id)) {
        return Fail(path, field, absl::StrCat("unknown identifier '", id, "' in '", text,
                                              "'; known: dims, params and KTUNE_* knobs"));
      }
      if (!allow_max_threads && id == "KTUNE_MAX_THREADS") {
        return Fail(path, field,
                    "KTUNE_MAX_THREADS is derived from the block size and cannot define it");
      }
    }
    return absl::OkStatus();
  }

  // One per rule family, in the order Run calls them; each returns the first defect.
  absl::Status CheckDTypes();  // fills *dtypes_
  absl::Status CheckDims();    // fills dim_names_ and identifiers_
  absl::Status CheckParams();  // fills params_ and identifiers_
  absl::Status CheckArgs();    // fills args_
  absl::Status CheckBufferArg(int i);
  absl::Status CheckFill(int i);
  absl::Status CheckScalarArg(int i);
  absl::Status CheckTensorMapArg(int i);
  absl::Status CheckLaunches(const char* list, absl::string_view what);
  absl::Status CheckReferenceParams();
  absl::Status CheckCost();
  absl::Status CheckTolerances();
  absl::Status CheckKnobs();
  // True iff `name` parses as one of the template's dtypes.
  bool IsTemplateDType(absl::string_view name) const;

 public:
  // After Run: each launch passes as many args as the kernel it names takes in `source`
  // (the .cu file, read at `source_path`), where the source declares that kernel.
  absl::Status CheckArities(const std::string& source, const std::string& source_path);

 private:
  absl::Status CheckNameExpression(std::initializer_list<FieldStep> path, absl::string_view field,
                                   const std::string& text);

  const TextProtoFile& file_;
  const v1::TemplateManifest& m_;
  absl::flat_hash_map<std::string, Expression>* expressions_;
  std::vector<DType>* dtypes_ = nullptr;  // Run's output, filled by CheckDTypes
  std::set<std::string> identifiers_;
  std::set<std::string> dim_names_;  // buffer sizes may name these only
  std::set<std::string> params_;

  // Each default alternative names known params with one of their values.
  absl::Status CheckDefaultAlternatives() {
    for (int i = 0; i < m_.default_alternatives_size(); ++i) {
      for (const auto& [name, value] : m_.default_alternatives(i).params()) {
        const std::string field = absl::StrCat("default_alternatives[", i, "].params");
        const v1::Param* param = nullptr;
        for (const v1::Param& p : m_.params()) {
          if (p.name() == name) param = &p;
        }
        if (param == nullptr) {
          return Fail({{"default_alternatives", i}}, field, absl::StrCat("'", name, "' is not a param"));
        }
        if (std::find(param->values().begin(), param->values().end(), value) ==
            param->values().end()) {
          return Fail({{"default_alternatives", i}}, field,
                      absl::StrCat(name, "=", value, " is not one of its values"));
        }
      }
    }
    return absl::OkStatus();
  }
  std::set<std::string> args_;
};

absl::Status Validator::CheckNameExpression(std::initializer_list<FieldStep> path,
                                            absl::string_view field, const std::string& text) {
  if (text.empty()) return Fail(path, field, "missing: the kernel's NVRTC name expression");
  size_t pos = 0;
  while ((pos = text.find('{', pos)) != std::string::npos) {
    size_t end = text.find('}', pos);
    if (end == std::string::npos) return Fail(path, field, "unclosed '{' in name expression");
    std::string key = text.substr(pos + 1, end - pos - 1);
    if (key != "dtype" && !params_.count(key)) {
      return Fail(path, field,
                  absl::StrCat("placeholder {", key, "} is neither {dtype} nor a param"));
    }
    pos = end + 1;
  }
  return absl::OkStatus();
}

// The shape of a tensor map's lists and its expressions; the numbers are checked per
// candidate when bound (CheckTensorMap in server/base/tensor_map.h). Its buffer is looked up
// once every arg is known (it may come later in the list).
absl::Status Validator::CheckTensorMapArg(int i) {
  const v1::TensorMap& t = m_.args(i).tensor_map();
  const std::string field = absl::StrCat("args[", i, "].tensor_map");
  auto fail = [&](absl::string_view sub, absl::string_view reason) {
    return Fail({{"args", i}, {"tensor_map"}}, absl::StrCat(field, ".", sub), reason);
  };
  if (t.buffer().empty()) return fail("buffer", "missing: the Buffer arg the map covers");
  const int rank = t.dims_size();
  if (rank < 1 || rank > 5) {
    return fail("dims", absl::StrCat(rank, " dims; a tensor map has rank 1..5"));
  }
  if (t.strides_size() != rank - 1) {
    return fail("strides", absl::StrCat(t.strides_size(), " strides for rank ", rank,
                                        "; need rank - 1 (byte strides of dims[1..])"));
  }
  if (t.box_size() != rank) {
    return fail("box", absl::StrCat(t.box_size(), " values for rank ", rank, "; need rank"));
  }
  if (t.element_strides_size() != 0 && t.element_strides_size() != rank) {
    return fail("element_strides", absl::StrCat(t.element_strides_size(), " values for rank ",
                                                rank, "; need none (all 1) or rank"));
  }
  if (!v1::TensorMap::Swizzle_IsValid(t.swizzle())) return fail("swizzle", "unknown value");
  if (!v1::TensorMap::Interleave_IsValid(t.interleave())) {
    return fail("interleave", "unknown value");
  }
  if (!v1::TensorMap::L2Promotion_IsValid(t.l2_promotion())) {
    return fail("l2_promotion", "unknown value");
  }
  if (!v1::TensorMap::OobFill_IsValid(t.oob_fill())) return fail("oob_fill", "unknown value");
  struct {
    const char* name;
    const google::protobuf::RepeatedPtrField<std::string>& list;
  } lists[] = {{"dims", t.dims()},
               {"strides", t.strides()},
               {"box", t.box()},
               {"element_strides", t.element_strides()}};
  for (const auto& l : lists) {
    for (int j = 0; j < l.list.size(); ++j) {
      if (l.list[j].empty()) return fail(absl::StrCat(l.name, "[", j, "]"), "empty expression");
      KTUNE_RETURN_IF_ERROR(CheckExpr({{"args", i}, {"tensor_map"}},
                                      absl::StrCat(field, ".", l.name, "[", j, "]"), l.list[j]));
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckLaunches(const char* list, absl::string_view what) {
  const auto& launches =
      std::string(list) == "launches" ? m_.launches() : m_.reference();
  if (launches.empty()) {
    return Fail({}, what, "at least one launch is required");
  }
  for (int i = 0; i < launches.size(); ++i) {
    const v1::Launch& l = launches[i];
    const std::string base = absl::StrCat(what, "[", i, "]");
    KTUNE_RETURN_IF_ERROR(
        CheckNameExpression({{list, i}, {"kernel"}}, base + ".kernel", l.kernel()));
    if (l.grid().x().empty()) return Fail({{list, i}}, base + ".grid.x", "missing");
    if (l.block().x().empty()) return Fail({{list, i}}, base + ".block.x", "missing");
    if (l.programmatic() && std::string(list) == "reference") {
      return Fail({{list, i}, {"programmatic"}}, base + ".programmatic",
                  "the reference is launched plainly, never programmatically");
    }
    struct {
      const char* dim3;
      const char* axis;
      const std::string& text;
      bool is_block;
    } axes[] = {{"grid", "x", l.grid().x(), false},  {"grid", "y", l.grid().y(), false},
                {"grid", "z", l.grid().z(), false},  {"block", "x", l.block().x(), true},
                {"block", "y", l.block().y(), true}, {"block", "z", l.block().z(), true}};
    for (const auto& a : axes) {
      if (a.text.empty()) continue;
      KTUNE_RETURN_IF_ERROR(CheckExpr({{list, i}, {a.dim3}, {a.axis}},
                                      absl::StrCat(base, ".", a.dim3, ".", a.axis), a.text,
                                      /*allow_max_threads=*/!a.is_block));
    }
    if (!l.shared_bytes().empty()) {
      KTUNE_RETURN_IF_ERROR(CheckExpr({{list, i}, {"shared_bytes"}}, base + ".shared_bytes",
                                      l.shared_bytes()));
    }
    if (!l.when().empty()) {
      KTUNE_RETURN_IF_ERROR(CheckExpr({{list, i}, {"when"}}, base + ".when", l.when()));
    }
    if (l.args().empty()) return Fail({{list, i}}, base + ".args", "a kernel takes arguments");
    for (int a = 0; a < l.args_size(); ++a) {
      if (!args_.count(l.args(a))) {
        return Fail({{list, i}, {"args", a}}, absl::StrCat(base, ".args[", a, "]"),
                    absl::StrCat("no arg named '", l.args(a), "'"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::Run(const std::string& folder_name, std::vector<DType>* dtypes) {
  dtypes_ = dtypes;
  if (m_.name() != folder_name) {
    return Fail({{"name"}}, "name",
                absl::StrCat("'", m_.name(), "' must equal the folder name '", folder_name, "'"));
  }
  KTUNE_RETURN_IF_ERROR(CheckDTypes());
  for (const char* knob : kKnobIdentifiers) identifiers_.insert(knob);
  KTUNE_RETURN_IF_ERROR(CheckDims());
  KTUNE_RETURN_IF_ERROR(CheckParams());
  for (int i = 0; i < m_.constraints_size(); ++i) {
    KTUNE_RETURN_IF_ERROR(CheckExpr({{"constraints", i}}, absl::StrCat("constraints[", i, "]"),
                                    m_.constraints(i)));
  }
  KTUNE_RETURN_IF_ERROR(CheckArgs());
  KTUNE_RETURN_IF_ERROR(CheckLaunches("launches", "launches"));
  KTUNE_RETURN_IF_ERROR(CheckLaunches("reference", "reference"));
  KTUNE_RETURN_IF_ERROR(CheckReferenceParams());
  KTUNE_RETURN_IF_ERROR(CheckDefaultAlternatives());
  KTUNE_RETURN_IF_ERROR(CheckCost());
  KTUNE_RETURN_IF_ERROR(CheckTolerances());
  return CheckKnobs();
}

absl::Status Validator::CheckDTypes() {
  if (m_.dtypes().empty()) return Fail({}, "dtypes", "at least one dtype is required");
  for (int i = 0; i < m_.dtypes_size(); ++i) {
    std::optional<DType> t = ParseDType(m_.dtypes(i));
    if (!t || !IsRequestDType(*t)) {
      return Fail({{"dtypes", i}}, absl::StrCat("dtypes[", i, "]"),
                  absl::StrCat("unknown dtype '", m_.dtypes(i), "'; expected f32, f16, bf16, f8e4m3 or f8e5m2"));
    }
    for (DType seen : *dtypes_) {
      if (seen == *t) {
        return Fail({{"dtypes", i}}, absl::StrCat("dtypes[", i, "]"),
                    absl::StrCat("'", m_.dtypes(i), "' listed twice"));
      }
    }
    dtypes_->push_back(*t);
  }
  return absl::OkStatus();
}

bool Validator::IsTemplateDType(absl::string_view name) const {
  std::optional<DType> d = ParseDType(name);
  bool listed = false;
  for (DType x : *dtypes_) listed |= d && x == *d;
  return listed;
}

absl::Status Validator::CheckDims() {
  if (m_.dims().empty()) return Fail({}, "dims", "at least one dim is required");
  for (int i = 0; i < m_.dims_size(); ++i) {
    const v1::Dim& d = m_.dims(i);
    const std::string field = absl::StrCat("dims[", i, "]");
    if (!IsLowerName(d.name())) {
      return Fail({{"dims", i}}, field + ".name",
                  absl::StrCat("'", d.name(), "' is not a lower-case name [a-z][a-z0-9_]*"));
    }
    dim_names_.insert(d.name());
    if (!identifiers_.insert(d.name()).second) {
      return Fail({{"dims", i}}, field + ".name", absl::StrCat("'", d.name(), "' declared twice"));
    }
    // 0 is allowed for a flag or a count that may be zero (layernorm's with_bias); a buffer
    // whose size it makes 0 is caught when the shape is bound (sizes must be >= 1).
    if (d.min() < 0) return Fail({{"dims", i}}, field + ".min", "must be at least 0");
    if (d.max() != 0 && d.max() < d.min()) {
      return Fail({{"dims", i}}, field + ".max", "is below min");
    }
    if (d.example() < d.min() || (d.max() != 0 && d.example() > d.max())) {
      return Fail({{"dims", i}}, field + ".example", "must lie within [min, max]");
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckParams() {
  for (int i = 0; i < m_.params_size(); ++i) {
    const v1::Param& p = m_.params(i);
    const std::string field = absl::StrCat("params[", i, "]");
    if (!IsUpperName(p.name()) || absl::StartsWith(p.name(), "KTUNE_")) {
      return Fail({{"params", i}}, field + ".name",
                  absl::StrCat("'", p.name(),
                               "' is not an upper-case name [A-Z][A-Z0-9_]* outside KTUNE_*"));
    }
    if (!identifiers_.insert(p.name()).second) {
      return Fail({{"params", i}}, field + ".name",
                  absl::StrCat("'", p.name(), "' is already a dim or param"));
    }
    params_.insert(p.name());
    if (p.values().empty()) return Fail({{"params", i}}, field + ".values", "no values");
    std::set<int64_t> seen;
    for (int64_t v : p.values()) {
      if (!seen.insert(v).second) {
        return Fail({{"params", i}}, field + ".values", absl::StrCat("value ", v, " repeated"));
      }
    }
    if (!seen.count(p.default_())) {
      return Fail({{"params", i}}, field + ".default",
                  absl::StrCat(p.default_(), " is not one of the values"));
    }
  }
  return absl::OkStatus();
}

// Every arg by kind; then each tensor map's buffer, which may come later in the list.
absl::Status Validator::CheckArgs() {
  for (int i = 0; i < m_.args_size(); ++i) {
    const v1::Arg& a = m_.args(i);
    const std::string field = absl::StrCat("args[", i, "]");
    if (!IsLowerName(a.name())) {
      return Fail({{"args", i}}, field + ".name",
                  absl::StrCat("'", a.name(), "' is not a lower-case name [a-z][a-z0-9_]*"));
    }
    if (!args_.insert(a.name()).second) {
      return Fail({{"args", i}}, field + ".name", absl::StrCat("'", a.name(), "' declared twice"));
    }
    if (a.has_buffer()) {
      KTUNE_RETURN_IF_ERROR(CheckBufferArg(i));
    } else if (a.has_scalar()) {
      KTUNE_RETURN_IF_ERROR(CheckScalarArg(i));
    } else if (a.has_tensor_map()) {
      KTUNE_RETURN_IF_ERROR(CheckTensorMapArg(i));
    } else {
      return Fail({{"args", i}}, field, "neither buffer, scalar nor tensor_map");
    }
  }
  for (int i = 0; i < m_.args_size(); ++i) {
    if (!m_.args(i).has_tensor_map()) continue;
    const std::string& buffer = m_.args(i).tensor_map().buffer();
    bool found = false;
    for (const v1::Arg& b : m_.args()) found |= b.has_buffer() && b.name() == buffer;
    if (!found) {
      return Fail({{"args", i}, {"tensor_map"}},
                  absl::StrCat("args[", i, "].tensor_map.buffer"),
                  absl::StrCat("'", buffer, "' is not a buffer arg"));
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckBufferArg(int i) {
  const v1::Buffer& b = m_.args(i).buffer();
  const std::string field = absl::StrCat("args[", i, "]");
  if (b.dtype() != "dtype" && !ParseDType(b.dtype())) {
    return Fail({{"args", i}, {"buffer"}, {"dtype"}}, field + ".buffer.dtype",
                absl::StrCat("unknown dtype '", b.dtype(), "'; expected dtype, f32, f16, bf16, f8e4m3, f8e5m2 or i32"));
  }
  for (const auto& [key, value] : b.dtype_for()) {
    if (!IsTemplateDType(key)) {
      return Fail({{"args", i}, {"buffer"}}, field + ".buffer.dtype_for",
                  absl::StrCat("key '", key, "' is not one of the template's dtypes"));
    }
    if (!ParseDType(value)) {
      return Fail({{"args", i}, {"buffer"}}, field + ".buffer.dtype_for",
                  absl::StrCat("value '", value, "' for '", key,
                               "' is not a dtype; expected f32, f16, bf16, f8e4m3, "
                               "f8e5m2 or i32"));
    }
  }
  if (b.count().empty()) {
    return Fail({{"args", i}, {"buffer"}}, field + ".buffer.count", "missing");
  }
  KTUNE_RETURN_IF_ERROR(
      CheckExpr({{"args", i}, {"buffer"}, {"count"}}, field + ".buffer.count", b.count()));
  // The worker allocates a problem's buffers once, from the reference's binding, and a
  // client allocates them from the artifact's: a size that moved with a param (say a
  // split-K scratch of SPLIT_K * n) would be the reference's size for every candidate,
  // and a candidate would write past it. Sizes follow the shape only.
  for (const std::string& id : expressions_->at(b.count()).identifiers()) {
    if (!dim_names_.count(id)) {
      return Fail({{"args", i}, {"buffer"}, {"count"}}, field + ".buffer.count",
                  absl::StrCat("'", id, "' is not a dim: a buffer's size may depend on the "
                               "shape only (size scratch for the largest param value)"));
    }
  }
  if (b.role() == v1::Buffer::ROLE_UNSPECIFIED) {
    return Fail({{"args", i}, {"buffer"}}, field + ".buffer.role",
                "missing: INPUT, OUTPUT, INOUT or SCRATCH");
  }
  if (b.alignment() < 0 || b.alignment() > kMaxBufferAlignment ||
      (b.alignment() & (b.alignment() - 1)) != 0) {
    return Fail({{"args", i}, {"buffer"}, {"alignment"}}, field + ".buffer.alignment",
                absl::StrCat(b.alignment(), " is not a power of two in 1..",
                             kMaxBufferAlignment, " (or 0 for the default, ",
                             kDefaultBufferAlignment, ")"));
  }
  return CheckFill(i);
}

absl::Status Validator::CheckFill(int i) {
  const v1::Buffer& b = m_.args(i).buffer();
  const std::string field = absl::StrCat("args[", i, "]");
  const bool checked = b.role() == v1::Buffer::INPUT || b.role() == v1::Buffer::INOUT;
  if (b.fill().kind() == v1::Fill::ZERO_ONCE && b.role() != v1::Buffer::SCRATCH) {
    return Fail({{"args", i}, {"buffer"}, {"fill"}}, field + ".buffer.fill",
                "ZERO_ONCE is for SCRATCH buffers only");
  }
  if (checked && (b.fill().kind() == v1::Fill::KIND_UNSPECIFIED ||
                  b.fill().kind() == v1::Fill::ZERO)) {
    return Fail({{"args", i}, {"buffer"}}, field + ".buffer.fill",
                "inputs need a non-zero fill (UNIFORM, NORMAL or CONSTANT): a kernel that "
                "does nothing must not pass");
  }
  if (!std::isfinite(b.fill().lo()) || !std::isfinite(b.fill().hi())) {
    return Fail({{"args", i}, {"buffer"}, {"fill"}}, field + ".buffer.fill",
                "lo and hi must be finite");
  }
  if (checked && b.fill().kind() == v1::Fill::CONSTANT && b.fill().lo() == 0) {
    return Fail({{"args", i}, {"buffer"}, {"fill"}}, field + ".buffer.fill",
                "CONSTANT 0 for an input is a zero fill: a kernel that does nothing must not "
                "pass");
  }
  if (b.fill().kind() == v1::Fill::NORMAL && !(b.fill().hi() > 0)) {
    return Fail({{"args", i}, {"buffer"}, {"fill"}}, field + ".buffer.fill",
                "NORMAL needs a standard deviation hi > 0");
  }
  if (b.fill().kind() == v1::Fill::UNIFORM && !(b.fill().lo() < b.fill().hi())) {
    return Fail({{"args", i}, {"buffer"}, {"fill"}}, field + ".buffer.fill",
                "UNIFORM needs lo < hi");
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckScalarArg(int i) {
  const v1::Scalar& s = m_.args(i).scalar();
  const std::string field = absl::StrCat("args[", i, "]");
  if (s.type() == "i32" || s.type() == "i64") {
    if (!s.has_expr()) {
      return Fail({{"args", i}, {"scalar"}}, field + ".scalar.expr",
                  "integer scalars take an expression");
    }
    return CheckExpr({{"args", i}, {"scalar"}, {"expr"}}, field + ".scalar.expr", s.expr());
  }
  if (s.type() == "f32") {
    if (!s.has_number()) {
      return Fail({{"args", i}, {"scalar"}}, field + ".scalar.number",
                  "f32 scalars take a number");
    }
    if (!std::isfinite(s.number()) || std::abs(s.number()) > 3.4028234663852886e38) {
      return Fail({{"args", i}, {"scalar"}}, field + ".scalar.number",
                  absl::StrCat(s.number(), " is not a finite f32"));
    }
    return absl::OkStatus();
  }
  return Fail({{"args", i}, {"scalar"}, {"type"}}, field + ".scalar.type",
              absl::StrCat("unknown type '", s.type(), "'; expected i32, i64 or f32"));
}

// Each reference param names a param, with one of its values.
absl::Status Validator::CheckReferenceParams() {
  for (const auto& [name, value] : m_.reference_params()) {
    const v1::Param* param = nullptr;
    for (const v1::Param& p : m_.params()) {
      if (p.name() == name) param = &p;
    }
    if (param == nullptr) {
      return Fail({{"reference_params", 0}}, "reference_params",
                  absl::StrCat("'", name, "' is not a param"));
    }
    if (std::find(param->values().begin(), param->values().end(), value) ==
        param->values().end()) {
      return Fail({{"reference_params", 0}}, "reference_params",
                  absl::StrCat(name, "=", value, " is not one of its values"));
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckCost() {
  if (m_.cost().bytes().empty()) {
    return Fail({{"cost"}}, "cost.bytes", "missing: bytes that must move for one run");
  }
  KTUNE_RETURN_IF_ERROR(CheckExpr({{"cost"}, {"bytes"}}, "cost.bytes", m_.cost().bytes()));
  if (!m_.cost().flops().empty()) {
    KTUNE_RETURN_IF_ERROR(CheckExpr({{"cost"}, {"flops"}}, "cost.flops", m_.cost().flops()));
  }
  // At the example shape with the params' defaults, for every dtype: bytes > 0 and
  // flops >= 0 (a trial's GB/s and roofline fraction divide by them). Expressions that name
  // knobs are left to the trials, whose knobs are known.
  Scope scope;
  for (const v1::Dim& d : m_.dims()) scope.values[d.name()] = d.example();
  for (const v1::Param& p : m_.params()) scope.values[p.name()] = p.default_();
  struct {
    const char* field;
    const std::string& text;
    int64_t least;
  } costs[] = {{"cost.bytes", m_.cost().bytes(), 1}, {"cost.flops", m_.cost().flops(), 0}};
  for (const auto& c : costs) {
    if (c.text.empty()) continue;
    const Expression& e = expressions_->at(c.text);
    bool knobs = false;
    for (const std::string& id : e.identifiers()) knobs |= !scope.values.count(id);
    if (knobs) continue;
    for (DType t : *dtypes_) {
      scope.dtype = t;
      absl::StatusOr<int64_t> v = e.Evaluate(scope);
      const std::string where = absl::StrCat("at the example shape (dims' examples, params' "
                                             "defaults) for ", DTypeName(t));
      if (!v.ok()) return Fail({{"cost"}}, c.field, absl::StrCat(where, ": ", v.status().message()));
      if (*v < c.least) {
        return Fail({{"cost"}}, c.field,
                    absl::StrCat("'", c.text, "' is ", *v, " ", where, "; must be ",
                                 c.least > 0 ? "> 0" : ">= 0"));
      }
    }
  }
  return absl::OkStatus();
}

// One tolerance per dtype, each scaled by the shape only.
absl::Status Validator::CheckTolerances() {
  std::set<std::string> tolerated;
  for (int i = 0; i < m_.tolerances_size(); ++i) {
    const v1::Tolerance& t = m_.tolerances(i);
    const std::string field = absl::StrCat("tolerances[", i, "]");
    if (!IsTemplateDType(t.dtype())) {
      return Fail({{"tolerances", i}}, field + ".dtype",
                  absl::StrCat("'", t.dtype(), "' is not one of the template's dtypes"));
    }
    if (!tolerated.insert(t.dtype()).second) {
      return Fail({{"tolerances", i}}, field + ".dtype",
                  absl::StrCat("'", t.dtype(), "' has a tolerance already"));
    }
    if (!std::isfinite(t.atol()) || !std::isfinite(t.rtol())) {
      return Fail({{"tolerances", i}}, field,
                  "atol and rtol must be finite: an infinite or NaN bound passes any result");
    }
    if (t.atol() < 0 || t.rtol() < 0) {
      return Fail({{"tolerances", i}}, field, "atol and rtol must be >= 0");
    }
    // |out - ref| <= atol * scale + rtol * |ref|: with rtol >= 1 an output of zeros passes
    // any reference, and an atol above the inputs' own scale (fills of about [-1, 1]) passes
    // results off by as much as the data; such a bound switches verification off as inf does.
    if (t.rtol() >= 1) {
      return Fail({{"tolerances", i}}, field + ".rtol",
                  absl::StrCat(t.rtol(), " must be below 1: an output of zeros would pass"));
    }
    if (t.atol() > 1) {
      return Fail({{"tolerances", i}}, field + ".atol",
                  absl::StrCat(t.atol(), " must be at most 1 (scaled by atol_scale where the "
                               "result grows with the shape): a larger bound passes results "
                               "off by more than the data's scale"));
    }
    if (!t.atol_scale().empty()) {
      KTUNE_RETURN_IF_ERROR(CheckExpr({{"tolerances", i}, {"atol_scale"}},
                                      field + ".atol_scale", t.atol_scale()));
      // One bar for every candidate of a shape: the reference and the candidates must be
      // judged alike, so the scale follows the shape only.
      for (const std::string& id : expressions_->at(t.atol_scale()).identifiers()) {
        if (!dim_names_.count(id)) {
          return Fail({{"tolerances", i}, {"atol_scale"}}, field + ".atol_scale",
                      absl::StrCat("'", id, "' is not a dim: the tolerance may depend on the "
                                   "shape only"));
        }
      }
    }
  }
  for (DType t : *dtypes_) {
    if (!tolerated.count(std::string(DTypeName(t)))) {
      return Fail({}, "tolerances", absl::StrCat("missing a tolerance for dtype ", DTypeName(t)));
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckKnobs() {
  const v1::KnobSpace& k = m_.knobs();
  for (int64_t r : k.maxrregcount()) {
    if (r != 0 && (r < 16 || r > 255)) {
      return Fail({{"knobs"}}, "knobs.maxrregcount",
                  absl::StrCat(r, " is outside 16..255 (0 means no limit)"));
    }
  }
  for (int64_t b : k.min_blocks()) {
    if (b < 1 || b > 32) {
      return Fail({{"knobs"}}, "knobs.min_blocks", absl::StrCat(b, " is outside 1..32"));
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckArities(const std::string& source,
                                     const std::string& source_path) {
  const std::string code = WithoutComments(source);
  for (const char* list : {"launches", "reference"}) {
    const auto& launches = std::string(list) == "launches" ? m_.launches() : m_.reference();
    for (int i = 0; i < launches.size(); ++i) {
      const v1::Launch& l = launches[i];
      std::string name = l.kernel().substr(0, l.kernel().find('<'));
      if (size_t colons = name.rfind("::"); colons != std::string::npos) {
        name = name.substr(colons + 2);
      }
      name = std::string(absl::StripAsciiWhitespace(name));
      const std::vector<int> arities = KernelArities(code, name);
      if (arities.empty() ||
          std::find(arities.begin(), arities.end(), l.args_size()) != arities.end()) {
        continue;
      }
      return Fail({{list, i}}, absl::StrCat(list, "[", i, "].args"),
                  absl::StrCat(l.args_size(), " args, but ", name, " in ", source_path,
                               " takes ", absl::StrJoin(arities, " or ")));
    }
  }
  return absl::OkStatus();
}

// The line of `text` (a manifest) where `expression` first appears quoted; 0 if nowhere.
int LineOfExpression(const std::string& text, const std::string& expression) {
  const size_t at = text.find(absl::StrCat("\"", expression, "\""));
  if (at == std::string::npos) return 0;
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + at, '\n'));
}

// The default config bound at the example shape for every dtype (sm_90): arithmetic that
// fails there (a division by zero, an overflow) is the template's defect, refused at load
// with the line of the expression (`t`'s, parsed in `expressions`), not answered as the
// caller's INVALID_ARGUMENT at every request. A default that the constraints reject is no
// defect (FAILED_PRECONDITION).
absl::Status CheckAtExampleShape(std::shared_ptr<const KernelTemplate> t,
                                 const absl::flat_hash_map<std::string, Expression>& expressions,
                                 const TextProtoFile& file, const std::string& text) {
  Shape shape;
  for (const v1::Dim& d : t->manifest().dims()) shape[d.name()] = d.example();
  for (DType dtype : t->dtypes()) {
    absl::Status s = ValidateRequest(*t, dtype, shape);
    if (s.ok()) s = DefaultConfigFor(t, dtype, shape, TargetInfo{}).status();
    if (s.ok() || s.code() == absl::StatusCode::kFailedPrecondition) continue;
    int line = 0;
    for (const auto& [expression, parsed] : expressions) {
      if (absl::StrContains(s.message(), absl::StrCat("'", expression, "'"))) {
        line = LineOfExpression(text, expression);
        if (line > 0) break;
      }
    }
    return file.Fail(line, absl::StrCat("example shape ", ShapeString(shape), " (",
                                        DTypeName(dtype), ")"),
                     s.message());
  }
  return absl::OkStatus();
}

}  // namespace

DType BufferDType(const v1::Buffer& buffer, DType request) {
  auto it = buffer.dtype_for().find(std::string(DTypeName(request)));
  const std::string& name = it != buffer.dtype_for().end() ? it->second : buffer.dtype();
  if (name == "dtype") return request;
  std::optional<DType> t = ParseDType(name);
  return t ? *t : request;
}

bool KernelTemplate::SupportsDType(DType t) const {
  for (DType d : dtypes_) {
    if (d == t) return true;
  }
  return false;
}

absl::StatusOr<int64_t> KernelTemplate::Evaluate(const std::string& text, const Scope& scope,
                                                 int64_t if_empty) const {
  if (text.empty()) return if_empty;
  auto it = expressions_.find(text);
  if (it == expressions_.end()) {
    return absl::InternalError(
        absl::StrCat("template ", name(), ": '", text, "' is not one of its expressions"));
  }
  return it->second.Evaluate(scope);
}

absl::StatusOr<std::shared_ptr<const KernelTemplate>> LoadKernelTemplate(
    const std::string& dir, const std::string& shared_headers_digest) {
  std::string folder = dir;
  while (folder.size() > 1 && folder.back() == '/') folder.pop_back();
  const std::string name = folder.substr(folder.find_last_of('/') + 1);
  const std::string manifest_path = absl::StrCat(folder, "/", name, ".textproto");
  const std::string source_path = absl::StrCat(folder, "/", name, ".cu");

  absl::StatusOr<std::string> text = ReadFile(manifest_path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(manifest_path, ": cannot read the manifest: ", text.status().message()));
  }
  std::shared_ptr<KernelTemplate> t(new KernelTemplate());
  KTUNE_ASSIGN_OR_RETURN(const TextProtoFile file,
                         TextProtoFile::Parse(manifest_path, *text, &t->manifest_));
  Validator validator(file, t->manifest_, &t->expressions_);
  KTUNE_RETURN_IF_ERROR(validator.Run(name, &t->dtypes_));

  absl::StatusOr<std::string> source = ReadFile(source_path);
  if (!source.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_path, ": cannot read the kernel source: ", source.status().message()));
  }
  KTUNE_RETURN_IF_ERROR(validator.CheckArities(*source, source_path));
  t->source_ = *std::move(source);
  t->source_path_ = source_path;
  t->source_hash_ = Sha256Builder()
                        .AddField(t->source_)
                        .AddField(*text)
                        .AddField(shared_headers_digest)
                        .Finish();
  for (const std::string& c : t->manifest_.constraints()) {  // before the first Bind
    bool reads_no_knob = true;
    for (const std::string& id : t->expressions_.at(c).identifiers()) {
      for (const char* knob : kPerKnobIdentifiers) reads_no_knob &= id != knob;
    }
    t->constraint_reads_no_knob_.push_back(reads_no_knob);
    t->constraints_.push_back(&t->expressions_.at(c));
  }
  KTUNE_RETURN_IF_ERROR(CheckAtExampleShape(t, t->expressions_, file, *text));
  return std::shared_ptr<const KernelTemplate>(std::move(t));
}

bool KernelTemplate::ConstraintReads(int i, const std::string& id) const {
  const std::vector<std::string>& ids = Constraint(i).identifiers();
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace ktune
