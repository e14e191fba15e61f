// A text-format protobuf file (a template manifest, a tuning spec) parsed together with where
// each field was written, so a loader can report every defect as "FILE:LINE: field: reason".
#ifndef KTUNE_SERVER_BASE_TEXT_PROTO_FILE_H_
#define KTUNE_SERVER_BASE_TEXT_PROTO_FILE_H_

#include <initializer_list>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "google/protobuf/text_format.h"

namespace ktune {

// One step of a field path from the root message: a field by name and, for a repeated
// field, the element's index.
struct FieldStep {
  const char* field;
  int index = -1;
};

class TextProtoFile {
 public:
  // Parses `text`, read from `path`, into `message`. kInvalidArgument
  // "PATH:LINE:COLUMN: <the parser's message>" (counted from 1) on the first syntax error.
  static absl::StatusOr<TextProtoFile> Parse(const std::string& path, const std::string& text,
                                             google::protobuf::Message* message);

  // The 1-based line where the field at `steps` was written; the deepest written ancestor's
  // line when the field itself is absent (a missing field is reported where its parent is),
  // 0 when not even the first step was written.
  int LineOf(std::initializer_list<FieldStep> steps) const;

  // kInvalidArgument "PATH:LINE: field: reason", or "PATH: field: reason" for line 0.
  absl::Status Fail(int line, absl::string_view field, absl::string_view reason) const;
  absl::Status Fail(std::initializer_list<FieldStep> steps, absl::string_view field,
                    absl::string_view reason) const {
    return Fail(LineOf(steps), field, reason);
  }

  const std::string& path() const { return path_; }

 private:
  TextProtoFile(std::string path, const google::protobuf::Descriptor* root)
      : path_(std::move(path)),
        root_(root),
        tree_(std::make_unique<google::protobuf::TextFormat::ParseInfoTree>()) {}

  std::string path_;
  const google::protobuf::Descriptor* root_;
  // Owned through a pointer: the parser's location tree cannot be moved.
  std::unique_ptr<google::protobuf::TextFormat::ParseInfoTree> tree_;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_TEXT_PROTO_FILE_H_
