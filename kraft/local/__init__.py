"""A local cluster of real processes on 127.0.0.1: `kraft cluster up` (cluster.py)
and `make demo` (demo.py). The shell's side only: it starts, signals and asks the
controller and broker-agent processes; nothing here decides cluster state."""
