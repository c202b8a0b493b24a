"""``python -m sparseeval.serve start|stop|status`` (see :mod:`sparseeval.serve.cli`)."""

import sys

from sparseeval.serve.cli import main

sys.exit(main())
