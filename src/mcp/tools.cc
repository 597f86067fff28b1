#include "mcp/tools.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "base/base64.h"

namespace kiln::mcp {
namespace {

using json = nlohmann::json;

constexpr std::string_view kRunPython = "run_python";
constexpr std::string_view kUploadFile = "upload_file";
constexpr std::string_view kDownloadFile = "download_file";
constexpr std::string_view kListFiles = "list_files";
constexpr std::string_view kReset = "reset";

// Largest file download_file returns (it travels base64 in one message).
constexpr size_t kMaxDownloadBytes = 32 << 20;

bool AtLeast(std::string_view version, std::string_view since) { return version >= since; }

std::string Describe(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "a number";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::binary:
    case json::value_t::discarded: break;
  }
  return "an unexpected value";
}

// The first argument not in `known`, if any.
Status NoUnknownArgs(std::string_view tool, const json& args, const std::set<std::string>& known) {
  for (const auto& [name, value] : args.items()) {
    if (known.count(name) == 0) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return InvalidArgument(
          name + ": unknown argument of " + std::string(tool) +
          (known.empty() ? " (it takes no arguments)" : " (it takes: " + list + ")"));
    }
  }
  return OkStatus();
}

Result<std::string> RequiredString(const json& args, const std::string& name, std::string_view what,
                                   size_t max_bytes) {
  const auto it = args.find(name);
  if (it == args.end() || it->is_null())
    return InvalidArgument(name + ": required: " + std::string(what));
  if (!it->is_string()) {
    return InvalidArgument(name + ": must be a string (" + std::string(what) + "), not " +
                           Describe(*it));
  }
  const auto& s = it->get_ref<const std::string&>();
  if (s.size() > max_bytes) {
    return InvalidArgument(name + ": " + std::to_string(s.size()) + " bytes is over the limit of " +
                           std::to_string(max_bytes) + " bytes");
  }
  return s;
}

Result<std::string> PathArg(const json& args) {
  KILN_ASSIGN_OR_RETURN(
      std::string path,
      RequiredString(args, "path", "a path relative to /workspace, e.g. \"data/input.csv\"",
                     kMaxPathBytes));
  if (path.empty()) return InvalidArgument("path: must not be empty");
  if (path.find('\0') != std::string::npos)
    return InvalidArgument("path: must not contain a NUL byte");
  // Accept "/workspace/x" as "x": a model sees that directory in the descriptions.
  if (path.rfind("/workspace/", 0) == 0) path = path.substr(11);
  if (path.empty() || path.front() == '/') {
    return InvalidArgument("path: must be relative to /workspace (e.g. \"out/plot.png\"), not \"" +
                           path.substr(0, 200) + "\"");
  }
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    if (path.compare(start, end - start, "..") == 0) {
      return InvalidArgument("path: must stay inside /workspace (no \"..\" components)");
    }
    start = end + 1;
  }
  return path;
}

// Valid UTF-8 without NUL bytes: what download_file returns as text.
bool IsText(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == 0) return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

// Image MIME type from the bytes' magic number; empty when not an image.
std::string ImageType(std::string_view b) {
  if (b.size() >= 8 && b.substr(0, 8) == std::string_view("\x89PNG\r\n\x1a\n", 8))
    return "image/png";
  if (b.size() >= 3 && b.substr(0, 3) == "\xFF\xD8\xFF") return "image/jpeg";
  if (b.size() >= 6 && (b.substr(0, 6) == "GIF87a" || b.substr(0, 6) == "GIF89a"))
    return "image/gif";
  if (b.size() >= 12 && b.substr(0, 4) == "RIFF" && b.substr(8, 4) == "WEBP") return "image/webp";
  return "";
}

// `text` cut to kMaxTextBlockBytes: its head and tail, on UTF-8 boundaries.
std::string Bounded(std::string text) {
  if (text.size() <= kMaxTextBlockBytes) return text;
  size_t head = kMaxTextBlockBytes * 3 / 4, tail_len = kMaxTextBlockBytes / 4;
  while (head > 0 && (static_cast<unsigned char>(text[head]) & 0xC0) == 0x80) --head;
  size_t tail = text.size() - tail_len;
  while (tail < text.size() && (static_cast<unsigned char>(text[tail]) & 0xC0) == 0x80) ++tail;
  const size_t omitted = tail - head;
  return text.substr(0, head) + "\n[... " + std::to_string(omitted) +
         " bytes omitted here; the whole output is in the structured result ...]\n" +
         text.substr(tail);
}

json TextBlock(std::string text) { return {{"type", "text"}, {"text", std::move(text)}}; }

std::string StringOf(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A boolean member; false when absent or of another type. (json::value(key,
// false) throws on another type: a result with "stdout_truncated": 1 ended the
// MCP server; found by fuzz/mcp_engine_fuzzer.cc.)
bool BoolOf(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

// The "text/plain" of a MIME bundle (nbformat allows a string or a list of lines).
std::string PlainText(const json& data) {
  const auto it = data.find("text/plain");
  if (it == data.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  std::string out;
  if (it->is_array()) {
    for (const auto& line : *it) {
      if (line.is_string()) out += line.get<std::string>();
    }
  }
  return out;
}

std::string StreamText(const json& output) {
  const auto it = output.find("text");
  if (it == output.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  std::string out;
  if (it->is_array()) {
    for (const auto& line : *it) {
      if (line.is_string()) out += line.get<std::string>();
    }
  }
  return out;
}

std::string TracebackText(const json& error) {
  std::string out;
  if (const auto tb = error.find("traceback"); tb != error.end() && tb->is_array()) {
    for (const auto& line : *tb) {
      if (!line.is_string()) continue;
      if (!out.empty()) out += "\n";
      out += line.get<std::string>();
    }
  }
  if (out.empty()) {
    const std::string name =
        StringOf(error, "name").empty() ? StringOf(error, "ename") : StringOf(error, "name");
    const std::string value =
        StringOf(error, "value").empty() ? StringOf(error, "evalue") : StringOf(error, "value");
    out = name + (value.empty() ? "" : ": " + value);
  }
  return out;
}

// Appends `text` as a section of the transcript; a header ("[stderr]",
// "Out[3]:") starts it unless the previous section had the same label
// (stdout needs none at the start).
struct Transcript {
  std::string text;
  std::string last_label;
  void Add(const std::string& label, const std::string& body) {
    if (body.empty()) return;
    if (label != last_label && !(text.empty() && label == "stdout")) {
      if (!text.empty() && text.back() != '\n') text += "\n";
      text += label.rfind("Out", 0) == 0 ? label + ":\n" : "[" + label + "]\n";
    }
    text += body;
    last_label = label;
  }
};

std::string StatusLine(const std::string& status, const json& result) {
  const std::string reason = StringOf(result, "reason");
  const auto with_reason = [&](std::string s) {
    return reason.empty() ? s : s + " (" + reason + ")";
  };
  if (status == "timeout") return with_reason("The cell was stopped: it ran past its time limit");
  if (status == "cpu_limit") return with_reason("The cell was stopped: it used up its CPU time");
  if (status == "memory_limit") return with_reason("The cell was stopped: it ran out of memory");
  if (status == "output_limit")
    return with_reason("The cell was stopped: it printed more than the output limit");
  if (status == "signaled") return with_reason("The interpreter was killed by a signal");
  if (status == "policy_violation") {
    std::string m = "The cell was refused by the sandbox's policy";
    if (const auto pv = result.find("policy_violation"); pv != result.end() && pv->is_object()) {
      const std::string message = StringOf(*pv, "message");
      if (!message.empty()) m += ": " + message;
    }
    return m;
  }
  if (status == "setup_error") {
    std::string m = "The sandbox could not be set up";
    if (const auto se = result.find("setup_error"); se != result.end() && se->is_object()) {
      const std::string message = StringOf(*se, "message");
      if (!message.empty()) m += ": " + message;
    }
    return m;
  }
  if (status == "cancelled") return "The cell was cancelled";
  if (status == "interrupted") return with_reason("The cell was interrupted (KeyboardInterrupt)");
  return with_reason("Status: " + status);
}

// The members of the run_python output schema, each with the JSON types it allows.
const std::vector<std::pair<std::string, std::vector<json::value_t>>>& RunSchemaTypes() {
  using t = json::value_t;
  static const std::vector<std::pair<std::string, std::vector<json::value_t>>> k = {
      {"status", {t::string}},
      {"stdout", {t::string}},
      {"stderr", {t::string}},
      {"outputs", {t::array}},
      {"error", {t::object, t::null}},
      {"execution_count", {t::number_integer, t::number_unsigned, t::null}},
      {"exit_code", {t::number_integer, t::number_unsigned, t::null}},
      {"duration_ms", {t::number_float, t::number_integer, t::number_unsigned, t::null}},
      {"session_state", {t::string}},
      {"images", {t::number_integer, t::number_unsigned}},
  };
  return k;
}

json RunOutputSchema() {
  return {
      {"type", "object"},
      {"properties",
       {{"status",
         {{"type", "string"},
          {"description",
           "ok, or why not: error (an exception or a non-zero exit), interrupted, timeout, "
           "cpu_limit, "
           "memory_limit, output_limit, signaled, policy_violation, setup_error, protocol_error, "
           "cancelled"}}},
        {"stdout", {{"type", "string"}}},
        {"stderr", {{"type", "string"}}},
        {"outputs",
         {{"type", "array"},
          {"items", {{"type", "object"}}},
          {"description",
           "nbformat v4 outputs in order (stream, display_data, execute_result, error); image/png "
           "data is "
           "not repeated here: each PNG is an image content block, in the same order"}}},
        {"error",
         {{"type", {"object", "null"}},
          {"description", "the exception: {name, value, traceback}, or null"}}},
        {"execution_count", {{"type", {"integer", "null"}}}},
        {"exit_code", {{"type", {"integer", "null"}}}},
        {"duration_ms", {{"type", {"number", "null"}}}},
        {"session_state",
         {{"type", "string"},
          {"description",
           "kept: the interpreter and its variables live on; lost: it was stopped and the next "
           "call "
           "starts a fresh one"}}},
        {"images",
         {{"type", "integer"}, {"description", "how many image content blocks this result has"}}}}},
      {"required", {"status", "stdout", "stderr", "outputs"}},
  };
}

json Annotations(std::string_view title, bool read_only, bool destructive, bool idempotent) {
  return {{"title", std::string(title)},
          {"readOnlyHint", read_only},
          {"destructiveHint", destructive},
          {"idempotentHint", idempotent},
          {"openWorldHint", false}};
}

}  // namespace

const std::vector<std::string>& SupportedProtocolVersions() {
  static const std::vector<std::string> k = {"2025-11-25", "2025-06-18", "2025-03-26",
                                             "2024-11-05"};
  return k;
}

bool IsSupportedProtocolVersion(std::string_view version) {
  const auto& v = SupportedProtocolVersions();
  return std::find(v.begin(), v.end(), version) != v.end();
}

std::string NegotiateProtocolVersion(std::string_view requested) {
  return IsSupportedProtocolVersion(requested) ? std::string(requested)
                                               : std::string(kLatestProtocolVersion);
}

std::string DefaultLimitsText() {
  return "Each call may run for 30 seconds by default (the timeout argument raises it, up to 300 "
         "s), with "
         "512 MiB of memory and 1 CPU; stdout and stderr are capped at 1 MiB each";
}

bool IsTool(std::string_view name) {
  return name == kRunPython || name == kUploadFile || name == kDownloadFile || name == kListFiles ||
         name == kReset;
}

json ToolDefinitions(std::string_view version, const std::string& limits_text) {
  const bool structured = AtLeast(version, "2025-06-18");
  const bool annotated = AtLeast(version, "2025-03-26");
  json tools = json::array();
  auto add = [&](std::string_view name, std::string_view title, std::string description, json input,
                 std::optional<json> output, json annotations) {
    json t = {{"name", std::string(name)},
              {"description", std::move(description)},
              {"inputSchema", std::move(input)}};
    if (structured) {
      t["title"] = std::string(title);
      if (output) t["outputSchema"] = std::move(*output);
    }
    if (annotated) t["annotations"] = std::move(annotations);
    tools.push_back(std::move(t));
  };
  const json no_args = {
      {"type", "object"}, {"properties", json::object()}, {"additionalProperties", false}};

  add(kRunPython, "Run Python",
      "Run Python 3.11 code in a persistent, sandboxed interpreter, like a Jupyter notebook cell. "
      "State persists: variables, imports, functions and files written to /workspace are still "
      "there in "
      "the next call (call reset for a fresh interpreter). Installed: the standard library, numpy, "
      "pandas, "
      "scipy, scikit-learn, sympy, matplotlib, pillow and openpyxl; nothing else can be installed "
      "(no pip) "
      "and there is no network access. The result has stdout, stderr, the value of the last "
      "expression "
      "(as a notebook shows it) and, when the code raises, a readable traceback. Every matplotlib "
      "figure "
      "that is shown or still open at the end of the call comes back as a PNG image (no need to "
      "save it). "
      "The working directory is /workspace; upload_file, download_file and list_files see the same "
      "files. " +
          limits_text +
          ". A call that goes over a limit is stopped and reported as an error; if "
          "the interpreter had to be killed, its state is lost and the result says so.",
      {{"type", "object"},
       {"properties",
        {{"code",
          {{"type", "string"},
           {"minLength", 1},
           {"description", "Python source to run. The value of its last expression is returned."}}},
         {"timeout",
          {{"type", "number"},
           {"exclusiveMinimum", 0},
           {"description", "Wall-clock limit for this call, in seconds (default 30)."}}}}},
       {"required", {"code"}},
       {"additionalProperties", false}},
      RunOutputSchema(), Annotations("Run Python", false, false, false));

  add(kUploadFile, "Upload a file",
      "Write a file into the interpreter's /workspace (creating directories on the way; an "
      "existing file "
      "is replaced), so that code run with run_python can read it, e.g. pd.read_csv(\"data.csv\"). "
      "The "
      "content is base64-encoded bytes. Files live as long as the interpreter: reset removes them.",
      {{"type", "object"},
       {"properties",
        {{"path",
          {{"type", "string"},
           {"minLength", 1},
           {"description",
            "Path relative to /workspace, e.g. \"data.csv\" or \"inputs/a.json\"."}}},
         {"content_base64",
          {{"type", "string"}, {"description", "The file's bytes, base64-encoded."}}}}},
       {"required", {"path", "content_base64"}},
       {"additionalProperties", false}},
      json{{"type", "object"},
           {"properties", {{"path", {{"type", "string"}}}, {"size", {{"type", "integer"}}}}},
           {"required", {"path", "size"}}},
      Annotations("Upload a file", false, false, true));

  add(kDownloadFile, "Download a file",
      "Read a file from the interpreter's /workspace, e.g. one that code run with run_python "
      "wrote. Text "
      "(UTF-8) comes back as text, images (PNG, JPEG, GIF, WebP) as images, anything else "
      "base64-encoded. "
      "At most 32 MiB.",
      {{"type", "object"},
       {"properties",
        {{"path",
          {{"type", "string"},
           {"minLength", 1},
           {"description", "Path relative to /workspace, e.g. \"results/summary.csv\"."}}}}},
       {"required", {"path"}},
       {"additionalProperties", false}},
      json{{"type", "object"},
           {"properties",
            {{"path", {{"type", "string"}}},
             {"size", {{"type", "integer"}}},
             {"encoding", {{"type", "string"}, {"enum", {"utf-8", "base64"}}}},
             {"content", {{"type", "string"}}}}},
           {"required", {"path", "size", "encoding", "content"}}},
      Annotations("Download a file", true, false, true));

  add(kListFiles, "List files",
      "List the files and directories in the interpreter's /workspace (recursively), with their "
      "sizes in "
      "bytes.",
      no_args,
      json{{"type", "object"},
           {"properties",
            {{"files",
              {{"type", "array"},
               {"items",
                {{"type", "object"},
                 {"properties",
                  {{"path", {{"type", "string"}}},
                   {"size", {{"type", "integer"}}},
                   {"directory", {{"type", "boolean"}}}}},
                 {"required", {"path"}}}}}}}},
           {"required", {"files"}}},
      Annotations("List files", true, false, true));

  add(kReset, "Reset the interpreter",
      "Throw away the interpreter and start a fresh one: every variable, import and /workspace "
      "file is "
      "gone. Use it when the state is broken or to start over.",
      no_args, std::nullopt, Annotations("Reset the interpreter", false, true, true));
  return tools;
}

Result<RunArgs> ParseRunArgs(const json& args) {
  KILN_TRY(NoUnknownArgs(kRunPython, args, {"code", "timeout"}));
  RunArgs out;
  KILN_ASSIGN_OR_RETURN(out.code,
                        RequiredString(args, "code", "the Python source to run", kMaxCodeBytes));
  if (out.code.empty()) return InvalidArgument("code: must not be empty");
  if (const auto t = args.find("timeout"); t != args.end() && !t->is_null()) {
    if (!t->is_number())
      return InvalidArgument("timeout: must be a number of seconds, not " + Describe(*t));
    const double v = t->get<double>();
    if (!std::isfinite(v) || v <= 0)
      return InvalidArgument("timeout: must be a positive number of seconds");
    out.timeout_s = v;
  }
  return out;
}

Result<UploadArgs> ParseUploadArgs(const json& args) {
  KILN_TRY(NoUnknownArgs(kUploadFile, args, {"path", "content_base64"}));
  UploadArgs out;
  KILN_ASSIGN_OR_RETURN(out.path, PathArg(args));
  KILN_ASSIGN_OR_RETURN(std::string encoded,
                        RequiredString(args, "content_base64", "the file's bytes, base64-encoded",
                                       kMaxUploadBytes / 3 * 4 + 4));
  auto bytes = Base64Decode(encoded);
  if (!bytes.ok())
    return InvalidArgument("content_base64: not valid base64 (" + bytes.error().message + ")");
  out.bytes = std::move(*bytes);
  return out;
}

Result<std::string> ParsePathArgs(const json& args) {
  KILN_TRY(NoUnknownArgs(kDownloadFile, args, {"path"}));
  return PathArg(args);
}

Status ParseNoArgs(std::string_view tool, const json& args) {
  return NoUnknownArgs(tool, args, {});
}

json ToolError(std::string_view text) {
  return {{"content", json::array({TextBlock(std::string(text))})}, {"isError", true}};
}

json RunPythonResult(const json& result, const std::string& note, bool structured) {
  const json empty_object = json::object();
  const json& r = result.is_object() ? result : empty_object;
  const std::string status =
      StringOf(r, "status").empty() ? "protocol_error" : StringOf(r, "status");
  json content = json::array();
  json images = json::array();
  Transcript t;
  json outputs = json::array();
  const auto outs = r.find("outputs");
  const bool has_outputs = outs != r.end() && outs->is_array();
  bool streams_in_outputs = false;
  if (has_outputs) {
    for (const auto& o : *outs) {
      if (o.is_object() && StringOf(o, "output_type") == "stream") streams_in_outputs = true;
    }
  }
  if (!streams_in_outputs) {
    t.Add("stdout", StringOf(r, "stdout"));
    t.Add("stderr", StringOf(r, "stderr"));
  }
  bool error_shown = false;
  if (has_outputs) {
    for (const auto& o : *outs) {
      if (!o.is_object()) continue;
      json copy = o;
      const std::string type = StringOf(o, "output_type");
      if (type == "stream") {
        const std::string name = StringOf(o, "name") == "stderr" ? "stderr" : "stdout";
        t.Add(name, StreamText(o));
      } else if (type == "display_data" || type == "execute_result") {
        const auto data = o.find("data");
        bool image = false;
        if (data != o.end() && data->is_object()) {
          if (const auto png = data->find("image/png"); png != data->end() && png->is_string()) {
            std::string b64 = png->get<std::string>();
            b64.erase(std::remove_if(b64.begin(), b64.end(),
                                     [](char c) { return c == '\n' || c == '\r'; }),
                      b64.end());
            images.push_back(
                {{"type", "image"}, {"data", std::move(b64)}, {"mimeType", "image/png"}});
            copy["data"].erase("image/png");
            image = true;
          }
          if (!image) {
            std::string text = PlainText(*data);
            if (!text.empty() && text.back() != '\n') text += "\n";
            if (type == "execute_result") {
              const auto n = o.find("execution_count");
              const std::string label = n != o.end() && n->is_number_integer()
                                            ? "Out[" + std::to_string(n->get<int64_t>()) + "]"
                                            : "Out";
              t.Add(label, text);
            } else {
              t.Add("display", text);
            }
          }
        }
      } else if (type == "error") {
        t.Add("error", TracebackText(o) + "\n");
        error_shown = true;
      }
      outputs.push_back(std::move(copy));
    }
  }
  if (!error_shown) {
    if (const auto e = r.find("error"); e != r.end() && e->is_object())
      t.Add("error", TracebackText(*e) + "\n");
  }
  if (BoolOf(r, "stdout_truncated")) t.Add("kiln", "(stdout was truncated at the output limit)\n");
  if (BoolOf(r, "stderr_truncated")) t.Add("kiln", "(stderr was truncated at the output limit)\n");
  if (const auto d = r.find("outputs_dropped");
      d != r.end() && d->is_number_integer() && d->get<int64_t>() > 0) {
    t.Add("kiln", "(" + std::to_string(d->get<int64_t>()) +
                      " image(s) over the size limits were dropped)\n");
  }
  // An exception's traceback says it all; other statuses get a line.
  const bool exception =
      status == "error" && (error_shown || (r.contains("error") && r["error"].is_object()));
  if (status != "ok" && !exception) {
    if (status == "error") {
      const auto ec = r.find("exit_code");
      t.Add("kiln", ec != r.end() && ec->is_number_integer()
                        ? "The code exited with status " + std::to_string(ec->get<int64_t>()) + "\n"
                        : StatusLine(status, r) + "\n");
    } else {
      t.Add("kiln", StatusLine(status, r) + "\n");
    }
  }
  const bool lost = StringOf(r, "session_state") == "lost";
  if (lost) {
    t.Add("kiln",
          "The interpreter was stopped, so its state (variables, imports, /workspace files) is "
          "lost; the "
          "next call starts a fresh interpreter.\n");
  }
  if (!images.empty()) {
    t.Add("kiln", std::to_string(images.size()) + " image(s) attached below.\n");
  }
  std::string text = t.text.empty() ? "(no output)" : t.text;
  if (!note.empty()) text = note + "\n\n" + text;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  content.push_back(TextBlock(Bounded(std::move(text))));
  for (auto& image : images) content.push_back(std::move(image));
  json out = {{"content", std::move(content)}, {"isError", status != "ok"}};
  if (structured) {
    json s = json::object();
    for (const auto& [key, value] : r.items()) s[key] = value;
    s["outputs"] = std::move(outputs);
    s["status"] = status;
    s["images"] = static_cast<int64_t>(out["content"].size()) - 1;
    for (const char* key : {"stdout", "stderr"}) {
      if (!s.contains(key) || !s[key].is_string()) s[key] = "";
    }
    // Members the schema types, with another type (a newer server?), are
    // dropped rather than sent against the schema.
    for (const auto& [key, types] : RunSchemaTypes()) {
      if (s.contains(key) && std::find(types.begin(), types.end(), s[key].type()) == types.end())
        s.erase(key);
    }
    out["structuredContent"] = std::move(s);
  }
  return out;
}

json UploadResult(const std::string& path, uint64_t size, bool structured) {
  json out = {{"content", json::array({TextBlock("Wrote /workspace/" + path + " (" +
                                                 std::to_string(size) + " bytes).")})},
              {"isError", false}};
  if (structured) out["structuredContent"] = {{"path", path}, {"size", size}};
  return out;
}

json DownloadResult(const std::string& path, const std::string& bytes, bool structured) {
  if (bytes.size() > kMaxDownloadBytes) {
    return ToolError("path: /workspace/" + path + " is " + std::to_string(bytes.size()) +
                     " bytes, over the download limit of " + std::to_string(kMaxDownloadBytes) +
                     " bytes; read or summarize it with run_python instead");
  }
  json content = json::array();
  const std::string image = ImageType(bytes);
  const bool text = image.empty() && IsText(bytes);
  const std::string b64 = text ? std::string() : Base64Encode(bytes);
  const std::string head = "/workspace/" + path + " (" + std::to_string(bytes.size()) + " bytes";
  if (text) {
    content.push_back(TextBlock(Bounded(bytes)));
  } else if (!image.empty()) {
    content.push_back(TextBlock(head + ", " + image + ")"));
    content.push_back({{"type", "image"}, {"data", b64}, {"mimeType", image}});
  } else if (structured) {
    content.push_back(
        TextBlock(head + " of binary data; base64 in the structured result's content)"));
  } else {
    content.push_back(TextBlock(head + " of binary data, base64):\n" + b64));
  }
  json out = {{"content", std::move(content)}, {"isError", false}};
  if (structured) {
    out["structuredContent"] = {{"path", path},
                                {"size", bytes.size()},
                                {"encoding", text ? "utf-8" : "base64"},
                                {"content", text ? bytes : b64}};
  }
  return out;
}

json ListFilesResult(const json& listing, bool structured) {
  json files = json::array();
  std::string text;
  if (const auto f = listing.find("files");
      listing.is_object() && f != listing.end() && f->is_array()) {
    for (const auto& e : *f) {
      if (!e.is_object() || !e.contains("path") || !e["path"].is_string()) continue;
      json entry = {{"path", e["path"]}};
      const bool dir = BoolOf(e, "directory");
      entry["directory"] = dir;
      const auto size = e.find("size");
      if (size != e.end() && size->is_number_integer()) entry["size"] = *size;
      text += e["path"].get<std::string>() + (dir ? "/" : "");
      if (!dir && entry.contains("size"))
        text += "  " + std::to_string(entry["size"].get<int64_t>()) + " bytes";
      text += "\n";
      files.push_back(std::move(entry));
    }
  }
  if (text.empty()) text = "/workspace is empty.";
  while (!text.empty() && text.back() == '\n') text.pop_back();
  json out = {{"content", json::array({TextBlock(Bounded(std::move(text)))})}, {"isError", false}};
  if (structured) out["structuredContent"] = {{"files", std::move(files)}};
  return out;
}

json ResetResult() {
  return {{"content", json::array({TextBlock(
                          "The interpreter was reset: a fresh one starts with the next call; "
                          "every variable, import and /workspace file of the old one is gone.")})},
          {"isError", false}};
}

}  // namespace kiln::mcp
