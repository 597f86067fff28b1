// Integration: the in-sandbox runtime through `kiln run --json` (issue: the
// runtime, notebook-style results, import policy, profiles). Each test
// asserts the shared result shape: status, outputs (nbformat v4), error.
#include <gtest/gtest.h>

#include <fstream>

#include "testlib/host_facts.h"
#include "testlib/kiln_runner.h"

namespace kiln::testing {
namespace {

class RuntimeTest : public SandboxTest {};

const nlohmann::json* FindOutput(const JsonRun& r, const std::string& type) {
  for (const auto& o : r.j["outputs"]) {
    if (o["output_type"] == type) return &o;
  }
  return nullptr;
}

int CountOutputs(const JsonRun& r, const std::string& type) {
  int n = 0;
  for (const auto& o : r.j["outputs"]) n += o["output_type"] == type;
  return n;
}

// Width and height from a PNG's IHDR chunk.
std::pair<int, int> PngSize(const std::string& png) {
  auto be32 = [&](size_t at) {
    return (static_cast<unsigned char>(png[at]) << 24) |
           (static_cast<unsigned char>(png[at + 1]) << 16) |
           (static_cast<unsigned char>(png[at + 2]) << 8) | static_cast<unsigned char>(png[at + 3]);
  };
  if (png.size() < 24 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return {-1, -1};
  return {static_cast<int>(be32(16)), static_cast<int>(be32(20))};
}

std::string DecodeBase64(const std::string& in) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -8;
  for (char c : in) {
    const auto pos = kAlphabet.find(c);
    if (pos == std::string::npos) continue;
    val = (val << 6) + static_cast<int>(pos);
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((val >> bits) & 0xff));
      bits -= 8;
    }
  }
  return out;
}

TEST_F(RuntimeTest, LastExpressionIsTheExecuteResult) {
  JsonRun r = RunPython("x = 6\nx * 7\n");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  const nlohmann::json* res = FindOutput(r, "execute_result");
  ASSERT_NE(res, nullptr) << r.Describe();
  EXPECT_EQ((*res)["data"]["text/plain"], "42");
  EXPECT_EQ((*res)["execution_count"], 1);
  EXPECT_EQ(r.j["execution_count"], 1);
  EXPECT_EQ(r.out(), "") << "the value is a result, not stdout";
}

TEST_F(RuntimeTest, TrailingSemicolonAndNoneShowNothing) {
  JsonRun semi = RunPython("x = 6\nx * 7;\n");
  ASSERT_EQ(semi.status(), "ok") << semi.Describe();
  EXPECT_EQ(CountOutputs(semi, "execute_result"), 0) << semi.Describe();
  JsonRun none = RunPython("print('p')\nNone\n");
  ASSERT_EQ(none.status(), "ok") << none.Describe();
  EXPECT_EQ(CountOutputs(none, "execute_result"), 0) << none.Describe();
  EXPECT_EQ(none.out(), "p\n");
}

TEST_F(RuntimeTest, StreamsAndResultsKeepTheirOrder) {
  JsonRun r = RunPython("import sys\nprint('a')\nsys.stderr.write('b\\n')\nprint('c')\n'd'\n");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  std::vector<std::string> seen;
  for (const auto& o : r.j["outputs"]) {
    if (o["output_type"] == "stream") {
      seen.push_back(o["name"].get<std::string>() + ":" + o["text"].get<std::string>());
    } else {
      seen.push_back(o["output_type"].get<std::string>());
    }
  }
  EXPECT_EQ(seen,
            (std::vector<std::string>{"stdout:a\n", "stderr:b\n", "stdout:c\n", "execute_result"}))
      << r.Describe();
}

TEST_F(RuntimeTest, DataFrameHasHtml) {
  KILN_REQUIRE_PYTHON_MODULES("pandas");
  JsonRun r = RunPython("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})\n");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  const nlohmann::json* res = FindOutput(r, "execute_result");
  ASSERT_NE(res, nullptr) << r.Describe();
  ASSERT_TRUE((*res)["data"].contains("text/html")) << r.Describe();
  EXPECT_NE((*res)["data"]["text/html"].get<std::string>().find("<table"), std::string::npos);
  EXPECT_NE((*res)["data"]["text/plain"].get<std::string>().find("a  b"), std::string::npos);
}

TEST_F(RuntimeTest, MatplotlibFigureComesBackAsPngOfItsSize) {
  KILN_REQUIRE_PYTHON_MODULES("matplotlib");
  JsonRun r = RunPython(
      "import matplotlib.pyplot as plt\n"
      "fig = plt.figure(figsize=(4, 3), dpi=100)\n"
      "plt.plot([1, 2, 3], [1, 4, 9])\n");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  const nlohmann::json* d = FindOutput(r, "display_data");
  ASSERT_NE(d, nullptr) << r.Describe();
  ASSERT_TRUE((*d)["data"].contains("image/png"));
  const auto [w, h] = PngSize(DecodeBase64((*d)["data"]["image/png"].get<std::string>()));
  EXPECT_EQ(w, 400);
  EXPECT_EQ(h, 300);
}

TEST_F(RuntimeTest, PltShowEmitsAndClosesTheFigure) {
  KILN_REQUIRE_PYTHON_MODULES("matplotlib");
  JsonRun r = RunPython(
      "import matplotlib.pyplot as plt\n"
      "plt.plot([1, 2])\nplt.show()\nprint(len(plt.get_fignums()))\n");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(CountOutputs(r, "display_data"), 1) << r.Describe();
  EXPECT_EQ(r.out(), "0\n") << "show() closes what it showed";
}

TEST_F(RuntimeTest, ImageCapsDropAndFlag) {
  KILN_REQUIRE_PYTHON_MODULES("matplotlib");
  JsonRun r = RunPython(
      "import matplotlib.pyplot as plt\n"
      "for i in range(20):\n    plt.figure(); plt.plot([i])\n",
      {"--config", SourceDir() + "/tests/probes/display_limits.toml", "--profile", "fewimages"});
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(CountOutputs(r, "display_data"), 3) << r.Describe();
  EXPECT_EQ(r.j["outputs_dropped"], 17) << r.Describe();
}

TEST_F(RuntimeTest, TracebackStartsAtTheUsersLine) {
  JsonRun r = RunPython("a = 1\n\ndef f():\n    return 1 / 0\n\nf()\n");
  ASSERT_EQ(r.status(), "error") << r.Describe();
  EXPECT_EQ(r.j["exit_code"], 1);
  ASSERT_TRUE(r.j["error"].is_object()) << r.Describe();
  EXPECT_EQ(r.j["error"]["name"], "ZeroDivisionError");
  EXPECT_EQ(r.j["error"]["value"], "division by zero");
  std::string tb;
  for (const auto& line : r.j["error"]["traceback"]) tb += line.get<std::string>();
  EXPECT_NE(tb.find("line 6"), std::string::npos) << tb;
  EXPECT_NE(tb.find("line 4"), std::string::npos) << tb;
  EXPECT_NE(tb.find("return 1 / 0"), std::string::npos) << "the cell's own source lines: " << tb;
  EXPECT_EQ(tb.find("kiln_runtime"), std::string::npos) << "no runtime frames: " << tb;
  EXPECT_EQ(tb.find("launch.py"), std::string::npos) << "no runtime frames: " << tb;
}

TEST_F(RuntimeTest, SyntaxErrorRunsNothing) {
  JsonRun r = RunPython("print('ran')\nx = (\n");
  ASSERT_EQ(r.status(), "error") << r.Describe();
  EXPECT_EQ(r.j["error"]["name"], "SyntaxError") << r.Describe();
  EXPECT_EQ(r.out(), "") << "nothing of the cell ran";
}

TEST_F(RuntimeTest, SystemExitCodeIsTheExitCode) {
  JsonRun r = RunPython("import sys\nsys.exit(3)\n");
  EXPECT_EQ(r.status(), "error") << r.Describe();
  EXPECT_EQ(r.j["exit_code"], 3);
  JsonRun z = RunPython("raise SystemExit(0)\n");
  EXPECT_EQ(z.status(), "ok") << z.Describe();
}

// --- Import policy under the shipped `strict` profile.

struct PolicyCase {
  const char* name;
  const char* code;
  const char* module;
  int line;
};

class StrictPolicyTest : public SandboxTest, public ::testing::WithParamInterface<PolicyCase> {};

TEST_P(StrictPolicyTest, IsRefusedNamingModuleAndLine) {
  const PolicyCase& c = GetParam();
  JsonRun r = RunPython(c.code, {"--profile", "strict"});
  ASSERT_EQ(r.status(), "policy_violation") << r.Describe();
  ASSERT_TRUE(r.j.contains("policy_violation")) << r.Describe();
  EXPECT_EQ(r.j["policy_violation"]["module"], c.module) << r.Describe();
  EXPECT_EQ(r.j["policy_violation"]["line"], c.line) << r.Describe();
  EXPECT_EQ(r.j["signal"], nullptr) << "refused by the runtime, not killed";
}

INSTANTIATE_TEST_SUITE_P(
    Imports, StrictPolicyTest,
    ::testing::Values(PolicyCase{"direct", "print('ran')\nimport os\n", "os", 2},
                      PolicyCase{"aliased", "import subprocess as sp\n", "subprocess", 1},
                      PolicyCase{"from", "x = 1\nfrom os import path\n", "os", 2},
                      PolicyCase{"dotted", "import os.path\n", "os.path", 1},
                      PolicyCase{"from_dotted", "from os.path import join\n", "os.path", 1},
                      PolicyCase{"literal_dunder", "__import__('socket')\n", "socket", 1},
                      PolicyCase{"dynamic", "m = 'o' + 's'\nmod = __import__(m)\n", "os", 2}),
    [](const ::testing::TestParamInfo<PolicyCase>& param_info) {
      return std::string(param_info.param.name);
    });

TEST_F(RuntimeTest, StaticViolationRunsNothingOfTheCell) {
  JsonRun r = RunPython("print('ran')\nimport os\n", {"--profile", "strict"});
  ASSERT_EQ(r.status(), "policy_violation") << r.Describe();
  EXPECT_EQ(r.out(), "") << "a static violation stops the whole cell before it runs";
}

TEST_F(RuntimeTest, AllowedLibraryMayImportDeniedModulesInternally) {
  KILN_REQUIRE_PYTHON_MODULES("pandas");
  // pandas and json import os and sys themselves; only the user's imports are checked.
  JsonRun r =
      RunPython("import json, pandas as pd\nprint(json.dumps(int(pd.Series([1, 2]).sum())))\n",
                {"--profile", "strict"});
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(), "3\n");
}

TEST_F(RuntimeTest, OpenProfileAllowsEverything) {
  JsonRun r = RunPython("import os, sys, subprocess\nprint('ok')\n");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
}

// --- The supervisor survives a hostile runtime: the program runs in the same
// process as the runtime and can write anything to the channel (fd 3).

TEST_F(RuntimeTest, OversizedFrameIsAProtocolError) {
  JsonRun r =
      RunPython("import os\nos.write(3, b'\\xff\\xff\\xff\\xff')\nimport time\ntime.sleep(30)\n",
                {"--timeout", "20"});
  EXPECT_EQ(r.status(), "protocol_error") << r.Describe();
  EXPECT_NE(r.j["reason"].get<std::string>().find("oversized"), std::string::npos) << r.Describe();
  EXPECT_LT(r.raw.elapsed_ms, 10000) << "killed at once, not at the timeout";
}

TEST_F(RuntimeTest, TruncatedFrameIsAProtocolError) {
  JsonRun r = RunPython("import os\nos.write(3, b'\\x00\\x00\\x00\\x10{\"type\"')\nos._exit(0)\n");
  EXPECT_EQ(r.status(), "protocol_error") << r.Describe();
  EXPECT_NE(r.j["reason"].get<std::string>().find("truncated"), std::string::npos) << r.Describe();
}

TEST_F(RuntimeTest, GarbageFrameIsAProtocolError) {
  JsonRun r =
      RunPython("import os\nos.write(3, b'\\x00\\x00\\x00\\x03abc')\nimport time\ntime.sleep(30)\n",
                {"--timeout", "20"});
  EXPECT_EQ(r.status(), "protocol_error") << r.Describe();
  EXPECT_NE(r.j["reason"].get<std::string>().find("malformed"), std::string::npos) << r.Describe();
}

TEST_F(RuntimeTest, ForgedFrameOfUnknownTypeIsAProtocolError) {
  JsonRun r = RunPython(
      "import os, json, struct\n"
      "m = json.dumps({'type': 'become_root', 'cell': 1}).encode()\n"
      "os.write(3, struct.pack('>I', len(m)) + m)\nimport time\ntime.sleep(30)\n",
      {"--timeout", "20"});
  EXPECT_EQ(r.status(), "protocol_error") << r.Describe();
  EXPECT_NE(r.j["reason"].get<std::string>().find("become_root"), std::string::npos)
      << r.Describe();
}

// A display_data frame whose metadata nests 60,000 deep (360 KB) made `kiln
// run` exit 139: the supervisor recursed once per level. It is refused
// unparsed, as a protocol error, and the supervisor lives to say so.
TEST_F(RuntimeTest, DeeplyNestedFrameIsAProtocolErrorNotACrash) {
  JsonRun r = RunPython(
      "import os, struct\n"
      "m = (b'{\"type\": \"display_data\", \"cell\": 1, \"data\": {\"text/plain\": \"x\"}, "
      "\"metadata\": '\n"
      "     + b'[' * 60000 + b']' * 60000 + b'}')\n"
      "os.write(3, struct.pack('>I', len(m)) + m)\nimport time\ntime.sleep(30)\n",
      {"--timeout", "20"});
  EXPECT_EQ(r.raw.term_signal, 0) << r.Describe();
  EXPECT_EQ(r.status(), "protocol_error") << r.Describe();
  EXPECT_NE(r.j.value("reason", "").find("deeper than 64"), std::string::npos) << r.Describe();
  EXPECT_LT(r.raw.elapsed_ms, 15000);
}

TEST_F(RuntimeTest, FrameFloodEndsAsOutputLimit) {
  JsonRun r = RunPython(
      "import os, json, struct\n"
      "m = json.dumps({'type': 'display_data', 'cell': 1, 'data': {'text/plain': 'x'}}).encode()\n"
      "f = struct.pack('>I', len(m)) + m\n"
      "while True:\n    os.write(3, f * 100)\n",
      {"--timeout", "20"});
  EXPECT_EQ(r.status(), "output_limit") << r.Describe();
  EXPECT_TRUE(r.j["outputs_truncated"].get<bool>()) << r.Describe();
  EXPECT_LT(r.raw.elapsed_ms, 15000);
}

TEST_F(RuntimeTest, RuntimeThatNeverAnswersEndsAtTheTimeout) {
  JsonRun r = RunPython("import os, time\nos.close(3)\ntime.sleep(60)\n", {"--timeout", "2"});
  EXPECT_EQ(r.status(), "timeout") << r.Describe();
  EXPECT_LT(r.raw.elapsed_ms, 10000);
}

// --- Profiles.

TEST_F(RuntimeTest, ProfileMaximumsAreEnforced) {
  ProcessResult p = RunKiln({"run", "--profile", "strict", "--memory", "8g", "-c", "print(1)"});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_NE(p.err.find("--memory: 8 GiB is over the profile's maximum of 2 GiB"), std::string::npos)
      << p.err;
  EXPECT_EQ(p.out, "") << "nothing ran";
}

TEST_F(RuntimeTest, ConfigErrorsNameTheKey) {
  TempDir dir;
  const std::string path = dir.path() + "/bad.toml";
  std::ofstream(path) << "[profiles.x]\ninterpreter = \"/usr/bin/python3\"\nmemroy = \"1g\"\n";
  ProcessResult p = RunKiln({"run", "--config", path, "--profile", "x", "-c", "print(1)"});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_NE(p.err.find("profiles.x.memroy"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find(":3:"), std::string::npos) << "names the line: " << p.err;
}

TEST_F(RuntimeTest, PlainModePrintsTheLastValueAndTraceback) {
  ProcessResult ok = RunKiln({"run", "-c", "print('out')\n6 * 7\n"});
  EXPECT_EQ(ok.exit_code, 0);
  EXPECT_EQ(ok.out, "out\n42\n");
  ProcessResult bad = RunKiln({"run", "-c", "x = 1\nx / 0\n"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("ZeroDivisionError: division by zero"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("line 2"), std::string::npos) << bad.err;
}

TEST_F(RuntimeTest, PlainModeWritesImagesToTheCollectDirectory) {
  KILN_REQUIRE_PYTHON_MODULES("matplotlib");
  TempDir dir;
  ProcessResult p = RunKiln({"run", "--collect", dir.path(), "-c",
                             "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  std::ifstream png(dir.path() + "/output-1.png", std::ios::binary);
  ASSERT_TRUE(png.good()) << p.err;
  std::string head(8, '\0');
  png.read(head.data(), 8);
  EXPECT_EQ(head, std::string("\x89PNG\r\n\x1a\n", 8));
}

}  // namespace
}  // namespace kiln::testing
