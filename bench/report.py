#!/usr/bin/env python3
"""Turns bench/run-all.sh's raw outputs into BENCHMARKS.md's first section and PNG plots.

Usage: bench/report.py RESULTS_DIR BENCHMARKS.md PLOTS_DIR
Replaces the text between the run-all markers in BENCHMARKS.md (adds them at the top
if missing); draws the plots with gnuplot. Only what the outputs say is reported.
"""
import datetime
import os
import re
import statistics
import subprocess
import sys

BEGIN, END = "<!-- run-all:begin -->", "<!-- run-all:end -->"


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def drain_runs(results):
    runs = []
    for name in sorted(os.listdir(results)):
        if re.fullmatch(r"drain-\d+\.txt", name):
            data = {}
            for line in read(os.path.join(results, name)).splitlines():
                m = re.fullmatch(r"DATA (\S+) (\S+)", line.strip())
                if m:
                    data[m.group(1)] = float(m.group(2))
            if data:
                runs.append(data)
    return runs


def concurrency(results):
    """{latency_ms: [(receives, msg/s)]} and {latency_ms: auto msg/s settled}."""
    path = os.path.join(results, "concurrency.txt")
    sweep, auto = {}, {}
    if not os.path.exists(path):
        return sweep, auto
    latency = None
    for line in read(path).splitlines():
        m = re.match(r"latency (\d+) ms", line)
        if m:
            latency = int(m.group(1))
            sweep[latency] = []
            continue
        if line.startswith("slow consumer"):
            latency = None
        if latency is None:
            continue
        m = re.match(r"\s+(\d+)\s+(\d+)\s", line)
        if m:
            sweep[latency].append((int(m.group(1)), float(m.group(2))))
        m = re.match(r"\s+auto\s+(\d+)\s+(\d+)", line)
        if m:
            auto[latency] = float(m.group(2))
    return sweep, auto


PIPELINE_LABELS = [
    ("ceiling", "bare client (the ceiling): receive + delete, no work"),
    ("ceiling-db", "bare client with the same PostgreSQL writes (the database ceiling)"),
    ("ceiling-db-values", "the same, multi-row VALUES statements (the sink's before 2026-12-04)"),
    ("ceiling-db-select-first", "the same, select-then-insert (seed 001's rejected dedupe design)"),
    ("ceiling-db-per-record", "the same, one record per statement"),
    ("ceiling-db-select-first-per-record", "the same, select-then-insert, one record per statement"),
    ("ceiling-db-copy", "the same, binary COPY into a staging table, then INSERT ... SELECT"),
    ("sluice", "`sluice run` -> PostgreSQL, batch 100 x 4 writers"),
    ("sluice-per-record", "`sluice run`, per-record writes (batch 1 x 16 writers)"),
    ("node-sqs-consumer", "Node: sqs-consumer x 8 + pg pool"),
    ("node-pool", "Node: @aws-sdk, 16 receive loops + pg pool"),
    ("fifo-ceiling", "FIFO (20 groups): bare client, no work"),
    ("fifo-ceiling-db", "FIFO (20 groups): bare client with the same writes (the FIFO database ceiling)"),
    ("sluice-fifo", "FIFO (20 groups): `sluice run`, batch 100 x 4 writers"),
]


def pipeline(results, name="pipeline.txt"):
    """{contender id: [{rate, cpu_us, rss_mib, ratio, ...} per run]} from bench_pipeline's DATA lines."""
    path = os.path.join(results, name)
    rows = {}
    if not os.path.exists(path):
        return rows
    for line in read(path).splitlines():
        if not line.startswith("DATA pipeline "):
            continue
        fields = dict(kv.split("=", 1) for kv in line.split()[2:])
        rows.setdefault(fields.pop("id"), []).append({k: float(v) for k, v in fields.items()})
    return rows


def pipeline_table(rows, command):
    runs = max((len(v) for v in rows.values()), default=0)
    command = command.format(runs=runs)
    out = [
        f"### Pipeline into PostgreSQL, timed from outside: `{command}`, {runs} runs",
        "",
        "| contender | msg/s | share of the ceiling | share of the database ceiling | CPU µs/msg | peak RSS MiB | emulator / PostgreSQL CPU s |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, label in PIPELINE_LABELS:
        if key not in rows:
            continue
        r = rows[key]
        col = lambda k, fmt: spread([x[k] for x in r], fmt)
        wrong = "" if all(x.get("rows_ok", 1) for x in r) else " **(rows wrong)**"
        out.append(
            f"| {label}{wrong} | {col('rate', '{:,.0f}')} | {col('ratio', '{:.2f}')} | "
            f"{col('db_ratio', '{:.2f}') if any(x.get('db_ratio', 0) > 0 for x in r) else '-'} | "
            f"{col('cpu_us', '{:.1f}')} | {col('rss_mib', '{:.0f}')} | "
            f"{statistics.median(x['emulator_cpu_s'] for x in r):.1f} / "
            f"{statistics.median(x['database_cpu_s'] for x in r):.1f} |"
        )
    out.append("")
    return out


def spread(values, fmt="{:,.0f}"):
    if not values:
        return "-"
    if len(values) == 1:
        return fmt.format(values[0])
    return "{} ({}-{})".format(
        fmt.format(statistics.median(values)), fmt.format(min(values)), fmt.format(max(values))
    )


def gnuplot(script):
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def plots(runs, sweep, pipe, plots_dir):
    made = []
    os.makedirs(plots_dir, exist_ok=True)
    term = "set terminal pngcairo size 720,420 font 'sans,10'\n"
    if sweep:
        data = os.path.join(plots_dir, "throughput_vs_receives.dat")
        with open(data, "w", encoding="utf-8") as f:
            for latency in sorted(sweep):
                f.write(f"# latency {latency} ms\n")
                for receives, rate in sweep[latency]:
                    f.write(f"{receives} {rate}\n")
                f.write("\n\n")
        png = os.path.join(plots_dir, "throughput_vs_receives.png")
        lines = ", ".join(
            f"'{data}' index {i} with linespoints lw 2 title '{latency} ms round trip added'"
            for i, latency in enumerate(sorted(sweep))
        )
        gnuplot(
            term
            + f"set output '{png}'\nset logscale x 2\nset xlabel 'concurrent receives'\n"
            "set ylabel 'messages/s (observed from outside)'\nset key left top\nset grid\n"
            "set title 'Throughput against concurrent receives, no-op handler'\n"
            f"plot {lines}\n"
        )
        made.append(("Throughput against concurrent receives, with latency injected", png))
    bars = []
    if runs:
        for label, key in [
            ("bare client (ceiling)", "ceiling_cpu_us"),
            ("container, inline", "inline_cpu_us"),
            ("container, 4 workers", "workers_cpu_us"),
        ]:
            values = [r[key] for r in runs if key in r]
            if values:
                bars.append((label, statistics.median(values)))
    # No '@' in labels: gnuplot's enhanced text reads it as markup.
    for key, label in [("ceiling", "pipeline: bare client"),
                       ("ceiling-db", "pipeline: bare client + DB writes"),
                       ("sluice", "pipeline: sluice run"),
                       ("node-sqs-consumer", "pipeline: Node sqs-consumer"),
                       ("node-pool", "pipeline: Node AWS SDK pool")]:
        if key in pipe:
            bars.append((label, statistics.median(x["cpu_us"] for x in pipe[key])))
    if bars:
        data = os.path.join(plots_dir, "cpu_per_message.dat")
        with open(data, "w", encoding="utf-8") as f:
            for label, value in bars:
                f.write(f'"{label}" {value}\n')
        png = os.path.join(plots_dir, "cpu_per_message.png")
        gnuplot(
            term.replace("720,420", "820,460")
            + f"set output '{png}'\nset style fill solid 0.6\nset boxwidth 0.6\n"
            "set ylabel 'CPU µs per message (the process alone)'\nset xtics rotate by -30\n"
            "set grid ytics\nset title 'CPU per message, per contender (medians)'\n"
            "set yrange [0:*]\n"
            f"plot '{data}' using 0:2:xtic(1) with boxes notitle, "
            f"'' using 0:2:(sprintf('%.1f',$2)) with labels offset 0,0.7 notitle\n"
        )
        made.append(("CPU per message, per contender", png))
    if runs and all(k in runs[0] for k in ("rss_base_kib", "rss_kib_1000", "rss_kib_10000")):
        data = os.path.join(plots_dir, "rss_vs_max_in_flight.dat")
        with open(data, "w", encoding="utf-8") as f:
            for held, key in [(0, "rss_base_kib"), (1000, "rss_kib_1000"), (10000, "rss_kib_10000")]:
                f.write(f"{held} {statistics.median(r[key] for r in runs) / 1024}\n")
        png = os.path.join(plots_dir, "rss_vs_max_in_flight.png")
        gnuplot(
            term
            + f"set output '{png}'\nset xlabel 'messages held (max_in_flight), 1 KiB bodies'\n"
            "set ylabel 'process RSS, MiB'\nset grid\nset yrange [0:*]\n"
            "set title 'Memory against max_in_flight'\n"
            f"plot '{data}' with linespoints lw 2 pt 7 notitle\n"
        )
        made.append(("Memory against max_in_flight", png))
    return made


def section(results, runs, sweep, auto, pipe, pinned, made, benchmarks_dir):
    # The results' own date (bench/results/<date>/), not the day the report was made.
    name = os.path.basename(os.path.normpath(results))
    today = name if re.fullmatch(r"\d{4}-\d{2}-\d{2}", name) else datetime.date.today().isoformat()
    out = [
        BEGIN,
        "## Every benchmark in one run (`bench/run-all.sh`)",
        "",
        f"Generated by `bench/run-all.sh` on {today} from `{results}/` (raw outputs there); "
        "do not edit by hand (a test regenerates it and compares). Drain and pipeline figures "
        "are the median of the runs, with the lowest and highest in brackets, each column on "
        "its own (a row's medians may come from different runs); the latency sweep is one "
        "run, the micro-benchmarks and their peers the median of three repetitions. CPU is the measured process's own user + system "
        "time per message (the emulator and PostgreSQL not included). Within a table every "
        "contender is timed the same way in the same run; how each bench times is said in its "
        "own section further down.",
        "",
    ]
    if runs:
        col = lambda key, fmt="{:,.0f}": spread([r[key] for r in runs if key in r], fmt)
        out += [
            f"### Drain, no-op handler: `build/bench/bench_drain 40000 8`, {len(runs)} runs",
            "",
            "| contender | msg/s | CPU µs/msg | CPU vs the bare client | SQS requests per 1,000 messages |",
            "|---|---|---|---|---|",
        ]
        for label, key in [
            ("bare client (the ceiling: receive + delete, no work)", "ceiling"),
            ("container, handlers on the I/O thread (`worker_threads: 0`)", "inline"),
            ("container, 4 worker threads", "workers"),
        ]:
            ratio = (
                "1.00"
                if key == "ceiling"
                else spread([r[key + "_cpu_us"] / r["ceiling_cpu_us"] for r in runs], "{:.2f}")
            )
            out.append(
                f"| {label} | {col(key + '_rate')} | {col(key + '_cpu_us', '{:.1f}')} | "
                f"{ratio} | {col(key + '_requests_per_1000')} |"
            )
        out.append("")
        if "bytes_per_held_message" in runs[0]:
            out += [
                "| memory | figure |",
                "|---|---|",
                f"| resident bytes per held message (5,000 held, ~300 B bodies) | {col('bytes_per_held_message')} |",
                f"| process RSS, nothing held | {spread([r['rss_base_kib'] / 1024 for r in runs], '{:.0f}')} MiB |",
                f"| process RSS holding 1,000 messages of 1 KiB | {spread([r['rss_kib_1000'] / 1024 for r in runs], '{:.0f}')} MiB |",
                f"| process RSS holding 10,000 messages of 1 KiB | {spread([r['rss_kib_10000'] / 1024 for r in runs], '{:.0f}')} MiB |",
                "",
            ]
        if "hol_alone_s" in runs[0]:
            cost = [(r["hol_with_slow_s"] / r["hol_alone_s"] - 1) * 100 for r in runs]
            out += [
                "Head-of-line: 8,000 messages of 1 ms on 16 workers (`max_in_flight` 100), alone "
                f"{spread([r['hol_alone_s'] for r in runs], '{:.2f}')} s, with one 10 s message among "
                f"them {spread([r['hol_with_slow_s'] for r in runs], '{:.2f}')} s: "
                f"**{spread(cost, '{:+.1f}')} %**.",
                "",
            ]
    if sweep:
        latencies = sorted(sweep)
        levels = sorted({n for rows in sweep.values() for n, _ in rows})
        out += [
            "### Throughput against concurrent receives: `build/bench/bench_concurrency 6`",
            "",
            "| receives | " + " | ".join(f"{l} ms" for l in latencies) + " |",
            "|---" * (len(latencies) + 1) + "|",
        ]
        for n in levels:
            cells = []
            for l in latencies:
                rate = dict(sweep[l]).get(n)
                cells.append(f"{rate:,.0f}" if rate is not None else "")
            out.append(f"| {n} | " + " | ".join(cells) + " |")
        if auto:
            out.append("| auto, settled | " + " | ".join(
                f"{auto[l]:,.0f}" if l in auto else "" for l in latencies) + " |")
        out.append("")
    if pipe:
        out += pipeline_table(pipe, "build/bench/bench_pipeline 30000 --node --repeat {runs}")
        out += [
            "Every contender is spawned on its own queue holding the same events; the clock runs "
            "from spawn until the queue is empty and the table holds every distinct record; CPU "
            "is the contender's own (its process group's, read from /proc up to the clock's "
            "stop: shutdown not counted), RSS its peak (VmHWM); the emulator's and PostgreSQL's "
            "CPU are their own processes' during the run. The emulator and PostgreSQL share "
            "the two cores with the contender.",
            "",
        ]
    if pinned:
        out += pipeline_table(pinned, "build/bench/bench_pipeline 30000 --pin --repeat {runs}")
        out += [
            "Pinned: the emulator alone on CPU 0; PostgreSQL, the contender and the harness on "
            "CPU 1, so that the consumer's CPU is never taken from the queue server (the share "
            "of the ceiling then says how close the consumer and its database, on one core, "
            "come to what the emulator serves).",
            "",
        ]
    micro = os.path.join(results, "micro.txt")
    if os.path.exists(micro):
        lines = read(micro).splitlines()
        medians = {}
        for l in lines:
            m = re.match(r"(BM_\S+)_median\s+([\d.]+) ns", l)
            if m:
                medians[m.group(1)] = float(m.group(2)) / 1000
            m = re.match(r"(botocore_\S+|js_sdk_\S+) ([\d.]+)$", l)
            if m:
                medians[m.group(1)] = float(m.group(2))
        out += ["### Micro-benchmarks: `bench/run-micro.sh`", ""]
        pairs = [
            ("sign one ReceiveMessage request (fresh timestamp)", "BM_SignSqsRequest",
             "botocore (Python)", "botocore_sign_sqs_request_us"),
            ("sign + decode a 10-message answer + verify its digests", "BM_ReceiveClientWork_Sluice",
             "@aws-sdk/client-sqs (Node)", "js_sdk_receive_client_work_us"),
            ("decode a 10-message answer + verify its digests", "BM_DecodeReceive10_Sluice",
             "a decoder on nlohmann::json (C++)", "BM_DecodeReceive10_Nlohmann"),
            ("the same as views, no copies (the container's path)", "BM_DecodeReceive10_SluiceViews",
             "a decoder on nlohmann::json (C++)", "BM_DecodeReceive10_Nlohmann"),
        ]
        rows = [(w, medians[a], p, medians[b]) for w, a, p, b in pairs if a in medians and b in medians]
        if rows:
            out += ["| work | Sluice µs | peer | peer µs | peer / Sluice |", "|---|---|---|---|---|"]
            out += [f"| {w} | {a:.1f} | {p} | {b:.1f} | {b / a:.1f}x |" for w, a, p, b in rows]
            out.append("")
        out += ["```"]
        out += [l for l in lines if re.match(r"(Benchmark|BM_\S+_(median|cv)|botocore_|js_sdk_)", l)]
        out += ["```", ""]
    for title, png in made:
        out += [f"![{title}]({os.path.relpath(png, benchmarks_dir)})", ""]
    out.append(END)
    return "\n".join(out)


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: bench/report.py RESULTS_DIR BENCHMARKS.md PLOTS_DIR")
    results, benchmarks, plots_dir = sys.argv[1:]
    runs = drain_runs(results)
    if not runs:
        sys.exit(f"report: no drain results (DATA lines) in {results}")
    sweep, auto = concurrency(results)
    pipe = pipeline(results)
    pinned = pipeline(results, "pipeline-pinned.txt")
    made = plots(runs, sweep, pipe, plots_dir)
    text = read(benchmarks)
    block = section(results, runs, sweep, auto, pipe, pinned, made,
                    os.path.dirname(benchmarks) or ".")
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:  # after the title and its first paragraph
        head, sep, body = text.partition("\n\n## ")
        text = head + "\n\n" + block + ("\n\n## " + body if sep else "\n")
    with open(benchmarks, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
