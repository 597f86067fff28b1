#include "mcp/engine.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "base/log.h"
#include "mcp/jsonrpc.h"
#include "mcp/tools.h"

namespace kiln::mcp {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kInstructions =
    "kiln runs Python in a hardened sandbox with no network. run_python keeps its state between "
    "calls "
    "(variables, imports, files in /workspace), like a notebook; its result has stdout, stderr, "
    "the last "
    "expression's value, a traceback on error, and matplotlib figures as PNG images. upload_file, "
    "download_file and list_files work on /workspace; reset starts a fresh interpreter.";

// The last line of `text` with content, cut to `max` bytes.
std::string LastLine(const std::string& text, size_t max) {
  size_t end = text.size();
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r')) --end;
  const size_t nl = text.rfind('\n', end == 0 ? 0 : end - 1);
  const size_t begin = nl == std::string::npos || end == 0 ? 0 : nl + 1;
  std::string line = text.substr(begin, end - begin);
  if (line.size() > max) {
    size_t cut = max;
    while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
    line = line.substr(0, cut) + "...";
  }
  return line;
}

// Whether a cell's result says its interpreter was lost. Any type may come
// back from a server: json::value("session_state", "kept") threw on a number
// and ended the MCP server (found by fuzz/mcp_engine_fuzzer.cc).
bool Lost(const json& result) {
  const auto it = result.find("session_state");
  return it != result.end() && *it == "lost";
}

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

}  // namespace

struct Engine::Call {
  json id;
  std::string key;
  std::atomic<bool> cancelled{false};
  std::thread thread;
};

// One running cell: what the progress notifications say, and the cancellation's
// escalation. A thread of its own (the worker is blocked in Execute); it is
// joined before the worker emits the response, so no progress notification
// ever follows it.
struct Engine::RunState {
  std::mutex m;
  std::condition_variable cv;
  bool stop = false;
  std::string last_output;  // for the progress message
  bool news = false;
  bool killed = false;  // the interpreter was deleted to stop the cell
};

Engine::Engine(std::unique_ptr<Backend> backend, EngineOptions options)
    : backend_(std::move(backend)), options_(std::move(options)), last_active_(Clock::now()) {
  limits_text_ = options_.limits_text.empty() ? DefaultLimitsText() : options_.limits_text;
}

Engine::~Engine() { Shutdown(); }

bool Engine::initialized() const {
  std::lock_guard<std::mutex> lock(mu_);
  return initialized_;
}

std::string Engine::protocol_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

size_t Engine::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_.size();
}

Clock::time_point Engine::last_active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_active_;
}

std::string Engine::kiln_session() const {
  std::lock_guard<std::mutex> lock(mu_);
  return session_;
}

bool Engine::structured() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_ >= "2025-06-18";
}

void Engine::JoinFinished() {
  std::lock_guard<std::mutex> joining(join_mu_);
  std::vector<std::shared_ptr<Call>> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done.swap(finished_);
  }
  for (auto& c : done) {
    if (c->thread.joinable()) c->thread.join();
  }
}

Engine::Disposition Engine::HandleText(std::string_view text, const Emit& emit) {
  auto parsed = jsonrpc::Parse(text);
  if (!parsed) {
    emit(jsonrpc::ErrorResponse(nullptr, jsonrpc::kParseError,
                                "Parse error: the message is not valid JSON"),
         true);
    return Disposition::kReplied;
  }
  return Handle(*parsed, emit);
}

Engine::Disposition Engine::Handle(const json& message, const Emit& emit) {
  JoinFinished();
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_active_ = Clock::now();
  }
  const jsonrpc::Message m = jsonrpc::Classify(message);
  switch (m.kind) {
    case jsonrpc::Kind::kInvalid:
      emit(jsonrpc::ErrorResponse(m.id, m.error_code, m.error), true);
      return Disposition::kReplied;
    case jsonrpc::Kind::kResponse:
      return Disposition::kNoReply;  // kiln sends no requests; a stray answer is dropped
    case jsonrpc::Kind::kNotification:
      if (m.error_code == 0) HandleNotification(m.method, m.params);
      return Disposition::kNoReply;
    case jsonrpc::Kind::kRequest: return HandleRequest(m.method, m.id, m.params, emit);
  }
  return Disposition::kNoReply;
}

void Engine::HandleNotification(const std::string& method, const json& params) {
  if (method == "notifications/initialized") {
    return;  // nothing waits for it: the server sends no requests
  }
  if (method == "notifications/cancelled") {
    const auto id = params.find("requestId");
    if (id == params.end() || !(id->is_string() || id->is_number_integer())) return;
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = calls_.find(id->dump());
    if (it == calls_.end()) return;  // finished already, or never was: ignored, as the spec says
    it->second->cancelled = true;
    cv_.notify_all();
    KILN_LOG_DEBUG("mcp: request {} cancelled", it->first);
  }
  // Other notifications (roots/list_changed, progress, ...) need nothing from kiln.
}

Engine::Disposition Engine::HandleRequest(const std::string& method, const json& id,
                                          const json& params, const Emit& emit) {
  auto reply = [&](json result) {
    emit(jsonrpc::Response(id, std::move(result)), true);
    return Disposition::kReplied;
  };
  auto fail = [&](int code, const std::string& message) {
    emit(jsonrpc::ErrorResponse(id, code, message), true);
    return Disposition::kReplied;
  };
  bool initialized = false, shut_down = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    initialized = initialized_;
    shut_down = shut_down_;
  }
  if (shut_down) return fail(jsonrpc::kServerError, "the MCP session is closed");
  if (method == "ping") return reply(json::object());
  if (method == "initialize") {
    if (initialized)
      return fail(jsonrpc::kInvalidRequest, "Invalid Request: the session is already initialized");
    std::string error;
    json result = Initialize(params, &error);
    if (!error.empty()) return fail(jsonrpc::kInvalidParams, error);
    return reply(std::move(result));
  }
  if (!initialized) {
    // Clients that probe first (server/discover, ...) fall back to initialize.
    return fail(jsonrpc::kMethodNotFound,
                "Method not found: " + method.substr(0, 200) +
                    " (the session is not initialized: send initialize first)");
  }
  if (method == "tools/list") {
    return reply({{"tools", ToolDefinitions(protocol_version(), limits_text_)}});
  }
  if (method == "tools/call") return CallTool(id, params, emit);
  return fail(jsonrpc::kMethodNotFound, "Method not found: " + method.substr(0, 200));
}

json Engine::Initialize(const json& params, std::string* error) {
  const auto v = params.find("protocolVersion");
  if (v == params.end() || !v->is_string()) {
    *error = "Invalid params: initialize needs \"protocolVersion\" (a string such as \"" +
             std::string(kLatestProtocolVersion) + "\")";
    return nullptr;
  }
  const std::string version = NegotiateProtocolVersion(v->get<std::string>());
  json info = {{"name", "kiln"}, {"version", options_.server_version}};
  if (version >= "2025-06-18") info["title"] = "kiln: sandboxed Python";
  {
    std::lock_guard<std::mutex> lock(mu_);
    initialized_ = true;
    version_ = version;
  }
  KILN_LOG_INFO("mcp: initialized, protocol {} (client asked for {})", version,
                v->get<std::string>());
  return {{"protocolVersion", version},
          {"capabilities", {{"tools", {{"listChanged", false}}}}},
          {"serverInfo", std::move(info)},
          {"instructions", kInstructions}};
}

Engine::Disposition Engine::CallTool(const json& id, const json& params, const Emit& emit) {
  const auto name = params.find("name");
  if (name == params.end() || !name->is_string()) {
    emit(jsonrpc::ErrorResponse(id, jsonrpc::kInvalidParams,
                                "Invalid params: tools/call needs a tool \"name\""),
         true);
    return Disposition::kReplied;
  }
  const std::string tool = name->get<std::string>();
  if (!IsTool(tool)) {
    emit(
        jsonrpc::ErrorResponse(id, jsonrpc::kInvalidParams, "Unknown tool: " + tool.substr(0, 200)),
        true);
    return Disposition::kReplied;
  }
  json args = json::object();
  if (const auto a = params.find("arguments"); a != params.end() && !a->is_null()) {
    if (!a->is_object()) {
      emit(jsonrpc::ErrorResponse(id, jsonrpc::kInvalidParams,
                                  "Invalid params: \"arguments\" must be an object"),
           true);
      return Disposition::kReplied;
    }
    args = *a;
  }
  // Invalid arguments are a tool error (isError) that names the argument, so
  // a model can correct its call; checked here, before any thread.
  ToolRequest request;
  request.tool = tool;
  Status valid = OkStatus();
  if (tool == "run_python") {
    auto r = ParseRunArgs(args);
    if (r.ok())
      request.run = std::move(*r);
    else
      valid = std::move(r).error();
  } else if (tool == "upload_file") {
    auto u = ParseUploadArgs(args);
    if (u.ok())
      request.upload = std::move(*u);
    else
      valid = std::move(u).error();
  } else if (tool == "download_file") {
    auto p = ParsePathArgs(args);
    if (p.ok())
      request.path = std::move(*p);
    else
      valid = std::move(p).error();
  } else {
    valid = ParseNoArgs(tool, args);
  }
  if (!valid.ok()) {
    emit(jsonrpc::Response(
             id, ToolError("Invalid arguments for " + tool + ": " + valid.error().message)),
         true);
    return Disposition::kReplied;
  }
  json token;
  if (const auto meta = params.find("_meta"); meta != params.end() && meta->is_object()) {
    if (const auto t = meta->find("progressToken");
        t != meta->end() && (t->is_string() || t->is_number_integer())) {
      token = *t;
    }
  }
  auto call = std::make_shared<Call>();
  call->id = id;
  call->key = id.dump();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) {
      emit(jsonrpc::ErrorResponse(id, jsonrpc::kServerError, "the MCP session is closed"), true);
      return Disposition::kReplied;
    }
    if (calls_.count(call->key) != 0) {
      emit(jsonrpc::ErrorResponse(id, jsonrpc::kInvalidRequest,
                                  "Invalid Request: id " + call->key.substr(0, 200) +
                                      " is in use by a request in flight"),
           true);
      return Disposition::kReplied;
    }
    if (calls_.size() >= options_.max_in_flight) {
      emit(jsonrpc::Response(
               id, ToolError("Too many tool calls in flight in this session (at most " +
                             std::to_string(options_.max_in_flight) + "); wait for one to finish")),
           true);
      return Disposition::kReplied;
    }
    calls_[call->key] = call;
    queue_.push_back(call.get());
    // The thread starts under the lock: Shutdown() sees it in calls_ and joins it.
    request.progress_token = std::move(token);
    call->thread = std::thread(&Engine::Work, this, call, std::move(request), emit);
  }
  return Disposition::kPending;
}

void Engine::Work(std::shared_ptr<Call> call, ToolRequest request, Emit emit) {
  // The turn is held until the response is out, so responses come in the
  // order the calls ran.
  const bool turn = AcquireTurn(*call);
  json result;
  if (turn) {
    const std::string& tool = request.tool;
    if (tool == "run_python") {
      result = RunPython(*call, request.run, request.progress_token, emit);
    } else if (tool == "upload_file") {
      result = UploadFile(request.upload);
    } else if (tool == "download_file") {
      result = DownloadFile(request.path);
    } else if (tool == "list_files") {
      result = ListFiles();
    } else {
      result = Reset();
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.erase(call->key);
    finished_.push_back(call);
    last_active_ = Clock::now();
  }
  cv_.notify_all();
  if (call->cancelled || !turn) {
    emit(nullptr, true);
  } else {
    emit(jsonrpc::Response(call->id, std::move(result)), true);
  }
  if (turn) ReleaseTurn();
}

bool Engine::AcquireTurn(Call& call) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] {
    return call.cancelled || shut_down_ ||
           (!turn_taken_ && !queue_.empty() && queue_.front() == &call);
  });
  if (call.cancelled || shut_down_) {
    queue_.erase(std::remove(queue_.begin(), queue_.end(), &call), queue_.end());
    cv_.notify_all();  // the next in line may be up
    return false;
  }
  queue_.pop_front();
  turn_taken_ = true;
  return true;
}

void Engine::ReleaseTurn() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    turn_taken_ = false;
  }
  cv_.notify_all();
}

Result<std::string> Engine::EnsureSession() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!session_.empty()) return session_;
  }
  auto created = backend_->CreateSession();
  if (!created.ok()) return created;
  std::lock_guard<std::mutex> lock(mu_);
  session_ = *created;
  KILN_LOG_INFO("mcp: kiln session {} started", session_);
  return session_;
}

void Engine::ForgetSession(const std::string& session, bool kill) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (session_ != session) return;  // forgotten (and deleted) already
    session_.clear();
  }
  if (kill) {
    if (Status s = backend_->DeleteSession(session); !s.ok() && s.error().code != Code::kNotFound) {
      KILN_LOG_WARN("mcp: deleting kiln session {}: {}", session, s.error().ToString());
    }
  }
}

json Engine::RunPython(Call& call, const RunArgs& args, const json& progress_token,
                       const Emit& emit) {
  const RunArgs* parsed = &args;
  std::string note;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!lost_note_.empty()) {
      note = "Note: the previous interpreter was lost (" + lost_note_ +
             "), so this code runs in a fresh one: earlier variables, imports and /workspace files "
             "are gone.";
      lost_note_.clear();
    }
  }
  for (int attempt = 0;; ++attempt) {
    auto session = EnsureSession();
    if (!session.ok()) {
      return ToolError(note + (note.empty() ? "" : "\n\n") +
                       "kiln could not start an interpreter: " + session.error().message);
    }
    if (call.cancelled) return nullptr;
    RunState state;
    const auto started = Clock::now();
    // The progress and cancellation thread.
    std::thread monitor([&] {
      std::unique_lock<std::mutex> lock(state.m);
      auto last_progress = started;
      double last_value = 0;
      int interrupts = 0;
      Clock::time_point interrupted_at;
      while (!state.stop) {
        state.cv.wait_for(lock, std::chrono::milliseconds(50));
        if (state.stop) break;
        const auto now = Clock::now();
        if (call.cancelled) {
          // Interrupt; again after a grace; then kill the interpreter.
          const auto since = now - interrupted_at;
          if (interrupts == 0 || (interrupts == 1 && since >= options_.interrupt_grace) ||
              (interrupts == 2 && since >= options_.interrupt_grace)) {
            const bool kill = interrupts == 2;
            ++interrupts;
            interrupted_at = now;
            lock.unlock();
            if (kill) {
              KILN_LOG_WARN(
                  "mcp: the cancelled cell ignored two interrupts: deleting kiln session {}",
                  *session);
              (void)backend_->DeleteSession(*session);
            } else {
              (void)backend_->Interrupt(*session);
            }
            lock.lock();
            if (kill) state.killed = true;
          }
          continue;  // no progress for a cancelled request
        }
        if (progress_token.is_null()) continue;
        const auto since = now - last_progress;
        if ((state.news && since >= options_.progress_interval) || since >= options_.heartbeat) {
          double value = std::chrono::duration<double>(now - started).count();
          if (value <= last_value) value = last_value + 0.001;
          last_value = value;
          std::string message = "running for " + Seconds(value) + " s";
          if (!state.last_output.empty()) message += ": " + state.last_output;
          state.news = false;
          last_progress = now;
          lock.unlock();
          emit(jsonrpc::Notification(
                   "notifications/progress",
                   {{"progressToken", progress_token}, {"progress", value}, {"message", message}}),
               false);
          lock.lock();
        }
      }
    });
    auto on_event = [&](const json& event) {
      if (!event.is_object()) return;
      const std::string kind = event.value("event", "");
      const json& data = event.contains("data") ? event["data"] : json();
      std::string line;
      if ((kind == "stdout" || kind == "stderr") && data.is_object() && data.contains("text") &&
          data["text"].is_string()) {
        line = LastLine(data["text"].get<std::string>(), 160);
        if (kind == "stderr" && !line.empty()) line = "[stderr] " + line;
      } else if (kind == "display") {
        line = "[display output]";
      } else if (kind == "error") {
        line = "[exception]";
      }
      if (line.empty()) return;
      std::lock_guard<std::mutex> lock(state.m);
      state.last_output = std::move(line);
      state.news = true;
      state.cv.notify_all();
    };
    auto result = backend_->Execute(*session, parsed->code, parsed->timeout_s, on_event);
    {
      std::lock_guard<std::mutex> lock(state.m);
      state.stop = true;
    }
    state.cv.notify_all();
    monitor.join();
    if (call.cancelled) {
      if (state.killed || (!result.ok() && result.error().code == Code::kNotFound) ||
          (result.ok() && Lost(*result))) {
        ForgetSession(*session, /*kill=*/!state.killed);
        // Nobody saw a result that says so: the next cell does.
        std::lock_guard<std::mutex> lock(mu_);
        lost_note_ =
            state.killed
                ? "the cancelled cell ignored two interrupts, so its interpreter was killed"
                : "it ended while a cancelled cell ran";
      }
      return nullptr;
    }
    if (!result.ok()) {
      const Error& e = result.error();
      if (e.code == Code::kNotFound && attempt == 0) {
        // The kiln session is gone (reaped, killed): a fresh one, and say so.
        ForgetSession(*session, /*kill=*/false);
        note = "Note: the previous interpreter was lost (" + e.message +
               "), so this code ran in a fresh one: earlier variables, imports and /workspace "
               "files are gone.";
        continue;
      }
      if (e.code == Code::kAborted) {
        return ToolError("The interpreter is busy with another cell; wait for it or cancel it (" +
                         e.message + ")");
      }
      if (e.code == Code::kInvalidArgument)
        return ToolError("Invalid arguments for run_python: " + e.message);
      return ToolError(note + (note.empty() ? "" : "\n\n") +
                       "kiln could not run the cell: " + e.message);
    }
    if (Lost(*result)) ForgetSession(*session, /*kill=*/true);
    return RunPythonResult(*result, note, structured());
  }
}

json Engine::UploadFile(const UploadArgs& args) {
  const UploadArgs* parsed = &args;
  std::string note;
  for (int attempt = 0;; ++attempt) {
    auto session = EnsureSession();
    if (!session.ok())
      return ToolError("kiln could not start an interpreter: " + session.error().message);
    Status s = backend_->PutFile(*session, parsed->path, parsed->bytes);
    if (s.ok()) {
      json out = UploadResult(parsed->path, parsed->bytes.size(), structured());
      if (!note.empty())
        out["content"][0]["text"] = note + "\n\n" + out["content"][0]["text"].get<std::string>();
      return out;
    }
    const Error& e = s.error();
    if (e.code == Code::kNotFound && attempt == 0) {
      ForgetSession(*session, /*kill=*/false);
      note = "Note: the previous interpreter was lost (" + e.message +
             "); the file went to a fresh one, whose variables and other files start empty.";
      continue;
    }
    if (e.code == Code::kInvalidArgument)
      return ToolError("Invalid arguments for upload_file: " + e.message);
    if (e.code == Code::kResourceExhausted)
      return ToolError("content_base64: the file is too big: " + e.message);
    return ToolError("kiln could not write the file: " + e.message);
  }
}

json Engine::DownloadFile(const std::string& file) {
  const std::string* path = &file;
  std::string session;
  {
    std::lock_guard<std::mutex> lock(mu_);
    session = session_;
  }
  if (session.empty())
    return ToolError("path: no such file: /workspace/" + *path + " (the workspace is empty)");
  auto bytes = backend_->GetFile(session, *path);
  if (bytes.ok()) return DownloadResult(*path, *bytes, structured());
  const Error& e = bytes.error();
  if (e.code == Code::kNotFound) {
    // A missing file, or a lost session: the listing tells them apart.
    auto listing = backend_->ListFiles(session);
    if (listing.ok()) return ToolError("path: no such file: /workspace/" + *path);
    if (listing.error().code == Code::kNotFound) {
      ForgetSession(session, /*kill=*/false);
      return ToolError(
          "The interpreter was lost (" + listing.error().message +
          "), and its /workspace files with it; the next run_python starts a fresh one.");
    }
  }
  if (e.code == Code::kInvalidArgument)
    return ToolError("Invalid arguments for download_file: " + e.message);
  return ToolError("kiln could not read the file: " + e.message);
}

json Engine::ListFiles() {
  std::string session;
  {
    std::lock_guard<std::mutex> lock(mu_);
    session = session_;
  }
  if (session.empty()) return ListFilesResult({{"files", json::array()}}, structured());
  auto listing = backend_->ListFiles(session);
  if (listing.ok()) return ListFilesResult(*listing, structured());
  if (listing.error().code == Code::kNotFound) {
    ForgetSession(session, /*kill=*/false);
    return ToolError(
        "The interpreter was lost (" + listing.error().message +
        "), and its /workspace files with it; the next run_python starts a fresh one.");
  }
  return ToolError("kiln could not list the files: " + listing.error().message);
}

json Engine::Reset() {
  std::string old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old = session_;
  }
  if (!old.empty()) ForgetSession(old, /*kill=*/true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    lost_note_.clear();  // a fresh interpreter is what was asked for
  }
  // A fresh interpreter now, so the next cell does not wait for one.
  auto created = EnsureSession();
  if (!created.ok()) {
    return ToolError("The old interpreter is gone, but kiln could not start a new one yet (" +
                     created.error().message + "); the next call tries again.");
  }
  return ResetResult();
}

void Engine::Shutdown() {
  std::vector<std::shared_ptr<Call>> calls;
  std::string session;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    for (auto& [key, call] : calls_) {
      call->cancelled = true;
      calls.push_back(call);
    }
    session = session_;
  }
  cv_.notify_all();
  // Deleting the session stops a running cell at once.
  if (!session.empty()) ForgetSession(session, /*kill=*/true);
  {
    std::lock_guard<std::mutex> joining(join_mu_);
    for (auto& c : calls) {
      if (c->thread.joinable()) c->thread.join();
    }
  }
  JoinFinished();
  // A call that was creating a session as we began.
  {
    std::lock_guard<std::mutex> lock(mu_);
    session = session_;
  }
  if (!session.empty()) ForgetSession(session, /*kill=*/true);
}

}  // namespace kiln::mcp
