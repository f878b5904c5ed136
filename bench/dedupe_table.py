#!/usr/bin/env python3
"""Seed 001's dedupe table from bench/seeds.sh's raw output: for each section (a network
setting) and each form (batches of 100, one record per statement), insert-first against
select-then-insert: rates, the ratio within each round and PostgreSQL's CPU per stored
row as a multiple of insert-first's, medians of the rounds with their range.
Usage: bench/dedupe_table.py RAW_OUTPUT"""
import re
import statistics
import sys

PAIRS = [("batches of 100", "ceiling-db", "ceiling-db-select-first"),
         ("one record per statement", "ceiling-db-per-record",
          "ceiling-db-select-first-per-record")]


def spread(values, fmt):
    values = sorted(values)
    return f"{fmt.format(statistics.median(values))} ({fmt.format(values[0])}-{fmt.format(values[-1])})"


def main(path):
    text = open(path).read()
    print("| network | writes | insert-first msg/s | select-then-insert msg/s | "
          "select-then-insert of insert-first | its PostgreSQL CPU per row, x insert-first |")
    print("|---|---|---:|---:|---:|---:|")
    for section in text.split("### ")[1:]:
        network = section.splitlines()[0].strip()
        runs = {}
        for line in section.splitlines():
            if line.startswith("DATA pipeline"):
                kv = dict(x.split("=", 1) for x in line.split()[2:])
                runs.setdefault(kv["id"], {})[kv["run"]] = kv
        for writes, first, select in PAIRS:
            if first not in runs or select not in runs:
                continue
            rounds = sorted(set(runs[first]) & set(runs[select]))
            a = [float(runs[first][r]["rate"]) for r in rounds]
            b = [float(runs[select][r]["rate"]) for r in rounds]
            ratio = [y / x for x, y in zip(a, b)]
            cpu = [float(runs[select][r]["database_cpu_s"]) / float(runs[first][r]["database_cpu_s"])
                   for r in rounds]
            print(f"| {network} | {writes} | {spread(a, '{:,.0f}')} | {spread(b, '{:,.0f}')} | "
                  f"{spread(ratio, '{:.2f}')} | {spread(cpu, '{:.2f}')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
