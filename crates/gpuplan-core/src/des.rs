//! The discrete-event kernel both simulators run on (`sim`: one training step on streams and
//! links; `serve`: requests on replicas): simulated time as integer picoseconds, and an event
//! queue that pops the earliest event first and, among events at the same time, the one pushed
//! first. No wall clock and no randomness here, so a simulation that pushes the same events gets
//! the same order, run after run.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

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
///
/// Events are kept per distinct time: a FIFO for each time (sequence numbers only grow, so each
/// FIFO is already in sequence order), found by a hash map on push, and a binary min-heap of the
/// distinct times. In the per-rank engine most events share their time with others (classes of
/// ranks run in lockstep: 93% of the events of the 16,384-GPU bench case land at the time of the
/// event before them), so a pop is mostly the front of the current time's FIFO, and the heap
/// holds a few hundred times instead of thousands of events. Emptied FIFOs are kept for reuse:
/// no allocation once the queue has grown to its working size. The order is exactly that of one
/// heap over (time, sequence).
#[derive(Debug, Clone)]
pub struct EventQueue<E> {
    /// Distinct pending times, each with the index of its FIFO in `fifos`.
    times: BinaryHeap<Reverse<(SimTime, u32)>>,
    slot_of: HashMap<SimTime, u32, BuildFx>,
    fifos: Vec<VecDeque<(u64, E)>>,
    /// Indices of emptied FIFOs in `fifos`, for reuse.
    spare: Vec<u32>,
    len: usize,
    seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue { times: BinaryHeap::new(), slot_of: HashMap::default(), fifos: Vec::new(), spare: Vec::new(), len: 0, seq: 0 }
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedule `event` at `at`, after every event already queued for that time.
    pub fn push(&mut self, at: SimTime, event: E) {
        let seq = self.seq;
        self.seq += 1;
        self.len += 1;
        if let Some(&slot) = self.slot_of.get(&at) {
            self.fifos[slot as usize].push_back((seq, event));
            return;
        }
        let slot = match self.spare.pop() {
            Some(slot) => slot,
            None => {
                self.fifos.push(VecDeque::new());
                (self.fifos.len() - 1) as u32
            }
        };
        self.fifos[slot as usize].push_back((seq, event));
        self.slot_of.insert(at, slot);
        self.times.push(Reverse((at, slot)));
    }

    /// The earliest event and its time (the first pushed among equal times).
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        let &Reverse((at, slot)) = self.times.peek()?;
        let fifo = &mut self.fifos[slot as usize];
        let (_, event) = fifo.pop_front().expect("a pending time has events");
        if fifo.is_empty() {
            self.times.pop();
            self.slot_of.remove(&at);
            self.spare.push(slot);
        }
        self.len -= 1;
        Some((at, event))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The (time, sequence) of the earliest event, without taking it.
    pub fn peek_key(&self) -> Option<(SimTime, u64)> {
        let &Reverse((at, slot)) = self.times.peek()?;
        self.fifos[slot as usize].front().map(|e| (at, e.0))
    }

    /// Take the next insertion sequence number without pushing: for a time kept in a
    /// [`KeyedTimes`] that is merged with this queue in (time, sequence) order, so that the merged
    /// order is the one a push here would have given.
    pub fn next_seq(&mut self) -> u64 {
        let s = self.seq;
        self.seq += 1;
        s
    }
}

/// At most one pending (time, sequence) per key (a dense id below `n_keys`), in a binary min-heap
/// that knows each key's position: setting a key's time (earlier or later), cancelling it and
/// popping the earliest are O(log n) in the number of keys pending, and a time that is replaced
/// leaves nothing behind. `sim`'s per-rank engine keeps each flow component's next completion
/// check here: it is moved on every rate change, and a queue of pushed checks would fill with
/// stale ones (lazy deletion), each popped and skipped in O(log) of a much larger heap.
#[derive(Debug, Clone, Default)]
pub struct KeyedTimes {
    /// (time, sequence, key), heap-ordered by (time, sequence).
    heap: Vec<(SimTime, u64, u32)>,
    /// Per key: its index in `heap`, or `ABSENT`.
    pos: Vec<u32>,
}

const ABSENT: u32 = u32::MAX;

impl KeyedTimes {
    pub fn new(n_keys: usize) -> KeyedTimes {
        KeyedTimes { heap: Vec::with_capacity(n_keys), pos: vec![ABSENT; n_keys] }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Key `key` is next due at `at` (ordered by `seq` among equal times), replacing its pending
    /// time if it has one.
    pub fn set(&mut self, key: u32, at: SimTime, seq: u64) {
        let i = self.pos[key as usize];
        if i == ABSENT {
            self.heap.push((at, seq, key));
            let last = self.heap.len() - 1;
            self.pos[key as usize] = last as u32;
            self.sift_up(last);
        } else {
            let i = i as usize;
            let earlier = (at, seq) < (self.heap[i].0, self.heap[i].1);
            self.heap[i] = (at, seq, key);
            if earlier {
                self.sift_up(i);
            } else {
                self.sift_down(i);
            }
        }
    }

    /// Drop key `key`'s pending time, if any.
    pub fn cancel(&mut self, key: u32) {
        let i = self.pos[key as usize];
        if i != ABSENT {
            self.remove_at(i as usize);
        }
    }

    /// The earliest pending (time, sequence, key), without taking it.
    pub fn peek(&self) -> Option<(SimTime, u64, u32)> {
        self.heap.first().copied()
    }

    /// Take the earliest pending (time, sequence, key).
    pub fn pop(&mut self) -> Option<(SimTime, u64, u32)> {
        let top = self.heap.first().copied()?;
        self.remove_at(0);
        Some(top)
    }

    fn remove_at(&mut self, i: usize) {
        let last = self.heap.len() - 1;
        self.pos[self.heap[i].2 as usize] = ABSENT;
        if i != last {
            self.heap[i] = self.heap[last];
            self.pos[self.heap[i].2 as usize] = i as u32;
            self.heap.pop();
            // The moved entry may belong above or below `i`.
            let moved = self.heap[i].2;
            self.sift_up(i);
            if self.pos[moved as usize] as usize == i {
                self.sift_down(i);
            }
        } else {
            self.heap.pop();
        }
    }

    fn less(&self, a: usize, b: usize) -> bool {
        (self.heap[a].0, self.heap[a].1) < (self.heap[b].0, self.heap[b].1)
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a].2 as usize] = a as u32;
        self.pos[self.heap[b].2 as usize] = b as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.less(i, parent) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut m = i;
            if l < n && self.less(l, m) {
                m = l;
            }
            if r < n && self.less(r, m) {
                m = r;
            }
            if m == i {
                break;
            }
            self.swap(i, m);
            i = m;
        }
    }
}

/// FxHash (the hasher of rustc and Firefox): one rotate, xor and multiply per word. The keys
/// hashed with it are the engines' own times and ids, not outside input, so the hash-flooding
/// defence of the standard hasher (SipHash, several times slower on a `u64`) buys nothing here.
#[derive(Debug, Clone, Copy, Default)]
pub struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(w));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

pub type BuildFx = std::hash::BuildHasherDefault<FxHasher>;

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
    fn the_queue_pops_as_one_heap_over_time_and_sequence_would() {
        // Differential against a binary heap of (time, sequence): pushes at few distinct times
        // (many ties, as in the per-rank engine) interleaved with pops.
        let mut q = EventQueue::new();
        let mut naive: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let (mut now, mut seq) = (0u64, 0u64);
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x.is_multiple_of(3) {
                let got = q.pop().map(|(t, e)| (t.0, e));
                let want = naive.pop().map(|Reverse(k)| k);
                assert_eq!(got, want);
                if let Some((t, _)) = got {
                    now = t;
                }
            } else {
                let at = now + (x >> 8) % 8;
                q.push(SimTime(at), seq);
                naive.push(Reverse((at, seq)));
                seq += 1;
            }
            assert_eq!(q.len(), naive.len());
            assert_eq!(q.peek_key().map(|(t, s)| (t.0, s)), naive.peek().map(|Reverse(k)| *k));
        }
    }

    #[test]
    fn keyed_times_pop_in_time_then_sequence_order_and_keep_one_time_per_key() {
        // Differential against a naive scan over a map of key -> (time, sequence).
        let mut q = KeyedTimes::new(64);
        let mut naive: Vec<Option<(SimTime, u64)>> = vec![None; 64];
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for seq in 0..20_000u64 {
            let r = next();
            let key = (r % 64) as u32;
            match (r >> 8) % 4 {
                0 => {
                    q.cancel(key);
                    naive[key as usize] = None;
                }
                1 => {
                    let want = naive.iter().enumerate().filter_map(|(k, t)| t.map(|(a, s)| (a, s, k as u32))).min();
                    assert_eq!(q.pop(), want);
                    if let Some((_, _, k)) = want {
                        naive[k as usize] = None;
                    }
                }
                _ => {
                    // Few distinct times, so that equal times are ordered by sequence.
                    let at = SimTime((r >> 16) % 50);
                    q.set(key, at, seq);
                    naive[key as usize] = Some((at, seq));
                }
            }
            assert_eq!(q.len(), naive.iter().flatten().count());
            assert_eq!(q.peek(), naive.iter().enumerate().filter_map(|(k, t)| t.map(|(a, s)| (a, s, k as u32))).min());
        }
    }

    #[test]
    fn seconds_round_trip_to_the_picosecond() {
        assert_eq!(SimTime::from_seconds(Seconds::new(1.5e-9)), SimTime(1500));
        assert_eq!(SimTime::from_seconds(Seconds::new(-1.0)), SimTime::ZERO);
        assert!((SimTime(2_000_000).seconds().value() - 2e-6).abs() < 1e-18);
    }
}
