"""Independent reference values for the audit statistics (tests/audit.rs).

Computed with mpmath, sharing no code or method with the Rust implementation:
  * the normal quantile as sqrt(2) * erfinv(2p - 1) at 400 digits (so that 2p - 1 keeps
    the tail p = 1e-300 exactly); the Rust code runs Newton's method on ln Phi;
  * Clopper-Pearson bounds as quantiles of the beta distribution, by bisection on the
    regularized incomplete beta function I_x(a, b), evaluated at 50 digits by its continued
    fraction (modified Lentz) with mpmath's loggamma for the prefactor (mpmath's own betainc
    does not converge for a, b in the millions); the Rust code sums binomial terms;
  * the two-sided interval at confidence c is (B^-1(a/2; k, n-k+1), B^-1(1-a/2; k+1, n-k)),
    a = 1 - c, with 0 for k = 0 and 1 for k = n.
Inputs are exact doubles. Run: python3 tests/reference/audit_refs.py > tests/reference/audit_refs.txt
"""
from mpmath import mp, mpf, sqrt, erfinv, loggamma, log, exp

def fmt(x):
    return mp.nstr(x, 21, min_fixed=-5, max_fixed=5)

mp.dps = 400
print("# p normal_quantile")
for p in ['1e-300', '1e-200', '1e-100', '1e-20', '1e-10', '1e-5', '0.001', '0.01', '0.025', '0.075', '0.1',
          '0.3', '0.4999999999', '0.5', '0.5000000001', '0.7', '0.925', '0.975', '0.999', '0.9999999999']:
    x = mpf(float(p))
    print("quantile", p, fmt(sqrt(2) * erfinv(2 * x - 1)))

mp.dps = 50

def betacf(a, b, x):
    tiny = mpf('1e-300')
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = mpf(1), 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10**6):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1 + aa * d; d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c; c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1 + aa * d; d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c; c = c if abs(c) > tiny else tiny
        de = d * c
        h *= de
        if abs(de - 1) < mpf(10) ** (-45):
            return h
    raise RuntimeError("betacf did not converge")

def betainc_reg(a, b, x):
    if x <= 0: return mpf(0)
    if x >= 1: return mpf(1)
    a, b = mpf(a), mpf(b)
    front = exp(loggamma(a + b) - loggamma(a) - loggamma(b) + a * log(x) + b * log(1 - x))
    if x < (a + 1) / (a + b + 2):
        return front * betacf(a, b, x) / a
    return 1 - front * betacf(b, a, 1 - x) / b

def beta_quantile(q, a, b):
    # Bracket around the mean a/(a+b), +-12 standard deviations, then bisect.
    m = mpf(a) / (a + b)
    sd = sqrt(m * (1 - m) / (a + b + 1))
    lo, hi = max(mpf(0), m - 12 * sd), min(mpf(1), m + 12 * sd)
    for _ in range(170):
        mid = (lo + hi) / 2
        if betainc_reg(a, b, mid) < q: lo = mid
        else: hi = mid
    return (lo + hi) / 2

print("# k n confidence cp_lower cp_upper")
for k, n, c in [(0, 10, 0.95), (3, 10, 0.95), (10, 10, 0.95), (50, 100, 0.95), (1, 1000, 0.99),
                (5000, 10000, 0.95), (17, 2500, 0.975), (123456, 10000000, 0.95), (0, 10000000, 0.95)]:
    a = 1 - mpf(float(c))
    lo = mpf(0) if k == 0 else beta_quantile(a / 2, k, n - k + 1)
    hi = mpf(1) if k == n else beta_quantile(1 - a / 2, k + 1, n - k)
    print("cp", k, n, c, fmt(lo), fmt(hi))
