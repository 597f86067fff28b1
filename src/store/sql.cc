#include "store/sql.h"

#include <charconv>
#include <cstdlib>

namespace kiln::store {

int64_t Row::Int(size_t i) const {
  if (i >= columns_.size()) return 0;
  const Value& v = columns_[i];
  switch (v.kind) {
    case Value::Kind::kInt: return v.i;
    case Value::Kind::kReal: return static_cast<int64_t>(v.r);
    case Value::Kind::kText:
    case Value::Kind::kBlob: {
      int64_t out = 0;
      std::from_chars(v.s.data(), v.s.data() + v.s.size(), out);
      return out;
    }
    case Value::Kind::kNull: return 0;
  }
  return 0;
}

double Row::Real(size_t i) const {
  if (i >= columns_.size()) return 0;
  const Value& v = columns_[i];
  switch (v.kind) {
    case Value::Kind::kInt: return static_cast<double>(v.i);
    case Value::Kind::kReal: return v.r;
    case Value::Kind::kText:
    case Value::Kind::kBlob: return std::strtod(v.s.c_str(), nullptr);
    case Value::Kind::kNull: return 0;
  }
  return 0;
}

std::string Row::Text(size_t i) const {
  if (i >= columns_.size()) return {};
  const Value& v = columns_[i];
  switch (v.kind) {
    case Value::Kind::kInt: return std::to_string(v.i);
    case Value::Kind::kReal: return std::to_string(v.r);
    case Value::Kind::kText:
    case Value::Kind::kBlob: return v.s;
    case Value::Kind::kNull: return {};
  }
  return {};
}

std::optional<std::string> Row::OptText(size_t i) const {
  if (IsNull(i)) return std::nullopt;
  return Text(i);
}
std::optional<int64_t> Row::OptInt(size_t i) const {
  if (IsNull(i)) return std::nullopt;
  return Int(i);
}
std::optional<double> Row::OptReal(size_t i) const {
  if (IsNull(i)) return std::nullopt;
  return Real(i);
}
std::optional<uint64_t> Row::OptU64(size_t i) const {
  if (IsNull(i)) return std::nullopt;
  const int64_t v = Int(i);
  return v < 0 ? 0 : static_cast<uint64_t>(v);
}
std::optional<int> Row::OptInt32(size_t i) const {
  if (IsNull(i)) return std::nullopt;
  return static_cast<int>(Int(i));
}
std::optional<bool> Row::OptBool(size_t i) const {
  if (IsNull(i)) return std::nullopt;
  return Int(i) != 0;
}

}  // namespace kiln::store
