"""What a lesson runs that is not the lesson's own point: training loops and hang tools
that run inside ranks, the Megatron-LM/nanotron port of notebook 07, the loading
benchmarks of notebook 08, recordings of real DataLoader runs, the datasets of notebooks
06–10 (:mod:`.datasets`), and notebook 11's measurements: worker memory, a loader in a
private ``/dev/shm``, a trainer that stops and resumes. The code a section teaches lives
in its notebook."""
