"""ipywidgets explorers, one module per notebook topic; each redraws from a real run or
from talk_helpers.model.simulate."""
