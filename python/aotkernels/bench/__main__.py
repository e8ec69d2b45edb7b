"""``python -m aotkernels.bench``: the same as ``aotkernels bench``."""

import sys

from .cli import main

sys.exit(main())
