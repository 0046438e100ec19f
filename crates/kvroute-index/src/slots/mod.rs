//! [`HashSlots`]: an open-addressing map for keys that are already uniform 64-bit hashes
//! (engine block hashes), one slot of key and value per entry, and [`prefetch`].
//!
//! The maps built on it (the run index's per-worker lane maps; the simulator's block pool)
//! hold millions of entries and are read at random, so nearly every lookup misses the
//! processor's caches. The layout is what counts: a slot holds its key and value, so a
//! lookup reads one cache line (a map with separate control bytes reads two), and a
//! caller that knows its keys ahead can [`prefetch`](HashSlots::prefetch) their slots.
//! Slots are packed to 4-byte alignment, so a 32-bit value makes a 12-byte slot (a
//! 16-byte one with the key's 8-byte alignment): a quarter less memory, and a slot now
//! and then straddles two cache lines (`prefetch` starts both).
//!
//! Linear probing from a multiplicative home slot: the Fibonacci product of the key,
//! scaled to the slot count by its high half (`(key·φ⁻¹ mod 2^64)·n / 2^64`, the top bits
//! of the product when `n` is a power of two; Lemire, "A fast alternative to the modulo
//! reduction", 2016). Deletion shifts the following entries of the cluster back into the
//! hole, so there are no tombstones and a steady churn of inserts and removals never
//! lengthens the probes. `u64::MAX` marks an empty slot; an entry with that key is kept
//! beside the slots.
//!
//! # Sizes
//! The slot count is a power of two (2, 4, 8, 16, ...) or, from 20 on, 5/4, 6/4 or 7/4 of
//! one of at least 16 (20, 24, 28, 40, 48, 56, ...; see [`is_size`]). An insert that
//! would fill more than 3/4 of the slots first grows them to the next size of the map's
//! [`Growth`] (at least 16). By default ([`Growth::Halves`]) that is 3/2 from a power of
//! two and 4/3 from the size between, so a map that only grows is 1/2 to 3/4 full (by 2
//! it would be 3/8 to 3/4); [`Growth::Quarters`] steps by a quarter of the power of two
//! at or below, so it is 3/5 to 3/4 full, for about twice the entry moves (each growth
//! moves every entry: `1 / (g − 1)` moves per entry inserted at growth factor `g`). The
//! caller may [`rehash`](HashSlots::rehash) to any size that fits (to shrink, or to size
//! the map once for what it will hold).
//!
//! Expected probes of an insert (an unsuccessful search) at load `a` are
//! `(1 + 1 / (1 − a)²) / 2` (Knuth, *The Art of Computer Programming* vol. 3, section 6.4):
//! 2.5 at 1/2, 3.2 at 4/7, 8.5 at 3/4, 32.5 at 7/8.

mod batch;

pub use batch::AHEAD as BATCH_AHEAD;

/// Empty-slot key.
const EMPTY: u64 = u64::MAX;

/// 2^64 / φ, odd: the multiplier of Fibonacci hashing (Knuth, vol. 3, section 6.4).
const FIBONACCI: u64 = 0x9e37_79b9_7f4a_7c15;

/// One slot: its key ([`EMPTY`] when vacant) and value, packed to 4-byte alignment (12
/// bytes for a 32-bit value). Fields are only ever read and written by value.
#[derive(Clone, Copy)]
#[repr(C, packed(4))]
struct Slot<V> {
    key: u64,
    value: V,
}

/// The map; see the module docs. `V` is the value (`Copy`, usually a few bytes; its
/// `Default` fills the vacant slots and is never read).
pub struct HashSlots<V> {
    slots: Vec<Slot<V>>,
    len: usize,
    /// The value of key `u64::MAX`, if any.
    max_key: Option<V>,
    /// How the slots grow.
    growth: Growth,
}

/// How a [`HashSlots`] grows when an insert would fill more than 3/4 of its slots (module
/// docs, *Sizes*).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Growth {
    /// By 3/2 and 4/3 in turn (16 → 24 → 32 → 48 → ...): 1/2 to 3/4 full while it grows,
    /// about 2.4 moves per entry inserted.
    #[default]
    Halves,
    /// By a quarter of the power of two at or below the size (16 → 20 → 24 → 28 → 32 →
    /// 40 → ...: steps of 5/4, 6/5, 7/6 and 8/7): 3/5 to 3/4 full while it grows, about
    /// 5 moves per entry inserted.
    Quarters,
}

impl Growth {
    /// The size an insert grows `n` slots to.
    pub fn next(self, n: usize) -> usize {
        match self {
            Self::Halves => next_size(n),
            Self::Quarters => next_quarter(n),
        }
    }

    /// The smallest size this growth reaches at or above `n`.
    pub fn at_least(self, n: usize) -> usize {
        match self {
            Self::Halves => size_at_least(n),
            Self::Quarters => quarter_at_least(n),
        }
    }
}

impl<V: Copy> Clone for HashSlots<V> {
    fn clone(&self) -> Self {
        Self {
            slots: self.slots.clone(),
            len: self.len,
            max_key: self.max_key,
            growth: self.growth,
        }
    }
}

impl<V> core::fmt::Debug for HashSlots<V> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HashSlots")
            .field("len", &(self.len + usize::from(self.max_key.is_some())))
            .field("slots", &self.slots.len())
            .finish()
    }
}

impl<V> Default for HashSlots<V> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            len: 0,
            max_key: None,
            growth: Growth::Halves,
        }
    }
}

impl<V: Copy + Default> HashSlots<V> {
    /// An empty map with `slots` slots (0, or a size of [`is_size`]).
    ///
    /// # Panics
    /// When `slots` is not 0 and not a size of [`is_size`] (1, say, or 20).
    pub fn with_slots(slots: usize) -> Self {
        assert!(
            slots == 0 || is_size(slots),
            "slot count {slots} is not 0, a power of two of at least 2 or 5/4, 6/4 or 7/4 of one of at least 16"
        );
        let vacant = Slot {
            key: EMPTY,
            value: V::default(),
        };
        Self {
            slots: vec![vacant; slots],
            len: 0,
            max_key: None,
            growth: Growth::Halves,
        }
    }

    /// An empty map (no slots) that grows by `growth`.
    pub fn with_growth(growth: Growth) -> Self {
        Self {
            growth,
            ..Self::with_slots(0)
        }
    }

    /// How the map grows.
    pub fn growth(&self) -> Growth {
        self.growth
    }

    /// The home slot of `key` among `n` slots: the Fibonacci product scaled by its high
    /// half (module docs; `n >= 1`).
    #[inline(always)]
    fn home_in(key: u64, n: usize) -> usize {
        ((u128::from(key.wrapping_mul(FIBONACCI)) * n as u128) >> 64) as usize
    }

    /// Empties slot `hole` of `slots` (which holds an entry), shifting the later entries
    /// of its cluster back (backward-shift deletion): each moves into the hole unless its
    /// home lies cyclically in `(hole, j]`, and the hole then moves to where it was.
    #[inline(always)]
    fn vacate(slots: &mut [Slot<V>], mut hole: usize) {
        let n = slots.len();
        let mut j = hole + 1;
        if j >= n {
            j = 0;
        }
        loop {
            let e = slots[j];
            if e.key == EMPTY {
                break;
            }
            let h = Self::home_in(e.key, n);
            let stays = if hole < j {
                hole < h && h <= j
            } else {
                hole < h || h <= j
            };
            if !stays {
                slots[hole] = e;
                hole = j;
            }
            j += 1;
            if j >= n {
                j = 0;
            }
        }
        slots[hole].key = EMPTY;
    }

    /// The home slot of `key`. Only called with slots.
    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        Self::home_in(key, self.slots.len())
    }

    /// Entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.len + usize::from(self.max_key.is_some())
    }

    /// Whether the map is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots.
    #[inline]
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Entries in the slots (those of every key but `u64::MAX`), to weigh against
    /// [`slot_count`](Self::slot_count).
    #[inline]
    pub fn slotted(&self) -> usize {
        self.len
    }

    /// Starts loading the slot where a probe for `key` begins (for a run of lookups or
    /// inserts whose keys are known ahead).
    #[inline]
    pub fn prefetch(&self, key: u64) {
        if !self.slots.is_empty() {
            self.prefetch_home(self.home(key));
        }
    }

    /// The slot where a probe for `key` begins, `0..slot_count()`, for
    /// [`prefetch_home`](Self::prefetch_home) and
    /// [`insert_new_at`](Self::insert_new_at) (a caller inserting a batch computes each
    /// home once). 0 when the map has no slots.
    #[inline(always)]
    pub fn home_slot(&self, key: u64) -> usize {
        self.home(key)
    }

    /// [`prefetch`](Self::prefetch) of the slot `home` (from
    /// [`home_slot`](Self::home_slot)); both lines when the slot straddles two.
    ///
    /// # Panics
    /// When `home` is not below [`slot_count`](Self::slot_count).
    #[inline(always)]
    pub fn prefetch_home(&self, home: usize) {
        let slot = &self.slots[home];
        prefetch(slot);
        // Its last byte, in the next line when the slot straddles two.
        let end = core::ptr::from_ref(slot)
            .cast::<u8>()
            .wrapping_add(size_of::<Slot<V>>() - 1);
        prefetch_addr(end);
    }

    /// Grows the slots, once, to the least size of the growth sequence (module docs) that
    /// takes `extra` more entries without passing 3/4 full, so that the next `extra`
    /// inserts need no growth (the size one insert at a time would reach).
    pub fn reserve(&mut self, extra: usize) {
        let want = self.len + extra;
        let mut size = self.slots.len();
        while want * 4 > size * 3 {
            size = self.growth.next(size);
        }
        if size != self.slots.len() {
            self.rehash(size);
        }
    }

    /// [`insert_new`](Self::insert_new) of `key` whose home slot the caller computed with
    /// [`home_slot`](Self::home_slot) on the current slots (a caller inserting a batch
    /// computes each home once, to prefetch it ahead). Returns whether it inserted. When
    /// the entry would fill more than 3/4 of the slots it grows them first and probes from
    /// the new home; after a [`reserve`](Self::reserve) of the batch that never happens.
    ///
    /// A `home` other than `key`'s is a logic error (debug builds assert it): the probe
    /// still ends, but may miss a present `key` and insert it twice.
    ///
    /// # Panics
    /// When `home` is not below [`slot_count`](Self::slot_count) and no growth happens.
    #[inline(always)]
    pub fn insert_new_at(&mut self, key: u64, home: usize, value: V) -> bool {
        if key == EMPTY || (self.len + 1) * 4 > self.slots.len() * 3 {
            return self.insert_new(key, value);
        }
        debug_assert_eq!(home, self.home(key));
        let slots = &mut self.slots[..];
        let n = slots.len();
        let mut i = home;
        loop {
            let k = slots[i].key;
            if k == key {
                return false;
            }
            if k == EMPTY {
                slots[i] = Slot { key, value };
                self.len += 1;
                return true;
            }
            i += 1;
            if i >= n {
                i = 0;
            }
        }
    }

    /// The slot holding `key`, or the vacant one that ends its probe sequence. Only called
    /// with slots, at least one of them vacant (the load stays below 1).
    #[inline(always)]
    fn probe(&self, key: u64) -> (usize, bool) {
        let slots = &self.slots[..];
        batch::probe_from(slots, key, Self::home_in(key, slots.len()))
    }

    /// The value of `key`.
    #[inline(always)]
    pub fn get(&self, key: u64) -> Option<V> {
        if key == EMPTY {
            return self.max_key;
        }
        if self.slots.is_empty() {
            return None;
        }
        match self.probe(key) {
            (i, true) => Some(self.slots[i].value),
            _ => None,
        }
    }

    /// Points the present `key` at `value`; returns whether it was present.
    #[inline]
    pub fn set(&mut self, key: u64, value: V) -> bool {
        self.replace(key, value).is_some()
    }

    /// Points the present `key` at `value` (one probe); returns the value it had, or
    /// `None` (and changes nothing) when it is absent.
    #[inline]
    pub fn replace(&mut self, key: u64, value: V) -> Option<V> {
        if key == EMPTY {
            return self.max_key.as_mut().map(|v| core::mem::replace(v, value));
        }
        if self.slots.is_empty() {
            return None;
        }
        match self.probe(key) {
            (i, true) => {
                let old = self.slots[i].value;
                self.slots[i].value = value;
                Some(old)
            }
            _ => None,
        }
    }

    /// Maps `key` to `value` unless it is present; returns whether it inserted. Grows the
    /// slots first to the next size (at least 16; module docs) when the entry would fill
    /// more than 3/4 of them.
    #[inline(always)]
    pub fn insert_new(&mut self, key: u64, value: V) -> bool {
        if key == EMPTY {
            if self.max_key.is_some() {
                return false;
            }
            self.max_key = Some(value);
            return true;
        }
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.rehash(self.growth.next(self.slots.len()));
        }
        match self.probe(key) {
            (_, true) => false,
            (i, false) => {
                self.slots[i] = Slot { key, value };
                self.len += 1;
                true
            }
        }
    }

    /// Removes `key`, returning its value.
    #[inline(always)]
    pub fn remove(&mut self, key: u64) -> Option<V> {
        if key == EMPTY {
            return self.max_key.take();
        }
        if self.slots.is_empty() {
            return None;
        }
        let (hole, found) = self.probe(key);
        if !found {
            return None;
        }
        let value = self.slots[hole].value;
        Self::vacate(&mut self.slots, hole);
        self.len -= 1;
        Some(value)
    }

    /// Moves every entry into `slots` new slots (0, or a size of [`is_size`] above the
    /// entries in the slots).
    ///
    /// # Panics
    /// As [`with_slots`](Self::with_slots), and when the entries do not fit.
    pub fn rehash(&mut self, slots: usize) {
        assert!(
            slots > self.len || (slots == 0 && self.len == 0),
            "entries do not fit"
        );
        let old = core::mem::replace(self, Self::with_slots(slots));
        self.growth = old.growth;
        self.max_key = old.max_key;
        self.len = old.len;
        let dst = &mut self.slots[..];
        let n = dst.len();
        let src = &old.slots[..];
        // The old slots are visited cyclically from just after a vacant one, so each
        // cluster is visited whole and clusters in the order of their homes; a home scales
        // monotonically with the slot count (module docs), so the new homes mostly ascend.
        // Each entry still goes to the first vacant slot at or after its new home (the
        // insert of `insert_new`), found without probing in the common cases: the slots
        // `[stretch, cursor)` are all occupied and every slot from `cursor` on is vacant
        // (until `cursor` reaches the end), so an entry whose home is at or past `cursor`
        // goes to its home, and one whose home is inside the stretch goes to `cursor`.
        let start = src.iter().position(|e| e.key == EMPTY).map_or(0, |i| i + 1);
        let (mut stretch, mut cursor) = (0, 0);
        for &e in src[start..].iter().chain(&src[..start]) {
            if e.key == EMPTY {
                continue;
            }
            let h = Self::home_in(e.key, n);
            let i = if h >= cursor {
                if h > cursor {
                    stretch = h;
                }
                cursor = h + 1;
                h
            } else if h >= stretch && cursor < n {
                cursor += 1;
                cursor - 1
            } else {
                // Slot `cursor` (when below `n`) is vacant, so a probe from below it stops
                // there at the latest and never wraps.
                let mut i = h;
                while dst[i].key != EMPTY {
                    i += 1;
                    if i >= n {
                        i = 0;
                    }
                }
                if i == cursor {
                    cursor += 1;
                }
                i
            };
            debug_assert!(dst[i].key == EMPTY);
            dst[i] = e;
        }
    }

    /// Every key, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.slots
            .iter()
            .filter(|e| e.key != EMPTY)
            .map(|e| e.key)
            .chain(self.max_key.map(|_| EMPTY))
    }

    /// Heap bytes (the slots' allocation).
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * core::mem::size_of::<Slot<V>>()
    }
}

/// Whether `n` is a slot count [`HashSlots`] takes: a power of two of at least 2, or 5/4,
/// 6/4 or 7/4 of a power of two of at least 16 (20, 24, 28, 40, 48, 56, 80, ...).
pub fn is_size(n: usize) -> bool {
    if n >= 2 && n.is_power_of_two() {
        return true;
    }
    if n == 0 {
        return false;
    }
    // `n = m · 2^k` with `m` in 5, 6, 7 and `2^k >= 4` (so the power below is at least 16).
    let k = n.trailing_zeros();
    let m = n >> k;
    n >= 20 && k >= 2 && (m == 5 || m == 3 || m == 7) && (m != 3 || k >= 3)
}

/// The size an insert grows `n` slots to under [`Growth::Halves`]: 16 from fewer than 16,
/// then 3/2 of a power of two and 4/3 of the size between (16 → 24 → 32 → 48 → ...).
pub fn next_size(n: usize) -> usize {
    if n < 16 {
        16
    } else if n.is_power_of_two() {
        n + n / 2
    } else {
        n / 3 * 4
    }
}

/// The smallest size of [`Growth::Halves`] (a power of two, or 3/2 of one of at least 16)
/// at or above `n` (2 for `n <= 2`).
///
/// # Panics
/// When `n` is above the largest power of two of `usize` (no size is that large).
pub fn size_at_least(n: usize) -> usize {
    let p = n
        .max(2)
        .checked_next_power_of_two()
        .expect("no slot count is that large");
    let between = p / 4 * 3;
    if between >= 24 && between >= n {
        between
    } else {
        p
    }
}

/// The size an insert grows `n` slots to under [`Growth::Quarters`]: 16 from fewer than
/// 16, then a quarter of the power of two at or below `n` more (16 → 20 → 24 → 28 → 32 →
/// 40 → ...).
pub fn next_quarter(n: usize) -> usize {
    if n < 16 {
        16
    } else {
        let p = 1usize << (usize::BITS - 1 - n.leading_zeros());
        n + p / 4
    }
}

/// The smallest size of [`Growth::Quarters`] (a power of two, or 5/4, 6/4 or 7/4 of one of
/// at least 16) at or above `n` (2 for `n <= 2`).
///
/// # Panics
/// When `n` is above the largest power of two of `usize` (no size is that large).
pub fn quarter_at_least(n: usize) -> usize {
    let p = n
        .max(2)
        .checked_next_power_of_two()
        .expect("no slot count is that large");
    // The quarter steps between `p / 2` and `p`, when `p / 2` is at least 16.
    if p >= 32 {
        for m in 5..8 {
            let s = p / 8 * m;
            if s >= n {
                return s;
            }
        }
    }
    p
}

/// Starts loading the cache line of `r` into every cache level (a hint: it never faults
/// and changes nothing; a no-op off x86_64).
#[inline]
pub fn prefetch<T>(r: &T) {
    prefetch_addr(core::ptr::from_ref(r).cast::<u8>());
}

/// [`prefetch`] of the line holding address `p` (any address: the hint never faults).
#[inline]
fn prefetch_addr(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(kvroute_loom)))]
    {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: `_mm_prefetch` is a hint: it never faults, whatever the address, and
        // reads nothing architecturally; SSE is part of the x86_64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
    }
    #[cfg(not(all(target_arch = "x86_64", not(kvroute_loom))))]
    let _ = p;
}

#[cfg(all(test, not(kvroute_loom)))]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Against `std`'s map under random churn and rehashes up and down, with keys crowded
    /// into a few home slots (small keys: the top bits of their products collide often)
    /// and the empty-slot key among them.
    #[test]
    fn agrees_with_a_hash_map_under_churn_and_rehashes() {
        let mut t: HashSlots<u32> = HashSlots::with_slots(512);
        let mut m: HashMap<u64, u32> = HashMap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for step in 0..100_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = match x % 301 {
                0 => u64::MAX,
                k => k,
            };
            match (x >> 32) % 10 {
                0 | 1 => {
                    let fresh = !m.contains_key(&key);
                    assert_eq!(t.insert_new(key, step), fresh);
                    m.entry(key).or_insert(step);
                }
                2 => {
                    // From a home computed first (what a batch prefetches ahead).
                    let fresh = !m.contains_key(&key);
                    let home = t.home_slot(key);
                    assert_eq!(t.insert_new_at(key, home, step), fresh);
                    m.entry(key).or_insert(step);
                }
                3 => {
                    let had = m.get_mut(&key).map(|v| *v = step).is_some();
                    assert_eq!(t.set(key, step), had);
                }
                7..=9 => {
                    let old = m.get_mut(&key).map(|v| core::mem::replace(v, step));
                    assert_eq!(t.replace(key, step), old);
                }
                4 | 5 => assert_eq!(t.remove(key), m.remove(&key)),
                _ => {
                    // Around 384, 512 and 768 slots (a power of two and the sizes between,
                    // whose probes wrap at a count that is not one), entries kept.
                    let to = match t.slot_count() {
                        384 => 768,
                        768 => 512,
                        _ => 384,
                    };
                    t.rehash(to);
                    assert_eq!(t.slot_count(), to);
                }
            }
            assert_eq!(t.len(), m.len());
            assert_eq!(t.get(key), m.get(&key).copied());
        }
        for (&k, &v) in &m {
            assert_eq!(t.get(k), Some(v));
        }
        let mut keys: Vec<u64> = t.keys().collect();
        keys.sort_unstable();
        let mut want: Vec<u64> = m.keys().copied().collect();
        want.sort_unstable();
        assert_eq!(keys, want);
        // Key and 32-bit value packed: 12 bytes a slot.
        assert_eq!(t.heap_bytes(), t.slot_count() * 12);
    }

    /// Whether every entry of `t` is reachable by a probe from its home: no vacant slot
    /// lies cyclically between an entry's home and its slot.
    fn reachable(t: &HashSlots<u32>) -> bool {
        let n = t.slots.len();
        t.slots.iter().enumerate().all(|(p, e)| {
            if e.key == EMPTY {
                return true;
            }
            let mut i = HashSlots::<u32>::home_in(e.key, n);
            while i != p {
                if t.slots[i].key == EMPTY {
                    return false;
                }
                i = (i + 1) % n;
            }
            true
        })
    }

    /// A rehash to larger and smaller sizes of both growths, from maps up to 3/4 full
    /// whose clusters wrap around the end (keys crowded at the top of the product's
    /// range) or crowd a few homes: every entry stays reachable from its home, every key
    /// keeps its value, and nothing else is present.
    #[test]
    fn a_rehash_keeps_every_entry_reachable_from_its_home() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // The inverse of the Fibonacci multiplier, so a key can be chosen by its product.
        let inv = {
            let mut y: u64 = 1;
            for _ in 0..6 {
                y = y.wrapping_mul(2u64.wrapping_sub(FIBONACCI.wrapping_mul(y)));
            }
            y
        };
        assert_eq!(inv.wrapping_mul(FIBONACCI), 1);
        for round in 0..300 {
            let from = [16, 20, 24, 28, 32, 40, 48, 56, 64, 96, 128, 160][round % 12];
            let mut t: HashSlots<u32> = HashSlots::with_slots(from);
            let mut m: HashMap<u64, u32> = HashMap::new();
            let fill = from * 3 / 4 - (next() % 3) as usize;
            while m.len() < fill {
                let r = next();
                let product = match round % 3 {
                    // Products in the top eighth of the range: clusters wrap.
                    0 => u64::MAX - (r >> 3),
                    // A few distinct homes: long clusters.
                    1 => (r % 5) << 61 | (r >> 40),
                    _ => r,
                };
                let key = product.wrapping_mul(inv);
                if key == EMPTY || m.contains_key(&key) {
                    continue;
                }
                assert!(t.insert_new(key, m.len() as u32));
                m.insert(key, m.len() as u32);
            }
            assert!(reachable(&t));
            let wanted = [
                fill + 1,
                from + 1,
                from * 5 / 4,
                from * 3 / 2,
                from * 2,
                from * 4,
            ];
            let sizes = wanted
                .iter()
                .flat_map(|&c| [size_at_least(c), Growth::Quarters.at_least(c)]);
            for to in sizes {
                let mut u = t.clone();
                u.rehash(to);
                assert_eq!((u.slot_count(), u.len()), (to, m.len()));
                assert!(reachable(&u), "round {round}: {from} -> {to}");
                assert!(m.iter().all(|(&k, &v)| u.get(k) == Some(v)));
                assert_eq!(u.keys().count(), m.len());
            }
        }
    }

    /// The home slot: for a power of two `2^b` slots it is the top `b` bits of the
    /// Fibonacci product (what the scaling reduces to); for any count it is below it, and
    /// a key's product `x` lands in slot `floor(x·n / 2^64)`, checked here in `f64` away
    /// from the slot edges.
    #[test]
    fn the_home_slot_scales_the_fibonacci_product() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let p = x.wrapping_mul(FIBONACCI);
            for b in [1u32, 4, 10, 20] {
                assert_eq!(
                    HashSlots::<u32>::home_in(x, 1 << b),
                    (p >> (64 - b)) as usize
                );
            }
            for n in [24usize, 96, 12_288] {
                let h = HashSlots::<u32>::home_in(x, n);
                let exact = p as f64 / 2f64.powi(64) * n as f64;
                assert!(h < n);
                if exact.fract() > 1e-6 && exact.fract() < 1.0 - 1e-6 {
                    assert_eq!(h, exact.floor() as usize);
                }
            }
        }
    }

    /// The size sequences, by hand: 16 from nothing, then 3/2 and 4/3 in turn
    /// (`Halves`), or a quarter of the power of two at or below (`Quarters`); every size
    /// either takes is one of `is_size`, and `at_least` rounds up within each sequence.
    #[test]
    fn sizes_grow_by_halves_or_by_quarters() {
        let grown = |g: Growth, steps: usize| {
            let mut n = 0;
            (0..steps)
                .map(|_| {
                    n = g.next(n);
                    n
                })
                .collect::<Vec<_>>()
        };
        let halves = grown(Growth::Halves, 8);
        assert_eq!(halves, [16, 24, 32, 48, 64, 96, 128, 192]);
        let quarters = grown(Growth::Quarters, 11);
        assert_eq!(quarters, [16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96]);
        assert!(halves.iter().chain(&quarters).all(|&n| is_size(n)));
        assert!(
            [0, 1, 3, 12, 18, 36, 44, 72, 100]
                .iter()
                .all(|&n| !is_size(n))
        );
        assert!([2, 8, 20, 24, 28, 40, 3 << 20, 5 << 20, 7 << 20].map(is_size) == [true; 9]);
        assert_eq!(
            [0, 2, 3, 17, 24, 25, 1_020, 1_536, 1_537, 8_192, 8_193].map(size_at_least),
            [2, 2, 4, 24, 24, 32, 1_024, 1_536, 2_048, 8_192, 12_288]
        );
        assert_eq!(
            [0, 2, 3, 17, 20, 21, 25, 29, 33, 1_020, 1_280, 1_281, 8_193]
                .map(|n| Growth::Quarters.at_least(n)),
            [2, 2, 4, 20, 20, 24, 28, 32, 40, 1_024, 1_280, 1_536, 10_240]
        );
    }

    /// A map keeps its growth across rehashes and grows by it: 3,073 entries from none
    /// take 6,144 slots by halves and 5,120 by quarters (4,096 hold 3,072 at 3/4).
    #[test]
    fn a_map_grows_by_its_own_growth() {
        for (g, want) in [(Growth::Halves, 6_144), (Growth::Quarters, 5_120)] {
            let mut m = HashSlots::<u32>::with_growth(g);
            for k in 0..3_072u64 {
                assert!(m.insert_new(k, k as u32));
            }
            assert_eq!(m.slot_count(), 4_096);
            m.insert_new(3_072, 0);
            assert_eq!((m.slot_count(), m.growth()), (want, g));
            assert!((0..3_072u64).all(|k| m.get(k) == Some(k as u32)));
        }
    }

    /// Backward-shift deletion across the end of the slots, by hand: in 24 slots, three
    /// keys whose home is slot 23 sit at 23, 0 and 1, and a key whose home is 0 after them
    /// at 2. Removing the first moves the two others of home 23 back by one (to 23 and 0)
    /// and the key of home 0 to 1 (its home lies outside the hole's cyclic interval each
    /// time); removing the one at 23 then shifts the rest again, and every key stays found.
    #[test]
    fn a_removal_shifts_entries_back_across_the_end() {
        let n = 24;
        // Keys by home slot (found by search: the home is a function of the key alone).
        let with_home = |home: usize, count: usize| -> Vec<u64> {
            (1..u64::MAX)
                .filter(|&k| HashSlots::<u32>::home_in(k, n) == home)
                .take(count)
                .collect()
        };
        let last = with_home(23, 3);
        let first = with_home(0, 1)[0];
        let mut t: HashSlots<u32> = HashSlots::with_slots(n);
        for (v, &k) in last.iter().chain([first].iter()).enumerate() {
            assert!(t.insert_new(k, v as u32));
        }
        let at = |t: &HashSlots<u32>, k: u64| t.probe(k);
        assert_eq!(
            [
                at(&t, last[0]),
                at(&t, last[1]),
                at(&t, last[2]),
                at(&t, first)
            ],
            [(23, true), (0, true), (1, true), (2, true)]
        );
        assert_eq!(t.remove(last[0]), Some(0));
        assert_eq!(
            [at(&t, last[1]), at(&t, last[2]), at(&t, first)],
            [(23, true), (0, true), (1, true)]
        );
        assert_eq!(t.remove(last[1]), Some(1));
        assert_eq!([at(&t, last[2]), at(&t, first)], [(23, true), (0, true)]);
        assert_eq!(
            (t.get(last[2]), t.get(first), t.len()),
            (Some(2), Some(3), 2)
        );
        // Slot 1 is vacant again: a lookup of a missing key of home 0 ends there.
        assert_eq!(at(&t, with_home(0, 2)[1]), (1, false));
    }

    #[test]
    fn an_empty_map_has_no_slots_and_finds_nothing() {
        let mut t: HashSlots<u32> = HashSlots::default();
        assert_eq!((t.get(7), t.remove(7), t.set(7, 1)), (None, None, false));
        t.prefetch(7);
        // The empty-slot key needs no slot.
        assert!(t.insert_new(u64::MAX, 3));
        assert_eq!((t.len(), t.slotted(), t.heap_bytes()), (1, 0, 0));
        t.rehash(0);
        assert_eq!(t.get(u64::MAX), Some(3));
    }

    /// `reserve` grows once to the size inserts one at a time would reach, by hand: 16
    /// slots hold 5 entries; 7 more make 12, 3/4 of 16, so no growth; 8 more make 13, past
    /// 12, and 24 slots take 18: 24; 20 more make 25, past 18 and past 24 (3/4 of 32), so
    /// 48. The inserts after it do not grow.
    #[test]
    fn reserve_grows_once_to_the_size_single_inserts_reach() {
        let mut t: HashSlots<u32> = HashSlots::with_slots(16);
        for k in 1..=5u64 {
            assert!(t.insert_new(k, 0));
        }
        t.reserve(7);
        assert_eq!(t.slot_count(), 16);
        t.reserve(8);
        assert_eq!(t.slot_count(), 24);
        t.reserve(20);
        assert_eq!(t.slot_count(), 48);
        for k in 6..=25u64 {
            let home = t.home_slot(k);
            assert!(t.insert_new_at(k, home, 1));
            assert_eq!(t.slot_count(), 48);
        }
        assert_eq!(t.len(), 25);
        assert!((1..=25u64).all(|k| t.get(k).is_some()));
    }

    /// Growth at 3/4: 16 slots take 12 entries, the 13th grows them to 24, which take 18,
    /// the 19th to 32; from no slots, the first entry makes 16.
    #[test]
    fn an_insert_past_three_quarters_grows_the_slots() {
        let mut t: HashSlots<u32> = HashSlots::with_slots(16);
        for k in 1..=12 {
            t.insert_new(k, 0);
        }
        assert_eq!(t.slot_count(), 16);
        t.insert_new(13, 0);
        assert_eq!(t.slot_count(), 24);
        for k in 14..=18 {
            t.insert_new(k, 0);
        }
        assert_eq!(t.slot_count(), 24);
        t.insert_new(19, 0);
        assert_eq!(t.slot_count(), 32);
        let mut e: HashSlots<u32> = HashSlots::default();
        e.insert_new(1, 0);
        assert_eq!(e.slot_count(), 16);
        assert!((1..=19).all(|k| t.get(k) == Some(0)));
    }

    #[test]
    #[should_panic(
        expected = "is not 0, a power of two of at least 2 or 5/4, 6/4 or 7/4 of one of at least 16"
    )]
    fn a_slot_count_of_one_is_refused() {
        let _ = HashSlots::<u32>::with_slots(1);
    }

    #[test]
    #[should_panic(
        expected = "is not 0, a power of two of at least 2 or 5/4, 6/4 or 7/4 of one of at least 16"
    )]
    fn a_slot_count_of_thirty_six_is_refused() {
        let _ = HashSlots::<u32>::with_slots(36);
    }
}
