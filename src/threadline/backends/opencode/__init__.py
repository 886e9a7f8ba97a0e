"""backends/opencode"""
