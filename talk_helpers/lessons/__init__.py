"""What a lesson runs that is not the lesson's own point: training loops and hang tools
that run inside ranks, the Megatron-LM/nanotron port of notebook 07, the loading
benchmarks of notebook 08, recordings of real DataLoader runs, and the datasets of
notebooks 06–10 (:mod:`.datasets`). The code a section teaches lives in its notebook."""
