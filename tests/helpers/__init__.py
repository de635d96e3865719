"""Helpers for tests that need real worker processes."""
