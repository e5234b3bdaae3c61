//! How NCCL runs a collective: algorithm (ring, tree, NVLS, PAT) and protocol (LL, LL128, Simple),
//! chosen by the smallest modelled time for the size and group, as NCCL's own tuner does; and the
//! steps the chosen algorithm takes, which the discrete-event engine plays one by one.
//!
//! Latencies are NCCL's tuning tables (github NVIDIA/nccl, src/graph/tuning.cc, `baseLat` and
//! `hwLat` for NVLink and network, NCCL 2.18-2.21): a base cost per algorithm and protocol, plus a
//! per-step cost of the link class. Protocol payload efficiencies are their wire formats: LL sends
//! 4 data bytes per 8-byte word (0.5), LL128 120 of every 128 bytes (0.9375), Simple all bytes.
//! A node whose GPUs are joined by PCIe only (`Links::pcie`) steps at NCCL's `PCI` latencies
//! (`hwLat[NCCL_HW_PCI]`: tree 1.0/1.9/4 us, ring 1.0/2.5/5.7 us), runs no LL128 and no NVLS.

use crate::hardware::profile::CollectiveOp;
use crate::units::{BytesPerSec, Seconds};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algo {
    Ring,
    Tree,
    /// NVLink SHARP: reduction in the NVSwitch (all-reduce, inside one NVLink domain).
    Nvls,
    /// Parallel aggregated trees (all-gather / reduce-scatter with one rank per node, NCCL >= 2.23).
    Pat,
    /// Two levels for a group spanning NVLink domains: reduce-scatter inside each domain over
    /// NVLink, the cross-domain collective on 1/r of the data over each rank's NIC share, then an
    /// all-gather inside each domain.
    Hierarchical,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Proto {
    Ll,
    Ll128,
    Simple,
}

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::Ring => "ring",
            Algo::Tree => "tree",
            Algo::Nvls => "nvls",
            Algo::Pat => "pat",
            Algo::Hierarchical => "hierarchical",
        }
    }
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::Ll => "LL",
            Proto::Ll128 => "LL128",
            Proto::Simple => "Simple",
        }
    }
    /// Payload per byte on the wire.
    fn efficiency(self) -> f64 {
        match self {
            Proto::Ll => 0.5,
            Proto::Ll128 => 120.0 / 128.0,
            Proto::Simple => 1.0,
        }
    }
    const ALL: [Proto; 3] = [Proto::Ll, Proto::Ll128, Proto::Simple];
}

/// NCCL `baseLat` (us), by algorithm and protocol (LL, LL128, Simple).
fn base_latency_us(algo: Algo, proto: Proto) -> f64 {
    let row = match algo {
        Algo::Tree | Algo::Pat => [6.8, 14.0, 0.0],
        Algo::Ring | Algo::Hierarchical => [6.6, 14.0, 8.4],
        Algo::Nvls => [0.0, 0.0, 0.0],
    };
    row[proto as usize]
}

/// The link class NCCL's `hwLat` table is indexed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LinkClass {
    NvLink,
    Pci,
    Net,
}

/// Latency of an NVLS all-reduce (NVLink SHARP, one step through the switch), microseconds. NCCL's
/// tuning table says 25 us (`hwLat` NVLS Simple, NCCL 2.18-2.21), which is what its tuner uses to
/// choose, not what the collective takes: with 25 us the model ran 23-33% faster than the
/// measured 8x H100 all-reduce at 2-32 MiB (github NVIDIA/dgxc-benchmarking @ 841f5466 :
/// nccl/README.md sample output, ../shared/reference/collectives_nccl_bandwidth.csv, out-of-place
/// rows), the sizes a serving engine's tensor-parallel all-reduce has at decode (tokens x hidden x 2
/// bytes: 5-32 MB for Llama-3.1 70B at batch 300-2,000). Fitted on the 15 points of that curve
/// from 1 MiB to 16 GiB, mean absolute relative error of the modelled time minimised over 0-150 us
/// by 1 us (scripts/fit_nvls_latency.py, output in
/// calibration/runs/serving-trtllm/fit_nvls_latency-output.txt): 80 us, MAPE 13.0% -> 3.5% (every
/// point within 15%; below about 24 MiB the ring's LL/LL128 now win, as NCCL's measured times
/// say). The asymptote (`NVLS_EFFICIENCY` of `cost`, from the 8 GiB point of the same curve) is
/// unchanged. The same latency is used for every NVLS system (B200, GB200: no measured curve).
pub const NVLS_LATENCY_US: f64 = 80.0;

/// NCCL `hwLat` (us per step), by link class, algorithm and protocol.
fn step_latency_us(class: LinkClass, algo: Algo, proto: Proto) -> f64 {
    let row = match (class, algo) {
        (_, Algo::Nvls) => [0.0, 0.0, NVLS_LATENCY_US],
        (LinkClass::NvLink, Algo::Tree | Algo::Pat) => [0.6, 1.25, 4.0],
        (LinkClass::NvLink, Algo::Ring | Algo::Hierarchical) => [0.6, 1.9, 3.4],
        (LinkClass::Pci, Algo::Tree | Algo::Pat) => [1.0, 1.9, 4.0],
        (LinkClass::Pci, Algo::Ring | Algo::Hierarchical) => [1.0, 2.5, 5.7],
        (LinkClass::Net, Algo::Tree | Algo::Pat) => [5.0, 8.5, 14.0],
        (LinkClass::Net, Algo::Ring | Algo::Hierarchical) => [2.7, 4.0, 14.0],
    };
    row[proto as usize]
}

/// What the links offer a collective of one group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Links {
    pub n_ranks: u32,
    /// The group spans NVLink domains (its ring/tree steps cross the network).
    pub crosses_network: bool,
    /// The GPUs of a domain are joined by PCIe, not NVLink: NCCL's PCI latencies, no LL128 (NCCL
    /// enables LL128 by default only where every path is NVLink, src/graph/tuning.cc), no NVLS.
    pub pcie: bool,
    /// Bus bandwidth a ring reaches on this group's slowest link class.
    pub busbw: BytesPerSec,
    /// NVLS algorithm bandwidth (all-reduce through the switch), where the system has NVLS.
    pub nvls_algbw: Option<BytesPerSec>,
    /// For groups spanning domains: ranks per domain, domains, the NVLink bus bandwidth inside a
    /// domain, and the bus bandwidth one rank gets across domains (its NIC share).
    pub ranks_per_domain: u32,
    pub domains: u32,
    pub intra_busbw: BytesPerSec,
    pub inter_busbw: BytesPerSec,
}

/// A chosen algorithm and protocol: `base` once, then `steps` steps of `step_latency` each, moving
/// `bytes x factor / busbw` in all.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    pub algo: Algo,
    pub proto: Proto,
    pub base: Seconds,
    pub steps: u32,
    pub step_latency: Seconds,
    pub busbw: BytesPerSec,
}

impl Plan {
    pub fn latency(&self) -> Seconds {
        self.base + self.step_latency * self.steps as f64
    }
}

fn log2_ceil(n: u32) -> u32 {
    32 - n.saturating_sub(1).leading_zeros()
}

/// The algorithm/protocol NCCL would pick for `bytes` (nccl-tests buffer size) of `op`.
pub fn choose(op: CollectiveOp, links: &Links, bytes: f64) -> Plan {
    let n = links.n_ranks.max(2);
    let factor = op.busbw_factor(n);
    let mut best: Option<(Seconds, Plan)> = None;
    // A hierarchical collective moves, per rank: (r-1)/r of the data over NVLink in each intra
    // phase and the cross-domain share of 1/r of it over the network; as one bus bandwidth for the
    // nccl-tests factor of the whole group.
    let hierarchical = |intra_factor: f64, inter_factor: f64| -> BytesPerSec {
        let (r, d) = (links.ranks_per_domain.max(1) as f64, links.domains.max(1) as f64);
        let per_byte = intra_factor * (r - 1.0) / r / links.intra_busbw.value() + inter_factor * (d - 1.0) / d / r / links.inter_busbw.value();
        BytesPerSec::gb_per_s(factor / per_byte / 1e9)
    };
    let two_level = links.crosses_network && links.ranks_per_domain > 1 && links.inter_busbw.value() > 0.0 && links.intra_busbw.value() > 0.0;
    let hier_steps = 2 * (links.ranks_per_domain.saturating_sub(1)) + 2 * links.domains.saturating_sub(1);
    let class = match (links.crosses_network, links.pcie) {
        (true, _) => LinkClass::Net,
        (false, true) => LinkClass::Pci,
        (false, false) => LinkClass::NvLink,
    };
    let mut consider = |algo: Algo, steps: u32, busbw: BytesPerSec| {
        for proto in Proto::ALL {
            if algo == Algo::Nvls && proto != Proto::Simple || links.pcie && proto == Proto::Ll128 {
                continue;
            }
            let plan = Plan {
                algo,
                proto,
                base: Seconds::us(base_latency_us(algo, proto)),
                steps,
                step_latency: Seconds::us(step_latency_us(class, algo, proto)),
                busbw: busbw * proto.efficiency(),
            };
            let t = plan.latency() + Seconds::new(bytes * factor / plan.busbw.value());
            if best.as_ref().is_none_or(|(bt, _)| t < *bt) {
                best = Some((t, plan));
            }
        }
    };
    match op {
        CollectiveOp::AllReduce => {
            consider(Algo::Ring, 2 * (n - 1), links.busbw);
            // NCCL builds trees across nodes only; inside one node they would be chains.
            if links.crosses_network {
                consider(Algo::Tree, 2 * log2_ceil(n), links.busbw);
            }
            if two_level {
                // Reduce-scatter + all-gather inside (2 x (r-1)/r), all-reduce across (2 x (d-1)/d).
                consider(Algo::Hierarchical, hier_steps, hierarchical(2.0, 2.0));
            }
            if let (Some(alg), false, false) = (links.nvls_algbw, links.crosses_network, links.pcie) {
                // NVLS moves each byte to the switch and back once: algbw is its rate, so the
                // bus bandwidth (nccl-tests convention) is algbw x 2(n-1)/n.
                consider(Algo::Nvls, 1, alg * factor);
            }
        }
        CollectiveOp::AllGather | CollectiveOp::ReduceScatter => {
            consider(Algo::Ring, n - 1, links.busbw);
            if links.crosses_network {
                consider(Algo::Pat, log2_ceil(n), links.busbw);
            }
            if two_level {
                consider(Algo::Hierarchical, hier_steps / 2, hierarchical(1.0, 1.0));
            }
        }
        CollectiveOp::AllToAll => {
            // Each rank sends (n-1)/n of its buffer to the others (the nccl-tests bus factor). Across
            // domains the (n - r)/n that leaves its domain goes out through the rank's own NIC
            // (rail-optimized, PXN for other rails), not the whole domain's: the rank's NIC share
            // `inter_busbw` carries it, so the bus bandwidth is inter x (n-1)/(n-r), capped by NVLink.
            let busbw = if links.crosses_network && n > links.ranks_per_domain {
                let (n, r) = (n as f64, links.ranks_per_domain as f64);
                (links.inter_busbw * ((n - 1.0) / (n - r))).min(links.intra_busbw)
            } else {
                links.busbw
            };
            consider(Algo::Ring, n - 1, busbw)
        }
        CollectiveOp::SendRecv => consider(Algo::Ring, 1, links.busbw),
    }
    best.expect("at least one algorithm").1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intra(n: u32) -> Links {
        let bw = BytesPerSec::gb_per_s(346.0);
        Links {
            n_ranks: n,
            crosses_network: false,
            pcie: false,
            busbw: bw,
            nvls_algbw: None,
            ranks_per_domain: n,
            domains: 1,
            intra_busbw: bw,
            inter_busbw: bw,
        }
    }

    /// The measured 8x H100 all-reduce (github NVIDIA/dgxc-benchmarking @ 841f5466 :
    /// nccl/README.md sample output, out-of-place; ../shared/reference/collectives_nccl_bandwidth.csv)
    /// from 1 MiB to 8 GiB against the model on the H100's links (ring 0.769 x 450 GB/s, NVLS
    /// 0.61 x 450 GB/s): every point within 15% with [`NVLS_LATENCY_US`] (the 2-16 MiB points
    /// were 23-33% fast at NCCL's tuning value of 25 us).
    #[test]
    fn all_reduce_follows_the_measured_h100_curve() {
        let links = Links { busbw: BytesPerSec::gb_per_s(0.769 * 450.0), nvls_algbw: Some(BytesPerSec::gb_per_s(0.61 * 450.0)), ..intra(8) };
        let measured_us = [
            (1_048_576.0, 27.37),
            (2_097_152.0, 42.21),
            (4_194_304.0, 54.19),
            (8_388_608.0, 83.04),
            (16_777_216.0, 123.8),
            (33_554_432.0, 199.3),
            (67_108_864.0, 324.7),
            (134_217_728.0, 586.4),
            (1_073_741_824.0, 4029.4),
            (8_589_934_592.0, 31307.0),
        ];
        for (bytes, t) in measured_us {
            let p = choose(CollectiveOp::AllReduce, &links, bytes);
            let model = (p.latency() + Seconds::new(bytes * CollectiveOp::AllReduce.busbw_factor(8) / p.busbw.value())).value() * 1e6;
            assert!((model / t - 1.0).abs() < 0.15, "{bytes} B: model {model:.1} us ({}) vs measured {t} us", p.algo.name());
        }
    }

    #[test]
    fn all_to_all_across_nodes_is_bound_by_each_ranks_nic() {
        // 16 ranks, 8 per domain: half of each rank's data leaves its node through its one NIC.
        let nic = BytesPerSec::gb_per_s(40.0);
        let links = Links {
            n_ranks: 16,
            crosses_network: true,
            pcie: false,
            busbw: nic * 8.0,
            nvls_algbw: None,
            ranks_per_domain: 8,
            domains: 2,
            intra_busbw: BytesPerSec::gb_per_s(346.0),
            inter_busbw: nic,
        };
        let p = choose(CollectiveOp::AllToAll, &links, 1e9);
        assert!((p.busbw.value() / (nic.value() * 15.0 / 8.0) / Proto::Simple.efficiency() - 1.0).abs() < 1e-9, "{:?}", p.busbw);
        // Inside one node nothing changes.
        let p = choose(CollectiveOp::AllToAll, &intra(8), 1e9);
        assert_eq!(p.busbw, BytesPerSec::gb_per_s(346.0) * Proto::Simple.efficiency());
    }

    #[test]
    fn small_messages_take_ll_and_large_take_simple() {
        let small = choose(CollectiveOp::AllReduce, &intra(8), 1024.0);
        assert_eq!(small.proto, Proto::Ll);
        let large = choose(CollectiveOp::AllReduce, &intra(8), 4.0 * 1024.0 * 1024.0 * 1024.0);
        assert_eq!((large.algo, large.proto), (Algo::Ring, Proto::Simple));
    }

    #[test]
    fn large_groups_across_nodes_take_the_tree_for_small_messages() {
        let links = Links {
            n_ranks: 1024,
            crosses_network: true,
            pcie: false,
            busbw: BytesPerSec::gb_per_s(42.0),
            nvls_algbw: None,
            ranks_per_domain: 1,
            domains: 1024,
            intra_busbw: BytesPerSec::gb_per_s(346.0),
            inter_busbw: BytesPerSec::gb_per_s(42.0),
        };
        assert_eq!(choose(CollectiveOp::AllReduce, &links, 65536.0).algo, Algo::Tree);
        assert_eq!(choose(CollectiveOp::AllGather, &links, 65536.0).algo, Algo::Pat);
    }

    #[test]
    fn nvls_wins_large_all_reduce_inside_a_node() {
        let links = Links { nvls_algbw: Some(BytesPerSec::gb_per_s(274.0)), ..intra(8) };
        let p = choose(CollectiveOp::AllReduce, &links, 8.0 * 1024.0 * 1024.0 * 1024.0);
        assert_eq!(p.algo, Algo::Nvls);
        assert!((p.busbw.as_gb_per_s() - 274.0 * 1.75).abs() < 1e-6);
    }

    #[test]
    fn two_levels_beat_a_flat_ring_when_the_network_is_the_bottleneck() {
        // 16 nodes x 8 ranks with one slow NIC share each: the flat ring is capped by the NIC,
        // the hierarchical all-reduce sends only 1/8 of the data across.
        let links = Links {
            n_ranks: 128,
            crosses_network: true,
            pcie: false,
            busbw: BytesPerSec::gb_per_s(20.0),
            nvls_algbw: None,
            ranks_per_domain: 8,
            domains: 16,
            intra_busbw: BytesPerSec::gb_per_s(346.0),
            inter_busbw: BytesPerSec::gb_per_s(20.0),
        };
        let p = choose(CollectiveOp::AllReduce, &links, 1e9);
        assert_eq!(p.algo, Algo::Hierarchical);
        assert!(p.busbw.as_gb_per_s() > 20.0);
    }

    #[test]
    fn a_pcie_node_runs_no_ll128_nor_nvls_and_steps_at_pci_latency() {
        let bw = BytesPerSec::gb_per_s(42.0);
        let links = Links { pcie: true, busbw: bw, intra_busbw: bw, inter_busbw: bw, nvls_algbw: Some(bw), ..intra(8) };
        for e in 0..34 {
            let p = choose(CollectiveOp::AllReduce, &links, (1u64 << e) as f64);
            assert_ne!(p.proto, Proto::Ll128);
            assert_eq!(p.algo, Algo::Ring);
            assert_eq!(p.step_latency, Seconds::us(step_latency_us(LinkClass::Pci, Algo::Ring, p.proto)));
        }
        // The same ring over PCIe takes longer than over NVLink at the same bandwidth (latency).
        let nv = choose(CollectiveOp::AllReduce, &Links { pcie: false, nvls_algbw: None, ..links }, 1024.0);
        let pci = choose(CollectiveOp::AllReduce, &links, 1024.0);
        assert!(pci.latency() > nv.latency(), "{pci:?} vs {nv:?}");
    }

    #[test]
    fn time_is_monotone_in_size() {
        let mut last = 0.0;
        for e in 0..34 {
            let bytes = (1u64 << e) as f64;
            let p = choose(CollectiveOp::AllReduce, &intra(8), bytes);
            let t = p.latency().value() + bytes * 1.75 / p.busbw.value();
            assert!(t >= last, "{bytes}: {t} < {last}");
            last = t;
        }
    }
}
