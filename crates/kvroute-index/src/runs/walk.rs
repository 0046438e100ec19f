//! `match_prefix` over runs: per-worker overlap of a request's chained hashes.
//!
//! The walk keeps an `alive` bitset of workers still matching. At a run reached at request
//! depth `d` it compares the request's next hashes with the run's keys in a row, up to the
//! first difference or the run's end (`m` positions). A worker whose leading coverage of
//! the run is `c` (every position for a full holder, `cutoff` for a partial one, 0 for
//! anyone else) stays alive if `c >= m`, and otherwise drops out with overlap `d + c`. The
//! request's next hash, if any, is then looked up as the first key of a run.
//!
//! The overlaps go into [`Overlaps`] by word of 64 slots
//! ([`Overlaps::record_word`](crate::index::Overlaps)): the workers of a word that drop out
//! together, when they are more than half of it, as the word's depth (one store), the
//! others as entries. Two bitsets of words, those with a worker left and those that lost one
//! at this run, keep every pass after a run's bitset arithmetic to those words. Cost:
//! O(hashes compared + runs × (words + partials) + words that lose a worker + workers
//! recorded as entries); no allocation.

use super::RunIndex;
use crate::index::Overlaps;
use crate::index::matching::{MAX_WORDS, TAIL_SLOTS};
use kvroute_core::SequenceHash;

/// How many leading keys of `keys` equal the hashes of `want` (compared eight at a time,
/// one branch per eight keys, then one by one from the first group that differs).
#[inline]
fn common_prefix(keys: &[u64], want: &[SequenceHash]) -> usize {
    let lim = keys.len().min(want.len());
    let (keys, want) = (&keys[..lim], &want[..lim]);
    let mut m = 0;
    for (k, w) in keys.chunks_exact(8).zip(want.chunks_exact(8)) {
        let mut diff = 0;
        for (a, b) in k.iter().zip(w) {
            diff |= a ^ b.0;
        }
        if diff != 0 {
            break;
        }
        m += 8;
    }
    while m < lim && keys[m] == want[m].0 {
        m += 1;
    }
    m
}

/// After a run: for each of the first `words` words, `kept` becomes the workers that
/// dropped out (`alive & !kept`) and `alive` the workers kept; returns two bitsets of
/// words, `(gone, live)`: those where some worker dropped out, and those where some
/// worker is still alive.
#[inline(always)]
fn settle_words(
    alive: &mut [u64; MAX_WORDS],
    kept: &mut [u64; MAX_WORDS],
    words: usize,
) -> (u64, u64) {
    let (mut gone, mut live) = (0u64, 0u64);
    for w in 0..words.min(MAX_WORDS) {
        let (a, k) = (alive[w], kept[w]);
        kept[w] = a & !k;
        alive[w] = k;
        gone |= u64::from(a & !k != 0) << w;
        live |= u64::from(k != 0) << w;
    }
    (gone, live)
}

/// [`settle_words`] four words per 256-bit step, each step's bits of `gone` and `live`
/// from a compare with zero and a `vmovmskpd`. Steps cover the words up to the next
/// multiple of four; the walk never sets a word past `words` (they stay 0 in both sets),
/// so those contribute no bit and stay 0.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[inline(always)]
unsafe fn settle_words_avx2(
    alive: &mut [u64; MAX_WORDS],
    kept: &mut [u64; MAX_WORDS],
    words: usize,
) -> (u64, u64) {
    #[cfg(target_arch = "x86")]
    use core::arch::x86::{
        __m256i, _mm256_andnot_si256, _mm256_castsi256_pd, _mm256_cmpeq_epi64, _mm256_loadu_si256,
        _mm256_movemask_pd, _mm256_setzero_si256, _mm256_storeu_si256,
    };
    #[cfg(target_arch = "x86_64")]
    use core::arch::x86_64::{
        __m256i, _mm256_andnot_si256, _mm256_castsi256_pd, _mm256_cmpeq_epi64, _mm256_loadu_si256,
        _mm256_movemask_pd, _mm256_setzero_si256, _mm256_storeu_si256,
    };
    const { assert!(MAX_WORDS % 4 == 0) };
    let (mut gone, mut live) = (0u64, 0u64);
    let mut w = 0;
    while w < words.min(MAX_WORDS) {
        // SAFETY: the CPU has AVX2 (the caller's precondition). `w` is a multiple of 4
        // below `MAX_WORDS`, itself a multiple of 4, so `w..w + 4` is inside both arrays:
        // each unaligned 32-byte load and store reads or writes four of their `u64`s.
        unsafe {
            let pa = alive.as_mut_ptr().add(w).cast::<__m256i>();
            let pk = kept.as_mut_ptr().add(w).cast::<__m256i>();
            let (a, k) = (_mm256_loadu_si256(pa), _mm256_loadu_si256(pk));
            let dropped = _mm256_andnot_si256(k, a);
            _mm256_storeu_si256(pk, dropped);
            _mm256_storeu_si256(pa, k);
            let zero = _mm256_setzero_si256();
            let none_dropped =
                _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(dropped, zero)));
            let none_kept = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(k, zero)));
            gone |= (!(none_dropped as u64) & 0xF) << w;
            live |= (!(none_kept as u64) & 0xF) << w;
        }
        w += 4;
    }
    (gone, live)
}

impl RunIndex {
    /// Writes, for every worker slot, how many leading blocks of `hashes` the worker holds
    /// contiguously from block 0, into `out` (see the module docs of `runs`).
    ///
    /// Lock-free: runs concurrently with writers and never waits for them; a block stored
    /// or removed during the match may or may not be seen. Resizes `out` to
    /// `worker_slots` if needed (only then does it allocate).
    ///
    /// Runs a copy compiled for AVX2, BMI1 and POPCNT where the CPU has them
    /// ([`kvroute_core::cpu::avx2_enabled`]), the baseline copy otherwise; both write the
    /// same overlaps.
    #[inline]
    pub fn match_prefix(&self, hashes: &[SequenceHash], out: &mut Overlaps) {
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if kvroute_core::cpu::avx2_enabled() {
            // SAFETY: `match_prefix_avx2`'s only precondition is that the CPU supports
            // AVX2, BMI1 and POPCNT, which `avx2_enabled` just detected.
            unsafe { self.match_prefix_avx2(hashes, out) };
            return;
        }
        self.walk::<false>(hashes, out);
    }

    /// [`match_prefix`](Self::match_prefix) on the baseline copy, whatever the CPU has
    /// (tests compare it with the dispatched one).
    #[doc(hidden)]
    pub fn match_prefix_baseline(&self, hashes: &[SequenceHash], out: &mut Overlaps) {
        self.walk::<false>(hashes, out);
    }

    /// The walk compiled for AVX2, BMI1 and POPCNT (the `alive` words' counts become
    /// `popcnt`, their scans `tzcnt`, and a run's words are settled four at a time,
    /// [`settle_words_avx2`]).
    ///
    /// # Safety
    /// The CPU must support AVX2, BMI1 and POPCNT.
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    #[target_feature(enable = "avx2,bmi1,popcnt")]
    unsafe fn match_prefix_avx2(&self, hashes: &[SequenceHash], out: &mut Overlaps) {
        self.walk::<true>(hashes, out);
    }

    /// The match itself, inlined into each copy; `AVX2` only in the copy compiled for AVX2
    /// (`match_prefix_avx2`), where it settles the words four at a time
    /// ([`settle_words_avx2`]).
    #[inline(always)]
    fn walk<const AVX2: bool>(&self, hashes: &[SequenceHash], out: &mut Overlaps) {
        let slots = self.config.worker_slots;
        // Every slot reads 0 from here; the walk records each worker once, when it drops
        // out or at the end, as its word's depth or as an entry (`Overlaps::record_word`).
        out.begin_words(slots);
        let n = hashes.len();
        if n == 0 {
            return;
        }
        let words = slots.div_ceil(64).min(MAX_WORDS);
        let guard = super::epoch::pin();
        let Some(mut view) = self.heads.find(hashes[0].0, &guard) else {
            return;
        };
        let mut alive = [0u64; MAX_WORDS];
        alive[..words].fill(u64::MAX);
        if slots % 64 != 0 {
            alive[words - 1] = (1u64 << (slots % 64)) - 1;
        }
        let mut kept = [0u64; MAX_WORDS];
        let mut d = 0usize;
        let mut deepest = 0usize;
        // A slot whose overlap is `deepest` (once `deepest > 0`): the partial holder that
        // set it, or a worker still matching when the walk's depth set it (its overlap is
        // at least that depth, and anything deeper raises `deepest` again).
        let mut witness = 0u32;
        // The deepest overlap given to a worker that dropped out, and whether the tail (the
        // workers still alive once at most `TAIL_SLOTS` are) is recorded.
        let mut dropped_max = 0usize;
        let mut tail: Option<u32> = None;
        let mut tail_slots = [0u32; TAIL_SLOTS];
        let mut tail_len = 0;
        loop {
            let keys = view.keys();
            let want = &hashes[d..];
            if let Some(next) = want.get(keys.len()) {
                // The lookup after a full match of this run: start loading its slot now.
                self.heads.prefetch(next.0, &guard);
            }
            let m = common_prefix(keys, want);
            let full = view.full();
            for w in 0..words {
                kept[w] = alive[w] & full.get(w).copied().unwrap_or(0);
            }
            for &(s, c) in view.partials() {
                let (wi, bit) = (s as usize / 64, 1u64 << (s % 64));
                if wi >= words || alive[wi] & bit == 0 {
                    continue;
                }
                if c as usize >= m {
                    kept[wi] |= bit;
                } else {
                    let o = d + c as usize;
                    out.record_word(wi, bit, o as u32);
                    if o > deepest {
                        deepest = o;
                        witness = s;
                    }
                    dropped_max = dropped_max.max(o);
                    alive[wi] &= !bit;
                }
            }
            // Which words still have a worker (`live`) and which lost one here (`gone`), one
            // bit per word (at most 64 words), in one pass; `kept` becomes the words of
            // those who dropped out here. The passes after it visit only those words.
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            let (gone, live) = if AVX2 {
                // SAFETY: `AVX2` is true only in `match_prefix_avx2`, whose caller checked
                // that the CPU has AVX2.
                unsafe { settle_words_avx2(&mut alive, &mut kept, words) }
            } else {
                settle_words(&mut alive, &mut kept, words)
            };
            #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
            let (gone, live) = settle_words(&mut alive, &mut kept, words);
            if gone != 0 {
                let mut left = gone;
                while left != 0 {
                    let w = left.trailing_zeros() as usize;
                    // At depth 0 too: a worker without the first run's first block gets
                    // its 0 written here.
                    out.record_word(w, kept[w], d as u32);
                    left &= left - 1;
                }
                dropped_max = dropped_max.max(d);
            }
            if live == 0 {
                break;
            }
            if tail.is_none() {
                let mut alive_count = 0;
                let mut left = live;
                while left != 0 && alive_count <= TAIL_SLOTS {
                    alive_count += alive[left.trailing_zeros() as usize].count_ones() as usize;
                    left &= left - 1;
                }
                if alive_count <= TAIL_SLOTS {
                    // Every worker not alive now has its overlap written already.
                    let mut left = live;
                    while left != 0 {
                        let w = left.trailing_zeros() as usize;
                        let mut b = alive[w];
                        while b != 0 {
                            tail_slots[tail_len] = (w * 64) as u32 + b.trailing_zeros();
                            tail_len += 1;
                            b &= b - 1;
                        }
                        left &= left - 1;
                    }
                    tail = Some(dropped_max as u32);
                }
            }
            d += m;
            if d > deepest {
                deepest = d;
                // `live != 0`: some word has a worker left.
                let w = live.trailing_zeros() as usize;
                witness = (w * 64) as u32 + alive[w].trailing_zeros();
            }
            let next = if d < n && m > 0 {
                self.heads.find(hashes[d].0, &guard)
            } else {
                None
            };
            match next {
                Some(v) => view = v,
                None => {
                    let mut left = live;
                    while left != 0 {
                        let w = left.trailing_zeros() as usize;
                        out.record_word(w, alive[w], d as u32);
                        left &= left - 1;
                    }
                    break;
                }
            }
        }
        if let Some(bound) = tail {
            out.set_tail(&tail_slots[..tail_len], bound);
        }
        out.finish(deepest as u32, words * 64);
        if deepest > 0 {
            out.set_deepest_slot(witness);
        }
    }
}

#[cfg(all(test, not(kvroute_loom)))]
mod tests {
    use super::*;

    /// The first difference is found wherever it lies in or after the groups of eight,
    /// whichever of the two is shorter, and a full match is the shorter length.
    #[test]
    fn common_prefix_is_the_first_difference_or_the_shorter_length() {
        for keys_len in 0..=27usize {
            for want_len in [0, 1, keys_len.saturating_sub(3), keys_len, keys_len + 5] {
                let keys: Vec<u64> = (0..keys_len as u64).map(|k| k * 7 + 1).collect();
                let want: Vec<SequenceHash> = (0..want_len as u64)
                    .map(|k| SequenceHash(k * 7 + 1))
                    .collect();
                let lim = keys_len.min(want_len);
                assert_eq!(common_prefix(&keys, &want), lim, "{keys_len} {want_len}");
                for p in 0..lim {
                    let mut changed = want.clone();
                    changed[p].0 ^= 1 << (p % 64);
                    assert_eq!(
                        common_prefix(&keys, &changed),
                        p,
                        "{keys_len} {want_len} {p}"
                    );
                }
            }
        }
    }
}
