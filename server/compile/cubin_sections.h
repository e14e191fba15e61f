// A look inside a cubin (an ELF64 file, little-endian) without the CUDA binary utilities,
// which a host without the full toolkit lacks: the tests compare kernels' machine code with
// it, and compile_bench checks that a faster option kept the code the same.
//
// Pure functions; thread-safe.
#ifndef KTUNE_SERVER_COMPILE_CUBIN_SECTIONS_H_
#define KTUNE_SERVER_COMPILE_CUBIN_SECTIONS_H_

#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ktune {

namespace internal {
template <typename T>
bool ReadAt(const std::string& bytes, uint64_t at, T* out) {
  if (at > bytes.size() || bytes.size() - at < sizeof(T)) return false;
  std::memcpy(out, bytes.data() + at, sizeof(T));
  return true;
}
}  // namespace internal

// Section name -> bytes, for every section of the cubin (".text.<kernel>" holds a kernel's
// machine code, ".nv.compat" the target's compatibility attributes, sm_90a's among them).
// A section that occupies no bytes of the file (SHT_NOBITS: ".nv.shared.<kernel>", a
// kernel's static shared memory) maps to no bytes: its size is what the loader reserves,
// and checked against the file it refused every cubin whose shared arrays outsize what
// follows their section's offset (a layernorm with 16 KB of them, ktune cache import).
inline absl::StatusOr<std::map<std::string, std::string>> ElfSections(const std::string& cubin) {
  using internal::ReadAt;
  auto bad = [](const char* why) { return absl::InvalidArgumentError(absl::StrCat("ELF: ", why)); };
  if (!absl::StartsWith(cubin,
                        "\x7f"
                        "ELF") ||
      cubin.size() < 0x40 || cubin[4] != 2) {
    return bad("not an ELF64 file");
  }
  uint64_t shoff = 0;
  uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
  if (!ReadAt(cubin, 0x28, &shoff) || !ReadAt(cubin, 0x3a, &shentsize) ||
      !ReadAt(cubin, 0x3c, &shnum) || !ReadAt(cubin, 0x3e, &shstrndx) || shentsize < 0x28 ||
      shstrndx >= shnum) {
    return bad("truncated header");
  }
  struct Section {
    uint32_t name = 0;
    uint32_t type = 0;
    uint64_t offset = 0, size = 0;
  };
  constexpr uint32_t kNoBits = 8;  // SHT_NOBITS
  auto section = [&](uint16_t i, Section* s) {
    const uint64_t at = shoff + uint64_t{i} * shentsize;
    if (!ReadAt(cubin, at, &s->name) || !ReadAt(cubin, at + 0x04, &s->type) ||
        !ReadAt(cubin, at + 0x18, &s->offset) || !ReadAt(cubin, at + 0x20, &s->size)) {
      return false;
    }
    if (s->type == kNoBits) s->size = 0;  // reserved by the loader, not stored in the file
    return s->offset <= cubin.size() && cubin.size() - s->offset >= s->size;
  };
  Section names;
  if (!section(shstrndx, &names)) return bad("bad section name table");
  std::map<std::string, std::string> out;
  for (uint16_t i = 0; i < shnum; ++i) {
    Section s;
    if (!section(i, &s)) return bad("bad section header");
    if (s.name >= names.size) return bad("bad section name");
    const char* name = cubin.data() + names.offset + s.name;
    const std::string n(name, strnlen(name, names.size - s.name));
    if (!n.empty()) out[n] = cubin.substr(s.offset, s.size);
  }
  return out;
}

// The ".text.*" sections of ElfSections: the kernels' machine code.
inline absl::StatusOr<std::map<std::string, std::string>> TextSections(const std::string& cubin) {
  absl::StatusOr<std::map<std::string, std::string>> all = ElfSections(cubin);
  if (!all.ok()) return all.status();
  std::map<std::string, std::string> text;
  for (auto& [name, bytes] : *all) {
    if (absl::StartsWith(name, ".text.")) text[name] = std::move(bytes);
  }
  return text;
}

}  // namespace ktune

#endif  // KTUNE_SERVER_COMPILE_CUBIN_SECTIONS_H_
