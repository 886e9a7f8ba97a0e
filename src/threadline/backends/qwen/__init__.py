"""backends/qwen"""
