// A small ELF64 file shaped like a cubin (a ".text.<kernel>" section per kernel), for tests
// that need a cubin a checker accepts without NVRTC.
//
// Pure function; thread-safe.
#ifndef KTUNE_TESTS_TESTING_FAKE_CUBIN_H_
#define KTUNE_TESTS_TESTING_FAKE_CUBIN_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace ktune::testing {

// An ELF64 little-endian file: the header, a section-name table, one ".text.<name>" section
// of `code_bytes` bytes (derived from `seed`) per name in `kernels`, and the section headers.
inline std::string MakeFakeCubin(const std::vector<std::string>& kernels, int64_t seed = 1,
                                 size_t code_bytes = 256) {
  auto put = [](std::string* s, size_t at, auto value) {
    std::memcpy(s->data() + at, &value, sizeof(value));
  };
  std::string names(1, '\0');
  std::vector<uint32_t> name_at = {0, static_cast<uint32_t>(names.size())};
  names += std::string(".shstrtab") + '\0';
  for (const std::string& k : kernels) {
    name_at.push_back(static_cast<uint32_t>(names.size()));
    names += ".text." + k + '\0';
  }
  std::string elf(0x40, '\0');
  elf[0] = '\x7f';
  elf[1] = 'E';
  elf[2] = 'L';
  elf[3] = 'F';
  elf[4] = 2;  // ELFCLASS64
  elf[5] = 1;  // little-endian
  elf[6] = 1;  // version
  std::vector<std::pair<uint64_t, uint64_t>> sections = {{0, 0}, {elf.size(), names.size()}};
  elf += names;
  for (size_t k = 0; k < kernels.size(); ++k) {
    sections.emplace_back(elf.size(), code_bytes);
    for (size_t i = 0; i < code_bytes; ++i) {
      elf.push_back(static_cast<char>((i * 31 + seed * 17 + k * 7) & 0xff));
    }
  }
  const uint64_t shoff = elf.size();
  put(&elf, 0x28, shoff);
  put(&elf, 0x3a, uint16_t{0x40});
  put(&elf, 0x3c, static_cast<uint16_t>(sections.size()));
  put(&elf, 0x3e, uint16_t{1});
  for (size_t i = 0; i < sections.size(); ++i) {
    std::string header(0x40, '\0');
    put(&header, 0, name_at[i]);
    put(&header, 0x18, sections[i].first);
    put(&header, 0x20, sections[i].second);
    elf += header;
  }
  return elf;
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_FAKE_CUBIN_H_
