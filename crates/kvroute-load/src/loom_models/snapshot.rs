//! loom models of snapshot publication: a publisher and concurrent readers.
//!
//! What loom checks here: every buffer access goes through loom's `UnsafeCell`, and a
//! reader's guard holds a read access for its whole life, so a publisher writing a buffer
//! that a reader can still see (a torn snapshot, or a buffer reused before its last reader
//! left) is reported as a data race. The assertions check that every snapshot a reader sees
//! is whole, that one reader's loads never go backwards, and that once every reader has left,
//! every buffer is free again (no registration leaked).

use kvroute_core::sync::{model, thread};
use kvroute_core::{Slot, SlotGeneration, WorkerId};

use crate::{LoadConfig, LoadPublisher, PublishError, SnapshotWriter, snapshot_cell};
use kvroute_core::{LoadSample, Nanos};

/// Publishes `[1, 1]` then `[2, 2]`, skipping a publication when every spare buffer is
/// pinned (the only error allowed); returns the writer and the last value published (0
/// when none was).
fn publish_twice(mut writer: SnapshotWriter<[u64; 2]>) -> (SnapshotWriter<[u64; 2]>, u64) {
    let mut published = 0;
    for k in 1..=2u64 {
        match writer.begin() {
            Ok(mut staged) => {
                staged.fill(|v| *v = [k, k]);
                staged.publish();
                published = k;
            }
            Err(e) => assert_eq!(e, PublishError::AllBuffersPinned),
        }
    }
    (writer, published)
}

#[test]
fn loom_publish_vs_read_no_torn_snapshot() {
    model(|| {
        // Two buffers: the tightest ring, so reuse races are most likely.
        let (writer, reader) = snapshot_cell(2, |_| [0u64, 0]).unwrap();
        let publisher = thread::spawn(move || publish_twice(writer));
        let mut last = 0;
        for _ in 0..2 {
            let g = reader.load();
            assert_eq!(g[0], g[1], "torn snapshot");
            assert!(g[0] >= last, "a reader's loads never go backwards");
            last = g[0];
        }
        let (mut writer, published) = publisher.join().unwrap();
        assert_eq!(reader.load()[0], published);
        // No guard is out: the spare buffer must be free for every further publication.
        for k in 10..12u64 {
            let mut staged = writer.begin().expect("no leaked registration");
            staged.fill(|v| *v = [k, k]);
            staged.publish();
        }
        assert_eq!(*reader.load(), [11, 11]);
    });
}

/// A pinned reader (module `pinned`) against a publisher on the tightest ring: the reader
/// announces each buffer in its own slot, the publisher counts a buffer free only when no
/// slot announces it. With either side's `fence(SeqCst)` weakened to `AcqRel`, loom
/// reports the publisher writing a buffer the reader still reads.
#[test]
fn loom_pinned_reader_never_sees_a_reused_buffer() {
    model(|| {
        let (writer, reader) = snapshot_cell(2, |_| [0u64, 0]).unwrap();
        let mut pin = reader.pinned();
        let publisher = thread::spawn(move || publish_twice(writer));
        let mut last = 0;
        for _ in 0..2 {
            let g = pin.load();
            assert_eq!(g[0], g[1], "torn snapshot");
            assert!(g[0] >= last, "a reader's loads never go backwards");
            last = g[0];
        }
        let (mut writer, published) = publisher.join().unwrap();
        assert_eq!(pin.load()[0], published);
        // The slot announces nothing now: the spare buffer is free.
        let mut staged = writer.begin().expect("no announcement left");
        staged.fill(|v| *v = [9, 9]);
        staged.publish();
        assert_eq!(*pin.load(), [9, 9]);
    });
}

/// A pinned reader that loads once and is dropped while the publisher runs, beside an
/// ordinary reader: the publisher never rewrites a buffer either reads, and once both are
/// gone every buffer is free and the dropped reader's slot is removed.
#[test]
fn loom_pinned_and_plain_readers_with_a_reader_dropped() {
    model(|| {
        let (writer, reader) = snapshot_cell(2, |_| [0u64, 0]).unwrap();
        let mut pin = reader.pinned();
        let pinned = thread::spawn(move || {
            let g = pin.load();
            assert_eq!(g[0], g[1], "torn snapshot (pinned reader)");
            drop(g);
            drop(pin);
        });
        let publisher = thread::spawn(move || publish_twice(writer).0);
        {
            let g = reader.load();
            assert_eq!(g[0], g[1], "torn snapshot (ordinary reader)");
        }
        pinned.join().unwrap();
        let mut writer = publisher.join().unwrap();
        let mut staged = writer.begin().expect("no reader holds a buffer");
        staged.fill(|v| *v = [9, 9]);
        staged.publish();
        assert_eq!(
            reader.shared().announced_len(),
            0,
            "the dropped reader's slot"
        );
        assert_eq!(*reader.load(), [9, 9]);
    });
}

#[test]
fn loom_two_readers_one_publish() {
    model(|| {
        let (mut writer, reader) = snapshot_cell(2, |_| [7u64, 7]).unwrap();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let r = reader.clone();
                thread::spawn(move || {
                    let g = r.load();
                    assert!(*g == [7, 7] || *g == [8, 8], "torn or unknown snapshot");
                })
            })
            .collect();
        let mut staged = writer.begin().expect("buffer 1 was never read");
        staged.fill(|v| *v = [8, 8]);
        staged.publish();
        for t in readers {
            t.join().unwrap();
        }
        for k in 9..11u64 {
            let mut staged = writer.begin().expect("no leaked registration");
            staged.fill(|v| *v = [k, k]);
            staged.publish();
        }
        assert_eq!(*reader.load(), [10, 10]);
    });
}

#[test]
fn loom_load_snapshot_lanes_come_from_one_publication() {
    model(|| {
        let (mut p, reader) = LoadPublisher::new(LoadConfig {
            buffers: 2,
            ..LoadConfig::new(1)
        })
        .unwrap();
        let w = WorkerId::new(1, 0);
        p.add_worker(Slot(0), w, SlotGeneration(1)).unwrap();
        let publisher = thread::spawn(move || {
            for k in 1..=2u32 {
                let s = {
                    let mut c = LoadSample::idle(64);
                    c.running = k;
                    c.waiting = 10 * k;
                    c
                };
                p.apply_sample(w, s, Nanos(u64::from(k))).unwrap();
                let _ = p.publish(Nanos(u64::from(k)));
            }
        });
        let s = reader.load();
        // Every lane of this snapshot is from the same publication: seq k carries running k
        // and waiting 10k (seq 0 is the empty initial snapshot).
        let k = s.seq() as u32;
        assert_eq!(s.running()[0], k);
        assert_eq!(s.waiting()[0], 10 * k);
        assert_eq!(s.published_at(), Nanos(u64::from(k)));
        drop(s);
        publisher.join().unwrap();
    });
}
