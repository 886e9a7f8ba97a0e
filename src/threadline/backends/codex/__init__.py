"""backends/codex"""
