#!/usr/bin/env python3
"""Reference values for abtest's TestAnalyzeMatchesReference.

Run with Debian's python3-scipy (scipy 1.10, numpy 1.24):
    /usr/bin/python3 rollout/abtest/testdata/reference.py
The data and the derived per-exchange fields repeat fixtureSessions in
report_test.go exactly; the printed numbers are pasted into the test.
Fixed-horizon statistics come from scipy/numpy; the mSPRT is the formula of
Johari, Pekelis and Walsh (2017), written out again here independently.
"""
import math
import numpy as np
from scipy import stats

# (arm, turns, reward) in the order the sessions ended, one minute apart.
DATA = [
    ("stable", 3, 1.2), ("canary", 6, 2.5), ("stable", 5, 2.0), ("canary", 8, 3.1),
    ("stable", 2, 0.4), ("canary", 5, 1.9), ("stable", 8, 3.3), ("canary", 9, 3.8),
    ("stable", 6, 2.2), ("canary", 7, 2.9), ("stable", 4, 1.5), ("canary", 10, 4.4),
    ("stable", 7, 2.8), ("canary", 4, 1.1), ("stable", 5, 1.7), ("canary", 8, 3.0),
    ("stable", 3, 0.9), ("canary", 6, 2.6), ("stable", 6, 2.4), ("canary", 7, 3.2),
    ("stable", 9, 3.9), ("canary", 9, 3.5), ("stable", 4, 1.6), ("canary", 11, 4.9),
    ("stable", 5, 2.1), ("canary", 5, 2.0), ("stable", 1, 0.1), ("canary", 7, 2.7),
    ("stable", 6, 2.3), ("canary", 8, 3.4), ("canary", 6, 2.2), ("canary", 9, 3.6),
    ("canary", 10, 4.1),
]
ALPHA, MIXTURE_SD, SEQ_MIN, WINDOW_MIN = 0.05, 0.5, 5, 10
N = len(DATA)


def latency(i, k):  # ms of exchange k (1-based) of session i
    return 50 + (i * 31 + k * 17) % 200


def refused(i, k):
    return (i + k) % 13 == 0


def is_error(i):
    return i % 7 == 3


def fmt(x):
    return repr(float(x))


for arm in ("stable", "canary"):
    L = np.array([t for a, t, r in DATA if a == arm], float)
    R = np.array([r for a, t, r in DATA if a == arm], float)
    for name, x in (("L", L), ("R", R)):
        lo, hi = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
        print(f"{arm} {name}: n={len(x)} mean={fmt(x.mean())} sd={fmt(x.std(ddof=1))} lo={fmt(lo)} hi={fmt(hi)}")

    def rates(window):
        now = N  # minutes after t0; session i ended at minute i
        sess = [(i, t) for i, (a, t, r) in enumerate(DATA) if a == arm and (not window or i >= now - WINDOW_MIN)]
        lat, ref = [], 0
        for i, (a, t, r) in enumerate(DATA):
            if a != arm:
                continue
            for k in range(1, t + 1):
                at = i * 60 - (t - k) * 10  # seconds after t0: the last exchange at the end
                if window and at < (now - WINDOW_MIN) * 60:
                    continue
                lat.append(latency(i, k))
                ref += refused(i, k)
        err = sum(is_error(i) for i, t in sess) / len(sess)
        early = sum(t <= 1 for i, t in sess) / len(sess)
        print(f"{arm} {'window' if window else 'all'}: sessions={len(sess)} exchanges={len(lat)} "
              f"error={fmt(err)} early={fmt(early)} refused={fmt(ref / len(lat))} p95={fmt(np.percentile(lat, 95))}")

    rates(False)
    rates(True)

for name, idx in (("L", 1), ("R", 2)):
    S = np.array([d[idx] for d in DATA if d[0] == "stable"], float)
    C = np.array([d[idx] for d in DATA if d[0] == "canary"], float)
    t, p = stats.ttest_ind(C, S, equal_var=False)
    vs, vc = S.var(ddof=1) / len(S), C.var(ddof=1) / len(C)
    df = (vs + vc) ** 2 / (vs ** 2 / (len(S) - 1) + vc ** 2 / (len(C) - 1))
    diff = C.mean() - S.mean()
    hw = stats.t.ppf(0.975, df) * math.sqrt(vs + vc)
    print(f"welch {name}: diff={fmt(diff)} t={fmt(t)} df={fmt(df)} p={fmt(p)} lo={fmt(diff - hw)} hi={fmt(diff + hw)}")

    # mSPRT: one look per ended session once both arms have SEQ_MIN.
    s, c, pseq, lo, hi, looks = [], [], 1.0, -math.inf, math.inf, 0
    for d in DATA:
        (c if d[0] == "canary" else s).append(d[idx])
        if len(s) < SEQ_MIN or len(c) < SEQ_MIN:
            continue
        v = np.var(c, ddof=1) / len(c) + np.var(s, ddof=1) / len(s)
        tau2 = (MIXTURE_SD ** 2) * (np.var(c, ddof=1) + np.var(s, ddof=1)) / 2
        dd = np.mean(c) - np.mean(s)
        lam = math.sqrt(v / (v + tau2)) * math.exp(tau2 * dd * dd / (2 * v * (v + tau2)))
        pseq = min(pseq, 1 / lam)
        w = math.sqrt(v * (v + tau2) / tau2 * (2 * math.log(1 / ALPHA) + math.log((v + tau2) / v)))
        lo, hi = max(lo, dd - w), min(hi, dd + w)
        looks += 1
    print(f"msprt {name}: looks={looks} loglambda={fmt(math.log(lam))} p={fmt(pseq)} lo={fmt(lo)} hi={fmt(hi)} tau={fmt(math.sqrt(tau2))}")
