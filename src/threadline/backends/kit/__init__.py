"""backends/kit"""
