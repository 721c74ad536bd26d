"""The asyncio shell of the pure Raft core (kraft.raft): the I/O side of the boundary.

kraft.raft decides (no await, socket, file or clock); this package acts: the
driver task that feeds the core and carries out its Ready (driver.py), the HTTP
transport to the peers (transport.py), the quorum-state file (quorum_state.py)
and the file log with its two-phase flush (file_log_adapter.py).
"""
