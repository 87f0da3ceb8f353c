"""Scripts for ``torchrun --nproc-per-node N -m talk_helpers.demos.<name>``."""
