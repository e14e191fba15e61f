#include "server/base/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace ktune {
namespace {

TEST(Sha256Test, KnownVectors) {
  // FIPS 180-2 examples.
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, BinaryData) {
  const std::string zeros(3, '\0');
  EXPECT_EQ(Sha256Hex(zeros), "709e80c88487a2411e1ee4dfb9f22a861492d20c4765150c0c794abd70f8147c");
  EXPECT_NE(Sha256Hex(zeros), Sha256Hex(""));
}

TEST(Sha256Test, HexIsLowercase64Chars) {
  const std::string h = Sha256Hex("ktune");
  ASSERT_EQ(h.size(), 64u);
  for (char c : h) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << h;
}

std::string Fields(std::initializer_list<const char*> fields) {
  Sha256Builder b;
  for (const char* f : fields) b.AddField(f);
  return b.Finish();
}

TEST(Sha256BuilderTest, FieldsAreSeparated) {
  EXPECT_NE(Fields({"ab", "c"}), Fields({"a", "bc"}));
  EXPECT_NE(Fields({"abc"}), Fields({"ab", "c"}));
  EXPECT_NE(Fields({"", "a"}), Fields({"a", ""}));
  EXPECT_NE(Fields({""}), Fields({}));
  EXPECT_NE(Fields({"", ""}), Fields({""}));
  // A field is not its plain digest: the length prefix is part of it.
  EXPECT_NE(Fields({"abc"}), Sha256Hex("abc"));
}

TEST(Sha256BuilderTest, Deterministic) {
  EXPECT_EQ(Fields({"source", "-arch=sm_90", ""}), Fields({"source", "-arch=sm_90", ""}));
  Sha256Builder a;
  a.AddField("x").AddField("y");
  EXPECT_EQ(a.Finish(), Fields({"x", "y"}));
}

TEST(Sha256BuilderTest, Golden) {
  // Cache keys depend on this encoding: each field is its length as 8 little-endian bytes,
  // then its bytes. Pinned so a change to it is noticed (and the cache format bumped).
  EXPECT_EQ(Fields({}), Sha256Hex(""));
  EXPECT_EQ(Fields({"abc"}), Sha256Hex(std::string("\x03\0\0\0\0\0\0\0abc", 11)));
  EXPECT_EQ(Fields({"ab", "c"}),
            Sha256Hex(std::string("\x02\0\0\0\0\0\0\0ab\x01\0\0\0\0\0\0\0c", 19)));
}

}  // namespace
}  // namespace ktune
