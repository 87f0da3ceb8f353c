"""Datasets the notebooks import rather than define: notebook 03's data and its models of
library shuffles, loaders handed over for diagnosis, and those of later notebooks. A
dataset a section is *about* is defined in that notebook's ``%%importable`` cell instead
(:mod:`talk_helpers.notebook.cells`), where the learner reads and edits it.
"""
