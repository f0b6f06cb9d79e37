"""``python -m models.planner``: the command line (``models.planner.cli``)."""
from models.planner.cli import main

raise SystemExit(main())
