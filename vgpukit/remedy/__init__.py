"""Curing one device: quarantine, drain, reset, rebuild (docs/health.md, "Remediation")."""
