"""Held-out reference values for the RDP of the Poisson-subsampled Gaussian (tests/subsampled.rs).

Independent of the series the library sums: A_alpha = E_{z~N(0,s^2)}[((1-q) + q exp((2z-1)/(2 s^2)))^alpha]
by mpmath numerical integration at 50 digits, and eps(alpha) = ln(A_alpha)/(alpha - 1)
[Mironov, Talwar & Zhang 2019, Sec. 3]. The end-to-end rows are Opacus 1.6's RDPAccountant
(a separate implementation of the same analysis) for whole DP-SGD runs, and dp_accounting 0.6's
RdpAccountant at its default orders (the `dp_accounting` rows), and its PLDAccountant at grid
interval 1e-4 (the `pld` rows: an upper bound of its own, by connecting the dots).

Run with mpmath (and opacus for the `opacus` rows):  python subsampled_refs.py > subsampled_refs.txt
"""
import mpmath as mp

mp.mp.dps = 50

def rdp(q, s, a):
    q, s, a = mp.mpf(q), mp.mpf(s), mp.mpf(a)
    f = lambda z: mp.npdf(z, 0, s) * ((1 - q) + q * mp.e ** ((2 * z - 1) / (2 * s * s))) ** a
    # the integrand's mass lies within a few sigma of 0 and of the shifted mode
    peak = a * 1 + 10 * s
    A = mp.quad(f, [-mp.inf, -20 * s, 0, 1, peak, mp.inf])
    return mp.log(A) / (a - 1)

cases = [(0.004, 1.3), (0.01, 0.8), (0.1, 2.0), (0.5, 5.0), (0.001, 0.6), (0.02, 1.0)]
orders = [1.5, 2, 2.5, 3, 4.75, 8, 10.9, 16, 32]
for q, s in cases:
    for a in orders:
        print(f"rdp {q!r} {s!r} {a!r} {mp.nstr(rdp(q, s, a), 20)}")

try:
    from opacus.accountants import RDPAccountant
    for q, s, steps, delta in [(240 / 60000, 1.3, 3750, 1e-5), (0.01, 1.0, 1000, 1e-5), (0.05, 2.0, 500, 1e-6)]:
        acc = RDPAccountant()
        acc.history = [(s, q, steps)]
        eps, alpha = acc.get_privacy_spent(delta=delta)
        print(f"opacus {q!r} {s!r} {steps} {delta!r} {eps!r} {float(alpha)!r}")
except ImportError:
    pass

try:
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant as rdpa
    for q, s, steps, delta in [(240 / 60000, 1.3, 3750, 1e-5), (0.01, 1.0, 1000, 1e-5), (0.05, 2.0, 500, 1e-6)]:
        acc = rdpa.RdpAccountant()
        acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s)), steps))
        eps, alpha = acc.get_epsilon_and_optimal_order(delta)
        print(f"dp_accounting {q!r} {s!r} {steps} {delta!r} {float(eps)!r} {float(alpha)!r}")
except ImportError:
    pass

try:
    from dp_accounting.pld import pld_privacy_accountant as plda
    for q, s, steps, delta in [(240 / 60000, 1.3, 3750, 1e-5), (0.01, 1.0, 1000, 1e-5), (0.05, 2.0, 500, 1e-6)]:
        acc = plda.PLDAccountant(value_discretization_interval=1e-4)
        acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s)), steps)
        print(f"pld {q!r} {s!r} {steps} {delta!r} {float(acc.get_epsilon(delta))!r}")
except ImportError:
    pass
