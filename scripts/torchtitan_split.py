#!/usr/bin/env python3
"""Fix the fit/test split of torchtitan's published rows, before anything is scored.

Reads ../shared/reference/torchtitan_training.csv (or the path given) and writes
tests/data/published/torchtitan_training_dev.csv: the source rows unchanged, with two columns added in
front (`dev_row`, `split`). The rule is in tests/data/published/torchtitan_split.md: the rows of each
published table (source file and table name) in source order, positions 0, 3, 6, ... test, the rest
fit. Running this again on the same source gives the same file, byte for byte.

    python3 scripts/torchtitan_split.py [SOURCE.csv] [OUT.csv]
"""

import csv
import io
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SOURCE = os.path.join(ROOT, "..", "shared", "reference", "torchtitan_training.csv")
OUT = os.path.join(ROOT, "tests", "data", "published", "torchtitan_training_dev.csv")


def table_key(row):
    # The source file (the part after the commit's ` : `) and the table's name.
    return (row["source"].split(" : ")[-1].split(" (")[0], row["table"])


def main():
    source = sys.argv[1] if len(sys.argv) > 1 else SOURCE
    out = sys.argv[2] if len(sys.argv) > 2 else OUT
    with open(source, newline="") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames
        rows = list(reader)
    seen = {}
    splits = []
    for row in rows:
        k = table_key(row)
        pos = seen.get(k, 0)
        seen[k] = pos + 1
        splits.append("test" if pos % 3 == 0 else "fit")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["dev_row", "split"] + fields)
    for i, (row, split) in enumerate(zip(rows, splits)):
        w.writerow([i, split] + [row[c] for c in fields])
    with open(out + ".tmp", "w", newline="") as f:
        f.write(buf.getvalue())
    os.replace(out + ".tmp", out)
    n_test = splits.count("test")
    print(f"wrote {out}: {len(rows)} rows, {len(rows) - n_test} fit, {n_test} test, {len(seen)} tables")


if __name__ == "__main__":
    main()
