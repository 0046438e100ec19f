//! Live-heap measurement for memory tests: a counting global allocator and a runner that
//! gives each measured case a process of its own.
//!
//! A test binary installs the allocator with
//! `#[global_allocator] static A: kvroute_testkit::heap::Counting = kvroute_testkit::heap::Counting;`
//! and reads the live bytes with [`live`]. The count is of the whole process (every thread,
//! every library), in requested bytes (`Layout::size`), so such a binary runs without the
//! libtest harness (`harness = false`) and measures nothing while anything else runs.
//!
//! [`run_cases`] runs each named case in a child process of the same binary (chosen by the
//! `KVROUTE_HEAP_CASE` environment variable), so what one case leaves in process-wide
//! state (the epoch collector's queues, allocator-held buffers, thread registrations) never
//! shows up in another case's figures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// Live heap bytes of the process, as requested from the allocator.
static LIVE: AtomicIsize = AtomicIsize::new(0);

/// A global allocator that forwards to [`System`] and counts the live bytes.
pub struct Counting;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System` upholds the `GlobalAlloc` contract; the counter is only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator (that is, by `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `realloc`'s contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

/// Live heap bytes of the process (meaningful only where [`Counting`] is the global
/// allocator; 0 otherwise).
pub fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// The environment variable naming the case a child process runs.
const CASE_VAR: &str = "KVROUTE_HEAP_CASE";

/// One measured case: its name (printed as `test NAME ... ok`) and its body, which returns
/// a description of what went wrong.
pub type Case = (&'static str, fn() -> Result<(), String>);

/// Runs every case in a child process of this binary and exits with status 1 if any
/// failed; in a child, runs the one case named by the environment and exits.
///
/// `title` is printed first (so stdout's buffer exists before any measurement).
pub fn run_cases(title: &str, cases: &[Case]) -> ! {
    println!("{title}");
    if let Ok(name) = std::env::var(CASE_VAR) {
        let Some(&(_, f)) = cases.iter().find(|(n, _)| *n == name) else {
            println!("no case named {name}");
            std::process::exit(2);
        };
        let result = std::panic::catch_unwind(f).unwrap_or_else(|_| Err("panicked".into()));
        match result {
            Ok(()) => std::process::exit(0),
            Err(e) => {
                println!("  {e}");
                std::process::exit(1);
            }
        }
    }
    let exe = std::env::current_exe().expect("the test binary's own path");
    let mut failures = Vec::new();
    for (name, _) in cases {
        let out = std::process::Command::new(&exe)
            .env(CASE_VAR, name)
            .output()
            .expect("a child process of the test binary");
        let ok = out.status.success();
        println!("test {name} ... {}", if ok { "ok" } else { "FAILED" });
        // The child's own title line is the first; the rest is its diagnosis.
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines().skip(1) {
            println!("{line}");
        }
        let err = String::from_utf8_lossy(&out.stderr);
        if !ok && !err.trim().is_empty() {
            println!("{err}");
        }
        if !ok {
            failures.push(*name);
        }
    }
    if failures.is_empty() {
        println!("{} case(s) passed", cases.len());
        std::process::exit(0);
    }
    println!("{} case(s) failed: {failures:?}", failures.len());
    std::process::exit(1);
}
