//! Kubernetes quantities (`1500m`, `2`, `0.5`, `1k`, `1Ki`, `1e3`) to milli-units, rounded up as
//! `resource.Quantity.MilliValue()` does, or to a float as `AsApproximateFloat64()`. Exact decimal
//! arithmetic: `0.1` is 100 milli-units.

use anyhow::{Context, bail};

/// `MilliValue()` of a quantity string.
pub fn milli_value(s: &str) -> anyhow::Result<i64> {
    let (num, den) = parse(s)?;
    let milli_num = num.checked_mul(1000).context("quantity too large")?;
    // MilliValue is ScaledValue(Milli): "ceil(q / 10^scale)" (quantity.go), for either sign.
    let milli = milli_num.div_euclid(den) + i128::from(milli_num.rem_euclid(den) != 0);
    i64::try_from(milli).context("quantity too large")
}

/// `AsApproximateFloat64()` of a quantity string: what the HPA controller reads a `tolerance`
/// with (`0.05`, `50m` and `5e-2` are all 0.05).
pub fn approximate_f64(s: &str) -> anyhow::Result<f64> {
    let (num, den) = parse(s)?;
    Ok(num as f64 / den as f64)
}

/// The quantity as an exact fraction `num / den` (den > 0).
fn parse(s: &str) -> anyhow::Result<(i128, i128)> {
    let s = s.trim();
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = body.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(body.len());
    let (number, suffix) = body.split_at(num_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        bail!("{s:?} is not a quantity");
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    let digits: i128 = format!("{int_part}{frac_part}").parse().with_context(|| format!("{s:?} is not a quantity"))?;
    // value = digits * 10^-frac * multiplier
    let den: i128 = 10i128.pow(frac_part.len() as u32);
    let (mul, div) = suffix_factor(suffix).with_context(|| format!("{s:?}: unknown suffix {suffix:?}"))?;
    let num = digits.checked_mul(mul).context("quantity too large")?;
    let den = den.checked_mul(div).context("quantity too precise")?;
    Ok((if negative { -num } else { num }, den))
}

/// The suffix as a fraction `mul / div`.
fn suffix_factor(suffix: &str) -> Option<(i128, i128)> {
    let dec = |e: i32| if e >= 0 { (10i128.pow(e as u32), 1) } else { (1, 10i128.pow((-e) as u32)) };
    Some(match suffix {
        "" => (1, 1),
        "n" => dec(-9),
        "u" => dec(-6),
        "m" => dec(-3),
        "k" => dec(3),
        "M" => dec(6),
        "G" => dec(9),
        "T" => dec(12),
        "P" => dec(15),
        "E" => dec(18),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        s if s.starts_with(['e', 'E']) => {
            let e: i32 = s[1..].parse().ok()?;
            if e.abs() > 18 {
                return None;
            }
            dec(e)
        }
        _ => return None,
    })
}

/// Milli-units as a canonical-enough quantity (`1500m`, `2`).
pub fn format_milli(m: i64) -> String {
    if m % 1000 == 0 { format!("{}", m / 1000) } else { format!("{m}m") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_kube_reads_them() {
        for (q, milli) in [
            ("1500m", 1500),
            ("2", 2000),
            ("873m", 873),
            ("0", 0),
            ("0.1", 100),
            ("1.5", 1500),
            ("1k", 1_000_000),
            ("1Ki", 1_024_000),
            ("1e3", 1_000_000),
            ("1E-3", 1),
            ("100u", 1),
            ("1n", 1),
            ("-1500m", -1500),
            ("+2", 2000),
        ] {
            assert_eq!(milli_value(q).unwrap(), milli, "{q}");
        }
        for bad in ["", "m", "1.2.3", "1x", "abc", "1 m"] {
            assert!(milli_value(bad).is_err(), "{bad:?}");
        }
        assert_eq!(format_milli(1500), "1500m");
        for (q, f) in [("0.05", 0.05), ("50m", 0.05), ("5e-2", 0.05), ("0", 0.0), ("1", 1.0), ("2.5", 2.5)] {
            assert_eq!(approximate_f64(q).unwrap(), f, "{q}");
        }
        assert_eq!(format_milli(3000), "3");
    }
}
