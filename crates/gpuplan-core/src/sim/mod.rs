//! Discrete-event simulation of one training step (or one inference forward) on the cluster.
//!
//! What it plays: the same lowered steps as the analytic engine (`cost::lower`), per pipeline stage,
//! in the real schedule order (GPipe, 1F1B, interleaved 1F1B); collectives as latency + flows over
//! the links they cross, sharing each link max-min fairly; pipeline sends as flows whose arrival
//! gates the next stage; DP gradient buckets launched as backward produces them; ZeRO-3 layer
//! gathers prefetched one layer ahead; the CPU issuing kernels at the stack's dispatch rate.
//!
//! Symmetry: one representative rank per pipeline stage. All TP ranks of a stage and all DP
//! replicas do the same work at the same time, so they are not simulated one by one; the traffic
//! they put on shared links is already in the per-rank bandwidth shares of `cost` (one NIC per rank
//! of a group in each node, divided by the spine oversubscription), and the DES adds what the
//! closed form cannot: contention between concurrent flows on a rank's NVLink and NIC, queueing on
//! the DP stream, and the schedule's real dependencies.
//!
//! Time is integer picoseconds (`des::SimTime`); events at equal times run in insertion order
//! (`des::EventQueue`). No wall clock, no randomness: the same scenario gives the same trace, byte
//! for byte.

use std::cmp::Reverse;
use std::collections::{HashMap, VecDeque};

use crate::analytic;
use crate::cost::lower::{CommStep, Overlap, Step};
use crate::cost::Bound;
pub use crate::des::SimTime;
use crate::des::{EventQueue, KeyedTimes};
use crate::parallelism::{stage_layer_counts, virtual_stage_layer_counts, Group, Schedule};
use crate::scenario::Scenario;
use crate::step::{self, Breakdown, DpPlan, PredictError, Prediction, Priced};
use crate::units::Seconds;
use crate::workload::{backward_of, recompute_of, Mode, Op};

pub mod per_rank;
pub mod ranks;

/// What-if faults and slowdowns.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Faults {
    /// (stage, factor): that stage's GPUs run compute at `factor` of their speed (throttled GPU).
    pub slow_gpu: Vec<(u32, f64)>,
    /// (stage, factor): that stage's NVLink runs at `factor` of its bandwidth (degraded links,
    /// NVSwitch firmware drift).
    pub nvlink: Vec<(u32, f64)>,
    /// (stage, factor): that stage's NICs run at `factor` of their bandwidth (a failed port).
    pub nic: Vec<(u32, f64)>,
    /// All scale-out traffic at `factor` of its bandwidth (a congested spine).
    pub spine: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct SimOptions {
    pub faults: Faults,
    /// Record trace events (Chrome trace / timeline).
    pub trace: bool,
}

/// One span on a track, for the trace and the timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub stage: u32,
    pub track: &'static str,
    pub name: &'static str,
    pub start: SimTime,
    pub end: SimTime,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Utilization {
    pub stage: u32,
    /// Fraction of the step the compute stream runs kernels.
    pub compute: f64,
    /// Fraction of the step the compute stream waits for pipeline neighbours (bubble).
    pub bubble: f64,
    pub nvlink: f64,
    pub nic: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SimResult {
    pub prediction: Prediction,
    pub utilization: Vec<Utilization>,
    /// Fraction of the critical stage's step spent waiting for pipeline neighbours.
    pub bubble_fraction: f64,
    pub events: u64,
    /// Bytes moved on the wire by all flows of the representative ranks.
    pub wire_bytes: f64,
    pub spans: Vec<Span>,
}

// ---------------------------------------------------------------------------------------------
// Tasks and steps.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Fwd,
    Bwd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TaskKey {
    pass: Pass,
    micro: u32,
    /// Virtual stage (0..pp*vp).
    vstage: u32,
}

#[derive(Debug, Clone)]
enum SimStep {
    /// `host_sync`: host time that starts only once the GPU reaches the kernel (no run-ahead).
    Kernel {
        name: &'static str,
        time: SimTime,
        bound: Bound,
        cpu: SimTime,
        launches: f64,
        host_sync: SimTime,
    },
    Comm {
        name: &'static str,
        comm: CommStep,
    },
    /// Gradients of a layer are complete (last micro-batch): queue them for DP reduction.
    GradsReady,
    /// ZeRO-3: wait for this layer's parameters, and prefetch the next layer's.
    FsdpGather,
    /// ZeRO-3: reduce-scatter this layer's gradients.
    FsdpReduce,
}

fn to_sim(steps: Vec<Step>, slow: f64) -> Vec<SimStep> {
    steps
        .into_iter()
        .map(|s| match s {
            Step::Kernel { name, time, bound, cpu, launches, host_sync, .. } => SimStep::Kernel {
                name,
                time: SimTime::from_seconds(time / slow),
                bound,
                cpu: SimTime::from_seconds(cpu),
                launches,
                host_sync: SimTime::from_seconds(host_sync),
            },
            Step::Comm { name, comm } => SimStep::Comm { name, comm },
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Links and flows.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiter {
    /// The device's current step waits for this flow.
    Device(u32),
    /// A pipeline send: arrival satisfies a task's input on `dst`; a blocking one (the
    /// non-interleaved schedule) also holds `src`'s next task until it lands.
    P2p { src: u32, dst: u32, key: TaskKey, blocking: bool },
    /// The device's DP stream (buckets run one after another).
    DpStream(u32),
    /// ZeRO-3 layer gather for (device, sequence number).
    Gather(u32, u64),
}

#[derive(Debug, Clone)]
struct Flow {
    remaining: f64,
    /// Algorithm steps still to run after this one, the bytes of each, and the latency before each.
    steps_left: u32,
    step_bytes: f64,
    step_latency: SimTime,
    cap: f64,
    /// NVLink, NIC and (per-rank engine) the leaf's uplinks.
    links: [Option<usize>; 3],
    /// How many ranks' flows this one stands for on the uplink (`links[2]`): a class's ranks on
    /// one leaf, all sending alike. One on the other links (each rank's own).
    up_weight: f64,
    rate: f64,
    waiter: Waiter,
    span: Option<(u32, &'static str, &'static str, SimTime)>,
    /// The collective instance this flow is one participant's part of (per-rank engine), or
    /// `NO_COLL`.
    coll: u32,
    /// Its component (see `Sim::active`).
    comp: u32,
}

const NO_COLL: u32 = u32::MAX;

impl Flow {
    /// The links it crosses, with its weight on each.
    fn weighted_links(&self) -> impl Iterator<Item = (usize, f64)> + '_ {
        self.links.iter().zip([1.0, 1.0, self.up_weight]).filter_map(|(l, w)| l.map(|l| (l, w)))
    }
    /// Its current algorithm step is done: a check lands on the picosecond after the finish, so
    /// allow what two picoseconds move.
    fn finished(&self) -> bool {
        self.remaining <= self.rate * 2e-12 + 1e-9
    }
}

/// Per-rank engine: which classes meet at each collective, and the collectives under way.
struct Topo {
    /// Per device (class) and group kind (`ranks::KINDS`): the set of classes its group holds.
    set_of: Vec<[u32; 6]>,
    sets: Vec<Vec<u32>>,
    /// `pp_line[d * pp + stage]`: the class at `stage` of device d's pipeline.
    pp_line: Vec<u32>,
    /// Collectives each device entered so far, per channel (kind x stream).
    seq: Vec<[u32; 18]>,
    /// Open barriers by (set, channel, sequence number) -> slot in `barriers`.
    open: HashMap<(u32, u8, u32), usize, crate::des::BuildFx>,
    barriers: Vec<Vec<Arrival>>,
    free_barriers: Vec<usize>,
    /// Collectives under way: flows still running, and the waiters to wake when all are done.
    /// (flows left, waiters, when its first flow ended or `SimTime(u64::MAX)`).
    colls: Vec<(u32, Vec<Waiter>, SimTime)>,
    free_colls: Vec<u32>,
    /// Per device: seconds the other participants of its collectives waited for it to arrive
    /// (counted when it arrived last), and seconds its slower links added to collectives.
    blame_wait: Vec<f64>,
    blame_link: Vec<f64>,
    /// Per device (class): the uplink link of its leaf class and its ranks on one such leaf,
    /// where the leaf lost uplink bandwidth (`ranks::Classes::uplink`).
    uplink: Vec<Option<(usize, f64)>>,
    /// Per device: bit k set when its group of kind k spans leaves (`ranks::Classes::crosses`).
    crosses: Vec<u8>,
    /// Per device: its flow component (classes that share an uplink share one).
    comp: Vec<u32>,
    /// Per device and group kind, with PXN and a NIC fault (else empty): the rate of the slowest
    /// rail-local NIC its scale-out flows of that group leave through (`ranks::route_pxn`). The
    /// flows still load the device's own NIC link: in a group spread evenly over rails, a NIC
    /// carries as much of its node's other GPUs' cross-rail traffic as its own GPU sends
    /// through theirs.
    nic_pxn: Vec<[f64; 6]>,
}

#[derive(Debug, Clone)]
struct Arrival {
    dev: u32,
    comm: CommStep,
    fraction: f64,
    with_latency: bool,
    waiter: Waiter,
    track: &'static str,
    name: &'static str,
    at: SimTime,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// Kernel done on a device (with the device's step generation).
    KernelDone(u32),
    /// A flow's latency has passed: it joins the active set.
    FlowStart(usize),
    /// The earliest active flow of a component may be complete (checked against its `flow_gen`).
    FlowCheck(u32, u64),
    /// A device may be able to start its next task.
    TryStart(u32),
}

struct Device {
    tasks: Vec<TaskKey>,
    next: usize,
    /// The task under way and the index of its next step (in the device's lists, read in place).
    running: Option<(TaskKey, usize)>,
    task_start: SimTime,
    /// Outstanding kernel/flows the current step waits for.
    join: u32,
    /// Overlapped collective whose remainder starts with the next kernel.
    pending_overlap: Option<CommStep>,
    cpu: SimTime,
    /// Inputs that have arrived, per task key (pipeline receives).
    arrived: Vec<TaskKey>,
    dp_queue: VecDeque<CommStep>,
    dp_busy: bool,
    /// ZeRO-3 layer gathers: needed so far, issued (one ahead), done (in order), total needed.
    gathers_needed: u64,
    gathers_issued: u64,
    gathers_done: u64,
    gathers_total: u64,
    waiting_gather: Option<u64>,
    /// Data-parallel flows in flight (DP stream, FSDP gathers): NCCL's kernels slow compute.
    background: u32,
    /// Gradient buckets not yet handed to the DP stream, in launch order.
    grad_buckets: VecDeque<CommStep>,
    /// Gradient buckets owed so far (fractional), and DP collectives completed.
    grad_owed: f64,
    grad_per_layer: f64,
    dp_completed: u32,
    /// ZeRO 1/2: the first forward starts after the first parameter all-gather bucket, and ends
    /// after the last (its layers use the gathered parameters as they go).
    param_gate: bool,
    /// Blocking pipeline sends still in flight: Megatron-Core's non-interleaved 1F1B waits on its
    /// neighbour exchanges before the next task (`analytic::step_breakdown` says the same).
    sends_in_flight: u32,
    param_total: u32,
    /// A first-forward task whose end waits for the last parameter bucket.
    param_end_wait: Option<TaskKey>,
    finished_tasks: bool,
    done_at: Option<SimTime>,
    // Accounting.
    busy: [SimTime; 2],
    wait_dep: SimTime,
    wait_cpu: SimTime,
    idle_since: Option<(SimTime, bool)>,
    last_task_end: SimTime,
    dp_drain: SimTime,
    optimizer_time: SimTime,
    plan: DpPlan,
}

impl Device {
    fn new(tasks: Vec<TaskKey>, plan: DpPlan, layers: u64, gathers_total: u64) -> Device {
        // ZeRO-1/2: the previous step's parameter all-gathers overlap this step's forward.
        let dp_queue: VecDeque<CommStep> = plan.param_list().into();
        let grad_buckets: VecDeque<CommStep> = plan.grad_list().into();
        Device {
            tasks,
            next: 0,
            running: None,
            task_start: SimTime(0),
            join: 0,
            pending_overlap: None,
            cpu: SimTime(0),
            arrived: Vec::new(),
            param_gate: !dp_queue.is_empty(),
            sends_in_flight: 0,
            param_total: dp_queue.len() as u32,
            param_end_wait: None,
            dp_queue,
            dp_busy: false,
            gathers_needed: 0,
            gathers_issued: 0,
            gathers_done: 0,
            gathers_total,
            waiting_gather: None,
            grad_owed: 0.0,
            grad_per_layer: grad_buckets.len() as f64 / layers.max(1) as f64,
            background: 0,
            grad_buckets,
            dp_completed: 0,
            finished_tasks: false,
            done_at: None,
            busy: [SimTime(0); 2],
            wait_dep: SimTime(0),
            wait_cpu: SimTime(0),
            idle_since: Some((SimTime(0), true)),
            last_task_end: SimTime(0),
            dp_drain: SimTime(0),
            optimizer_time: SimTime(0),
            plan,
        }
    }
}

/// Buffers reused between events, so that the event loop does not allocate once they have grown.
#[derive(Default)]
struct Scratch {
    rates: RateScratch,
    done: Vec<usize>,
    waiters: Vec<Waiter>,
}

/// The flow-rate solver's buffers.
#[derive(Default)]
struct RateScratch {
    unfixed: Vec<usize>,
    keep: Vec<usize>,
    fix: Vec<usize>,
    left: Vec<f64>,
    /// Weight of the unfixed flows on each link.
    n_on: Vec<f64>,
    saturated: Vec<bool>,
    /// Links the component's flows use.
    used: Vec<usize>,
}

struct Sim {
    scratch: Scratch,
    /// Device -> its step lists in `lists`, and its pipeline stage (both the identity in the
    /// representative engine, one device per stage).
    list_of: Vec<usize>,
    stage: Vec<u32>,
    topo: Option<Box<Topo>>,
    now: SimTime,
    queue: EventQueue<Event>,
    devices: Vec<Device>,
    lists: Vec<Vec<(Vec<SimStep>, Vec<SimStep>)>>,
    flows: Vec<Flow>,
    free_flows: Vec<usize>,
    /// Active flows per component: flows of different components share no link, so each solves
    /// its rates, advances and schedules its next finish on its own. One component (all flows)
    /// in the representative engine; one per device (class) in the per-rank engine, whose flows
    /// cross only their own device's links.
    active: Vec<Vec<usize>>,
    capacity: Vec<f64>,
    link_bytes: Vec<f64>,
    last_update: Vec<SimTime>,
    flow_gen: Vec<u64>,
    /// Per-rank engine: the time of each component's pending check, and the checks themselves,
    /// one per component, moved in place when its rates change (`des::KeyedTimes`) and merged
    /// with `queue` in (time, sequence) order: the order a push of each check would have given,
    /// without the stale checks such pushes leave in the queue.
    check_at: Vec<Option<SimTime>>,
    checks: KeyedTimes,
    p2p: Option<CommStep>,
    m: u32,
    events: u64,
    wire_bytes: f64,
    spans: Vec<Span>,
    trace: bool,
    pp: u32,
    vp: u32,
    /// How much slower a kernel runs beside a data-parallel collective (`step::overlap_cost` of
    /// the scenario's stack).
    overlap_cost: f64,
}

const NVLINK: usize = 0;
const NIC: usize = 1;

impl Sim {
    #[allow(clippy::too_many_arguments)]
    fn new(
        devices: Vec<Device>,
        lists: Vec<Vec<(Vec<SimStep>, Vec<SimStep>)>>,
        capacity: Vec<f64>,
        p2p: Option<CommStep>,
        m: u32,
        pp: u32,
        vp: u32,
        trace: bool,
    ) -> Sim {
        let n = devices.len();
        Sim {
            scratch: Scratch::default(),
            list_of: (0..n).collect(),
            stage: (0..n as u32).collect(),
            topo: None,
            now: SimTime(0),
            queue: EventQueue::new(),
            devices,
            lists,
            flows: Vec::new(),
            free_flows: Vec::new(),
            active: vec![Vec::new()],
            link_bytes: vec![0.0; capacity.len()],
            capacity,
            last_update: vec![SimTime(0)],
            flow_gen: vec![0],
            check_at: Vec::new(),
            checks: KeyedTimes::default(),
            p2p,
            m,
            events: 0,
            wire_bytes: 0.0,
            overlap_cost: crate::cost::fitted::fitted().overlap_cost,
            spans: Vec::new(),
            trace,
            pp,
            vp,
        }
    }

    fn end_time(&self) -> SimTime {
        self.devices.iter().map(|d| d.done_at.unwrap_or(d.last_task_end)).max().unwrap_or(SimTime(0))
    }

    fn link(&self, dev: u32, kind: usize) -> usize {
        dev as usize * 2 + kind
    }

    fn push(&mut self, at: SimTime, e: Event) {
        self.queue.push(at, e);
    }

    fn span(&mut self, stage: u32, track: &'static str, name: &'static str, start: SimTime, end: SimTime) {
        if self.trace && end > start {
            self.spans.push(Span { stage, track, name, start, end });
        }
    }

    /// Start a collective: its base latency, then its algorithm's steps one after another, each a
    /// step latency and then `bytes / steps` at up to the bus bandwidth over its links. A part of a
    /// collective (`fraction` < 1, the overlap split) runs as one step with all the latency up
    /// front (or none).
    fn start_flow(&mut self, dev: u32, comm: &CommStep, fraction: f64, with_latency: bool, waiter: Waiter, track: &'static str, name: &'static str) {
        self.start_flow_capped(dev, comm, fraction, with_latency, waiter, track, name, comm.busbw.value(), NO_COLL);
    }

    #[allow(clippy::too_many_arguments)]
    fn start_flow_capped(
        &mut self,
        dev: u32,
        comm: &CommStep,
        fraction: f64,
        with_latency: bool,
        waiter: Waiter,
        track: &'static str,
        name: &'static str,
        cap: f64,
        coll: u32,
    ) {
        let bytes = comm.wire_bytes * fraction;
        let whole = fraction >= 1.0 && with_latency;
        let steps = if whole { comm.steps.max(1) } else { 1 };
        let step_latency = if whole { SimTime::from_seconds(comm.step_latency) } else { SimTime(0) };
        let latency = match (whole, with_latency) {
            (true, _) => SimTime(SimTime::from_seconds(comm.latency).0 + step_latency.0),
            (false, true) => SimTime::from_seconds(comm.latency + comm.step_latency * comm.steps as f64),
            (false, false) => SimTime(0),
        };
        let (up, up_weight) = match &self.topo {
            Some(t) if comm.crosses_network && t.crosses[dev as usize] & (1 << ranks::kind_index(comm.group)) != 0 => {
                t.uplink[dev as usize].map_or((None, 1.0), |(l, w)| (Some(l), w))
            }
            _ => (None, 1.0),
        };
        let cap = if comm.crosses_network { cap.min(self.pxn_rate(dev, comm)) } else { cap };
        let links =
            if comm.crosses_network { [Some(self.link(dev, NVLINK)), Some(self.link(dev, NIC)), up] } else { [Some(self.link(dev, NVLINK)), None, None] };
        let step_bytes = bytes / steps as f64;
        let flow = Flow {
            remaining: step_bytes,
            steps_left: steps - 1,
            step_bytes,
            step_latency,
            cap,
            links,
            up_weight,
            rate: 0.0,
            waiter,
            span: Some((dev, track, name, self.now)),
            coll,
            comp: self.comp_of(dev),
        };
        // A finished flow's slot is reused: no event refers to it any more.
        let id = match self.free_flows.pop() {
            Some(id) => {
                self.flows[id] = flow;
                id
            }
            None => {
                self.flows.push(flow);
                self.flows.len() - 1
            }
        };
        self.wire_bytes += bytes;
        // A participant of a per-rank collective counted itself when it arrived.
        if coll == NO_COLL && matches!(waiter, Waiter::DpStream(_) | Waiter::Gather(..)) {
            self.devices[dev as usize].background += 1;
        }
        self.push(SimTime(self.now.0 + latency.0), Event::FlowStart(id));
    }

    /// The rate a flow of `comm` gets on device `dev`'s links alone: its bus bandwidth, or less
    /// where a fault left a link it crosses below that.
    fn link_rate(&self, dev: u32, comm: &CommStep) -> f64 {
        let mut r = comm.busbw.value().min(self.capacity[self.link(dev, NVLINK)]);
        if comm.crosses_network {
            r = r.min(self.capacity[self.link(dev, NIC)]).min(self.pxn_rate(dev, comm));
        }
        r
    }

    /// The rate of the rail-local NICs PXN sends the device's scale-out flows of `comm`'s group
    /// through (infinite where none is below the device's own).
    fn pxn_rate(&self, dev: u32, comm: &CommStep) -> f64 {
        match &self.topo {
            Some(t) => t.nic_pxn.get(dev as usize).map_or(f64::INFINITY, |x| x[ranks::kind_index(comm.group)]),
            None => f64::INFINITY,
        }
    }

    /// Enter a collective. The representative engine (and a device whose group holds only its own
    /// class) starts its flow at once. Otherwise the device waits at a barrier until every class
    /// of its group has reached the same collective (the same sequence number on the same
    /// channel: group kind x stream); then each participant's flow starts, all capped at the
    /// rate of the slowest participant's links (a ring or tree step moves at its slowest link),
    /// and the collective ends for all when the last of them ends.
    #[allow(clippy::too_many_arguments)]
    fn collective(&mut self, dev: u32, comm: &CommStep, fraction: f64, with_latency: bool, waiter: Waiter, track: &'static str, name: &'static str) {
        let Some(topo) = self.topo.as_mut() else {
            return self.start_flow(dev, comm, fraction, with_latency, waiter, track, name);
        };
        let kind = ranks::kind_index(comm.group);
        let set = topo.set_of[dev as usize][kind];
        let need = topo.sets[set as usize].len();
        if need <= 1 {
            return self.start_flow(dev, comm, fraction, with_latency, waiter, track, name);
        }
        let stream = match waiter {
            Waiter::Device(_) | Waiter::P2p { .. } => 0,
            Waiter::DpStream(_) => 1,
            Waiter::Gather(..) => 2,
        };
        let channel = (kind * 3 + stream) as u8;
        let seq = topo.seq[dev as usize][channel as usize];
        topo.seq[dev as usize][channel as usize] += 1;
        let key = (set, channel, seq);
        let slot = match topo.open.get(&key) {
            Some(&b) => b,
            None => {
                let b = match topo.free_barriers.pop() {
                    Some(b) => b,
                    None => {
                        topo.barriers.push(Vec::with_capacity(need));
                        topo.barriers.len() - 1
                    }
                };
                topo.open.insert(key, b);
                b
            }
        };
        let now = self.now;
        // NCCL's kernel is launched on arrival and holds its SMs while it waits for the others:
        // compute beside it is slowed from now (see `Device::background`).
        if matches!(waiter, Waiter::DpStream(_) | Waiter::Gather(..)) {
            self.devices[dev as usize].background += 1;
        }
        topo.barriers[slot].push(Arrival { dev, comm: comm.clone(), fraction, with_latency, waiter, track, name, at: now });
        if topo.barriers[slot].len() < need {
            return;
        }
        topo.open.remove(&key);
        let arrivals = std::mem::take(&mut topo.barriers[slot]);
        // Blame: the last to arrive kept the others waiting since the first arrived.
        let first = arrivals.iter().map(|a| a.at).min().unwrap_or(now);
        if let Some(last) = arrivals.last() {
            topo.blame_wait[last.dev as usize] += SimTime(now.0 - first.0).seconds().value();
        }
        let (mut cap, mut slowest, mut fastest) = (f64::INFINITY, 0, 0.0f64);
        for a in &arrivals {
            let r = self.link_rate(a.dev, &a.comm);
            if r < cap {
                (cap, slowest) = (r, a.dev);
            }
            fastest = fastest.max(r);
        }
        let topo = self.topo.as_mut().expect("per-rank engine");
        if cap < fastest {
            let bytes = comm.wire_bytes * fraction;
            topo.blame_link[slowest as usize] += bytes / cap - bytes / fastest;
        }
        let id = match topo.free_colls.pop() {
            Some(c) => c,
            None => {
                topo.colls.push((0, Vec::with_capacity(need), SimTime(u64::MAX)));
                (topo.colls.len() - 1) as u32
            }
        };
        let coll = &mut topo.colls[id as usize];
        coll.0 = arrivals.len() as u32;
        coll.2 = SimTime(u64::MAX);
        coll.1.clear();
        coll.1.extend(arrivals.iter().map(|a| a.waiter));
        for a in &arrivals {
            self.start_flow_capped(a.dev, &a.comm, a.fraction, a.with_latency, a.waiter, a.track, a.name, cap, id);
        }
        let topo = self.topo.as_mut().expect("per-rank engine");
        let mut arrivals = arrivals;
        arrivals.clear();
        topo.barriers[slot] = arrivals;
        topo.free_barriers.push(slot);
    }

    /// Advance active flows to `now` at their current rates.
    fn progress(&mut self, c: usize) {
        let dt = (self.now.0 - self.last_update[c].0) as f64 * 1e-12;
        if dt > 0.0 {
            for &f in &self.active[c] {
                let fl = &mut self.flows[f];
                let moved = (fl.rate * dt).min(fl.remaining);
                fl.remaining -= moved;
                for (l, w) in fl.weighted_links() {
                    self.link_bytes[l] += moved * w;
                }
            }
        }
        self.last_update[c] = self.now;
    }

    fn comp_of(&self, dev: u32) -> u32 {
        match &self.topo {
            Some(t) => t.comp[dev as usize],
            None => 0,
        }
    }

    /// Max-min fair rates (progressive filling) with per-flow caps, then schedule the next finish.
    fn reallocate(&mut self, c: usize) {
        // Scratch buffers kept between calls: no allocation here once they have grown. Work is
        // over the component's flows and the links they use, not over every link.
        if self.active[c].len() == 1 {
            // One flow: its cap or its tightest link, as the filling below gives it.
            let f = self.active[c][0];
            let fl = &self.flows[f];
            let share = fl.weighted_links().map(|(l, w)| self.capacity[l] / w).fold(f64::INFINITY, f64::min);
            let level = share.min(fl.cap);
            self.flows[f].rate = level;
            let next = if level > 0.0 { self.flows[f].remaining / level } else { f64::INFINITY };
            return self.schedule_check(c, next);
        }
        let mut sc = std::mem::take(&mut self.scratch.rates);
        let n_links = self.capacity.len();
        sc.left.resize(n_links, 0.0);
        sc.n_on.resize(n_links, 0.0);
        sc.saturated.resize(n_links, false);
        sc.unfixed.clear();
        sc.unfixed.extend_from_slice(&self.active[c]);
        sc.used.clear();
        for &f in &sc.unfixed {
            for &l in self.flows[f].links.iter().flatten() {
                if !sc.used.contains(&l) {
                    sc.used.push(l);
                    sc.left[l] = self.capacity[l];
                }
            }
        }
        sc.used.sort_unstable();
        while !sc.unfixed.is_empty() {
            // Flows on each link, in one pass over the flows.
            for &l in &sc.used {
                sc.n_on[l] = 0.0;
            }
            for &f in &sc.unfixed {
                for (l, w) in self.flows[f].weighted_links() {
                    sc.n_on[l] += w;
                }
            }
            // The tightest constraint: a link's equal share, or a flow's own cap.
            let mut share = f64::INFINITY;
            for &l in &sc.used {
                let n = sc.n_on[l];
                if n > 0.0 {
                    share = share.min(sc.left[l] / n);
                }
            }
            let min_cap = sc.unfixed.iter().map(|&f| self.flows[f].cap).fold(f64::INFINITY, f64::min);
            let level = share.min(min_cap);
            // Fix the flows limited at this level: capped ones, or those on a saturated link.
            for &l in &sc.used {
                let n = sc.n_on[l];
                sc.saturated[l] = n > 0.0 && sc.left[l] / n <= level * (1.0 + 1e-12);
            }
            sc.fix.clear();
            sc.keep.clear();
            for &f in &sc.unfixed {
                let fl = &self.flows[f];
                if fl.cap <= level * (1.0 + 1e-12) || fl.links.iter().flatten().any(|l| sc.saturated[*l]) {
                    sc.fix.push(f);
                } else {
                    sc.keep.push(f);
                }
            }
            for &f in &sc.fix {
                self.flows[f].rate = level;
                for (l, w) in self.flows[f].weighted_links() {
                    sc.left[l] = (sc.left[l] - level * w).max(0.0);
                }
            }
            if sc.fix.is_empty() {
                break;
            }
            std::mem::swap(&mut sc.unfixed, &mut sc.keep);
        }
        self.scratch.rates = sc;
        let next = self.active[c]
            .iter()
            .map(|&f| {
                let fl = &self.flows[f];
                if fl.rate > 0.0 {
                    fl.remaining / fl.rate
                } else {
                    f64::INFINITY
                }
            })
            .fold(f64::INFINITY, f64::min);
        self.schedule_check(c, next);
    }

    /// Schedule component `c`'s next completion check `next` seconds from now (none if infinite).
    fn schedule_check(&mut self, c: usize, next: f64) {
        let at = if next.is_finite() { Some(SimTime(self.now.0 + (next * 1e12).ceil() as u64)) } else { None };
        // The per-rank engine keeps a pending check that is still due at the same time instead of
        // queueing another (fewer stale checks in the queue); the representative engine queues one
        // per reallocation, as it always has (its event counts are part of its output).
        if self.topo.is_some() {
            if at != self.check_at[c] {
                match at {
                    Some(at) => {
                        let seq = self.queue.next_seq();
                        self.checks.set(c as u32, at, seq);
                    }
                    None => self.checks.cancel(c as u32),
                }
                self.check_at[c] = at;
            }
            return;
        }
        self.flow_gen[c] += 1;
        if let Some(at) = at {
            let g = self.flow_gen[c];
            self.push(at, Event::FlowCheck(c as u32, g));
        }
    }

    fn finish_flows(&mut self, c: usize) {
        // A check lands on the picosecond after the finish: allow what two picoseconds move.
        let mut done = std::mem::take(&mut self.scratch.done);
        done.clear();
        done.extend(self.active[c].iter().copied().filter(|&f| self.flows[f].finished()));
        let flows = &self.flows;
        self.active[c].retain(|&f| !flows[f].finished());
        self.reallocate(c);
        for &f in &done {
            let fl = &mut self.flows[f];
            if fl.steps_left > 0 {
                // The next step of the algorithm.
                fl.steps_left -= 1;
                fl.remaining = fl.step_bytes;
                let at = SimTime(self.now.0 + fl.step_latency.0);
                self.push(at, Event::FlowStart(f));
                continue;
            }
            if let Some((dev, track, name, start)) = self.flows[f].span {
                self.span(dev, track, name, start, self.now);
            }
            let coll = self.flows[f].coll;
            let waiter = self.flows[f].waiter;
            self.free_flows.push(f);
            if coll != NO_COLL {
                // One participant done; the collective ends with its last.
                let now = self.now;
                let topo = self.topo.as_mut().expect("per-rank engine");
                let c = &mut topo.colls[coll as usize];
                c.0 -= 1;
                c.2 = c.2.min(now);
                if c.0 > 0 {
                    continue;
                }
                // Blame: the participant whose flow ended last (held on a shared, degraded
                // uplink) kept the others since the first ended. Under the common cap alone they
                // end together and this adds nothing.
                if let Some((dev, ..)) = self.flows[f].span {
                    topo.blame_link[dev as usize] += SimTime(now.0 - c.2 .0).seconds().value();
                }
                // Waking cannot end another collective (flows end only on events): one buffer.
                let mut waiters = std::mem::take(&mut self.scratch.waiters);
                waiters.clear();
                waiters.extend_from_slice(&c.1);
                topo.free_colls.push(coll);
                for &w in &waiters {
                    self.wake(w);
                }
                self.scratch.waiters = waiters;
                continue;
            }
            self.wake(waiter);
        }
        self.scratch.done = done;
    }

    fn wake(&mut self, w: Waiter) {
        match w {
            Waiter::Device(d) => self.step_done(d),
            Waiter::P2p { src, dst, key, blocking } => {
                self.devices[dst as usize].arrived.push(key);
                let now = self.now;
                self.push(now, Event::TryStart(dst));
                if blocking {
                    self.devices[src as usize].sends_in_flight -= 1;
                    self.push(now, Event::TryStart(src));
                }
            }
            Waiter::DpStream(d) => {
                let now = self.now;
                let dev = &mut self.devices[d as usize];
                dev.background -= 1;
                dev.dp_busy = false;
                dev.dp_completed += 1;
                let ungate = std::mem::take(&mut dev.param_gate);
                let resume = if dev.dp_completed >= dev.param_total { dev.param_end_wait.take() } else { None };
                if ungate {
                    self.push(now, Event::TryStart(d));
                }
                if let Some(key) = resume {
                    self.end_task(d, key);
                }
                self.run_dp(d);
            }
            Waiter::Gather(d, seq) => {
                let dev = &mut self.devices[d as usize];
                dev.background -= 1;
                dev.gathers_done = dev.gathers_done.max(seq + 1);
                if dev.waiting_gather.is_some_and(|w| w < dev.gathers_done) {
                    dev.waiting_gather = None;
                    self.step_done(d);
                }
            }
        }
    }

    /// Start the next DP bucket on the device's DP stream if it is idle.
    fn run_dp(&mut self, d: u32) {
        let dev = &mut self.devices[d as usize];
        if dev.dp_busy {
            return;
        }
        if let Some(c) = dev.dp_queue.pop_front() {
            dev.dp_busy = true;
            self.collective(d, &c, 1.0, true, Waiter::DpStream(d), "dp comm", "dp bucket");
        } else if dev.finished_tasks && dev.done_at.is_none() {
            self.finish_device(d);
        }
    }

    fn finish_device(&mut self, d: u32) {
        let now = self.now;
        let dev = &mut self.devices[d as usize];
        dev.dp_drain = SimTime(now.0 - dev.last_task_end.0);
        // FSDP under PyTorch's pipelining copies each layer's gradients in before its reduce,
        // after the last backward: counted with the step's tail (as is its gradient
        // accumulation, `DpPlan::accumulate`, inside `optimizer`).
        let copies = if dev.plan.per_step { dev.plan.reduce_copy * dev.gathers_total as f64 } else { Seconds::ZERO };
        let opt = SimTime::from_seconds(dev.plan.optimizer + copies);
        dev.optimizer_time = opt;
        // The training loop's host time after the backward (the HF Trainer's): the GPU waits.
        let host = SimTime::from_seconds(dev.plan.loop_host);
        dev.wait_cpu = SimTime(dev.wait_cpu.0 + host.0);
        let end = SimTime(now.0 + opt.0 + host.0);
        dev.done_at = Some(end);
        self.span(d, "compute", "optimizer", now, SimTime(now.0 + opt.0));
    }

    /// The current step finished one of the things it waited for.
    fn step_done(&mut self, d: u32) {
        let dev = &mut self.devices[d as usize];
        dev.join = dev.join.saturating_sub(1);
        if dev.join == 0 {
            self.advance(d);
        }
    }

    /// Run steps of the current task until one has to wait.
    fn advance(&mut self, d: u32) {
        loop {
            let now = self.now;
            let Some((key, idx)) = self.devices[d as usize].running.take() else { return };
            let (fwd, bwd) = &self.lists[self.list_of[d as usize]][(key.vstage / self.pp) as usize];
            let steps = if key.pass == Pass::Fwd { fwd } else { bwd };
            if idx >= steps.len() {
                let dev = &mut self.devices[d as usize];
                if key.pass == Pass::Fwd && key.micro == 0 && dev.dp_completed < dev.param_total {
                    dev.param_end_wait = Some(key);
                    return;
                }
                self.end_task(d, key);
                return;
            }
            let step = steps[idx].clone();
            self.devices[d as usize].running = Some((key, idx + 1));
            // Gradients are complete only in the last micro-batch's backward.
            if matches!(step, SimStep::GradsReady) && key.pass == Pass::Bwd && key.micro + 1 != self.m {
                continue;
            }
            // FSDP under PyTorch's pipelining (`DpPlan::per_step`): each layer is gathered (and
            // copied out) in the first micro-batch's forward only.
            let gathered_once = matches!(step, SimStep::FsdpGather | SimStep::Kernel { name: "fsdp_copy_out", .. });
            if gathered_once && key.pass == Pass::Fwd && key.micro > 0 && self.devices[d as usize].plan.per_step {
                continue;
            }
            match step {
                SimStep::Kernel { name, time, bound, cpu, launches, host_sync } => {
                    // The CPU launches in program order, running ahead of the GPU; the GPU starts
                    // once the first launch is issued and ends no earlier than the last one.
                    let dev = &mut self.devices[d as usize];
                    if host_sync.0 > 0 {
                        // Host work that cannot run ahead: it starts when the GPU gets here.
                        dev.cpu = SimTime(dev.cpu.0.max(now.0) + host_sync.0);
                    }
                    let per_launch = if launches > 0.0 { cpu.0 as f64 / launches } else { 0.0 };
                    let first_launch = dev.cpu.0 + (per_launch * launches.min(1.0)) as u64;
                    dev.cpu = SimTime(dev.cpu.0 + cpu.0);
                    let start = now.0.max(first_launch);
                    // Data-parallel collectives running beside it slow it (`analytic::OVERLAP_COST`,
                    // the whole kernel when one runs at its start): the stretch counts as
                    // communication, not as the kernel's own time.
                    dev.busy[usize::from(bound != Bound::Compute)].0 += time.0;
                    let time = if dev.background > 0 { SimTime((time.0 as f64 * (1.0 + self.overlap_cost)) as u64) } else { time };
                    let end = SimTime((start + time.0).max(dev.cpu.0));
                    dev.wait_cpu.0 += end.0 - now.0 - time.0;
                    dev.join += 1;
                    let start = SimTime(end.0 - time.0);
                    self.span(d, "compute", name, start, end);
                    if let Some(rest) = self.devices[d as usize].pending_overlap.take() {
                        if let Overlap::WithNextKernel { blocking } = rest.overlap {
                            self.devices[d as usize].join += 1;
                            self.collective(d, &rest, 1.0 - blocking, false, Waiter::Device(d), comm_track(rest.group), "overlapped");
                        }
                    }
                    self.push(end, Event::KernelDone(d));
                    return;
                }
                SimStep::Comm { name, comm } => {
                    if comm.wire_bytes <= 0.0 && comm.latency.value() <= 0.0 {
                        continue;
                    }
                    self.devices[d as usize].join += 1;
                    let fraction = match comm.overlap {
                        Overlap::Blocking => 1.0,
                        Overlap::WithNextKernel { blocking } => {
                            self.devices[d as usize].pending_overlap = Some(comm.clone());
                            blocking
                        }
                    };
                    self.collective(d, &comm, fraction, true, Waiter::Device(d), comm_track(comm.group), name);
                    return;
                }
                SimStep::GradsReady => {
                    // This layer's gradients are final: hand whole buckets to the DP stream.
                    let dev = &mut self.devices[d as usize];
                    dev.grad_owed += dev.grad_per_layer;
                    while dev.grad_owed >= 1.0 - 1e-9 && !dev.grad_buckets.is_empty() {
                        dev.grad_owed -= 1.0;
                        let Some(b) = dev.grad_buckets.pop_front() else { break };
                        dev.dp_queue.push_back(b);
                    }
                    self.run_dp(d);
                }
                SimStep::FsdpGather => {
                    // This layer needs its gathered parameters; the next layer's are prefetched.
                    let Some(g) = self.devices[d as usize].plan.layer_gather.clone() else { continue };
                    let need = self.devices[d as usize].gathers_needed;
                    self.devices[d as usize].gathers_needed += 1;
                    loop {
                        let dev = &mut self.devices[d as usize];
                        let seq = dev.gathers_issued;
                        if seq > need + 1 || seq >= dev.gathers_total {
                            break;
                        }
                        dev.gathers_issued += 1;
                        self.collective(d, &g, 1.0, true, Waiter::Gather(d, seq), "dp comm", "fsdp all-gather");
                    }
                    let dev = &mut self.devices[d as usize];
                    if dev.gathers_done <= need {
                        dev.waiting_gather = Some(need);
                        dev.join += 1;
                        return;
                    }
                }
                SimStep::FsdpReduce => {
                    let dev = &mut self.devices[d as usize];
                    if let Some(r) = dev.plan.layer_reduce.clone() {
                        dev.dp_queue.push_back(r);
                        self.run_dp(d);
                    }
                }
            }
        }
    }

    fn end_task(&mut self, d: u32, key: TaskKey) {
        let now = self.now;
        let last_v = self.pp * self.vp - 1;
        // Send activations (forward) or gradients (backward) to the neighbouring virtual stage.
        let next = match key.pass {
            Pass::Fwd if key.vstage < last_v => Some(key.vstage + 1),
            Pass::Bwd if key.vstage > 0 => Some(key.vstage - 1),
            _ => None,
        };
        if let Some(v) = next {
            let dst_stage = v % self.pp;
            let dst = match &self.topo {
                Some(t) => t.pp_line[d as usize * self.pp as usize + dst_stage as usize],
                None => dst_stage,
            };
            let dkey = TaskKey { pass: key.pass, micro: key.micro, vstage: v };
            let blocking = self.vp == 1 && dst != d && self.p2p.is_some();
            if blocking {
                self.devices[d as usize].sends_in_flight += 1;
            }
            let waiter = Waiter::P2p { src: d, dst, key: dkey, blocking };
            match self.p2p.clone() {
                // The per-rank engine caps a send at the slower of the two ends' links.
                Some(c) if dst != d && self.topo.is_some() => {
                    let cap = self.link_rate(d, &c).min(self.link_rate(dst, &c));
                    self.start_flow_capped(d, &c, 1.0, true, waiter, "p2p", "send", cap, NO_COLL)
                }
                Some(c) if dst != d => self.start_flow(d, &c, 1.0, true, waiter, "p2p", "send"),
                _ => {
                    self.devices[dst as usize].arrived.push(dkey);
                    self.push(now, Event::TryStart(dst));
                }
            }
        }
        let start = self.devices[d as usize].task_start;
        self.span(d, "task", if key.pass == Pass::Fwd { "forward" } else { "backward" }, start, now);
        let dev = &mut self.devices[d as usize];
        dev.last_task_end = now;
        dev.idle_since = Some((now, true));
        self.push(now, Event::TryStart(d));
    }

    /// Start the device's next task if the device is free and the task's input has arrived.
    fn try_start(&mut self, d: u32) {
        let now = self.now;
        let last_v = self.pp * self.vp - 1;
        let dev = &mut self.devices[d as usize];
        if dev.running.is_some() || dev.finished_tasks {
            return;
        }
        let Some(&key) = dev.tasks.get(dev.next) else {
            dev.finished_tasks = true;
            if dev.last_task_end == SimTime(0) {
                dev.last_task_end = now;
            }
            // Whatever gradients are left go out now.
            let rest: Vec<CommStep> = dev.grad_buckets.drain(..).collect();
            dev.dp_queue.extend(rest);
            // FSDP under PyTorch's pipelining: every layer's gradients are reduce-scattered now.
            if let (true, Some(r)) = (dev.plan.per_step, dev.plan.layer_reduce.clone()) {
                dev.dp_queue.extend(std::iter::repeat_n(r, dev.gathers_total as usize));
            }
            self.run_dp(d);
            return;
        };
        if dev.param_gate || dev.sends_in_flight > 0 {
            return;
        }
        let needs_input = match key.pass {
            Pass::Fwd => key.vstage > 0,
            Pass::Bwd => key.vstage < last_v,
        };
        if needs_input {
            let Some(pos) = dev.arrived.iter().position(|k| *k == key) else { return };
            dev.arrived.swap_remove(pos);
        }
        if let Some((since, _)) = dev.idle_since.take() {
            dev.wait_dep.0 += now.0 - since.0;
        }
        dev.next += 1;
        // The CPU waited for this task's input before it could launch its kernels.
        dev.cpu = SimTime(dev.cpu.0.max(now.0));
        dev.running = Some((key, 0));
        dev.task_start = now;
        self.advance(d);
    }

    fn run(&mut self, progress: &mut dyn FnMut(u64)) {
        for d in 0..self.devices.len() as u32 {
            self.run_dp(d);
            self.push(SimTime(0), Event::TryStart(d));
        }
        loop {
            // The per-rank engine's component checks, merged with the queue.
            let check_first = match (self.checks.peek(), self.queue.peek_key()) {
                (Some((t, seq, _)), Some(next)) => (t, seq) < next,
                (Some(_), None) => true,
                _ => false,
            };
            let (t, e) = if check_first {
                let (t, _, c) = self.checks.pop().expect("peeked");
                (t, Event::FlowCheck(c, self.flow_gen[c as usize]))
            } else {
                match self.queue.pop() {
                    Some(next) => next,
                    None => break,
                }
            };
            debug_assert!(t >= self.now, "time runs forward");
            self.now = t;
            self.events += 1;
            if self.events.is_multiple_of(PROGRESS_STEP) {
                progress(PROGRESS_STEP);
            }
            match e {
                Event::KernelDone(d) => self.step_done(d),
                Event::TryStart(d) => self.try_start(d),
                Event::FlowStart(f) => {
                    let c = self.flows[f].comp as usize;
                    self.progress(c);
                    self.active[c].push(f);
                    if self.flows[f].remaining <= 0.0 {
                        self.finish_flows(c);
                    } else {
                        self.reallocate(c);
                    }
                }
                Event::FlowCheck(c, g) => {
                    let c = c as usize;
                    if g == self.flow_gen[c] {
                        if let Some(at) = self.check_at.get_mut(c) {
                            *at = None;
                        }
                        self.progress(c);
                        self.finish_flows(c);
                    }
                }
            }
        }
    }
}

fn comm_track(g: Group) -> &'static str {
    match g {
        Group::Tp => "tp comm",
        Group::Cp => "cp comm",
        Group::Ep => "ep comm",
        Group::Dp | Group::ExpertDp => "dp comm",
        Group::Pp => "p2p",
    }
}

/// Task order of each device for the schedule (Megatron-Core's orders).
fn schedule(kind: Schedule, pp: u32, vp: u32, m: u32, d: u32) -> Vec<TaskKey> {
    let f = |micro, vstage| TaskKey { pass: Pass::Fwd, micro, vstage };
    let b = |micro, vstage| TaskKey { pass: Pass::Bwd, micro, vstage };
    if vp <= 1 {
        let v = d;
        return match kind {
            Schedule::Gpipe => (0..m).map(|i| f(i, v)).chain((0..m).map(|i| b(i, v))).collect(),
            _ => {
                let warm = (pp - d - 1).min(m);
                let mut out: Vec<TaskKey> = (0..warm).map(|i| f(i, v)).collect();
                for i in 0..(m - warm) {
                    out.push(f(warm + i, v));
                    out.push(b(i, v));
                }
                out.extend((m - warm..m).map(|i| b(i, v)));
                out
            }
        };
    }
    // Interleaved: forward k of this device runs chunk (k / pp) % vp of micro-batch
    // (k / (pp*vp)) * pp + k % pp; backwards walk the chunks in reverse.
    let total = m * vp;
    let fwd_key = |k: u32| {
        let chunk = (k / pp) % vp;
        let micro = (k / (pp * vp)) * pp + k % pp;
        f(micro, chunk * pp + d)
    };
    let bwd_key = |k: u32| {
        let chunk = vp - 1 - (k / pp) % vp;
        let micro = (k / (pp * vp)) * pp + k % pp;
        b(micro, chunk * pp + d)
    };
    let warm = ((pp - d - 1) * 2 + (vp - 1) * pp).min(total);
    let mut out: Vec<TaskKey> = (0..warm).map(fwd_key).collect();
    for i in 0..(total - warm) {
        out.push(fwd_key(warm + i));
        out.push(bwd_key(i));
    }
    out.extend((total - warm..total).map(bwd_key));
    out
}

/// The FSDP layer gathers a device runs per step: two per layer and micro-batch (forward and
/// backward), or one per layer under `DpPlan::per_step` (in the first forward).
fn fsdp_gathers(fsdp: bool, plan: &DpPlan, m: u32, layers: u64) -> u64 {
    match (fsdp, plan.per_step) {
        (false, _) => 0,
        (true, false) => 2 * m as u64 * layers,
        (true, true) => layers,
    }
}

/// Build a virtual stage's forward and backward step lists.
fn chunk_lists(s: &Scenario, pr: &Priced, plan: &DpPlan, v: u32, n_v: u32, slow: f64, fsdp: bool, train: bool) -> (Vec<SimStep>, Vec<SimStep>) {
    let copy = |name, t: Seconds| SimStep::Kernel {
        name,
        time: SimTime::from_seconds(t / slow),
        bound: Bound::Memory,
        cpu: SimTime(0),
        launches: 0.0,
        host_sync: SimTime(0),
    };
    let counts = virtual_stage_layer_counts(s.model.n_layers, &s.parallel);
    debug_assert_eq!(counts.len(), n_v as usize);
    let first: u64 = counts[..v as usize].iter().sum();
    let here = counts[v as usize];
    let lower = |ops: &[Op]| to_sim(pr.cost.lower(&s.model, &s.parallel, &s.options, &s.workload, ops, pr.power.speedup), slow);
    let back_ops = |ops: &[Op]| {
        let mut b = recompute_of(ops, &s.workload);
        b.extend(backward_of(ops));
        b
    };
    let (mut fwd, mut bwd_layers) = (Vec::new(), Vec::new());
    if v == 0 {
        fwd.extend(lower(&pr.ops.embedding));
    }
    let kinds = s.model.layer_kinds();
    // The rank's layers before this chunk (its earlier virtual stages), for layer checkpointing's
    // rank-local count (`Recompute::checkpoints`).
    let pp = s.parallel.pp.max(1) as usize;
    let before_on_rank: u64 = counts[..v as usize].iter().enumerate().filter(|(u, _)| u % pp == v as usize % pp).map(|(_, n)| n).sum();
    let layer_ckpt = matches!(s.workload.recompute, crate::workload::Recompute::Layers(_));
    for layer in first..first + here {
        let ops = pr.ops.layer(kinds[layer as usize]);
        let rerun = layer_ckpt && s.workload.recompute.checkpoints(before_on_rank + layer - first);
        if fsdp {
            fwd.push(SimStep::FsdpGather);
            fwd.push(copy("fsdp_copy_out", plan.gather_copy));
        }
        fwd.extend(lower(ops));
        if train {
            let mut b = Vec::new();
            // Under `DpPlan::per_step` the layer stays gathered and its gradients are reduced once
            // the device's last task ends.
            if fsdp && !plan.per_step {
                b.push(SimStep::FsdpGather);
                b.push(copy("fsdp_copy_out", plan.gather_copy));
            }
            if rerun {
                b.extend(lower(&crate::workload::rerun_of(ops)));
            }
            b.extend(lower(&back_ops(ops)));
            if fsdp && !plan.per_step {
                b.push(copy("fsdp_copy_in", plan.reduce_copy));
                b.push(SimStep::FsdpReduce);
            } else if !fsdp {
                b.push(SimStep::GradsReady);
            }
            bwd_layers.push(b);
        }
    }
    let mut bwd = Vec::new();
    if v == n_v - 1 {
        fwd.extend(lower(&pr.ops.head));
        if train {
            bwd.extend(lower(&back_ops(&pr.ops.head)));
        }
    }
    for b in bwd_layers.into_iter().rev() {
        bwd.extend(b);
    }
    if v == 0 && train {
        bwd.extend(lower(&back_ops(&pr.ops.embedding)));
    }
    (fwd, bwd)
}

/// Events between two calls of a progress callback.
pub const PROGRESS_STEP: u64 = 1 << 20;

/// Whether a training step gathers and reduce-scatters its layers under FSDP (zero 3 over more than
/// one shard, `memory::fsdp_shards`).
fn fsdp_on(s: &Scenario, train: bool) -> bool {
    train && s.parallel.zero == 3 && crate::memory::fsdp_shards(&s.parallel, &s.workload) > 1
}

/// The events one step of `s` is estimated to take in the engine, as `estimate_events` counts
/// them (for a progress bar's length, or to refuse a step over the limits beforehand).
pub fn estimated_events(s: &Scenario) -> Result<f64, PredictError> {
    let (pr, pp, vp, train) = shape(s)?;
    check_scenario_size(s, pr.n_micro, train)?;
    Ok(estimate_events(s, &pr, pp, vp, train, fsdp_on(s, train)))
}

fn shape(s: &Scenario) -> Result<(Priced<'_>, u32, u32, bool), PredictError> {
    let pr = analytic::price(s)?;
    let pc = &s.parallel;
    let (pp, vp) = (pc.pp, if pc.schedule == Schedule::Interleaved || pc.vp > 1 { pc.vp.max(1) } else { 1 });
    Ok((pr, pp, vp, s.workload.mode == Mode::Train))
}

/// Micro-batches within what the engine's counters hold (`u32`), checked before the step lists
/// are built.
fn check_scenario_size(s: &Scenario, n_micro: u64, train: bool) -> Result<(), PredictError> {
    if train && n_micro > crate::limits::sim::MAX_MICRO_BATCHES {
        return Err(PredictError::Unsupported(format!(
            "`global_batch` = {} is {n_micro} micro-batches of `micro_batch` = {} x dp = {}, more than the discrete-event engine's limit of {} per step\nhint: lower `--global-batch` (or raise `--micro-batch`), or predict it in closed form with `gpuplan predict`",
            s.workload.global_batch,
            s.workload.micro_batch,
            s.parallel.dp,
            crate::limits::sim::MAX_MICRO_BATCHES
        )));
    }
    Ok(())
}

/// Events of the step: each step of each virtual stage's forward and backward lists, once per
/// micro-batch, is about two events (its start and its end).
fn estimate_events(s: &Scenario, pr: &Priced, pp: u32, vp: u32, train: bool, fsdp: bool) -> f64 {
    let n_v = pp * vp;
    let mut steps = 0usize;
    for d in 0..pp {
        let plan = if train { step::dp_plan(&pr.cost, s, d) } else { DpPlan::default() };
        for c in 0..vp {
            let (f, b) = chunk_lists(s, pr, &plan, c * pp + d, n_v, 1.0, fsdp, train);
            steps += f.len() + b.len();
        }
    }
    crate::limits::sim::EVENTS_PER_STEP * steps as f64 * pr.n_micro as f64
}

/// The largest bus bandwidth any collective of a stage may use on its NVLink and on its NIC:
/// the capacity of the stage's representative links before faults.
fn stage_caps(lists: &[(Vec<SimStep>, Vec<SimStep>)], dp: &DpPlan, p2p: Option<&CommStep>) -> [f64; 2] {
    let mut caps = [0.0f64; 2];
    let steps = lists.iter().flat_map(|(f, b)| f.iter().chain(b.iter())).filter_map(|st| if let SimStep::Comm { comm, .. } = st { Some(comm) } else { None });
    let extra = dp.grad.iter().chain(dp.param.iter()).map(|b| &b.step).chain(dp.layer_gather.iter()).chain(dp.layer_reduce.iter());
    for c in steps.chain(extra).chain(p2p) {
        caps[NVLINK] = caps[NVLINK].max(c.busbw.value());
        if c.crosses_network {
            caps[NIC] = caps[NIC].max(c.busbw.value());
        }
    }
    caps
}

/// Simulate one step of the scenario.
pub fn simulate(s: &Scenario, opts: &SimOptions) -> Result<SimResult, PredictError> {
    simulate_with_progress(s, opts, &mut |_| {})
}

/// [`simulate`], calling `progress(n)` each time another `n` events have run (every
/// [`PROGRESS_STEP`]; a progress bar's ticks, out of [`estimated_events`]). A step estimated
/// above `limits::sim::MAX_EVENTS` events (`MAX_TRACED_EVENTS` with a trace) is refused.
pub fn simulate_with_progress(s: &Scenario, opts: &SimOptions, progress: &mut dyn FnMut(u64)) -> Result<SimResult, PredictError> {
    let (pr, pp, vp, train) = shape(s)?;
    let pc = &s.parallel;
    check_scenario_size(s, pr.n_micro, train)?;
    let m = pr.n_micro as u32;
    let n_v = pp * vp;
    let fsdp = fsdp_on(s, train);
    let factor = |list: &[(u32, f64)], d: u32| list.iter().filter(|(st, _)| *st == d).map(|(_, f)| *f).product::<f64>();

    let mut lists = Vec::new();
    let mut devices = Vec::new();
    for d in 0..pp {
        let slow = factor(&opts.faults.slow_gpu, d);
        let plan = if train { step::dp_plan(&pr.cost, s, d) } else { DpPlan::default() };
        lists.push((0..vp).map(|c| chunk_lists(s, &pr, &plan, c * pp + d, n_v, slow, fsdp, train)).collect::<Vec<_>>());
        let layers = stage_layer_counts(s.model.n_layers, pc)[d as usize].max(1);
        // Every virtual stage on this device adds its layers' gradients.
        let gathers_total = fsdp_gathers(fsdp, &plan, m, layers);
        let tasks =
            if train { schedule(pc.schedule, pp, vp, m, d) } else { (0..vp).map(|c| TaskKey { pass: Pass::Fwd, micro: 0, vstage: c * pp + d }).collect() };
        devices.push(Device::new(tasks, plan, layers, gathers_total));
    }

    let steps: usize = lists.iter().flatten().map(|(f, b): &(Vec<SimStep>, Vec<SimStep>)| f.len() + b.len()).sum();
    let events = crate::limits::sim::EVENTS_PER_STEP * steps as f64 * pr.n_micro as f64;
    let (limit, why) = if opts.trace { (crate::limits::sim::MAX_TRACED_EVENTS, " with a trace") } else { (crate::limits::sim::MAX_EVENTS, "") };
    if events > limit {
        return Err(PredictError::Unsupported(format!(
            "`global_batch` = {} is {} micro-batches of `micro_batch` = {} x dp = {}, about {events:.2e} events over {pp} pipeline stage(s) x {vp} virtual: more than the discrete-event engine's limit of {limit:.0e}{why}\nhint: lower `--global-batch` (or raise `--micro-batch`){}, or predict it in closed form with `gpuplan predict`",
            s.workload.global_batch,
            pr.n_micro,
            s.workload.micro_batch,
            pc.dp,
            if opts.trace { ", drop `--trace` / `--timeline`" } else { "" }
        )));
    }

    // Link capacities of each representative rank: the largest bus bandwidth any of its
    // collectives may use, times the fault factors.
    let p2p = step::p2p_step(&pr.cost, s);
    let mut capacity = vec![0.0; pp as usize * 2];
    for d in 0..pp {
        let caps = stage_caps(&lists[d as usize], &devices[d as usize].plan, p2p.as_ref());
        capacity[d as usize * 2 + NVLINK] = caps[NVLINK].max(1.0) * factor(&opts.faults.nvlink, d);
        capacity[d as usize * 2 + NIC] = caps[NIC].max(1.0) * factor(&opts.faults.nic, d) * opts.faults.spine.unwrap_or(1.0);
    }

    let mut sim = Sim::new(devices, lists, capacity, p2p, m, pp, vp, opts.trace);
    sim.overlap_cost = step::overlap_cost(s.workload.stack);
    sim.run(progress);

    let total = sim.end_time().seconds();
    let crit = sim.devices.iter().enumerate().max_by_key(|(_, d)| (d.done_at.unwrap_or(d.last_task_end), Reverse(d.busy[0]))).map(|(i, _)| i).unwrap_or(0);
    let dv = &sim.devices[crit];
    let compute = dv.busy[0].seconds();
    let memory = dv.busy[1].seconds();
    let cpu_launch = dv.wait_cpu.seconds();
    let dp_comm = if train { dv.dp_drain.seconds() } else { Seconds::ZERO };
    let optimizer = dv.optimizer_time.seconds();
    let bubble = dv.wait_dep.seconds();
    // What is left of the critical rank's time is waiting on TP/CP/EP collectives and sends.
    let comm = (total - compute - memory - cpu_launch - dp_comm - optimizer - bubble).max(Seconds::ZERO);
    let bd =
        Breakdown { compute, memory, tp_comm: comm, pp_bubble: bubble, dp_comm, optimizer, cpu_launch, loop_host: dv.plan.loop_host, ..Breakdown::default() };
    let utilization = sim
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| Utilization {
            stage: i as u32,
            compute: SimTime(d.busy[0].0 + d.busy[1].0).seconds() / total,
            bubble: d.wait_dep.seconds() / total,
            nvlink: sim.link_bytes[i * 2 + NVLINK] / (sim.capacity[i * 2 + NVLINK] * total.value()),
            nic: if sim.link_bytes[i * 2 + NIC] > 0.0 { sim.link_bytes[i * 2 + NIC] / (sim.capacity[i * 2 + NIC] * total.value()) } else { 0.0 },
        })
        .collect();
    let bubble_fraction = bubble / total;
    let prediction = step::finish(s, &pr.cost, &pr.ops, pr.n_micro, bd, pr.power);
    Ok(SimResult { prediction, utilization, bubble_fraction, events: sim.events, wire_bytes: sim.wire_bytes, spans: sim.spans })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hardware::profile::CollectiveOp;
    use crate::units::BytesPerSec;

    fn kernel(ms: f64) -> SimStep {
        SimStep::Kernel {
            name: "k",
            time: SimTime::from_seconds(Seconds::ms(ms)),
            bound: Bound::Compute,
            cpu: SimTime(0),
            launches: 0.0,
            host_sync: SimTime(0),
        }
    }

    fn comm(bytes: f64, gbps: f64, latency_us: f64) -> CommStep {
        CommStep {
            group: Group::Tp,
            op: CollectiveOp::AllReduce,
            algo: crate::cost::nccl::Algo::Ring,
            proto: crate::cost::nccl::Proto::Simple,
            latency: Seconds::us(latency_us),
            steps: 6,
            step_latency: Seconds::us(1.0),
            wire_bytes: bytes,
            busbw: BytesPerSec::gb_per_s(gbps),
            crosses_network: false,
            overlap: Overlap::Blocking,
        }
    }

    /// A pipeline of `pp` uniform stages (forward `tf` ms, backward `tb` ms), no communication.
    fn uniform(pp: u32, m: u32, kind: Schedule, tf: f64, tb: f64) -> Sim {
        let devices = (0..pp).map(|d| Device::new(schedule(kind, pp, 1, m, d), DpPlan::default(), 1, 0)).collect();
        let lists = (0..pp).map(|_| vec![(vec![kernel(tf)], vec![kernel(tb)])]).collect();
        Sim::new(devices, lists, vec![1e12; pp as usize * 2], None, m, pp, 1, false)
    }

    #[test]
    fn one_f_one_b_bubble_is_p_minus_1_over_m_plus_p_minus_1() {
        for (pp, m) in [(2, 4), (4, 8), (8, 8), (4, 16), (6, 3)] {
            let mut sim = uniform(pp, m, Schedule::OneFOneB, 1.0, 2.0);
            sim.run(&mut |_| {});
            let total = sim.end_time().seconds().as_ms();
            assert!((total - 3.0 * (m + pp - 1) as f64).abs() < 1e-6, "pp={pp} m={m}: {total}");
            for d in &sim.devices {
                let bubble = 1.0 - SimTime(d.busy[0].0 + d.busy[1].0).seconds().as_ms() / total;
                let expected = (pp - 1) as f64 / (m + pp - 1) as f64;
                assert!((bubble - expected).abs() < 1e-9, "pp={pp} m={m}: {bubble} vs {expected}");
            }
        }
    }

    #[test]
    fn gpipe_and_1f1b_take_the_same_time_on_uniform_stages() {
        let mut a = uniform(4, 8, Schedule::Gpipe, 1.0, 2.0);
        let mut b = uniform(4, 8, Schedule::OneFOneB, 1.0, 2.0);
        a.run(&mut |_| {});
        b.run(&mut |_| {});
        assert_eq!(a.end_time(), b.end_time());
    }

    #[test]
    fn interleaving_shrinks_the_bubble_by_vp() {
        // 4 stages, 2 chunks each, 8 micro-batches: bubble (p-1)/vp chunk-times of (tf+tb)/vp each.
        let (pp, vp, m) = (4u32, 2u32, 8u32);
        let devices = (0..pp).map(|d| Device::new(schedule(Schedule::Interleaved, pp, vp, m, d), DpPlan::default(), 1, 0)).collect();
        let lists = (0..pp).map(|_| (0..vp).map(|_| (vec![kernel(0.5)], vec![kernel(1.0)])).collect()).collect();
        let mut sim = Sim::new(devices, lists, vec![1e12; pp as usize * 2], None, m, pp, vp, false);
        sim.run(&mut |_| {});
        let total = sim.end_time().seconds().as_ms();
        let ideal = m as f64 * 3.0 + (pp - 1) as f64 * 3.0 / vp as f64;
        assert!((total - ideal).abs() / ideal < 1e-9, "{total} vs {ideal}");
    }

    #[test]
    fn a_single_flow_takes_latency_plus_size_over_bandwidth() {
        let c = comm(3.0e9, 346.0, 12.0);
        let expected = c.time().value();
        let steps = vec![SimStep::Comm { name: "ar", comm: c }];
        let devices = vec![Device::new(schedule(Schedule::OneFOneB, 1, 1, 1, 0), DpPlan::default(), 1, 0)];
        let mut sim = Sim::new(devices, vec![vec![(steps, vec![])]], vec![346e9, 1.0], None, 1, 1, 1, false);
        sim.run(&mut |_| {});
        let got = sim.end_time().seconds().value();
        assert!((got - expected).abs() / expected < 1e-9, "{got} vs {expected}");
    }

    #[test]
    fn two_flows_on_one_link_share_it_fairly() {
        // Two stages' worth of traffic on one representative rank: a blocking all-reduce overlapped
        // by a DP bucket on the same NVLink. Each gets half while both run.
        let c = comm(1.0e9, 100.0, 0.0);
        let plan = DpPlan { grad: vec![step::Buckets { step: comm(1.0e9, 100.0, 0.0), count: 1 }], ..DpPlan::default() };
        let steps = vec![SimStep::GradsReady, SimStep::Comm { name: "ar", comm: c }];
        let devices = vec![Device::new(vec![TaskKey { pass: Pass::Bwd, micro: 0, vstage: 0 }], plan, 1, 0)];
        let mut sim = Sim::new(devices, vec![vec![(vec![], steps)]], vec![100e9, 1.0], None, 1, 1, 1, false);
        sim.run(&mut |_| {});
        // Both move 1 GB at 50 GB/s side by side: 20 ms, not 10 (one at full rate), plus the six
        // 1 us step latencies of each (run at the same time).
        let t = sim.devices[0].last_task_end.seconds().as_ms();
        assert!((t - 20.006).abs() < 1e-6, "{t}");
        assert!((sim.wire_bytes - 2.0e9).abs() < 1.0);
    }
}
