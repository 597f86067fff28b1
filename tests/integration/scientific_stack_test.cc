// Integration tier: what agents actually run. Debian's numpy, pandas and
// matplotlib (Agg) work inside the sandbox, and a figure saved in the
// workspace comes out with --collect. Each test skips, naming the package,
// where the host's /usr/bin/python3 lacks its library.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "testlib/host_facts.h"
#include "testlib/kiln_runner.h"

namespace kiln::testing {
namespace {

class ScientificStack : public SandboxTest {};

TEST_F(ScientificStack, NumpyComputes) {
  KILN_REQUIRE_PYTHON_MODULES("numpy");
  const JsonRun r = RunPython(R"PY(
import numpy as np
a = np.arange(12, dtype=np.int64).reshape(3, 4)
print(a.sum(), a.sum(axis=0).tolist(), int(np.dot([1, 2, 3], [4, 5, 6])))
print(round(float(np.linalg.det(np.array([[2.0, 1.0], [1.0, 3.0]]))), 6))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(), "66 [12, 15, 18, 21] 32\n5.0\n") << r.Describe();
  EXPECT_EQ(r.err(), "") << r.Describe();
}

TEST_F(ScientificStack, PandasDescribe) {
  KILN_REQUIRE_PYTHON_MODULES("pandas");
  const JsonRun r = RunPython(R"PY(
import pandas as pd
df = pd.DataFrame({"x": [1, 2, 3, 4], "y": [10.0, 20.0, 30.0, 40.0]})
d = df.describe()
print(d.loc["count", "x"], d.loc["mean", "x"], d.loc["max", "y"], d.loc["50%", "y"])
print(list(d.index))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(),
            "4.0 2.5 40.0 25.0\n"
            "['count', 'mean', 'std', 'min', '25%', '50%', '75%', 'max']\n")
      << r.Describe();
}

TEST_F(ScientificStack, MatplotlibSavefigIsCollected) {
  KILN_REQUIRE_PYTHON_MODULES("matplotlib");
  TempDir out;
  const std::string collect = out.path() + "/collected";
  const JsonRun r = RunPython(R"PY(
import matplotlib
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot([0, 1, 2], [0, 1, 4])
fig.savefig("plot.png")
print(matplotlib.get_backend(), type(fig.canvas).__mro__[1].__name__)
)PY",
                              {"--collect", collect});
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  // kiln's backend (figures come back as display_data) draws with Agg.
  EXPECT_EQ(r.out(), "module://kiln_runtime.mpl_backend FigureCanvasAgg\n") << r.Describe();
  const std::string host_png = collect + "/plot.png";
  ASSERT_TRUE(std::filesystem::is_regular_file(host_png)) << r.Describe();
  const auto data = ReadFile(host_png);
  ASSERT_TRUE(data.has_value());
  EXPECT_EQ(data->substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_GT(data->size(), 1000u);
  // The result lists it, with the size the host sees.
  bool listed = false;
  for (const auto& f : r.j["files"]) {
    if (f.value("path", "") == "plot.png") {
      listed = true;
      EXPECT_EQ(f.value("size", uint64_t{0}), data->size());
    }
  }
  EXPECT_TRUE(listed) << r.Describe();
}

}  // namespace
}  // namespace kiln::testing
