//! The example fault programs in `docs/fault-programs/` stay valid: each parses and fits
//! the trace's 16-engine fleet, with the faults it was written to hold.

use kvroute_sim::fault::FaultKind;
use kvroute_sim::workload::faults::{add_faults, parse_faults};
use kvroute_sim::workload::scenarios::SCENARIOS;

/// `(file, faults, kind of its first fault)`, as `docs/RESULTS.md` ("Fault programs")
/// describes them.
const PROGRAMS: [(&str, usize, &str); 7] = [
    ("slowdown.json", 1, "slowdown"),
    ("telemetry-blackout.json", 4, "telemetry_blackout"),
    ("half-gauges.json", 8, "partial_telemetry"),
    ("flap-storm.json", 3, "flap"),
    ("restart-wave.json", 8, "restart"),
    ("fail-fast.json", 1, "fail_fast"),
    ("event-loss.json", 1, "event_loss"),
];

fn kind_name(k: &FaultKind) -> &'static str {
    match k {
        FaultKind::Restart => "restart",
        FaultKind::Disconnect { .. } => "disconnect",
        FaultKind::TelemetryBlackout { .. } => "telemetry_blackout",
        FaultKind::FailFast { .. } => "fail_fast",
        FaultKind::EventLoss { .. } => "event_loss",
        FaultKind::Flap { .. } => "flap",
        FaultKind::Slowdown { .. } => "slowdown",
        FaultKind::PartialTelemetry { .. } => "partial_telemetry",
    }
}

#[test]
fn every_example_program_parses_and_fits_sixteen_engines() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/fault-programs");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("docs/fault-programs exists")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut listed: Vec<String> = PROGRAMS.iter().map(|p| p.0.to_string()).collect();
    listed.sort();
    assert_eq!(files, listed, "every example program is listed here");
    for (file, count, first) in PROGRAMS {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let faults = parse_faults(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(faults.len(), count, "{file}");
        assert_eq!(kind_name(&faults[0].kind), first, "{file}");
        let mut w = SCENARIOS[0].build(1);
        w.fleet.engines = 16;
        w.faults.clear();
        add_faults(&mut w, &faults, 1.0).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(w.faults.len(), count, "{file}");
        let mut small = SCENARIOS[0].build(1);
        small.fleet.engines = 1;
        // A one-engine fleet takes a program only if every fault is on engine 0.
        let only_engine_0 = faults.iter().all(|f| f.engine == 0);
        assert_eq!(
            add_faults(&mut small, &faults, 1.0).is_ok(),
            only_engine_0,
            "{file}"
        );
    }
}
