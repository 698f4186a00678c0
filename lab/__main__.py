"""``python -m lab``: the local Slurm lab's command line (:func:`lab.cli.main`)."""

import sys

from lab.cli import main

sys.exit(main())
