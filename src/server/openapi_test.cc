#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "server/server.h"

namespace kiln::server {
namespace {

// docs/openapi.json must describe exactly the routes the server has.
TEST(OpenApi, DescribesExactlyTheServersRoutes) {
  const auto doc = nlohmann::json::parse(OpenApiText());
  EXPECT_EQ(doc["openapi"], "3.1.0");
  std::set<std::string> documented;
  for (const auto& [path, ops] : doc["paths"].items()) {
    for (const auto& [method, _] : ops.items()) {
      std::string m = method;
      for (auto& c : m) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      documented.insert(m + " " + path);
    }
  }
  const std::set<std::string> served(Routes().begin(), Routes().end());
  EXPECT_EQ(documented, served);
}

}  // namespace
}  // namespace kiln::server
