"""How a verdict is shown (marks, colours, HTML) and what stands where an audit's results
would be when it failed: below the checks and the model, which both show verdicts."""
