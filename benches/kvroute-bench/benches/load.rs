//! Load snapshot and reservation hot paths: what one routing decision pays to read the
//! published load and to reserve (and later release) a slot.
//!
//! * `snapshot_load/*`: load the current snapshot, read one lane element, drop the guard;
//!   alone, with a second thread loading the same cell in a loop, and with a second thread
//!   publishing in a loop.
//! * `reserve_drop/*`: reserve one request (plus tokens) on a slot and drop the guard;
//!   alone, and with a second thread doing the same on the same slot in a loop.
//!
//! 512 slots, every one with a fresh SGLang-shaped sample.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kvroute_core::sync::Arc;
use kvroute_core::sync::atomic::{AtomicBool, Ordering};
use kvroute_core::sync::thread;
use kvroute_core::{LoadSample, Nanos};
use kvroute_core::{Slot, SlotGeneration, WorkerId};
use kvroute_load::{LoadConfig, LoadPublisher, LoadReader, ReservationTable, Work};

const SLOTS: usize = 512;
const GEN: SlotGeneration = SlotGeneration(1);
const WORK: Work = Work {
    prefill_tokens: 1024,
    decode_tokens: 256,
};

fn sample(i: u32) -> LoadSample {
    {
        let mut c = LoadSample::new(i % 32, i % 7, 32, 0.5);
        c.waiting_prefill_tokens = Some(i * 10);
        c.active_decode_tokens = Some(i * 100);
        c.decode_tps = Some(1500.0);
        c.prefill_tps = Some(12_000.0);
        c.utilization = Some(0.5);
        c
    }
}

fn fleet() -> (LoadPublisher, LoadReader) {
    let (mut p, r) = LoadPublisher::new(LoadConfig::new(SLOTS)).unwrap();
    for i in 0..SLOTS as u32 {
        let w = WorkerId::new(u64::from(i / 2), i % 2);
        p.add_worker(Slot(i), w, GEN).unwrap();
        p.apply_sample(w, sample(i), Nanos(1)).unwrap();
    }
    p.publish(Nanos(1)).unwrap();
    (p, r)
}

/// Runs `work` on a second thread until the returned guard is dropped.
struct Hammer(Arc<AtomicBool>, Option<thread::JoinHandle<()>>);

impl Hammer {
    fn start(mut work: impl FnMut() + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                work();
            }
        });
        Self(stop, Some(handle))
    }
}

impl Drop for Hammer {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        if let Some(h) = self.1.take() {
            h.join().unwrap();
        }
    }
}

fn snapshot_load(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot_load");
    let (p, reader) = fleet();
    g.bench_function("uncontended", |b| {
        b.iter(|| {
            let s = reader.load();
            black_box(s.running()[black_box(77)])
        })
    });
    {
        let r2 = reader.clone();
        let _h = Hammer::start(move || {
            black_box(r2.load().seq());
        });
        g.bench_function("second_reader_hammering", |b| {
            b.iter(|| {
                let s = reader.load();
                black_box(s.running()[black_box(77)])
            })
        });
    }
    {
        let mut p = p;
        let mut now = 1u64;
        let _h = Hammer::start(move || {
            now += 1;
            let _ = p.publish(Nanos(now));
        });
        g.bench_function("publisher_hammering", |b| {
            b.iter(|| {
                let s = reader.load();
                black_box(s.running()[black_box(77)])
            })
        });
    }
    g.finish();
}

fn reserve_drop(c: &mut Criterion) {
    let mut g = c.benchmark_group("reserve_drop");
    let table = ReservationTable::new(SLOTS, ReservationTable::DEFAULT_TTL).unwrap();
    for i in 0..SLOTS as u32 {
        table.add_worker(Slot(i), GEN, Nanos(0)).unwrap();
    }
    g.bench_function("uncontended", |b| {
        b.iter(|| {
            let r = table
                .reserve(Slot(black_box(5)), GEN, WORK, Nanos(0))
                .unwrap();
            black_box(r.prior().requests)
        })
    });
    {
        let t2 = table.clone();
        let _h = Hammer::start(move || {
            let r = t2.reserve(Slot(5), GEN, WORK, Nanos(0)).unwrap();
            black_box(r.prior().requests);
        });
        g.bench_function("same_slot_hammered", |b| {
            b.iter(|| {
                let r = table
                    .reserve(Slot(black_box(5)), GEN, WORK, Nanos(0))
                    .unwrap();
                black_box(r.prior().requests)
            })
        });
    }
    g.finish();
    assert!(table.reserved(Slot(5)).is_zero());
}

criterion_group!(benches, snapshot_load, reserve_drop);
criterion_main!(benches);
