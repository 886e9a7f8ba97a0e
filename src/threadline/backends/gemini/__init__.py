"""backends/gemini"""
