//! A request's sequence on a replica: its lengths, progress, KV blocks and cache slot, the state
//! the scheduler, the KV cache and the event loop share.

/// [`Seq::slot`] of a sequence that holds no cache slot (waiting).
pub const NO_SLOT: u32 = u32::MAX;

/// A request's sequence on a replica.
#[derive(Debug, Clone, Copy)]
pub struct Seq {
    /// The request (its index in the arrivals).
    pub req: u32,
    pub input_len: u32,
    pub output_len: u32,
    /// Tokens to have in the KV cache before the next token is sampled (the prompt, or the prompt
    /// and the tokens generated so far after a preemption).
    pub target: u32,
    pub computed: u32,
    pub generated: u32,
    /// KV-cache blocks it holds.
    pub blocks: u32,
    /// Tokens scheduled in the current iteration.
    pub sched: u32,
    /// Its slot of a per-slot (padded) cache while running: the lowest free one when admitted,
    /// as a static-cache server assigns them ([`NO_SLOT`] while waiting).
    pub slot: u32,
}

impl Seq {
    /// A new request: its prompt still to prefill.
    pub fn new(req: u32, input_len: u32, output_len: u32) -> Seq {
        Seq { req, input_len, output_len, target: input_len, computed: 0, generated: 0, blocks: 0, sched: 0, slot: NO_SLOT }
    }

    /// A request prefilled elsewhere (its first token out), arriving with its KV at a decode pool.
    pub fn prefilled(req: u32, input_len: u32, output_len: u32) -> Seq {
        Seq { computed: input_len, generated: 1, ..Seq::new(req, input_len, output_len) }
    }

    /// After a preemption by recompute: its cache is gone, and the prompt and the tokens it has
    /// generated are prefilled again before its next token.
    pub fn restart(&mut self) {
        self.target = self.input_len + self.generated;
        self.computed = 0;
    }
}
