"""The reference dataset of notebook 09: one file, torch and numpy only, that you can copy
into your own project (:mod:`talk_helpers.reference.sharded_iterable`)."""
