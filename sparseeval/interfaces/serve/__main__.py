"""``python -m sparseeval.interfaces.serve start|stop|status`` (see :mod:`sparseeval.interfaces.serve.cli`)."""

import sys

from sparseeval.interfaces.serve.cli import main

sys.exit(main())
