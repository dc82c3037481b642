//! Giving freed memory back to the system once no call is live. glibc's allocator keeps what a
//! call freed in its arenas (one per thread that allocated), so after a load peak the daemon's
//! RSS would stay at the peak until it exits. Trimming walks and locks each arena, so it runs only
//! while no call is live (nothing on an audio path can wait on it) and on a blocking thread.
//!
//! Before trimming, what lock-free structures retired is collected: the metrics recorder retires
//! the blocks its histogram samples waited in through crossbeam's epoch collector, which frees a
//! retired block only once the global epoch has moved on twice, and moves it only when a thread
//! pins it. After the last call nothing does, so the last load's blocks (~4 KiB per call that
//! ended) would stay until the next load.

/// The glibc tunable the daemon runs with unless the operator set it: no per-thread cache of
/// freed chunks. Each shard thread's cache keeps up to 7 chunks of each of 64 sizes, scattered
/// over the heap as the last load freed them, and a trim cannot release a page one of them sits
/// on: after a 500-call peak that pinned ~3 MiB (private memory 10 s after the last call 5.6 MiB
/// against 2.4 after one call; 2.7–2.9 MiB without the cache), for no measurable CPU (`baton bench
/// load --calls 250,500 --duration 20`: 1.39/1.31 ms per call-second against 1.38/1.30).
pub const TCACHE_OFF: &str = "glibc.malloc.tcache_count=0";

/// The `GLIBC_TUNABLES` value `baton serve` should run with, given the one it has: `None` when
/// it already names `tcache_count` (the operator's choice — `glibc.malloc.tcache_count=7` keeps
/// glibc's default), else the given tunables with [`TCACHE_OFF`] added. glibc reads tunables only
/// at start, so the daemon re-executes itself once with it (see `main`).
pub fn allocator_tunables(current: Option<&str>) -> Option<String> {
    match current.map(str::trim).filter(|c| !c.is_empty()) {
        Some(c) if c.contains("glibc.malloc.tcache_count") => None,
        Some(c) => Some(format!("{c}:{TCACHE_OFF}")),
        None => Some(TCACHE_OFF.to_owned()),
    }
}

/// Epoch advances asked for at a trim: each frees up to eight bags of retired blocks (up to 64
/// each); a few hundred ended calls leave tens of bags.
const COLLECT_ROUNDS: usize = 64;

/// Frees what the epoch collector holds retired, then returns free heap pages to the system.
pub fn give_back() -> bool {
    for _ in 0..COLLECT_ROUNDS {
        crossbeam_epoch::pin().flush();
    }
    trim()
}

/// Returns free heap pages to the system; true if any were released.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() -> bool {
    // SAFETY: `malloc_trim` only walks the allocator's own free lists under their locks; it takes
    // no pointer from us and is safe to call from any thread at any time.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Other allocators return memory on their own terms.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() -> bool {
    false
}

/// Trims after the first once the calls have ended.
const FOLLOW_UPS: u8 = 2;

/// Decides when to trim: after calls have ended and none is live, and at the next two checks as
/// well — what the last calls left is not all freed by then (histogram samples folded at an
/// upkeep are freed later, by the epoch collector of the lock-free bucket they waited in, once
/// later upkeeps have advanced it).
#[derive(Debug, Default)]
pub struct Trimmer {
    /// Calls ended when the last trim ran.
    ended_at_last: u64,
    /// Follow-up trims owed at the next checks with none live.
    again: u8,
}

impl Trimmer {
    /// Given the calls live now and the calls ended so far, whether to trim now.
    pub fn due(&mut self, live: usize, ended: u64) -> bool {
        if live != 0 {
            return false;
        }
        if ended != self.ended_at_last {
            self.ended_at_last = ended;
            self.again = FOLLOW_UPS;
            return true;
        }
        if self.again > 0 {
            self.again -= 1;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_cache_goes_off_unless_the_operator_chose() {
        assert_eq!(allocator_tunables(None).as_deref(), Some(TCACHE_OFF));
        assert_eq!(allocator_tunables(Some(" ")).as_deref(), Some(TCACHE_OFF));
        assert_eq!(
            allocator_tunables(Some("glibc.malloc.arena_max=2")).as_deref(),
            Some("glibc.malloc.arena_max=2:glibc.malloc.tcache_count=0")
        );
        assert_eq!(
            allocator_tunables(Some("glibc.malloc.tcache_count=7")),
            None
        );
        assert_eq!(
            allocator_tunables(Some("glibc.malloc.arena_max=2:glibc.malloc.tcache_count=3")),
            None
        );
    }

    #[test]
    fn trims_after_calls_end_and_twice_more_only_with_none_live() {
        let mut t = Trimmer::default();
        assert!(!t.due(0, 0), "no call has ended yet");
        assert!(!t.due(3, 2), "calls are live");
        assert!(t.due(0, 5));
        assert!(
            t.due(0, 5),
            "again, for what was freed after the first trim"
        );
        assert!(t.due(0, 5), "and once more");
        assert!(!t.due(0, 5), "nothing ended since");
        assert!(!t.due(0, 5));
        assert!(t.due(0, 6));
        assert!(!t.due(1, 7), "a call is live again");
        assert!(t.due(0, 7));
        assert!(!t.due(2, 7), "no follow-up while calls are live");
    }
}
