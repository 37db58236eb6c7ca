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

# --- Strict references: "never understates" (tests/accounting_reference.rs, strict_*) -------
# Inputs are exact binary doubles (mpf(float)), so the comparison is with the exact value of
# the conversion at exactly the f64 the Rust code receives. Printed with 21 digits.
print("# strict: inputs are exact doubles; rho delta bun_steinke cks gaussian_exact(mu = sqrt(2 rho) exactly)")

def sfmt(x):
    return mp.nstr(x, 21, min_fixed=-5, max_fixed=5)

def ex(x):
    return mpf(float(x))

def geps_strict(mu, delta):
    # Smallest eps with gdelta(mu, eps) <= delta, by bisection (gdelta is decreasing in eps).
    if gdelta(mu, 0) <= delta:
        return mpf(0)
    lo, hi = mpf(0), cks(mu * mu / 2, delta) + 1
    for _ in range(220):
        mid = (lo + hi) / 2
        if gdelta(mu, mid) <= delta: hi = mid
        else: lo = mid
    return hi

RHOS = ['1e-8', '1e-6', '1e-4', '0.01', '0.1', '0.5', '1', '3', '10', '30', '100']
DELTAS = ['1e-300', '1e-100', '1e-30', '1e-12', '1e-8', '1e-5', '1e-3', '0.05', '0.3', '0.9']
for rho in RHOS:
    for delta in DELTAS:
        r, d = ex(rho), ex(delta)
        print("strict_zcdp", rho, delta, sfmt(bun_steinke(r, d)), sfmt(cks(r, d)), sfmt(geps_strict(sqrt(2 * r), d)))

print("# strict: mu epsilon gaussian_delta (exact doubles)")
for mu in ['0.01', '0.1', '0.5', '1', '2', '5', '10', '30']:
    for eps in ['0', '0.1', '0.5', '1', '2', '5', '8', '20', '50', '100']:
        v = gdelta(ex(mu), ex(eps))
        if v > mpf('1e-300'):
            print("strict_gdelta", mu, eps, sfmt(v))

def cks_max_rho_dual(eps, delta):
    # rho* = max over alpha of (eps - g(alpha)) / alpha, g(alpha) = ln(1 - 1/alpha) - (ln delta + ln alpha)/(alpha - 1):
    # a different derivation from the Rust code's bisection on the forward conversion.
    def h(t):
        a = 1 + exp(t)
        g = log((a - 1) / a) - (log(delta) + log(a)) / (a - 1)
        return (eps - g) / a
    a, b = mpf(-40), mpf(60)
    gr = (sqrt(5) - 1) / 2
    c, d = b - gr * (b - a), a + gr * (b - a)
    hc, hd = h(c), h(d)
    for _ in range(300):
        if hc > hd:
            b, d, hd = d, c, hc
            c = b - gr * (b - a); hc = h(c)
        else:
            a, c, hc = c, d, hd
            d = a + gr * (b - a); hd = h(d)
    return h((a + b) / 2)

def gmu_strict(eps, delta):
    lo, hi = mpf(0), mpf(1)
    while gdelta(hi, eps) <= delta:
        hi *= 2
    for _ in range(220):
        mid = (lo + hi) / 2
        if gdelta(mid, eps) <= delta: lo = mid
        else: hi = mid
    return lo

print("# strict: epsilon delta max_rho_bun_steinke max_rho_cks max_rho_gaussian (exact doubles)")
for eps in ['0.01', '0.1', '0.5', '1', '2', '4', '10', '50']:
    for delta in ['1e-300', '1e-30', '1e-10', '1e-5', '1e-2', '0.5']:
        e, d = ex(eps), ex(delta)
        bs = (sqrt(log(1 / d) + e) - sqrt(log(1 / d))) ** 2
        print("strict_maxrho", eps, delta, sfmt(bs), sfmt(cks_max_rho_dual(e, d)), sfmt(gmu_strict(e, d) ** 2 / 2))

print("# strict: order rdp delta mironov cks_at_order (one-order RDP curves, exact doubles)")
for alpha in ['1.0001', '1.5', '2', '8', '32', '1000', '1e6']:
    for rdp in ['0', '1e-6', '0.01', '1', '50']:
        for delta in ['1e-300', '1e-5', '0.1']:
            a, r, d = ex(alpha), ex(rdp), ex(delta)
            mir = r + log(1 / d) / (a - 1)
            ck = max(r + log((a - 1) / a) - (log(d) + log(a)) / (a - 1), mpf(0))
            print("strict_rdp", alpha, rdp, delta, sfmt(mir), sfmt(ck))
