"""The autoscale simulation's supervisor (bench/autoscale-sim/supervisor.py) on its own:
it follows the signal, never runs fewer than its minimum (nor more than its maximum),
scales in only after the signal stayed lower for scale_in_after, stops a task with
SIGTERM and waits up to the deadline before SIGKILL, and bills every task's life."""

import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "autoscale-sim"))
from supervisor import Supervisor  # noqa: E402

# A task that exits 0 a little after SIGTERM (a graceful stop), and one that ignores it.
GRACEFUL = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(0.3), sys.exit(0)))\n"
            "print('up', flush=True)\n"
            "while True: time.sleep(1)\n")
STUBBORN = ("import signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('up', flush=True)\n"
            "while True: time.sleep(1)\n")


def starter(code, started):
    def start():
        task = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert task.stdout.readline() == "up\n"  # its SIGTERM handler is in place
        started.append(task)
        return task
    return start


class SupervisorTest(unittest.TestCase):
    def tearDown(self):
        for task in getattr(self, "started", []):
            if task.poll() is None:
                task.kill()
                task.wait()
            task.stdout.close()

    def test_follows_the_signal_within_minimum_and_maximum(self):
        self.started = []
        supervisor = Supervisor(starter(GRACEFUL, self.started), minimum=2, maximum=4,
                                deadline=5.0)
        counts = []
        for desired in [0, 1, 3, 3, 7, 4, 2, 0]:
            supervisor.step(desired)
            counts.append(supervisor.running())
        self.assertEqual(counts, [2, 2, 3, 3, 4, 4, 2, 2])
        self.assertEqual([d for _, _, d in supervisor.timeline], [0, 1, 3, 3, 7, 4, 2, 0])
        self.assertEqual(len(self.started), 4, "tasks started only when the count rose")
        supervisor.stop_all()
        self.assertEqual(supervisor.running(), 0)
        self.assertTrue(all(t.returncode == 0 for t in self.started), "all stopped gracefully")
        self.assertEqual(supervisor.killed, 0)

    def test_scales_in_only_after_the_signal_stayed_lower(self):
        self.started = []
        now = [0.0]
        supervisor = Supervisor(starter(GRACEFUL, self.started), minimum=1, maximum=10,
                                scale_in_after=3.0, clock=lambda: now[0])
        supervisor.step(3)
        self.assertEqual(supervisor.running(), 3, "out at once")
        for t, desired in [(1, 1), (2, 1), (3, 2), (3.9, 1)]:
            now[0] = t
            supervisor.step(desired)
            self.assertEqual(supervisor.running(), 3, f"held at t={t}")
        now[0] = 4.0
        supervisor.step(1)
        self.assertEqual(supervisor.running(), 1, "lower for 3 s: in")
        now[0] = 5.0
        supervisor.step(2)
        supervisor.step(1)  # lower again: its clock starts over
        self.assertEqual(supervisor.running(), 2)
        supervisor.stop_all()

    def test_stop_sends_sigterm_and_waits_for_the_deadline_before_sigkill(self):
        self.started = []
        graceful = Supervisor(starter(GRACEFUL, self.started), minimum=0, deadline=3.0)
        graceful.scale_to(1)
        began = time.monotonic()
        graceful.scale_to(0)
        took = time.monotonic() - began
        self.assertEqual(self.started[0].returncode, 0, "exited by itself on SIGTERM")
        self.assertGreaterEqual(took, 0.25, "waited for its graceful stop")
        self.assertLess(took, 2.5)
        self.assertEqual(graceful.killed, 0)

        stubborn = Supervisor(starter(STUBBORN, self.started), minimum=0, deadline=0.8)
        stubborn.scale_to(2)
        began = time.monotonic()
        stubborn.stop_all()
        took = time.monotonic() - began
        self.assertTrue(all(t.returncode == -9 for t in self.started[1:]), "killed at the end")
        self.assertGreaterEqual(took, 0.75, "not before the deadline")
        self.assertLess(took, 2.0, "both waited out the same deadline, not one after the other")
        self.assertEqual(stubborn.killed, 2)
        self.assertGreater(stubborn.task_seconds, 1.5, "each task billed to its exit")

    def test_a_task_that_dies_is_billed_and_replaced_at_the_next_step(self):
        self.started = []
        supervisor = Supervisor(starter(GRACEFUL, self.started), minimum=1)
        supervisor.step(1)
        self.started[0].kill()
        self.started[0].wait()
        self.assertEqual(supervisor.running(), 0)
        self.assertGreater(supervisor.task_seconds, 0)
        supervisor.step(1)
        self.assertEqual(supervisor.running(), 1, "replaced")
        supervisor.stop_all()

    def test_refuses_a_minimum_above_the_maximum(self):
        with self.assertRaises(ValueError):
            Supervisor(lambda: None, minimum=5, maximum=2)


if __name__ == "__main__":
    unittest.main()
