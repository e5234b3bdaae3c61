//! Continuous-batching schedulers: given a replica's waiting and running sequences, its KV cache
//! and the budgets of [`SchedConfig`], pick what the next iteration runs. [`VllmV1`] is vLLM v1's
//! order; other engines' policies (TensorRT-LLM's in-flight batching, SGLang's) are further
//! implementations of [`Scheduler`].

use std::collections::VecDeque;

use super::cost::Chunk;
use super::kv::KvCache;
use super::SchedConfig;

pub use super::seq::{Seq, NO_SLOT};

/// A replica's sequences: those waiting to be (re)admitted, in order, and those running, oldest
/// first.
#[derive(Debug, Clone, Default)]
pub struct Queues {
    pub waiting: VecDeque<Seq>,
    /// A deque: sequences mostly finish oldest first, and leave from the front.
    pub running: VecDeque<Seq>,
}

impl Queues {
    pub fn len(&self) -> usize {
        self.waiting.len() + self.running.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a scheduling pass did to requests, besides the batch: for their records.
#[derive(Debug, Clone, Default)]
pub struct Decisions {
    /// Requests moved from waiting to running, in order.
    pub admitted: Vec<u32>,
    /// Requests preempted (moved from running back to waiting, their cache freed), in order.
    pub preempted: Vec<u32>,
}

impl Decisions {
    pub fn clear(&mut self) {
        self.admitted.clear();
        self.preempted.clear();
    }
}

/// A continuous-batching policy of one replica.
pub trait Scheduler {
    /// Pick the next iteration's batch: set [`Seq::sched`] (the tokens it runs this iteration: a
    /// prefill chunk, or 1 to decode) on every running sequence that runs, 0 on the others.
    /// Admitting a waiting sequence moves it to `queues.running` and gives it a cache slot;
    /// preempting a running one releases its blocks and slot, [`Seq::restart`]s it and moves it
    /// back to `queues.waiting`; a sequence that runs holds the blocks for its new tokens
    /// ([`KvCache::blocks_needed`]). Within `cfg`'s batch limit and token budget. Records who was
    /// admitted and preempted in `out` (which the caller clears).
    fn schedule(&mut self, queues: &mut Queues, kv: &mut KvCache, cfg: &SchedConfig, out: &mut Decisions);

    /// The batch the last [`Scheduler::schedule`] picked from `running` (unchanged since), its
    /// prefill chunks into `chunks`: [`Batch::of`], unless the policy kept it as it went.
    fn batch(&self, running: &VecDeque<Seq>, chunks: &mut Vec<Chunk>) -> Option<Batch> {
        Batch::of(running, chunks)
    }
}

/// The scheduler a replica runs with `cfg` (its `policy`).
pub fn for_config(cfg: &SchedConfig) -> Box<dyn Scheduler> {
    match cfg.policy {
        super::engines::Policy::VllmV1 => Box::new(VllmV1),
        super::engines::Policy::TrtllmInflight => Box::<TrtllmInflight>::default(),
    }
}

/// TensorRT-LLM's in-flight batching (its batch manager's `GUARANTEED_NO_EVICT` capacity
/// scheduler and its micro-batch scheduler): every running request takes its next tokens while
/// `max_num_tokens` lasts (a decode token, or its prompt: whole, or with chunked context the part
/// that fits); then waiting requests in arrival order while `max_batch_size` allows, each admitted
/// only if the blocks for its whole prompt and all its output tokens can be reserved at once, so a
/// running request never runs out of cache and none is ever preempted.
///
/// It keeps the batch's shape as it schedules (one pass over the running sequences, not two; at
/// thousands of running sequences that pass is most of a serving prediction's time).
#[derive(Debug, Clone, Default)]
pub struct TrtllmInflight {
    /// The last pass's batch and its prefill chunks.
    batch: Batch,
    chunks: Vec<Chunk>,
}

impl Scheduler for TrtllmInflight {
    fn batch(&self, _running: &VecDeque<Seq>, chunks: &mut Vec<Chunk>) -> Option<Batch> {
        chunks.clear();
        chunks.extend_from_slice(&self.chunks);
        (self.batch.n_decode > 0 || !chunks.is_empty()).then_some(self.batch)
    }

    fn schedule(&mut self, q: &mut Queues, kv: &mut KvCache, cfg: &SchedConfig, out: &mut Decisions) {
        // A local, kept in registers over the loop (through `self` it was stored every sequence).
        let mut batch = Batch::default();
        let chunks = &mut self.chunks;
        chunks.clear();
        let full = cfg.token_budget as u64;
        let mut budget = full;
        let take = |remaining: u64, budget: u64| -> u64 {
            if remaining == 0 {
                1.min(budget)
            } else if cfg.chunked_prefill || remaining <= budget {
                remaining.min(budget)
            } else if budget == full {
                // Without chunked context a prompt longer than the budget runs alone.
                remaining
            } else {
                0
            }
        };
        let (front, back) = q.running.as_mut_slices();
        for part in [front, back] {
            for s in part.iter_mut() {
                if s.computed >= s.target {
                    // Decoding (most of them): one token while the budget lasts.
                    s.sched = (budget > 0) as u32;
                    budget -= s.sched as u64;
                    batch.add_decoder(s);
                    continue;
                }
                let need = take(s.target.saturating_sub(s.computed) as u64, budget);
                s.sched = need as u32;
                budget = budget.saturating_sub(need);
                batch.add(s, chunks);
            }
        }
        while budget > 0 && q.running.len() < cfg.max_batch as usize {
            let Some(s) = q.waiting.front() else { break };
            let need = take(s.target.saturating_sub(s.computed) as u64, budget);
            let reserve = super::kv::blocks_for((s.input_len + s.output_len) as u64, cfg.block_size as u64).saturating_sub(s.blocks as u64);
            if need == 0 || reserve > kv.free_blocks() {
                break;
            }
            let mut s = q.waiting.pop_front().expect("front");
            kv.allocate(&mut s, reserve);
            s.sched = need as u32;
            kv.assign_slot(&mut s);
            budget = budget.saturating_sub(need);
            out.admitted.push(s.req);
            batch.add(&s, chunks);
            q.running.push_back(s);
        }
        self.batch = batch;
    }
}

/// vLLM v1's scheduler order: running sequences first, oldest first, each taking one decode token
/// or its next prefill chunk; when the cache has no block for one, the newest running sequence is
/// preempted (its blocks freed, its tokens recomputed later); then, if nothing was preempted,
/// waiting sequences in arrival order while the batch, the token budget and the free blocks allow.
#[derive(Debug, Clone, Copy, Default)]
pub struct VllmV1;

impl Scheduler for VllmV1 {
    fn schedule(&mut self, q: &mut Queues, kv: &mut KvCache, cfg: &SchedConfig, out: &mut Decisions) {
        let mut budget = cfg.token_budget as u64;
        let preempted = schedule_running(q, kv, &mut budget, out);
        if !preempted {
            admit_waiting(q, kv, cfg, &mut budget, out);
        }
    }
}

/// The running sequences in order, each its next tokens while the budget lasts, preempting from
/// the newest for blocks; true if any was preempted.
fn schedule_running(q: &mut Queues, kv: &mut KvCache, budget: &mut u64, out: &mut Decisions) -> bool {
    let mut preempted = false;
    let mut i = 0;
    while i < q.running.len() && *budget > 0 {
        let s = q.running[i];
        let remaining = (s.target.saturating_sub(s.computed)) as u64;
        let need = if remaining == 0 { 1 } else { remaining.min(*budget) };
        let need_blocks = kv.blocks_needed(&s, need);
        while kv.free_blocks() < need_blocks && q.running.len() > i {
            let mut v = q.running.pop_back().expect("non-empty");
            kv.release(&mut v);
            v.restart();
            out.preempted.push(v.req);
            q.waiting.push_front(v);
            preempted = true;
        }
        if i >= q.running.len() {
            break;
        }
        let s = &mut q.running[i];
        kv.allocate(s, need_blocks);
        s.sched = need as u32;
        *budget -= need;
        i += 1;
    }
    preempted
}

/// Waiting sequences in order while the batch limit, the budget and the free blocks allow; a whole
/// prompt at once without chunked prefill (alone if longer than the budget).
fn admit_waiting(q: &mut Queues, kv: &mut KvCache, cfg: &SchedConfig, budget: &mut u64, out: &mut Decisions) {
    while *budget > 0 && q.running.len() < cfg.max_batch as usize {
        let Some(s) = q.waiting.front() else { break };
        let remaining = (s.target.saturating_sub(s.computed)) as u64;
        let need = if remaining == 0 {
            1
        } else if cfg.chunked_prefill {
            remaining.min(*budget)
        } else if remaining <= *budget || *budget == cfg.token_budget as u64 {
            // Without chunking a prompt longer than the budget runs alone.
            remaining
        } else {
            break;
        };
        let need_blocks = kv.blocks_needed(s, need);
        if need_blocks > kv.free_blocks() {
            break;
        }
        let mut s = q.waiting.pop_front().expect("front");
        kv.allocate(&mut s, need_blocks);
        s.sched = need as u32;
        kv.assign_slot(&mut s);
        *budget = budget.saturating_sub(need);
        out.admitted.push(s.req);
        q.running.push_back(s);
    }
}

/// The shape of an iteration: what its cost depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Batch {
    pub n_decode: u64,
    /// Cached tokens of all decoders.
    pub decode_kv: u64,
    /// The longest decoder's context.
    pub decode_kv_max: u64,
    /// Slots up to the highest decoder's (see [`Seq::slot`]).
    pub decode_slot_span: u64,
    /// Rows the LM head samples from: decoders and prompts whose last chunk runs.
    pub rows: u64,
}

impl Batch {
    /// The batch a scheduler picked from `running` (the sequences with [`Seq::sched`] > 0): its
    /// shape, and its prefill chunks into `chunks` (cleared first); `None` if nothing runs.
    pub fn of(running: &VecDeque<Seq>, chunks: &mut Vec<Chunk>) -> Option<Batch> {
        chunks.clear();
        let mut b = Batch::default();
        for s in running {
            b.add(s, chunks);
        }
        if b.n_decode == 0 && chunks.is_empty() {
            return None;
        }
        Some(b)
    }

    /// Add `s` if it runs ([`Seq::sched`] > 0): a decoder, or a prefill chunk into `chunks`.
    #[inline]
    fn add(&mut self, s: &Seq, chunks: &mut Vec<Chunk>) {
        if s.sched == 0 {
            return;
        }
        if s.computed < s.target {
            chunks.push(Chunk { q: s.sched, c: s.computed });
            if s.computed + s.sched >= s.target {
                self.rows += 1;
            }
        } else {
            self.add_decoder(s);
        }
    }

    /// Add `s`, a decoder (its context cached), if it runs.
    #[inline]
    fn add_decoder(&mut self, s: &Seq) {
        if s.sched == 0 {
            return;
        }
        self.n_decode += 1;
        self.decode_kv += s.computed as u64;
        self.decode_kv_max = self.decode_kv_max.max(s.computed as u64);
        self.decode_slot_span = self.decode_slot_span.max(s.slot as u64 + 1);
        self.rows += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(max_batch: u32, token_budget: u32, chunked_prefill: bool) -> SchedConfig {
        SchedConfig { max_batch, token_budget, chunked_prefill, block_size: 16, ..SchedConfig::default() }
    }

    fn pass(q: &mut Queues, kv: &mut KvCache, cfg: &SchedConfig) -> Decisions {
        let mut out = Decisions::default();
        VllmV1.schedule(q, kv, cfg, &mut out);
        out
    }

    #[test]
    fn vllm_admits_in_arrival_order_within_the_token_budget_chunking_the_last_prompt() {
        let mut q = Queues::default();
        q.waiting.extend([Seq::new(0, 100, 10), Seq::new(1, 100, 10), Seq::new(2, 100, 10)]);
        let mut kv = KvCache::new(1000, 16, 8);
        let out = pass(&mut q, &mut kv, &cfg(8, 150, true));
        assert_eq!(out.admitted, [0, 1]);
        assert!(out.preempted.is_empty());
        assert_eq!(q.running.iter().map(|s| (s.req, s.sched, s.slot)).collect::<Vec<_>>(), [(0, 100, 0), (1, 50, 1)]);
        assert_eq!(kv.free_blocks(), 1000 - 7 - 4);
        let mut chunks = Vec::new();
        let b = Batch::of(&q.running, &mut chunks).unwrap();
        assert_eq!((b.n_decode, b.rows, chunks.len()), (0, 1, 2));
    }

    #[test]
    fn vllm_without_chunking_waits_for_room_for_a_whole_prompt() {
        let mut q = Queues::default();
        q.waiting.extend([Seq::new(0, 100, 10), Seq::new(1, 100, 10)]);
        let mut kv = KvCache::new(1000, 16, 8);
        let out = pass(&mut q, &mut kv, &cfg(8, 150, false));
        assert_eq!(out.admitted, [0]);
        assert_eq!(q.waiting.len(), 1);
    }

    #[test]
    fn trtllm_reserves_whole_requests_and_never_preempts() {
        let cfg = SchedConfig { policy: crate::serve::engines::Policy::TrtllmInflight, ..cfg(8, 1000, false) };
        let mut q = Queues::default();
        // Each request needs (100 + 60) / 16 = 10 blocks reserved; the cache has 25.
        q.waiting.extend([Seq::new(0, 100, 60), Seq::new(1, 100, 60), Seq::new(2, 100, 60)]);
        let mut kv = KvCache::new(25, 16, 8);
        let mut out = Decisions::default();
        TrtllmInflight::default().schedule(&mut q, &mut kv, &cfg, &mut out);
        assert_eq!(out.admitted, [0, 1], "the third waits for 10 free blocks");
        assert_eq!(kv.free_blocks(), 5);
        assert_eq!(q.running.iter().map(|s| (s.sched, s.blocks)).collect::<Vec<_>>(), [(100, 10), (100, 10)]);
        // Decoding on: no block is ever needed again, nothing is preempted.
        for s in q.running.iter_mut() {
            s.computed = 100;
            s.generated = 1;
        }
        out.clear();
        TrtllmInflight::default().schedule(&mut q, &mut kv, &cfg, &mut out);
        assert!(out.preempted.is_empty() && out.admitted.is_empty());
        assert_eq!(q.running.iter().map(|s| s.sched).collect::<Vec<_>>(), [1, 1]);
        // A prompt longer than max_num_tokens without chunked context runs alone.
        let mut q = Queues::default();
        q.waiting.extend([Seq::new(0, 2000, 10), Seq::new(1, 10, 10)]);
        let mut kv = KvCache::new(1000, 16, 8);
        out.clear();
        TrtllmInflight::default().schedule(&mut q, &mut kv, &cfg, &mut out);
        assert_eq!(out.admitted, [0]);
    }

    #[test]
    fn vllm_preempts_the_newest_running_sequence_when_the_cache_is_full() {
        let mut q = Queues::default();
        let mut kv = KvCache::new(2, 16, 8);
        // Two decoders, each with a full block: the next token of the first needs a second block.
        for req in 0..2 {
            let mut s = Seq::prefilled(req, 16, 10);
            kv.allocate(&mut s, 1);
            kv.assign_slot(&mut s);
            q.running.push_back(s);
        }
        let out = pass(&mut q, &mut kv, &cfg(8, 100, true));
        assert_eq!(out.preempted, [1]);
        assert!(out.admitted.is_empty(), "nothing is admitted in a pass that preempted");
        assert_eq!(q.running.len(), 1);
        assert_eq!((q.running[0].sched, q.running[0].blocks), (1, 2));
        let v = q.waiting[0];
        assert_eq!((v.req, v.target, v.computed, v.blocks, v.slot), (1, 17, 0, 0, NO_SLOT));
        assert_eq!(kv.free_blocks(), 0);
    }
}
