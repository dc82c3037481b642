//! Giving freed memory back to the system once no call is live. glibc's allocator keeps what a
//! call freed in its arenas (one per thread that allocated), so after a load peak the daemon's
//! RSS would stay at the peak until it exits. Trimming walks and locks each arena, so it runs only
//! while no call is live (nothing on an audio path can wait on it) and on a blocking thread.

/// Returns free heap pages to the system; true if any were released.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn give_back() -> bool {
    // SAFETY: `malloc_trim` only walks the allocator's own free lists under their locks; it takes
    // no pointer from us and is safe to call from any thread at any time.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Other allocators return memory on their own terms.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn give_back() -> bool {
    false
}

/// Decides when to trim: after calls have ended and none is live.
#[derive(Debug, Default)]
pub struct Trimmer {
    /// Calls ended when the last trim ran.
    ended_at_last: u64,
}

impl Trimmer {
    /// Given the calls live now and the calls ended so far, whether to trim now.
    pub fn due(&mut self, live: usize, ended: u64) -> bool {
        if live == 0 && ended != self.ended_at_last {
            self.ended_at_last = ended;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_once_after_calls_end_and_only_with_none_live() {
        let mut t = Trimmer::default();
        assert!(!t.due(0, 0), "no call has ended yet");
        assert!(!t.due(3, 2), "calls are live");
        assert!(t.due(0, 5));
        assert!(!t.due(0, 5), "nothing ended since");
        assert!(t.due(0, 6));
    }
}
