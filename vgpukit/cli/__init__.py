"""Command-line interface (click). Command modules are loaded lazily from ``main.COMMANDS``."""
