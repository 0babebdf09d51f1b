//! The one duration syntax of the binaries' flags.

use std::time::Duration;

/// A duration flag: `250ms`, `1.5s`, `2m`, `1h 30m`, `500us`, `0` (`humantime`). A bare number
/// other than 0 is refused: seconds or milliseconds would be a guess.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| format!("not a duration: {s:?} ({e}; write 250ms, 10s or 2m)"))
}

/// A duration flag that took a number of seconds before it took a duration: a bare number is
/// still seconds (`5`, `0.5`); anything else is [`parse_duration`]'s syntax.
pub fn parse_duration_or_seconds(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(Duration::from_secs_f64(v)),
        Ok(_) => Err(format!("not a duration: {s:?}")),
        Err(_) => parse_duration(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_humantime_and_a_bare_number_is_refused() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration(" 2m "), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["10", "-1s", "soon", ""] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_old_form_is_seconds() {
        assert_eq!(parse_duration_or_seconds("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration_or_seconds("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration_or_seconds("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration_or_seconds("-1").is_err());
        assert!(parse_duration_or_seconds("inf").is_err());
    }
}
