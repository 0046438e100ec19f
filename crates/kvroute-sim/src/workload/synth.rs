//! Building blocks of the built-in scenarios: fresh token ids, Poisson arrivals, a Zipf
//! sampler, follow-up prompts and workload slicing. All randomness comes from one seeded
//! [`StdRng`], so a scenario is a pure function of its seed (for one `rand` version).

use std::collections::HashSet;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::request::{FollowUp, PromptSpec, SimRequest, output_token};
use crate::workload::Workload;

/// First token id the scenarios hand out: above every Mooncake trace token
/// (`hash_id * 512 + t`, below 10^8 for the released traces) and below
/// [`crate::request::OUTPUT_TOKEN_BASE`], so scenario prompts, trace prompts and output
/// tokens never collide.
pub const SCENARIO_TOKEN_BASE: u32 = 200_000_000;

/// The scenarios' random source, seeded from the user's `--seed`.
pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// Hands out runs of never-used token ids, so two prompts share a prefix only where a
/// scenario means them to.
#[derive(Debug)]
pub struct TokenSpace {
    next: u32,
}

impl Default for TokenSpace {
    fn default() -> Self {
        Self {
            next: SCENARIO_TOKEN_BASE,
        }
    }
}

impl TokenSpace {
    /// `n` fresh token ids (consecutive).
    ///
    /// # Panics
    /// If the space below [`crate::request::OUTPUT_TOKEN_BASE`] runs out (800 M tokens;
    /// the scenarios use a few million).
    pub fn fresh(&mut self, n: u32) -> Vec<u32> {
        let start = self.next;
        self.next = start
            .checked_add(n)
            .filter(|&e| e < crate::request::OUTPUT_TOKEN_BASE)
            .expect("scenario token space exhausted");
        (start..self.next).collect()
    }
}

/// `a` followed by `b`, as a shared prompt.
pub fn concat(a: &[u32], b: &[u32]) -> Arc<[u32]> {
    let mut v = Vec::with_capacity(a.len() + b.len());
    v.extend_from_slice(a);
    v.extend_from_slice(b);
    v.into()
}

/// A follow-up turn's prompt: the parent's prompt, the parent's `parent_output` output
/// tokens ([`output_token`]`(parent_id, j)` for `j` in `0..parent_output`), then `user`.
pub fn follow_up_prompt(
    parent_id: u64,
    parent: &[u32],
    parent_output: u32,
    user: &[u32],
) -> Arc<[u32]> {
    let mut v = Vec::with_capacity(parent.len() + parent_output as usize + user.len());
    v.extend_from_slice(parent);
    v.extend((0..parent_output).map(|j| output_token(parent_id, j)));
    v.extend_from_slice(user);
    v.into()
}

/// Exponential inter-arrival gap for a Poisson process of `rate_per_s` (seconds):
/// `−ln(1 − u) / rate` with `u` uniform in `[0, 1)` (inverse-CDF sampling).
pub fn exp_gap(rng: &mut StdRng, rate_per_s: f64) -> f64 {
    let u: f64 = rng.random();
    -(1.0 - u).ln() / rate_per_s
}

/// A Zipf sampler over ranks `0..n` with `P(k) ∝ (k + 1)^−s` (inverse CDF over the
/// normalised cumulative weights, binary search).
#[derive(Clone, Debug)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// The sampler for `n` ranks and exponent `s`.
    ///
    /// # Panics
    /// If `n == 0` or `s` is not finite.
    pub fn new(n: usize, s: f64) -> Self {
        assert!(
            n > 0 && s.is_finite(),
            "Zipf needs n > 0 and a finite exponent"
        );
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|k| {
                acc += (k as f64).powf(-s);
                acc
            })
            .collect();
        for c in &mut cdf {
            *c /= acc;
        }
        Self { cdf }
    }

    /// Probability of rank `k` (0-based).
    pub fn pmf(&self, k: usize) -> f64 {
        self.cdf[k] - if k == 0 { 0.0 } else { self.cdf[k - 1] }
    }

    /// One rank (0-based).
    pub fn sample(&self, rng: &mut StdRng) -> usize {
        let u: f64 = rng.random();
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }
}

/// A plain request arriving at `arrival_s`.
pub fn request(id: u64, arrival_s: f64, prompt: Arc<[u32]>, output_tokens: u32) -> SimRequest {
    SimRequest {
        id,
        arrival_s,
        prompt: PromptSpec::Tokens(prompt),
        output_tokens,
        follows: None,
        pinned: None,
    }
}

/// A request arriving `think_s` after request `parent` finishes.
pub fn follow_up(
    id: u64,
    parent: u64,
    think_s: f64,
    prompt: Arc<[u32]>,
    output_tokens: u32,
) -> SimRequest {
    SimRequest {
        id,
        arrival_s: 0.0,
        prompt: PromptSpec::Tokens(prompt),
        output_tokens,
        follows: Some(FollowUp { parent, think_s }),
        pinned: None,
    }
}

/// `count` requests pinned to `engine` that give it a starting load: request `i` (ids
/// `0..count`) arrives at `i` ms with prompt `shared` + `user_tokens` fresh tokens and
/// `output()` output tokens (called once a request, after its tokens are drawn).
pub fn pinned(
    tokens: &mut TokenSpace,
    shared: &[u32],
    count: u32,
    user_tokens: u32,
    engine: u32,
    mut output: impl FnMut() -> u32,
) -> Vec<SimRequest> {
    (0..count)
        .map(|i| {
            let prompt = concat(shared, &tokens.fresh(user_tokens));
            let mut r = request(u64::from(i), f64::from(i) * 1e-3, prompt, output());
            r.pinned = Some(engine);
            r
        })
        .collect()
}

/// A steady load on Zipf-popular shared prefixes: `requests` Poisson arrivals from t = 0,
/// each one of `prefixes` prefixes of `prefix_tokens` tokens (Zipf exponent `zipf_s`, rank 1
/// most popular) followed by a suffix of its own.
#[derive(Clone, Copy, Debug)]
pub struct ZipfLoad {
    /// Distinct shared prefixes.
    pub prefixes: usize,
    /// Length of each prefix (tokens).
    pub prefix_tokens: u32,
    /// Zipf exponent of prefix popularity.
    pub zipf_s: f64,
    /// Poisson arrival rate (requests/s).
    pub rate_per_s: f64,
    /// Requests.
    pub requests: u32,
    /// Each request's own suffix after its prefix (tokens, inclusive range).
    pub suffix_tokens: (u32, u32),
    /// Output length (tokens, inclusive range).
    pub output_tokens: (u32, u32),
}

impl ZipfLoad {
    /// The load's requests for `seed` (ids `0..requests`, in arrival order).
    ///
    /// # Panics
    /// If `prefixes == 0`, `zipf_s` is not finite, or a range is empty.
    pub fn requests(&self, seed: u64) -> Vec<SimRequest> {
        let mut rng = rng(seed);
        let (mut tokens, prefixes) = self.prefix_set();
        let zipf = Zipf::new(self.prefixes, self.zipf_s);
        let (suffix, output) = (self.suffix_tokens, self.output_tokens);
        let mut t = 0.0;
        (0..u64::from(self.requests))
            .map(|id| {
                t += exp_gap(&mut rng, self.rate_per_s);
                let p = &prefixes[zipf.sample(&mut rng)];
                let suffix = tokens.fresh(rng.random_range(suffix.0..=suffix.1));
                let out = rng.random_range(output.0..=output.1);
                request(id, t, concat(p, &suffix), out)
            })
            .collect()
    }
}

impl ZipfLoad {
    /// The load's prefixes by rank (rank 0 most popular), each `prefix_tokens` fresh
    /// tokens, and the token space after them: the same prefixes for every seed.
    fn prefix_set(&self) -> (TokenSpace, Vec<Vec<u32>>) {
        let mut tokens = TokenSpace::default();
        let prefixes = (0..self.prefixes)
            .map(|_| tokens.fresh(self.prefix_tokens))
            .collect();
        (tokens, prefixes)
    }

    /// A warm-up that leaves the engines' caches as an earlier run of this load spread
    /// evenly would: `earlier` prefixes drawn from the load's Zipf law (with a random source
    /// of their own, `rng(seed ^ WARM_UP_SALT)`), draw `i` on engine `i mod engines`, and
    /// one pinned request per distinct (prefix, engine) pair, in draw order: prompt the
    /// prefix alone, 1 output token, ids `0..`, request `j` arriving at `j` ms. A popular
    /// prefix so ends up cached on every engine, a rare one on one or none.
    ///
    /// # Panics
    /// If `engines == 0`, or as [`ZipfLoad::requests`].
    pub fn warm_up(&self, seed: u64, earlier: u32, engines: u32) -> Vec<SimRequest> {
        assert!(engines > 0, "a warm-up needs an engine");
        let mut rng = rng(seed ^ WARM_UP_SALT);
        let (_, prefixes) = self.prefix_set();
        let zipf = Zipf::new(self.prefixes, self.zipf_s);
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for i in 0..earlier {
            let k = zipf.sample(&mut rng);
            let engine = i % engines;
            if seen.insert((k, engine)) {
                let j = out.len() as u64;
                let mut r = request(j, j as f64 * 1e-3, Arc::from(&prefixes[k][..]), 1);
                r.pinned = Some(engine);
                out.push(r);
            }
        }
        out
    }
}

/// Mixed into a seed for [`ZipfLoad::warm_up`]'s draws, so that they differ from the
/// load's own (an arbitrary odd constant).
pub const WARM_UP_SALT: u64 = 0x9e37_79b9_7f4a_7c15;

/// The workload cut to its first `n` routed requests (in list order), its pinned requests
/// (a scenario's setup: a starting load, a warm-up) all kept: follow-ups whose parent was
/// cut are cut too (transitively), so every kept follow-up still has its parent. The name
/// gets a `[..n]` suffix.
pub fn truncate(mut w: Workload, n: usize) -> Workload {
    if w.requests.iter().filter(|r| r.pinned.is_none()).count() <= n {
        return w;
    }
    let mut routed = 0usize;
    w.requests.retain(|r| {
        if r.pinned.is_some() {
            return true;
        }
        routed += 1;
        routed <= n
    });
    // Parents may appear after children in the list; iterate until nothing more is cut.
    loop {
        let kept: HashSet<u64> = w.requests.iter().map(|r| r.id).collect();
        let before = w.requests.len();
        w.requests
            .retain(|r| r.follows.is_none_or(|f| kept.contains(&f.parent)));
        if w.requests.len() == before {
            break;
        }
    }
    w.name = format!("{}[..{n}]", w.name);
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_pmf_matches_the_formula() {
        // n = 3, s = 1: weights 1, 1/2, 1/3, sum 11/6.
        let z = Zipf::new(3, 1.0);
        assert!((z.pmf(0) - 6.0 / 11.0).abs() < 1e-12);
        assert!((z.pmf(1) - 3.0 / 11.0).abs() < 1e-12);
        assert!((z.pmf(2) - 2.0 / 11.0).abs() < 1e-12);
    }

    #[test]
    fn zipf_sample_frequencies_follow_the_pmf() {
        let z = Zipf::new(4, 0.9);
        let mut r = rng(7);
        let mut counts = [0u32; 4];
        let n = 200_000;
        for _ in 0..n {
            counts[z.sample(&mut r)] += 1;
        }
        for (k, &c) in counts.iter().enumerate() {
            let p = z.pmf(k);
            // 5 standard deviations of a binomial proportion.
            let sd = (p * (1.0 - p) / f64::from(n)).sqrt();
            assert!(
                (f64::from(c) / f64::from(n) - p).abs() < 5.0 * sd,
                "rank {k}"
            );
        }
    }

    #[test]
    fn exp_gap_mean_is_one_over_rate() {
        let mut r = rng(3);
        let n = 100_000;
        let mean: f64 = (0..n).map(|_| exp_gap(&mut r, 16.0)).sum::<f64>() / f64::from(n);
        // Standard error of the mean: (1/16)/sqrt(n) ≈ 0.0002.
        assert!((mean - 1.0 / 16.0).abs() < 0.001, "{mean}");
    }

    #[test]
    fn follow_up_prompt_quotes_the_parent_output() {
        let p = follow_up_prompt(5, &[1, 2], 3, &[9]);
        let base = crate::request::OUTPUT_TOKEN_BASE + 5 * 4096;
        assert_eq!(&*p, &[1, 2, base, base + 1, base + 2, 9]);
    }

    #[test]
    fn token_space_never_repeats() {
        let mut s = TokenSpace::default();
        let a = s.fresh(3);
        let b = s.fresh(2);
        assert_eq!(
            a,
            vec![
                SCENARIO_TOKEN_BASE,
                SCENARIO_TOKEN_BASE + 1,
                SCENARIO_TOKEN_BASE + 2
            ]
        );
        assert_eq!(b[0], SCENARIO_TOKEN_BASE + 3);
    }
}
