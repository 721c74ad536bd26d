"""BrokerHeartbeatManager: soft state of broker sessions, never logged.

Kept only on the active controller. Unfenced brokers sit in a SortedList ordered
by (last contact, broker id), so the stalest one and the next time a session can
expire are O(1) to find. A newly active controller treats every registered broker
as just seen (Kafka bug 18138), so a broker that died during a failover is still
fenced one session later rather than at once or never.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from sortedcontainers import SortedList


class BrokerControlState(Enum):
    FENCED = "FENCED"
    UNFENCED = "UNFENCED"
    CONTROLLED_SHUTDOWN = "CONTROLLED_SHUTDOWN"
    SHUTDOWN_NOW = "SHUTDOWN_NOW"

    @property
    def fenced(self) -> bool:
        return self in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW)

    @property
    def in_controlled_shutdown(self) -> bool:
        return self is BrokerControlState.CONTROLLED_SHUTDOWN

    @property
    def should_shut_down(self) -> bool:
        return self is BrokerControlState.SHUTDOWN_NOW


@dataclass(slots=True)
class BrokerHeartbeatState:
    broker_id: int
    last_contact_ms: int
    metadata_offset: int = -1
    # last offset of the write that put the broker into controlled shutdown (its
    # leadership moves), -1 if none; granted once every other active broker passed it
    controlled_shutdown_offset: int = -1
    fenced: bool = True

    @property
    def shutting_down(self) -> bool:
        return self.controlled_shutdown_offset >= 0


class BrokerHeartbeatManager:
    def __init__(self, session_timeout_ms: int) -> None:
        self.session_timeout_ms = session_timeout_ms
        self._brokers: dict[int, BrokerHeartbeatState] = {}
        # Invariant: holds exactly the unfenced brokers, keyed by current last contact.
        self._unfenced: SortedList = SortedList()

    def __contains__(self, broker_id: int) -> bool:
        return broker_id in self._brokers

    def state(self, broker_id: int) -> BrokerHeartbeatState | None:
        return self._brokers.get(broker_id)

    def _set_contact(self, s: BrokerHeartbeatState, now_ms: int) -> None:
        if now_ms == s.last_contact_ms:
            return  # a heartbeat's contact was already noted as it arrived
        if not s.fenced:
            self._unfenced.remove((s.last_contact_ms, s.broker_id))
            self._unfenced.add((now_ms, s.broker_id))
        s.last_contact_ms = now_ms

    def register(self, broker_id: int, fenced: bool, now_ms: int) -> None:
        """A (re-)registration: a new session that starts now."""
        self.remove(broker_id)
        s = BrokerHeartbeatState(broker_id, now_ms, fenced=fenced)
        self._brokers[broker_id] = s
        if not fenced:
            self._unfenced.add((now_ms, broker_id))

    def remove(self, broker_id: int) -> None:
        s = self._brokers.pop(broker_id, None)
        if s is not None and not s.fenced:
            self._unfenced.remove((s.last_contact_ms, broker_id))

    def note_contact(self, broker_id: int, now_ms: int) -> None:
        """Contact without a state change: a heartbeat counts even if its command
        later times out in the event queue (Kafka bug 15019)."""
        s = self._brokers.get(broker_id)
        if s is not None and now_ms > s.last_contact_ms:
            self._set_contact(s, now_ms)

    def touch(self, broker_id: int, fenced: bool, metadata_offset: int, now_ms: int) -> None:
        s = self._brokers.get(broker_id)
        if s is None:
            s = BrokerHeartbeatState(broker_id, now_ms, fenced=True)
            self._brokers[broker_id] = s
        if s.fenced != fenced:
            if fenced:
                self._unfenced.remove((s.last_contact_ms, broker_id))
            else:
                self._unfenced.add((s.last_contact_ms, broker_id))
            s.fenced = fenced
        self._set_contact(s, max(now_ms, s.last_contact_ms))
        s.metadata_offset = max(s.metadata_offset, metadata_offset)

    def fence(self, broker_id: int) -> None:
        s = self._brokers.get(broker_id)
        if s is not None and not s.fenced:
            self._unfenced.remove((s.last_contact_ms, broker_id))
            s.fenced = True

    def mark_controlled_shutdown(self, broker_id: int, offset: int) -> None:
        s = self._brokers.get(broker_id)
        if s is not None and s.controlled_shutdown_offset < 0:
            s.controlled_shutdown_offset = offset

    def move_controlled_shutdown_offset(self, broker_id: int, offset: int) -> None:
        """The write that began the shutdown ended at `offset` (only ever later)."""
        s = self._brokers.get(broker_id)
        if s is not None and s.shutting_down:
            s.controlled_shutdown_offset = max(s.controlled_shutdown_offset, offset)

    def clear_controlled_shutdown(self, broker_id: int) -> None:
        """The shutdown's records were aborted with their transaction."""
        s = self._brokers.get(broker_id)
        if s is not None:
            s.controlled_shutdown_offset = -1

    def has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        s = self._brokers.get(broker_id)
        return s is not None and now_ms < s.last_contact_ms + self.session_timeout_ms

    def next_check_time_ms(self) -> int | None:
        """When the stalest unfenced broker's session expires (None: nobody to watch)."""
        if not self._unfenced:
            return None
        return self._unfenced[0][0] + self.session_timeout_ms

    def find_one_stale_broker(self, now_ms: int) -> int | None:
        """The single unfenced broker with the oldest contact, if its session expired."""
        if not self._unfenced:
            return None
        last, broker_id = self._unfenced[0]
        if last + self.session_timeout_ms <= now_ms:
            return broker_id
        return None

    def lowest_active_offset(self) -> int:
        """The smallest metadata offset among unfenced brokers not shutting down."""
        offsets = [
            self._brokers[b].metadata_offset
            for _, b in self._unfenced
            if not self._brokers[b].shutting_down
        ]
        return min(offsets) if offsets else 2**63 - 1

    def next_state(
        self,
        broker_id: int,
        current: BrokerControlState,
        want_fence: bool,
        want_shutdown: bool,
        metadata_offset: int,
        registration_offset: int,
        leads_partitions: bool,
    ) -> BrokerControlState:
        """Kafka's BrokerHeartbeatManager.calculateNextBrokerState."""
        S = BrokerControlState
        if current is S.FENCED:
            if want_shutdown:
                return S.SHUTDOWN_NOW
            if not want_fence and metadata_offset >= registration_offset:
                return S.UNFENCED
            return S.FENCED
        if current is S.UNFENCED:
            if want_fence:
                return S.SHUTDOWN_NOW if want_shutdown else S.FENCED
            if want_shutdown:
                return S.CONTROLLED_SHUTDOWN if leads_partitions else S.SHUTDOWN_NOW
            return S.UNFENCED
        if current is S.CONTROLLED_SHUTDOWN:
            if leads_partitions:
                return S.CONTROLLED_SHUTDOWN
            s = self._brokers.get(broker_id)
            shutdown_offset = s.controlled_shutdown_offset if s is not None else -1
            if shutdown_offset <= self.lowest_active_offset():
                return S.SHUTDOWN_NOW
            return S.CONTROLLED_SHUTDOWN
        return S.SHUTDOWN_NOW
