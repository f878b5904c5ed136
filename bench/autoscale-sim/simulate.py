"""Seed 004's scenario, scaled in time, run against the local emulator and PostgreSQL
(bench/autoscale-sim/run.sh starts them). Each scenario gets a fresh FIFO queue of
groups x per_group messages (sent in order within each group) and a fresh table whose
insert trigger sleeps work_ms per row: the work of one message. Tasks are `sluice run`
processes; the supervisor starts and stops them, fixed or following
`sluice autoscale --serve`. The clock stops when the queue is empty and the table holds
every message; then every task is stopped (SIGTERM) and billed to its exit.
"""

import argparse
import json
import os
import statistics
import socket
import subprocess
import sys
import time
import urllib.request

import boto3

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from supervisor import Supervisor, autoscale_reader  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def psql(dsn, sql):
    out = subprocess.run(["psql", dsn, "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-c", sql],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


# (name, tasks: a number or "signal", spare, capacity: messages a task works on at once)
SCENARIOS = [
    ("fixed-30", 30, 0, 1),
    ("fixed-5", 5, 0, 1),
    ("signal+1", "signal", 1, 1),
    ("signal+2", "signal", 2, 1),
    ("fixed-1 x10", 1, 0, 10),
    ("signal+1 x10", "signal", 1, 10),
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sluice", required=True)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--dsn", required=True)
    p.add_argument("--work-dir", required=True)
    p.add_argument("--groups", type=int, default=10)
    p.add_argument("--per-group", type=int, default=100)
    p.add_argument("--work-ms", type=int, default=100)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--max-tasks", type=int, default=30)
    p.add_argument("--scale-in-after", type=float, default=3.0)
    p.add_argument("--timeline", default="")
    a = p.parse_args()
    for name, value in [("--groups", a.groups), ("--per-group", a.per_group),
                        ("--work-ms", a.work_ms), ("--repeat", a.repeat)]:
        if value < 1:
            p.error(f"{name} expects a positive number, got {value}")

    sqs = boto3.client("sqs", endpoint_url=a.endpoint, region_name="us-east-1")
    total = a.groups * a.per_group
    work_s = total * a.work_ms / 1000.0
    print(f"# autoscale-sim: {a.groups} groups x {a.per_group} messages, {a.work_ms} ms of "
          f"work each ({work_s:.0f} task-seconds of work), signal period 1s x 3, "
          f"scale-in after {a.scale_in_after:g} s, at most {a.max_tasks} tasks", flush=True)
    results = []
    timelines = {}
    run_id = f"{os.getpid()}"
    for r in range(a.repeat):
        for index, (name, tasks, spare, capacity) in enumerate(SCENARIOS):
            tag = f"s{run_id}_{r}_{index}"
            url = sqs.create_queue(QueueName=f"sim-{tag}.fifo",
                                   Attributes={"FifoQueue": "true",
                                               "VisibilityTimeout": "30"})["QueueUrl"]
            entries = []
            for seq in range(a.per_group):
                for g in range(a.groups):
                    entries.append({"Id": str(len(entries) % 10),
                                    "MessageBody": json.dumps({"group": f"g{g}", "seq": seq}),
                                    "MessageGroupId": f"g{g}",
                                    "MessageDeduplicationId": f"g{g}-{seq}"})
                    if len(entries) % 10 == 0:
                        sqs.send_message_batch(QueueUrl=url, Entries=entries[-10:])
            if len(entries) % 10:
                sqs.send_message_batch(QueueUrl=url, Entries=entries[-(len(entries) % 10):])
            table = f"sim_{tag}"
            psql(a.dsn, f"CREATE TABLE {table} (hash text NOT NULL, message_id text, document "
                        f"jsonb NOT NULL, written_at timestamptz NOT NULL DEFAULT now())")
            psql(a.dsn, f"CREATE FUNCTION {table}_work() RETURNS trigger AS 'BEGIN PERFORM "
                        f"pg_sleep({a.work_ms / 1000.0}); RETURN NEW; END' LANGUAGE plpgsql")
            psql(a.dsn, f"CREATE TRIGGER work BEFORE INSERT ON {table} FOR EACH ROW EXECUTE "
                        f"FUNCTION {table}_work()")
            config = os.path.join(a.work_dir, f"{tag}.yaml")
            with open(config, "w") as f:
                f.write(f"""source:
  sqs:
    queue_url: {url}
    endpoint_url: {a.endpoint}
    region: us-east-1
    poll_wait: 1s
    delete_flush_interval: 10ms
  concurrency: 1
  max_in_flight: {capacity}
normalize:
  fields:
    - {{name: group, from: /group, required: true}}
    - {{name: seq, from: /seq, type: integer, required: true}}
identity:
  versions:
    V1: [group, seq]
sink:
  type: postgres
  table: {table}
  batch_size: 1
  writers: {capacity}
  postgres:
    dsn: "{a.dsn}"
metrics:
  listen: ''
logging:
  level: error
""")
            logs = open(os.path.join(a.work_dir, f"{tag}.log"), "w")

            def start_task():
                return subprocess.Popen([a.sluice, "run", "--config", config],
                                        stdout=subprocess.DEVNULL, stderr=logs)

            signal_process = None
            if tasks == "signal":
                port = free_port()
                signal_process = subprocess.Popen(
                    [a.sluice, "autoscale", "--queue-url", url, "--endpoint-url", a.endpoint,
                     "--region", "us-east-1", "--period", "1s", "--periods", "3",
                     "--sample-every", "100ms", "--spare", str(spare), "--capacity",
                     str(capacity), "--running", "1", "--serve", f"127.0.0.1:{port}"],
                    stdout=subprocess.DEVNULL, stderr=logs)
                read = autoscale_reader(f"http://127.0.0.1:{port}/autoscale")
                for _ in range(100):  # up once it answers
                    try:
                        read()
                        break
                    except (OSError, ValueError, KeyError):
                        time.sleep(0.1)
            supervisor = Supervisor(start_task, minimum=1, maximum=a.max_tasks,
                                    deadline=10.0, scale_in_after=a.scale_in_after)
            started = time.monotonic()
            last_check = [0.0]
            done_at = [None]

            def drained():
                now = time.monotonic()
                if now - last_check[0] < 0.2:
                    return False
                last_check[0] = now
                attrs = sqs.get_queue_attributes(
                    QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages",
                                                  "ApproximateNumberOfMessagesNotVisible"])
                left = sum(int(v) for v in attrs["Attributes"].values())
                if left == 0 and int(psql(a.dsn, f"SELECT count(*) FROM {table}")) == total:
                    done_at[0] = now
                    return True
                return now - started > 900
            if tasks == "signal":
                supervisor.follow(read, drained, interval=0.1)
            else:
                supervisor.scale_to(tasks)
                supervisor.follow(lambda: tasks, drained, interval=0.1)
            drain_s = (done_at[0] or time.monotonic()) - started
            peak = max(n for _, n, _ in supervisor.timeline)
            supervisor.stop_all()
            if signal_process:
                signal_process.terminate()
                signal_process.wait()
            logs.close()
            rows = int(psql(a.dsn, f"SELECT count(*) FROM {table}"))
            distinct = int(psql(a.dsn, f"SELECT count(DISTINCT hash) FROM {table}"))
            bad_order = int(psql(a.dsn, f"""SELECT count(*) FROM (SELECT (document->>'seq')::int AS s,
                lag((document->>'seq')::int) OVER (PARTITION BY document->>'group'
                ORDER BY written_at, ctid) AS p FROM {table}) x WHERE p IS NOT NULL AND s <> p + 1"""))
            # Idle capacity: what the tasks could have worked on (capacity messages at once
            # each, for their whole life) and did not.
            idle = supervisor.task_seconds * capacity - work_s
            result = dict(scenario=name, run=r + 1, drain_s=drain_s,
                          task_seconds=supervisor.task_seconds, idle_task_seconds=idle,
                          peak_tasks=peak, killed=supervisor.killed, rows=rows,
                          distinct=distinct, out_of_order=bad_order,
                          drained=done_at[0] is not None)
            results.append(result)
            print(f"{name:<13} run={r + 1} drained={result['drained']} drain={drain_s:.1f}s "
                  f"task_seconds={supervisor.task_seconds:.1f} idle={idle:.1f} peak_tasks={peak} "
                  f"killed={supervisor.killed} rows={rows} distinct={distinct} "
                  f"out_of_order={bad_order}", flush=True)
            if r == 0:
                timelines[name] = [(t - started, n) for t, n, _ in supervisor.timeline]
    print("\n| scenario | time to drain (s) | task-seconds (the bill) | idle capacity "
          "(message-seconds) | peak tasks | work done per task-second |")
    print("|---|---:|---:|---:|---:|---:|")
    # Each column's own median over the runs, with its range when there were several.
    def cell(runs, value, digits):
        values = sorted(value(x) for x in runs)
        median = f"{statistics.median(values):.{digits}f}"
        if len(values) == 1 or values[0] == values[-1]:
            return median
        return f"{median} ({values[0]:.{digits}f}-{values[-1]:.{digits}f})"
    for name, *_ in SCENARIOS:
        runs = [x for x in results if x["scenario"] == name]
        print(f"| {name} | {cell(runs, lambda x: x['drain_s'], 1)} | "
              f"{cell(runs, lambda x: x['task_seconds'], 1)} | "
              f"{cell(runs, lambda x: x['idle_task_seconds'], 1)} | "
              f"{cell(runs, lambda x: x['peak_tasks'], 0)} | "
              f"{cell(runs, lambda x: work_s / x['task_seconds'], 2)} |")
    if a.timeline:  # the first run's running tasks over time, and its plot beside it
        with open(a.timeline, "w") as f:
            for name, points in timelines.items():
                f.write(f'"{name}" tasks\n')
                for t, n in points:
                    f.write(f"{t:.2f} {n}\n")
                f.write("\n\n")
        png = os.path.splitext(a.timeline)[0] + ".png"
        subprocess.run(["gnuplot"], check=True, text=True, input=(
            "set terminal pngcairo size 820,460 font 'sans,10'\n"
            f"set output '{png}'\nset xlabel 'seconds since the first task started'\n"
            "set ylabel 'tasks running'\nset grid\nset key right top\nset yrange [0:*]\n"
            f"set title 'Tasks running, {a.groups} FIFO groups x {a.per_group} messages, "
            f"{a.work_ms} ms each'\n"
            f"plot for [i=0:{len(timelines) - 1}] '{a.timeline}' index i using 1:2 with steps "
            "lw 2 title columnheader(1)\n"))
    if not all(x["drained"] and x["rows"] == total and x["distinct"] == total and
               x["out_of_order"] == 0 for x in results):
        print("autoscale-sim: a scenario did not drain exactly, in order", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
