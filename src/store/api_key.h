// The API key format and the cryptography behind it (OpenSSL): random bytes,
// SHA-256, constant-time comparison. Pure functions, usable from any thread.
//
// A key is `kiln_<id>_<secret>`:
//   id      12 lowercase hex chars (48 random bits), public: `kiln keys list`
//           and `kiln keys revoke` show it, audit rows carry it;
//   secret  32 random bytes (256 bits), base64url without padding (43 chars).
// Only sha256(secret bytes) is stored; the secret is never logged or written.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "base/base64.h"
#include "base/result.h"

namespace kiln::store {

inline constexpr std::string_view kKeyPrefix = "kiln_";
inline constexpr size_t kKeyIdChars = 12;
inline constexpr size_t kSecretBytes = 32;
inline constexpr size_t kSecretChars = 43;  // base64url, no padding, of 32 bytes
inline constexpr size_t kKeyChars = kKeyPrefix.size() + kKeyIdChars + 1 + kSecretChars;  // 61
inline constexpr size_t kSha256Bytes = 32;

struct ParsedKey {
  std::string id;
  std::string secret;  // the 32 raw bytes
};

// Parses a presented key. nullopt for anything that is not exactly the
// format above (wrong length, prefix, id alphabet, non-canonical base64url):
// a malformed key is "not authenticated", never an error.
std::optional<ParsedKey> ParseApiKey(std::string_view key);
// `kiln_<id>_<base64url(secret)>`.
std::string FormatApiKey(std::string_view id, std::string_view secret);

// 12 lowercase hex chars.
bool IsValidKeyId(std::string_view id);
// 1-64 chars of [A-Za-z0-9._-].
bool IsValidTenant(std::string_view tenant);

// RFC 4648 section 5 alphabet, no padding.
std::string Base64UrlEncode(std::string_view bytes);
// Strict: no padding, no whitespace, and the unused low bits of the last
// character must be zero, so every byte string has exactly one encoding.
std::optional<std::string> Base64UrlDecode(std::string_view text);

// `n` bytes from OpenSSL's CSPRNG (RAND_bytes); kInternal if it fails.
Result<std::string> RandomBytes(size_t n);
// The 32-byte SHA-256 digest (EVP), raw or as 64 lowercase hex chars.
// kInternal only if OpenSSL cannot allocate.
Result<std::string> Sha256(std::string_view data);
Result<std::string> Sha256Hex(std::string_view data);
using ::kiln::HexEncode;  // base/base64.h
// HMAC-SHA256 of `data` under `key`, as 64 lowercase hex chars (webhook signatures).
Result<std::string> HmacSha256Hex(std::string_view key, std::string_view data);
// Constant-time equality (CRYPTO_memcmp); false when the sizes differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);
// Overwrites the string's bytes (OPENSSL_cleanse) before it is freed.
void Wipe(std::string& s);

}  // namespace kiln::store
