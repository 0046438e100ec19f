//! The policies by name: [`PolicyKind`] (the one list of policies and their names), the
//! labels counters and tables use, and parsing.
//!
//! # Names, labels and the written form
//! * [`PolicyKind::name`]: the policy without its parameter (`"load_aware"`,
//!   `"projected_time"`).
//! * [`Policy::label`]: what counters tell apart, a `&'static str`: the name, and for
//!   `projected_time` its mode unless it is the default `enforce`
//!   (`"projected_time:shadow"`, `"projected_time:off"`, `"projected_time"`). A
//!   `load_aware` beta is not part of it. [`Policy::LABELED`] holds one policy per label,
//!   and [`Policy::label_index`] numbers the labels densely.
//! * [`Display`](fmt::Display): the label, and for `load_aware` its beta
//!   (`"load_aware:0.5"`). It parses back ([`FromStr`]) to an equal policy for every policy
//!   whose parameter is in range.
//!
//! Accepted by [`FromStr`]: every [`PolicyKind::name`]; `load_aware:BETA` with BETA a
//! number in `0.0..=100.0` (a bare `load_aware` is [`Policy::DEFAULT_LOAD_AWARE_BETA`]);
//! `projected_time:off`, `projected_time:shadow`, `projected_time:enforce` (a bare
//! `projected_time` is `enforce`). Nothing else: no surrounding whitespace, no other
//! parameter.

use core::fmt;
use core::str::FromStr;

use crate::config::{BETA_MAX, BETA_MIN, Policy, ProjectedMode};

/// A policy without its parameter: the list of policies, written once.
///
/// [`ALL`](Self::ALL) is in declaration order and [`index`](Self::index) is the position in
/// it, so `kind as usize` can index per-policy arrays of [`COUNT`](Self::COUNT) entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum PolicyKind {
    /// [`Policy::RoundRobin`].
    RoundRobin,
    /// [`Policy::LeastLoad`].
    LeastLoad,
    /// [`Policy::KvAware`].
    KvAware,
    /// [`Policy::LoadAware`].
    LoadAware,
    /// [`Policy::OwnerPressure`].
    OwnerPressure,
    /// [`Policy::ProjectedTime`].
    ProjectedTime,
    /// [`Policy::DynamoCost`].
    DynamoCost,
    /// [`Policy::LMetric`].
    LMetric,
    /// [`Policy::CacheAware`].
    CacheAware,
    /// [`Policy::KvAwareFirst`].
    KvAwareFirst,
}

impl PolicyKind {
    /// Every kind, in declaration order (`ALL[k.index()] == k`).
    pub const ALL: [PolicyKind; 10] = [
        PolicyKind::RoundRobin,
        PolicyKind::LeastLoad,
        PolicyKind::KvAware,
        PolicyKind::LoadAware,
        PolicyKind::OwnerPressure,
        PolicyKind::ProjectedTime,
        PolicyKind::DynamoCost,
        PolicyKind::LMetric,
        PolicyKind::CacheAware,
        PolicyKind::KvAwareFirst,
    ];

    /// Number of kinds (`ALL.len()`).
    pub const COUNT: usize = Self::ALL.len();

    /// The stable name (`"round_robin"`, `"projected_time"`, …), as counters, tables and
    /// [`FromStr`] spell it.
    pub const fn name(self) -> &'static str {
        match self {
            PolicyKind::RoundRobin => "round_robin",
            PolicyKind::LeastLoad => "least_load",
            PolicyKind::KvAware => "kv_aware",
            PolicyKind::LoadAware => "load_aware",
            PolicyKind::OwnerPressure => "owner_pressure",
            PolicyKind::ProjectedTime => "projected_time",
            PolicyKind::DynamoCost => "dynamo_cost",
            PolicyKind::LMetric => "lmetric",
            PolicyKind::CacheAware => "cache_aware",
            PolicyKind::KvAwareFirst => "kv_aware_first",
        }
    }

    /// The position in [`ALL`](Self::ALL), `0..COUNT`.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The policy of this kind with its default parameter: `load_aware` with
    /// [`Policy::DEFAULT_LOAD_AWARE_BETA`], `projected_time` in the default mode
    /// (`enforce`).
    pub const fn with_defaults(self) -> Policy {
        match self {
            PolicyKind::RoundRobin => Policy::RoundRobin,
            PolicyKind::LeastLoad => Policy::LeastLoad,
            PolicyKind::KvAware => Policy::KvAware,
            PolicyKind::LoadAware => Policy::LoadAware {
                beta: Policy::DEFAULT_LOAD_AWARE_BETA,
            },
            PolicyKind::OwnerPressure => Policy::OwnerPressure,
            PolicyKind::ProjectedTime => Policy::ProjectedTime {
                mode: ProjectedMode::Enforce,
            },
            PolicyKind::DynamoCost => Policy::DynamoCost,
            PolicyKind::LMetric => Policy::LMetric,
            PolicyKind::CacheAware => Policy::CacheAware,
            PolicyKind::KvAwareFirst => Policy::KvAwareFirst,
        }
    }
}

impl fmt::Display for PolicyKind {
    /// Writes [`name`](Self::name).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PolicyKind {
    type Err = ParsePolicyError;

    /// The kind whose [`name`](Self::name) is exactly `s`.
    ///
    /// # Errors
    /// [`ParsePolicyError::UnknownPolicy`] for any other string.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| ParsePolicyError::UnknownPolicy(s.to_owned()))
    }
}

impl ProjectedMode {
    /// Every mode, in declaration order (`ALL[m.index()] == m`): enforce, shadow, off.
    pub const ALL: [ProjectedMode; 3] = [
        ProjectedMode::Enforce,
        ProjectedMode::Shadow,
        ProjectedMode::Off,
    ];

    /// Number of modes (`ALL.len()`).
    pub const COUNT: usize = Self::ALL.len();

    /// The mode's name: `"enforce"`, `"shadow"` or `"off"`.
    pub const fn name(self) -> &'static str {
        match self {
            ProjectedMode::Enforce => "enforce",
            ProjectedMode::Shadow => "shadow",
            ProjectedMode::Off => "off",
        }
    }

    /// The position in [`ALL`](Self::ALL), `0..COUNT`.
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for ProjectedMode {
    /// Writes [`name`](Self::name).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ProjectedMode {
    type Err = ParsePolicyError;

    /// The mode whose [`name`](Self::name) is exactly `s`.
    ///
    /// # Errors
    /// [`ParsePolicyError::UnknownMode`] for any other string.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| ParsePolicyError::UnknownMode(s.to_owned()))
    }
}

impl Policy {
    /// The beta of a `load_aware` written without one (dimensionless): 0.5, which balanced
    /// load better than 1.0 at the same cache hit rate in the measurements behind the
    /// policy.
    pub const DEFAULT_LOAD_AWARE_BETA: f32 = 0.5;

    /// Number of distinct [`label`](Self::label)s: one per kind, `projected_time` once per
    /// mode.
    pub const LABEL_COUNT: usize = PolicyKind::COUNT + ProjectedMode::COUNT - 1;

    /// One policy per [`label`](Self::label), in [`label_index`](Self::label_index) order
    /// (`LABELED[i].label_index() == i`): every [`PolicyKind`] in order with its default
    /// parameter ([`PolicyKind::with_defaults`]), `projected_time` once per mode in
    /// [`ProjectedMode::ALL`] order.
    pub const LABELED: [Policy; Self::LABEL_COUNT] = {
        let mut out = [Policy::RoundRobin; Self::LABEL_COUNT];
        let (mut i, mut k) = (0, 0);
        while k < PolicyKind::COUNT {
            let kind = PolicyKind::ALL[k];
            if matches!(kind, PolicyKind::ProjectedTime) {
                let mut m = 0;
                while m < ProjectedMode::COUNT {
                    out[i] = Policy::ProjectedTime {
                        mode: ProjectedMode::ALL[m],
                    };
                    i += 1;
                    m += 1;
                }
            } else {
                out[i] = kind.with_defaults();
                i += 1;
            }
            k += 1;
        }
        out
    };

    /// The written forms [`FromStr`] accepts, on one line, for help texts: every kind's
    /// name in [`PolicyKind::ALL`] order, each parameterised form after its bare name
    /// (`…, load_aware, load_aware:BETA (BETA in 0.0..=100.0), owner_pressure,
    /// projected_time, projected_time:enforce|shadow|off, …`). The unknown-policy error
    /// lists the same.
    pub fn accepted_forms() -> String {
        struct Forms;
        impl fmt::Display for Forms {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                accepted_forms(f)
            }
        }
        Forms.to_string()
    }

    /// The policy's kind (the policy without its parameter).
    pub const fn kind(&self) -> PolicyKind {
        match self {
            Policy::RoundRobin => PolicyKind::RoundRobin,
            Policy::LeastLoad => PolicyKind::LeastLoad,
            Policy::KvAware => PolicyKind::KvAware,
            Policy::LoadAware { .. } => PolicyKind::LoadAware,
            Policy::OwnerPressure => PolicyKind::OwnerPressure,
            Policy::ProjectedTime { .. } => PolicyKind::ProjectedTime,
            Policy::DynamoCost => PolicyKind::DynamoCost,
            Policy::LMetric => PolicyKind::LMetric,
            Policy::CacheAware => PolicyKind::CacheAware,
            Policy::KvAwareFirst => PolicyKind::KvAwareFirst,
        }
    }

    /// The kind's stable name ([`PolicyKind::name`]): the same for every mode and beta.
    /// Counters and tables use [`label`](Self::label), which tells the modes apart.
    pub const fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// The label counters use: [`name`](Self::name), and for `projected_time` in `shadow`
    /// or `off` mode the mode after a colon (`"projected_time:shadow"`,
    /// `"projected_time:off"`; `"projected_time"` in the default `enforce`). A
    /// `load_aware` beta is not part of it ([`Display`](fmt::Display) writes it).
    pub const fn label(&self) -> &'static str {
        match self {
            Policy::ProjectedTime {
                mode: ProjectedMode::Shadow,
            } => "projected_time:shadow",
            Policy::ProjectedTime {
                mode: ProjectedMode::Off,
            } => "projected_time:off",
            p => p.name(),
        }
    }

    /// The label's position in [`LABELED`](Self::LABELED), `0..LABEL_COUNT`: dense, for
    /// per-label arrays. Two policies have the same index exactly when they have the same
    /// [`label`](Self::label).
    pub const fn label_index(&self) -> usize {
        let k = self.kind().index();
        let projected = PolicyKind::ProjectedTime.index();
        match self {
            Policy::ProjectedTime { mode } => projected + mode.index(),
            _ if k > projected => k + ProjectedMode::COUNT - 1,
            _ => k,
        }
    }
}

impl fmt::Display for Policy {
    /// Writes [`label`](Policy::label), and for `load_aware` its beta after a colon
    /// (`load_aware:0.5`, `load_aware:1`), in the shortest form that parses back to the same
    /// `f32`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::LoadAware { beta } => write!(f, "{}:{beta}", self.label()),
            p => f.write_str(p.label()),
        }
    }
}

impl FromStr for Policy {
    type Err = ParsePolicyError;

    /// Parses the forms listed in the module docs of `policy` (what
    /// [`Display`](fmt::Display) writes, and the bare `load_aware`, `projected_time` and
    /// `projected_time:enforce`).
    ///
    /// # Errors
    /// [`ParsePolicyError`]: an unknown name, a parameter given to a policy that takes
    /// none, a beta that is not a number or is outside `0.0..=100.0`, an unknown mode.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, param) = match s.split_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (s, None),
        };
        let kind: PolicyKind = name
            .parse()
            .map_err(|_| ParsePolicyError::UnknownPolicy(s.to_owned()))?;
        match (kind, param) {
            (_, None) => Ok(kind.with_defaults()),
            (PolicyKind::LoadAware, Some(b)) => {
                let beta: f32 = b
                    .parse()
                    .map_err(|_| ParsePolicyError::BetaNotANumber(b.to_owned()))?;
                if (BETA_MIN..=BETA_MAX).contains(&beta) {
                    Ok(Policy::LoadAware { beta })
                } else {
                    Err(ParsePolicyError::BetaOutOfRange(beta))
                }
            }
            (PolicyKind::ProjectedTime, Some(m)) => Ok(Policy::ProjectedTime { mode: m.parse()? }),
            (policy, Some(p)) => Err(ParsePolicyError::UnexpectedParameter {
                policy,
                parameter: p.to_owned(),
            }),
        }
    }
}

/// Why a string is not a [`Policy`], [`PolicyKind`] or [`ProjectedMode`]. Its
/// [`Display`](fmt::Display) names the forms accepted instead.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ParsePolicyError {
    /// The name (the whole string, or what comes before a `:`) is not a
    /// [`PolicyKind::name`]; holds the whole string given.
    UnknownPolicy(String),
    /// A policy that takes no parameter was given one (`kv_aware:1`).
    UnexpectedParameter {
        /// The policy.
        policy: PolicyKind,
        /// What followed the colon.
        parameter: String,
    },
    /// `load_aware:BETA` with a BETA that is not a number (holds BETA).
    BetaNotANumber(String),
    /// `load_aware:BETA` with a BETA outside `0.0..=100.0`, NaN included (holds BETA).
    BetaOutOfRange(f32),
    /// A `projected_time` mode that is not `off`, `shadow` or `enforce` (holds the mode).
    UnknownMode(String),
}

/// Writes the accepted forms, every [`PolicyKind`] in order with the parameterised forms
/// after their bare name.
fn accepted_forms(f: &mut fmt::Formatter<'_>) -> fmt::Result {
    for (i, kind) in PolicyKind::ALL.into_iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        f.write_str(kind.name())?;
        match kind {
            PolicyKind::LoadAware => {
                write!(f, ", {kind}:BETA (BETA in {BETA_MIN:?}..={BETA_MAX:?})")?
            }
            PolicyKind::ProjectedTime => {
                write!(f, ", {kind}:")?;
                modes(f)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Writes `enforce|shadow|off`.
fn modes(f: &mut fmt::Formatter<'_>) -> fmt::Result {
    for (i, m) in ProjectedMode::ALL.into_iter().enumerate() {
        if i > 0 {
            f.write_str("|")?;
        }
        f.write_str(m.name())?;
    }
    Ok(())
}

impl fmt::Display for ParsePolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParsePolicyError::UnknownPolicy(s) => {
                write!(f, "unknown policy `{s}`; accepted: ")?;
                accepted_forms(f)
            }
            ParsePolicyError::UnexpectedParameter { policy, parameter } => {
                write!(
                    f,
                    "policy `{policy}` takes no parameter (`:{parameter}` given); only \
                     {}:BETA and {}:",
                    PolicyKind::LoadAware,
                    PolicyKind::ProjectedTime
                )?;
                modes(f)?;
                f.write_str(" do")
            }
            ParsePolicyError::BetaNotANumber(b) => write!(
                f,
                "load_aware beta `{b}` is not a number; accepted: load_aware:BETA with BETA \
                 in {BETA_MIN:?}..={BETA_MAX:?}"
            ),
            ParsePolicyError::BetaOutOfRange(b) => write!(
                f,
                "load_aware beta {b} is out of range {BETA_MIN:?}..={BETA_MAX:?}"
            ),
            ParsePolicyError::UnknownMode(m) => {
                write!(f, "projected_time mode `{m}` is not one of ")?;
                modes(f)
            }
        }
    }
}

impl std::error::Error for ParsePolicyError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reason::{FallbackCause, Reason};

    /// Every list agrees with its dense index.
    #[test]
    fn indices_are_positions_in_all() {
        for (i, k) in PolicyKind::ALL.into_iter().enumerate() {
            assert_eq!(k.index(), i, "{k:?}");
            assert_eq!(k.with_defaults().kind(), k);
        }
        for (i, m) in ProjectedMode::ALL.into_iter().enumerate() {
            assert_eq!(m.index(), i, "{m:?}");
        }
        for (i, c) in FallbackCause::ALL.into_iter().enumerate() {
            assert_eq!(c.index(), i, "{c:?}");
        }
        for (i, r) in Reason::ALL.into_iter().enumerate() {
            assert_eq!(r.index(), i, "{r:?}");
        }
        for (i, p) in Policy::LABELED.into_iter().enumerate() {
            assert_eq!(p.label_index(), i, "{p:?}");
        }
        assert_eq!(
            (PolicyKind::COUNT, Policy::LABEL_COUNT, Reason::COUNT),
            (10, 12, 13)
        );
    }

    /// The labels, written out: the mode is part of `projected_time`'s, beta is not part of
    /// `load_aware`'s.
    #[test]
    fn labels_tell_the_modes_apart() {
        let labels: Vec<&str> = Policy::LABELED.iter().map(Policy::label).collect();
        assert_eq!(
            labels,
            [
                "round_robin",
                "least_load",
                "kv_aware",
                "load_aware",
                "owner_pressure",
                "projected_time",
                "projected_time:shadow",
                "projected_time:off",
                "dynamo_cost",
                "lmetric",
                "cache_aware",
                "kv_aware_first",
            ]
        );
        assert_eq!(Policy::LoadAware { beta: 3.0 }.label(), "load_aware");
        assert_eq!(
            Policy::LoadAware { beta: 3.0 }.label_index(),
            Policy::LoadAware { beta: 0.5 }.label_index()
        );
        let shadow = Policy::ProjectedTime {
            mode: ProjectedMode::Shadow,
        };
        assert_eq!(shadow.name(), "projected_time");
        assert_ne!(shadow.label_index(), Policy::default().label_index());
        assert_eq!(Policy::CacheAware.label_index(), 10);
    }

    #[test]
    fn display_writes_the_parameter_and_parses_back() {
        let cases = [
            (Policy::LoadAware { beta: 0.5 }, "load_aware:0.5"),
            (Policy::LoadAware { beta: 1.0 }, "load_aware:1"),
            (Policy::LoadAware { beta: 0.1 }, "load_aware:0.1"),
            (Policy::LoadAware { beta: 100.0 }, "load_aware:100"),
            (Policy::LoadAware { beta: 0.0 }, "load_aware:0"),
            (Policy::default(), "projected_time"),
            (
                Policy::ProjectedTime {
                    mode: ProjectedMode::Off,
                },
                "projected_time:off",
            ),
            (Policy::LMetric, "lmetric"),
        ];
        for (p, text) in cases {
            assert_eq!(p.to_string(), text);
            assert_eq!(text.parse::<Policy>(), Ok(p), "{text}");
        }
        for p in Policy::LABELED {
            assert_eq!(p.to_string().parse::<Policy>(), Ok(p), "{p:?}");
        }
        // An `f32` with no short decimal form still round-trips.
        let odd = Policy::LoadAware {
            beta: 1.0 / 3.0 + 7.0,
        };
        assert_eq!(odd.to_string().parse::<Policy>(), Ok(odd));
        assert_eq!(ProjectedMode::Shadow.to_string(), "shadow");
        assert_eq!(PolicyKind::DynamoCost.to_string(), "dynamo_cost");
    }

    #[test]
    fn bare_and_explicit_forms_parse() {
        let enforce = Policy::ProjectedTime {
            mode: ProjectedMode::Enforce,
        };
        assert_eq!("projected_time".parse(), Ok(enforce));
        assert_eq!("projected_time:enforce".parse(), Ok(enforce));
        assert_eq!(
            "projected_time:shadow".parse(),
            Ok(Policy::ProjectedTime {
                mode: ProjectedMode::Shadow
            })
        );
        assert_eq!("load_aware".parse(), Ok(Policy::LoadAware { beta: 0.5 }));
        assert_eq!(
            "load_aware:0.25".parse(),
            Ok(Policy::LoadAware { beta: 0.25 })
        );
        assert_eq!(
            "load_aware:1.0".parse(),
            Ok(Policy::LoadAware { beta: 1.0 })
        );
        assert_eq!(
            "load_aware:1e1".parse(),
            Ok(Policy::LoadAware { beta: 10.0 })
        );
        assert_eq!("kv_aware".parse(), Ok(Policy::KvAware));
        assert_eq!("off".parse(), Ok(ProjectedMode::Off));
        assert_eq!("cache_aware".parse(), Ok(PolicyKind::CacheAware));
    }

    #[test]
    fn bad_forms_are_typed_errors() {
        use ParsePolicyError as E;
        let cases: [(&str, E); 13] = [
            ("magic", E::UnknownPolicy("magic".into())),
            ("kv_awareness", E::UnknownPolicy("kv_awareness".into())),
            ("", E::UnknownPolicy(String::new())),
            (" kv_aware", E::UnknownPolicy(" kv_aware".into())),
            ("Kv_Aware", E::UnknownPolicy("Kv_Aware".into())),
            ("magic:1", E::UnknownPolicy("magic:1".into())),
            (
                "kv_aware:1",
                E::UnexpectedParameter {
                    policy: PolicyKind::KvAware,
                    parameter: "1".into(),
                },
            ),
            ("load_aware:x", E::BetaNotANumber("x".into())),
            ("load_aware:", E::BetaNotANumber(String::new())),
            ("load_aware:-1", E::BetaOutOfRange(-1.0)),
            ("load_aware:101", E::BetaOutOfRange(101.0)),
            ("projected_time:maybe", E::UnknownMode("maybe".into())),
            ("projected_time:shadow:1", E::UnknownMode("shadow:1".into())),
        ];
        for (text, want) in cases {
            assert_eq!(text.parse::<Policy>(), Err(want), "{text}");
        }
        // NaN is out of every range (and not equal to itself: matched by hand).
        match "load_aware:NaN".parse::<Policy>() {
            Err(E::BetaOutOfRange(b)) => assert!(b.is_nan()),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            "ON".parse::<ProjectedMode>(),
            Err(E::UnknownMode("ON".into()))
        );
    }

    /// The messages name the accepted forms.
    #[test]
    fn errors_name_the_accepted_forms() {
        fn is_error<T: std::error::Error>(_: &T) {}
        let unknown = "magic".parse::<Policy>().unwrap_err();
        is_error(&unknown);
        assert_eq!(
            unknown.to_string(),
            "unknown policy `magic`; accepted: round_robin, least_load, kv_aware, load_aware, \
             load_aware:BETA (BETA in 0.0..=100.0), owner_pressure, projected_time, \
             projected_time:enforce|shadow|off, dynamo_cost, lmetric, cache_aware, kv_aware_first"
        );
        assert_eq!(
            unknown.to_string(),
            format!(
                "unknown policy `magic`; accepted: {}",
                Policy::accepted_forms()
            )
        );
        assert_eq!(
            "load_aware:500".parse::<Policy>().unwrap_err().to_string(),
            "load_aware beta 500 is out of range 0.0..=100.0"
        );
        assert_eq!(
            "lmetric:2".parse::<Policy>().unwrap_err().to_string(),
            "policy `lmetric` takes no parameter (`:2` given); only load_aware:BETA and \
             projected_time:enforce|shadow|off do"
        );
        assert_eq!(
            "projected_time:on"
                .parse::<Policy>()
                .unwrap_err()
                .to_string(),
            "projected_time mode `on` is not one of enforce|shadow|off"
        );
    }

    #[test]
    fn reasons_by_name() {
        let names: Vec<String> = Reason::ALL.iter().map(Reason::to_string).collect();
        assert_eq!(
            names,
            [
                "round_robin",
                "least_load",
                "cache_hold",
                "cache_miss",
                "spill",
                "load_escape",
                "no_safe_spill_hold",
                "fallback_missing",
                "fallback_invalid",
                "fallback_stale",
                "fallback_partial",
                "no_eligible_worker",
                "kv_bound",
            ]
        );
        for r in Reason::ALL {
            assert_eq!(r.name().parse::<Reason>(), Ok(r));
        }
        assert_eq!(
            "fallback_stale".parse::<Reason>(),
            Ok(Reason::Fallback(FallbackCause::Stale))
        );
        let e = "fallback".parse::<Reason>().unwrap_err();
        assert_eq!(e, crate::reason::ParseReasonError("fallback".into()));
        let msg = e.to_string();
        assert!(msg.starts_with("unknown reason `fallback`; accepted: round_robin, "));
        assert!(
            msg.ends_with(", fallback_partial, no_eligible_worker, kv_bound"),
            "{msg}"
        );
        let causes: Vec<&str> = FallbackCause::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(causes, ["missing", "invalid", "stale", "partial"]);
    }
}
