"""Independent reference values for the accounting tests (tests/accounting_reference.rs).

Computed with mpmath at 60 significant digits by methods that share no code or derivation
with the Rust implementation:
  * cks is minimised over alpha by golden-section search on the objective itself (the Rust
    code solves the first-order condition instead);
  * the Gaussian-DP curve uses mpmath's ncdf, and its inverses mpmath's findroot;
  * the RDP-curve conversion is Opacus's `get_privacy_spent` formula over Opacus's
    DEFAULT_ALPHAS for the (non-subsampled) Gaussian mechanism.
Run: python3 tests/reference/accounting_refs.py > tests/reference/accounting_refs.txt
"""
from mpmath import mp, mpf, log, sqrt, exp, ncdf, findroot

mp.dps = 60

def bun_steinke(rho, delta):
    return rho + 2 * sqrt(rho * log(1 / delta))

def cks_obj(alpha, rho, delta):
    return rho * alpha + log((alpha - 1) / alpha) - (log(delta) + log(alpha)) / (alpha - 1)

def cks(rho, delta):
    # golden-section search over t = log(alpha - 1) in [-30, 40]
    f = lambda t: cks_obj(1 + exp(t), rho, delta)
    a, b = mpf(-30), mpf(40)
    g = (sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(400):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a); fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a); fd = f(d)
    return max(f((a + b) / 2), mpf(0))

def gdelta(mu, eps):
    return ncdf(-eps / mu + mu / 2) - exp(eps) * ncdf(-eps / mu - mu / 2)

def geps(mu, delta):
    if gdelta(mu, 0) <= delta:
        return mpf(0)
    return findroot(lambda e: gdelta(mu, e) - delta, (mpf(0), cks(mu * mu / 2, delta)), solver='anderson')

def gmu(eps, delta):
    return bisect_inc(lambda m: gdelta(m, eps), delta, mpf('1e-9'), mpf(100))

def bisect_inc(f, target, lo, hi):
    for _ in range(300):
        mid = (lo + hi) / 2
        if f(mid) <= target: lo = mid
        else: hi = mid
    return lo

def cks_max_rho(eps, delta):
    return bisect_inc(lambda r: cks(r, delta), eps, mpf(0), eps)

OPACUS_ALPHAS = [1 + x / mpf(10) for x in range(1, 100)] + [mpf(a) for a in range(12, 64)]

def opacus_eps(sigma, steps, delta):
    best = None
    for a in OPACUS_ALPHAS:
        rdp = steps * a / (2 * sigma ** 2)
        e = rdp - (log(delta) + log(a)) / (a - 1) + log((a - 1) / a)
        best = e if best is None or e < best else best
    return best

def fmt(x):
    return mp.nstr(x, 17, min_fixed=-5, max_fixed=5)

print("# rho delta bun_steinke cks gaussian_exact")
for rho in ['1e-6', '1e-3', '0.05', '0.78125', '10']:
    for delta in ['1e-5', '1e-12', '0.1']:
        r, d = mpf(rho), mpf(delta)
        print("zcdp", rho, delta, fmt(bun_steinke(r, d)), fmt(cks(r, d)), fmt(geps(sqrt(2 * r), d)))
print("# mu epsilon gaussian_delta")
for mu in ['0.01', '0.5', '1', '3']:
    for eps in ['0', '0.5', '2', '8']:
        print("gdelta", mu, eps, fmt(gdelta(mpf(mu), mpf(eps))))
print("# epsilon delta max_rho_bun_steinke max_rho_cks max_rho_gaussian")
for eps in ['0.1', '0.5', '1', '4']:
    for delta in ['1e-5', '1e-10']:
        e, d = mpf(eps), mpf(delta)
        bs = (sqrt(log(1 / d) + e) - sqrt(log(1 / d))) ** 2
        print("maxrho", eps, delta, fmt(bs), fmt(cks_max_rho(e, d)), fmt(gmu(e, d) ** 2 / 2))
print("# sigma steps delta opacus_default_alphas_epsilon")
for sigma, steps in [('1.1', '1'), ('8', '100'), ('30', '60'), ('2', '1000')]:
    print("opacus", sigma, steps, "1e-5", fmt(opacus_eps(mpf(sigma), mpf(steps), mpf('1e-5'))))
