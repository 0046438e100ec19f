//! Policy names as the command line and the table spell them.
//!
//! A name is [`kvroute::Policy::name`], optionally with a parameter after a colon:
//! `load_aware` (beta 0.5, the value incident C measured best) or `load_aware:BETA`
//! (`0.0..=100.0`, the scorer's range), and `projected_time` (enforce) or
//! `projected_time:enforce|shadow|off`. Labels (table rows, file names) always carry
//! the parameter where the policy has one that is not the default mode:
//! `load_aware:0.5`, `projected_time`, `projected_time:shadow`.

use std::fmt;

use kvroute::{Policy, ProjectedMode};

/// Beta of a bare `load_aware` (incident C: 0.5 measured better than the proposed 1.0).
pub const DEFAULT_BETA: f32 = 0.5;

/// The names [`parse`] accepts, in table order (`load_aware` and `projected_time` also take
/// a parameter, see the module docs).
pub const NAMES: [&str; 10] = [
    "round_robin",
    "least_load",
    "kv_aware",
    "load_aware",
    "owner_pressure",
    "projected_time",
    "projected_time:shadow",
    "dynamo_cost",
    "lmetric",
    "cache_aware",
];

/// A policy with the label it is reported under.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PolicySpec {
    /// The policy.
    pub policy: Policy,
}

impl PolicySpec {
    /// The label: [`Policy::name`] plus its parameter (`load_aware:0.5`,
    /// `projected_time:shadow`; `projected_time` for enforce).
    pub fn label(&self) -> String {
        match self.policy {
            Policy::LoadAware { beta } => format!("load_aware:{beta}"),
            Policy::ProjectedTime { mode } => match mode {
                ProjectedMode::Enforce => "projected_time".to_string(),
                ProjectedMode::Shadow => "projected_time:shadow".to_string(),
                ProjectedMode::Off => "projected_time:off".to_string(),
            },
            p => p.name().to_string(),
        }
    }
}

impl fmt::Display for PolicySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// Why a policy name was not understood.
#[derive(Clone, Debug, PartialEq)]
pub enum PolicyError {
    /// Not one of [`NAMES`].
    Unknown(String),
    /// A parameter the policy does not take, or one out of range (the message says which).
    BadParameter(String),
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::Unknown(name) => write!(
                f,
                "unknown policy `{name}`; valid: {} (load_aware:BETA with BETA in 0..=100, \
                 projected_time:enforce|shadow|off)",
                NAMES.join(", ")
            ),
            PolicyError::BadParameter(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for PolicyError {}

/// Parses one policy name (see the module docs).
///
/// # Errors
/// [`PolicyError::Unknown`] for a name not in [`NAMES`], [`PolicyError::BadParameter`] for a
/// parameter the policy does not take or a beta that is not a number in `0.0..=100.0`.
pub fn parse(s: &str) -> Result<PolicySpec, PolicyError> {
    let s = s.trim();
    let (name, param) = match s.split_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (s, None),
    };
    let policy = match (name, param) {
        ("round_robin", None) => Policy::RoundRobin,
        ("least_load", None) => Policy::LeastLoad,
        ("kv_aware", None) => Policy::KvAware,
        ("load_aware", None) => Policy::LoadAware { beta: DEFAULT_BETA },
        ("load_aware", Some(b)) => {
            let beta: f32 = b.parse().map_err(|_| {
                PolicyError::BadParameter(format!("load_aware beta `{b}` is not a number"))
            })?;
            if !(0.0..=100.0).contains(&beta) {
                return Err(PolicyError::BadParameter(format!(
                    "load_aware beta {beta} is out of range 0.0..=100.0"
                )));
            }
            Policy::LoadAware { beta }
        }
        ("owner_pressure", None) => Policy::OwnerPressure,
        ("projected_time", None | Some("enforce")) => Policy::ProjectedTime {
            mode: ProjectedMode::Enforce,
        },
        ("projected_time", Some("shadow")) => Policy::ProjectedTime {
            mode: ProjectedMode::Shadow,
        },
        ("projected_time", Some("off")) => Policy::ProjectedTime {
            mode: ProjectedMode::Off,
        },
        ("projected_time", Some(m)) => {
            return Err(PolicyError::BadParameter(format!(
                "projected_time mode `{m}` is not one of enforce, shadow, off"
            )));
        }
        ("dynamo_cost", None) => Policy::DynamoCost,
        ("lmetric", None) => Policy::LMetric,
        ("cache_aware", None) => Policy::CacheAware,
        (
            "round_robin" | "least_load" | "kv_aware" | "owner_pressure" | "dynamo_cost"
            | "lmetric" | "cache_aware",
            Some(p),
        ) => {
            return Err(PolicyError::BadParameter(format!(
                "policy `{name}` takes no parameter `{p}` (only load_aware:BETA and \
                 projected_time:enforce|shadow|off do)"
            )));
        }
        _ => return Err(PolicyError::Unknown(s.to_string())),
    };
    Ok(PolicySpec { policy })
}

/// Every policy of [`NAMES`], parsed (the default set of the demo and the table).
pub fn all() -> Vec<PolicySpec> {
    NAMES
        .iter()
        .map(|n| parse(n).expect("every listed name parses"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_match_policy_names() {
        for spec in all() {
            let label = spec.label();
            assert!(label.starts_with(spec.policy.name()), "{label}");
            assert_eq!(parse(&label).unwrap(), spec, "labels parse back");
        }
        assert_eq!(parse("load_aware").unwrap().label(), "load_aware:0.5");
        assert_eq!(
            parse("load_aware:1.0").unwrap().policy,
            Policy::LoadAware { beta: 1.0 }
        );
        assert_eq!(
            parse("projected_time:enforce").unwrap().label(),
            "projected_time"
        );
    }

    #[test]
    fn bad_names_and_parameters_are_errors() {
        assert!(matches!(parse("magic"), Err(PolicyError::Unknown(_))));
        assert!(matches!(
            parse("kv_awareness"),
            Err(PolicyError::Unknown(_))
        ));
        for bad in [
            "load_aware:x",
            "load_aware:-1",
            "load_aware:101",
            "load_aware:NaN",
            "projected_time:maybe",
            "kv_aware:1",
        ] {
            assert!(
                matches!(parse(bad), Err(PolicyError::BadParameter(_))),
                "{bad}"
            );
        }
        let msg = PolicyError::Unknown("magic".into()).to_string();
        for n in NAMES {
            assert!(msg.contains(n), "{msg}");
        }
    }
}
