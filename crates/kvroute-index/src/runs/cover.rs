//! Which positions of one run one worker holds: a sorted list of disjoint half-open
//! intervals `[start, end)` of offsets into the run.
//!
//! A match only needs the worker's *prefix cutoff* (the end of the interval that starts at
//! offset 0, or 0 when none does); the rest is kept so that a hole healed later, or a
//! split of the run, knows exactly what the worker still holds.

/// Half-open intervals of offsets, sorted, disjoint and not touching (adjacent intervals
/// are merged), and when the worker last stored into the run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cover {
    iv: Vec<(u32, u32)>,
    /// The worker's store clock at its last store into the run (its recency there, for
    /// eviction by the per-worker cap).
    pub(crate) stamp: u32,
}

impl Cover {
    /// Whether the worker holds no position.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.iv.is_empty()
    }

    /// End of the interval starting at 0: how many leading positions the worker holds.
    #[inline]
    pub(crate) fn cutoff(&self) -> u32 {
        match self.iv.first() {
            Some(&(0, end)) => end,
            _ => 0,
        }
    }

    /// The held intervals `[start, end)`, sorted and disjoint.
    pub(crate) fn intervals(&self) -> &[(u32, u32)] {
        &self.iv
    }

    /// Whether `p` is held.
    pub(crate) fn contains(&self, p: u32) -> bool {
        let i = self.iv.partition_point(|&(_, e)| e <= p);
        self.iv.get(i).is_some_and(|&(s, _)| s <= p)
    }

    /// Marks `p` held; returns false when it already was.
    pub(crate) fn insert(&mut self, p: u32) -> bool {
        // First interval that ends at or after p (an interval ending at p touches it).
        let i = self.iv.partition_point(|&(_, e)| e < p);
        match self.iv.get(i).copied() {
            Some((s, e)) if s <= p && p < e => false,
            Some((s, e)) if e == p => {
                // Extends interval i at its end; merge with i + 1 if that starts at p + 1.
                let mut end = e + 1;
                if let Some(&(s2, e2)) = self.iv.get(i + 1) {
                    if s2 == p + 1 {
                        end = e2;
                        self.iv.remove(i + 1);
                    }
                }
                self.iv[i] = (s, end);
                true
            }
            Some((s, e)) if s == p + 1 => {
                self.iv[i] = (p, e);
                true
            }
            _ => {
                self.iv.insert(i, (p, p + 1));
                true
            }
        }
    }

    /// Whether any of `a..b` is held.
    pub(crate) fn intersects(&self, a: u32, b: u32) -> bool {
        let i = self.iv.partition_point(|&(_, e)| e <= a);
        self.iv.get(i).is_some_and(|&(s, _)| s < b)
    }

    /// Marks `a..b` held; none of it may be held already (see
    /// [`intersects`](Self::intersects)).
    pub(crate) fn insert_range(&mut self, a: u32, b: u32) {
        debug_assert!(a < b && !self.intersects(a, b));
        // The first interval after `a`; the one before it may end exactly at `a`.
        let i = self.iv.partition_point(|&(_, e)| e < a);
        let joins_prev = self.iv.get(i).is_some_and(|&(_, e)| e == a);
        let next = if joins_prev { i + 1 } else { i };
        let joins_next = self.iv.get(next).is_some_and(|&(s, _)| s == b);
        match (joins_prev, joins_next) {
            (true, true) => {
                self.iv[i].1 = self.iv[next].1;
                self.iv.remove(next);
            }
            (true, false) => self.iv[i].1 = b,
            (false, true) => self.iv[next].0 = a,
            (false, false) => self.iv.insert(i, (a, b)),
        }
    }

    /// Marks `a..b` not held; all of it must be held (so it lies in one interval).
    pub(crate) fn remove_range(&mut self, a: u32, b: u32) {
        let i = self.iv.partition_point(|&(_, e)| e <= a);
        let (s, e) = self.iv[i];
        assert!(s <= a && b <= e, "{a}..{b} is not all held: {:?}", self.iv);
        match (s == a, b == e) {
            (true, true) => {
                self.iv.remove(i);
            }
            (true, false) => self.iv[i].0 = b,
            (false, true) => self.iv[i].1 = a,
            (false, false) => {
                self.iv[i].1 = a;
                self.iv.insert(i + 1, (b, e));
            }
        }
    }

    /// Marks `p` not held; returns false when it was not held (tests; the writer removes
    /// ranges).
    #[cfg(all(test, not(kvroute_loom)))]
    pub(crate) fn remove(&mut self, p: u32) -> bool {
        let i = self.iv.partition_point(|&(_, e)| e <= p);
        let Some((s, e)) = self.iv.get(i).copied() else {
            return false;
        };
        if p < s {
            return false;
        }
        match (s == p, p + 1 == e) {
            (true, true) => {
                self.iv.remove(i);
            }
            (true, false) => self.iv[i] = (p + 1, e),
            (false, true) => self.iv[i] = (s, p),
            (false, false) => {
                self.iv[i] = (s, p);
                self.iv.insert(i + 1, (p + 1, e));
            }
        }
        true
    }

    /// Splits at offset `k`: `self` keeps the positions below `k`; the positions at or
    /// above `k`, shifted down by `k`, are returned.
    pub(crate) fn split_off(&mut self, k: u32) -> Cover {
        let i = self.iv.partition_point(|&(_, e)| e <= k);
        let mut tail: Vec<(u32, u32)> = self.iv.split_off(i);
        if let Some(first) = tail.first_mut() {
            if first.0 < k {
                self.iv.push((first.0, k));
                first.0 = k;
            }
        }
        for iv in &mut tail {
            iv.0 -= k;
            iv.1 -= k;
        }
        Cover {
            iv: tail,
            stamp: self.stamp,
        }
    }

    /// Number of positions held.
    pub(crate) fn count(&self) -> u32 {
        self.iv.iter().map(|&(s, e)| e - s).sum()
    }

    /// Heap bytes of the interval list.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.iv.capacity() * core::mem::size_of::<(u32, u32)>()
    }
}

#[cfg(all(test, not(kvroute_loom)))]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn check(c: &Cover, model: &BTreeSet<u32>) {
        for p in 0..40 {
            assert_eq!(c.contains(p), model.contains(&p), "position {p} of {c:?}");
        }
        let mut cut = 0;
        while model.contains(&cut) {
            cut += 1;
        }
        assert_eq!(c.cutoff(), cut);
        assert_eq!(c.count() as usize, model.len());
        for w in c.iv.windows(2) {
            assert!(w[0].1 < w[1].0, "intervals touch or overlap: {c:?}");
        }
    }

    #[test]
    fn insert_remove_split_agree_with_a_set() {
        // A fixed pseudo-random sequence of operations over positions 0..32.
        let mut c = Cover::default();
        let mut model = BTreeSet::new();
        let mut x: u64 = 0x1234_5678;
        for _ in 0..4000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let p = (x % 32) as u32;
            let len = 1 + (x >> 50) as u32 % 4;
            let free = (p..p + len).all(|q| !model.contains(&q));
            assert_eq!(c.intersects(p, p + len), !free, "{c:?} {p}..{}", p + len);
            let held = (p..p + len).all(|q| model.contains(&q));
            if (x >> 40) % 5 == 4 && held {
                c.remove_range(p, p + len);
                for q in p..p + len {
                    model.remove(&q);
                }
            } else if (x >> 40) % 3 == 0 {
                assert_eq!(c.remove(p), model.remove(&p));
            } else if (x >> 40) % 3 == 1 && free {
                c.insert_range(p, p + len);
                model.extend(p..p + len);
            } else {
                assert_eq!(c.insert(p), model.insert(p));
            }
            check(&c, &model);
        }
        let k = 13;
        let tail = c.split_off(k);
        let head_model: BTreeSet<u32> = model.iter().copied().filter(|&p| p < k).collect();
        let tail_model: BTreeSet<u32> = model.iter().filter(|&&p| p >= k).map(|p| p - k).collect();
        check(&c, &head_model);
        check(&tail, &tail_model);
    }

    #[test]
    fn cutoff_is_the_run_of_leading_positions() {
        let mut c = Cover::default();
        for p in [0, 1, 2, 4] {
            c.insert(p);
        }
        assert_eq!(c.cutoff(), 3);
        c.insert(3);
        assert_eq!(c.cutoff(), 5);
        c.remove(0);
        assert_eq!(c.cutoff(), 0);
    }
}
