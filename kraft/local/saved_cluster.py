"""What `kraft cluster up` keeps in DATA_DIR/cluster.json so that it can start the
same cluster again.

The voters' URLs live in the metadata log (KIP-853: the first leader writes them
as a VotersRecord), and every controller dials the URLs of the newest voter set
in its log. A restart on new ports, or with another scheme, would leave each
controller calling addresses nobody listens on: no leader is ever elected. So a
restart reuses the saved ports, the quorum's size and the security mode, and
refuses with one line naming the difference when it cannot (the quorum's size
changes with `kraft quorum add-controller`/`remove-controller`, not here).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

FILE = "cluster.json"
DEFAULT_CONTROLLERS = 3


@dataclass(frozen=True)
class SavedCluster:
    controllers: int
    ports: tuple[int, ...]  # controller i + 1 listens on ports[i]
    secure: bool

    def __post_init__(self) -> None:
        if len(self.ports) != self.controllers:
            raise ValueError(f"{self.controllers} controllers need {self.controllers} ports")


def load(data_dir: Path) -> SavedCluster | None:
    """DATA_DIR's saved cluster; None for a new DATA_DIR. ValueError names what is
    wrong with one that cannot be restarted."""
    path = data_dir / FILE
    if not path.exists():
        if any(data_dir.glob("controller-*/meta.properties")):
            raise ValueError(
                f"{data_dir} holds controllers started without {FILE} (by an older "
                "kraft cluster up), so their ports are unknown: give a new --data-dir"
            )
        return None
    try:
        raw = json.loads(path.read_text())
        ports = raw["ports"]
        saved = SavedCluster(int(raw["controllers"]), tuple(int(p) for p in ports), raw["secure"])
        if type(saved.secure) is not bool or not all(0 < p < 65536 for p in saved.ports):
            raise ValueError("bad field")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path} is not a saved cluster ({e}): fix or remove it") from None
    return saved


def save(data_dir: Path, saved: SavedCluster) -> None:
    """Written before any node starts (atomically: a crash leaves the old file)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = data_dir / (FILE + ".tmp")
    doc = asdict(saved) | {"ports": list(saved.ports)}
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, data_dir / FILE)


def port_in_use(host: str, port: int) -> bool:
    """Whether a listener could not bind `port` now (as the controller binds:
    SO_REUSEADDR, so the last run's TIME_WAIT connections do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def controller_ports(
    data_dir: Path, controllers: int | None, secure: bool, host: str
) -> tuple[int, tuple[int, ...] | None]:
    """The quorum's size and its controllers' ports for this start: DATA_DIR's own
    on a restart (None: new ports). ValueError: one line saying why not."""
    saved = load(data_dir)
    if saved is None:
        return (DEFAULT_CONTROLLERS if controllers is None else controllers), None
    if controllers is not None and controllers != saved.controllers:
        raise ValueError(
            f"{data_dir} holds a {saved.controllers}-controller cluster: start it with "
            f"--controllers {saved.controllers} (a quorum grows and shrinks with kraft "
            "quorum add-controller/remove-controller), or give a new --data-dir"
        )
    if secure != saved.secure:
        was = "with" if saved.secure else "without"
        raise ValueError(
            f"{data_dir} holds a cluster started {was} --secure, and its controllers' "
            f"URLs in the metadata log are {'https' if saved.secure else 'http'}://: "
            f"start it {was} --secure, or give a new --data-dir"
        )
    for i, port in enumerate(saved.ports):
        if port_in_use(host, port):
            raise ValueError(
                f"port {port} of controller {i + 1} ({data_dir / FILE}) is in use: is this "
                "cluster still running?"
            )
    return saved.controllers, saved.ports
