#!/usr/bin/env python3
"""The suite waits on events, not on time (tests/support/wait.hpp).
A regular-expression check of each line, not a parser: a duration held in a named
constant gets past it (review catches those); string literals and digit separators are
taken out first, and a product (20 * 100ms) counts as over the limit.

Every sleep in tests/ outside the two helpers (wait.hpp's back-off, work.hpp's stand-in
for a handler's work) must say on its line, in a comment, why it is not a wait for an
event, and sleep at most 100 ms: a longer fixed wait is a test that load can break.
Usage: check_waits.py ROOT; prints each offence as FILE:LINE and exits 1 if any.
"""
import pathlib
import re
import sys

SLEEP = re.compile(r"\b(sleep_for|sleep_until|usleep|nanosleep|run_for|run_one_for)\s*\(|::sleep\s*\(")
STRING = re.compile(r'"(?:\\.|[^"\\])*"')
MAX_SLEEPS = 20  # sleep_for, sleep_until, usleep and the like in all of tests/
HELPERS = {"tests/support/wait.hpp", "tests/support/work.hpp"}
# A literal duration: 250ms, 2s, std::chrono::seconds(3), milliseconds(500), microseconds(300).
LITERAL = re.compile(
    r"(\d+)\s*(ms|s|us|min)\b|(milliseconds|seconds|microseconds|minutes)\s*[({]\s*(\d+)\s*[)}]")
SCALE_MS = {"ms": 1, "s": 1000, "us": 0.001, "min": 60000, "milliseconds": 1,
            "seconds": 1000, "microseconds": 0.001, "minutes": 60000}


def longest_ms(text):
    longest = 0.0
    for m in LITERAL.finditer(text):
        value, unit = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
        longest = max(longest, int(value) * SCALE_MS[unit])
    return longest


def main():
    root = pathlib.Path(sys.argv[1])
    offences = []
    count = 0
    for path in sorted((root / "tests").rglob("*")):
        if path.suffix not in (".cpp", ".hpp", ".h", ".cc"):
            continue
        rel = path.relative_to(root).as_posix()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            # Strings out first ("http://..." is no comment), digit separators out.
            code, _, comment = STRING.sub('""', line).replace("'", "").partition("//")
            if not SLEEP.search(code):
                continue
            count += 1
            if rel in HELPERS:
                continue
            if not comment.strip():
                offences.append(f"{rel}:{number}: a sleep without a comment saying why it is "
                                "not a wait on an event (wait.hpp), or work (work.hpp)")
            elif longest_ms(code) > 100 or re.search(r"\d\s*\*", code):
                offences.append(f"{rel}:{number}: a fixed wait over 100 ms: wait for an event "
                                "(wait.hpp), or use test::work_for for a handler's work")
    if count > MAX_SLEEPS:
        offences.append(f"tests/: {count} sleeps, more than {MAX_SLEEPS}: wait on events")
    for offence in offences:
        print(offence)
    print(f"check_waits: {count} sleeps in tests/, {len(offences)} offending")
    return 1 if offences else 0


if __name__ == "__main__":
    sys.exit(main())
