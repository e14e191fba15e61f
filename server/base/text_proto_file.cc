#include "server/base/text_proto_file.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/tokenizer.h"

namespace ktune {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::TextFormat;

// Keeps the parser's first error; later ones usually follow from it.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    // The parser counts from 0; editors and people count from 1.
    if (error_.empty()) error_ = absl::StrCat(line + 1, ":", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

}  // namespace

absl::StatusOr<TextProtoFile> TextProtoFile::Parse(const std::string& path,
                                                   const std::string& text,
                                                   google::protobuf::Message* message) {
  TextProtoFile file(path, message->GetDescriptor());
  FirstError errors;
  TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(file.tree_.get());
  if (!parser.ParseFromString(text, message)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ":", errors.error().empty() ? "text format parse error" : errors.error()));
  }
  return file;
}

int TextProtoFile::LineOf(std::initializer_list<FieldStep> steps) const {
  const Descriptor* d = root_;
  const TextFormat::ParseInfoTree* tree = tree_.get();
  int line = 0;
  for (const FieldStep& s : steps) {
    const FieldDescriptor* f = d->FindFieldByName(s.field);
    if (f == nullptr || tree == nullptr) break;
    const int idx = f->is_repeated() ? s.index : -1;
    auto loc = tree->GetLocation(f, idx);
    // List syntax (`values: [1, 2]`) records only where the list starts.
    if (loc.line < 0 && idx > 0) loc = tree->GetLocation(f, 0);
    if (loc.line < 0) break;
    line = loc.line + 1;
    if (f->type() != FieldDescriptor::TYPE_MESSAGE) break;
    tree = tree->GetTreeForNested(f, idx);
    d = f->message_type();
  }
  return line;
}

absl::Status TextProtoFile::Fail(int line, absl::string_view field,
                                 absl::string_view reason) const {
  return absl::InvalidArgumentError(line > 0
                                        ? absl::StrCat(path_, ":", line, ": ", field, ": ", reason)
                                        : absl::StrCat(path_, ": ", field, ": ", reason));
}

}  // namespace ktune
