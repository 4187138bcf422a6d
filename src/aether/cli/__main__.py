"""`python -m aether.cli`: the same as the `aether` command."""

import sys

from aether.cli.main import main

sys.exit(main())
