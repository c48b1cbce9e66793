"""``python -m zkr`` runs the CLI."""

from zkr.entry import main

raise SystemExit(main())
