"""API errors with Kafka's error names and the HTTP status of each: DESIGN 1.2's
table (tests/unit/suite_guards/test_documented_errors.py holds the two equal)."""

from __future__ import annotations

from typing import Any

HTTP_STATUS: dict[str, int] = {
    "INVALID_REQUEST": 400,
    "INVALID_REPLICATION_FACTOR": 400,
    "INVALID_PARTITIONS": 400,
    "INVALID_CONFIG": 400,
    "INVALID_TOPIC_EXCEPTION": 400,
    "INVALID_REPLICA_ASSIGNMENT": 400,
    # a CreateTopicPolicy-like limit (max.partitions.per.topic, max.topics)
    "POLICY_VIOLATION": 400,
    # 403: authenticated but not allowed; raised with http_status=401 when the
    # credential is missing or invalid
    "UNAUTHORIZED": 403,
    "UNKNOWN_TOPIC_OR_PARTITION": 404,
    "BROKER_ID_NOT_REGISTERED": 404,
    "TOPIC_ALREADY_EXISTS": 409,
    "DUPLICATE_BROKER_REGISTRATION": 409,
    "STALE_BROKER_EPOCH": 409,
    "INCONSISTENT_CLUSTER_ID": 409,
    "FENCED_LEADER_EPOCH": 409,
    "INVALID_UPDATE_VERSION": 409,
    "INELIGIBLE_REPLICA": 409,
    "ELIGIBLE_LEADERS_NOT_AVAILABLE": 409,
    "PREFERRED_LEADER_NOT_AVAILABLE": 409,
    # KIP-455: a cancel (replicas null) for a partition with no reassignment
    "NO_REASSIGNMENT_IN_PROGRESS": 409,
    # KIP-853 voter changes
    "DUPLICATE_VOTER": 409,
    "CONCURRENT_VOTER_CHANGE": 409,
    "VOTER_NOT_FOUND": 404,
    "REQUEST_TOO_LARGE": 413,
    # more new tokens to verify than authentication.max.verification.rate (retriable)
    "THROTTLING_QUOTA_EXCEEDED": 429,
    # a bug: an unexpected exception in a command (logged with its traceback)
    "UNKNOWN_SERVER_ERROR": 500,
    "NOT_CONTROLLER": 503,
    "REQUEST_TIMED_OUT": 504,
}


class ApiError(Exception):
    """An error answered to a client: Kafka's name, a message naming the problem."""

    def __init__(
        self, code: str, message: str, *, http_status: int | None = None, **extra: Any
    ) -> None:
        if code not in HTTP_STATUS:
            raise ValueError(f"unknown error code {code}")
        self.http_status = http_status
        self.code = code
        self.message = message
        self.extra = extra
        super().__init__(f"{code}: {message}")

    @property
    def status(self) -> int:
        return self.http_status or HTTP_STATUS[self.code]

    def to_body(self) -> dict[str, Any]:
        return {"error_code": self.code, "message": self.message, **self.extra}


def invalid(message: str) -> ApiError:
    return ApiError("INVALID_REQUEST", message)


def not_controller(leader_id: int | None, leader_url: str | None) -> ApiError:
    """503 NOT_CONTROLLER naming the active controller and its URL when known (in the
    message too: a console or a curl user reads the message)."""
    extra: dict[str, Any] = {}
    if leader_id is not None:
        extra["leader_id"] = leader_id
    if leader_url is not None:
        extra["leader_url"] = leader_url
    where = ""
    if leader_id is not None:
        where = f"; the active controller is {leader_id}"
        if leader_url is not None:
            where += f" at {leader_url}"
    return ApiError("NOT_CONTROLLER", f"this node is not the active controller{where}", **extra)
