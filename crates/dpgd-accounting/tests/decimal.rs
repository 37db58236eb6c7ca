//! Typed budgets as exact decimals: property tests of the parser and the exact arithmetic.

use dpgd_accounting::decimal::Decimal;
use proptest::prelude::*;

fn decimal() -> impl Strategy<Value = (u64, i32)> {
    (0u64..1_000_000_000_000, -30i32..30)
}

fn d((m, e): (u64, i32)) -> Decimal {
    format!("{m}e{e}").parse().unwrap()
}

proptest! {
    /// Any text is a decimal or an error, never a panic (byte mutations of valid numbers included).
    #[test]
    fn any_text_parses_or_is_refused(s in "\\PC{0,40}", (m, e) in decimal(), flip in 0usize..20, byte in any::<u8>()) {
        let _ = s.parse::<Decimal>();
        let mut bytes = format!("{m}.{}e{e}", m % 997).into_bytes();
        let i = flip % bytes.len();
        bytes[i] = byte;
        if let Ok(t) = String::from_utf8(bytes) {
            let _ = t.parse::<Decimal>();
        }
    }

    /// The floats around a decimal bracket it, and are the nearest float or one away.
    #[test]
    fn the_round_up_and_down_floats_bracket_the_value(a in decimal()) {
        let x = d(a);
        let (lo, hi, near) = (x.to_f64_down(), x.to_f64_up(), x.to_f64_nearest());
        prop_assert!(lo <= near && near <= hi && hi <= near.next_up() && lo >= near.next_down().max(0.0));
        // Exact values are their own bounds: integers below 2⁵³ are floats.
        let int = d((a.0, 0));
        prop_assert_eq!((int.to_f64_down(), int.to_f64_up()), (a.0 as f64, a.0 as f64));
    }

    /// Sums and products are exact: commutative, associative where they fit, consistent with
    /// the order, and never below the floats' sum rounded down.
    #[test]
    fn arithmetic_is_exact(a in decimal(), b in decimal(), c in decimal(), r in 0u64..1_000_000) {
        let (x, y, z) = (d(a), d(b), d(c));
        prop_assert_eq!(x.checked_add(y), y.checked_add(x));
        if let (Some(l), Some(rr)) = (x.checked_add(y).and_then(|s| s.checked_add(z)), y.checked_add(z).and_then(|s| x.checked_add(s))) {
            prop_assert_eq!(l, rr);
        }
        if let Some(s) = x.checked_add(y) {
            prop_assert!(s >= x && s >= y);
            prop_assert!(s.to_f64_up() >= x.to_f64_down() + y.to_f64_down());
        }
        if let Some(p) = x.checked_mul_u64(r) {
            let mut sum = Decimal::ZERO;
            if r < 50 {
                for _ in 0..r { sum = sum.checked_add(x).unwrap(); }
                prop_assert_eq!(p, sum);
            }
        }
        prop_assert_eq!(x.checked_mul(y), y.checked_mul(x));
        prop_assert_eq!(x.cmp(&y), x.to_string().parse::<Decimal>().unwrap().cmp(&y));
    }
}
