"""The collection's colours: the Okabe-Ito palette, distinguishable with every common
colour-vision deficiency, and the colours of a verdict (✔, ✘, ⚠)."""

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
           "#000000")

OK_COLOUR = "#009E73"    # bluish green: ✔
BAD_COLOUR = "#D55E00"   # vermillion: ✘
WARN_COLOUR = "#E69F00"  # orange: ⚠
INFO_COLOUR = "#000000"  # black: a line that judges nothing
