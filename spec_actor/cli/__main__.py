"""``python -m spec_actor.cli``: the ``spec-actor`` command."""

import sys

from . import main

sys.exit(main())
