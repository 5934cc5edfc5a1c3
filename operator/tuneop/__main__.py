"""`python -m tuneop`: run the operator."""

import sys

from tuneop.main import main

sys.exit(main())
