#include "web/assets.h"

namespace kiln::web {

const Asset* Find(std::string_view path) {
  for (const Asset& a : Assets()) {
    if (a.path == path) return &a;
  }
  return nullptr;
}

}  // namespace kiln::web
