// Hex (lowercase) encoding, and Base64 (RFC 4648, standard alphabet) decoding for rich outputs the
// sandbox sent: strict, so hostile input is an error rather than garbage bytes.
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"

namespace kiln {

// Two lowercase hex digits per byte.
std::string HexEncode(std::string_view bytes);

// Standard alphabet, with padding.
std::string Base64Encode(std::string_view bytes);

// Ignores ASCII whitespace; requires correct padding. kInvalidArgument otherwise.
Result<std::string> Base64Decode(std::string_view text);

}  // namespace kiln
