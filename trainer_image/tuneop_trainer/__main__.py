"""`python -m tuneop_trainer run --spec FILE [--dir DIR]`."""

import sys

from .cli import main

sys.exit(main())
