"""Leader election over a `coordination.k8s.io/v1` Lease, as a sans-IO state machine (client-go's algorithm).

The machine never reads a clock or the network: the adapter (`aether.controller.leader`) feeds it the time and the
results of the reads and writes it asked for, and acts on what it returns. Like client-go's `LeaderElector`:
a candidate takes the Lease once its record has not changed for the record's lease duration *by the candidate's own
clock* (it never compares its clock with the times written in the record, so clock skew between replicas does not
matter); the leader renews every retry period and steps down (stops writing) once it has not renewed within the
renew deadline, which is shorter than the lease duration, so it has stopped before anyone else may take over. Every
write carries the resourceVersion it was computed from: two candidates cannot both win one expired record.
"""

from __future__ import annotations

import enum

import attrs

__all__ = [
    "DEFAULT_TIMING",
    "Deposed",
    "Elected",
    "ElectionState",
    "ElectionTiming",
    "LeaderElection",
    "LeaseRecord",
    "Output",
    "ReadLease",
    "WriteLease",
]


def _check_timing(instance: ElectionTiming, attribute: attrs.Attribute[float], value: float) -> None:
    del attribute, value
    if not 0 < instance.retry_period < instance.renew_deadline < instance.lease_duration:
        raise ValueError(
            "leader election: need 0 < retry period < renew deadline < lease duration"
            f" (got {instance.retry_period!r} s, {instance.renew_deadline!r} s, {instance.lease_duration!r} s)"
        )


@attrs.frozen(kw_only=True)
class ElectionTiming:
    """client-go's three durations, in seconds (its defaults: 15, 10, 2)."""

    lease_duration: float = 15.0
    """How long a record must stay unchanged before a candidate may take the Lease."""
    renew_deadline: float = 10.0
    """How long the leader keeps leading without a successful renew (the margin to `lease_duration` absorbs a
    slow write and the time a candidate's read takes to reach it)."""
    retry_period: float = attrs.field(default=2.0, validator=_check_timing)
    """Seconds between attempts (a candidate's reads, the leader's renews)."""

    @property
    def lease_seconds(self) -> int:
        """`spec.leaseDurationSeconds` as written (the API takes whole seconds; rounded up, never shorter)."""
        return max(1, -int(-self.lease_duration // 1))


DEFAULT_TIMING = ElectionTiming()


@attrs.frozen(kw_only=True)
class LeaseRecord:
    """What the machine reads of a Lease: its `spec` fields that matter and its resourceVersion."""

    holder: str
    """`spec.holderIdentity`; empty when nobody holds it (released)."""
    lease_seconds: int
    """`spec.leaseDurationSeconds` (0 when absent: the reader's own duration applies)."""
    transitions: int
    """`spec.leaseTransitions`: how many times the holder changed."""
    resource_version: str
    """Any write changes it: the machine's test of "the record changed"."""


@attrs.frozen(kw_only=True)
class ReadLease:
    """Get the Lease; answer with `lease_read` (None when it does not exist) or `read_failed`."""


@attrs.frozen(kw_only=True)
class WriteLease:
    """Create (empty `resource_version`) or replace the Lease with this record; answer with `write_succeeded` (the
    record as stored) or `write_failed`."""

    holder: str
    lease_seconds: int
    transitions: int
    resource_version: str
    """The version the write is conditional on; empty: create."""
    acquired: bool
    """The holder changes to us with this write: set `acquireTime` (a renew keeps it)."""


@attrs.frozen(kw_only=True)
class Elected:
    """This replica leads from now on (until `Deposed`)."""

    at: float


@attrs.frozen(kw_only=True)
class Deposed:
    """This replica stopped leading: `reason` says why."""

    at: float
    reason: str


Output = ReadLease | WriteLease | Elected | Deposed


class ElectionState(enum.Enum):
    """Where the machine is."""

    FOLLOWING = "following"
    LEADING = "leading"


class _Pending(enum.Enum):
    NOTHING = "nothing"
    READ = "read"
    WRITE = "write"


class LeaderElection:
    """One replica's side of the election (see the module docstring).

    Inputs are its methods (`tick`, `lease_read`, `read_failed`, `write_succeeded`, `write_failed`), each with the
    current time; each returns what to do. At most one read or write is outstanding at a time: the adapter answers
    it before the machine asks for the next. `next_wakeup()` says when to call `tick` if nothing else happens.
    """

    def __init__(self, *, identity: str, timing: ElectionTiming = DEFAULT_TIMING) -> None:
        if not identity:
            raise ValueError("leader election: the identity (holderIdentity, the pod name) must not be empty")
        self.identity = identity
        self.timing = timing
        self.state = ElectionState.FOLLOWING
        self._pending = _Pending.NOTHING
        self._next_attempt = float("-inf")
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        """Our clock when the observed record last changed (client-go's `observedTime`)."""
        self._write_sent_at = 0.0
        self._renewed_at = float("-inf")
        """When the last successful write was sent: the leader leads until this plus the renew deadline."""

    def leading(self, now: float) -> bool:
        """Whether this replica may act as the leader at `now` (false past the renew deadline, ticked or not)."""
        return now < self.leading_until()

    def leading_until(self) -> float:
        """Until when (our clock) this replica leads, unless it renews meanwhile; -inf when it does not lead."""
        if self.state is not ElectionState.LEADING:
            return float("-inf")
        return self._renewed_at + self.timing.renew_deadline

    def next_wakeup(self) -> float:
        """When `tick` has something to do: the next attempt, or the leader's deadline, whichever comes first."""
        wakeup = self._next_attempt if self._pending is _Pending.NOTHING else float("inf")
        if self.state is ElectionState.LEADING:
            wakeup = min(wakeup, self._renewed_at + self.timing.renew_deadline)
        return wakeup

    def tick(self, now: float) -> list[Output]:
        """Time passed: step down past the deadline; read the Lease when an attempt is due."""
        outputs: list[Output] = self._check_deadline(now)
        if self._pending is _Pending.NOTHING and now >= self._next_attempt:
            self._pending = _Pending.READ
            outputs.append(ReadLease())
        return outputs

    def lease_read(self, now: float, record: LeaseRecord | None) -> list[Output]:
        """The Lease as read (None: it does not exist); returns the write to make, if any."""
        self._expect(_Pending.READ, "lease_read")
        outputs = self._check_deadline(now)
        if record is None:
            return [*outputs, self._write(now, transitions=0, version="", acquired=True)]
        if self._observed is None or record.resource_version != self._observed.resource_version:
            self._observed, self._observed_at = record, now
        if record.holder == self.identity:
            acquired = self.state is not ElectionState.LEADING
            return [
                *outputs,
                self._write(
                    now, transitions=record.transitions, version=record.resource_version, acquired=acquired
                ),
            ]
        duration = record.lease_seconds or self.timing.lease_duration
        if record.holder and now < self._observed_at + duration:
            self._next_attempt = now + self.timing.retry_period
            if self.state is ElectionState.LEADING:
                outputs += self._step_down(now, f"the lease is held by {record.holder!r}")
            return outputs
        return [
            *outputs,
            self._write(
                now, transitions=record.transitions + 1, version=record.resource_version, acquired=True
            ),
        ]

    def read_failed(self, now: float) -> list[Output]:
        """The read failed (the API is unreachable, or refused): try again after the retry period."""
        self._expect(_Pending.READ, "read_failed")
        self._next_attempt = now + self.timing.retry_period
        return self._check_deadline(now)

    def write_succeeded(self, now: float, record: LeaseRecord) -> list[Output]:
        """Our write was stored as `record`: we hold the Lease, and lead if the write was quick enough."""
        self._expect(_Pending.WRITE, "write_succeeded")
        self._observed, self._observed_at = record, now
        self._next_attempt = now + self.timing.retry_period
        if now >= self._write_sent_at + self.timing.renew_deadline:
            # The write took longer than the deadline: another replica may already count our lease as expired.
            return self._check_deadline(now)
        self._renewed_at = self._write_sent_at
        if self.state is ElectionState.LEADING:
            return []
        self.state = ElectionState.LEADING
        return [Elected(at=now)]

    def write_failed(self, now: float, *, conflict: bool) -> list[Output]:
        """Our write failed: a conflict (409, someone wrote first) re-reads at once, anything else after the retry
        period. A leader keeps leading until its deadline, renewing meanwhile."""
        self._expect(_Pending.WRITE, "write_failed")
        self._next_attempt = now if conflict else now + self.timing.retry_period
        return self._check_deadline(now)

    def _write(self, now: float, *, transitions: int, version: str, acquired: bool) -> WriteLease:
        self._pending = _Pending.WRITE
        self._write_sent_at = now
        return WriteLease(
            holder=self.identity,
            lease_seconds=self.timing.lease_seconds,
            transitions=transitions,
            resource_version=version,
            acquired=acquired,
        )

    def _check_deadline(self, now: float) -> list[Output]:
        if self.state is ElectionState.LEADING and not self.leading(now):
            return self._step_down(now, f"the lease was not renewed within {self.timing.renew_deadline} s")
        return []

    def _step_down(self, now: float, reason: str) -> list[Output]:
        self.state = ElectionState.FOLLOWING
        self._renewed_at = float("-inf")
        return [Deposed(at=now, reason=reason)]

    def _expect(self, pending: _Pending, method: str) -> None:
        if self._pending is not pending:
            found = self._pending
            self._pending = _Pending.NOTHING
            raise RuntimeError(
                f"leader election {self.identity!r}: {method} while waiting for {found.value} (a bug in the adapter)"
            )
        self._pending = _Pending.NOTHING
