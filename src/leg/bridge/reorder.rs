//! Putting media back in order by a counter (Telnyx's `media.chunk`), sans-IO and without a
//! clock. Media in order passes straight through, so an ordered stream gains no delay. A message
//! ahead of the next expected one is held until the missing ones arrive, or until more than
//! `window` messages are held: then the wait is given up, the held messages go out in order and
//! the hole is left to gap detection (filled with silence like any other gap). A message behind
//! what already went out is late and dropped; a counter already held is a duplicate and dropped.

use std::collections::BTreeMap;

/// What happened to one pushed message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    /// Released at once (with any held messages it unblocked).
    InOrder,
    /// Held until the messages before it arrive.
    Held,
    /// Its counter had already gone out; dropped.
    Late,
    /// Its counter is already held; dropped.
    Duplicate,
}

/// A reorder buffer keyed by a message counter.
#[derive(Debug)]
pub struct Reorder<T> {
    window: usize,
    next: Option<u64>,
    held: BTreeMap<u64, T>,
    /// Messages held at least once.
    pub reordered: u64,
    /// Times the wait for a missing message was given up.
    pub skipped: u64,
    pub late: u64,
    pub duplicates: u64,
}

impl<T> Reorder<T> {
    /// Holds at most `window` messages while waiting for a missing one.
    pub fn new(window: usize) -> Self {
        Reorder {
            window,
            next: None,
            held: BTreeMap::new(),
            reordered: 0,
            skipped: 0,
            late: 0,
            duplicates: 0,
        }
    }

    /// Messages held now.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Pushes message `key`; whatever may go out now is appended to `out`, in order.
    pub fn push(&mut self, key: u64, item: T, out: &mut Vec<T>) -> Pushed {
        let next = *self.next.get_or_insert(key);
        if key < next {
            self.late += 1;
            return Pushed::Late;
        }
        if key > next {
            if self.held.contains_key(&key) {
                self.duplicates += 1;
                return Pushed::Duplicate;
            }
            self.held.insert(key, item);
            self.reordered += 1;
            if self.held.len() > self.window {
                self.skipped += 1;
                if let Some(&first) = self.held.keys().next() {
                    self.next = Some(first);
                    self.release(out);
                }
            }
            return Pushed::Held;
        }
        out.push(item);
        self.next = Some(key.saturating_add(1));
        self.release(out);
        Pushed::InOrder
    }

    /// Releases the held messages that follow on from `next`.
    fn release(&mut self, out: &mut Vec<T>) {
        while let Some(next) = self.next
            && let Some(item) = self.held.remove(&next)
        {
            out.push(item);
            self.next = Some(next.saturating_add(1));
        }
    }

    /// Releases everything held, in order (the stream is ending).
    pub fn flush(&mut self, out: &mut Vec<T>) {
        if let Some((&last, _)) = self.held.iter().next_back() {
            self.next = Some(last.saturating_add(1));
        }
        out.extend(std::mem::take(&mut self.held).into_values());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(window: usize, keys: &[u64]) -> (Vec<u64>, Reorder<u64>) {
        let mut r = Reorder::new(window);
        let mut out = Vec::new();
        for &k in keys {
            r.push(k, k, &mut out);
        }
        r.flush(&mut out);
        (out, r)
    }

    #[test]
    fn swapped_neighbours_come_out_in_order() {
        let (out, r) = run(3, &[1, 2, 4, 3, 5, 7, 6, 8]);
        assert_eq!(out, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!((r.reordered, r.skipped, r.late), (2, 0, 0));
    }

    #[test]
    fn in_order_input_is_never_held() {
        let mut r = Reorder::new(3);
        let mut out = Vec::new();
        for k in 10..20 {
            assert_eq!(r.push(k, k, &mut out), Pushed::InOrder);
            assert_eq!(out.last(), Some(&k), "released at once");
        }
    }

    #[test]
    fn a_lost_message_is_given_up_after_the_window_and_a_late_one_dropped() {
        // 3 never comes in time: after 3 held (4, 5, 6) the fourth (7) gives up the wait.
        let (out, r) = run(3, &[1, 2, 4, 5, 6, 7, 3, 8]);
        assert_eq!(out, [1, 2, 4, 5, 6, 7, 8]);
        assert_eq!((r.skipped, r.late), (1, 1));
        let (out, r) = run(3, &[1, 3, 3, 2]);
        assert_eq!(out, [1, 2, 3]);
        assert_eq!(r.duplicates, 1);
    }
}
