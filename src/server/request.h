// Parsing and validating the bodies of the two execute endpoints into a
// spawner::ExecRequest. Pure functions: every rule of docs/api.md lives here
// and is unit-tested without a server.
//
// POST /v1/execute errors name the field: {error: {code, message, field}}.
// POST /execute keeps the reference design's contract: 422 with a FastAPI-style
// detail list naming the field.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sessions/session_manager.h"
#include "spawner/spawner.h"

namespace kiln::server {

struct FieldError {
  std::string field;  // "code", "files[2].path", ...; empty when the body itself is bad
  std::string code;   // "invalid_json", "missing_field", "invalid_type", "invalid_value"
  std::string message;
};

struct V1Request {
  spawner::ExecRequest exec;
  bool return_files = false;
};

// `body` is the raw request body; `default_profile` applies when none is given.
std::optional<FieldError> ParseV1Execute(const std::string& body,
                                         const std::string& default_profile, V1Request* out);

struct ReferenceRequest {
  spawner::ExecRequest exec;
  double timeout_s = 30;
  bool return_output_files = false;
};

std::optional<FieldError> ParseReferenceExecute(const std::string& body,
                                                const std::string& default_profile,
                                                ReferenceRequest* out);

// An `env` object of a request ({NAME: value}): names a program may set (not
// kiln's own: PATH, HOME, LD_*, PYTHON*, ...), string values without NUL, at
// most 64 variables and 32 KiB; errors name `field`.NAME.
std::optional<FieldError> ParseEnv(const nlohmann::json& env, const std::string& field,
                                   std::vector<std::pair<std::string, std::string>>* out);

// POST /v1/sessions: {profile?, memory?, cpus?, timeout?, idle_ttl?, max_lifetime?, env?}.
// An empty body is an empty object.
std::optional<FieldError> ParseSessionCreate(const std::string& body,
                                             sessions::SessionOptions* out);

// POST /v1/sessions/{id}/execute: {code, timeout?}.
struct SessionExecuteRequest {
  std::string code;
  std::optional<double> timeout_s;
};
std::optional<FieldError> ParseSessionExecute(const std::string& body, SessionExecuteRequest* out);

// A percent-encoded URL path segment sequence ("data/a%20b.csv") decoded;
// nullopt for a malformed escape or an encoded NUL.
std::optional<std::string> PercentDecode(std::string_view text);

// A variable name a request may set for its program (not one kiln sets).
bool IsUserEnvName(const std::string& name);

// {"error": {"code", "message", "field"}}
nlohmann::json V1ErrorBody(const std::string& code, const std::string& message,
                           const std::string& field = "");
// {"detail": [{"loc": ["body", field], "msg", "type"}]}
nlohmann::json ReferenceValidationBody(const FieldError& e);

}  // namespace kiln::server
