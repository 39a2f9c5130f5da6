#!/usr/bin/env python3
"""Reference values for abtest's player-level tests (stats_test.go), in plain
Python (no numpy): every quantity from its definition over players, not
from the running sums the Go code keeps.
    python3 rollout/abtest/testdata/player_level.py
"""
import math

# (arm, turns of each ended session, pre-exposure exchange length)
PLAYERS = [
    ("stable", [3, 5], 4.0), ("stable", [2], 2.0), ("stable", [6, 4, 8], 7.0), ("stable", [1, 3], 1.0),
    ("canary", [7], 5.0), ("canary", [4, 6], 3.0), ("canary", [9, 5, 7], 8.0),
]


def mean(v):
    return sum(v) / len(v)


def cov(a, b):
    ma, mb = mean(a), mean(b)
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / (len(a) - 1)


arms = {}
for arm in ("stable", "canary"):
    xs = [float(len(t)) for a, t, c in PLAYERS if a == arm]
    ys = [float(sum(t)) for a, t, c in PLAYERS if a == arm]
    cs = [c for a, t, c in PLAYERS if a == arm]
    n, R, xbar = len(xs), sum(ys) / sum(xs), mean(xs)
    # linearised per-player contribution of the ratio (Deng et al. 2018)
    ls = [(y - R * x) / xbar for x, y in zip(xs, ys)]
    var = cov(ls, ls) / n
    arms[arm] = dict(n=n, R=R, var=var, ls=ls, cs=cs)
    print(f"{arm}: players={n} ratio={R!r} delta_var={var!r}")

# CUPED θ pooled within arms
num = sum(sum(l * (c - mean(a["cs"])) for l, c in zip(a["ls"], a["cs"])) for a in arms.values())
den = sum(sum((c - mean(a["cs"])) ** 2 for c in a["cs"]) for a in arms.values())
theta = num / den
allc = [c for a in arms.values() for c in a["cs"]]
adj = {}
for arm, a in arms.items():
    z = [l - theta * c for l, c in zip(a["ls"], a["cs"])]
    adj[arm] = (a["R"] - theta * (mean(a["cs"]) - mean(allc)), cov(z, z) / a["n"])
d = adj["canary"][0] - adj["stable"][0]
v = adj["canary"][1] + adj["stable"][1]
raw = arms["canary"]["var"] + arms["stable"]["var"]
print(f"cuped: theta={theta!r} diff={d!r} var={v!r} reduction={1 - v / raw!r}")

# one mSPRT look (alpha 0.05, MixtureSD 0.5) on the adjusted difference
ALPHA, MSD = 0.05, 0.5
tau = MSD * math.sqrt((arms["stable"]["n"] * adj["stable"][1] + arms["canary"]["n"] * adj["canary"][1]) / 2)
t2 = tau * tau
loglam = 0.5 * math.log(v / (v + t2)) + t2 * d * d / (2 * v * (v + t2))
hw = math.sqrt(v * (v + t2) / t2 * (2 * math.log(1 / ALPHA) + math.log((v + t2) / v)))
print(f"msprt: tau={tau!r} loglambda={loglam!r} p={min(1.0, math.exp(-loglam))!r} lo={d - hw!r} hi={d + hw!r}")

# SRM: 9,000 stable and 1,200 canary players against a 10 % canary share
s, c, share = 9000, 1200, 0.10
n = s + c
chi = (c - n * share) ** 2 / (n * share) + (s - n * (1 - share)) ** 2 / (n * (1 - share))
print(f"srm: chi2={chi!r} p={math.erfc(math.sqrt(chi / 2))!r}")

# The fixture of reference.py (one session per player) at one look with
# SEQ_MIN 5 and MIXTURE_SD 0.5: the player-level statistics equal the
# session-level ones there.
DATA = [3, 6, 5, 8, 2, 5, 8, 9, 6, 7, 4, 10, 7, 4, 5, 8, 3, 6, 6, 7, 9, 9, 4, 11, 5, 5, 1, 7, 6, 8, 6, 9, 10]
ARM = ["stable", "canary"] * 15 + ["canary"] * 3
REW = [1.2, 2.5, 2.0, 3.1, 0.4, 1.9, 3.3, 3.8, 2.2, 2.9, 1.5, 4.4, 2.8, 1.1, 1.7, 3.0, 0.9, 2.6, 2.4, 3.2,
       3.9, 3.5, 1.6, 4.9, 2.1, 2.0, 0.1, 2.7, 2.3, 3.4, 2.2, 3.6, 4.1]
for name, vals in (("L", DATA), ("R", REW)):
    S = [float(x) for x, a in zip(vals, ARM) if a == "stable"]
    C = [float(x) for x, a in zip(vals, ARM) if a == "canary"]
    vs, vc = cov(S, S) / len(S), cov(C, C) / len(C)
    dd, vv = mean(C) - mean(S), vs + vc
    tau = MSD * math.sqrt((len(S) * vs + len(C) * vc) / 2)
    t2 = tau * tau
    loglam = 0.5 * math.log(vv / (vv + t2)) + t2 * dd * dd / (2 * vv * (vv + t2))
    hw = math.sqrt(vv * (vv + t2) / t2 * (2 * math.log(1 / ALPHA) + math.log((vv + t2) / vv)))
    print(f"fixture msprt {name}: tau={tau!r} loglambda={loglam!r} p={math.exp(-loglam)!r} lo={dd - hw!r} hi={dd + hw!r}"
          f" se_s={math.sqrt(vs)!r} se_c={math.sqrt(vc)!r}")
