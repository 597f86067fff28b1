// The output audit (docs/adr/0015-output-audit-and-security-events.md): what
// a sandbox sends back passes one filter before it leaves the server. The
// executions service applies it to every result (stdout, stderr, outputs,
// error text, returned files), to every streamed event, and to every file a
// session's client downloads; nothing else returns a sandbox's bytes.
//
// A profile's detectors (config::OutputAuditSpec: RE2 patterns over bytes,
// each with an action) are compiled once into one alternation. A match is
//   flag    left as it is, recorded;
//   redact  replaced by "[REDACTED:<detector>]", recorded;
//   block   replaced too, and the execution's output is withheld (the
//           service empties it; the status stays what happened).
// Hits name the detector and where (stdout, outputs[2].data.text/plain,
// files/out.txt), never the text.
//
// Streams (StreamFilter): a chunk is sent only up to where no secret can be
// forming: a match whose text has all arrived is acted on; the tail that
// could still be the start of one (it fits the detector's possible-match
// range and is shorter than its max_length) is held back until the next
// chunk or the end. So a secret split across two chunks is caught, and text
// that cannot begin a secret is not delayed.
//
// Immutable once compiled: thread-safe. A StreamFilter is one stream's.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"
#include "config/config.h"
#include "supervisor/execution_result.h"

namespace re2 {
class RE2;
}

namespace kiln::executions {

struct OutputHit {
  std::string detector;
  std::string where;
  config::AuditAction action = config::AuditAction::kRedact;
  uint64_t count = 0;
};

// The hits of one execution (or download), merged by (detector, where).
class HitSet final {
 public:
  void Add(const std::string& detector, std::string_view where, config::AuditAction action);
  bool empty() const { return hits_.empty(); }
  bool blocked() const { return blocked_; }
  std::vector<OutputHit> hits() const;
  // {"blocked": bool, "hits": [{detector, where, action, count}]}: what a
  // client is told (redact and block hits: its text changed; flag hits are
  // the operator's, in the audit store only).
  nlohmann::json ClientJson() const;
  // ClientJson when it names a hit; null otherwise (nothing to tell).
  nlohmann::json ClientReport() const;

 private:
  std::map<std::pair<std::string, std::string>, OutputHit> hits_;
  bool blocked_ = false;
};

class OutputFilter final {
 public:
  // Patterns were checked by the config parser; an error here (RE2 memory)
  // names the detector.
  static Result<std::unique_ptr<const OutputFilter>> Compile(const config::OutputAuditSpec& spec);
  ~OutputFilter();
  OutputFilter(const OutputFilter&) = delete;
  OutputFilter& operator=(const OutputFilter&) = delete;

  // Whether any detector matches somewhere in `text` (one DFA pass).
  bool Matches(std::string_view text) const;
  // The filtered text; hits recorded under `where`.
  std::string Filter(std::string_view text, std::string_view where, HitSet* hits) const;
  // Every string of a JSON value, in place (base64 image data excepted: a
  // replaced run would only corrupt it); `where` is the value's path.
  void FilterJson(nlohmann::json* value, const std::string& where, HitSet* hits) const;
  // A result, typed: every text the sandbox could write (stdout, stderr,
  // reason, outputs, error, policy_violation, setup_error's message, the
  // skipped files and collect error) and its returned files ("files/PATH").
  // `where` is the member's name in the API's JSON (docs/api.md). When a
  // block hit is found, the output is withheld: stdout, stderr, outputs,
  // error and the files are emptied; what the code did (status, exit code,
  // times) stays true.
  void FilterResult(supervisor::ExecutionResult* result, HitSet* hits) const;

  size_t detectors() const { return detectors_.size(); }

 private:
  friend class StreamFilter;
  struct Detector {
    std::string name;
    config::AuditAction action;
    size_t max_length;
    int group = 1;           // its outer group in combined_
    bool has_range = false;  // RE2::PossibleMatchRange succeeded
    std::string min, max;    // every match m: min <= m <= max
  };
  OutputFilter() = default;
  // Acts on the matches of `text` that start before `limit`, from `pos`,
  // appending the result to `out`; returns where it stopped (>= limit, or
  // the end of the last match acted on).
  size_t Apply(std::string_view text, size_t pos, size_t limit, std::string* out,
               std::string_view where, HitSet* hits) const;
  // The first position at or after `from` where a match could still be
  // forming in `text` (more text could make one): text.size() if none.
  size_t Pending(std::string_view text, size_t from) const;

  std::vector<Detector> detectors_;
  std::unique_ptr<re2::RE2> combined_;  // (d1)|(d2)|...: one pass finds any
  // Each detector alone: RE2 skips to a literal prefix with memchr, which the
  // alternation cannot; a few such passes beat one pass of the alternation.
  std::vector<std::unique_ptr<re2::RE2>> singles_;
};

// One stream (stdout or stderr) of one execution, chunk by chunk.
class StreamFilter final {
 public:
  explicit StreamFilter(const OutputFilter* filter) : filter_(filter) {}
  // What may be sent now of the stream so far (maybe empty).
  std::string Push(std::string_view chunk);
  // The end of the stream: the rest.
  std::string Flush();
  // A block hit was found: nothing more of this execution may be sent.
  bool blocked() const { return hits_.blocked(); }

 private:
  const OutputFilter* filter_;
  std::string pending_;  // received, not yet sent
  HitSet hits_;          // for blocked(); the result's filter records the hits
};

}  // namespace kiln::executions
