# Run: python3 -m venv /tmp/sp && /tmp/sp/bin/pip install scipy && /tmp/sp/bin/python experiments/audit/one_run_reference.py
# Independent reference for the one-run audit's p-value and bound: [SNJ23] Thm 3.1 with scipy's binomial.
import math, scipy.stats as st
def p_value(m, r, v, eps, delta):
    q = 1/(1+math.exp(-eps))
    beta = st.binom.sf(v-1, r, q)
    alpha, s = 0.0, 0.0
    for i in range(1, v+1):
        s += st.binom.pmf(v-i, r, q)
        alpha = max(alpha, s/i)
    return min(beta + alpha*delta*2*m, 1)
def bound(m, r, v, delta, level):
    lo, hi = 0.0, 1.0
    if p_value(m,r,v,0,delta) >= level: return 0.0
    while p_value(m,r,v,hi,delta) < level: lo, hi = hi, hi*2
    for _ in range(60):
        mid=(lo+hi)/2
        if p_value(m,r,v,mid,delta) < level: lo=mid
        else: hi=mid
    return lo
for (m,r,v,eps,d) in [(1000,100,90,1.0,1e-5),(1000,1000,700,0.5,1e-5),(10000,200,190,2.0,1e-6),(500,50,45,3.0,1e-3)]:
    print("p", m,r,v,eps,d, repr(p_value(m,r,v,eps,d)))
for (m,r,v,d,lvl) in [(1000,100,90,1e-5,0.05),(1000,1000,700,1e-5,0.05),(10000,200,190,1e-6,0.01),(500,50,45,1e-3,0.05),(1000,20,20,1e-5,0.05/6)]:
    print("b", m,r,v,d,lvl, repr(bound(m,r,v,d,lvl)))
# p 1000 100 90 1.0 1e-05 np.float64(0.0008412885614385305)
# p 1000 1000 700 0.5 1e-05 np.float64(0.00018675558679804292)
# p 10000 200 190 2.0 1e-06 np.float64(0.0016273316215569267)
# p 500 50 45 3.0 0.001 np.float64(0.9910248680293853)
# b 1000 100 90 1e-05 0.05 1.6261434806957262
# b 1000 1000 700 1e-05 0.05 0.7317404494186919
# b 10000 200 190 1e-06 0.01 2.2050460592141463
# b 500 50 45 0.001 0.05 0.4826899130049288
# b 1000 20 20 1e-05 0.008333333333333333 1.2146926575749928

# Independent reference for the f-DP analysis ([MMC25], crates/dpgd-accounting/src/audit/fdp.rs): the recursion
# from (p c/m, p (c'-c)/m) with g(x) = f_mu(1-x) = Phi(Phi^-1(x) - mu), and sup{mu : refuted} by plain bisection.
from scipy.stats import norm
def refuted(m, cap, c, mu, p):
    if c == 0: return False
    r, h = p*c/m, p*(cap-c)/m
    for i in range(c-1, -1, -1):
        hn = max(h, norm.cdf(norm.ppf(min(r, 1.0)) - mu))
        r, h = r + i/(cap-i)*(hn-h), hn
    return r + h > cap/m
def mu_bound(m, cap, c, p):
    if not refuted(m, cap, c, 1e-9, p): return 0.0
    lo, hi = 1e-9, 64.0
    for _ in range(60):
        mid = (lo+hi)/2
        if refuted(m, cap, c, mid, p): lo = mid
        else: hi = mid
    return lo
for (m, cap, c, p) in [(1000,100,95,0.05),(1000,1000,700,0.05),(5000,250,240,0.05/12),(100,100,60,0.05)]:
    print("mu", m, cap, c, p, repr(mu_bound(m, cap, c, p)))
