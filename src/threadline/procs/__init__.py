"""procs"""
