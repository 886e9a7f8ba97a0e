"""backends/acp"""
