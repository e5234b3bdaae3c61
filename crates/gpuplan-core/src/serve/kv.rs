//! One replica's paged KV cache: fixed-size blocks of `block_size` tokens, handed to sequences as
//! their contexts grow and returned whole when they finish, leave for the decode pool or are
//! preempted; and the cache slots of a per-slot (padded) cache, the lowest free one to each
//! sequence admitted (see [`Seq::slot`]).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::seq::{Seq, NO_SLOT};

/// Blocks of `block_size` tokens that hold `tokens` tokens.
pub fn blocks_for(tokens: u64, block_size: u64) -> u64 {
    tokens.div_ceil(block_size)
}

#[derive(Debug, Clone)]
pub struct KvCache {
    block_size: u64,
    total_blocks: u64,
    free_blocks: u64,
    /// Free cache slots, lowest first.
    free_slots: BinaryHeap<Reverse<u32>>,
}

impl KvCache {
    /// An empty cache of `total_blocks` blocks of `block_size` tokens, and `slots` cache slots
    /// (one per sequence the batch limit allows).
    pub fn new(total_blocks: u64, block_size: u32, slots: u32) -> KvCache {
        KvCache { block_size: block_size as u64, total_blocks, free_blocks: total_blocks, free_slots: (0..slots).map(Reverse).collect() }
    }

    pub fn free_blocks(&self) -> u64 {
        self.free_blocks
    }

    pub fn total_blocks(&self) -> u64 {
        self.total_blocks
    }

    /// Share of the blocks in use.
    pub fn occupancy(&self) -> f64 {
        1.0 - self.free_blocks as f64 / self.total_blocks as f64
    }

    /// Blocks `seq` needs beyond those it holds to cache `tokens` more tokens.
    pub fn blocks_needed(&self, seq: &Seq, tokens: u64) -> u64 {
        blocks_for(seq.computed as u64 + tokens, self.block_size).saturating_sub(seq.blocks as u64)
    }

    /// Hand `blocks` free blocks to `seq` (at most [`KvCache::free_blocks`]).
    pub fn allocate(&mut self, seq: &mut Seq, blocks: u64) {
        self.free_blocks -= blocks;
        seq.blocks += blocks as u32;
    }

    /// Give `seq` the lowest free cache slot (there is one per sequence up to the batch limit).
    pub fn assign_slot(&mut self, seq: &mut Seq) {
        seq.slot = self.free_slots.pop().expect("a slot per running sequence up to the batch limit").0;
    }

    /// Take back all of `seq`'s blocks and its slot.
    pub fn release(&mut self, seq: &mut Seq) {
        self.free_blocks += seq.blocks as u64;
        seq.blocks = 0;
        self.free_slots.push(Reverse(seq.slot));
        seq.slot = NO_SLOT;
    }
}
