// The standalone driver of the fuzz targets (as LLVM's
// StandaloneFuzzTargetMain.c): runs LLVMFuzzerTestOneInput once on each file
// named, or on each file of each directory named (sorted, not recursive).
// ctest replays every committed corpus with it in the normal build, so a
// regression seed fails `make test` without clang or libFuzzer.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

bool RunFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return false;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  // An exact-size heap copy, as libFuzzer passes it. The name goes first, so
  // that a failing input is named on the test's output.
  const std::vector<uint8_t> data(bytes.begin(), bytes.end());
  std::fprintf(stderr, "replay: %s\n", path.c_str());
  LLVMFuzzerTestOneInput(data.data(), data.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path p(argv[i]);
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else {
      files.push_back(p);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s FILE|DIR...: runs the fuzz target once on each file\n",
                 argv[0]);
    return 2;
  }
  std::sort(files.begin(), files.end());
  size_t ran = 0;
  for (const auto& f : files) {
    if (!RunFile(f)) return 1;
    ++ran;
  }
  std::printf("replay: %zu inputs, no failure\n", ran);
  return 0;
}
