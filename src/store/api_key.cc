#include "store/api_key.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <cstdint>

namespace kiln::store {
namespace {

constexpr char kB64Url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int B64UrlValue(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

}  // namespace

bool IsValidKeyId(std::string_view id) {
  if (id.size() != kKeyIdChars) return false;
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool IsValidTenant(std::string_view tenant) {
  if (tenant.empty() || tenant.size() > 64) return false;
  for (char c : tenant) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string Base64UrlEncode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() * 4 + 2) / 3);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{static_cast<unsigned char>(bytes[i])} << 16) |
                       (uint32_t{static_cast<unsigned char>(bytes[i + 1])} << 8) |
                       uint32_t{static_cast<unsigned char>(bytes[i + 2])};
    out += kB64Url[(v >> 18) & 63];
    out += kB64Url[(v >> 12) & 63];
    out += kB64Url[(v >> 6) & 63];
    out += kB64Url[v & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest == 1) {
    const uint32_t v = uint32_t{static_cast<unsigned char>(bytes[i])} << 16;
    out += kB64Url[(v >> 18) & 63];
    out += kB64Url[(v >> 12) & 63];
  } else if (rest == 2) {
    const uint32_t v = (uint32_t{static_cast<unsigned char>(bytes[i])} << 16) |
                       (uint32_t{static_cast<unsigned char>(bytes[i + 1])} << 8);
    out += kB64Url[(v >> 18) & 63];
    out += kB64Url[(v >> 12) & 63];
    out += kB64Url[(v >> 6) & 63];
  }
  return out;
}

std::optional<std::string> Base64UrlDecode(std::string_view text) {
  if (text.size() % 4 == 1) return std::nullopt;  // no byte count encodes to 4n+1 chars
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = B64UrlValue(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  // Leftover bits must be zero: otherwise two strings would decode the same.
  if ((acc & ((1u << bits) - 1)) != 0) return std::nullopt;
  return out;
}

std::optional<ParsedKey> ParseApiKey(std::string_view key) {
  if (key.size() != kKeyChars || key.substr(0, kKeyPrefix.size()) != kKeyPrefix) {
    return std::nullopt;
  }
  const std::string_view id = key.substr(kKeyPrefix.size(), kKeyIdChars);
  if (!IsValidKeyId(id) || key[kKeyPrefix.size() + kKeyIdChars] != '_') return std::nullopt;
  auto secret = Base64UrlDecode(key.substr(kKeyPrefix.size() + kKeyIdChars + 1));
  if (!secret || secret->size() != kSecretBytes) return std::nullopt;
  return ParsedKey{std::string(id), std::move(*secret)};
}

std::string FormatApiKey(std::string_view id, std::string_view secret) {
  return std::string(kKeyPrefix) + std::string(id) + "_" + Base64UrlEncode(secret);
}

Result<std::string> RandomBytes(size_t n) {
  std::string out(n, '\0');
  std::array<unsigned char, 64> buf;
  for (size_t done = 0; done < n;) {
    const size_t chunk = std::min(buf.size(), n - done);
    if (RAND_bytes(buf.data(), static_cast<int>(chunk)) != 1) {
      return Internal("RAND_bytes: " + std::to_string(ERR_get_error()));
    }
    for (size_t i = 0; i < chunk; ++i) out[done + i] = static_cast<char>(buf[i]);
    done += chunk;
  }
  OPENSSL_cleanse(buf.data(), buf.size());
  return out;
}

Result<std::string> Sha256(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md;
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md.data(), &len, EVP_sha256(), nullptr) != 1 ||
      len != kSha256Bytes) {
    return Internal("EVP_Digest(sha256): " + std::to_string(ERR_get_error()));
  }
  return std::string(md.begin(), md.begin() + len);
}

Result<std::string> Sha256Hex(std::string_view data) {
  KILN_ASSIGN_OR_RETURN(const std::string digest, Sha256(data));
  return HexEncode(digest);
}

Result<std::string> HmacSha256Hex(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           static_cast<const unsigned char*>(static_cast<const void*>(data.data())), data.size(),
           out, &len) == nullptr) {
    return Internal("HMAC-SHA256 failed");
  }
  return HexEncode(std::string(out, out + len));
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void Wipe(std::string& s) {
  if (!s.empty()) OPENSSL_cleanse(s.data(), s.size());
  s.clear();
}

}  // namespace kiln::store
