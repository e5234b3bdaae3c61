#!/usr/bin/env python3
"""Fit the CUDA-graph terms of the torch-eager serving engine (`gpuplan serve --cuda-graphs`) on the
graph-fit split of the measured serving runs, and score every graph run with them.

    python3 scripts/fit_serve_graphs.py [--gpuplan target/release/gpuplan] [--runs calibration/runs/serve]
        [--counted-bytes 82] [--profile-suffix=-b]

`--profile-suffix=S` prices every run with the calibration profile named as the system's usual one
plus S (`h200-sxm-1x-b`, `h100-sxm-1x-b`: the same kinds of machine measured again), to see how
much the fit and the errors move with the profile.

Runs: every `*-serve.jsonl` record in the runs directory whose server ran with `--cuda-graphs`
(scenarios/workloads/serve_llama.py, scripts/device_serve.sh with SERVE_FLAGS=--cuda-graphs).

1. The host time between a graph iteration and the next (the scheduler loop: start of the next
   step minus the end of this one, gaps over 2 ms taken as idle waits and left out), mean over the
   fit runs: `GRAPH_US[0]`. Per graph shape (slot span, padded context): the measured median
   iteration (the log's step lines with graph=1, shapes of at least 20 iterations) minus the
   simulator's for the same shape without the graph terms (`gpuplan serve --trace RUN.csv
   --cuda-graphs --graph-overhead-us H,L --iteration-spread off --iterations-csv`, less H + L x
   layers, which the simulated iteration's time includes), weighted by the measured count, per
   layer of the model: `GRAPH_US[1]`; a joint fit `a + b x layers` is printed beside it (`a`: time
   per iteration inside the step). The difference of one shape does not depend on H and L, but
   which shapes the replay reaches does (a replay that runs faster than the server batches less):
   H is the mean gap and L starts at 0 and is set to the fit's until the fit moves by under 1 us
   (each replay printed; below that the shapes reached flip back and forth).
2. The graph iterations' spread: each measured graph iteration over the median of its shape
   (shapes of at least 5), pooled over the fit runs, quantiles at SPREAD_P
   (`GRAPH_ITERATION_SPREAD`), and the lag-1 correlation of their normal scores.
3. With `--cuda-graphs full`, the later chunks of split prompts run eagerly, alone, their
   attention as unfused matmuls with fp32 scores through HBM. For each such iteration of the fit
   runs whose chunk has at least 500 tokens (GPU-bound), the pass's time (the iteration minus the
   median decode-only iteration of its graph shape) against the simulator's price of the same pass
   (a one-request trace replayed so that its second iteration is that chunk alone), the
   difference spread over its scores at the profile's stream bandwidth: HBM bytes per score, the
   median over the iterations (`LATER_CHUNK_BYTES_PER_SCORE`, the simulator's counted
   `UNFUSED_BYTES_PER_SCORE` plus that).
4. Every graph run replayed as in scripts/fit_serve_overhead.py (`--trace RUN.csv --measured
   RUN.csv --replications 16`) with `--cuda-graphs`: errors of P50/P99 TTFT, P50/P99 TPOT and
   output tokens/s at the defaults, and with the node's eager host probe (`--host-probe-ms`, the
   mean of the probes before and after the runs; the graphs' host part is not scaled by it).
"""
import argparse
import collections
import concurrent.futures
import csv
import gzip
import json
import os
import statistics
import subprocess
import tempfile
import tomllib

from fit_serve_overhead import METRICS, PROFILE, REPLICATIONS, SPREAD_P, lag1_of, p99_interval, probe_ms, quantile


def graph_runs(runs_dir):
    out = []
    for name in sorted(os.listdir(runs_dir)):
        if name.endswith("-serve.jsonl"):
            for line in open(os.path.join(runs_dir, name)):
                r = json.loads(line)
                if "--cuda-graphs" in r["job"]["command"]:
                    out.append(r)
    return out


def base_cmd(g, runs_dir, rec):
    csv_path = os.path.join(runs_dir, rec["serve"]["requests_csv"])
    sc = rec["scenario"]
    return [g, "serve", "--model", sc["model"], "--system", sc["system"], "--gpus", "1", "--stack", sc["stack"],
            "--trace", csv_path, "--max-batch", str(rec["serve"]["max_batch"]), "--token-budget", str(rec["serve"]["token_budget"]),
            "--gpu-memory-utilization", "1.0", "--decode-attention", "padded-matmul", "--calibration", PROFILE[sc["system"]],
            "--cuda-graphs", graph_mode(rec)]


def graph_mode(rec):
    """The server's --cuda-graphs value: decode (given bare) or full."""
    cmd = rec["job"]["command"]
    i = cmd.index("--cuda-graphs")
    return cmd[i + 1] if i + 1 < len(cmd) and cmd[i + 1] in ("decode", "full") else "decode"


def log_steps(runs_dir, rec):
    with gzip.open(os.path.join(runs_dir, rec["job"]["log_file"]), "rt") as f:
        return [dict(kv.split("=", 1) for kv in line.split()) for line in f if line.startswith("step=")]


def graph_steps(runs_dir, rec):
    """Measured graph iterations in order: (shape, time)."""
    return [((int(d["graph_span"]), int(d["graph_context"])), float(d["step_time_s"])) for d in log_steps(runs_dir, rec) if decode_graph(d)]


def decode_graph(d):
    """A step line of a decode-only iteration replaying its graph."""
    return d["graph"] == "1" and d["chunks"] == "0"


def graph_gaps(runs_dir, rec, idle_s=0.002):
    """Host time from the end of each graph iteration to the start of the next (under `idle_s`)."""
    st = log_steps(runs_dir, rec)
    gaps = [float(b["start_s"]) - float(a["start_s"]) - float(a["step_time_s"]) for a, b in zip(st, st[1:]) if decode_graph(a)]
    return [g for g in gaps if g < idle_s]


def layers(rec):
    with open(f"models/{rec['scenario']['model']}.toml", "rb") as f:
        return tomllib.load(f)["n_layers"]


def cache_gb_per_key(rec):
    """GB of KV cache per cached token and layer (keys and values, bf16), as the simulator's attention reads."""
    with open(f"models/{rec['scenario']['model']}.toml", "rb") as f:
        m = tomllib.load(f)
    return 2 * m["n_kv_heads"] * m["head_dim"] * 2 / 1e9


def graph_terms_s(n_layers, gb, host_us, layer_us, per_gb_us):
    """The graph terms of one decode-graph iteration, seconds: host time and the per-layer GPU term
    at `gb` GB of cache read per layer (never below zero)."""
    return 1e-6 * (host_us + n_layers * max(0.0, layer_us - per_gb_us * gb))


def shape_diffs(g, runs_dir, rec, host_us=0.0, layer_us=0.0, per_gb_us=0.0):
    """(layers, count, measured - simulated median, s; GB of cache read per layer) per shape of the
    run, the simulator replaying it with the graph terms `host_us`, `layer_us`, `per_gb_us` and
    their time taken off its iterations."""
    meas = collections.defaultdict(list)
    for shape, t in graph_steps(runs_dir, rec):
        meas[shape].append(t)
    per_key = cache_gb_per_key(rec)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "it.csv")
        subprocess.run(base_cmd(g, runs_dir, rec) + ["--graph-overhead-us", f"{host_us},{layer_us},{per_gb_us}", "--iteration-spread", "off", "--iterations-csv", path],
                       check=True, capture_output=True)
        n = layers(rec)
        sim = collections.defaultdict(list)
        for r in csv.DictReader(open(path)):
            if r["graph_rows"] != "0" and r["n_chunks"] == "0":
                rows, keys = int(r["graph_rows"]), int(r["graph_keys"])
                sim[(rows, keys)].append(float(r["time_s"]) - graph_terms_s(n, per_key * rows * keys, host_us, layer_us, per_gb_us))
    return [(n, len(v), statistics.median(v) - statistics.median(sim[k]), per_key * k[0] * k[1]) for k, v in meas.items() if len(v) >= 20 and sim.get(k)]


def prefill_diffs(g, runs_dir, rec):
    """(layers, count, measured - simulated median, s; 0 GB of cache read) per prefill-graph length of
    a full-graph run: its iterations with one whole prompt replaying its prefill graph (no eager
    chunk), less the median of their decode graph's shape, against the simulator's prefill graph
    pass of that length without the graph terms (a one-request trace; lengths of at least 5)."""
    n = layers(rec)
    dmed = shape_medians(graph_steps(runs_dir, rec))
    by = collections.defaultdict(list)
    for d in log_steps(runs_dir, rec):
        if d["graph"] != "1" or d["chunks"] != "1" or d.get("eager_chunks") != "0" or d.get("prefill_graph_tokens", "0") == "0":
            continue
        base = dmed.get((int(d["graph_span"]), int(d["graph_context"]))) if d["n_decode"] != "0" else 0.0
        if base is not None:
            by[int(d["prefill_graph_tokens"])].append(float(d["step_time_s"]) - base)
    out = []
    for p, v in sorted(by.items()):
        if len(v) < 5:
            continue
        sim = one_request_iteration(g, runs_dir, rec, p, 0, ["--graph-overhead-us", "0,0,0"])
        out.append((n, len(v), statistics.median(v) - sim, 0.0))
    return out


def one_request_iteration(g, runs_dir, rec, input_len, row, extra, token_budget=None):
    """Simulated time of iteration `row` when one request of `input_len` tokens (2 output) arrives
    alone: the run's serve command with a one-line trace, no iteration spread, and `extra` flags."""
    with tempfile.TemporaryDirectory() as tmp:
        trace, it = os.path.join(tmp, "one.csv"), os.path.join(tmp, "it.csv")
        with open(trace, "w") as f:
            f.write(f"arrival_s,input_len,output_len\n0,{input_len},2\n")
        cmd = base_cmd(g, runs_dir, rec)
        cmd[cmd.index("--trace") + 1] = trace
        if token_budget is not None:
            cmd[cmd.index("--token-budget") + 1] = str(token_budget)
        subprocess.run(cmd + extra + ["--iteration-spread", "off", "--iterations-csv", it], check=True, capture_output=True)
        return float(list(csv.DictReader(open(it)))[row]["time_s"])


def shape_medians(st):
    """The median time of each graph shape with at least 5 of the (shape, time) iterations."""
    groups = collections.defaultdict(list)
    for shape, t in st:
        groups[shape].append(t)
    return {k: statistics.median(v) for k, v in groups.items() if len(v) >= 5}


def ratios(runs_dir, rec):
    """Per graph iteration in order, its time over its shape's median (shapes of at least 5)."""
    st = graph_steps(runs_dir, rec)
    med = shape_medians(st)
    return [t / med[s] if s in med else None for s, t in st]


def later_chunk_bytes(g, runs_dir, rec, counted=None):
    """(chunk tokens, cached, bytes per score) per GPU-bound eager later chunk of a full-graph run."""
    with open(f"models/{rec['scenario']['model']}.toml", "rb") as f:
        m = tomllib.load(f)
    with open(f"calibration/profiles/{PROFILE[rec['scenario']['system']]}/profile.toml", "rb") as f:
        bw = tomllib.load(f)["stream"]["bandwidth_gb_per_s"] * 1e9
    dmed = shape_medians(graph_steps(runs_dir, rec))
    out = []
    for d in log_steps(runs_dir, rec):
        if d.get("eager_chunks") != "1" or d["chunks"] != "1" or int(d["chunk_tokens"]) < 500:
            continue
        base = dmed.get((int(d["graph_span"]), int(d["graph_context"]))) if d["n_decode"] != "0" else 0.0
        if base is None:
            continue
        n, c = int(d["chunk_tokens"]), int(d["chunk_cached"])
        # With the token budget at the cached length, the second iteration is that chunk alone.
        sim = one_request_iteration(g, runs_dir, rec, c + n, 1, [], token_budget=c)
        scores = m["n_heads"] * n * (c + n) * m["n_layers"]
        out.append((n, c, counted + (float(d["step_time_s"]) - base - sim) * bw / scores))
    return out


def score(g, runs_dir, rec, extra):
    csv_path = os.path.join(runs_dir, rec["serve"]["requests_csv"])
    out = subprocess.run(base_cmd(g, runs_dir, rec) + ["--measured", csv_path, "--replications", str(REPLICATIONS), "--json"] + extra,
                         capture_output=True, text=True, check=True).stdout
    return {m["metric"]: m["error_pct"] for m in json.loads(out)["metrics"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpuplan", default="target/release/gpuplan")
    ap.add_argument("--runs", default="calibration/runs/serve")
    ap.add_argument("--fit-split", default="graph-fit", help="the decode-graph fit split; full-graph runs of it fit the later chunks")
    ap.add_argument("--counted-bytes", type=float, default=40.0,
                    help="the bytes per later-chunk score the simulator (the binary given) prices: LATER_CHUNK_BYTES_PER_SCORE")
    ap.add_argument("--profile-suffix", default="", help="price with the profiles PROFILE names plus this suffix (--profile-suffix=-b)")
    a = ap.parse_args()
    if a.profile_suffix:
        for k in PROFILE:
            PROFILE[k] += a.profile_suffix
        print("profiles: " + ", ".join(f"{k} -> {v}" for k, v in sorted(PROFILE.items())))
    recs = graph_runs(a.runs)
    fit = [r for r in recs if r["split"] == a.fit_split]
    if not fit:
        raise SystemExit(f"no graph runs of split {a.fit_split} in {a.runs}")

    gaps = [x for r in fit for x in graph_gaps(a.runs, r)]
    host_us = round(1e6 * statistics.mean(gaps))
    # The full-graph fit runs' prefill graphs read no cache; their differences do not depend on the terms.
    pre = [x for r in fit if graph_mode(r) == "full" for x in prefill_diffs(a.gpuplan, a.runs, r)]
    for l in sorted({l for l, _, _, _ in pre}):
        m = [(n, d) for ll, n, d, _ in pre if ll == l]
        print(f"{l} layers: measured - simulated prefill graph pass {1e6 * sum(n * d for n, d in m) / sum(n for n, _ in m) / l:.1f} us per layer "
              f"({sum(n for n, _ in m)} passes in {len(m)} lengths)")
    layer_us, per_gb_us, replays = 0.0, 0.0, []
    for _ in range(10):
        dec = [x for r in fit for x in shape_diffs(a.gpuplan, a.runs, r, host_us, layer_us, per_gb_us)]
        rows = dec + pre
        # Flat: one term per layer (iterations x layers weigh each shape's difference per layer).
        per_layer = sum(n * d for l, n, d, _ in rows) / sum(n * l for l, n, _, _ in rows)
        # Weighted least squares of the difference per layer, d / layers = A - B x GB of cache read per layer.
        w = [n * l for l, n, _, _ in rows]
        y = [1e6 * d / l for l, _, d, _ in rows]
        x = [gb for _, _, _, gb in rows]
        sw = sum(w)
        mx, my = sum(wi * xi for wi, xi in zip(w, x)) / sw, sum(wi * yi for wi, yi in zip(w, y)) / sw
        slope = sum(wi * (xi - mx) * (yi - my) for wi, xi, yi in zip(w, x, y)) / sum(wi * (xi - mx) ** 2 for wi, xi in zip(w, x))
        fa, fb = my - slope * mx, -slope
        rms_flat = (sum(wi * (yi - 1e6 * per_layer) ** 2 for wi, yi in zip(w, y)) / sw) ** 0.5
        rms_fit = (sum(wi * (yi - fa + fb * xi) ** 2 for wi, xi, yi in zip(w, x, y)) / sw) ** 0.5
        replays.append(f"{layer_us:.1f} - {per_gb_us:.1f}/GB -> {fa:.1f} - {fb:.1f}/GB ({sum(n for _, n, _, _ in dec)} decode iterations)")
        if abs(fa - layer_us) < 1.0 and abs(fb - per_gb_us) < 2.0:
            break
        layer_us, per_gb_us = round(fa, 1), round(fb, 1)
    print(f"per-layer term the shapes were replayed at -> fitted, us - us per GB of cache read per layer (graph host term {host_us} us): " + "; ".join(replays))
    for l in sorted({l for l, _, _, _ in dec}):
        m = [(n, d, gb) for ll, n, d, gb in dec if ll == l]
        cnt = sum(n for n, _, _ in m)
        print(f"{l} layers: measured - simulated graph iteration {1e6 * sum(n * d for n, d, _ in m) / cnt:.1f} us "
              f"({cnt} iterations in {len(m)} shapes), {1e6 * sum(n * d for n, d, _ in m) / cnt / l:.1f} us per layer at "
              f"{sum(n * gb for n, _, gb in m) / cnt:.3f} GB of cache read per layer (mean)")
        bins = collections.defaultdict(lambda: [0, 0.0])
        for n, d, gb in m:
            b = bins[min(int(gb / 0.05), 8)]
            b[0] += n
            b[1] += n * d
        print("  per layer by GB of cache read per layer: " + ", ".join(
            f"{0.05 * k:.2f}{'+' if k == 8 else f'-{0.05 * (k + 1):.2f}'}: {1e6 * v[1] / v[0] / l:.0f} us ({v[0]})" for k, v in sorted(bins.items())))
    # Weighted least squares of d = a + b * layers over the decode shapes (the per-iteration alternative).
    w = sum(n for _, n, _, _ in dec)
    ml = sum(n * l for l, n, _, _ in dec) / w
    md = sum(n * d for _, n, d, _ in dec) / w
    b = sum(n * (l - ml) * (d - md) for l, n, d, _ in dec) / sum(n * (l - ml) ** 2 for l, n, _, _ in dec)
    dec_per_layer = sum(n * d for l, n, d, _ in dec) / sum(n * l for l, n, _, _ in dec)
    print(f"host time between a graph iteration and the next: mean {1e6 * statistics.mean(gaps):.0f} us, median "
          f"{1e6 * statistics.median(gaps):.0f} us ({len(gaps)} gaps)")
    print(f"flat per-layer term: {1e6 * per_layer:.1f} us over decode shapes and prefill passes, {1e6 * dec_per_layer:.1f} over the decode shapes "
          f"(rms of the per-layer differences about the first {rms_flat:.1f} us); decode shapes' in-step joint fit: {1e6 * (md - b * ml):.1f} us per iteration + {1e6 * b:.1f} us per layer")
    print(f"fit ({a.fit_split}, decode shapes and prefill passes): graph_overhead_us = [{1e6 * statistics.mean(gaps):.0f}, {fa:.1f}, {fb:.1f}] "
          f"(per layer {fa:.1f} us less {fb:.1f} us per GB of cache the graph reads per layer; rms about it {rms_fit:.1f} us)")

    runs_ratios = [ratios(a.runs, r) for r in fit]
    rat = sorted(x for v in runs_ratios for x in v if x is not None)
    print(f"graph iteration-time spread ({len(rat)} iterations), quantiles at {SPREAD_P}: {[round(quantile(rat, p), 3) for p in SPREAD_P]}")
    n_pairs, corr = lag1_of(runs_ratios)
    print(f"lag-1 correlation of consecutive graph iterations' normal scores ({n_pairs} pairs): {corr:.2f}")

    full = [r for r in fit if graph_mode(r) == "full"]
    if full:
        later = [x for r in full for x in later_chunk_bytes(a.gpuplan, a.runs, r, counted=a.counted_bytes)]
        print(f"eager later chunks of >= 500 tokens in the full-graph fit runs ({len(later)}): HBM bytes per score "
              f"{sorted(round(b) for _, _, b in later)}; median {statistics.median(b for _, _, b in later):.0f} "
              f"(the simulator's bytes per score at the time: {a.counted_bytes:.0f})")

    jobs = []
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as ex:
        for r in recs:
            jobs.append((r, "defaults", ex.submit(score, a.gpuplan, a.runs, r, [])))
            p = probe_ms(a.runs, r)
            if p is not None:
                jobs.append((r, f"probe {p} ms", ex.submit(score, a.gpuplan, a.runs, r, ["--host-probe-ms", str(p)])))
        print(f"\n{'run':22} {'split':12} {'host':18}" + "".join(f"{m:>21}" for m in METRICS) + "   measured P99 90% interval (TTFT; TPOT)")
        for r, how, fut in jobs:
            e = fut.result()
            n, iv = p99_interval(a.runs, r)
            print(f"{r['run_id']:22} {r['split']:12} {how:18}" + "".join(f"{e[m]:>+20.1f}%" for m in METRICS)
                  + f"   {iv[0][0]:+.0f}..{iv[0][1]:+.0f}%; {iv[1][0]:+.0f}..{iv[1][1]:+.0f}% ({n} requests)")


if __name__ == "__main__":
    main()
