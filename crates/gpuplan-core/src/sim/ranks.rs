//! Every rank of the cluster, grouped into equivalence classes for the per-rank engine.
//!
//! Ranks are numbered as Megatron-Core lays them out: TP fastest, then CP, DP, PP (the expert grid
//! ETP, EP, expert-DP over the same tp x cp x dp ranks of a stage). A rank's GPU is `rank /
//! gpus_per_node` on its node, `rank / nvlink_domain_size` in its NVLink domain, and uses NIC
//! `local x nics_per_node / gpus_per_node` of its node, on rail (leaf switch) of that number
//! (`hardware::Fabric::rail_optimized`).
//!
//! Leaf switches: where the system gives `fabric.nodes_per_leaf` (a scalable unit of the DGX
//! SuperPOD reference architecture: 32 DGX H100 nodes, NIC k of each on the SU's leaf k), rank r's
//! leaf is (node / nodes_per_leaf, rail); a failed NIC's GPUs send through the next rail's leaf.
//! A group whose ranks sit on more than one leaf (a DP ring across rails or across SUs, an EP
//! all-to-all across nodes on different rails) sends its scale-out traffic up the leaf's uplinks
//! to the spines; a group on one leaf (rail-aligned within an SU) never leaves it. At 1:1 a leaf's
//! uplinks carry all its ports' line rate, so they bind only where a fault took some away
//! (`su:S:rail:K:uplink=F`: a degraded or failed spine link of that leaf; `spine=F`: every leaf's
//! uplinks). Such a leaf's ranks are refined by the leaf as one more group (the multiset of
//! classes on it), so every rank of a class sees the same load on its uplinks.
//!
//! PXN (NCCL's "PCI x NVLink" path, on by default since NCCL 2.12, off with `NCCL_PXN_DISABLE=1`;
//! NCCL environment-variable documentation, quoted from memory): a GPU that sends to a peer on
//! another rail first moves the data over NVLink to the GPU of its own node that sits on the
//! peer's rail, which sends it out through its NIC, so the message stays on the rail's leaf. With
//! PXN (`Placement::pxn`) a group crosses the spines only where its ranks sit in different
//! scalable units (or a failed NIC took a rank off its rail); cross-rail traffic inside a unit
//! goes over NVLink and the rail-local NIC ([`route_pxn`]: each rank's scale-out traffic of a
//! group is capped by the slowest NIC of its node on the rails the group uses). Without PXN
//! (`--no-pxn`) each GPU sends through its own NIC, and a group on more than one leaf crosses the
//! spines.
//!
//! Faults are per-rank factors, stored as struct-of-arrays over all ranks (`RankFactors`: compute
//! speed, NVLink bandwidth, NIC bandwidth). Two ranks behave the same in a step when they sit at
//! the same stage with the same factors and every group they belong to holds the same mix of such
//! ranks, and so on through the groups of those: [`classes`] finds that partition by colour
//! refinement (the 1-dimensional Weisfeiler-Leman algorithm, Weisfeiler and Leman 1968; the
//! coarsest equitable partition, as in symmetry reduction of model checkers), starting from
//! (stage, factors) and refining by the multiset of colours in each TP, CP, EP, DP and expert-DP
//! group and the ordered colours of the pipeline, until no class splits. With no fault it stops at
//! one class per stage, the representative engine's ranks.

use std::collections::HashMap;

use crate::hardware::System;
use crate::parallelism::{Group, ParallelConfig};

/// The group kinds a rank belongs to, in the order `Classes::set_of` stores them.
pub const KINDS: [Group; 6] = [Group::Tp, Group::Cp, Group::Ep, Group::Dp, Group::ExpertDp, Group::Pp];

pub fn kind_index(g: Group) -> usize {
    match g {
        Group::Tp => 0,
        Group::Cp => 1,
        Group::Ep => 2,
        Group::Dp => 3,
        Group::ExpertDp => 4,
        Group::Pp => 5,
    }
}

/// Sizes and strides of the groups over the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub n_ranks: u64,
    pub pp: u32,
    /// (size, stride) of each kind in [`KINDS`] order.
    pub groups: [(u32, u64); 6],
}

impl Layout {
    pub fn new(pc: &ParallelConfig) -> Layout {
        let (tp, cp, dp) = (pc.tp as u64, pc.cp as u64, pc.dp as u64);
        let groups = [(pc.tp, 1), (pc.cp, tp), (pc.ep, pc.etp as u64), (pc.dp, tp * cp), (pc.expert_dp(), pc.etp as u64 * pc.ep as u64), (pc.pp, tp * cp * dp)];
        Layout { n_ranks: tp * cp * dp * pc.pp as u64, pp: pc.pp, groups }
    }
    pub fn stage(&self, rank: u64) -> u32 {
        (rank / self.groups[5].1) as u32
    }
    /// Which group of `kind` the rank is in (0..n_ranks / size), and its position in it.
    pub fn group_of(&self, kind: usize, rank: u64) -> (u64, u32) {
        let (size, stride) = self.groups[kind];
        let span = stride * size as u64;
        ((rank / span) * stride + rank % stride, ((rank / stride) % size as u64) as u32)
    }
    /// The rank at `pos` of group `g` of `kind`.
    pub fn member(&self, kind: usize, g: u64, pos: u32) -> u64 {
        let (size, stride) = self.groups[kind];
        (g / stride) * stride * size as u64 + g % stride + pos as u64 * stride
    }
}

/// Per-rank fault factors, struct-of-arrays (1.0 = healthy).
#[derive(Debug, Clone, PartialEq)]
pub struct RankFactors {
    /// Compute speed (0.5: kernels take twice as long).
    pub compute: Vec<f64>,
    pub nvlink: Vec<f64>,
    pub nic: Vec<f64>,
    /// The leaf switch each rank sends through (`Placement::home_leaf`, or the next rail's for a
    /// failed NIC's GPUs); empty where the fabric gives no leaf size.
    pub leaf: Vec<u32>,
    /// Per leaf: the share of its uplink bandwidth left (1.0 = healthy).
    pub leaf_uplink: Vec<f64>,
    /// Per rank: the part of the fabric its scale-out traffic reaches without the spines: its
    /// leaf, or with PXN its scalable unit (every rail of it, through the rail-local GPU); a group
    /// whose ranks differ in it crosses the spines. Empty where `leaf` is.
    pub reach: Vec<u32>,
    /// With PXN and a NIC fault (else empty): per rank and group kind ([`KINDS`] order), the
    /// share left of the slowest NIC its scale-out traffic of that group leaves through
    /// ([`route_pxn`]).
    pub nic_pxn: Vec<[f64; 6]>,
}

impl RankFactors {
    pub fn healthy(n: u64) -> RankFactors {
        let n = n as usize;
        RankFactors {
            compute: vec![1.0; n],
            nvlink: vec![1.0; n],
            nic: vec![1.0; n],
            leaf: Vec::new(),
            leaf_uplink: Vec::new(),
            reach: Vec::new(),
            nic_pxn: Vec::new(),
        }
    }
    pub fn is_healthy(&self, rank: u64) -> bool {
        let r = rank as usize;
        self.compute[r] == 1.0 && self.nvlink[r] == 1.0 && self.nic[r] == 1.0 && self.uplink(rank) == 1.0
    }
    /// The uplink factor of the leaf the rank sends through.
    pub fn uplink(&self, rank: u64) -> f64 {
        self.leaf.get(rank as usize).map_or(1.0, |&l| self.leaf_uplink[l as usize])
    }
    /// Some leaf has lost uplink bandwidth: uplinks can bind.
    pub fn uplinks_bind(&self) -> bool {
        self.leaf_uplink.iter().any(|&x| x != 1.0)
    }
}

/// A link (or the switch that joins links) a fault degrades.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LinkTarget {
    /// `rank:R:nvlink`: the GPU's NVLink ports to its NVSwitches.
    RankNvlink(u64),
    /// `rank:R:nic`: the NIC the GPU sends through.
    RankNic(u64),
    /// `node:N:nic:K`: NIC K of node N (every GPU of the node that uses it).
    NodeNic { node: u64, nic: u32 },
    /// `rail:K`: the leaf switch(es) of rail K, i.e. NIC K of every node.
    Rail(u32),
    /// `domain:D:nvswitch`: the NVSwitches of NVLink domain D (every GPU's NVLink in it).
    Nvswitch(u64),
    /// `su:S:rail:K:uplink`: the uplinks of leaf switch K of scalable unit S to the spines (a
    /// degraded or failed spine link: one of U uplinks down leaves (U-1)/U).
    Uplink { su: u64, rail: u32 },
    /// `spine`: the spine layer: every leaf's uplinks (where the system gives a leaf size; without
    /// one every scale-out flow is taken to cross the spine, so every rank's NIC share).
    Spine,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkFault {
    pub target: LinkTarget,
    pub factor: f64,
}

/// What the flags ask for, checked against the cluster by [`RankFaults::factors`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RankFaults {
    /// (rank, factor): the GPU computes at `factor` of its speed.
    pub slow_gpu: Vec<(u64, f64)>,
    pub links: Vec<LinkFault>,
    /// Ranks whose NIC fails: its GPUs' traffic moves to the next NIC of the node, see
    /// [`FAILOVER_SHARE`].
    pub fail_nic: Vec<u64>,
}

/// A failed NIC's GPUs send through the next NIC of their node (K+1 mod n, reached over NVLink,
/// as NCCL's PXN does for other rails), which then carries its own GPUs' traffic and theirs: each
/// of those GPUs gets half of what it had. Not a fitted number: two equal streams on one port.
pub const FAILOVER_SHARE: f64 = 0.5;

/// A fault that does not fit the cluster, with the flag it came from and the value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("`{flag}` = `{value}`: {why}\nhint: {hint}")]
pub struct FaultError {
    pub flag: &'static str,
    pub value: String,
    pub why: String,
    pub hint: String,
}

/// Where the ranks sit on the hardware.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement {
    pub n_ranks: u64,
    pub gpus_per_node: u32,
    pub nics_per_node: u32,
    pub nvlink_domain_size: u32,
    /// Nodes per leaf switch on a rail (`hardware::Fabric::nodes_per_leaf`), if known.
    pub nodes_per_leaf: Option<u32>,
    /// NCCL's PXN routes cross-rail traffic over NVLink to the rail-local GPU (module doc).
    pub pxn: bool,
}

impl Placement {
    pub fn new(n_ranks: u64, system: &System) -> Placement {
        Placement {
            n_ranks,
            gpus_per_node: system.gpus_per_node.max(1),
            nics_per_node: system.nics_per_node,
            nvlink_domain_size: system.nvlink_domain_size.max(1),
            nodes_per_leaf: system.fabric.as_ref().and_then(|f| f.nodes_per_leaf.as_ref()).map(|n| n.value.max(1)),
            pxn: true,
        }
    }
    /// Scalable units (leaf groups of nodes); 0 without a leaf size.
    pub fn units(&self) -> u64 {
        self.nodes_per_leaf.map_or(0, |n| self.nodes().div_ceil(n as u64))
    }
    /// Leaf switches: one per rail of each scalable unit.
    pub fn leaves(&self) -> u64 {
        self.units() * self.nics_per_node as u64
    }
    /// The leaf of NIC `nic` of `node`: scalable unit x rails + rail.
    pub fn leaf_of(&self, node: u64, nic: u32) -> u32 {
        let n = self.nodes_per_leaf.unwrap_or(1) as u64;
        ((node / n) * self.nics_per_node as u64 + nic as u64) as u32
    }
    /// The ranks whose NIC is cabled to `leaf` (its ports' ranks).
    pub fn ranks_on_leaf(&self, leaf: u32) -> impl Iterator<Item = u64> + '_ {
        let nics = self.nics_per_node.max(1) as u64;
        let (unit, rail) = (leaf as u64 / nics, (leaf as u64 % nics) as u32);
        let n = self.nodes_per_leaf.unwrap_or(1) as u64;
        (unit * n..((unit + 1) * n).min(self.nodes())).flat_map(move |node| self.ranks_on_nic(node, rail))
    }
    /// The leaf the rank's NIC is cabled to.
    pub fn home_leaf(&self, rank: u64) -> u32 {
        self.leaf_of(rank / self.gpus_per_node as u64, self.nic_of(rank))
    }
    pub fn nodes(&self) -> u64 {
        self.n_ranks.div_ceil(self.gpus_per_node as u64)
    }
    pub fn domains(&self) -> u64 {
        self.n_ranks.div_ceil(self.nvlink_domain_size as u64)
    }
    /// The NIC of its node the rank sends through.
    pub fn nic_of(&self, rank: u64) -> u32 {
        let local = (rank % self.gpus_per_node as u64) as u32;
        (local as u64 * self.nics_per_node as u64 / self.gpus_per_node as u64) as u32
    }
    /// Ranks that send through NIC `nic` of `node`.
    pub fn ranks_on_nic(&self, node: u64, nic: u32) -> impl Iterator<Item = u64> + '_ {
        let g = self.gpus_per_node as u64;
        (node * g..((node + 1) * g).min(self.n_ranks)).filter(move |&r| self.nic_of(r) == nic)
    }
}

fn check_factor(flag: &'static str, value: String, f: f64) -> Result<(), FaultError> {
    if f.is_finite() && f > 0.0 && f <= 1.0 {
        Ok(())
    } else {
        Err(FaultError {
            flag,
            value,
            why: format!("factor `{f}` must be in (0, 1]"),
            hint: "a factor is the share of speed or bandwidth left, e.g. 0.5 for half".into(),
        })
    }
}

fn check_rank(flag: &'static str, value: String, rank: u64, p: &Placement) -> Result<(), FaultError> {
    if rank < p.n_ranks {
        Ok(())
    } else {
        Err(FaultError {
            flag,
            value,
            why: format!("rank {rank} is beyond the cluster, which has ranks 0..{}", p.n_ranks),
            hint: format!("ranks are 0 to {}", p.n_ranks - 1),
        })
    }
}

impl LinkFault {
    /// The flag's own spelling of this fault.
    pub fn spec(&self) -> String {
        let t = match self.target {
            LinkTarget::RankNvlink(r) => format!("rank:{r}:nvlink"),
            LinkTarget::RankNic(r) => format!("rank:{r}:nic"),
            LinkTarget::NodeNic { node, nic } => format!("node:{node}:nic:{nic}"),
            LinkTarget::Rail(k) => format!("rail:{k}"),
            LinkTarget::Nvswitch(d) => format!("domain:{d}:nvswitch"),
            LinkTarget::Uplink { su, rail } => format!("su:{su}:rail:{rail}:uplink"),
            LinkTarget::Spine => "spine".into(),
        };
        format!("{t}={}", self.factor)
    }
}

impl RankFaults {
    /// Per-rank factors over the whole cluster, or the first fault that does not fit it.
    pub fn factors(&self, p: &Placement) -> Result<RankFactors, FaultError> {
        let mut f = RankFactors::healthy(p.n_ranks);
        if p.nodes_per_leaf.is_some() && p.nics_per_node > 0 {
            f.leaf = (0..p.n_ranks).map(|r| p.home_leaf(r)).collect();
            f.leaf_uplink = vec![1.0; p.leaves() as usize];
        }
        for &(r, x) in &self.slow_gpu {
            let v = format!("{r}={x}");
            check_rank("--slow-gpu", v.clone(), r, p)?;
            check_factor("--slow-gpu", v, x)?;
            f.compute[r as usize] *= x;
        }
        for lf in &self.links {
            let (flag, v) = ("--degrade-link", lf.spec());
            check_factor(flag, v.clone(), lf.factor)?;
            let x = lf.factor;
            match lf.target {
                LinkTarget::RankNvlink(r) => {
                    check_rank(flag, v, r, p)?;
                    f.nvlink[r as usize] *= x;
                }
                LinkTarget::RankNic(r) => {
                    check_rank(flag, v, r, p)?;
                    let node = r / p.gpus_per_node as u64;
                    for q in p.ranks_on_nic(node, p.nic_of(r)) {
                        f.nic[q as usize] *= x;
                    }
                }
                LinkTarget::NodeNic { node, nic } => {
                    if node >= p.nodes() {
                        return Err(FaultError {
                            flag,
                            value: v,
                            why: format!("node {node} is beyond the cluster, which has nodes 0..{}", p.nodes()),
                            hint: format!("nodes are 0 to {}", p.nodes() - 1),
                        });
                    }
                    if nic >= p.nics_per_node {
                        return Err(FaultError {
                            flag,
                            value: v,
                            why: format!("NIC {nic} does not exist: a node has NICs 0..{}", p.nics_per_node),
                            hint: format!("NICs are 0 to {}", p.nics_per_node.saturating_sub(1)),
                        });
                    }
                    for q in p.ranks_on_nic(node, nic) {
                        f.nic[q as usize] *= x;
                    }
                }
                LinkTarget::Rail(k) => {
                    if k >= p.nics_per_node {
                        return Err(FaultError {
                            flag,
                            value: v,
                            why: format!("rail {k} does not exist: a node has NICs (rails) 0..{}", p.nics_per_node),
                            hint: format!("rails are 0 to {}", p.nics_per_node.saturating_sub(1)),
                        });
                    }
                    for q in 0..p.n_ranks {
                        if p.nic_of(q) == k {
                            f.nic[q as usize] *= x;
                        }
                    }
                }
                LinkTarget::Nvswitch(d) => {
                    if d >= p.domains() {
                        return Err(FaultError {
                            flag,
                            value: v,
                            why: format!("NVLink domain {d} is beyond the cluster, which has domains 0..{}", p.domains()),
                            hint: format!("domains are 0 to {}", p.domains() - 1),
                        });
                    }
                    let n = p.nvlink_domain_size as u64;
                    for q in d * n..((d + 1) * n).min(p.n_ranks) {
                        f.nvlink[q as usize] *= x;
                    }
                }
                LinkTarget::Uplink { su, rail } => {
                    if f.leaf_uplink.is_empty() {
                        return Err(FaultError {
                            flag,
                            value: v,
                            why: "the system file gives no leaf size (`fabric.nodes_per_leaf`), so there are no leaf switches to name".into(),
                            hint: "give `--nodes-per-leaf N` (the nodes one leaf joins on a rail), or degrade `spine` or `rail:K`".into(),
                        });
                    }
                    if su >= p.units() || rail >= p.nics_per_node {
                        return Err(FaultError {
                            flag,
                            value: v,
                            why: format!(
                                "leaf (scalable unit {su}, rail {rail}) does not exist: the cluster has scalable units 0..{} of {} nodes and rails 0..{}",
                                p.units(),
                                p.nodes_per_leaf.unwrap_or(1),
                                p.nics_per_node
                            ),
                            hint: format!("scalable units are 0 to {}, rails 0 to {}", p.units() - 1, p.nics_per_node - 1),
                        });
                    }
                    f.leaf_uplink[(su * p.nics_per_node as u64 + rail as u64) as usize] *= x;
                }
                LinkTarget::Spine if !f.leaf_uplink.is_empty() => {
                    for v in f.leaf_uplink.iter_mut() {
                        *v *= x;
                    }
                }
                LinkTarget::Spine => {
                    for v in f.nic.iter_mut() {
                        *v *= x;
                    }
                }
            }
        }
        for &r in &self.fail_nic {
            let v = r.to_string();
            check_rank("--fail-nic", v.clone(), r, p)?;
            if p.nics_per_node < 2 {
                return Err(FaultError {
                    flag: "--fail-nic",
                    value: v,
                    why: format!("a node of this system has {} NIC: no other NIC takes over its traffic, the job stops", p.nics_per_node),
                    hint: "a failure that stops the job is goodput's subject (`--goodput`), not a step-time fault".into(),
                });
            }
            let node = r / p.gpus_per_node as u64;
            let k = p.nic_of(r);
            let buddy = (k + 1) % p.nics_per_node;
            for nic in [k, buddy] {
                for q in p.ranks_on_nic(node, nic) {
                    f.nic[q as usize] *= FAILOVER_SHARE;
                }
            }
            // Its GPUs now reach the fabric through the buddy's leaf.
            if !f.leaf.is_empty() {
                for q in p.ranks_on_nic(node, k) {
                    f.leaf[q as usize] = p.leaf_of(node, buddy);
                }
            }
        }
        if !f.leaf.is_empty() {
            // With PXN a rank on its own rail reaches its whole unit without the spines; one moved
            // off its rail by a failed NIC has no NIC left on that rail, and only its leaf.
            let units = p.units() as u32;
            let nics = p.nics_per_node.max(1);
            f.reach = (0..p.n_ranks)
                .map(|r| {
                    let leaf = f.leaf[r as usize];
                    if p.pxn && leaf == p.home_leaf(r) {
                        leaf / nics
                    } else {
                        units + leaf
                    }
                })
                .collect();
        }
        Ok(f)
    }
}

/// PXN's NIC for each rank's scale-out traffic of each group (module doc): a group whose ranks
/// leave their node and sit on more than one rail sends each rank's traffic to a peer on rail j
/// through NIC j of the rank's own node (over NVLink to the GPU there), so the rank's flows of that
/// group are held to the slowest of its node's NICs on the group's rails. Fills `f.nic_pxn` only
/// with PXN and some NIC below full share (otherwise every rank's own NIC factor says it all).
pub fn route_pxn(f: &mut RankFactors, layout: &Layout, p: &Placement) {
    f.nic_pxn.clear();
    let nics = p.nics_per_node;
    if !p.pxn || !(2..=64).contains(&nics) || f.nic.iter().all(|&x| x == 1.0) {
        return;
    }
    let g = p.gpus_per_node as u64;
    // NIC j of node n: the share of the GPU(s) cabled to it.
    let mut nic_of_node = vec![1.0f64; (p.nodes() * nics as u64) as usize];
    for r in 0..p.n_ranks {
        nic_of_node[((r / g) * nics as u64 + p.nic_of(r) as u64) as usize] = f.nic[r as usize];
    }
    let mut out: Vec<[f64; 6]> = f.nic.iter().map(|&x| [x; 6]).collect();
    for (k, &(size, _)) in layout.groups.iter().enumerate() {
        if size < 2 {
            continue;
        }
        for grp in 0..layout.n_ranks / size as u64 {
            let first_node = layout.member(k, grp, 0) / g;
            let (mut rails, mut nodes) = (0u64, false);
            for pos in 0..size {
                let r = layout.member(k, grp, pos);
                rails |= 1 << p.nic_of(r);
                nodes |= r / g != first_node;
            }
            // Inside a node nothing leaves it; on one rail each rank's own NIC carries it.
            if !nodes || rails.count_ones() < 2 {
                continue;
            }
            for pos in 0..size {
                let r = layout.member(k, grp, pos);
                let base = ((r / g) * nics as u64) as usize;
                let slowest = (0..nics).filter(|j| rails & (1 << j) != 0).map(|j| nic_of_node[base + j as usize]).fold(f64::INFINITY, f64::min);
                out[r as usize][k] = slowest;
            }
        }
    }
    f.nic_pxn = out;
}

/// The equivalence classes of ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct Classes {
    /// Each rank's class (SoA over ranks).
    pub class_of: Vec<u32>,
    /// Per class: its lowest rank, how many ranks, its stage and its factors.
    pub rep: Vec<u64>,
    pub count: Vec<u64>,
    pub stage: Vec<u32>,
    pub compute: Vec<f64>,
    pub nvlink: Vec<f64>,
    pub nic: Vec<f64>,
    /// Per class, with PXN and a NIC fault (else empty): its `RankFactors::nic_pxn`.
    pub nic_pxn: Vec<[f64; 6]>,
    /// Per class and kind ([`KINDS`] order): the set of classes its group of that kind holds
    /// (an index into `sets`; every rank of a class sees the same set).
    pub set_of: Vec<[u32; 6]>,
    pub sets: Vec<Vec<u32>>,
    /// Per class: the class at each stage of its pipeline (`pp_line[c * pp + stage]`).
    pub pp_line: Vec<u32>,
    pub pp: u32,
    /// Refinement rounds run.
    pub rounds: u32,
    /// Per class on a leaf whose uplinks lost bandwidth: its leaf class (leaves that hold the
    /// same multiset of classes), and how many of its ranks sit on one such leaf (the weight of
    /// its flows there); `None` elsewhere (a healthy leaf's uplinks never bind).
    pub uplink: Vec<Option<(u32, u64)>>,
    /// Per class: bit k set when its group of kind k ([`KINDS`] order) spans more than one leaf,
    /// so its scale-out flows cross the uplinks (set for classes with `uplink` only).
    pub crosses: Vec<u8>,
    /// Per leaf class: one of its leaves.
    pub leaf_rep: Vec<u32>,
}

impl Classes {
    pub fn len(&self) -> usize {
        self.rep.len()
    }
    pub fn is_empty(&self) -> bool {
        self.rep.is_empty()
    }
    pub fn at_stage(&self, class: u32, stage: u32) -> u32 {
        self.pp_line[class as usize * self.pp as usize + stage as usize]
    }
}

/// Interns keys into dense ids, first seen first.
struct Interner<K> {
    ids: HashMap<K, u32>,
}

impl<K: std::hash::Hash + Eq> Interner<K> {
    fn new() -> Self {
        Interner { ids: HashMap::new() }
    }
    fn id(&mut self, k: K) -> u32 {
        let n = self.ids.len() as u32;
        *self.ids.entry(k).or_insert(n)
    }
}

/// Colour refinement of the ranks (see the module doc). Work: O(n_ranks x kinds) per round, a
/// round for each step of the longest chain of groups a fault's influence travels (a handful).
pub fn classes(layout: &Layout, f: &RankFactors) -> Classes {
    partition(layout, f, false)
}

/// Every rank a class of its own: the per-rank engine without symmetry reduction, the naive
/// reference [`classes`] is tested against.
pub fn singletons(layout: &Layout, f: &RankFactors) -> Classes {
    partition(layout, f, true)
}

/// Per rank: bit k set when its group of kind k has ranks that differ in `reach` (on more than one
/// leaf; with PXN, in more than one scalable unit).
fn spanning(layout: &Layout, leaf: &[u32]) -> Vec<u8> {
    let n = layout.n_ranks;
    let mut mask = vec![0u8; n as usize];
    for k in 0..KINDS.len() {
        let (size, _) = layout.groups[k];
        for g in 0..n / size as u64 {
            let first = leaf[layout.member(k, g, 0) as usize];
            if (1..size).any(|p| leaf[layout.member(k, g, p) as usize] != first) {
                for p in 0..size {
                    mask[layout.member(k, g, p) as usize] |= 1 << k;
                }
            }
        }
    }
    mask
}

fn partition(layout: &Layout, f: &RankFactors, distinct: bool) -> Classes {
    let n = layout.n_ranks;
    // Leaves whose uplinks lost bandwidth, and the ranks that send through them.
    let bind = f.uplinks_bind();
    let degraded = |r: u64| bind && f.uplink(r) != 1.0;
    let mask = if bind { spanning(layout, &f.reach) } else { Vec::new() };
    let mut on_leaf: Vec<Vec<u64>> = vec![Vec::new(); if bind { f.leaf_uplink.len() } else { 0 }];
    if bind {
        for r in (0..n).filter(|&r| degraded(r)) {
            on_leaf[f.leaf[r as usize] as usize].push(r);
        }
    }
    // Initial colours: stage and factors (or the rank itself), and on a degraded leaf its
    // uplink factor and the groups that cross it.
    let mut init = Interner::new();
    let mut color: Vec<u32> = (0..n)
        .map(|r| {
            let i = r as usize;
            let key = if distinct { r } else { 0 };
            let up = if degraded(r) { (f.uplink(r).to_bits(), mask[i]) } else { (1f64.to_bits(), 0) };
            let pxn = f.nic_pxn.get(i).map_or([0; 6], |x| x.map(f64::to_bits));
            init.id((layout.stage(r), f.compute[i].to_bits(), f.nvlink[i].to_bits(), f.nic[i].to_bits(), key, up, pxn))
        })
        .collect();
    let mut leaf_sig: Vec<u32> = vec![u32::MAX; on_leaf.len()];
    let mut n_colors = init.ids.len();
    let mut rounds = 0;
    let mut buf: Vec<u32> = Vec::new();
    // Per kind: each group's signature id.
    let mut group_sig: Vec<Vec<u32>> = vec![Vec::new(); 6];
    loop {
        rounds += 1;
        for (k, sig) in group_sig.iter_mut().enumerate() {
            let (size, _) = layout.groups[k];
            let n_groups = n / size as u64;
            let mut sigs: HashMap<Box<[u32]>, u32> = HashMap::new();
            sig.clear();
            for g in 0..n_groups {
                buf.clear();
                buf.extend((0..size).map(|p| color[layout.member(k, g, p) as usize]));
                if k != 5 {
                    // A multiset for collective groups; the pipeline keeps its stage order.
                    buf.sort_unstable();
                }
                let id = match sigs.get(buf.as_slice()) {
                    Some(&id) => id,
                    None => {
                        let id = sigs.len() as u32;
                        sigs.insert(buf.clone().into_boxed_slice(), id);
                        id
                    }
                };
                sig.push(id);
            }
        }
        // A degraded leaf is one more group: the multiset of colours on it.
        let mut sigs: HashMap<Box<[u32]>, u32> = HashMap::new();
        for (l, members) in on_leaf.iter().enumerate() {
            if members.is_empty() {
                continue;
            }
            buf.clear();
            buf.extend(members.iter().map(|&r| color[r as usize]));
            buf.sort_unstable();
            leaf_sig[l] = match sigs.get(buf.as_slice()) {
                Some(&id) => id,
                None => {
                    let id = sigs.len() as u32;
                    sigs.insert(buf.clone().into_boxed_slice(), id);
                    id
                }
            };
        }
        let mut next = Interner::new();
        let new: Vec<u32> = (0..n)
            .map(|r| {
                let mut key = [color[r as usize], 0, 0, 0, 0, 0, 0, u32::MAX];
                for (k, sig) in group_sig.iter().enumerate() {
                    key[k + 1] = sig[layout.group_of(k, r).0 as usize];
                }
                if degraded(r) {
                    key[7] = leaf_sig[f.leaf[r as usize] as usize];
                }
                next.id(key)
            })
            .collect();
        let m = next.ids.len();
        color = new;
        if m == n_colors {
            break;
        }
        n_colors = m;
    }
    // Colours are numbered in order of their lowest rank: class ids are deterministic.
    let mut rep = vec![u64::MAX; n_colors];
    let mut count = vec![0u64; n_colors];
    for (r, &c) in color.iter().enumerate() {
        rep[c as usize] = rep[c as usize].min(r as u64);
        count[c as usize] += 1;
    }
    let stage: Vec<u32> = rep.iter().map(|&r| layout.stage(r)).collect();
    let pick = |v: &Vec<f64>| rep.iter().map(|&r| v[r as usize]).collect::<Vec<f64>>();
    let (compute, nvlink, nic) = (pick(&f.compute), pick(&f.nvlink), pick(&f.nic));
    let nic_pxn: Vec<[f64; 6]> = if f.nic_pxn.is_empty() { Vec::new() } else { rep.iter().map(|&r| f.nic_pxn[r as usize]).collect() };
    let mut set_ids: HashMap<Vec<u32>, u32> = HashMap::new();
    let mut sets: Vec<Vec<u32>> = Vec::new();
    let pp = layout.pp;
    let mut pp_line = vec![0u32; n_colors * pp as usize];
    let set_of: Vec<[u32; 6]> = rep
        .iter()
        .enumerate()
        .map(|(c, &r)| {
            let mut out = [0u32; 6];
            for (k, slot) in out.iter_mut().enumerate() {
                let (size, _) = layout.groups[k];
                let g = layout.group_of(k, r).0;
                let mut members: Vec<u32> = (0..size).map(|p| color[layout.member(k, g, p) as usize]).collect();
                if k == 5 {
                    pp_line[c * pp as usize..(c + 1) * pp as usize].copy_from_slice(&members);
                }
                members.sort_unstable();
                members.dedup();
                let next = sets.len() as u32;
                *slot = *set_ids.entry(members.clone()).or_insert_with(|| {
                    sets.push(members);
                    next
                });
            }
            out
        })
        .collect();
    // Leaf classes (the last round's leaf signatures: the partition did not change in it), one
    // leaf of each, and each class's ranks on the leaf of its lowest rank.
    let n_leaf_classes = leaf_sig.iter().filter(|&&x| x != u32::MAX).map(|&x| x + 1).max().unwrap_or(0) as usize;
    let mut leaf_rep = vec![u32::MAX; n_leaf_classes];
    for (l, &sig) in leaf_sig.iter().enumerate() {
        if sig != u32::MAX && leaf_rep[sig as usize] == u32::MAX {
            leaf_rep[sig as usize] = l as u32;
        }
    }
    let mut on_rep_leaf = vec![0u64; n_colors];
    for members in &on_leaf {
        for &r in members {
            let c = color[r as usize] as usize;
            if f.leaf[rep[c] as usize] == f.leaf[r as usize] {
                on_rep_leaf[c] += 1;
            }
        }
    }
    let uplink: Vec<Option<(u32, u64)>> =
        rep.iter().enumerate().map(|(c, &r)| degraded(r).then(|| (leaf_sig[f.leaf[r as usize] as usize], on_rep_leaf[c]))).collect();
    let crosses: Vec<u8> = rep.iter().map(|&r| if degraded(r) { mask[r as usize] } else { 0 }).collect();
    Classes { class_of: color, rep, count, stage, compute, nvlink, nic, nic_pxn, set_of, sets, pp_line, pp, rounds, uplink, crosses, leaf_rep }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parallelism::{PipelineSplit, Schedule};

    fn pc(tp: u32, pp: u32, dp: u32) -> ParallelConfig {
        ParallelConfig { tp, sp: true, pp, vp: 1, dp, cp: 1, ep: 1, etp: 1, zero: 1, schedule: Schedule::OneFOneB, split: PipelineSplit::default() }
    }

    #[test]
    fn groups_follow_megatron_rank_order() {
        let l = Layout::new(&pc(2, 2, 2));
        // TP fastest: ranks 0,1; DP stride 2: ranks 0,2; PP stride 4: ranks 0,4.
        assert_eq!(l.group_of(0, 3), (1, 1));
        assert_eq!((0..2).map(|p| l.member(0, 1, p)).collect::<Vec<_>>(), [2, 3]);
        assert_eq!((0..2).map(|p| l.member(3, l.group_of(3, 5).0, p)).collect::<Vec<_>>(), [5, 7]);
        assert_eq!((0..2).map(|p| l.member(5, l.group_of(5, 6).0, p)).collect::<Vec<_>>(), [2, 6]);
        for k in 0..6 {
            for r in 0..8 {
                let (g, p) = l.group_of(k, r);
                assert_eq!(l.member(k, g, p), r, "kind {k} rank {r}");
            }
        }
    }

    #[test]
    fn no_fault_leaves_one_class_per_stage() {
        let l = Layout::new(&pc(8, 4, 16));
        let c = classes(&l, &RankFactors::healthy(l.n_ranks));
        assert_eq!(c.len(), 4);
        assert_eq!(c.count, [128, 128, 128, 128]);
        assert_eq!(c.stage, [0, 1, 2, 3]);
        // Every collective group holds one class (the pipeline holds one of each stage).
        assert!(c.set_of.iter().all(|k| k[..5].iter().all(|&i| c.sets[i as usize].len() == 1)));
        assert!(c.set_of.iter().all(|k| c.sets[k[5] as usize].len() == 4));
    }

    #[test]
    fn one_slow_rank_splits_off_exactly_the_ranks_it_touches() {
        // tp 2 x dp 2 x pp 2 = 8 ranks; rank 0 (stage 0, dp 0, tp 0) slow.
        let l = Layout::new(&pc(2, 2, 2));
        let mut f = RankFactors::healthy(8);
        f.compute[0] = 0.5;
        let c = classes(&l, &f);
        // Rank 0; its TP peer 1; its DP peer 2 and 2's TP peer 3 (which sits in rank 1's DP group);
        // at stage 1 the ranks of 0's pipeline (4), of 1's (5), of 2's (6) and 3's (7) all differ
        // by whom they receive from.
        assert_eq!(c.len(), 8);
        assert_eq!(c.set_of[c.class_of[0] as usize][0], c.set_of[c.class_of[1] as usize][0]);
        let tp_set = &c.sets[c.set_of[c.class_of[0] as usize][0] as usize];
        assert_eq!(tp_set.len(), 2);
        assert_eq!(c.at_stage(c.class_of[0], 1), c.class_of[4]);
    }

    #[test]
    fn symmetric_faults_keep_classes_merged() {
        // The same slowdown on every rank of a DP replica's TP group 0 at both stages and in
        // every replica is symmetric across replicas: classes by (stage, tp position) only.
        let l = Layout::new(&pc(2, 2, 4));
        let mut f = RankFactors::healthy(16);
        for r in (0..16).step_by(2) {
            f.compute[r] = 0.8;
        }
        let c = classes(&l, &f);
        assert_eq!(c.len(), 4);
        assert_eq!(c.count, [4, 4, 4, 4]);
    }

    #[test]
    fn bad_faults_name_the_flag_and_value() {
        let p = Placement { n_ranks: 16, gpus_per_node: 8, nics_per_node: 8, nvlink_domain_size: 8, nodes_per_leaf: None, pxn: true };
        let e = RankFaults { slow_gpu: vec![(16, 0.5)], ..Default::default() }.factors(&p).unwrap_err();
        assert_eq!((e.flag, e.value.as_str()), ("--slow-gpu", "16=0.5"));
        let e = RankFaults { slow_gpu: vec![(3, 0.0)], ..Default::default() }.factors(&p).unwrap_err();
        assert!(e.why.contains("(0, 1]"), "{e}");
        let e = RankFaults { links: vec![LinkFault { target: LinkTarget::NodeNic { node: 1, nic: 8 }, factor: 0.5 }], ..Default::default() }
            .factors(&p)
            .unwrap_err();
        assert_eq!((e.flag, e.value.as_str()), ("--degrade-link", "node:1:nic:8=0.5"));
    }

    #[test]
    fn leaves_are_rails_of_scalable_units_and_a_failed_nic_moves_to_the_next() {
        // 6 nodes of 8 GPUs and 8 NICs, 2 nodes per leaf: 3 SUs x 8 rails.
        let p = Placement { n_ranks: 48, gpus_per_node: 8, nics_per_node: 8, nvlink_domain_size: 8, nodes_per_leaf: Some(2), pxn: true };
        assert_eq!((p.units(), p.leaves()), (3, 24));
        assert_eq!((p.home_leaf(0), p.home_leaf(11), p.home_leaf(19), p.home_leaf(47)), (0, 3, 11, 23));
        assert_eq!(p.ranks_on_leaf(11).collect::<Vec<_>>(), [19, 27]);
        let up = |su, rail, factor| LinkFault { target: LinkTarget::Uplink { su, rail }, factor };
        let f = RankFaults { links: vec![up(1, 3, 0.5)], fail_nic: vec![26], ..Default::default() }.factors(&p).unwrap();
        assert_eq!(f.leaf_uplink.iter().filter(|&&x| x != 1.0).count(), 1);
        assert_eq!((f.uplink(19), f.uplink(27), f.uplink(3)), (0.5, 0.5, 1.0));
        // Rank 26 (node 3, NIC 2) fails over to NIC 3: rail 3's leaf of SU 1, the degraded one.
        assert_eq!((f.leaf[26], f.uplink(26)), (11, 0.5));
        // Classes: the degraded leaf's ranks and those whose groups reach them split off; with
        // a DP group of 6 (tp 8), every DP group spans the 3 SUs, so the leaf's two ranks and
        // the failed-over one carry weights on the one leaf class.
        let l = Layout::new(&pc(8, 1, 6));
        let c = classes(&l, &f);
        assert_eq!(c.leaf_rep.len(), 1);
        let w: Vec<(u64, u64)> = (0..c.len()).filter_map(|k| c.uplink[k].map(|(_, w)| (c.rep[k], w))).collect();
        assert_eq!(w.iter().map(|x| x.1).sum::<u64>(), 3, "{w:?}");
        assert!(c.crosses.iter().zip(&c.uplink).all(|(&m, u)| u.is_none() || m & (1 << kind_index(Group::Dp)) != 0));
        // A uplink fault names a leaf that exists, and needs a leaf size.
        assert!(RankFaults { links: vec![up(3, 0, 0.5)], ..Default::default() }.factors(&p).is_err());
        let none = Placement { nodes_per_leaf: None, ..p };
        let e = RankFaults { links: vec![up(0, 0, 0.5)], ..Default::default() }.factors(&none).unwrap_err();
        assert!(e.hint.contains("--nodes-per-leaf"), "{e}");
    }

    #[test]
    fn pxn_moves_cross_rail_traffic_to_nvlink_and_the_rail_local_nic() {
        // 2 nodes of 8 GPUs and 8 NICs on one leaf group (one SU); tp 4 x dp 4: DP group
        // {0, 4, 8, 12} is GPUs 0 and 4 of each node, rails 0 and 4.
        let l = Layout::new(&pc(4, 1, 4));
        let pxn = Placement { n_ranks: 16, gpus_per_node: 8, nics_per_node: 8, nvlink_domain_size: 8, nodes_per_leaf: Some(2), pxn: true };
        let own = Placement { pxn: false, ..pxn };
        let dp = kind_index(Group::Dp);
        // NIC 4 of node 1 at half.
        let nic4 = RankFaults { links: vec![LinkFault { target: LinkTarget::NodeNic { node: 1, nic: 4 }, factor: 0.5 }], ..Default::default() };
        let mut f = nic4.factors(&pxn).unwrap();
        route_pxn(&mut f, &l, &pxn);
        // With PXN, GPU 0 of node 1 (rank 8) sends its DP traffic for rail 4 over NVLink to GPU 4
        // and out through NIC 4: held to half, though its own NIC is healthy. Node 0's ranks
        // leave through node 0's NICs, all healthy; the TP group stays in its node.
        assert_eq!(f.nic[8], 1.0);
        assert_eq!((f.nic_pxn[8][dp], f.nic_pxn[12][dp], f.nic_pxn[0][dp], f.nic_pxn[4][dp]), (0.5, 0.5, 1.0, 1.0));
        assert_eq!(f.nic_pxn[8][kind_index(Group::Tp)], 1.0);
        // Without PXN each GPU sends through its own NIC: only rank 12 (GPU 4 of node 1).
        let mut g = nic4.factors(&own).unwrap();
        route_pxn(&mut g, &l, &own);
        assert!(g.nic_pxn.is_empty());
        assert_eq!((g.nic[8], g.nic[12]), (1.0, 0.5));
        // The spines: the DP group spans leaves (rails 0 and 4) but not scalable units. With PXN
        // its rail change is made on NVLink and its traffic stays on the rails' leaves; without,
        // it goes up to the spines through the degraded uplinks of (SU 0, rail 0).
        let up = RankFaults { links: vec![LinkFault { target: LinkTarget::Uplink { su: 0, rail: 0 }, factor: 0.5 }], ..Default::default() };
        let crosses_dp = |p: &Placement| {
            let mut f = up.factors(p).unwrap();
            route_pxn(&mut f, &l, p);
            let c = classes(&l, &f);
            c.crosses.iter().any(|&m| m & (1 << dp) != 0)
        };
        assert!(!crosses_dp(&pxn));
        assert!(crosses_dp(&own));
        // Two SUs (a leaf of one node): the group's ranks on node 0 and node 1 are in different
        // units, and PXN cannot keep that off the spines.
        let two = Placement { nodes_per_leaf: Some(1), ..pxn };
        assert!(crosses_dp(&two));
    }

    #[test]
    fn a_failed_nic_halves_its_gpus_and_its_buddys() {
        let p = Placement { n_ranks: 16, gpus_per_node: 8, nics_per_node: 8, nvlink_domain_size: 8, nodes_per_leaf: None, pxn: true };
        let f = RankFaults { fail_nic: vec![11], ..Default::default() }.factors(&p).unwrap();
        let halved: Vec<usize> = (0..16).filter(|&r| f.nic[r] != 1.0).collect();
        assert_eq!(halved, [11, 12]);
        assert_eq!(f.nic[11], FAILOVER_SHARE);
        // Two GPUs per NIC: NIC 1 of node 0 (GPUs 2, 3) fails onto NIC 2 (GPUs 4, 5).
        let p = Placement { nics_per_node: 4, ..p };
        let f = RankFaults { fail_nic: vec![3], ..Default::default() }.factors(&p).unwrap();
        assert_eq!((0..16).filter(|&r| f.nic[r] != 1.0).collect::<Vec<_>>(), [2, 3, 4, 5]);
        let f = RankFaults { links: vec![LinkFault { target: LinkTarget::Rail(1), factor: 0.5 }], ..Default::default() }.factors(&p).unwrap();
        assert_eq!((0..16).filter(|&r| f.nic[r] != 1.0).collect::<Vec<_>>(), [2, 3, 10, 11]);
    }
}
