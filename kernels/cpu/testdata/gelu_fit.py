#!/usr/bin/python3
"""Fits the polynomial R of the float32 GELU (kernels/cpu/gelu.go).

erfc(z) = exp(-x^2/2) * R(u) with z = |x|/sqrt(2) and u = 1/(1 + |x|/4), so
R(u) = exp(z^2) * erfc(z), a smooth function of u on [1/(1 + 14/4), 1]
(|x| <= 14). R is fitted as a degree-10 polynomial in u - 1/2 by least
squares on Chebyshev nodes, weighted for relative error, against erfc from
mpmath at 40 digits. The script prints the coefficients (highest degree
first, as float32) and the fit's largest relative error on a fine grid.

    /usr/bin/python3 kernels/cpu/testdata/gelu_fit.py

Needs numpy and mpmath (Debian: python3-numpy, python3-mpmath).
"""

import math

import mpmath as mp
import numpy as np

mp.mp.dps = 40
B = 0.25          # u = 1/(1 + B*|x|)
XMAX = 14.0
DEGREE = 10
CENTER = 0.5
NODES = 900


def r_exact(u):
    t = mp.mpf((1 - u) / (B * math.sqrt(2) * u))  # z = |x|/sqrt(2)
    return mp.exp(t * t) * mp.erfc(t)


def main():
    umin = 1 / (1 + B * XMAX)
    k = np.arange(NODES)
    us = (umin + 1) / 2 + (1 - umin) / 2 * np.cos(np.pi * (k + 0.5) / NODES)
    rs = np.array([float(r_exact(u)) for u in us])
    v = np.vander(us - CENTER, DEGREE + 1)
    w = 1 / rs
    coef, *_ = np.linalg.lstsq(v * w[:, None], rs * w, rcond=None)
    coef = coef.astype(np.float32)
    print("R's coefficients, highest degree first (float32):")
    for c in coef:
        print("  %r," % float(c))
    grid = np.linspace(umin, 1, 4000)
    exact = np.array([float(r_exact(u)) for u in grid])
    fit = np.polyval(coef.astype(np.float64), grid - CENTER)
    print("largest relative error of the fit: %.3g" % np.max(np.abs(fit / exact - 1)))


if __name__ == "__main__":
    main()
