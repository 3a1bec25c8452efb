"""`python -m rota.testing.sim` (rota.testing.sim.cli)."""

import sys

from rota.testing.sim.cli import main

sys.exit(main())
