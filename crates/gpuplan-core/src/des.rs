//! The discrete-event kernel both simulators run on (`sim`: one training step on streams and
//! links; `serve`: requests on replicas): simulated time as integer picoseconds, and an event
//! queue that pops the earliest event first and, among events at the same time, the one pushed
//! first. No wall clock and no randomness here, so a simulation that pushes the same events gets
//! the same order, run after run.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::units::Seconds;

/// Simulated time in picoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SimTime(pub u64);

impl SimTime {
    pub const ZERO: SimTime = SimTime(0);

    /// The nearest picosecond (negative times are 0).
    pub fn from_seconds(s: Seconds) -> SimTime {
        SimTime((s.value() * 1e12).round().max(0.0) as u64)
    }
    pub fn seconds(self) -> Seconds {
        Seconds::new(self.0 as f64 * 1e-12)
    }
}

/// A min-queue of events keyed by (time, insertion sequence): the earliest first, and events at
/// equal times in the order they were pushed (FIFO). The event itself is never compared.
#[derive(Debug, Clone)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue { heap: BinaryHeap::new(), seq: 0 }
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedule `event` at `at`, after every event already queued for that time.
    pub fn push(&mut self, at: SimTime, event: E) {
        self.heap.push(Entry { at, seq: self.seq, event });
        self.seq += 1;
    }

    /// The earliest event and its time (the first pushed among equal times).
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        self.heap.pop().map(|e| (e.at, e.event))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[derive(Debug, Clone)]
struct Entry<E> {
    at: SimTime,
    seq: u64,
    event: E,
}

impl<E> Entry<E> {
    fn key(&self) -> (SimTime, u64) {
        (self.at, self.seq)
    }
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Entry<E> {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the smallest (time, sequence) first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key().cmp(&self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_earliest_first_and_equal_times_in_push_order() {
        let mut q = EventQueue::new();
        q.push(SimTime(5), 'a');
        q.push(SimTime(1), 'b');
        q.push(SimTime(5), 'c');
        q.push(SimTime(1), 'd');
        q.push(SimTime(3), 'e');
        assert_eq!(q.len(), 5);
        let order: Vec<(u64, char)> = std::iter::from_fn(|| q.pop()).map(|(t, e)| (t.0, e)).collect();
        assert_eq!(order, [(1, 'b'), (1, 'd'), (3, 'e'), (5, 'a'), (5, 'c')]);
        assert!(q.is_empty());
    }

    #[test]
    fn seconds_round_trip_to_the_picosecond() {
        assert_eq!(SimTime::from_seconds(Seconds::new(1.5e-9)), SimTime(1500));
        assert_eq!(SimTime::from_seconds(Seconds::new(-1.0)), SimTime::ZERO);
        assert!((SimTime(2_000_000).seconds().value() - 2e-6).abs() < 1e-18);
    }
}
