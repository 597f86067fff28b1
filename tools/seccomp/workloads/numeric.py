# Workload for tools/seccomp/measure.py: numpy, pandas and friends on real data.
import numpy as np
import pandas as pd

rng = np.random.default_rng(0)
a = rng.standard_normal((400, 400))
print(np.linalg.inv(a).sum(), np.linalg.eigvals(a[:100, :100]).real.sum())
print(np.fft.fft(a[0]).real.sum(), np.linalg.svd(a[:200, :200])[1][0])
big = np.zeros((4000, 4000))
big += 1
big = np.resize(big, (5000, 5000))
print(big.sum())
del big
np.save("a.npy", a)
np.load("a.npy", mmap_mode="r").sum()
df = pd.DataFrame({"k": rng.integers(0, 10, 100000), "v": rng.random(100000),
                   "t": pd.date_range("2024-01-01", periods=100000, freq="min")})
print(df.groupby("k")["v"].agg(["mean", "std"]).head())
df.resample("D", on="t").sum(numeric_only=True)
df.to_csv("d.csv", index=False)
pd.read_csv("d.csv").describe()
df.head(100).to_json("d.json")
try:
    df.head(100).to_excel("d.xlsx")
    pd.read_excel("d.xlsx")
except Exception as e:  # noqa: BLE001
    print(type(e).__name__, e)
df.pivot_table(index="k", values="v", aggfunc="sum")
print(df.memory_usage().sum())
df  # the last value: a table
