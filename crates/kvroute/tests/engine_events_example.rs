//! Runs the `engine_events` example's scenario (`examples/engine_events.rs`) and checks what
//! it observed against values derived by hand from the ingest rules (module docs of
//! `kvroute::ingest`) and the load publisher's staleness rule.

#[allow(dead_code)]
#[path = "../examples/engine_events.rs"]
mod engine_events;

use kvroute::{FallbackCause, Reason, ReplayRequest, WorkerId};

#[test]
fn the_engine_events_example_holds() {
    let a = WorkerId::new(1, 0);
    let mut printed = Vec::new();
    let s = engine_events::run(&mut printed).expect("the scenario runs");

    // A applied batches 0 and 1, lost 2, saw 3: replay from the witness 1 (the last batch
    // applied), complete once 3 is applied.
    assert_eq!(
        s.replay_after_gap,
        vec![ReplayRequest {
            worker: a,
            from_seq: 1,
            last_live_seq: Some(3),
        }]
    );
    // Untrusted: the overlap is masked to zero although A held 64 blocks of the prompt.
    assert_eq!(s.overlap_while_untrusted, 0);
    // After the replay A holds the whole conversation: 3 chunks of 32 blocks; the prompt
    // has 96 * 16 + 20 tokens, so its 96 full blocks are all cached on A.
    assert_eq!(s.after_replay, (a, 96, Reason::CacheHold));
    // B: batch 0 applied, batch 1 lost, batch 2 held; giving up abandons batches 1 and 2.
    assert_eq!(s.skipped_batches, 2);
    assert!(s.b_trusted_after_skip);
    // B's last report at 1.5 s; the default maximum age is 2 s, so the publication at
    // 4.0 s (age 2.5 s) is the first to mark it stale. One worker of two is not past half
    // the fleet: the rule is scoped to B. As the only router, B is costed from its last
    // figures (3 running, 1 waiting, KV 0.25 against A's 0.30: the lower KV barrier, and
    // no worker holds the document), so the request lands on B as a stale fallback; with
    // two replicas B is costed just above A, and A takes it as a plain miss.
    let b = WorkerId::new(2, 0);
    assert_eq!(
        s.stale_decision,
        (b, Reason::Fallback(FallbackCause::Stale))
    );
    assert_eq!(s.stale_decision_replicas, (a, Reason::CacheMiss));
    let text = String::from_utf8(printed).expect("utf-8");
    assert!(
        text.contains("t=4.0 s: B's last report is 2.5 s old"),
        "{text}"
    );
}
