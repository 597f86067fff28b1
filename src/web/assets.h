// kiln::web: the web playground (/) and the operator console (/console),
// bundled from web/ at build time (web/build.sh, esbuild) and compiled into
// the binary (web/embed.py), so that `kiln serve` serves them with no network
// and nothing installed beside it. docs/adr/0016-web-playground.md.
#pragma once

#include <span>
#include <string_view>

namespace kiln::web {

struct Asset {
  std::string_view path;          // the route: "/", "/console", "/ui/playground-HASH.js"
  std::string_view content_type;  // "text/html; charset=utf-8", ...
  std::string_view etag;          // strong, quoted: a hash of the body
  std::string_view body;
  bool immutable;  // its name carries a hash of its content: cacheable for good
};

// Every page and asset; empty when the build could not make them.
std::span<const Asset> Assets();
// Why there are no pages (e.g. npm could not reach the registry at build
// time); empty when there are.
std::string_view UnavailableReason();
// The asset served at `path`, or nullptr.
const Asset* Find(std::string_view path);

// The Content-Security-Policy of every page: scripts and styles from this
// origin only (no inline script, no eval, no inline style), images from this
// origin and data:/blob: URLs, fetches to this origin, no frames, no plugins,
// no <base>, no form posts, not framed by anyone.
inline constexpr std::string_view kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'";

}  // namespace kiln::web
