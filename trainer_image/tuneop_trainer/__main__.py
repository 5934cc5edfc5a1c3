"""`python -m tuneop_trainer run --spec FILE [--dir DIR]`."""

import logging
import os
import signal
import sys

from tuneop_contract import EXIT_PREEMPTED

from .cli import main

code = main()
if code == EXIT_PREEMPTED:
    # Everything a resume needs is durable by now (the checkpoint flushed, progress and
    # its ConfigMap written); Python's and TensorFlow's teardown would take another
    # second or more of the spot notice.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
# The outcome is final and reported: a SIGTERM during the interpreter's teardown (which
# restores default handlers) would otherwise turn it into a kill (-15).
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
sys.exit(code)
