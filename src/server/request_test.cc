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
                 "return_files":["*.png"],"env":{"MY_VAR":"x"}})J", &r);
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

TEST(V1Execute, ErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* field;
    const char* code;
  } cases[] = {
      {"not json", "", "invalid_json"},
      {"[1]", "", "invalid_json"},
      {"{}", "code", "missing_field"},
      {R"J({"code":3})J", "code", "invalid_type"},
      {R"J({"code":""})J", "code", "invalid_value"},
      {R"J({"code":"1","timeout":"soon"})J", "timeout", "invalid_type"},
      {R"J({"code":"1","timeout":-1})J", "timeout", "invalid_value"},
      {R"J({"code":"1","memory":"12parsecs"})J", "memory", "invalid_value"},
      {R"J({"code":"1","cpus":"two"})J", "cpus", "invalid_type"},
      {R"J({"code":"1","files":{}})J", "files", "invalid_type"},
      {R"J({"code":"1","files":[{"path":"../etc/passwd","content":"x"}]})J", "files[0].path", "invalid_value"},
      {R"J({"code":"1","files":[{"path":"/abs","content":"x"}]})J", "files[0].path", "invalid_value"},
      {R"J({"code":"1","files":[{"path":"a\u0000b","content":"x"}]})J", "files[0].path", "invalid_value"},
      {R"J({"code":"1","files":[{"path":"a","content":"x","content_base64":"eA=="}]})J", "files[0]", "invalid_value"},
      {R"J({"code":"1","files":[{"path":"a","content_base64":"!!"}]})J", "files[0].content_base64", "invalid_value"},
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
  const std::string long_path = R"J({"code":"1","files":[{"path":")J" + std::string(4096, 'a') + R"J(","content":"x"}]})J";
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
  ASSERT_FALSE(ParseReferenceExecute(
      R"J({"code":"x","timeout":5,"mem_limit":"512m","cpu_limit":0.5,"input_files":{"a.txt":"hi"},"return_output_files":true,"extra":1})J",
      "default", &f).has_value());
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
  EXPECT_TRUE(ParseReferenceExecute(R"J({"code":")J" + std::string(100001, 'x') + R"J("})J", "default", &big).has_value());
}

}  // namespace
}  // namespace kiln::server
