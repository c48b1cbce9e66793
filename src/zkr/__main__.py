"""``python -m zkr`` runs the CLI."""

from zkr.cli import main

raise SystemExit(main())
