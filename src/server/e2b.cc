#include "server/e2b.h"

#include <algorithm>
#include <cmath>

#include "base/base64.h"
#include "base/log.h"
#include "executions/service.h"
#include "isolation/mount_ns.h"
#include "server/connect.h"
#include "server/request.h"
#include "store/api_key.h"
#include "store/time_format.h"

namespace kiln::server::e2b {
namespace {

namespace http = boost::beast::http;

// The envd version the create answer reports. 0.4.0 is the lowest with which
// the SDK authenticates by the access token alone (below it, it sends a
// username); kiln claims no later envd feature (stdin close, octet-stream
// uploads: 0.5.x).
constexpr const char* kEnvdVersion = "0.4.0";
// The ports the SDK names in E2b-Sandbox-Port.
constexpr const char* kEnvdPort = "49983";
constexpr const char* kInterpreterPort = "49999";
// E2B's home directory, where every kiln sandbox shows its workspace a second
// time (isolation::kE2bHomePath): an E2B sandbox's cells and commands run
// there, and the SDK's file paths are absolute beneath it or relative to it.
constexpr const char* kHome = isolation::kE2bHomePath;
// The templates of E2B's own SDKs: the server's default profile.
constexpr const char* kDefaultTemplates[] = {"code-interpreter-v1", "base"};

std::string PathOf(const Request& req) {
  std::string target(req.target());
  if (auto q = target.find('?'); q != std::string::npos) target.resize(q);
  return target;
}

std::optional<std::string> Header(const Request& req, std::string_view name) {
  auto it = req.find(boost::beast::string_view(name.data(), name.size()));
  if (it == req.end()) return std::nullopt;
  return std::string(it->value());
}

Reply JsonReply(int status, const nlohmann::json& body) {
  Reply r;
  r.status = status;
  r.headers = {{"Content-Type", "application/json"}};
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

Reply NoContent() {
  Reply r;
  r.status = 204;
  return r;
}

// A kiln error as E2B's: the status of kiln's table for the codes sessions
// return, with a gone session reported as not found (E2B has no 410).
int StatusOf(const kiln::Error& e) {
  static const std::pair<Code, int> kStatus[] = {
      {Code::kInvalidArgument, 400}, {Code::kNotFound, 404},          {Code::kGone, 404},
      {Code::kAborted, 409},         {Code::kResourceExhausted, 429}, {Code::kUnavailable, 503},
      {Code::kUnauthenticated, 401}, {Code::kPermissionDenied, 403},  {Code::kUnimplemented, 501}};
  for (const auto& [code, status] : kStatus) {
    if (e.code == code) return status;
  }
  return 500;
}

Reply FromError(const kiln::Error& e) { return Error(StatusOf(e), e.message); }

// "/sandboxes/ID/timeout" -> {"ID", "timeout"}; "/sandboxes/ID" -> {"ID", ""}.
std::pair<std::string, std::string> SplitId(const std::string& rest) {
  const auto slash = rest.find('/');
  if (slash == std::string::npos) return {rest, ""};
  return {rest.substr(0, slash), rest.substr(slash + 1)};
}

// A JSON object body (an empty body is {}); nullopt when it is not one.
std::optional<nlohmann::json> ObjectBody(const Request& req) {
  if (req.body().empty()) return nlohmann::json::object();
  auto j = nlohmann::json::parse(req.body(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

bool Present(const nlohmann::json& body, const char* field) {
  auto it = body.find(field);
  return it != body.end() && !it->is_null();
}

// The `timeout` field (seconds): nullopt when absent; an error text when bad.
std::optional<std::string> TimeoutOf(const nlohmann::json& body, std::optional<double>* out) {
  if (!Present(body, "timeout")) return std::nullopt;
  const auto& t = body["timeout"];
  if (!t.is_number() || !(t.get<double>() > 0)) return "timeout: must be a number of seconds > 0";
  *out = t.get<double>();
  return std::nullopt;
}

// kiln's MIME bundle (nbformat `data`) as the fields of E2B's result event.
void AddMimeBundle(const nlohmann::json& data, nlohmann::json* event) {
  static const std::pair<const char*, const char*> kFields[] = {
      {"text/plain", "text"},        {"text/html", "html"},
      {"text/markdown", "markdown"}, {"image/svg+xml", "svg"},
      {"image/png", "png"},          {"image/jpeg", "jpeg"},
      {"application/pdf", "pdf"},    {"text/latex", "latex"},
      {"application/json", "json"},  {"application/javascript", "javascript"}};
  if (!data.is_object()) return;
  for (const auto& [mime, value] : data.items()) {
    std::string field = mime;  // other types keep their MIME name (the SDK's `extra`)
    for (const auto& [m, f] : kFields) {
      if (mime == m) field = f;
    }
    (*event)[field] = value;
  }
}

// Writes /execute's newline-delimited JSON events, one chunk each, sending
// the head with the first.
class NdjsonStream {
 public:
  explicit NdjsonStream(mcp::SseWriter* w) : w_(w) {}
  bool started() const { return started_; }
  void Event(const nlohmann::json& event) {
    if (failed_) return;
    if (!started_) {
      started_ = true;
      if (!w_->Begin(200,
                     {{"Content-Type", "application/x-ndjson"}, {"Cache-Control", "no-cache"}})) {
        failed_ = true;
        return;
      }
    }
    failed_ =
        !w_->Write(event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  void End() {
    if (started_ && !failed_) w_->End();
  }

 private:
  mcp::SseWriter* w_;
  bool started_ = false;
  bool failed_ = false;
};

// A query parameter, percent-decoded; nullopt when absent or malformed.
std::optional<std::string> QueryParam(const Request& req, std::string_view name) {
  const std::string target(req.target());
  const auto q = target.find('?');
  if (q == std::string::npos) return std::nullopt;
  std::string_view query(target);
  query.remove_prefix(q + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const auto eq = pair.find('=');
    if (pair.substr(0, eq) == name) {
      if (eq == std::string_view::npos) return std::string();
      std::string value(pair.substr(eq + 1));
      std::replace(value.begin(), value.end(), '+', ' ');
      return PercentDecode(value);
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

// An E2B path (`field`'s) as a path of the workspace, "" for the workspace
// itself: absolute beneath /home/user, or relative to it (as envd resolves
// them against the user's home). Anything else is outside what kiln serves:
// an error text. The workspace path is then checked by the session's file API
// (no "..", no symlink followed).
std::optional<std::string> ToWorkspace(const std::string& field, std::string path,
                                       std::string* out) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const std::string home = kHome;
  if (path == home) {
    path.clear();
  } else if (path.rfind(home + "/", 0) == 0) {
    path.erase(0, home.size() + 1);
  } else if (!path.empty() && path.front() == '/') {
    return field + " " + path + ": outside " + home +
           ", the sandbox's workspace; kiln serves files there only (docs/e2b.md)";
  }
  while (path.rfind("./", 0) == 0) path.erase(0, 2);
  if (path == ".") path.clear();
  *out = std::move(path);
  return std::nullopt;
}

// A workspace path as E2B answers it: absolute, beneath /home/user.
std::string E2bPath(const std::string& workspace_path) {
  return workspace_path.empty() ? std::string(kHome) : std::string(kHome) + "/" + workspace_path;
}

// A file's path for files.read/write (the workspace itself is not a file).
std::optional<std::string> WorkspacePath(const std::string& path, std::string* why) {
  if (path.empty()) {
    *why = "path: required";
    return std::nullopt;
  }
  std::string rel;
  if (auto bad = ToWorkspace("path", path, &rel)) {
    *why = *bad;
    return std::nullopt;
  }
  if (rel.empty()) {
    *why = "path " + path + ": the workspace directory, not a file";
    return std::nullopt;
  }
  return rel;
}

struct Part {
  std::string filename;
  std::string bytes;
};

// The parts of a multipart/form-data body (RFC 7578), or an error text.
std::optional<std::string> ParseMultipart(const std::string& content_type, const std::string& body,
                                          std::vector<Part>* parts) {
  const auto b = content_type.find("boundary=");
  if (content_type.rfind("multipart/form-data", 0) != 0 || b == std::string::npos)
    return "Content-Type: must be multipart/form-data with a boundary";
  std::string boundary = content_type.substr(b + 9);
  if (auto semi = boundary.find(';'); semi != std::string::npos) boundary.resize(semi);
  if (boundary.size() >= 2 && boundary.front() == '"' && boundary.back() == '"')
    boundary = boundary.substr(1, boundary.size() - 2);
  const std::string delimiter = "--" + boundary;
  size_t pos = body.find(delimiter);
  if (pos == std::string::npos) return "the multipart body has no boundary line";
  for (;;) {
    pos += delimiter.size();
    if (body.compare(pos, 2, "--") == 0) return std::nullopt;  // the closing delimiter
    if (body.compare(pos, 2, "\r\n") != 0) return "a malformed multipart boundary line";
    pos += 2;
    const auto head_end = body.find("\r\n\r\n", pos);
    if (head_end == std::string::npos) return "a multipart part without a blank line";
    const std::string head = body.substr(pos, head_end - pos);
    const auto next = body.find("\r\n" + delimiter, head_end + 4);
    if (next == std::string::npos) return "a multipart part without its end";
    Part part;
    part.bytes = body.substr(head_end + 4, next - head_end - 4);
    if (auto f = head.find("filename=\""); f != std::string::npos) {
      const auto end = head.find('"', f + 10);
      if (end == std::string::npos) return "a multipart filename without its end";
      part.filename = head.substr(f + 10, end - f - 10);
    }
    parts->push_back(std::move(part));
    pos = next + 2;
  }
}

}  // namespace

Reply Error(int status, const std::string& message) {
  return JsonReply(status, {{"code", status}, {"message", message}});
}

Kind Classify(const Request& head) {
  if (head.find("E2b-Sandbox-Id") != head.end()) return Kind::kSandbox;
  const std::string path = PathOf(head);
  // A signed downloadUrl/uploadUrl fetched as it is (no headers): E2B's, to be
  // answered why it cannot work (Refusal). kiln itself has no /files route.
  if (path == "/files" && QueryParam(head, "signature")) return Kind::kSandbox;
  if (path == "/v2/sandboxes" || path.rfind("/v2/sandboxes/", 0) == 0 || path == "/sandboxes" ||
      path.rfind("/sandboxes/", 0) == 0) {
    return Kind::kApi;
  }
  return Kind::kNone;
}

std::optional<Front::Entry> Front::Lookup(const std::string& id, const std::string& tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end() || it->second.tenant != tenant) return std::nullopt;
  return it->second;
}

nlohmann::json Front::Created(const std::string& id, const Entry& e) const {
  return {{"sandboxID", id},
          {"templateID", e.template_id},
          {"clientID", "kiln"},
          {"envdVersion", kEnvdVersion},
          {"envdAccessToken", e.access_token},
          {"trafficAccessToken", e.access_token},
          {"domain", nullptr}};
}

nlohmann::json Front::Info(const std::string& id, const Entry& e,
                           const nlohmann::json& session) const {
  const double lifetime_s = session.value("max_lifetime", 0.0);
  const auto& limits = session.value("limits", nlohmann::json::object());
  nlohmann::json info = Created(id, e);
  info.erase("envdAccessToken");
  info.erase("trafficAccessToken");
  info["metadata"] = e.metadata;
  info["startedAt"] = store::FormatTimeMs(e.started_ms, true);
  info["endAt"] = store::FormatTimeMs(
      e.started_ms + static_cast<int64_t>(std::llround(lifetime_s * 1000)), true);
  info["state"] = "running";
  info["cpuCount"] = static_cast<int>(std::ceil(limits.value("cpus", 1.0)));
  info["memoryMB"] = limits.value("memory_bytes", int64_t{0}) / (1024 * 1024);
  info["diskSizeMB"] = limits.value("disk_bytes", int64_t{0}) / (1024 * 1024);
  info["allowInternetAccess"] = false;
  return info;
}

Reply Front::Api(const Request& req, const store::KeyInfo& key, const std::string& peer) {
  const sessions::Caller caller{key.tenant, key.id, peer};
  const std::string method(req.method_string());
  const std::string path = PathOf(req);

  if (path == "/v2/sandboxes" && method == "POST") {
    auto body = ObjectBody(req);
    if (!body) return Error(400, "the body must be a JSON object");
    // What kiln cannot honour is refused, never ignored.
    for (const char* field : {"mcp", "network", "iam", "volumeMounts", "autoResume"}) {
      if (Present(*body, field))
        return Error(400, std::string(field) + " is not supported by kiln (docs/e2b.md)");
    }
    if (body->value("allow_internet_access", false))
      return Error(400, "allow_internet_access: kiln sandboxes have no network");
    if (body->value("autoPause", false))
      return Error(400, "autoPause: kiln sandboxes cannot be paused");
    sessions::SessionOptions options;  // the profile's limits
    // The sandbox's environment: the session's interpreter's, for its life
    // (the same names are refused as for kiln's own `env`: PATH, LD_*, ...).
    if (Present(*body, "envVars")) {
      if (auto bad = server::ParseEnv((*body)["envVars"], "envVars", &options.env)) {
        return Error(400, bad->field + ": " + bad->message);
      }
    }
    std::string template_id = "code-interpreter-v1";
    if (Present(*body, "templateID")) {
      if (!(*body)["templateID"].is_string()) return Error(400, "templateID: must be a string");
      template_id = (*body)["templateID"].get<std::string>();
    }
    if (config_->profiles.count(template_id) != 0) {
      options.profile = template_id;
    } else if (std::find(std::begin(kDefaultTemplates), std::end(kDefaultTemplates), template_id) ==
               std::end(kDefaultTemplates)) {
      return Error(400, "templateID: no kiln profile is named '" + template_id +
                            "' (E2B's code-interpreter-v1 and base are the default profile)");
    }
    nlohmann::json metadata = nlohmann::json::object();
    if (Present(*body, "metadata")) {
      if (!(*body)["metadata"].is_object()) return Error(400, "metadata: must be an object");
      for (const auto& [k, v] : (*body)["metadata"].items()) {
        if (!v.is_string()) return Error(400, "metadata: values must be strings");
      }
      metadata = (*body)["metadata"];
    }
    std::optional<double> timeout;
    if (auto bad = TimeoutOf(*body, &timeout)) return Error(400, *bad);

    auto created = sessions_->Create(caller, options);
    if (!created.ok()) return FromError(created.error());
    const std::string id = created->value("id", "");
    if (timeout) {
      Status st = sessions_->SetLifetime(caller, id, *timeout);
      if (!st.ok()) {
        (void)sessions_->Delete(caller, id);
        return FromError(st.error());
      }
    }
    Entry e{key.tenant, key.id, template_id, executions::NewId(), metadata, store::NowMs(), {}, {}};
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Sandboxes whose session must have ended (past the longest lifetime).
      const int64_t horizon =
          e.started_ms - static_cast<int64_t>((config_->server.session_max_lifetime_s + 60) * 1000);
      std::erase_if(sandboxes_,
                    [horizon](const auto& kv) { return kv.second.started_ms < horizon; });
      sandboxes_[id] = e;
    }
    KILN_LOG_INFO("e2b sandbox id={} tenant={} template={}", id, key.tenant, template_id);
    return JsonReply(201, Created(id, e));
  }

  std::string rest;
  bool v2 = false;
  if (path.rfind("/v2/sandboxes/", 0) == 0) {
    rest = path.substr(14);
    v2 = true;
  } else if (path.rfind("/sandboxes/", 0) == 0) {
    rest = path.substr(11);
  } else {
    return Error(404, "kiln does not serve " + method + " " + path + " (docs/e2b.md)");
  }
  const auto [id, tail] = SplitId(rest);
  auto route = [&](const char* m, bool want_v2, const char* want_tail) {
    return method == m && v2 == want_v2 && tail == want_tail;
  };
  const bool known = route("GET", false, "") || route("DELETE", false, "") ||
                     route("POST", false, "timeout") || route("POST", true, "connect");
  if (!known) return Error(404, "kiln does not serve " + method + " " + path + " (docs/e2b.md)");

  auto entry = Lookup(id, key.tenant);
  auto session =
      entry ? sessions_->Get(caller, id) : Result<nlohmann::json>(MakeError(Code::kNotFound, ""));
  if (!session.ok()) {
    if (entry) {
      std::lock_guard<std::mutex> lock(mu_);
      sandboxes_.erase(id);
    }
    return Error(404, "sandbox " + id + " not found");
  }

  if (route("GET", false, "")) return JsonReply(200, Info(id, *entry, *session));
  if (route("DELETE", false, "")) {
    Status st = sessions_->Delete(caller, id);
    {
      std::lock_guard<std::mutex> lock(mu_);
      sandboxes_.erase(id);
    }
    return st.ok() ? NoContent() : FromError(st.error());
  }
  auto body = ObjectBody(req);
  if (!body) return Error(400, "the body must be a JSON object");
  std::optional<double> timeout;
  if (auto bad = TimeoutOf(*body, &timeout)) return Error(400, *bad);
  if (route("POST", false, "timeout")) {
    if (!timeout) return Error(400, "timeout: required");
    Status st = sessions_->SetLifetime(caller, id, *timeout);
    return st.ok() ? NoContent() : FromError(st.error());
  }
  // POST /v2/sandboxes/{id}/connect: it runs; a timeout resets its end.
  if (Present(*body, "memory") && !(*body)["memory"].get<bool>())
    return Error(400, "memory: kiln sandboxes are never paused, so they cannot be rebooted");
  if (timeout) {
    Status st = sessions_->SetLifetime(caller, id, *timeout);
    if (!st.ok()) return FromError(st.error());
  }
  return JsonReply(200, Created(id, *entry));
}

std::optional<Reply> Front::Refusal(const Request& head, Entry* out) {
  if (head.find("E2b-Sandbox-Id") == head.end()) {
    return Error(501,
                 "signed file URLs (downloadUrl, uploadUrl) name their sandbox by hostname "
                 "(49983-ID.DOMAIN), which needs wildcard DNS and a proxy in front of kiln; with "
                 "E2B_SANDBOX_URL the URL carries no sandbox id. Use files.read/files.write "
                 "(docs/e2b.md)");
  }
  const std::string id = Header(head, "E2b-Sandbox-Id").value_or("");
  std::string token = Header(head, "X-Access-Token").value_or("");
  if (token.empty()) token = Header(head, "E2B-Traffic-Access-Token").value_or("");
  std::optional<Entry> entry;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = sandboxes_.find(id); it != sandboxes_.end()) entry = it->second;
  }
  // Unknown: what E2B's proxy answers for a sandbox that is not running.
  if (!entry) return Error(502, "sandbox " + id + " is not running");
  if (token.empty() || !store::ConstantTimeEquals(token, entry->access_token))
    return Error(401, "the sandbox's access token is missing or wrong");
  if (out != nullptr) *out = *entry;
  return std::nullopt;
}

Reply Front::Sandbox(const Request& req, const std::string& peer, mcp::SseWriter* stream,
                     int hangup_fd) {
  const std::string id = Header(req, "E2b-Sandbox-Id").value_or("");
  const std::string port = Header(req, "E2b-Sandbox-Port").value_or("");
  Entry found;
  if (auto refused = Refusal(req, &found)) return *refused;
  const Entry* entry = &found;
  const sessions::Caller caller{entry->tenant, entry->key_id, peer};
  const std::string method(req.method_string());
  const std::string path = PathOf(req);

  if (port == kEnvdPort && method == "GET" && path == "/health") {
    auto got = sessions_->Get(caller, id);
    if (!got.ok()) return Error(502, "sandbox " + id + " is not running: " + got.error().message);
    return NoContent();
  }
  if (port == kEnvdPort && path == "/files" && (method == "GET" || method == "POST")) {
    return Files(req, id, caller);
  }
  if (port == kInterpreterPort && method == "POST" && path == "/execute") {
    return Execute(req, id, caller, stream, hangup_fd);
  }
  if (port == kInterpreterPort && path.rfind("/contexts", 0) == 0) return Contexts(req, id);
  if (port == kEnvdPort && method == "POST" &&
      (path == "/filesystem.Filesystem/Stat" || path == "/filesystem.Filesystem/ListDir" ||
       path == "/filesystem.Filesystem/Remove" || path == "/filesystem.Filesystem/MakeDir" ||
       path == "/filesystem.Filesystem/Move")) {
    return ConnectFilesystem(req, path, id, caller);
  }
  if (port == kEnvdPort && method == "POST" && path == "/process.Process/Start") {
    return ProcessStart(req, id, caller, stream, hangup_fd);
  }
  if (port == kEnvdPort && method == "POST" &&
      (path == "/process.Process/List" || path == "/process.Process/SendSignal" ||
       path == "/process.Process/SendInput")) {
    return ProcessUnary(req, path, id, caller);
  }
  if (port == kEnvdPort &&
      (path.rfind("/filesystem.", 0) == 0 || path.rfind("/process.", 0) == 0)) {
    // Connect's error shape, so that the SDK's message says why.
    return JsonReply(501, {{"code", "unimplemented"},
                           {"message", path + " is not supported by kiln yet (docs/e2b.md)"}});
  }
  return Error(501, method + " " + path + " on port " + port +
                        " is not supported by kiln yet (docs/e2b.md)");
}

Reply Front::Files(const Request& req, const std::string& id, const sessions::Caller& caller) {
  std::string why;
  const auto query_path = QueryParam(req, "path");
  if (req.method() == boost::beast::http::verb::get) {
    const auto path = WorkspacePath(query_path.value_or(""), &why);
    if (!path) return Error(400, why);
    auto bytes = sessions_->GetFile(caller, id, *path);
    if (!bytes.ok()) return FromError(bytes.error());
    Reply r;
    r.headers = {{"Content-Type", "application/octet-stream"}};
    r.body = std::move(*bytes);
    return r;
  }
  std::vector<Part> parts;
  if (auto bad = ParseMultipart(Header(req, "Content-Type").value_or(""), req.body(), &parts))
    return Error(400, *bad);
  if (parts.empty()) return Error(400, "no file in the multipart body");
  nlohmann::json written = nlohmann::json::array();
  for (const Part& part : parts) {
    // One file: the query names it; several: each part's filename does.
    const std::string& name = parts.size() == 1 && query_path ? *query_path : part.filename;
    const auto path = WorkspacePath(name, &why);
    if (!path) return Error(400, why);
    Status st = sessions_->PutFile(caller, id, *path, part.bytes);
    if (!st.ok()) return FromError(st.error());
    const auto slash = path->rfind('/');
    written.push_back({{"name", slash == std::string::npos ? *path : path->substr(slash + 1)},
                       {"type", "file"},
                       {"path", E2bPath(*path)}});
  }
  return JsonReply(200, written);
}

// A Connect protocol error (unary, JSON): {code, message} with its status.
Reply ConnectError(const kiln::Error& e) {
  static const std::pair<Code, std::pair<int, const char*>> kCodes[] = {
      {Code::kInvalidArgument, {400, "invalid_argument"}},
      {Code::kNotFound, {404, "not_found"}},
      {Code::kGone, {404, "not_found"}},
      {Code::kAborted, {409, "aborted"}},
      {Code::kResourceExhausted, {429, "resource_exhausted"}},
      {Code::kUnavailable, {503, "unavailable"}},
      {Code::kAlreadyExists, {409, "already_exists"}},
      {Code::kFailedPrecondition, {400, "failed_precondition"}}};
  std::pair<int, const char*> status{500, "internal"};
  for (const auto& [code, s] : kCodes) {
    if (e.code == code) status = s;
  }
  return JsonReply(status.first, {{"code", status.second}, {"message", e.message}});
}

// filesystem.Filesystem's Stat, ListDir and Remove (`files.exists`,
// `files.getInfo`, `files.list`, `files.remove`), Connect unary calls with JSON messages, over the
// session's file list. Paths are relative to the workspace; "." (or "") is the workspace itself.
Reply Front::ConnectFilesystem(const Request& req, const std::string& rpc, const std::string& id,
                               const sessions::Caller& caller) {
  auto body = ObjectBody(req);
  if (!body) return ConnectError(InvalidArgument("the body must be a JSON object"));
  // A path of a request member as a workspace path ("" is the workspace).
  auto path_of = [&](const char* field, std::string* out) -> std::optional<Reply> {
    if (!body->value(field, nlohmann::json()).is_string())
      return ConnectError(InvalidField(field, std::string(field) + ": required, a string"));
    if (auto bad = ToWorkspace(field, (*body)[field].get<std::string>(), out))
      return ConnectError(InvalidField(field, *bad));
    return std::nullopt;
  };
  auto entry = [](const nlohmann::json& f) {
    const std::string p = f.value("path", "");
    const auto slash = p.rfind('/');
    return nlohmann::json{{"name", slash == std::string::npos ? p : p.substr(slash + 1)},
                          {"type", f.value("directory", false) ? 2 : 1},  // FILE_TYPE_DIRECTORY
                          {"path", E2bPath(p)},
                          {"size", f.value("size", int64_t{0})}};
  };
  // The entry of `path` once it exists (Move's and MakeDir's answer).
  auto entry_of = [&](const std::string& path) -> Reply {
    auto files = sessions_->ListFiles(caller, id);
    if (!files.ok()) return ConnectError(files.error());
    for (const auto& f : *files) {
      if (f.value("path", "") == path) return JsonReply(200, {{"entry", entry(f)}});
    }
    const auto slash = path.rfind('/');  // a symlink: the listing skips it
    return JsonReply(200, {{"entry",
                            {{"name", slash == std::string::npos ? path : path.substr(slash + 1)},
                             {"type", 3},  // FILE_TYPE_SYMLINK
                             {"path", E2bPath(path)}}}});
  };
  std::string path;
  if (rpc == "/filesystem.Filesystem/Move") {
    std::string to;
    if (auto bad = path_of("source", &path)) return *bad;
    if (auto bad = path_of("destination", &to)) return *bad;
    if (path.empty() || to.empty())
      return ConnectError(InvalidArgument("the workspace itself cannot be moved or replaced"));
    Status st = sessions_->MoveFile(caller, id, path, to);
    return st.ok() ? entry_of(to) : ConnectError(st.error());
  }
  if (auto bad = path_of("path", &path)) return *bad;
  if (rpc == "/filesystem.Filesystem/MakeDir") {
    if (path.empty()) return ConnectError(MakeError(Code::kAlreadyExists, "the workspace exists"));
    Status st = sessions_->MakeDir(caller, id, path);
    return st.ok() ? entry_of(path) : ConnectError(st.error());
  }
  if (rpc == "/filesystem.Filesystem/Remove") {
    // A file, a symlink, or a directory with all it holds (files.remove).
    if (path.empty())
      return ConnectError(InvalidArgument("the workspace itself cannot be removed"));
    Status st = sessions_->DeleteFile(caller, id, path, /*recursive=*/true);
    return st.ok() ? JsonReply(200, nlohmann::json::object()) : ConnectError(st.error());
  }
  auto files = sessions_->ListFiles(caller, id);
  if (!files.ok()) return ConnectError(files.error());

  const nlohmann::json* found = nullptr;
  for (const auto& f : *files) {
    if (f.value("path", "") == path) found = &f;
  }
  if (!path.empty() && found == nullptr)
    return ConnectError(MakeError(Code::kNotFound, "no file or directory " + path));
  if (rpc == "/filesystem.Filesystem/Stat") {
    if (found == nullptr)  // the workspace itself
      return JsonReply(200,
                       {{"entry",
                         {{"name", std::string(kHome).substr(std::string(kHome).rfind('/') + 1)},
                          {"type", 2},
                          {"path", kHome},
                          {"size", 0}}}});
    return JsonReply(200, {{"entry", entry(*found)}});
  }
  if (found != nullptr && !found->value("directory", false))
    return ConnectError(InvalidField("path", "path " + path + " is not a directory"));
  int64_t depth = 1;
  if (body->contains("depth") && (*body)["depth"].is_number_integer())
    depth = std::max<int64_t>(1, (*body)["depth"].get<int64_t>());
  const std::string prefix = path.empty() ? "" : path + "/";
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& f : *files) {
    const std::string p = f.value("path", "");
    if (p.size() <= prefix.size() || p.compare(0, prefix.size(), prefix) != 0) continue;
    const auto levels =
        std::count(p.begin() + static_cast<std::ptrdiff_t>(prefix.size()), p.end(), '/');
    if (levels < depth) entries.push_back(entry(f));
  }
  return JsonReply(200, {{"entries", entries}});
}

Reply Front::Execute(const Request& req, const std::string& id, const sessions::Caller& caller,
                     mcp::SseWriter* stream, int hangup_fd) {
  auto body = ObjectBody(req);
  if (!body) return Error(400, "the body must be a JSON object");
  if (!body->contains("code") || !(*body)["code"].is_string())
    return Error(400, "code: required, a string");
  // The session starts in E2B's home directory (the runtime enters it once).
  nlohmann::json extra = {{"cwd", kHome}};
  std::vector<std::string> resets;
  {
    std::string context = "default";
    if (Present(*body, "context_id")) {
      if (!(*body)["context_id"].is_string()) return Error(400, "context_id: must be a string");
      context = (*body)["context_id"].get<std::string>();
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) return Error(502, "sandbox " + id + " is not running");
    if (context != "default" && it->second.contexts.count(context) == 0)
      return Error(404, "context " + context + " not found");
    resets = it->second.resets;
    extra["context"] = context;
    if (!resets.empty()) extra["reset_contexts"] = resets;
  }
  if (Present(*body, "language")) {
    const auto& l = (*body)["language"];
    if (!l.is_string() || (l != "python" && l != "python3"))
      return Error(400, "language: kiln runs python only");
  }
  if (Present(*body, "env_vars")) {
    // The cell's environment (runCode's envs): set for the cell, then restored;
    // checked as the session's (kiln's own names refused, naming the variable).
    std::vector<std::pair<std::string, std::string>> env;
    if (auto bad = server::ParseEnv((*body)["env_vars"], "env_vars", &env))
      return Error(400, bad->field + ": " + bad->message);
    nlohmann::json env_json = nlohmann::json::object();
    for (const auto& [k, v] : env) env_json[k] = v;
    if (!env.empty()) extra["env"] = env_json;
  }
  const std::string code = (*body)["code"].get<std::string>();

  NdjsonStream out(stream);
  bool error_sent = false;
  const spawner::EventFn on_event = [&](std::string_view name, const nlohmann::json& data) {
    const std::string now = store::FormatTimeMs(store::NowMs(), true);
    if (name == "stdout" || name == "stderr") {
      out.Event(
          {{"type", std::string(name)}, {"text", data.value("text", "")}, {"timestamp", now}});
    } else if (name == "display" || name == "result") {
      nlohmann::json event = {{"type", "result"}, {"is_main_result", name == "result"}};
      AddMimeBundle(data.value("data", nlohmann::json::object()), &event);
      out.Event(event);
    } else if (name == "error") {
      std::string traceback;
      for (const auto& line : data.value("traceback", nlohmann::json::array())) {
        if (!traceback.empty()) traceback += "\n";
        traceback += line.is_string() ? line.get<std::string>() : line.dump();
      }
      out.Event({{"type", "error"},
                 {"name", data.value("ename", "")},
                 {"value", data.value("evalue", "")},
                 {"traceback", traceback}});
      error_sent = true;
    }
  };
  auto outcome = sessions_->Execute(caller, id, code, std::nullopt, on_event, hangup_fd, extra);
  if (outcome.ok() && !outcome->rejection && !resets.empty()) {
    // The runtime emptied them before the cell: no longer pending.
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = sandboxes_.find(id); it != sandboxes_.end()) {
      auto& pending = it->second.resets;
      for (const auto& r : resets)
        pending.erase(std::remove(pending.begin(), pending.end(), r), pending.end());
    }
  }
  if (!outcome.ok()) {
    if (!out.started()) {
      const kiln::Error& e = outcome.error();
      if (e.code == Code::kNotFound || e.code == Code::kGone)
        return Error(502, "sandbox " + id + " is not running: " + e.message);
      return FromError(e);
    }
    out.Event({{"type", "error"},
               {"name", "KilnError"},
               {"value", outcome.error().message},
               {"traceback", ""}});
  } else if (outcome->rejection) {
    const auto& r = *outcome->rejection;
    Reply reply = Error(r.tenant_quota ? 429 : 503, r.error.message);
    reply.headers.emplace_back("Retry-After", std::to_string(std::max(1, r.retry_after_s)));
    return reply;
  } else {
    const supervisor::ExecutionResult& result = outcome->response->result;
    // A cell kiln ended (timeout, memory limit, ...) is an error the
    // interpreter never raised: said as one, with kiln's status and reason.
    if (result.outcome != supervisor::Outcome::kOk && !error_sent) {
      out.Event({{"type", "error"},
                 {"name", std::string(supervisor::ToString(result.outcome))},
                 {"value", result.reason},
                 {"traceback", ""}});
    }
    if (result.execution_count) {
      out.Event({{"type", "number_of_executions"}, {"execution_count", *result.execution_count}});
    }
  }
  out.Event({{"type", "end_of_execution"}});
  out.End();
  Reply reply;
  reply.streamed = true;
  return reply;
}

// The code interpreter's contexts (createCodeContext, listCodeContexts,
// restartCodeContext, removeCodeContext): interpreter states in the
// sandbox's one interpreter, each a namespace of its own (docs/e2b.md).
Reply Front::Contexts(const Request& req, const std::string& id) {
  constexpr size_t kMaxContexts = 64;
  const std::string method(req.method_string());
  const std::string path = PathOf(req);
  const nlohmann::json default_context = {
      {"id", "default"}, {"language", "python"}, {"cwd", kHome}};
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return Error(502, "sandbox " + id + " is not running");
  Entry& e = it->second;
  if (path == "/contexts" && method == "GET") {
    nlohmann::json all = nlohmann::json::array({default_context});
    for (const auto& [name, c] : e.contexts) all.push_back(c);
    return JsonReply(200, all);
  }
  if (path == "/contexts" && method == "POST") {
    auto body = ObjectBody(req);
    if (!body) return Error(400, "the body must be a JSON object");
    if (Present(*body, "language")) {
      const auto& l = (*body)["language"];
      if (!l.is_string() || (l != "python" && l != "python3"))
        return Error(400, "language: kiln runs python only");
    }
    if (Present(*body, "cwd") && (*body)["cwd"] != kHome) {
      return Error(400, std::string("cwd: a kiln context runs in the workspace, ") + kHome +
                            " (docs/e2b.md)");
    }
    if (e.contexts.size() >= kMaxContexts)
      return Error(429, "a sandbox has at most " + std::to_string(kMaxContexts) + " contexts");
    const std::string cid = executions::NewId();
    nlohmann::json c = {{"id", cid}, {"language", "python"}, {"cwd", kHome}};
    e.contexts[cid] = c;
    return JsonReply(200, c);
  }
  // /contexts/{id} (DELETE) and /contexts/{id}/restart (POST).
  constexpr std::string_view kPrefix = "/contexts/";
  if (path.rfind(kPrefix, 0) != 0) return Error(404, method + " " + path + ": no such route");
  auto [cid, action] = SplitId(path.substr(kPrefix.size()));
  const bool restart = action == "restart" && method == "POST";
  const bool remove = action.empty() && method == "DELETE";
  if (!restart && !remove) return Error(404, method + " " + path + ": no such route");
  if (cid != "default" && e.contexts.count(cid) == 0)
    return Error(404, "context " + cid + " not found");
  if (remove && cid == "default") return Error(400, "the default context cannot be removed");
  if (std::find(e.resets.begin(), e.resets.end(), cid) == e.resets.end()) e.resets.push_back(cid);
  if (remove) e.contexts.erase(cid);
  return NoContent();
}

namespace {

// A Connect error code for a kiln error (streams carry it in the end-of-stream message).
const char* ConnectCode(const kiln::Error& e) {
  static const std::pair<Code, const char*> kCodes[] = {
      {Code::kInvalidArgument, "invalid_argument"},
      {Code::kNotFound, "not_found"},
      {Code::kGone, "not_found"},
      {Code::kAborted, "aborted"},
      {Code::kResourceExhausted, "resource_exhausted"},
      {Code::kUnavailable, "unavailable"},
      {Code::kUnimplemented, "unimplemented"}};
  for (const auto& [code, name] : kCodes) {
    if (e.code == code) return name;
  }
  return "internal";
}

// process.ProcessConfig {cmd, args, envs, cwd} -> the runtime's command
// {argv, cwd, env}; an error text naming the field.
std::optional<std::string> CommandOf(const nlohmann::json& config, nlohmann::json* command) {
  if (!config.is_object()) return "process: required, an object";
  const auto cmd = config.find("cmd");
  if (cmd == config.end() || !cmd->is_string() || cmd->get<std::string>().empty())
    return "process.cmd: required, a program";
  nlohmann::json argv = nlohmann::json::array({*cmd});
  if (auto args = config.find("args"); args != config.end() && !args->is_null()) {
    if (!args->is_array()) return "process.args: must be an array of strings";
    for (const auto& a : *args) {
      if (!a.is_string() || a.get<std::string>().find('\0') != std::string::npos)
        return "process.args: must be an array of strings without NUL";
      argv.push_back(a);
    }
  }
  std::vector<std::pair<std::string, std::string>> env;
  if (auto envs = config.find("envs"); envs != config.end() && !envs->is_null()) {
    if (auto bad = server::ParseEnv(*envs, "process.envs", &env))
      return bad->field + ": " + bad->message;
  }
  nlohmann::json env_json = nlohmann::json::object();
  for (const auto& [k, v] : env) env_json[k] = v;
  nlohmann::json cwd = kHome;  // envd's default: the user's home
  if (auto c = config.find("cwd"); c != config.end() && !c->is_null()) {
    if (!c->is_string() || c->get<std::string>().empty() ||
        c->get<std::string>().find('\0') != std::string::npos)
      return "process.cwd: must be a directory's path";
    cwd = *c;
  }
  *command = {{"argv", argv}, {"cwd", cwd}, {"env", env_json}};
  return std::nullopt;
}

std::string ProcessEvent(const nlohmann::json& event) {
  return connect::Encode(0, nlohmann::json({{"event", event}})
                                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace

// process.Process/Start (E2B's commands.run/start): a Connect server-streaming
// call. The command is one cell of the session that runs it instead of Python
// (docs/protocol.md, "execute": command), so through the executions service
// and in the session's sandbox; its stdout and stderr stream as data events.
Reply Front::ProcessStart(const Request& req, const std::string& id, const sessions::Caller& caller,
                          mcp::SseWriter* stream, int hangup_fd) {
  bool begun = false;
  auto begin = [&] {
    if (!begun) {
      begun = stream->Begin(200, {{"Content-Type", "application/connect+json"}});
      if (!begun) return false;
    }
    return true;
  };
  auto write = [&](const std::string& bytes) { return begin() && stream->Write(bytes); };
  auto finish = [&](const std::string& end) {
    if (write(end)) stream->End();
    Reply reply;
    reply.streamed = true;
    return reply;
  };
  // Errors of a streaming call are its end-of-stream message (HTTP 200).
  auto fail = [&](const char* code, const std::string& message) {
    return finish(connect::EndStream(code, message));
  };

  auto envelopes = connect::Parse(req.body(), config_->server.max_body_bytes);
  if (!envelopes.ok()) return fail("invalid_argument", envelopes.error().message);
  const connect::Envelope* message = nullptr;
  for (const auto& e : *envelopes) {
    if (!(e.flags & connect::kEndStream) && message == nullptr) message = &e;
  }
  if (message == nullptr) return fail("invalid_argument", "no StartRequest in the body");
  auto body = nlohmann::json::parse(message->message, nullptr, false);
  if (body.is_discarded() || !body.is_object())
    return fail("invalid_argument", "the StartRequest is not a JSON object");
  if (Present(body, "pty"))
    return fail("unimplemented", "pty: kiln runs commands without a terminal (docs/e2b.md)");
  if (body.value("stdin", false))
    return fail("unimplemented",
                "stdin: kiln runs commands with stdin from /dev/null (docs/e2b.md)");
  nlohmann::json command;
  const nlohmann::json config = body.value("process", nlohmann::json());
  if (auto bad = CommandOf(config, &command)) return fail("invalid_argument", *bad);

  // The audit row's code: the command line, marked as one.
  const std::string audited = "# kiln: command " + command["argv"].dump();
  bool started = false;
  std::string error;
  // The supervisor reads the pipes before each frame, so output the command
  // wrote at once comes before its command_started: held until the start
  // event (the SDK expects that first).
  std::vector<std::string> early;
  const spawner::EventFn on_event = [&](std::string_view name, const nlohmann::json& data) {
    if (name == "command_started" && !started) {
      started = true;
      const int64_t pid = data.value("pid", int64_t{0});
      {
        std::lock_guard<std::mutex> lock(mu_);
        running_[id] = Running{pid, config};
      }
      write(ProcessEvent({{"start", {{"pid", pid}}}}));
      for (const auto& e : early) write(e);
      early.clear();
    } else if (name == "stdout" || name == "stderr") {
      std::string event = ProcessEvent(
          {{"data", {{std::string(name), Base64Encode(data.value("text", std::string()))}}}});
      if (started) {
        write(event);
      } else {
        early.push_back(std::move(event));
      }
    } else if (name == "error") {
      error = data.value("ename", "") + ": " + data.value("evalue", "");
    }
  };
  auto outcome = sessions_->Execute(caller, id, audited, std::nullopt, on_event, hangup_fd,
                                    {{"command", command}, {"cwd", kHome}});
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(id);
  }
  if (!outcome.ok()) return fail(ConnectCode(outcome.error()), outcome.error().message);
  if (outcome->rejection) {
    const auto& r = *outcome->rejection;
    return fail(r.tenant_quota ? "resource_exhausted" : "unavailable", r.error.message);
  }
  const supervisor::ExecutionResult& result = outcome->response->result;
  const std::string status(supervisor::ToString(result.outcome));
  const std::string& reason = result.reason;
  if (!started) {  // it never ran: a missing program or directory
    return fail("invalid_argument", error.empty() ? status + ": " + reason : error);
  }
  if ((status == "ok" || status == "error") && result.exit_code >= 0) {
    const int64_t exit_code = result.exit_code;
    write(ProcessEvent({{"end",
                         {{"exitCode", exit_code},
                          {"exited", true},
                          {"status", "exit status " + std::to_string(exit_code)}}}}));
    return finish(connect::EndStream());
  }
  if (status == "interrupted") {  // SendSignal (the SDK's kill): the process group was killed
    write(ProcessEvent({{"end",
                         {{"exitCode", -1},
                          {"exited", false},
                          {"status", "signal: killed"},
                          {"error", reason}}}}));
    return finish(connect::EndStream());
  }
  // kiln ended it: its timeout, memory limit, output limit, ...
  return fail(status == "timeout" ? "deadline_exceeded" : "resource_exhausted",
              status + ": " + reason);
}

// process.Process/List, SendSignal, SendInput: Connect unary calls (JSON).
Reply Front::ProcessUnary(const Request& req, const std::string& rpc, const std::string& id,
                          const sessions::Caller& caller) {
  auto body = ObjectBody(req);
  if (!body) return ConnectError(InvalidArgument("the body must be a JSON object"));
  std::optional<Running> running;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = running_.find(id); it != running_.end()) running = it->second;
  }
  if (rpc == "/process.Process/List") {
    nlohmann::json processes = nlohmann::json::array();
    if (running) processes.push_back({{"pid", running->pid}, {"config", running->config}});
    return JsonReply(200, {{"processes", processes}});
  }
  // ProcessSelector {pid} (a tag selects nothing: kiln's commands have none).
  const nlohmann::json selector = body->value("process", nlohmann::json::object());
  const nlohmann::json pid =
      selector.is_object() ? selector.value("pid", nlohmann::json()) : nlohmann::json();
  if (!pid.is_number_integer())
    return ConnectError(InvalidField("process.pid", "process.pid: required, an integer"));
  if (!running || running->pid != pid.get<int64_t>()) {
    return ConnectError(
        MakeError(Code::kNotFound, "process with pid " + pid.dump() + " not found"));
  }
  if (rpc == "/process.Process/SendInput") {
    return JsonReply(400, {{"code", "failed_precondition"},
                           {"message",
                            "kiln runs commands with stdin from /dev/null: there is "
                            "no stdin to send to (docs/e2b.md)"}});
  }
  // SendSignal: SIGKILL or SIGTERM. The command is interrupted: its whole
  // process group is killed (SIGKILL, whichever was asked for).
  const nlohmann::json signal = body->value("signal", nlohmann::json());
  const bool known =
      signal == "SIGNAL_SIGKILL" || signal == "SIGNAL_SIGTERM" || signal == 9 || signal == 15;
  if (!known) {
    return ConnectError(InvalidField("signal", "signal: SIGNAL_SIGKILL or SIGNAL_SIGTERM"));
  }
  auto busy = sessions_->Interrupt(caller, id);
  if (!busy.ok()) return ConnectError(busy.error());
  if (!*busy) return ConnectError(MakeError(Code::kNotFound, "the process has ended"));
  return JsonReply(200, nlohmann::json::object());
}

}  // namespace kiln::server::e2b
