#include "server/request.h"

#include <gtest/gtest.h>

namespace kiln::server {
namespace {

std::optional<FieldError> V1(const std::string& body, V1Request* out = nullptr) {
  V1Request tmp;
  return ParseV1Execute(body, "default", out ? out : &tmp);
}

TEST(V1Execute, ParsesEveryField) {
  V1Request r;
  auto e = V1(R"J({"code":"print(1)","timeout":2.5,"memory":"256m","cpus":0.5,"profile":"strict",
                 "files":[{"path":"data/a.txt","content":"hi"},{"path":"b.bin","content_base64":"AAEC"}],
                 "return_files":["*.png"],"env":{"MY_VAR":"x"}})J",
              &r);
  ASSERT_FALSE(e.has_value()) << e->field << ": " << e->message;
  EXPECT_EQ(r.exec.code, "print(1)");
  EXPECT_DOUBLE_EQ(*r.exec.limits.timeout_s, 2.5);
  EXPECT_EQ(*r.exec.limits.memory_bytes, 256u << 20);
  EXPECT_DOUBLE_EQ(*r.exec.limits.cpus, 0.5);
  EXPECT_EQ(r.exec.profile, "strict");
  ASSERT_EQ(r.exec.files.size(), 2u);
  EXPECT_EQ(r.exec.files[1].second, std::string("\0\1\2", 3));
  EXPECT_TRUE(r.return_files);
  EXPECT_EQ((*r.exec.return_files)[0], "*.png");
  ASSERT_EQ(r.exec.env.size(), 1u);
  V1Request d;
  ASSERT_FALSE(V1(R"J({"code":"1"})J", &d).has_value());
  EXPECT_EQ(d.exec.profile, "default");
  EXPECT_FALSE(d.exec.return_files.has_value());
}

// nlohmann stops at a NUL byte; what follows one would go unread.
TEST(V1Execute, ANulByteIsInvalidJson) {
  V1Request d;
  const std::string body("{\"code\":\"1\"}\0{\"x\":1}", 20);
  const auto e = ParseV1Execute(body, "default", &d);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, "invalid_json");
}

TEST(V1Execute, ErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* field;
    const char* code;
  } cases[] = {
      {"not json", "", "invalid_json"},
      {"[1]", "", "invalid_json"},
      {"{\"code\":\"1\",\"env\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
       "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
       "", "invalid_json"},
      {"{}", "code", "missing_field"},
      {R"J({"code":3})J", "code", "invalid_type"},
      {R"J({"code":""})J", "code", "invalid_value"},
      {R"J({"code":"1","timeout":"soon"})J", "timeout", "invalid_type"},
      {R"J({"code":"1","timeout":-1})J", "timeout", "invalid_value"},
      {R"J({"code":"1","memory":"12parsecs"})J", "memory", "invalid_value"},
      {R"J({"code":"1","cpus":"two"})J", "cpus", "invalid_type"},
      {R"J({"code":"1","files":{}})J", "files", "invalid_type"},
      {R"J({"code":"1","files":[{"path":"../etc/passwd","content":"x"}]})J", "files[0].path",
       "invalid_value"},
      {R"J({"code":"1","files":[{"path":"/abs","content":"x"}]})J", "files[0].path",
       "invalid_value"},
      {R"J({"code":"1","files":[{"path":"a\u0000b","content":"x"}]})J", "files[0].path",
       "invalid_value"},
      {R"J({"code":"1","files":[{"path":"a","content":"x","content_base64":"eA=="}]})J", "files[0]",
       "invalid_value"},
      {R"J({"code":"1","files":[{"path":"a","content_base64":"!!"}]})J", "files[0].content_base64",
       "invalid_value"},
      {R"J({"code":"1","return_files":"yes"})J", "return_files", "invalid_type"},
      {R"J({"code":"1","env":{"LD_PRELOAD":"x"}})J", "env.LD_PRELOAD", "invalid_value"},
      {R"J({"code":"1","env":{"A":1}})J", "env.A", "invalid_type"},
      {R"J({"code":"1","colour":"blue"})J", "colour", "unknown_field"},
  };
  for (const auto& c : cases) {
    auto e = V1(c.body);
    ASSERT_TRUE(e.has_value()) << c.body;
    EXPECT_EQ(e->field, c.field) << c.body;
    EXPECT_EQ(e->code, c.code) << c.body;
  }
  // nlohmann stops reading at a NUL byte; the body is refused whole, not read up to it.
  auto nul = V1(std::string("{\"code\":\"1\"}") + '\0' + "{\"code\":\"2\"}");
  ASSERT_TRUE(nul.has_value());
  EXPECT_EQ(nul->code, "invalid_json");
  const std::string long_path =
      R"J({"code":"1","files":[{"path":")J" + std::string(4096, 'a') + R"J(","content":"x"}]})J";
  auto e = V1(long_path);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->field, "files[0].path");
}

TEST(ReferenceExecute, DefaultsAndContract) {
  ReferenceRequest r;
  auto e = ParseReferenceExecute(R"J({"code":"print(1)"})J", "default", &r);
  ASSERT_FALSE(e.has_value());
  EXPECT_DOUBLE_EQ(r.timeout_s, 30);
  EXPECT_EQ(*r.exec.limits.memory_bytes, 1ULL << 30);
  EXPECT_DOUBLE_EQ(*r.exec.limits.cpus, 1.0);
  EXPECT_FALSE(r.return_output_files);
  ReferenceRequest f;
  ASSERT_FALSE(
      ParseReferenceExecute(
          R"J({"code":"x","timeout":5,"mem_limit":"512m","cpu_limit":0.5,"input_files":{"a.txt":"hi"},"return_output_files":true,"extra":1})J",
          "default", &f)
          .has_value());
  EXPECT_EQ(*f.exec.limits.memory_bytes, 512u << 20);
  EXPECT_TRUE(f.exec.return_files.has_value());
  ASSERT_EQ(f.exec.files.size(), 1u);
}

TEST(ReferenceExecute, ValidationErrorsAre422Shaped) {
  struct Case {
    const char* body;
    const char* field;
  } cases[] = {
      {R"J({})J", "code"},
      {R"J({"code":""})J", "code"},
      {R"J({"code":"1","timeout":0})J", "timeout"},
      {R"J({"code":"1","timeout":301})J", "timeout"},
      {R"J({"code":"1","mem_limit":"lots"})J", "mem_limit"},
      {R"J({"code":"1","cpu_limit":9})J", "cpu_limit"},
      {R"J({"code":"1","cpu_limit":0.05})J", "cpu_limit"},
      {R"J({"code":"1","input_files":{"../x":"y"}})J", "input_files"},
      {R"J({"code":"1","return_output_files":"no"})J", "return_output_files"},
  };
  for (const auto& c : cases) {
    ReferenceRequest r;
    auto e = ParseReferenceExecute(c.body, "default", &r);
    ASSERT_TRUE(e.has_value()) << c.body;
    EXPECT_EQ(e->field, c.field) << c.body;
    auto body = ReferenceValidationBody(*e);
    EXPECT_EQ(body["detail"][0]["loc"][1], c.field);
  }
  ReferenceRequest big;
  EXPECT_TRUE(ParseReferenceExecute(R"J({"code":")J" + std::string(100001, 'x') + R"J("})J",
                                    "default", &big)
                  .has_value());
}

TEST(SessionCreate, ParsesEveryFieldAndAcceptsAnEmptyBody) {
  sessions::SessionOptions o;
  EXPECT_FALSE(ParseSessionCreate("", &o).has_value());
  EXPECT_FALSE(ParseSessionCreate("  \n", &o).has_value());
  EXPECT_TRUE(o.profile.empty());
  sessions::SessionOptions full;
  auto e = ParseSessionCreate(
      R"J({"profile":"strict","memory":"64m","cpus":0.5,"timeout":5,"idle_ttl":60,"max_lifetime":600,
          "env":{"MY_VAR":"x","OTHER":""}})J",
      &full);
  ASSERT_FALSE(e.has_value()) << e->message;
  EXPECT_EQ(full.profile, "strict");
  EXPECT_EQ(*full.limits.memory_bytes, 64ULL << 20);
  EXPECT_DOUBLE_EQ(*full.limits.cpus, 0.5);
  EXPECT_DOUBLE_EQ(*full.limits.timeout_s, 5);
  EXPECT_DOUBLE_EQ(*full.idle_ttl_s, 60);
  EXPECT_DOUBLE_EQ(*full.max_lifetime_s, 600);
  ASSERT_EQ(full.env.size(), 2u);
  EXPECT_EQ(full.env[0], (std::pair<std::string, std::string>{"MY_VAR", "x"}));
}

TEST(SessionCreate, BadFieldsAreNamed) {
  struct Case {
    const char* body;
    const char* field;
  } cases[] = {
      {R"J({"idle_ttl":0})J", "idle_ttl"},
      {R"J({"idle_ttl":"1m"})J", "idle_ttl"},
      {R"J({"max_lifetime":-5})J", "max_lifetime"},
      {R"J({"memory":"lots"})J", "memory"},
      {R"J({"cpus":0})J", "cpus"},
      {R"J({"timeout":[1]})J", "timeout"},
      {R"J({"profile":7})J", "profile"},
      {R"J({"code":"1"})J", "code"},
      {R"J({"env":{"PATH":"/x"}})J", "env.PATH"},
      {R"J({"env":{"A":1}})J", "env.A"},
      {R"J({"env":["A"]})J", "env"},
      {R"J([])J", ""},
      {R"J({)J", ""},
  };
  for (const auto& c : cases) {
    sessions::SessionOptions o;
    auto e = ParseSessionCreate(c.body, &o);
    ASSERT_TRUE(e.has_value()) << c.body;
    EXPECT_EQ(e->field, c.field) << c.body;
  }
}

TEST(SessionExecute, NeedsCodeAndAValidTimeout) {
  SessionExecuteRequest r;
  EXPECT_FALSE(ParseSessionExecute(R"J({"code":"x = 1","timeout":2.5})J", &r).has_value());
  EXPECT_EQ(r.code, "x = 1");
  EXPECT_DOUBLE_EQ(*r.timeout_s, 2.5);
  for (const char* bad : {R"J({})J", R"J({"code":""})J", R"J({"code":1})J",
                          R"J({"code":"1","timeout":0})J", R"J({"code":"1","profile":"x"})J"}) {
    SessionExecuteRequest b;
    EXPECT_TRUE(ParseSessionExecute(bad, &b).has_value()) << bad;
  }
}

TEST(PercentDecode, DecodesAndRefusesMalformedEscapes) {
  EXPECT_EQ(*PercentDecode("data/a%20b.csv"), "data/a b.csv");
  EXPECT_EQ(*PercentDecode("%2e%2E/x"), "../x");  // decoded; the workspace check refuses it later
  EXPECT_EQ(*PercentDecode("plain"), "plain");
  EXPECT_EQ(*PercentDecode("%C3%A9"), "\xC3\xA9");
  EXPECT_FALSE(PercentDecode("a%00b").has_value());
  EXPECT_FALSE(PercentDecode("%zz").has_value());
  EXPECT_FALSE(PercentDecode("a%2").has_value());
  EXPECT_FALSE(PercentDecode("a%").has_value());
}

}  // namespace
}  // namespace kiln::server
