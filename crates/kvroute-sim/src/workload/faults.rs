//! A fault program read from JSON and added to any workload (`kvroute-sim --faults FILE`):
//! the schedule of [`Fault`]s a user wants a trace or a scenario to run through.
//!
//! The file holds one JSON array of faults, each an object with `at_s` (seconds of the
//! workload's own timeline, before any rate scale), `engine` (0-based index in the
//! workload's fleet), `kind`, and the fields that kind takes, all in seconds but `factor`
//! (a multiplier) and `loss` (a probability):
//!
//! | `kind` | fields | [`FaultKind`] |
//! |---|---|---|
//! | `restart` | none | [`FaultKind::Restart`] |
//! | `disconnect` | `duration_s` | [`FaultKind::Disconnect`] |
//! | `telemetry_blackout` | `duration_s` | [`FaultKind::TelemetryBlackout`] |
//! | `fail_fast` | `duration_s` | [`FaultKind::FailFast`] |
//! | `partial_telemetry` | `duration_s` | [`FaultKind::PartialTelemetry`] |
//! | `event_loss` | `duration_s`, `loss` | [`FaultKind::EventLoss`] |
//! | `slowdown` | `duration_s`, `factor` | [`FaultKind::Slowdown`] |
//! | `flap` | `duration_s`, `period_s`, `down_s` | [`FaultKind::Flap`] |
//!
//! ```json
//! [
//!   {"at_s": 20, "engine": 3, "kind": "restart"},
//!   {"at_s": 30, "engine": 1, "kind": "flap", "duration_s": 30, "period_s": 5, "down_s": 1},
//!   {"at_s": 40, "engine": 2, "kind": "slowdown", "duration_s": 20, "factor": 3}
//! ]
//! ```
//!
//! An unknown kind, a field the kind needs and lacks or does not take, and a value
//! [`Fault::check`] refuses are errors naming the fault (its index in the array); JSON that
//! is not an array of such objects (an unknown field, a mistyped value) is serde's error,
//! with its line and column. Added to a workload ([`add_faults`]), each fault's start is
//! moved as the workload's arrivals were by its rate scale
//! ([`crate::workload::arrivals::scale_arrivals`]: a fault keeps its place in the load),
//! after the workload's own faults; durations, periods and down times stay in seconds, as
//! a scenario's do.

use serde::Deserialize;

use crate::fault::{Fault, FaultKind};
use crate::workload::Workload;

/// One fault as the file spells it (module docs).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultSpec {
    at_s: f64,
    engine: u32,
    kind: String,
    duration_s: Option<f64>,
    period_s: Option<f64>,
    down_s: Option<f64>,
    factor: Option<f64>,
    loss: Option<f64>,
}

/// What is wrong with a fault program.
#[derive(Debug)]
pub enum FaultFileError {
    /// Not a JSON array of fault objects (bad JSON, an unknown or mistyped field).
    Json(serde_json::Error),
    /// Fault `index` (0-based, in the array) is not valid: `why`, in words.
    Fault {
        /// Its index in the array.
        index: usize,
        /// What is wrong.
        why: String,
    },
}

impl core::fmt::Display for FaultFileError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Json(e) => write!(f, "not a fault program (a JSON array of faults): {e}"),
            Self::Fault { index, why } => write!(f, "fault {index}: {why}"),
        }
    }
}

impl std::error::Error for FaultFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Json(e) => Some(e),
            Self::Fault { .. } => None,
        }
    }
}

/// The kinds the file names, in the module docs' order, each with the fields it takes.
pub const FAULT_KINDS: [(&str, &[&str]); 8] = [
    ("restart", &[]),
    ("disconnect", &["duration_s"]),
    ("telemetry_blackout", &["duration_s"]),
    ("fail_fast", &["duration_s"]),
    ("partial_telemetry", &["duration_s"]),
    ("event_loss", &["duration_s", "loss"]),
    ("slowdown", &["duration_s", "factor"]),
    ("flap", &["duration_s", "period_s", "down_s"]),
];

impl FaultSpec {
    /// The fault, or what is wrong with its fields (the values are checked later, against
    /// a fleet, by [`Fault::check`]).
    fn fault(&self) -> Result<Fault, String> {
        let given = [
            ("duration_s", self.duration_s),
            ("period_s", self.period_s),
            ("down_s", self.down_s),
            ("factor", self.factor),
            ("loss", self.loss),
        ];
        let Some(&(_, takes)) = FAULT_KINDS.iter().find(|(k, _)| *k == self.kind) else {
            let names: Vec<&str> = FAULT_KINDS.iter().map(|(k, _)| *k).collect();
            return Err(format!(
                "unknown kind `{}` (one of {})",
                self.kind,
                names.join(", ")
            ));
        };
        for (name, value) in given {
            match (takes.contains(&name), value) {
                (true, None) => return Err(format!("`{}` needs `{name}`", self.kind)),
                (false, Some(_)) => return Err(format!("`{}` takes no `{name}`", self.kind)),
                _ => {}
            }
        }
        // Every field the kind takes is present (checked above).
        let d = self.duration_s.unwrap_or_default();
        let kind = match self.kind.as_str() {
            "restart" => FaultKind::Restart,
            "disconnect" => FaultKind::Disconnect { duration_s: d },
            "telemetry_blackout" => FaultKind::TelemetryBlackout { duration_s: d },
            "fail_fast" => FaultKind::FailFast { duration_s: d },
            "partial_telemetry" => FaultKind::PartialTelemetry { duration_s: d },
            "event_loss" => FaultKind::EventLoss {
                duration_s: d,
                loss: self.loss.unwrap_or_default(),
            },
            "slowdown" => FaultKind::Slowdown {
                duration_s: d,
                factor: self.factor.unwrap_or_default(),
            },
            // The last kind of the table: `flap`.
            _ => FaultKind::Flap {
                duration_s: d,
                period_s: self.period_s.unwrap_or_default(),
                down_s: self.down_s.unwrap_or_default(),
            },
        };
        Ok(Fault {
            at_s: self.at_s,
            engine: self.engine,
            kind,
        })
    }
}

/// Parses a fault program (module docs): the faults in file order.
///
/// # Errors
/// [`FaultFileError::Json`] when `text` is not a JSON array of fault objects (an unknown
/// field included); [`FaultFileError::Fault`] for an unknown kind, a field the kind needs
/// and lacks or does not take. Values are checked against a fleet by [`add_faults`].
pub fn parse_faults(text: &str) -> Result<Vec<Fault>, FaultFileError> {
    let specs: Vec<FaultSpec> = serde_json::from_str(text).map_err(FaultFileError::Json)?;
    specs
        .iter()
        .enumerate()
        .map(|(index, s)| {
            s.fault()
                .map_err(|why| FaultFileError::Fault { index, why })
        })
        .collect()
}

/// Adds `faults` to `w` (after its own), each checked against `w`'s fleet
/// ([`Fault::check`]) and its time moved as `scale_arrivals(w, scale)` moved the
/// arrivals: `t` after the load's start becomes `start + (t − start) / scale`. Nothing is
/// added when any fault is refused.
///
/// # Errors
/// [`FaultFileError::Fault`] naming the first fault (its index in `faults`) that `w`'s
/// fleet refuses, or every fault (index 0) when `scale` is not finite and positive.
pub fn add_faults(w: &mut Workload, faults: &[Fault], scale: f64) -> Result<(), FaultFileError> {
    if !(scale.is_finite() && scale > 0.0) {
        return Err(FaultFileError::Fault {
            index: 0,
            why: format!("rate scale {scale} is not finite and positive"),
        });
    }
    for (index, f) in faults.iter().enumerate() {
        f.check(w.fleet.engines)
            .map_err(|why| FaultFileError::Fault {
                index,
                why: format!("{why} (workload `{}`, {} engines)", w.name, w.fleet.engines),
            })?;
    }
    let start = w.load_start_s;
    w.faults.extend(faults.iter().map(|f| Fault {
        at_s: if f.at_s > start {
            start + (f.at_s - start) / scale
        } else {
            f.at_s
        },
        ..*f
    }));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_with_its_fields() {
        let text = r#"[
            {"at_s": 1, "engine": 0, "kind": "restart"},
            {"at_s": 2, "engine": 1, "kind": "disconnect", "duration_s": 3},
            {"at_s": 4, "engine": 2, "kind": "telemetry_blackout", "duration_s": 5},
            {"at_s": 6, "engine": 3, "kind": "fail_fast", "duration_s": 7},
            {"at_s": 8, "engine": 0, "kind": "partial_telemetry", "duration_s": 9},
            {"at_s": 10, "engine": 1, "kind": "event_loss", "duration_s": 11, "loss": 0.25},
            {"at_s": 12, "engine": 2, "kind": "slowdown", "duration_s": 13, "factor": 2.5},
            {"at_s": 14, "engine": 3, "kind": "flap", "duration_s": 15, "period_s": 4, "down_s": 1}
        ]"#;
        let got = parse_faults(text).expect("a valid program");
        let want = [
            (1.0, 0, FaultKind::Restart),
            (2.0, 1, FaultKind::Disconnect { duration_s: 3.0 }),
            (4.0, 2, FaultKind::TelemetryBlackout { duration_s: 5.0 }),
            (6.0, 3, FaultKind::FailFast { duration_s: 7.0 }),
            (8.0, 0, FaultKind::PartialTelemetry { duration_s: 9.0 }),
            (
                10.0,
                1,
                FaultKind::EventLoss {
                    duration_s: 11.0,
                    loss: 0.25,
                },
            ),
            (
                12.0,
                2,
                FaultKind::Slowdown {
                    duration_s: 13.0,
                    factor: 2.5,
                },
            ),
            (
                14.0,
                3,
                FaultKind::Flap {
                    duration_s: 15.0,
                    period_s: 4.0,
                    down_s: 1.0,
                },
            ),
        ]
        .map(|(at_s, engine, kind)| Fault { at_s, engine, kind });
        assert_eq!(got, want);
        assert_eq!(FAULT_KINDS.len(), want.len());
    }

    #[test]
    fn a_malformed_fault_is_named_by_its_index() {
        let cases = [
            (
                r#"[{"at_s": 1, "engine": 0, "kind": "reboot"}]"#,
                0,
                "unknown kind `reboot`",
            ),
            (
                r#"[{"at_s": 1, "engine": 0, "kind": "restart"}, {"at_s": 1, "engine": 0, "kind": "flap", "duration_s": 3, "period_s": 1}]"#,
                1,
                "`flap` needs `down_s`",
            ),
            (
                r#"[{"at_s": 1, "engine": 0, "kind": "restart", "duration_s": 3}]"#,
                0,
                "`restart` takes no `duration_s`",
            ),
        ];
        for (text, want_index, want_why) in cases {
            match parse_faults(text) {
                Err(FaultFileError::Fault { index, why }) => {
                    assert_eq!(index, want_index, "{text}");
                    assert!(why.starts_with(want_why), "{text}: {why}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        for text in [
            r#"{"at_s": 1, "engine": 0, "kind": "restart"}"#,
            r#"[{"at_s": 1, "engine": 0, "kind": "restart", "node": 2}]"#,
            r#"[{"at_s": 1, "kind": "restart"}]"#,
            r#"[{"at_s": 1, "engine": -1, "kind": "restart"}]"#,
        ] {
            assert!(
                matches!(parse_faults(text), Err(FaultFileError::Json(_))),
                "{text}"
            );
        }
    }

    fn workload(engines: u32, load_start_s: f64) -> Workload {
        let mut w = crate::workload::scenarios::SCENARIOS[0].build(1);
        w.fleet.engines = engines;
        w.faults.clear();
        w.load_start_s = load_start_s;
        w
    }

    /// 10 s into a load that starts at 4 s, at rate scale 2: 4 + (10 − 4) / 2 = 7 s; a
    /// fault before the load's start keeps its time.
    #[test]
    fn added_faults_move_with_the_load_and_are_checked_against_the_fleet() {
        let faults = parse_faults(
            r#"[{"at_s": 10, "engine": 1, "kind": "restart"},
                {"at_s": 3, "engine": 0, "kind": "fail_fast", "duration_s": 2}]"#,
        )
        .unwrap();
        let mut w = workload(2, 4.0);
        add_faults(&mut w, &faults, 2.0).unwrap();
        assert_eq!(w.faults.len(), 2);
        assert_eq!((w.faults[0].at_s, w.faults[0].engine), (7.0, 1));
        assert_eq!(w.faults[1].at_s, 3.0);
        assert_eq!(w.faults[1].kind, FaultKind::FailFast { duration_s: 2.0 });

        // Engine 1 is outside a one-engine fleet: nothing is added.
        let mut small = workload(1, 0.0);
        match add_faults(&mut small, &faults, 1.0) {
            Err(FaultFileError::Fault { index: 0, why }) => {
                assert!(why.starts_with("engine is not in the fleet"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert!(small.faults.is_empty());

        // A value `Fault::check` refuses.
        let bad = parse_faults(
            r#"[{"at_s": 1, "engine": 0, "kind": "event_loss", "duration_s": 2, "loss": 1.5}]"#,
        )
        .unwrap();
        match add_faults(&mut workload(2, 0.0), &bad, 1.0) {
            Err(FaultFileError::Fault { index: 0, why }) => {
                assert!(why.starts_with("loss must be a probability"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}
