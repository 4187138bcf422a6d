"""The leader election's trio adapter: reads and writes the Lease through the API client as the machine
(`aether.controller.election`) asks, and reports who leads (and until when) to the task that writes status."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable

import attrs
import trio

from aether.controller.election import (
    DEFAULT_TIMING,
    Deposed,
    Elected,
    ElectionTiming,
    LeaderElection,
    LeaseRecord,
    Output,
    ReadLease,
    WriteLease,
)
from aether.kube.api import KubeClient
from aether.kube.errors import ApiStatusError, KubeError
from aether.kube.resources import LEASES, JsonObject

__all__ = [
    "DEFAULT_LEASE",
    "Leadership",
    "LeadershipStatistics",
    "LeaseName",
    "lease_object",
    "lease_record",
    "serve_leader_election",
]

LOG = logging.getLogger("aether.controller.leader")

CONFLICT = 409


@attrs.frozen(kw_only=True)
class LeaseName:
    """Where the Lease lives."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


DEFAULT_LEASE = LeaseName(namespace="aether-system", name="aether-controller")


@attrs.frozen(kw_only=True)
class Leadership:
    """What the election tells the status writer: whether this replica leads, and until when (trio's clock) it may
    write without hearing again (each renew sends a new one)."""

    leading: bool
    until: float


@attrs.frozen(kw_only=True)
class LeadershipStatistics:
    """Counters of one replica's election."""

    leading: bool
    elections: int
    """Times this replica became the leader."""
    depositions: int
    reads: int
    writes: int
    """Lease writes that succeeded (creates, acquisitions and renews)."""
    conflicts: int
    """Lease writes refused with 409 (someone wrote first)."""
    failures: int
    """Reads and writes that failed otherwise (unreachable API, refusals, timeouts)."""


def lease_record(obj: JsonObject) -> LeaseRecord:
    """Read the fields the election needs from a Lease object (missing fields read as empty)."""
    spec = obj.get("spec") or {}
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        lease_seconds=int(spec.get("leaseDurationSeconds") or 0),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=str((obj.get("metadata") or {}).get("resourceVersion") or ""),
    )


def lease_object(
    lease: LeaseName, write: WriteLease, *, now: datetime.datetime, previous: JsonObject | None
) -> JsonObject:
    """The Lease object to create or replace for `write` (`acquireTime` kept from `previous` on a renew)."""
    stamp = now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    acquired = (
        stamp if write.acquired or previous is None else (previous.get("spec") or {}).get("acquireTime")
    )
    metadata: JsonObject = {"name": lease.name, "namespace": lease.namespace}
    if write.resource_version:
        metadata["resourceVersion"] = write.resource_version
    return {
        "apiVersion": LEASES.api_version,
        "kind": LEASES.kind,
        "metadata": metadata,
        "spec": {
            "holderIdentity": write.holder,
            "leaseDurationSeconds": write.lease_seconds,
            "acquireTime": acquired or stamp,
            "renewTime": stamp,
            "leaseTransitions": write.transitions,
        },
    }


class _Election:
    def __init__(
        self,
        client: KubeClient,
        machine: LeaderElection,
        lease: LeaseName,
        *,
        wall_clock: Callable[[], datetime.datetime],
    ) -> None:
        self._client = client
        self._machine = machine
        self._lease = lease
        self._wall_clock = wall_clock
        self._previous: JsonObject | None = None
        self._counts = {
            "elections": 0,
            "depositions": 0,
            "reads": 0,
            "writes": 0,
            "conflicts": 0,
            "failures": 0,
        }

    def statistics(self) -> LeadershipStatistics:
        return LeadershipStatistics(leading=self._machine.leading(trio.current_time()), **self._counts)

    @property
    def _timeout(self) -> float:
        # Half the renew deadline: a hung request still leaves the leader time for one more renew.
        return self._machine.timing.renew_deadline / 2

    async def perform(self, output: ReadLease | WriteLease) -> list[Output]:
        """Do the read or write the machine asked for; return the machine's answer to its outcome."""
        machine = self._machine
        if isinstance(output, ReadLease):
            self._counts["reads"] += 1
            found: JsonObject | None = None
            with trio.move_on_after(self._timeout) as scope:
                try:
                    found = await self._client.get(
                        LEASES, name=self._lease.name, namespace=self._lease.namespace
                    )
                except ApiStatusError as error:
                    if error.code != 404:
                        return self._failed(machine.read_failed, error)
                except KubeError as error:
                    return self._failed(machine.read_failed, error)
            if scope.cancelled_caught:
                return self._failed(machine.read_failed, f"no answer within {self._timeout} s")
            self._previous = found
            return machine.lease_read(trio.current_time(), None if found is None else lease_record(found))
        obj = lease_object(self._lease, output, now=self._wall_clock(), previous=self._previous)
        stored: JsonObject | None = None
        with trio.move_on_after(self._timeout):
            try:
                if output.resource_version:
                    stored = await self._client.replace(LEASES, obj)
                else:
                    stored = await self._client.create(LEASES, obj, namespace=self._lease.namespace)
            except ApiStatusError as error:
                if error.code == CONFLICT:
                    # 409: someone wrote first (or created it meanwhile: AlreadyExists is a 409 too); re-read.
                    self._counts["conflicts"] += 1
                    return machine.write_failed(trio.current_time(), conflict=True)
                return self._failed(lambda now: machine.write_failed(now, conflict=False), error)
            except KubeError as error:
                return self._failed(lambda now: machine.write_failed(now, conflict=False), error)
        if stored is None:
            return self._failed(
                lambda now: machine.write_failed(now, conflict=False), f"no answer within {self._timeout} s"
            )
        self._counts["writes"] += 1
        self._previous = stored
        return machine.write_succeeded(trio.current_time(), lease_record(stored))

    def _failed(self, answer: Callable[[float], list[Output]], error: object) -> list[Output]:
        self._counts["failures"] += 1
        LOG.warning("lease %s: %s (retrying in %s s)", self._lease, error, self._machine.timing.retry_period)
        return answer(trio.current_time())

    def noted(self, output: Elected | Deposed) -> None:
        if isinstance(output, Elected):
            self._counts["elections"] += 1
            LOG.info("lease %s: %s leads", self._lease, self._machine.identity)
        else:
            self._counts["depositions"] += 1
            LOG.warning(
                "lease %s: %s stopped leading: %s", self._lease, self._machine.identity, output.reason
            )


async def serve_leader_election(
    client: KubeClient,
    send: trio.MemorySendChannel[Leadership],
    *,
    identity: str,
    lease: LeaseName = DEFAULT_LEASE,
    timing: ElectionTiming = DEFAULT_TIMING,
    wall_clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    task_status: trio.TaskStatus[Callable[[], LeadershipStatistics]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Take part in the election for `lease` as `identity` until cancelled; send each change of leadership (and
    each renew, with its new deadline) to `send`.

    `task_status.started` hands back a function returning the election's statistics. Cancelling it stops the
    renews: the Lease then expires and another replica takes over (it is not released, as client-go's default).

    Error handling: failed reads and writes are retried every retry period (a 409 is re-read at once); the leader
    steps down once it has not renewed within the renew deadline.
    """
    machine = LeaderElection(identity=identity, timing=timing)
    election = _Election(client, machine, lease, wall_clock=wall_clock)
    reported = float("-inf")
    async with send:
        task_status.started(election.statistics)
        while True:
            outputs = machine.tick(trio.current_time())
            while outputs:
                output = outputs.pop(0)
                if isinstance(output, ReadLease | WriteLease):
                    outputs += await election.perform(output)
                else:
                    election.noted(output)
            until = machine.leading_until()
            if until != reported:
                reported = until
                await send.send(Leadership(leading=until > trio.current_time(), until=until))
            await trio.sleep_until(machine.next_wakeup())
