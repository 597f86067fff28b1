#include "executions/output_filter.h"

#include <re2/re2.h>

#include <algorithm>
#include <cstring>

namespace kiln::executions {
namespace {

// Base64 payloads of rich outputs: a replaced run would only corrupt them,
// and a secret hidden in one is out of the audit's reach anyway
// (docs/threat-model.md).
bool IsBinaryMime(std::string_view key) {
  return key == "image/png" || key == "image/jpeg" || key == "image/gif" || key == "image/webp" ||
         key == "application/pdf";
}

// Up to this many detectors, Matches() runs each alone (see singles_).
constexpr size_t kSinglePasses = 3;

RE2::Options Latin1Options() {
  RE2::Options o;
  o.set_encoding(RE2::Options::EncodingLatin1);  // bytes: binary files too
  o.set_log_errors(false);
  return o;
}

}  // namespace

void HitSet::Add(const std::string& detector, std::string_view where, config::AuditAction action) {
  auto key = std::make_pair(detector, std::string(where));
  auto [it, fresh] = hits_.try_emplace(key);
  if (fresh) {
    it->second.detector = detector;
    it->second.where = std::string(where);
    it->second.action = action;
  }
  ++it->second.count;
  if (action == config::AuditAction::kBlock) blocked_ = true;
}

std::vector<OutputHit> HitSet::hits() const {
  std::vector<OutputHit> out;
  out.reserve(hits_.size());
  for (const auto& [key, hit] : hits_) out.push_back(hit);
  return out;
}

nlohmann::json HitSet::ClientJson() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [key, hit] : hits_) {
    if (hit.action == config::AuditAction::kFlag) continue;
    list.push_back({{"detector", hit.detector},
                    {"where", hit.where},
                    {"action", std::string(config::ToString(hit.action))},
                    {"count", hit.count}});
  }
  return {{"blocked", blocked_}, {"hits", list}};
}

nlohmann::json HitSet::ClientReport() const {
  nlohmann::json client = ClientJson();
  return client["hits"].empty() ? nlohmann::json() : client;
}

OutputFilter::~OutputFilter() = default;

Result<std::unique_ptr<const OutputFilter>> OutputFilter::Compile(
    const config::OutputAuditSpec& spec) {
  std::unique_ptr<OutputFilter> f(new OutputFilter());
  if (!spec.enabled || spec.detectors.empty()) return std::unique_ptr<const OutputFilter>();
  std::string combined;
  int group = 1;  // each detector's outer group; its own groups follow it
  for (const auto& d : spec.detectors) {
    RE2 alone(d.regex, Latin1Options());
    if (!alone.ok()) {
      return InvalidArgument("output audit: detector " + d.name + ": " + alone.error());
    }
    Detector det;
    det.name = d.name;
    det.action = d.action;
    det.group = group;
    group += 1 + alone.NumberOfCapturingGroups();
    det.max_length = static_cast<size_t>(std::max<uint64_t>(1, d.max_length));
    det.has_range = alone.PossibleMatchRange(&det.min, &det.max, 16);
    if (det.has_range && det.max.empty()) det.has_range = false;
    f->detectors_.push_back(std::move(det));
    f->singles_.push_back(std::make_unique<RE2>(d.regex, Latin1Options()));
    combined += (combined.empty() ? "(" : "|(") + d.regex + ")";
  }
  RE2::Options o = Latin1Options();
  o.set_max_mem(64 << 20);  // the DFA of every detector at once
  f->combined_ = std::make_unique<RE2>(combined, o);
  if (!f->combined_->ok()) {
    return InvalidArgument("output audit: the detectors together: " + f->combined_->error());
  }
  return std::unique_ptr<const OutputFilter>(std::move(f));
}

size_t OutputFilter::Apply(std::string_view text, size_t pos, size_t limit, std::string* out,
                           std::string_view where, HitSet* hits) const {
  limit = std::min(limit, text.size());
  // Nothing to act on (the common case): one fast pass, no submatch search.
  if (pos < limit && !Matches(text.substr(pos))) {
    out->append(text.substr(pos, limit - pos));
    return limit;
  }
  // Group 0 and, for each detector, its outer group (its own groups follow it).
  const int groups = 1 + combined_->NumberOfCapturingGroups();
  std::vector<re2::StringPiece> m(static_cast<size_t>(groups));
  const re2::StringPiece all(text.data(), text.size());
  while (pos < limit) {
    if (!combined_->Match(all, pos, text.size(), RE2::UNANCHORED, m.data(), groups)) break;
    const size_t s = static_cast<size_t>(m[0].data() - text.data());
    const size_t e = s + m[0].size();
    if (s >= limit) break;
    out->append(text.substr(pos, s - pos));
    if (e == s) {  // an empty match finds nothing: step over one byte
      out->push_back(text[s]);
      pos = s + 1;
      continue;
    }
    // Which detector: the first whose outer group took part.
    const Detector* d = &detectors_.front();
    for (const Detector& c : detectors_) {
      if (m[static_cast<size_t>(c.group)].data() != nullptr) {
        d = &c;
        break;
      }
    }
    hits->Add(d->name, where, d->action);
    if (d->action == config::AuditAction::kFlag) {
      out->append(text.substr(s, e - s));
    } else {
      out->append("[REDACTED:");
      out->append(d->name);
      out->push_back(']');
    }
    pos = e;
  }
  if (pos < limit) {
    out->append(text.substr(pos, limit - pos));
    pos = limit;
  }
  return pos;
}

size_t OutputFilter::Pending(std::string_view text, size_t from) const {
  const size_t n = text.size();
  size_t first = n;
  for (const Detector& d : detectors_) {
    // A match could still be forming only where less than max_length is left.
    size_t p = std::max(from, n >= d.max_length ? n - d.max_length + 1 : size_t{0});
    // A literal first byte: only its occurrences can begin a match.
    const bool literal_start =
        d.has_range && !d.min.empty() && !d.max.empty() && d.min.front() == d.max.front();
    for (; p < first; ++p) {
      if (!d.has_range) {
        first = p;
        break;
      }
      if (literal_start) {
        const void* hit = std::memchr(text.data() + p, d.min.front(), first - p);
        if (hit == nullptr) break;
        p = static_cast<size_t>(static_cast<const char*>(hit) - text.data());
      }
      // text[p..] could begin a match m only if it fits min <= m <= max on
      // their common prefix (a comparison that truncation preserves).
      const std::string_view t = text.substr(p);
      const size_t a = std::min(t.size(), d.min.size());
      if (std::memcmp(t.data(), d.min.data(), a) < 0) continue;
      const size_t b = std::min(t.size(), d.max.size());
      if (std::memcmp(t.data(), d.max.data(), b) > 0) continue;
      first = p;
      break;
    }
  }
  return first;
}

bool OutputFilter::Matches(std::string_view text) const {
  const re2::StringPiece piece(text.data(), text.size());
  if (singles_.size() > kSinglePasses) return RE2::PartialMatch(piece, *combined_);
  for (const auto& re : singles_) {
    if (RE2::PartialMatch(piece, *re)) return true;
  }
  return false;
}

std::string OutputFilter::Filter(std::string_view text, std::string_view where,
                                 HitSet* hits) const {
  std::string out;
  out.reserve(text.size());
  Apply(text, 0, text.size(), &out, where, hits);
  return out;
}

void OutputFilter::FilterJson(nlohmann::json* value, const std::string& where, HitSet* hits) const {
  if (value->is_string()) {
    std::string& s = value->get_ref<std::string&>();
    if (!Matches(s)) return;
    s = Filter(s, where, hits);
  } else if (value->is_object()) {
    for (auto it = value->begin(); it != value->end(); ++it) {
      if (IsBinaryMime(it.key())) continue;
      FilterJson(&it.value(), where.empty() ? it.key() : where + "." + it.key(), hits);
    }
  } else if (value->is_array()) {
    for (size_t i = 0; i < value->size(); ++i) {
      FilterJson(&(*value)[i], where + "[" + std::to_string(i) + "]", hits);
    }
  }
}

void OutputFilter::FilterResult(supervisor::ExecutionResult* r, HitSet* hits) const {
  auto text = [&](std::string* s, const std::string& where) {
    if (Matches(*s)) *s = Filter(*s, where, hits);
  };
  auto texts = [&](std::vector<std::string>* v, const std::string& where) {
    for (size_t i = 0; i < v->size(); ++i) text(&(*v)[i], where + "[" + std::to_string(i) + "]");
  };
  text(&r->stdout_data, "stdout");
  text(&r->stderr_data, "stderr");
  text(&r->reason, "reason");
  FilterJson(&r->outputs, "outputs", hits);
  if (r->error) {
    text(&r->error->name, "error.name");
    text(&r->error->value, "error.value");
    texts(&r->error->traceback, "error.traceback");
  }
  if (r->policy_violation) {
    text(&r->policy_violation->module, "policy_violation.module");
    text(&r->policy_violation->message, "policy_violation.message");
  }
  if (r->setup_error) text(&r->setup_error->message, "setup_error.message");
  texts(&r->collect_skipped, "files_skipped");
  text(&r->collect_error, "collect_error");
  for (auto& f : r->returned_files) text(&f.content, "files/" + f.path);
  if (hits->blocked()) {
    r->stdout_data.clear();
    r->stderr_data.clear();
    r->outputs = nlohmann::json::array();
    r->error.reset();
    r->files.clear();
    r->returned_files.clear();
  }
}

std::string StreamFilter::Push(std::string_view chunk) {
  pending_.append(chunk);
  std::string out;
  const size_t limit = filter_->Pending(pending_, 0);
  const size_t sent = filter_->Apply(pending_, 0, limit, &out, "", &hits_);
  pending_.erase(0, sent);
  return out;
}

std::string StreamFilter::Flush() {
  std::string out;
  filter_->Apply(pending_, 0, pending_.size(), &out, "", &hits_);
  pending_.clear();
  return out;
}

}  // namespace kiln::executions
