//! Budgets as the decimals users type.
//!
//! A user who asks for ε = 1 in rounds of 0.1 means ten rounds; but the binary float nearest
//! 0.1 is 0.1000000000000000055…, so ten of them, summed with the round-up arithmetic every
//! privacy quantity gets, exceed 1 and a filter allows nine. Tumult Analytics avoids this by
//! keeping budgets as exact rationals; here a [`Decimal`] keeps a typed budget exactly
//! (`"0.1"` is 1/10), sums and products of decimals stay exact while they fit 128 bits, and a
//! decimal becomes a float only at the end, rounded up ([`Decimal::to_f64_up`]). A float
//! computed by the library is never read as a decimal: that could understate it (the decimal
//! nearest a rounded-up float can lie below the quantity it bounds); decimals enter only from
//! text ([`Decimal::from_str`]).
//!
//! Why by hand: the exact operations needed are four (parse, add, multiply, compare) on
//! non-negative values, plus a round-up conversion that must be exact where the value is a
//! float; a big-number crate brings neither the directed rounding nor the small, `Copy` value
//! the filters' sufficient statistics need.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// A non-negative decimal `mantissa × 10^exponent`, exactly; normalised (no trailing zero in
/// the mantissa, and 0 is 0 × 10⁰), so equal values are equal structs.
///
/// # Examples
/// ```
/// use dpgd_accounting::decimal::Decimal;
/// let tenth: Decimal = "0.1".parse().unwrap();
/// let ten_tenths = tenth.checked_mul_u64(10).unwrap();
/// assert_eq!(ten_tenths, "1".parse().unwrap());
/// assert_eq!(ten_tenths.to_f64_up(), 1.0);
/// assert!(tenth.to_f64_up() >= 0.1); // 0.1 is not a float: the next one up
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Decimal {
    mantissa: u128,
    exponent: i32,
}

/// The exponents a parsed decimal may have: far beyond f64's range, small enough that sums
/// and products of a few never overflow an `i32`.
const MAX_EXPONENT: i32 = 100_000;

impl Decimal {
    /// Zero.
    pub const ZERO: Decimal = Decimal { mantissa: 0, exponent: 0 };
    /// One.
    pub const ONE: Decimal = Decimal { mantissa: 1, exponent: 0 };

    fn new(mut mantissa: u128, mut exponent: i32) -> Option<Self> {
        if mantissa == 0 {
            return Some(Self::ZERO);
        }
        while mantissa.is_multiple_of(10) {
            mantissa /= 10;
            exponent = exponent.checked_add(1)?;
        }
        (exponent.abs() <= 4 * MAX_EXPONENT).then_some(Self { mantissa, exponent })
    }

    /// `self + other`, exactly; `None` if the exact sum does not fit.
    #[must_use]
    pub fn checked_add(self, other: Self) -> Option<Self> {
        if self.mantissa == 0 || other.mantissa == 0 {
            return Some(if self.mantissa == 0 { other } else { self });
        }
        let to = self.exponent.min(other.exponent);
        Self::new(scaled_to(self, to)?.checked_add(scaled_to(other, to)?)?, to)
    }

    /// `self × other`, exactly; `None` if the exact product does not fit.
    #[must_use]
    pub fn checked_mul(self, other: Self) -> Option<Self> {
        Self::new(self.mantissa.checked_mul(other.mantissa)?, self.exponent.checked_add(other.exponent)?)
    }

    /// `self × r`, exactly; `None` if the exact product does not fit.
    #[must_use]
    pub fn checked_mul_u64(self, r: u64) -> Option<Self> {
        Self::new(self.mantissa.checked_mul(u128::from(r))?, self.exponent)
    }

    /// A float ≥ the value (`+∞` above `f64::MAX`): for a mantissa below 2⁵³ and an exponent
    /// within ±22, the value itself when it is a float and the float just above it otherwise;
    /// beyond that, the float nearest or the one above it (never below the value).
    #[must_use]
    pub fn to_f64_up(self) -> f64 {
        self.bounds().1
    }

    /// A float ≤ the value, as [`to_f64_up`](Self::to_f64_up) from below.
    #[must_use]
    pub fn to_f64_down(self) -> f64 {
        self.bounds().0
    }

    /// The float nearest the value (for display).
    #[must_use]
    pub fn to_f64_nearest(self) -> f64 {
        format!("{}e{}", self.mantissa, self.exponent).parse().unwrap_or(f64::INFINITY)
    }

    /// Floats (below, above) the value, equal when the value is a float.
    fn bounds(self) -> (f64, f64) {
        let (m, e) = (self.mantissa, self.exponent);
        let nearest = self.to_f64_nearest();
        // m < 2⁵³ and 10^|e| ≤ 10²² are floats, so one operation's residual, exact by FMA,
        // says on which side of the value its rounded result lies.
        if m < 1 << 53 && e.abs() <= 22 && nearest.is_finite() {
            let (m, p) = (m as f64, 10f64.powi(e.abs()));
            // value − nearest, in sign: m·p − q for a product; (m − q·p)/p for a quotient.
            let residual = if e >= 0 { m.mul_add(p, -nearest) } else { (-nearest).mul_add(p, m) };
            return match residual.partial_cmp(&0.0) {
                Some(Ordering::Greater) => (nearest, nearest.next_up()),
                Some(Ordering::Less) => (nearest.next_down(), nearest),
                _ => (nearest, nearest),
            };
        }
        // Otherwise parse's nearest is within half an ulp, on an unknown side.
        if nearest.is_infinite() { (f64::MAX, nearest) } else { (nearest.next_down().max(0.0), nearest.next_up()) }
    }
}

/// `d`'s mantissa at exponent `to` ≤ its own, or `None` if it does not fit.
fn scaled_to(d: Decimal, to: i32) -> Option<u128> {
    let shift = u32::try_from(d.exponent.checked_sub(to)?).ok()?;
    d.mantissa.checked_mul(10u128.checked_pow(shift)?)
}

impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.mantissa == 0, other.mantissa == 0) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            _ => {}
        }
        let to = self.exponent.min(other.exponent);
        // The side at the smaller exponent is its own mantissa; the other, scaled, either fits
        // (compare) or overflows u128 and so is the larger.
        match (scaled_to(*self, to), scaled_to(*other, to)) {
            (Some(a), Some(b)) => a.cmp(&b),
            (None, _) => Ordering::Greater,
            (_, None) => Ordering::Less,
        }
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Why a text is not a [`Decimal`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseDecimalError(&'static str);

impl fmt::Display for ParseDecimalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for ParseDecimalError {}

impl FromStr for Decimal {
    type Err = ParseDecimalError;

    /// A non-negative decimal: digits with an optional point and exponent (`1`, `0.1`,
    /// `2.5e-3`, `1E6`), at most 38 significant digits.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why| Err(ParseDecimalError(why));
        let s = s.trim().strip_prefix('+').unwrap_or(s.trim());
        let (number, exp) = match s.find(['e', 'E']) {
            Some(i) => (&s[..i], Some(&s[i + 1..])),
            None => (s, None),
        };
        let exp: i32 = match exp.map(str::parse::<i32>) {
            None => 0,
            Some(Ok(e)) if e.abs() <= MAX_EXPONENT => e,
            Some(_) => return bad("the exponent after `e` must be an integer within ±100000"),
        };
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        if int.is_empty() && frac.is_empty() || !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
            return bad("expected a non-negative decimal number such as 1, 0.1 or 2.5e-3");
        }
        let digits = format!("{int}{frac}");
        // Trailing zeros move into the exponent: 1.000…0 is 1 however many zeros follow.
        let trimmed = digits.trim_end_matches('0');
        let zeros = i32::try_from(digits.len() - trimmed.len()).map_err(|_| ParseDecimalError("too many digits"))?;
        let significant = trimmed.trim_start_matches('0');
        if significant.len() > 38 {
            return bad("more than 38 significant digits");
        }
        let mantissa = if significant.is_empty() {
            0
        } else {
            significant.parse::<u128>().map_err(|_| ParseDecimalError("not a number"))?
        };
        let frac_len = i32::try_from(frac.len()).map_err(|_| ParseDecimalError("too many digits"))?;
        let exponent = exp.checked_sub(frac_len).and_then(|e| e.checked_add(zeros));
        exponent.and_then(|e| Decimal::new(mantissa, e)).ok_or(ParseDecimalError("out of range"))
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.exponent >= 0 && self.exponent <= 20 {
            write!(f, "{}{}", self.mantissa, "0".repeat(self.exponent as usize))
        } else {
            write!(f, "{}e{}", self.mantissa, self.exponent)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    #[test]
    fn typed_decimals_add_multiply_and_compare_exactly() {
        assert_eq!(d("0.1").checked_mul_u64(10), Some(d("1")));
        let mut sum = Decimal::ZERO;
        for _ in 0..10 {
            sum = sum.checked_add(d("0.1")).unwrap();
        }
        assert_eq!(sum, d("1.000"));
        assert_eq!(d("0.01").checked_mul(d("0.01")).unwrap().checked_mul_u64(10_000), Some(d("1")));
        assert!(d("0.3") > d("0.29999999999999999999") && d("1e-400") > Decimal::ZERO);
        assert!(d("1e300") > d("99999999999999999999999999999999999999e100"));
        assert_eq!(d("2.5E-3"), d("0.0025"));
        assert_eq!(d(&format!("1.{}", "0".repeat(60))), d("1"), "trailing zeros are not significant");
    }

    #[test]
    fn conversion_is_exact_for_floats_and_the_next_float_up_otherwise() {
        assert_eq!(d("1").to_f64_up(), 1.0);
        assert_eq!(d("0.5").to_f64_up(), 0.5);
        assert_eq!(d("19.5e3").to_f64_up(), 19_500.0);
        assert_eq!(d("0.1").to_f64_up(), 0.1, "the float nearest 1/10 is above it");
        assert_eq!(d("0.3").to_f64_up(), 0.3f64.next_up(), "the float nearest 3/10 is below it");
        assert_eq!(d("1e-400").to_f64_up(), f64::from_bits(1));
        assert_eq!(d("1e400").to_f64_up(), f64::INFINITY);
        assert_eq!((d("0.3").to_f64_down(), d("0.1").to_f64_down()), (0.3, 0.1f64.next_down()));
        assert_eq!(d("0").to_f64_up(), 0.0);
        // Elsewhere the float nearest or the one above it (never more than an ulp loose).
        for s in ["0.7", "123456789.123456789", "3e-310", "12345678901234567890123", "1e-30"] {
            let (up, nearest) = (d(s).to_f64_up(), s.parse::<f64>().unwrap());
            assert!(up == nearest || up == nearest.next_up(), "{s}: {up}");
        }
    }

    #[test]
    fn what_is_not_a_non_negative_decimal_is_refused() {
        for s in
            ["", ".", "-1", "1e", "abc", "1.2.3", "inf", "NaN", "1e999999", "123456789012345678901234567890123456789"]
        {
            assert!(s.parse::<Decimal>().is_err(), "{s}");
        }
    }

    #[test]
    fn overflow_is_none_not_a_wrong_value() {
        let big = d("99999999999999999999999999999999999999");
        assert_eq!(big.checked_mul(big), None);
        assert_eq!(big.checked_add(d("1e-10")), None);
    }
}
