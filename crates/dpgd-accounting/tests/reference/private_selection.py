# Independent recomputation of Papernot & Steinke 2022, Thm 2 and Thm 6, at 50 digits.
from mpmath import mp, mpf, log, exp, log1p
mp.dps = 50
orders = [mpf(x) for x in ["1.5", "2", "3", "5", "8", "16", "32", "64"]]
def zcdp(rho): return [rho * a for a in orders]
def tnb_mean(eta, gamma):
    if eta == 0: return (1/gamma - 1) / log(1/gamma)
    return eta * (1 - gamma) / (gamma * (1 - gamma**eta))
def tnb(eps, eta, gamma):
    c = min([(1+eta)*log(1/gamma)] + [(1+eta)*(1-1/lh)*e + (1+eta)*log(1/gamma)/lh for lh, e in zip(orders, eps)])
    return [e + c + log(tnb_mean(eta, gamma))/(l-1) for l, e in zip(orders, eps)]
def cks_delta(eps, epsilon):
    return min([mpf(1)] + [exp((a-1)*(t-epsilon)) * (1-1/a)**(a-1) / a for a, t in zip(orders, eps)])
def poisson(eps, mu):
    return [e + mu*cks_delta(eps, log1p(1/(l-1))) + log(mu)/(l-1) for l, e in zip(orders, eps)]
for name, v in [
    ("geometric rho 0.05 gamma 0.1", tnb(zcdp(mpf("0.05")), mpf(1), mpf("0.1"))),
    ("logarithmic rho 0.05 gamma 0.05", tnb(zcdp(mpf("0.05")), mpf(0), mpf("0.05"))),
    ("eta -0.5 rho 0.2 gamma 0.01", tnb(zcdp(mpf("0.2")), mpf("-0.5"), mpf("0.01"))),
    ("poisson rho 0.05 mu 10", poisson(zcdp(mpf("0.05")), mpf(10))),
    ("poisson rho 0.5 mu 3", poisson(zcdp(mpf("0.5")), mpf(3))),
]:
    print(name, [mp.nstr(x, 17) for x in v])
print("means", mp.nstr(tnb_mean(mpf(0), mpf("0.05")),17), mp.nstr(tnb_mean(mpf("-0.5"), mpf("0.01")),17))
