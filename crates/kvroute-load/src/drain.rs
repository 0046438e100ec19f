//! The prefill queue at publication: a report's waiting prefill tokens less what the engine
//! has prefilled since the report was observed.
//!
//! A report is an instant of the engine; a publication is later (the next report of any
//! worker, or the gateway's timer), and a decision reads the publication. In between, an
//! engine with prefill work has been running it: continuous batching puts up to a chunk of
//! prefill into every step, so queued prefill drains at about the engine's prefill
//! throughput `π` (tokens/s; a step of `C` chunk tokens and `n` decoding requests lasts
//! `C/π + b + a·n`, so the rate is `π · C/(C + π·(b + a·n))`, 96 % of `π` for the 8B
//! preset with 30 running at `C` = 8,192). Left as reported, a queue that is already done
//! keeps its worker looking busy until its next report: one request that waited between
//! two steps when the report was taken (counted with its whole prompt, cached prefix
//! included, as SGLang and the simulated engine count it) hides the worker from every
//! decision for a whole telemetry interval.
//!
//! The rule, per rank, with `Q` the reported waiting prefill tokens, `age` the seconds from
//! the report's observation to the publication, `r`/`w` its running and waiting requests and
//! `M` its scheduler cap:
//!
//! ```text
//! drainable = Q                        when w = 0 (all of it is running requests' prefill)
//!           = Q · min(1, (M − r)/w)    when w > 0 and M is known (only the waiting
//!                                      requests that fit under the cap can start)
//!           = 0                        when w > 0 and M is unknown
//! published = Q − min(drainable, ⌊age · π⌋)
//! ```
//!
//! A rank with no prefill throughput (neither reported nor configured) is published as
//! reported. The drain never goes below what the cap holds back, never adds work, and
//! never touches the requests, the decode tokens or the KV usage: the next report replaces
//! it all. The reservations a decision adds on top are the router's own (tokens routed since
//! the report), so they are not aged here.

use kvroute_core::{LoadSample, Nanos};

/// The waiting prefill tokens to publish for a rank whose last good report is `sample`,
/// observed `age` before the publication, with prefill throughput `prefill_tps` (tokens/s,
/// reported or configured; `None` when neither). See the module docs for the rule. `0` when
/// the report carries no waiting prefill tokens. Never panics (NaN or non-positive
/// throughput: no drain).
pub(crate) fn queued_at(sample: &LoadSample, prefill_tps: Option<f32>, age: Nanos) -> u32 {
    let q = sample.waiting_prefill_tokens.unwrap_or(0);
    let Some(tps) = prefill_tps.filter(|t| *t > 0.0) else {
        return q;
    };
    let drainable = if sample.waiting == 0 {
        f64::from(q)
    } else if sample.max_running == 0 {
        0.0
    } else {
        let room = f64::from(sample.max_running.saturating_sub(sample.running));
        f64::from(q) * (room / f64::from(sample.waiting)).min(1.0)
    };
    let done = age.0 as f64 * 1e-9 * f64::from(tps);
    // Both are finite and non-negative; the cast truncates toward zero (whole tokens done).
    let drained = done.min(drainable) as u32;
    q - drained.min(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(running: u32, waiting: u32, max_running: u32, queued: u32) -> LoadSample {
        let mut s = LoadSample::new(running, waiting, max_running, 0.1);
        s.waiting_prefill_tokens = Some(queued);
        s
    }

    const MS: u64 = 1_000_000;

    /// Hand-computed: 25,000 tokens/s drains 25 tokens per millisecond.
    /// * Nothing waiting (a running request mid-prefill), 10,000 queued: after 200 ms
    ///   5,000 are done, 5,000 left; after 500 ms all 10,000 (12,500 possible), 0 left.
    /// * A freshly observed report (age 0) is published as reported.
    #[test]
    fn running_prefill_drains_at_the_prefill_throughput() {
        let s = sample(25, 0, 38, 10_000);
        assert_eq!(queued_at(&s, Some(25_000.0), Nanos(200 * MS)), 5_000);
        assert_eq!(queued_at(&s, Some(25_000.0), Nanos(500 * MS)), 0);
        assert_eq!(queued_at(&s, Some(25_000.0), Nanos(0)), 10_000);
        // 1 ms: 25 tokens.
        assert_eq!(queued_at(&s, Some(25_000.0), Nanos(MS)), 9_975);
    }

    /// The cap holds back the waiting requests that cannot start: 36 running of 38 with 4
    /// waiting and 20,000 queued: only 2/4 of the queue can drain, 10,000 tokens, so after a
    /// second (25,000 possible) 10,000 are left. Full (38 of 38): nothing drains. An
    /// unknown cap with requests waiting: nothing drains.
    #[test]
    fn waiting_requests_beyond_the_cap_do_not_drain() {
        let tps = Some(25_000.0);
        let second = Nanos(1_000 * MS);
        assert_eq!(queued_at(&sample(36, 4, 38, 20_000), tps, second), 10_000);
        assert_eq!(queued_at(&sample(38, 4, 38, 20_000), tps, second), 20_000);
        assert_eq!(queued_at(&sample(40, 4, 38, 20_000), tps, second), 20_000);
        assert_eq!(queued_at(&sample(10, 4, 0, 20_000), tps, second), 20_000);
        // With room for all of them, all of it: 20,000 of 25,000 possible.
        assert_eq!(queued_at(&sample(10, 4, 38, 20_000), tps, second), 0);
        // 100 ms of 25,000 tokens/s = 2,500 of the 10,000 drainable.
        assert_eq!(
            queued_at(&sample(36, 4, 38, 20_000), tps, Nanos(100 * MS)),
            17_500
        );
    }

    /// No throughput known, or a throughput that is not positive: published as reported;
    /// no waiting prefill in the report: 0.
    #[test]
    fn without_a_prefill_throughput_the_report_stands() {
        let s = sample(5, 0, 38, 6_400);
        let long = Nanos(10_000 * MS);
        assert_eq!(queued_at(&s, None, long), 6_400);
        assert_eq!(queued_at(&s, Some(0.0), long), 6_400);
        assert_eq!(queued_at(&s, Some(f32::NAN), long), 6_400);
        let none = LoadSample::new(5, 0, 38, 0.1);
        assert_eq!(queued_at(&none, Some(25_000.0), long), 0);
        // A huge age saturates at the whole queue, never below 0.
        assert_eq!(queued_at(&s, Some(f32::MAX), Nanos(u64::MAX)), 0);
    }
}
