"""Real data libraries (HF datasets, webdataset, torchdata, litdata, mosaicml-streaming)
and a guide's recipes, as loader factories the audit runs unchanged (notebook 10)."""
