"""What-if replays (issue 20): a recorded cluster history replayed under other
policies with the controller's own decision code.

- `scenario`: the policies (`--set KEY=VALUE`, `--grid FILE.json`, `--racks`),
  validated before Spark starts;
- `facts`: what a log says that did not depend on the controller's choices
  (broker liveness, ISR facts, topic commands, admin elections, failovers);
- `engine`: those facts fed as commands to `kraft.controller`'s
  QuorumController under a scenario, writing the counterfactual log;
- `metrics`: the figures summary.json and the report compare;
- `job`: the Spark job, one task per scenario, and its outputs.

docs/what-if.md has the model and its limits.
"""
