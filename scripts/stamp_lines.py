#!/usr/bin/env python3
"""Run a command and write its output (stdout and stderr merged) one line a row as
`<seconds since start its first byte arrived>\t<line>`, the lines split at `\\n` and `\\r` and
timed as `gpuplan measure` splits and times them (crates/gpuplan-gpu/src/measure/job.rs), so that a
Trainer log's tqdm redraws keep the times measure sees. Used to capture the test log of `measure`'s hf-trainer parser.

Usage: stamp_lines.py OUT.tsv -- COMMAND ...
"""
import subprocess
import sys
import time


def main():
    out, sep, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
    if sep != "--" or not cmd:
        sys.exit("usage: stamp_lines.py OUT.tsv -- COMMAND ...")
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    buf = bytearray()
    started = None
    with open(out, "w") as f:
        while True:
            b = p.stdout.read(1)
            if not b:
                break
            if b in (b"\n", b"\r"):
                if buf:
                    line = buf.decode("utf-8", "replace").replace("\t", " ")
                    f.write(f"{started:.6f}\t{line}\n")
                    buf.clear()
                started = None
            else:
                if started is None:
                    started = time.monotonic() - t0
                buf += b
        if buf:
            f.write(f"{started:.6f}\t{buf.decode('utf-8', 'replace')}\n")
    sys.exit(p.wait())


if __name__ == "__main__":
    main()
