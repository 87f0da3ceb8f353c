"""Datasets the notebooks iterate with DataLoader workers, the broken ones included.

They live in modules (one per topic) so that workers started with fork, forkserver or
spawn can unpickle them; a class defined in a notebook cell cannot be found by a
spawned worker.
"""
