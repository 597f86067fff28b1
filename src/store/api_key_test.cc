#include "store/api_key.h"

#include <gtest/gtest.h>

#include <set>

namespace kiln::store {
namespace {

TEST(ApiKeyCrypto, HmacSha256MatchesRfc4231) {
  // RFC 4231, test case 2.
  auto mac = HmacSha256Hex("Jefe", "what do ya want for nothing?");
  ASSERT_TRUE(mac.ok());
  EXPECT_EQ(*mac, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(Base64Url, Rfc4648VectorsWithoutPadding) {
  const std::pair<const char*, const char*> cases[] = {
      {"", ""},
      {"f", "Zg"},
      {"fo", "Zm8"},
      {"foo", "Zm9v"},
      {"foob", "Zm9vYg"},
      {"fooba", "Zm9vYmE"},
      {"foobar", "Zm9vYmFy"},
      {"\xfb\xff\xbf", "-_-_"},  // the two characters that differ from standard base64
  };
  for (const auto& [raw, enc] : cases) {
    EXPECT_EQ(Base64UrlEncode(raw), enc);
    auto dec = Base64UrlDecode(enc);
    ASSERT_TRUE(dec.has_value()) << enc;
    EXPECT_EQ(*dec, raw);
  }
}

TEST(Base64Url, StrictDecoding) {
  EXPECT_FALSE(Base64UrlDecode("Zg==").has_value());    // padding
  EXPECT_FALSE(Base64UrlDecode("Zm9v+/").has_value());  // standard alphabet
  EXPECT_FALSE(Base64UrlDecode("Zm 9v").has_value());   // whitespace
  EXPECT_FALSE(Base64UrlDecode("Z").has_value());       // 4n+1 characters
  EXPECT_FALSE(Base64UrlDecode("Zh").has_value());      // non-zero unused bits ("Zg" is canonical)
  EXPECT_FALSE(Base64UrlDecode("Zm9").has_value());     // "Zm8" is canonical
}

TEST(ApiKey, FormatParsesBack) {
  auto secret = RandomBytes(kSecretBytes);
  ASSERT_TRUE(secret.ok());
  const std::string key = FormatApiKey("0123456789ab", *secret);
  EXPECT_EQ(key.size(), kKeyChars);
  EXPECT_EQ(key.rfind("kiln_0123456789ab_", 0), 0u);
  auto parsed = ParseApiKey(key);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->id, "0123456789ab");
  EXPECT_EQ(parsed->secret, *secret);
}

TEST(ApiKey, RandomBytesDiffer) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    auto b = RandomBytes(32);
    ASSERT_TRUE(b.ok());
    ASSERT_EQ(b->size(), 32u);
    seen.insert(*b);
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST(ApiKey, Sha256KnownVector) {
  auto h = Sha256Hex("abc");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  auto empty = Sha256Hex("");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(ApiKey, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("abcd", "abcd"));
  EXPECT_FALSE(ConstantTimeEquals("abcd", "abce"));
  EXPECT_FALSE(ConstantTimeEquals("abcd", "abc"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST(ApiKey, TenantAndIdRules) {
  EXPECT_TRUE(IsValidTenant("a"));
  EXPECT_TRUE(IsValidTenant("Team-1.prod_x"));
  EXPECT_TRUE(IsValidTenant(std::string(64, 't')));
  EXPECT_FALSE(IsValidTenant(""));
  EXPECT_FALSE(IsValidTenant(std::string(65, 't')));
  EXPECT_FALSE(IsValidTenant("a b"));
  EXPECT_FALSE(IsValidTenant("a/b"));
  EXPECT_FALSE(IsValidTenant("caf\xc3\xa9"));
  EXPECT_FALSE(IsValidTenant(std::string("a\0b", 3)));
  EXPECT_TRUE(IsValidKeyId("0123456789ab"));
  EXPECT_FALSE(IsValidKeyId("0123456789AB"));
  EXPECT_FALSE(IsValidKeyId("0123456789a"));
  EXPECT_FALSE(IsValidKeyId("0123456789abc"));
  EXPECT_FALSE(IsValidKeyId("0123456789ag"));
}

}  // namespace
}  // namespace kiln::store
