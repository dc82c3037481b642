//! A sans-IO core's timer table: one slot per reason to be woken, the earliest armed slot is the
//! core's next deadline and is reported with its reason. Deadlines due at the same instant come
//! out in the order the reasons are listed. Firing early is harmless by convention: each handler
//! re-checks the state it acts on. The orchestrator, a transfer and the mock model each keep one.

use std::marker::PhantomData;
use std::time::Instant;

/// The reasons a core can be woken for, each with its own slot.
pub trait Reason: Copy + 'static {
    /// Every reason, in the order deadlines due together come out.
    const ALL: &'static [Self];
    /// The reason's slot, below `ALL.len()`.
    fn slot(self) -> usize;
}

/// One optional deadline per reason; `N` is the number of reasons.
#[derive(Debug)]
pub struct Deadlines<R, const N: usize> {
    at: [Option<Instant>; N],
    reasons: PhantomData<R>,
}

impl<R, const N: usize> Default for Deadlines<R, N> {
    fn default() -> Self {
        Deadlines {
            at: [None; N],
            reasons: PhantomData,
        }
    }
}

impl<R: Reason, const N: usize> Deadlines<R, N> {
    /// Arms (or moves) the deadline for `r`.
    pub fn set(&mut self, r: R, at: Instant) {
        self.at[r.slot()] = Some(at);
    }

    pub fn stop(&mut self, r: R) {
        self.at[r.slot()] = None;
    }

    pub fn stop_all(&mut self) {
        self.at = [None; N];
    }

    /// The earliest armed deadline and its reason.
    pub fn next(&self) -> Option<(Instant, R)> {
        R::ALL
            .iter()
            .filter_map(|&r| self.at[r.slot()].map(|at| (at, r)))
            .min_by_key(|&(at, _)| at)
    }

    /// The earliest deadline due at `now`, disarmed.
    pub fn pop_due(&mut self, now: Instant) -> Option<R> {
        let (at, r) = self.next()?;
        (at <= now).then(|| {
            self.stop(r);
            r
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum T {
        A,
        B,
        C,
    }

    impl Reason for T {
        const ALL: &'static [T] = &[T::A, T::B, T::C];
        fn slot(self) -> usize {
            self as usize
        }
    }

    #[test]
    fn earliest_first_ties_in_listed_order_then_disarmed() {
        let t0 = Instant::now();
        let mut d = Deadlines::<T, 3>::default();
        assert_eq!(d.next(), None);
        d.set(T::C, t0 + Duration::from_millis(5));
        d.set(T::B, t0 + Duration::from_millis(5));
        d.set(T::A, t0 + Duration::from_millis(9));
        assert_eq!(d.next(), Some((t0 + Duration::from_millis(5), T::B)));
        assert_eq!(d.pop_due(t0), None);
        let late = t0 + Duration::from_millis(10);
        assert_eq!(d.pop_due(late), Some(T::B));
        assert_eq!(d.pop_due(late), Some(T::C));
        assert_eq!(d.pop_due(late), Some(T::A));
        assert_eq!(d.pop_due(late), None);
        d.set(T::A, late);
        d.stop_all();
        assert_eq!(d.next(), None);
    }
}
