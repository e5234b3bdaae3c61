#!/usr/bin/env python3
"""HBM throughput of the token permutations of a MoE layer, against a plain copy (issue 18).

Transformer Engine is not on the device machine, so this times what TE's fused permute kernels do
(`moe_permute`, `moe_sort_chunks_by_index`: one output row gathered from one input row, rows of
`hidden` bf16 elements) through PyTorch's own row gather, `Tensor.index_select(0, idx)`:
  copy     `dst.copy_(src)` of the routed buffer (T x top_k rows): the stream rate;
  permute  the routed rows gathered from the T token rows in expert order (random top-k routing,
           each token to k distinct experts, rows sorted by expert: TE's permute with a routing map);
  sort     the routed rows gathered by a permutation of contiguous chunks (ep x local-expert chunks
           of random sizes, reordered expert-major: the alltoall dispatcher's sort by local expert);
  gather_random  the routed rows gathered in a random order from a routed-size source (no reuse).
Each is timed with CUDA events (median of --reps after warm-up); bytes = rows read + rows written.
Writes a CSV: kind,hidden,tokens,top_k,experts,rows,bytes,us,gb_per_s,share_of_copy
Usage: python3 scripts/moe_permute_probe.py --csv OUT.csv
"""
import argparse
import statistics

import torch


def timed(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    dev = torch.device("cuda")
    g = torch.Generator(device="cpu").manual_seed(0)
    rows_out = ["kind,hidden,tokens,top_k,experts,rows,bytes,us,gb_per_s,share_of_copy"]
    # (hidden, experts, top_k, ep): Qwen3-30B-A3B at EP 8 (16 local experts), DeepSeek-V3 at EP 8 (32).
    for hidden, experts, k, ep in [(2048, 128, 8, 8), (7168, 256, 8, 8)]:
        for tokens in (4096, 16384):
            if hidden * tokens * k * 2 * 3 > 40e9:
                continue
            x = torch.randn(tokens, hidden, dtype=torch.bfloat16, device=dev)
            # k distinct experts per token, rows sorted by expert (stable): the permute's source rows.
            ids = torch.rand(tokens, experts, generator=g).topk(k, dim=1).indices
            order = torch.argsort(ids.flatten(), stable=True)
            src_tok = (order // k).to(dev)
            rows = tokens * k
            routed = torch.empty(rows, hidden, dtype=torch.bfloat16, device=dev)
            src = torch.randn(rows, hidden, dtype=torch.bfloat16, device=dev)
            dst = torch.empty_like(src)
            # Chunk permutation: ep source ranks x local experts, random chunk sizes, reordered
            # expert-major (Megatron's sort_input_by_local_experts).
            local = experts // ep
            sizes = torch.distributions.Dirichlet(torch.ones(ep * local)).sample() * rows
            sizes = sizes.floor().long()
            sizes[-1] += rows - int(sizes.sum())
            starts = torch.cumsum(sizes, 0) - sizes
            perm = torch.cat([torch.arange(int(starts[r * local + e]), int(starts[r * local + e] + sizes[r * local + e])) for e in range(local) for r in range(ep)]).to(dev)
            rand = torch.randperm(rows, generator=g).to(dev)
            bytes_ = rows * hidden * 2 * 2
            t_copy = timed(lambda: dst.copy_(src), args.reps)
            cases = [
                ("copy", t_copy),
                ("permute", timed(lambda: torch.index_select(x, 0, src_tok, out=routed), args.reps)),
                ("sort", timed(lambda: torch.index_select(src, 0, perm, out=dst), args.reps)),
                ("gather_random", timed(lambda: torch.index_select(src, 0, rand, out=dst), args.reps)),
            ]
            for kind, us in cases:
                rows_out.append(f"{kind},{hidden},{tokens},{k},{experts},{rows},{bytes_},{us:.2f},{bytes_ / us / 1e3:.1f},{t_copy / us:.3f}")
                print(rows_out[-1], flush=True)
            del x, routed, src, dst
            torch.cuda.empty_cache()
    with open(args.csv, "w") as f:
        f.write("\n".join(rows_out) + "\n")


if __name__ == "__main__":
    main()
