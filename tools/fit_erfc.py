#!/usr/bin/env python3
"""fit_erfc.py -- the coefficients of kernels/math/exp_erfc.h's erfc.

For a >= 0.5: erfc(a) = exp(-a^2) Q(t) / (1 + 2a), t = (a - 2) / (a + 2) in
[-1, 1): Q(t) = erfcx(a) (1 + 2a) is interpolated at DEGREE + 1 Chebyshev
nodes in 40-digit arithmetic (mpmath) and written in powers of t.
For |x| < 0.5: erfc(x) = 1 - x P(x^2), P(s) = erf(sqrt(s)) / sqrt(s) on
[0, 1/4], interpolated in the same way (degree ERF_DEGREE).

The header evaluates both polynomials in double (Horner's rule) and rounds
once to fp32, so the script prints the coefficients as doubles, highest
power first (the header's Horner order), and each polynomial's largest
relative error evaluated in double over 4001 points, in fp32 ulps.

    python3 tools/fit_erfc.py [DEGREE [ERF_DEGREE]]   # default 12 and 5, the header's
"""
import sys

import mpmath as mp
import numpy as np

mp.mp.dps = 40
K = 2  # t = (a - K) / (a + K)


def q_of_t(t):
    if t >= 1:
        return 2 / mp.sqrt(mp.pi)
    a = K * (1 + t) / (1 - t)
    return mp.erfc(a) * mp.exp(a * a) * (1 + 2 * a)


def p_of_s(s):
    if s == 0:
        return 2 / mp.sqrt(mp.pi)
    return mp.erf(mp.sqrt(s)) / mp.sqrt(s)


def fit(f, degree, lo, hi):
    """Coefficients, lowest power first, of the interpolant of f on [lo, hi]."""
    n = degree + 1
    nodes = [(lo + hi) / 2 + (hi - lo) / 2 * mp.cos(mp.pi * (j + mp.mpf(1) / 2) / n)
             for j in range(n)]
    powers = mp.matrix([[x ** i for i in range(n)] for x in nodes])
    c = mp.lu_solve(powers, mp.matrix([f(x) for x in nodes]))
    return [float(c[i]) for i in range(n)]


def horner(c, x):
    r = c[-1]
    for ci in reversed(c[:-1]):
        r = r * x + ci
    return r


def report(name, f, c, xs):
    for ci in reversed(c):
        print("%.17e" % ci)
    worst = max(abs(horner(c, x) / float(f(mp.mpf(x))) - 1) for x in xs)
    print("largest relative error of %s in double: %.3g (%.3f fp32 ulp)\n"
          % (name, worst, worst / 2.0 ** -24))


def main():
    degree = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    erf_degree = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    # t as the header computes it: rounded to fp32 (Q is smooth, so t's
    # rounding moves Q by far less than an ulp).
    ts = [float(np.float32(t)) for t in np.linspace(-1, 0.9999, 4001)]
    report("Q", q_of_t, fit(q_of_t, degree, mp.mpf(-1), mp.mpf(1)), ts)
    ss = [float(s) for s in np.linspace(0, 0.25, 4001)]
    report("P", p_of_s, fit(p_of_s, erf_degree, mp.mpf(0), mp.mpf(1) / 4), ss)


if __name__ == "__main__":
    main()
