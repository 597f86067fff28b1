# Workload for tools/seccomp/measure.py: scipy, scikit-learn, sympy.
import numpy as np
import scipy.integrate
import scipy.optimize
import scipy.sparse
import scipy.stats
import sympy
from sklearn.cluster import KMeans
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression

rng = np.random.default_rng(2)
print(scipy.optimize.minimize(lambda v: ((v - 3) ** 2).sum(), np.zeros(5)).x)
print(scipy.integrate.quad(np.sin, 0, np.pi))
print(scipy.stats.ttest_ind(rng.normal(size=100), rng.normal(size=100)))
m = scipy.sparse.random(1000, 1000, density=0.01, random_state=0)
print((m @ m.T).nnz)
X = rng.standard_normal((2000, 10))
y = (X[:, 0] + X[:, 1] > 0).astype(int)
print(LogisticRegression().fit(X, y).score(X, y))
print(RandomForestClassifier(n_estimators=20, n_jobs=2, random_state=0).fit(X, y).score(X, y))
print(KMeans(n_clusters=3, n_init=3, random_state=0).fit(X).inertia_)
xs = sympy.symbols("x")
print(sympy.solve(xs**2 - 2, xs), sympy.integrate(sympy.sin(xs) ** 2, xs))
