//! `kvroute-sim`: the fleet simulator's command line.
//!
//! ```text
//! kvroute-sim                                  # the demo, every policy
//! kvroute-sim list                             # scenarios and policies
//! kvroute-sim scenario hot-owner-51 --policies kv_aware,projected_time
//! kvroute-sim replay --trace FILE --engines 16 --rate-scale 2 --json out.json --svg plots
//! ```

mod cli;

use clap::Parser;

/// The simulator's allocator. A run indexes and frees millions of small objects (index
/// nodes, event batches, per-request block lists); mimalloc's size-class pages serve them
/// faster than the system allocator (measured in `docs/BENCHMARKS.md`, "Simulator"). The
/// library crates leave the choice of allocator to the program that embeds them.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (`mimalloc.h`, `mi_option_e`: 15 in versions 2 and
/// 3, the ones `libmimalloc-sys` builds).
const MI_OPTION_PURGE_DELAY: core::ffi::c_int = 15;

// mimalloc's C API (`mimalloc.h`), linked in by `libmimalloc-sys`.
unsafe extern "C" {
    fn mi_option_set(option: core::ffi::c_int, value: core::ffi::c_long);
    #[cfg(test)]
    fn mi_option_get(option: core::ffi::c_int) -> core::ffi::c_long;
}

/// Keeps the memory a run frees for the next run instead of giving it back to the
/// operating system. Each run allocates and
/// frees the same few hundred megabytes (block pools, lane maps, run arenas); purged (by
/// default 1 s after it is freed, mimalloc 3's `options.c`), every
/// later run faults it in again, page by page, zeroed by the kernel: 14,000-15,000 page
/// faults for two runs in a row of the conversation trace, 570 without purging. The
/// process's resident memory stays at its peak instead (1.4 GB for the whole trace on two
/// threads, from 1.3 GB).
fn keep_freed_memory() {
    // SAFETY: `mi_option_set` takes any option number and value (unknown ones are
    // ignored) and only stores the value; it is called before any other thread exists.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
}

/// Restores the default action of `SIGPIPE`, ending the process, which Rust's runtime
/// replaces with "ignore": a reader that closes the pipe early (`kvroute-sim list | head
/// -1`) then ends the simulator quietly, as it ends `cat` or `grep`, instead of a panic at
/// the next print ("failed printing to stdout: Broken pipe"). Files written with `--json`
/// or `--svg` are not pipes and are unaffected.
#[cfg(unix)]
fn default_sigpipe() {
    // SAFETY: `signal` with a valid signal number and `SIG_DFL` only changes the
    // disposition of that signal; it is called first thing in `main`, before any other
    // thread exists, and no handler of this program depends on `SIGPIPE`.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

fn main() -> std::process::ExitCode {
    #[cfg(unix)]
    default_sigpipe();
    keep_freed_memory();
    cli::main(cli::args::Cli::parse())
}

#[cfg(test)]
mod tests {
    /// The option number names the purge delay: it reads mimalloc 3's default of 1,000 ms
    /// (a different option would read another value), then the value set.
    #[test]
    fn the_purge_delay_option_is_set() {
        // SAFETY: as in `keep_freed_memory`; reading an option has no precondition.
        let before = unsafe { super::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        super::keep_freed_memory();
        // SAFETY: as above.
        let after = unsafe { super::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        assert_eq!((before, after), (1000, -1));
    }
}
