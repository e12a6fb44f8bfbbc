#!/usr/bin/env python3
"""fit_erfc.py -- the coefficients of kernels/math/exp_erfc.h's erfc.

erfc(a) = exp(-a^2) Q(t) / (1 + 2a) for a >= 0, t = (a - 2) / (a + 2) in
[-1, 1): Q(t) = erfcx(a) (1 + 2a) is interpolated at DEGREE + 1 Chebyshev
nodes in 40-digit arithmetic (mpmath) and written in powers of t; the
script prints the coefficients rounded to fp32, highest power first (the
header's Horner order), and Q's largest relative error when evaluated in
fp32 by Horner's rule over 4001 points of [-1, 1).

    python3 tools/fit_erfc.py [DEGREE]     # default 12, what the header uses
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


def fit(degree):
    n = degree + 1
    nodes = [mp.cos(mp.pi * (j + mp.mpf(1) / 2) / n) for j in range(n)]
    powers = mp.matrix([[t ** i for i in range(n)] for t in nodes])
    c = mp.lu_solve(powers, mp.matrix([q_of_t(t) for t in nodes]))
    return [np.float32(float(c[i])) for i in range(n)]


def horner(c, t):
    r = c[-1]
    for ci in reversed(c[:-1]):
        r = np.float32(np.float32(r * t) + ci)
    return r


def main():
    degree = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    c = fit(degree)
    for ci in reversed(c):
        print("%.9ef" % ci)
    worst = 0.0
    for t in np.linspace(-1, 0.9999, 4001):
        t32 = np.float32(t)
        worst = max(worst, abs(float(horner(c, t32)) / float(q_of_t(mp.mpf(float(t32)))) - 1))
    print("largest relative error of Q in fp32: %.3g (%.2f ulp)" % (worst, worst / 2.0 ** -24))


if __name__ == "__main__":
    main()
