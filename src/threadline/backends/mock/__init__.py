"""backends/mock"""
