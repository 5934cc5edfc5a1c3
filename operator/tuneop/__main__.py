"""`python -m tuneop`: run the operator."""

import sys

from tuneop.run.main import main

sys.exit(main())
