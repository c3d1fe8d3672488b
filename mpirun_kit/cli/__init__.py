"""Command-line layer: argparse -> library call -> exit code.  Nothing else lives here."""
