// A built SandboxPolicy as JSON and back: the server builds a request's
// policy once (PolicyBuilder, from the profile and the request) and it
// travels to the supervisor as is, in the job's plan (docs/protocol.md
// section 5, spawner/job_plan.h). The supervisor does not build it again.
//
// Input files given by content or by an open file travel as open files
// beside the frame (SCM_RIGHTS): the JSON names each with its size and the
// index of its fd. The far end is the server (trusted), but a malformed
// policy is an error, never an exception and never a default.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "policy/policy.h"

namespace kiln::policy {

// The policy's JSON; `fds` (not null) receives the open files of its input
// files in the order the JSON refers to them. An input file given by
// content is put into a sealed memfd first.
Result<nlohmann::json> EncodePolicy(const SandboxPolicy& policy,
                                    std::vector<std::shared_ptr<const UniqueFd>>* fds);

// Back, with the open files that came with it (fds[i] is input fd i).
Result<SandboxPolicy> DecodePolicy(const nlohmann::json& j,
                                   std::vector<std::shared_ptr<const UniqueFd>> fds);

// A sealed memfd holding `bytes` (no exec, no write, no resize once sealed).
Result<UniqueFd> SealedMemfd(const char* name, std::string_view bytes);
// The same of `parts` end to end.
Result<UniqueFd> SealedMemfd(const char* name, const std::vector<std::string_view>& parts);

}  // namespace kiln::policy
