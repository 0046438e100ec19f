//! Statistics over seeds: the mean with a Student-t 95 % confidence interval, and the
//! paired t-test of one policy against another over the same seeds.
//!
//! # Confidence interval
//! For `n >= 2` values with mean `m` and sample standard deviation
//! `s = sqrt(Σ(x − m)² / (n − 1))`, the 95 % interval is `m ± t(n − 1) · s / sqrt(n)`,
//! `t(df)` the two-sided 95 % (0.975 one-sided) quantile of Student's t with `df` degrees
//! of freedom ([`t_975`]). One value has a mean but no interval.
//!
//! # Paired comparison
//! Two policies run on the same seeds see the same workload and the same channel draws,
//! so their per-seed results are paired. The test is the paired t-test on the per-seed
//! differences `d_i = candidate_i − reference_i`: `t = mean(d) / (s_d / sqrt(n))` with
//! `n − 1` degrees of freedom; the difference is significant at 5 % (two-sided) when
//! `|t| > t_975(n − 1)`, which is the same as the 95 % interval of `mean(d)` excluding 0.
//! When every difference is the same (`s_d = 0`) it is significant if it is not zero (the
//! two policies differ by the same amount on every seed). The Wilcoxon signed-rank test
//! was not chosen: with 5 seeds its smallest two-sided p-value is `2 / 2⁵ = 0.0625`, so it
//! could never report a difference at 5 %. The t-test assumes the differences are roughly
//! normal; with 5 seeds that cannot be checked, so a mark is a screen, not a proof.

use std::fmt;

/// Two-sided 95 % quantiles of Student's t (`t_{0.975, df}`) for `df` 1 to 30, from the
/// NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.6.7.2 ("Critical Values of
/// the Student's t Distribution"), rounded to three decimals as printed there.
pub const T_975_SMALL: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// Larger degrees of freedom from the same table, `(df, t_{0.975, df})`; beyond the last,
/// the normal quantile 1.960.
pub const T_975_LARGE: [(u32, f64); 3] = [(40, 2.021), (60, 2.000), (100, 1.984)];

/// The normal distribution's two-sided 95 % quantile (the t quantile as `df → ∞`).
pub const Z_975: f64 = 1.960;

/// `t_{0.975, df}`: the table's value for `df <= 30`; between the larger entries, the
/// value of the next smaller listed `df` (a slightly wider, conservative interval); 1.960
/// above 100. `None` for `df == 0`.
pub fn t_975(df: u32) -> Option<f64> {
    match df {
        0 => None,
        1..=30 => Some(T_975_SMALL[df as usize - 1]),
        101.. => Some(Z_975),
        _ => Some(
            T_975_LARGE
                .iter()
                .rev()
                .find(|&&(d, _)| d <= df)
                .map_or(T_975_SMALL[29], |&(_, t)| t),
        ),
    }
}

/// Why a statistic could not be computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatsError {
    /// No values.
    Empty,
    /// The two samples of a paired comparison differ in length (left, right).
    Unpaired(usize, usize),
    /// A value is NaN or infinite (its position).
    NotFinite(usize),
}

impl fmt::Display for StatsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("no values"),
            Self::Unpaired(a, b) => write!(f, "paired samples of {a} and {b} values"),
            Self::NotFinite(i) => write!(f, "value {i} is not finite"),
        }
    }
}

impl std::error::Error for StatsError {}

/// A mean with its 95 % confidence interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    /// Values summarised.
    pub n: usize,
    /// Their mean.
    pub mean: f64,
    /// Sample standard deviation (`n − 1` denominator); `None` for one value.
    pub sd: Option<f64>,
    /// Half-width `t_975(n − 1) · sd / sqrt(n)`; `None` for one value.
    pub half_width: Option<f64>,
}

impl Interval {
    /// Lower end (`mean − half_width`); `None` without an interval.
    pub fn low(&self) -> Option<f64> {
        self.half_width.map(|h| self.mean - h)
    }

    /// Upper end (`mean + half_width`); `None` without an interval.
    pub fn high(&self) -> Option<f64> {
        self.half_width.map(|h| self.mean + h)
    }
}

fn check(values: &[f64]) -> Result<(), StatsError> {
    if values.is_empty() {
        return Err(StatsError::Empty);
    }
    match values.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(StatsError::NotFinite(i)),
        None => Ok(()),
    }
}

/// The mean of `values` and its Student-t 95 % interval (module docs).
///
/// # Errors
/// [`StatsError::Empty`] for no values, [`StatsError::NotFinite`] for a NaN or infinity.
pub fn t_interval(values: &[f64]) -> Result<Interval, StatsError> {
    check(values)?;
    let n = values.len();
    // Summed as offsets from the first value: equal values give exactly that value and a
    // zero deviation (a plain sum / n can be off in the last bit).
    let first = values[0];
    let mean = first + values.iter().map(|v| v - first).sum::<f64>() / n as f64;
    if n < 2 {
        return Ok(Interval {
            n,
            mean,
            sd: None,
            half_width: None,
        });
    }
    let ss: f64 = values.iter().map(|v| (v - mean) * (v - mean)).sum();
    let sd = (ss / (n - 1) as f64).sqrt();
    let df = u32::try_from(n - 1).unwrap_or(u32::MAX);
    let half_width = t_975(df).map(|t| t * sd / (n as f64).sqrt());
    Ok(Interval {
        n,
        mean,
        sd: Some(sd),
        half_width,
    })
}

/// A paired t-test of `candidate` against `reference` (module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairedTest {
    /// The mean per-seed difference `candidate − reference` with its 95 % interval.
    pub difference: Interval,
    /// The t statistic `mean(d) / (s_d / sqrt(n))`; `None` for one pair or when every
    /// difference is the same (`s_d = 0`).
    pub t: Option<f64>,
    /// Whether the difference is significant at 5 % two-sided (module docs).
    pub significant: bool,
}

/// The paired t-test of `candidate` against `reference`, value `i` of each from the same
/// seed.
///
/// # Errors
/// [`StatsError::Unpaired`] when the lengths differ, [`StatsError::Empty`] for no pairs,
/// [`StatsError::NotFinite`] when a value of either is NaN or infinite (its position).
pub fn paired_t(candidate: &[f64], reference: &[f64]) -> Result<PairedTest, StatsError> {
    if candidate.len() != reference.len() {
        return Err(StatsError::Unpaired(candidate.len(), reference.len()));
    }
    check(candidate)?;
    check(reference)?;
    let d: Vec<f64> = candidate
        .iter()
        .zip(reference)
        .map(|(c, r)| c - r)
        .collect();
    let difference = t_interval(&d)?;
    let (t, significant) = match (difference.sd, difference.half_width) {
        (Some(sd), Some(h)) if sd > 0.0 => {
            let se = sd / (d.len() as f64).sqrt();
            (Some(difference.mean / se), difference.mean.abs() > h)
        }
        // Every difference the same: significant unless it is zero; one pair: never.
        (Some(_), _) => (None, difference.mean != 0.0),
        (None, _) => (None, false),
    };
    Ok(PairedTest {
        difference,
        t,
        significant,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn t_quantiles_follow_the_table() {
        assert_eq!(t_975(0), None);
        assert_eq!(t_975(1), Some(12.706));
        assert_eq!(t_975(4), Some(2.776));
        assert_eq!(t_975(30), Some(2.042));
        // 31..39 take df 30's value, 40..59 df 40's, above 100 the normal quantile.
        assert_eq!(t_975(35), Some(2.042));
        assert_eq!(t_975(45), Some(2.021));
        assert_eq!(t_975(100), Some(1.984));
        assert_eq!(t_975(1_000), Some(1.960));
    }

    /// 1, 2, 3, 4, 5: mean 3, Σ(x − 3)² = 10, s = sqrt(10/4) = 1.5811388; half-width
    /// 2.776 · 1.5811388 / sqrt(5) = 2.776 · 0.7071068 = 1.9629284.
    #[test]
    fn t_interval_of_five_values_by_hand() {
        let i = t_interval(&[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        assert_eq!(i.n, 5);
        assert!(close(i.mean, 3.0));
        assert!(close(i.sd.unwrap(), 1.581_138_8));
        assert!(close(i.half_width.unwrap(), 1.962_928_4));
        assert!(close(i.low().unwrap(), 1.037_071_6));
        assert!(close(i.high().unwrap(), 4.962_928_4));
    }

    /// 10 and 14: mean 12, s = sqrt(8/1) = 2.8284271; half-width 12.706 · 2.8284271 /
    /// sqrt(2) = 12.706 · 2 = 25.412.
    #[test]
    fn t_interval_of_two_values_by_hand() {
        let i = t_interval(&[10.0, 14.0]).unwrap();
        assert!(close(i.mean, 12.0));
        assert!(close(i.half_width.unwrap(), 25.412));
    }

    #[test]
    fn equal_values_have_a_zero_width_interval() {
        let v = 0.084_175_576;
        let i = t_interval(&[v, v, v]).unwrap();
        assert_eq!((i.mean, i.sd, i.half_width), (v, Some(0.0), Some(0.0)));
    }

    #[test]
    fn one_value_has_a_mean_but_no_interval_and_bad_input_is_an_error() {
        let i = t_interval(&[7.5]).unwrap();
        assert_eq!((i.mean, i.sd, i.half_width), (7.5, None, None));
        assert_eq!(t_interval(&[]), Err(StatsError::Empty));
        assert_eq!(
            t_interval(&[1.0, f64::INFINITY]),
            Err(StatsError::NotFinite(1))
        );
        assert_eq!(t_interval(&[f64::NAN]), Err(StatsError::NotFinite(0)));
    }

    /// Differences 1, 2, 1, 2, 1: mean 1.4, Σ(d − 1.4)² = 3·0.16 + 2·0.36 = 1.2,
    /// s_d = sqrt(1.2/4) = 0.5477226, se = 0.5477226 / sqrt(5) = 0.2449490,
    /// t = 1.4 / 0.2449490 = 5.7154761 > 2.776: significant.
    #[test]
    fn paired_t_by_hand_significant() {
        let reference = [10.0, 12.0, 11.0, 13.0, 14.0];
        let candidate = [11.0, 14.0, 12.0, 15.0, 15.0];
        let p = paired_t(&candidate, &reference).unwrap();
        assert!(close(p.difference.mean, 1.4));
        assert!(close(p.difference.sd.unwrap(), 0.547_722_6));
        assert!(close(p.t.unwrap(), 5.715_476_1));
        // Half-width 2.776 · 0.2449490 = 0.6799783; 1.4 is outside ±0.68.
        assert!(close(p.difference.half_width.unwrap(), 0.679_978_3));
        assert!(p.significant);
    }

    /// Differences 1, −1, 2, −2, 0.5: mean 0.1, Σ(d − 0.1)² = 0.81 + 1.21 + 3.61 + 4.41 +
    /// 0.16 = 10.2, s_d = sqrt(10.2/4) = 1.5968719, se = 0.7141428, t = 0.1 / 0.7141428 =
    /// 0.1400280 < 2.776: tied.
    #[test]
    fn paired_t_by_hand_not_significant() {
        let reference = [5.0, 5.0, 5.0, 5.0, 5.0];
        let candidate = [6.0, 4.0, 7.0, 3.0, 5.5];
        let p = paired_t(&candidate, &reference).unwrap();
        assert!(close(p.difference.mean, 0.1));
        assert!(close(p.t.unwrap(), 0.140_028_0));
        assert!(!p.significant);
    }

    /// The pairing matters: the same two samples unpaired overlap (both spread over 4),
    /// but every seed's difference is 0.5 or 0.6, so the pair is significant.
    #[test]
    fn pairing_removes_the_shared_seed_noise() {
        let reference = [1.0, 3.0, 5.0, 2.0, 4.0];
        let candidate = [1.5, 3.6, 5.5, 2.6, 4.5];
        let a = t_interval(&reference).unwrap();
        let b = t_interval(&candidate).unwrap();
        assert!(
            a.high().unwrap() > b.low().unwrap(),
            "the intervals overlap"
        );
        assert!(paired_t(&candidate, &reference).unwrap().significant);
    }

    #[test]
    fn constant_differences_and_bad_pairs() {
        let p = paired_t(&[2.0, 3.0, 4.0], &[1.0, 2.0, 3.0]).unwrap();
        assert_eq!((p.t, p.significant), (None, true));
        let same = paired_t(&[2.0, 3.0], &[2.0, 3.0]).unwrap();
        assert!(!same.significant);
        let one = paired_t(&[2.0], &[1.0]).unwrap();
        assert!(!one.significant, "one pair is never significant");
        assert_eq!(
            paired_t(&[1.0], &[1.0, 2.0]),
            Err(StatsError::Unpaired(1, 2))
        );
        assert_eq!(paired_t(&[], &[]), Err(StatsError::Empty));
        assert_eq!(
            paired_t(&[1.0, 2.0], &[1.0, f64::INFINITY]),
            Err(StatsError::NotFinite(1))
        );
    }
}
