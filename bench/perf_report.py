#!/usr/bin/env python3
"""perf's samples of `sluice run` (bench/profile.sh) as stages and flame graphs.

  perf script | perf_report.py fold > PATH.folded
      one line per distinct stack, "thread;outermost;...;innermost COUNT", the thread
      named by its name (sluice-io, sluice-work-N, ...), frames without arguments
  perf_report.py report DIR EVENTS PATH...
      for each DIR/PATH.folded: DIR/flame-PATH.svg, and a Markdown table (stdout) of
      CPU microseconds per message by stage, each sample counted in the first stage
      (innermost frame first) whose pattern one of its frames matches

Debian packages perf but no flame-graph tool: the SVG is drawn here (one rectangle per
frame, its width its share of the samples; hover shows the frame and its share)."""
import gzip
import html
import os
import re
import sys
from collections import Counter, defaultdict

SAMPLE_HZ = 499  # bench/profile.sh: perf record -F 499

# Innermost frame first: a sample belongs to the first stage any of its frames matches,
# looking from the leaf outward, so that allocation and locks are counted where they
# happen, whatever stage called them.
STAGES = [
    ("allocation", r"^(malloc|free|calloc|realloc|cfree|_int_malloc|_int_free|je_|"
                   r"operator new|operator delete|__libc_malloc|__libc_free|tcache|arena_|"
                   r"malloc_consolidate|sdallocx|mallocx|rallocx|\[libjemalloc)"),
    ("locks and wake-ups", r"(futex|pthread_mutex|pthread_cond|__lll_lock|__lll_unlock|"
                           r"std::condition_variable|std::mutex|sem_wait|sem_post|eventfd|"
                           r"try_to_wake_up|schedule$|__schedule|finish_task_switch|"
                           r"epoll_wait|do_epoll|ep_poll)"),
    # The stages below name Sluice's own functions, never a library's: OpenSSL's digests
    # and nlohmann's serializer serve signing, MD5 checks, the hash and the writer alike,
    # and are counted in the stage that called them.
    ("signing (SigV4)", r"(sluice::aws::SigV4Signer|derive_signing_key)"),
    ("SQS requests and answers (JSON, MD5)", r"(sqs::codec|sluice::sqs::md5|md5_of_message_attributes)"),
    ("decode (body parse)", r"(pipeline::Transformer::transform|pipeline::::duplicate_key)"),
    ("normalize", r"(Projection|projection|typed_values|canonical_decimal|parse_iso8601|"
                  r"canonical_text|FieldSpec|FieldProgram|pipeline::at_pointer)"),
    ("hash", r"(pipeline::::hash_text|append_canonical|CanonicalWriter)"),
    ("writer and libpq", r"(PQ|pqsecure|pqPutMsg|pqGet|libpq|sinks::|BatchWriter|"
                         r"WriteQueue|write_batch|postgres)"),
    ("broker client (rabbitmq-c)", r"(amqp_|librabbitmq|amqp::)"),
    ("I/O: HTTP and sockets (no TLS)", r"(beast::|http::|tcp_stream|asio::detail::reactive_socket|"
                              r"__sys_sendto|__sys_recvfrom|tcp_sendmsg|tcp_recvmsg|"
                              r"sock_sendmsg|sock_recvmsg|__libc_send|__libc_recv|"
                              r"^send$|^recv$|aws::HttpClient|aws::ServiceClient)"),
    ("Asio's event loop", r"boost::asio::detail::(scheduler|epoll_reactor|reactive_|"
                          r"executor_op|completion_handler|awaitable_thread|awaitable_frame)"),
    ("the record stage (meta, routing, settling)", r"sluice::ingest::"),
    ("the container (settle, dispatch)", r"(sluice::runtime::|sluice::Container|"
                                         r"sluice::Message::|sluice::spi::)"),
    ("kernel, other", r"^(\[k\]|entry_SYSCALL|do_syscall|__x64_sys|syscall_exit|"
                      r"asm_|irq|__softirqentry|ret_from_fork)"),
]
COMPILED = [(name, re.compile(pattern)) for name, pattern in STAGES]


def short(symbol):
    """A frame's name without its arguments, offset and templates' insides."""
    symbol = re.sub(r"\+0x[0-9a-f]+$", "", symbol.strip())
    depth, out = 0, []
    for ch in symbol:  # drop (...) and <...> contents, keeping the name's shape
        if ch in "(<":
            if depth == 0:
                out.append("(" if ch == "(" else "<>")
            depth += 1
        elif ch in ")>":
            depth = max(0, depth - 1)
            if depth == 0 and ch == ")":
                out.append(")")
        elif depth == 0:
            out.append(ch)
    name = "".join(out).replace("()", "").replace(";", ":")
    return name[:120] or "[unknown]"


def thread_name(header):
    """"sluice-work-1  1234 12345.678901: 2004008 cpu-clock:" (perf script's first line of
    a sample; a pid/tid or a [cpu] may be there too): the thread, its number made N."""
    m = re.match(r"^\s*(.*?)\s+\d+(?:/\d+)?\s+(?:\[\d+\]\s+)?[\d.]+:", header)
    name = (m.group(1) if m else header.split(None, 1)[0] if header.strip() else "?").strip()
    return re.sub(r"-\d+$", "-N", name) or "?"


def fold(lines):
    stacks = Counter()
    thread, frames = None, []

    def flush():
        if thread is not None:
            stacks[";".join([thread] + list(reversed(frames)))] += 1

    for line in lines:
        if not line.strip():
            flush()
            thread, frames = None, []
        elif not line[0].isspace():
            thread = thread_name(line)
        else:
            parts = line.strip().split(None, 1)
            if len(parts) == 2:
                symbol = re.sub(r"\s+\([^)]*\)$", "", parts[1])
                if symbol == "[unknown]":
                    dso = re.search(r"\(([^)]*)\)$", parts[1])
                    symbol = "[" + (dso.group(1).rsplit("/", 1)[-1] if dso else "unknown") + "]"
                frames.append(short(symbol))
    flush()
    for stack, count in stacks.most_common():
        print(f"{stack} {count}")


def read_folded(path):
    """DIR/PATH.folded, or .folded.gz; the same stacks merged."""
    merged = Counter()
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if stack:
                frames = stack.split(";")
                if ":" in frames[0]:  # a whole perf header: folded before thread_name
                    frames[0] = thread_name(frames[0])
                merged[tuple(frames)] += int(count)
    return [(list(frames), count) for frames, count in merged.items()]


def stage_of(frames):
    for frame in reversed(frames[1:]):  # innermost first; frames[0] is the thread
        for name, pattern in COMPILED:
            if pattern.search(frame):
                return name
    return "other"


def flame_svg(stacks, title, path):
    width, row = 1200, 16
    root = {"children": {}, "count": 0}
    for frames, count in stacks:
        node = root
        node["count"] += count
        for frame in frames:
            node = node["children"].setdefault(frame, {"children": {}, "count": 0})
            node["count"] += count
    total = max(root["count"], 1)
    rects = []

    def depth_of(node):
        return 1 + max((depth_of(c) for c in node["children"].values()), default=0)

    depth = depth_of(root)
    height = (depth + 2) * row + 20

    def walk(node, name, x, level):
        w = node["count"] / total * width
        if w < 1.0:  # narrower than a pixel: left out (its share is in its parent)
            return
        y = height - (level + 1) * row - 4
        share = 100.0 * node["count"] / total
        hue = 10 + sum(map(ord, name)) % 40  # by name, the same every run
        label = name if len(name) * 6.5 < w else name[: max(0, int(w / 6.5) - 2)] + ".." if w > 20 else ""
        rects.append(
            f'<g><title>{html.escape(name)} ({node["count"]} samples, {share:.1f} %)</title>'
            f'<rect x="{x:.1f}" y="{y}" width="{max(w - 0.5, 0.1):.1f}" height="{row - 1}" '
            f'fill="hsl({hue},85%,60%)"/>'
            f'<text x="{x + 3:.1f}" y="{y + row - 4}">{html.escape(label)}</text></g>')
        for child_name, child in sorted(node["children"].items()):
            walk(child, child_name, x, level + 1)
            x += child["count"] / total * width

    x = 0.0
    for name, child in sorted(root["children"].items()):
        walk(child, name, x, 0)
        x += child["count"] / total * width
    with open(path, "w") as f:
        f.write(
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'font-family="monospace" font-size="11">\n'
            f'<rect width="100%" height="100%" fill="#fdfdf6"/>\n'
            f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="14">'
            f"{html.escape(title)}</text>\n" + "\n".join(rects) + "\n</svg>\n")


def report(directory, events, paths):
    per_stage = {}
    totals = {}
    for path in paths:
        folded = f"{directory}/{path}.folded"
        stacks = read_folded(folded if os.path.exists(folded) else folded + ".gz")
        counts = defaultdict(int)
        for frames, count in stacks:
            counts[stage_of(frames)] += count
        per_stage[path] = counts
        totals[path] = sum(counts.values())
        flame_svg(stacks, f"sluice run, {path} into PostgreSQL, {events} events: "
                  f"{totals[path]} cpu-clock samples at {SAMPLE_HZ} Hz",
                  f"{directory}/flame-{path}.svg")
    us = lambda samples: samples / SAMPLE_HZ / events * 1e6
    names = [name for name, _ in STAGES] + ["other"]
    print("| stage | " + " | ".join(f"{p}: µs/msg (share)" for p in paths) + " |")
    print("|---|" + "---|" * len(paths))
    for name in names:
        if not any(per_stage[p].get(name) for p in paths):
            continue
        cells = []
        for p in paths:
            n = per_stage[p].get(name, 0)
            cells.append(f"{us(n):.2f} ({100.0 * n / max(totals[p], 1):.0f} %)")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("| **all of sluice run** | " +
          " | ".join(f"**{us(totals[p]):.2f}** ({totals[p]} samples)" for p in paths) + " |")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "fold":
        fold(sys.stdin)
    elif len(sys.argv) >= 5 and sys.argv[1] == "report":
        report(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    else:
        sys.exit(__doc__)
