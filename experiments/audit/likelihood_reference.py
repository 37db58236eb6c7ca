"""Independent reference values for dpgd_accounting::audit::likelihood (the audit of DP-SGD's
canaries by their per-step log-likelihood ratios): the standardised difference d(theta) of T-step
sums between an included and an excluded canary, one step's moments by scipy's adaptive quadrature.

    python3 experiments/audit/likelihood_reference.py   # prints the table the Rust test holds
"""
import math

from scipy import integrate, stats


def ell(o, q, mu):
    """ln((1 - q) + q exp(mu o - mu^2 / 2)), written out with logaddexp's identity."""
    a, b = math.log1p(-q) if q < 1 else -math.inf, math.log(q) + mu * o - mu * mu / 2
    hi = max(a, b)
    return hi + math.log1p(math.exp(-abs(a - b))) if a > -math.inf else b


def difference(q, sigma, steps, theta):
    mu, s = 1 / sigma, 1 / theta
    quad = lambda f, c: integrate.quad(lambda o: f(o) * stats.norm.pdf(o, c, s), -40 * s + c, 40 * s + c,
                                       points=[0.0, mu], limit=500, epsabs=0, epsrel=1e-10)[0]
    e_out = quad(lambda o: ell(o, q, mu), 0.0)
    e_in_sampled = quad(lambda o: ell(o, q, mu), mu)
    var_out = quad(lambda o: (ell(o, q, mu) - e_out) ** 2, 0.0)
    return math.sqrt(steps) * q * (e_in_sampled - e_out) / math.sqrt(var_out)


CASES = [(0.004, 0.9, 3750, 1.0), (0.004, 0.568, 3750, 0.8), (0.05, 1.0, 300, 1.3), (0.2, 0.75, 50, 0.5),
         (0.01, 2.0, 1000, 2.0), (0.5, 1.5, 20, 1.0), (1e-3, 0.4, 20000, 1.0)]

for q, sigma, steps, theta in CASES:
    print(f"(({q!r}, {sigma}, {steps}, {theta}), {difference(q, sigma, steps, theta)!r}),")
