// The output audit's filter on its own: whole texts, results and files, and
// streams cut at every possible place.
#include "executions/output_filter.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kiln::executions {
namespace {

using config::AuditAction;
using nlohmann::json;

// A well-formed kiln key (store/api_key.h): not a live one, just its shape.
const std::string kKey = "kiln_0123456789ab_" + std::string(43, 'Q');
const std::string kPem =
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEA1c2V0dXAgYSBrZXkgZm9yIHRoZSB0ZXN0cyBvbmx5Cg==\n"
    "c2Vjb25kIGxpbmUgb2YgdGhlIGJvZHkK\n"
    "-----END RSA PRIVATE KEY-----";

std::unique_ptr<const OutputFilter> Compiled(const config::OutputAuditSpec& spec) {
  auto f = OutputFilter::Compile(spec);
  EXPECT_TRUE(f.ok()) << f.error().message;
  return f.ok() ? std::move(*f) : nullptr;
}

std::unique_ptr<const OutputFilter> Default() { return Compiled(config::DefaultOutputAudit()); }

config::OutputAuditSpec With(std::vector<config::OutputDetector> detectors) {
  config::OutputAuditSpec spec;
  spec.detectors = std::move(detectors);
  return spec;
}

TEST(OutputFilterTest, TheDefaultRedactsTheServersKeysAndPrivateKeysAndSaysWhere) {
  auto f = Default();
  HitSet hits;
  const std::string out = f->Filter("key=" + kKey + "\n" + kPem + "\nafter\n", "stdout", &hits);
  EXPECT_EQ(out, "key=[REDACTED:kiln_api_key]\n[REDACTED:pem_private_key]\nafter\n");
  const auto list = hits.hits();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].detector, "kiln_api_key");
  EXPECT_EQ(list[0].where, "stdout");
  EXPECT_EQ(list[0].count, 1u);
  EXPECT_EQ(list[1].detector, "pem_private_key");
  EXPECT_FALSE(hits.blocked());
  // Text with nothing to find is returned as it was, without a hit.
  HitSet none;
  EXPECT_EQ(f->Filter("kiln_ is a prefix, not a key", "stdout", &none),
            "kiln_ is a prefix, not a key");
  EXPECT_TRUE(none.empty());
}

TEST(OutputFilterTest, APrivateKeyWithoutItsEndLineLosesItsBodyToo) {
  auto f = Default();
  HitSet hits;
  const std::string cut =
      "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQ\n";
  const std::string out = f->Filter(cut + "'done'", "stdout", &hits);
  EXPECT_EQ(out, "[REDACTED:pem_private_key]'done'");
  // A public key or a certificate is not a secret.
  HitSet none;
  const std::string pub = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQc\n";
  EXPECT_EQ(f->Filter(pub, "stdout", &none), pub);
  EXPECT_TRUE(none.empty());
}

TEST(OutputFilterTest, FlagLeavesTheTextAndIsNotToldToTheClient) {
  auto spec = config::DefaultOutputAudit();
  for (auto& d : spec.detectors) d.action = AuditAction::kFlag;
  auto f = Compiled(spec);
  supervisor::ExecutionResult result;
  result.outcome = supervisor::Outcome::kOk;
  result.stdout_data = kKey;
  HitSet hits;
  f->FilterResult(&result, &hits);
  EXPECT_EQ(result.stdout_data, kKey);
  EXPECT_TRUE(hits.ClientReport().is_null());
  ASSERT_EQ(hits.hits().size(), 1u);
  EXPECT_EQ(hits.hits()[0].action, AuditAction::kFlag);
}

TEST(OutputFilterTest, EveryStringOfAResultIsFilteredButImageData) {
  auto f = Default();
  supervisor::ExecutionResult result;
  result.outcome = supervisor::Outcome::kError;
  result.stdout_data = "a " + kKey;
  result.outputs = {{{"output_type", "stream"}, {"name", "stdout"}, {"text", "a " + kKey}},
                    {{"output_type", "display_data"},
                     {"data", {{"text/plain", kKey}, {"image/png", "iVBOR" + kKey}}},
                     {"metadata", json::object()}}};
  result.error = supervisor::CellError{"ValueError", kKey, {"x", kKey}};
  result.reason = "exited with " + kKey;
  result.collect_skipped = {"ok", kKey + ": a symlink"};
  HitSet hits;
  f->FilterResult(&result, &hits);
  EXPECT_EQ(result.stdout_data, "a [REDACTED:kiln_api_key]");
  EXPECT_EQ(result.outputs[0]["text"], "a [REDACTED:kiln_api_key]");
  EXPECT_EQ(result.outputs[1]["data"]["text/plain"], "[REDACTED:kiln_api_key]");
  EXPECT_EQ(result.outputs[1]["data"]["image/png"], "iVBOR" + kKey);  // base64: untouched
  EXPECT_EQ(result.error->value, "[REDACTED:kiln_api_key]");
  EXPECT_EQ(result.error->traceback[1], "[REDACTED:kiln_api_key]");
  EXPECT_EQ(result.reason, "exited with [REDACTED:kiln_api_key]");
  EXPECT_EQ(result.collect_skipped[1], "[REDACTED:kiln_api_key]: a symlink");
  std::vector<std::string> where;
  for (const auto& h : hits.hits()) where.push_back(h.where);
  EXPECT_EQ(where, (std::vector<std::string>{"error.traceback[1]", "error.value",
                                             "files_skipped[1]", "outputs[0].text",
                                             "outputs[1].data.text/plain", "reason", "stdout"}));
  // What the client is told, in the API's JSON: no text, detectors and places.
  const json report = hits.ClientReport();
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(report["blocked"], false);
  EXPECT_EQ(report["hits"].size(), 7u);
  EXPECT_EQ(report.dump().find("QQQQ"), std::string::npos);
  // Nothing the filter missed: no key is left in the API's JSON but the image.
  result.outputs[1]["data"].erase("image/png");
  EXPECT_EQ(supervisor::ToJson(result, true).dump().find(kKey), std::string::npos);
}

TEST(OutputFilterTest, BlockWithholdsTheOutputAndTheFilesButKeepsTheStatus) {
  auto spec = config::DefaultOutputAudit();
  spec.detectors[1].action = AuditAction::kBlock;  // pem_private_key
  auto f = Compiled(spec);
  supervisor::ExecutionResult result;
  result.outcome = supervisor::Outcome::kOk;
  result.exit_code = 0;
  result.stdout_data = "fine";
  result.stderr_data = "also fine";
  result.outputs = {{{"output_type", "stream"}, {"name", "stdout"}, {"text", "fine"}}};
  result.returned_files = {{"a.txt", "plain"}, {"id_rsa", kPem + "\n"}};
  HitSet hits;
  f->FilterResult(&result, &hits);
  EXPECT_TRUE(hits.blocked());
  EXPECT_EQ(result.outcome, supervisor::Outcome::kOk);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.stdout_data, "");
  EXPECT_EQ(result.stderr_data, "");
  EXPECT_TRUE(result.outputs.empty());
  EXPECT_TRUE(result.returned_files.empty());
  const json report = hits.ClientReport();
  EXPECT_EQ(report["blocked"], true);
  EXPECT_EQ(report["hits"][0]["where"], "files/id_rsa");
  EXPECT_EQ(report["hits"][0]["action"], "block");
}

TEST(OutputFilterTest, ReturnedFilesAreRedactedInPlace) {
  auto f = Default();
  supervisor::ExecutionResult result;
  result.outcome = supervisor::Outcome::kOk;
  result.returned_files = {{"out/creds.txt", "k=" + kKey}};
  HitSet hits;
  f->FilterResult(&result, &hits);
  EXPECT_EQ(result.returned_files[0].content, "k=[REDACTED:kiln_api_key]");
  EXPECT_EQ(hits.ClientReport()["hits"][0]["where"], "files/out/creds.txt");
}

TEST(OutputFilterTest, PatternsWithTheirOwnGroupsStillNameTheRightDetector) {
  auto f = Compiled(With({{"one", "(a)(b)(c)x", 8, AuditAction::kRedact},
                          {"two", "zz(y+)", 16, AuditAction::kFlag},
                          {"three", "QQ[0-9]{4}", 6, AuditAction::kRedact}}));
  HitSet hits;
  EXPECT_EQ(f->Filter("abcx zzyy QQ1234", "stdout", &hits), "[REDACTED:one] zzyy [REDACTED:three]");
  std::vector<std::string> names;
  for (const auto& h : hits.hits()) names.push_back(h.detector);
  EXPECT_EQ(names, (std::vector<std::string>{"one", "three", "two"}));
}

TEST(OutputFilterTest, DisabledOrEmptyCompilesToNoFilter) {
  config::OutputAuditSpec off = config::DefaultOutputAudit();
  off.enabled = false;
  auto f = OutputFilter::Compile(off);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, nullptr);
  auto none = OutputFilter::Compile(With({}));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
}

// --- Streams -----------------------------------------------------------------

std::string Stream(const OutputFilter& f, const std::vector<std::string>& chunks,
                   std::vector<std::string>* sent = nullptr) {
  StreamFilter s(&f);
  std::string out;
  for (const auto& c : chunks) {
    std::string piece = s.Push(c);
    if (sent != nullptr) sent->push_back(piece);
    out += piece;
  }
  std::string rest = s.Flush();
  if (sent != nullptr) sent->push_back(rest);
  return out + rest;
}

TEST(OutputFilterTest, ASecretSplitAcrossTwoChunksIsCaughtWhereverTheCutIs) {
  auto f = Default();
  const std::string text = "token: " + kKey + " end\n";
  HitSet whole_hits;
  const std::string whole = f->Filter(text, "stdout", &whole_hits);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    std::vector<std::string> sent;
    const std::string out = Stream(*f, {text.substr(0, cut), text.substr(cut)}, &sent);
    EXPECT_EQ(out, whole) << "cut at " << cut;
    for (const auto& piece : sent) {
      // No piece carries a part of the secret long enough to matter: the
      // key's id and secret never leave in any chunk.
      EXPECT_EQ(piece.find("0123456789ab_"), std::string::npos) << "cut at " << cut;
      EXPECT_EQ(piece.find("QQQQ"), std::string::npos) << "cut at " << cut;
    }
  }
}

TEST(OutputFilterTest, ByteByByteStreamsEqualTheWholeText) {
  auto f = Default();
  const std::string text = "x " + kKey + "\n" + kPem + "\nkiln_ no\n" + kKey;
  HitSet hits;
  const std::string whole = f->Filter(text, "stdout", &hits);
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  EXPECT_EQ(Stream(*f, bytes), whole);
  // And in chunks of 7, 64 and 1000 bytes.
  for (size_t n : {7u, 64u, 1000u}) {
    std::vector<std::string> chunks;
    for (size_t i = 0; i < text.size(); i += n) chunks.push_back(text.substr(i, n));
    EXPECT_EQ(Stream(*f, chunks), whole) << "chunks of " << n;
  }
}

TEST(OutputFilterTest, TextThatCannotStartASecretIsNotHeldBack) {
  auto f = Default();
  StreamFilter s(f.get());
  EXPECT_EQ(s.Push("step 1 of 3\n"), "step 1 of 3\n");
  // "kil" could be the start of a key: held back until the next chunk says.
  EXPECT_EQ(s.Push("loading kil"), "loading ");
  EXPECT_EQ(s.Push("ns\n"), "kilns\n");
  EXPECT_EQ(s.Push("-----BEG"), "");
  EXPECT_EQ(s.Push("GAR\n"), "-----BEGGAR\n");
  EXPECT_EQ(s.Flush(), "");
}

TEST(OutputFilterTest, ABlockHitInAStreamStopsIt) {
  auto spec = config::DefaultOutputAudit();
  for (auto& d : spec.detectors) d.action = AuditAction::kBlock;
  auto f = Compiled(spec);
  StreamFilter s(f.get());
  EXPECT_EQ(s.Push("before\n"), "before\n");
  (void)s.Push(kKey.substr(0, 30));
  EXPECT_FALSE(s.blocked());
  const std::string sent = s.Push(kKey.substr(30) + " after");
  EXPECT_TRUE(s.blocked());
  EXPECT_EQ(sent.find("QQQQ"), std::string::npos);
}

TEST(OutputFilterTest, APatternWithoutALiteralStartHoldsBackOnlyItsMaxLength) {
  // [0-9]{6}: any digit may start one; at most 5 bytes wait.
  auto f = Compiled(With({{"pin", "[0-9]{6}", 6, AuditAction::kRedact}}));
  StreamFilter s(f.get());
  EXPECT_EQ(s.Push("abcdefgh12"), "abcdefgh");
  EXPECT_EQ(s.Push("3456 and more text"), "[REDACTED:pin] and more text");
  EXPECT_EQ(s.Flush(), "");
}

}  // namespace
}  // namespace kiln::executions
