"""backends/claude"""
