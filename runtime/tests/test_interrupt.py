"""SIGINT: a KeyboardInterrupt in the running cell only (docs/protocol.md, "Interrupting a cell")."""

import signal
import threading
import time
import unittest

from tests.harness import Runtime, of_type, reply


class InterruptTest(unittest.TestCase):
    def setUp(self):
        self.rt = Runtime()
        self.addCleanup(self.rt.kill)
        self.rt.hello()

    def _interrupt_after(self, seconds):
        timer = threading.Timer(seconds, self.rt.proc.send_signal, (signal.SIGINT,))
        timer.start()
        self.addCleanup(timer.cancel)

    def test_interrupt_stops_the_cell_and_keeps_state(self):
        self.rt.execute("x = 41")
        self._interrupt_after(0.3)
        started = time.monotonic()
        frames = self.rt.execute("import time\nprint('before', flush=True)\ntime.sleep(30)\n")
        self.assertLess(time.monotonic() - started, 10)
        self.assertEqual(reply(frames)["status"], "error")
        (error,) = of_type(frames, "error")
        self.assertEqual(error["ename"], "KeyboardInterrupt")
        frames = self.rt.execute("x + 1")
        self.assertEqual(reply(frames)["status"], "ok")
        (result,) = of_type(frames, "execute_result")
        self.assertEqual(result["data"]["text/plain"], "42")

    def test_interrupt_between_cells_is_ignored(self):
        self.rt.execute("y = 1")
        self.rt.proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
        self.assertIsNone(self.rt.proc.poll(), "the runtime died of an idle SIGINT")
        frames = self.rt.execute("y")
        self.assertEqual(reply(frames)["status"], "ok")

    def test_interrupt_during_ordered_output_keeps_the_protocol(self):
        # Switching streams makes sync round trips: interrupts land in and
        # around them; the runtime must still answer with whole frames.
        self._interrupt_after(0.3)
        code = ("import sys\nwhile True:\n"
                "    print('o')\n    print('e', file=sys.stderr)\n")
        frames = self.rt.execute(code)
        self.assertEqual(reply(frames)["status"], "error")
        self.assertEqual(of_type(frames, "error")[0]["ename"], "KeyboardInterrupt")
        frames = self.rt.execute("1 + 1")
        self.assertEqual(reply(frames)["status"], "ok")

    def test_the_program_may_handle_it(self):
        self._interrupt_after(0.3)
        code = ("import time\ntry:\n    time.sleep(30)\nexcept KeyboardInterrupt:\n"
                "    caught = True\n")
        frames = self.rt.execute(code)
        self.assertEqual(reply(frames)["status"], "ok")
        frames = self.rt.execute("caught")
        self.assertEqual(of_type(frames, "execute_result")[0]["data"]["text/plain"], "True")


if __name__ == "__main__":
    unittest.main()
