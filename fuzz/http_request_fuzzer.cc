// The HTTP request bodies (src/server/request.h): POST /v1/execute
// (ParseV1Execute), POST /execute (ParseReferenceExecute), POST /v1/sessions
// (ParseSessionCreate) and POST /v1/sessions/{id}/execute
// (ParseSessionExecute), each straight from a client.
//
// Input: one body, given to all four parsers. Checked: every accepted request
// keeps the rules docs/api.md states (sizes, finite positive times, safe
// relative file paths, environment names a client may set, the reference
// API's ranges); every refusal names a documented error code and renders as
// its error body; and what the server accepts reaches the supervisor
// unchanged through the job channel (spawner PlanExecution -> EncodePlan ->
// frame -> DecodePlan, its files as memfds).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "job_channel.h"
#include "policy/policy.h"
#include "server/request.h"

namespace {

using kiln::server::FieldError;

// Returns false (not accepted), for the parsers' early returns.
bool CheckRefusal(const FieldError& e) {
  FUZZ_CHECK(e.code == "invalid_json" || e.code == "missing_field" || e.code == "invalid_type" ||
             e.code == "invalid_value" || e.code == "unknown_field");
  FUZZ_CHECK(!e.message.empty());
  // The bodies the server sends (serialized as server.cc does).
  const auto v1 = kiln::server::V1ErrorBody(e.code, e.message, e.field);
  (void)v1.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const auto ref = kiln::server::ReferenceValidationBody(e);
  (void)ref.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return false;
}

bool PositiveSeconds(const std::optional<double>& t) { return !t || (std::isfinite(*t) && *t > 0); }

void CheckFiles(const kiln::spawner::ExecRequest& r) {
  for (const auto& [path, bytes] : r.files) FUZZ_CHECK(kiln::policy::IsSafeRelativePath(path));
}

// Each returns whether the body was accepted.
bool V1(const std::string& body) {
  kiln::server::V1Request r;
  if (auto e = kiln::server::ParseV1Execute(body, "default", &r)) return CheckRefusal(*e);
  const auto& x = r.exec;
  FUZZ_CHECK(!x.code.empty() && x.code.size() <= (1u << 20));
  FUZZ_CHECK(!x.filename.empty() && x.filename.size() <= 255);
  FUZZ_CHECK(PositiveSeconds(x.limits.timeout_s));
  FUZZ_CHECK(!x.limits.cpus || (std::isfinite(*x.limits.cpus) && *x.limits.cpus > 0));
  CheckFiles(x);
  FUZZ_CHECK(r.return_files == x.return_files.has_value());
  if (x.return_files) {
    for (const auto& g : *x.return_files) FUZZ_CHECK(!g.empty() && g.size() <= 1024);
  }
  FUZZ_CHECK(x.env.size() <= 64);
  for (const auto& [name, value] : x.env) {
    FUZZ_CHECK(kiln::server::IsUserEnvName(name));
    FUZZ_CHECK(value.find('\0') == std::string::npos);
  }
  kiln::fuzz::CheckRoundTrip(x);
  return true;
}

bool Reference(const std::string& body) {
  kiln::server::ReferenceRequest r;
  if (auto e = kiln::server::ParseReferenceExecute(body, "default", &r)) return CheckRefusal(*e);
  const auto& x = r.exec;
  FUZZ_CHECK(!x.code.empty());
  FUZZ_CHECK(r.timeout_s >= 1 && r.timeout_s <= 300 && x.limits.timeout_s == r.timeout_s);
  FUZZ_CHECK(x.limits.memory_bytes && *x.limits.memory_bytes >= (16ULL << 20));
  FUZZ_CHECK(x.limits.cpus && *x.limits.cpus >= 0.1 && *x.limits.cpus <= 8);
  CheckFiles(x);
  FUZZ_CHECK(r.return_output_files == x.return_files.has_value());
  kiln::fuzz::CheckRoundTrip(x);
  return true;
}

bool SessionCreate(const std::string& body) {
  kiln::sessions::SessionOptions o;
  if (auto e = kiln::server::ParseSessionCreate(body, &o)) return CheckRefusal(*e);
  FUZZ_CHECK(PositiveSeconds(o.limits.timeout_s) && PositiveSeconds(o.idle_ttl_s) &&
             PositiveSeconds(o.max_lifetime_s));
  FUZZ_CHECK(!o.limits.cpus || (std::isfinite(*o.limits.cpus) && *o.limits.cpus > 0));
  // The session's start request, as SessionManager::Create builds it.
  kiln::spawner::SessionRequest req;
  req.id = "s";
  req.profile = o.profile.empty() ? "default" : o.profile;
  req.limits = o.limits;
  if (o.max_lifetime_s) req.max_lifetime_s = *o.max_lifetime_s;
  kiln::fuzz::CheckRoundTrip(req);
  return true;
}

bool SessionExecute(const std::string& body) {
  kiln::server::SessionExecuteRequest r;
  if (auto e = kiln::server::ParseSessionExecute(body, &r)) return CheckRefusal(*e);
  FUZZ_CHECK(!r.code.empty() && r.code.size() <= (1u << 20));
  FUZZ_CHECK(PositiveSeconds(r.timeout_s));
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::fuzz::Input input(data, size);
  const std::string body(input.text());
  // A raw NUL is never JSON text (RFC 8259), and nlohmann stops reading at
  // one: a body with one is refused whole, never read up to it.
  const bool nul = body.find('\0') != std::string::npos;
  if (V1(body)) FUZZ_CHECK(!nul);
  if (Reference(body)) FUZZ_CHECK(!nul);
  if (SessionCreate(body)) FUZZ_CHECK(!nul);
  if (SessionExecute(body)) FUZZ_CHECK(!nul);
  return 0;
}
