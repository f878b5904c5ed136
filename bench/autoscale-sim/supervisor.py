"""A local stand-in for ECS running a service of `sluice run` tasks.

The supervisor starts and stops task processes the way an ECS service with a
target-tracking policy on TaskUtilization does (seed 004's pattern): it reads the
desired task count from `sluice autoscale --serve` (GET /autoscale: desired_tasks =
ceil(max recent in-flight average / capacity + spare), the count at which
TaskUtilization is 100 %), scales out at once, scales in only once the signal has
stayed lower for `scale_in_after` seconds (target tracking scales in gradually), never
runs fewer than `minimum` nor more than `maximum`, and stops a task as ECS does:
SIGTERM, then SIGKILL if it has not exited by the deadline (ECS's stopTimeout).

It keeps the bill: task-seconds (every task's life, start to exit) and the timeline of
(time, running, desired).
"""

import json
import signal
import subprocess
import time
import urllib.request


class Supervisor:
    def __init__(self, start_task, minimum=1, maximum=30, deadline=5.0,
                 scale_in_after=0.0, clock=time.monotonic):
        if minimum < 0 or maximum < max(minimum, 1):
            raise ValueError(f"expected 0 <= minimum <= maximum and maximum >= 1, got "
                             f"minimum {minimum}, maximum {maximum}")
        self.start_task = start_task  # () -> subprocess.Popen
        self.minimum, self.maximum = minimum, maximum
        self.deadline, self.scale_in_after = deadline, scale_in_after
        self.clock = clock
        self.tasks = []  # [(Popen, started)], oldest first
        self.task_seconds = 0.0
        self.killed = 0  # tasks that outlived the deadline after SIGTERM
        self.timeline = []  # [(time, running, desired)]
        self._lower_since = None

    def running(self):
        self._reap()
        return len(self.tasks)

    def scale_to(self, count):
        """Runs `count` tasks (clamped to minimum..maximum): starts or stops at once."""
        count = max(self.minimum, min(self.maximum, count))
        self._reap()
        while len(self.tasks) < count:
            self.tasks.append((self.start_task(), self.clock()))
        if len(self.tasks) > count:
            # The newest go first; all of them are signalled before any is waited for.
            leaving = self.tasks[count:]
            del self.tasks[count:]
            self._stop(leaving)

    def step(self, desired):
        """One evaluation of the policy against the signal's desired count."""
        now = self.clock()
        running = self.running()
        target = max(self.minimum, min(self.maximum, desired))
        if target > running:
            self._lower_since = None
            self.scale_to(target)
        elif target < running:
            if self._lower_since is None:
                self._lower_since = now
            if now - self._lower_since >= self.scale_in_after:
                self._lower_since = None
                self.scale_to(target)
        else:
            self._lower_since = None
        self.timeline.append((now, self.running(), desired))

    def follow(self, read_desired, done, interval=0.1):
        """Steps every `interval` seconds until done() holds. A failed read of the
        signal keeps the count as it is (as a missing metric data point does)."""
        while not done():
            try:
                desired = read_desired()
            except (OSError, ValueError, KeyError):
                desired = None
            if desired is None:
                self.timeline.append((self.clock(), self.running(), None))
            else:
                self.step(desired)
            time.sleep(interval)

    def stop_all(self):
        self._reap()
        leaving, self.tasks = self.tasks, []
        self._stop(leaving)

    def _stop(self, leaving):
        for task, _ in leaving:
            if task.poll() is None:
                task.send_signal(signal.SIGTERM)
        until = time.monotonic() + self.deadline
        for task, started in leaving:
            try:
                task.wait(timeout=max(0.0, until - time.monotonic()))
            except subprocess.TimeoutExpired:
                task.kill()
                task.wait()
                self.killed += 1
            self.task_seconds += self.clock() - started

    def _reap(self):
        """Tasks that exited on their own (a crash) leave the service, billed."""
        alive = []
        for task, started in self.tasks:
            if task.poll() is None:
                alive.append((task, started))
            else:
                self.task_seconds += self.clock() - started
        self.tasks = alive


def autoscale_reader(url, timeout=2.0):
    """desired_tasks from `sluice autoscale --serve`'s /autoscale."""
    def read():
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            document = json.load(answer)
        return int(document["desired_tasks"])
    return read
